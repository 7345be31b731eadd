"""An Idempotency-Key's record when DynamoDB throttles its writes, as real AWS does and moto never
does (QA22): the request is a 503 with Retry-After when nothing was done, and answers the work it
did when only the record of its reply could not be written (never a 500: the client's retry, once
the key's in-progress mark lapsed, made a second job)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from api_harness import ApiClient, LambdaContext, http_spec, job_spec, rest_event
from api_harness import api as api  # the fixture
from botocore.exceptions import ClientError
from openapi_contract import undeclared

from punctual.api import wiring

KEY = {"Idempotency-Key": "create-report-7"}


def _throttle_key_records(
    monkeypatch: pytest.MonkeyPatch, operation: str, code: str = "ProvisionedThroughputExceededException"
) -> None:
    """``operation`` of the DynamoDB client answers ``code`` (ProvisionedThroughputExceeded) for the
    Idempotency-Key records (partition ``idem#<tenant>``); every other item is written."""
    client = wiring.services().dynamodb
    real: Callable[..., Any] = getattr(client, operation)

    def throttled(**request: Any) -> Any:
        key = request.get("Key") or request.get("Item") or {}
        if key.get("pk", {}).get("S", "").startswith("idem#"):
            raise ClientError(
                {"Error": {"Code": code, "Message": "slow down"}},
                operation,
            )
        return real(**request)

    monkeypatch.setattr(client, operation, throttled)


def _post(api: ApiClient, body: dict[str, Any]) -> tuple[int, dict[str, list[str]], dict[str, Any]]:
    """POST /v1/jobs with the key, through the handler (ApiClient.call refuses any 5xx)."""
    out = api.handler.handler(rest_event("POST", "/v1/jobs", json.dumps(body), KEY), LambdaContext())
    headers = out.get("multiValueHeaders") or {}
    assert not undeclared("POST", "/v1/jobs", out["statusCode"], {k: v[-1] for k, v in headers.items()})
    return out["statusCode"], headers, json.loads(out["body"])


def _job_ids(api: ApiClient) -> list[str]:
    return [job["id"] for job in api.call("GET", "/v1/jobs").body["items"]]


@pytest.mark.parametrize(
    "code",
    [
        "ProvisionedThroughputExceededException",
        # QA22 (multi-Region): another Region's API writing the same key's record at that instant
        # (a client retrying there after a time-out). Powertools writes it with its own client,
        # which the store's conflict retries do not cover: it was a 500
        "ReplicatedWriteConflictException",
    ],
)
def test_a_throttled_key_record_is_a_503_with_retry_after_and_stores_nothing(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    api.call("GET", "/v1/jobs")  # the services are built inside the mock
    _throttle_key_records(monkeypatch, "put_item", code)

    status, headers, body = _post(api, job_spec())

    assert status == 503 and headers["Retry-After"] == ["1"]
    assert body["title"] == "Service busy"
    monkeypatch.undo()
    assert _job_ids(api) == []
    retried = api.call("POST", "/v1/jobs", job_spec(), KEY)
    assert retried.status == 201 and _job_ids(api) == [retried.body["id"]]


def test_a_job_made_whose_reply_could_not_be_recorded_is_answered(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.call("GET", "/v1/jobs")
    _throttle_key_records(monkeypatch, "update_item")  # the record's move to COMPLETED

    status, headers, body = _post(api, job_spec())

    assert status == 201, body
    monkeypatch.undo()
    assert _job_ids(api) == [body["id"]]
    assert headers["ETag"] == [f'"{body["version"]}"']


def _die_after_registering(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next create stores its job, then its Lambda dies before the key's reply is recorded
    (the in-progress mark is gone, as when it lapses at the invocation's end)."""
    jobs = wiring.services().jobs
    real = jobs.register

    def register(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        monkeypatch.undo()
        raise RuntimeError("Task timed out after 29.00 seconds")

    monkeypatch.setattr(jobs, "register", register)


def test_a_retry_after_the_first_attempt_died_answers_the_job_it_made(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.call("GET", "/v1/jobs")
    _die_after_registering(api, monkeypatch)
    spec = http_spec()

    status, _, _ = _post(api, spec)
    assert status == 500
    made = _job_ids(api)
    assert len(made) == 1

    status, headers, body = _post(api, spec)  # the client's retry, same key and body
    assert status == 201, body
    assert _job_ids(api) == made == [body["id"]]
    assert isinstance(body["signing_secret"], str)  # the first one was never shown: a fresh one
    assert headers["ETag"] == [f'"{body["version"]}"']
    again = api.call("POST", "/v1/jobs", spec, KEY)  # now recorded: the same reply
    assert again.status == 201 and again.body["id"] == body["id"]


def test_a_retry_after_the_first_attempt_died_with_another_body_is_the_key_reused(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.call("GET", "/v1/jobs")
    _die_after_registering(api, monkeypatch)
    assert _post(api, job_spec())[0] == 500
    made = _job_ids(api)

    status, _, body = _post(api, job_spec(name="another report"))

    assert status == 422 and body["title"] == "Idempotency-Key reused", body
    assert _job_ids(api) == made


def test_a_trigger_retried_after_the_first_attempt_died_names_the_slot_it_queued(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = api.create()
    jobs = wiring.services().jobs
    real = jobs.trigger
    made: list[str] = []

    def trigger(*args: Any, **kwargs: Any) -> str:
        made.append(real(*args, **kwargs))  # queued, then the Lambda dies before the reply is recorded
        monkeypatch.undo()
        raise RuntimeError("Task timed out after 29.00 seconds")

    monkeypatch.setattr(jobs, "trigger", trigger)
    path = f"/v1/jobs/{job['id']}/trigger"
    first = api.handler.handler(
        rest_event("POST", path, None, {"Idempotency-Key": "run-now-7"}), LambdaContext()
    )
    assert first["statusCode"] == 500 and len(made) == 1

    retry = api.call("POST", path, headers={"Idempotency-Key": "run-now-7"})
    other_job = api.call(
        "POST", f"/v1/jobs/{api.create()['id']}/trigger", headers={"Idempotency-Key": "run-now-7"}
    )

    assert retry.status == 202 and retry.body["slot"] == made[0]
    assert other_job.body["slot"] != made[0]
    assert {m["slot"] for m in api.queued() if m["job_id"] == job["id"]} == {made[0]}
