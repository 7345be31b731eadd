"""A change stored, a step after it failing: 504 (the change may be made), never 503.

Review of QA29: a delay() job's replace or secret rotation reads the run in flight after its write
(``settle``); a throttle or DynamoDB's InternalServerError there answered 503, which tells a client
nothing was done: it sent the change again (a secret rotated twice drops the receiver's).
"""

from __future__ import annotations

import json
from typing import Any

import botocore.client
import pytest
from api_harness import ALICE_ID, ApiClient, LambdaContext, http_spec, rest_event
from api_harness import api as api  # the fixture
from botocore.exceptions import ClientError

_SEND = botocore.client.BaseClient._make_api_call


def _reads_a_record(operation: str, params: dict[str, Any]) -> bool:
    return operation == "GetItem" and params["Key"]["sk"]["S"].startswith("exec#")


@pytest.mark.parametrize("code", ["ThrottlingException", "InternalServerError"])
@pytest.mark.parametrize("route", ["rotate", "replace"])
def test_a_delay_jobs_change_with_a_run_in_flight_answers_504_not_503_after_it_was_made(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch, route: str, code: str
) -> None:
    from datetime import UTC, datetime, timedelta

    from punctual.models import Execution, ExecutionStatus
    from punctual.timing.timers import slot_key

    job = api.create(http_spec(schedule="delay(5 minutes)"))["id"]
    slot = slot_key(datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=30))
    api.store.save_execution(
        Execution(
            job_id=job,
            tenant=ALICE_ID,
            slot=slot,
            scheduled_at=datetime.now(UTC) - timedelta(seconds=30),
            status=ExecutionStatus.RUNNING,
            started_at=datetime.now(UTC),
            job_version=1,
        ),
        None,
        ttl_epoch_s=2_000_000_000,
    )
    before = api.store.get_job(ALICE_ID, job)
    seen: list[str] = []

    def send(client: Any, operation: str, params: dict[str, Any]) -> Any:
        if client.meta.service_model.service_name == "dynamodb" and _reads_a_record(operation, params):
            seen.append(params["Key"]["sk"]["S"])
            error = {"Code": code, "Message": "slow down"}
            raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)
        return _SEND(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", send)
    if route == "rotate":
        event = rest_event("POST", f"/v1/jobs/{job}/rotate-secret", None)
    else:
        event = rest_event(
            "PUT", f"/v1/jobs/{job}", json.dumps(http_spec(schedule="delay(5 minutes)", name="x"))
        )
    out = api.handler.handler(event, LambdaContext())
    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", _SEND)
    after = api.store.get_job(ALICE_ID, job)
    assert after.delay_after == slot, after.delay_after
    # review of QA29: a 503 says nothing was done; here the change was made: 504 (may be done)
    assert not (out["statusCode"] == 503 and after.version == before.version + 1), (
        out["statusCode"],
        before.version,
        after.version,
        seen,
    )
    assert out["statusCode"] == 504 and after.version == before.version + 1
