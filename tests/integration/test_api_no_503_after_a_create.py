"""A 503 says nothing was done (docs/api.md), and a client sends it again, whatever its method
(docs/cli.md). QA29: ``POST /v1/jobs`` of a job that excludes a calendar stored the job, then read
its calendars for the reply's ``next_fire_at``; that read throttled (the tenant's partition, which
the create just wrote, is where its calendars live) answered 503, and the client's retry made a
second job: every slot run twice. The reply's reads are made before the job's write now."""

from __future__ import annotations

import json
from typing import Any

import botocore.client
import pytest
from api_harness import ALICE_ID, ApiClient, LambdaContext, http_spec, rest_event
from api_harness import api as api  # the fixture
from botocore.exceptions import ClientError

_SEND = botocore.client.BaseClient._make_api_call


def _reads_a_calendar(operation: str, params: dict[str, Any]) -> bool:
    if operation == "BatchGetItem":
        keys = [key for table in params["RequestItems"].values() for key in table["Keys"]]
    elif operation == "GetItem":
        keys = [params["Key"]]
    else:
        return False
    return any(key["sk"]["S"].startswith("cal#") for key in keys)


def test_a_throttled_read_for_the_reply_never_leaves_a_job_behind_a_503(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert api.call("PUT", "/v1/calendars/holidays", {"dates": ["2030-12-25"]}).status == 201

    def send(client: Any, operation: str, params: dict[str, Any]) -> Any:
        if client.meta.service_model.service_name == "dynamodb" and _reads_a_calendar(operation, params):
            error = {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}
            raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)
        return _SEND(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", send)
    spec = http_spec(schedule="cron(0 9 * * ? *)", exclude_calendars=["holidays"])
    out = api.handler.handler(rest_event("POST", "/v1/jobs", json.dumps(spec)), LambdaContext())
    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", _SEND)

    stored = api.store.list_jobs(ALICE_ID, 10, None).items
    if out["statusCode"] == 503:  # nothing was done: the retry the client makes creates the one job
        assert stored == [], stored
    else:
        assert out["statusCode"] == 201, out
        assert [job.id for job in stored] == [json.loads(out["body"])["id"]]


def test_nor_a_change_behind_a_503(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for a replace (retried, it is made twice) and a secret's rotation (retried, the
    secret the first made, never shown, becomes the previous one and the receiver's is dropped)."""
    assert api.call("PUT", "/v1/calendars/holidays", {"dates": ["2030-12-25"]}).status == 201
    job = api.create(http_spec(schedule="cron(0 9 * * ? *)", exclude_calendars=["holidays"]))["id"]
    throttled = {"on": False}

    def send(client: Any, operation: str, params: dict[str, Any]) -> Any:
        if throttled["on"] and _reads_a_calendar(operation, params):
            error = {"Code": "ThrottlingException", "Message": "slow down"}
            raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)
        return _SEND(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", send)
    for method, path, body in (
        ("PUT", f"/v1/jobs/{job}", http_spec(name="renamed", exclude_calendars=["holidays"])),
        ("POST", f"/v1/jobs/{job}/rotate-secret", None),
    ):
        before = api.store.get_job(ALICE_ID, job)
        assert before is not None
        throttled["on"] = True
        event = rest_event(method, path, json.dumps(body) if body is not None else None)
        out = api.handler.handler(event, LambdaContext())
        throttled["on"] = False
        after = api.store.get_job(ALICE_ID, job)
        assert after is not None
        if out["statusCode"] == 503:
            assert after.version == before.version, (method, path)
        else:
            assert out["statusCode"] == 200 and after.version == before.version + 1, out
