"""A job's count in its tenant's peak profile is taken back when its write failed, but only when
that write surely did not land. One that got no answer (a read timeout) or that DynamoDB failed
itself (``InternalServerError``) may have been applied: its count is kept (too high is what
``recount_peaks`` repairs, docs/tenants.md: "too high, never too low"). QA29: it was taken back
whatever the failure, so each create or batch job whose answer was lost left a stored job out of
the profile, and the tenant could register past maxSlotsPerSecondPerTenant."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import botocore.client
import pytest
from api_harness import ALICE_ID, ApiClient, LambdaContext, http_spec, rest_event
from api_harness import api as api  # the fixture
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from punctual.api import wiring

_SEND = botocore.client.BaseClient._make_api_call
AT_NINE = {"schedule": "cron(0 9 * * ? *)", "timezone": "UTC"}  # every such job: one slot at 09:00:00


def _applied_then_timed_out(operation: str) -> Exception:
    return ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")


def _applied_then_failed(operation: str) -> Exception:
    error = {"Code": "InternalServerError", "Message": "Internal server error"}
    return ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 500}}, operation)


@pytest.fixture
def lose_next_transaction(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[Callable[[str], Exception], bool], None]]:
    """``lose(error, applied)``: the next TransactWriteItems is applied (or not) and answers ``error``."""
    monkeypatch.setenv("PUNCTUAL_MAX_SLOTS_PER_SECOND_PER_TENANT", "3")
    wiring.use_services(None)
    armed: list[tuple[Callable[[str], Exception], bool]] = []

    def send(client: Any, operation: str, params: dict[str, Any]) -> Any:
        if (
            client.meta.service_model.service_name == "dynamodb"
            and operation == "TransactWriteItems"
            and armed
        ):
            error, applied = armed.pop()
            if applied:
                _SEND(client, operation, params)
            raise error(operation)
        return _SEND(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", send)
    yield lambda error, applied: armed.append((error, applied))


def _create(api: ApiClient, path: str = "/v1/jobs", body: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = api.handler.handler(
        rest_event("POST", path, json.dumps(body or http_spec(**AT_NINE))), LambdaContext()
    )
    return out


def _stored_at_nine(api: ApiClient) -> int:
    return sum(
        1 for job in api.store.list_jobs(ALICE_ID, 100, None).items if job.schedule == AT_NINE["schedule"]
    )


@pytest.mark.parametrize("error", [_applied_then_timed_out, _applied_then_failed])
def test_a_create_whose_answer_was_lost_stays_counted(
    api: ApiClient, lose_next_transaction: Callable[[Callable[[str], Exception], bool], None], error: Any
) -> None:
    api.create(http_spec(**AT_NINE))
    lose_next_transaction(error, True)
    assert _create(api)["statusCode"] == 504
    lose_next_transaction(error, True)
    batch = _create(api, "/v1/job-batches", {"jobs": [{"id": "b-1", "job": http_spec(**AT_NINE)}]})
    assert [r["code"] for r in json.loads(batch["body"])["results"]] == [504]
    assert _stored_at_nine(api) == 3  # both were stored: the quota (3 a second) is reached

    over = api.call("POST", "/v1/jobs", http_spec(**AT_NINE))
    assert over.status == 409 and over.problem["quota"] == "maxSlotsPerSecondPerTenant", over
    assert _stored_at_nine(api) == 3


def test_a_create_that_surely_failed_is_taken_back(
    api: ApiClient, lose_next_transaction: Callable[[Callable[[str], Exception], bool], None]
) -> None:
    lose_next_transaction(lambda op: EndpointConnectionError(endpoint_url="https://dynamodb"), False)
    assert _create(api)["statusCode"] == 503  # never reached DynamoDB: nothing stored, nothing counted
    for _ in range(3):
        assert api.call("POST", "/v1/jobs", http_spec(**AT_NINE)).status == 201
    assert api.call("POST", "/v1/jobs", http_spec(**AT_NINE)).status == 409


def test_a_replace_whose_answer_was_lost_stays_counted(
    api: ApiClient, lose_next_transaction: Callable[[Callable[[str], Exception], bool], None]
) -> None:
    for _ in range(2):
        api.create(http_spec(**AT_NINE))
    hourly = api.create(http_spec(schedule="rate(1 hour)"))["id"]
    lose_next_transaction(_applied_then_timed_out, True)
    out = api.handler.handler(
        rest_event("PUT", f"/v1/jobs/{hourly}", json.dumps(http_spec(**AT_NINE))), LambdaContext()
    )
    assert out["statusCode"] == 504 and _stored_at_nine(api) == 3  # the replace was stored

    over = api.call("POST", "/v1/jobs", http_spec(**AT_NINE))
    assert over.status == 409 and over.problem["quota"] == "maxSlotsPerSecondPerTenant", over


def test_a_backfill_whose_answer_was_lost_stays_counted_among_the_running(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for ``maxBackfillsPerTenant``: a backfill whose store answered a timeout may be
    stored RUNNING; it left the tenant's running set, and a second one ran beside it past the quota."""
    from datetime import UTC, datetime, timedelta

    monkeypatch.setenv("PUNCTUAL_MAX_BACKFILLS_PER_TENANT", "1")
    wiring.use_services(None)
    job = api.create(http_spec(schedule="cron(0 * * * ? *)", timezone="UTC"))["id"]
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=10)
    armed = [True]

    def send(client: Any, operation: str, params: dict[str, Any]) -> Any:
        item = params.get("Item") or {}
        if operation == "PutItem" and item.get("sk", {}).get("S", "").startswith("backfill#") and armed:
            armed.clear()
            _SEND(client, operation, params)  # stored; its answer lost
            raise _applied_then_timed_out(operation)
        return _SEND(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", send)

    def backfill(hours: int) -> dict[str, Any]:
        body = {"start": start.isoformat(), "end": (start + timedelta(hours=hours)).isoformat()}
        out: dict[str, Any] = api.handler.handler(
            rest_event("POST", f"/v1/jobs/{job}/backfill", json.dumps(body)), LambdaContext()
        )
        return out

    assert backfill(3)["statusCode"] == 504
    second = backfill(4)
    assert second["statusCode"] == 409, second
    assert json.loads(second["body"])["quota"] == "maxBackfillsPerTenant"


def test_a_replace_whose_lost_answer_was_not_applied_keeps_the_old_job_counted(
    api: ApiClient, lose_next_transaction: Any
) -> None:
    # quota 3 a second; three jobs at 09:00:00 (the quota reached)
    for _ in range(2):
        api.create(http_spec(**AT_NINE))
    third = api.create(http_spec(**AT_NINE))["id"]
    assert api.call("POST", "/v1/jobs", http_spec(**AT_NINE)).status == 409
    # the third replaced to hourly: its write got no answer, and it was NOT applied (504 says "may")
    lose_next_transaction(_applied_then_timed_out, False)
    out = api.handler.handler(
        rest_event("PUT", f"/v1/jobs/{third}", json.dumps(http_spec(schedule="rate(1 hour)"))),
        LambdaContext(),
    )
    assert out["statusCode"] == 504
    assert _stored_at_nine(api) == 3  # the replace did not land: still three at 09:00
    # review of QA29: the profile took the 09:00 job out anyway, and a fourth 09:00 job passed
    over = api.call("POST", "/v1/jobs", http_spec(**AT_NINE))
    assert over.status == 409, (over.status, _stored_at_nine(api))
