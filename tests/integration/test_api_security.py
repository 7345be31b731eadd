"""Issue 16 through the API: own resources refused (the forged-message attack), quotas, rate limits, keys."""

from __future__ import annotations

import boto3
import pytest
from api_harness import ALICE, BOB, REGION, ApiClient, job_spec
from api_harness import api as api  # the fixture

from punctual.api import wiring
from punctual.runtime.settings import Settings
from punctual.security.ownership import forget


def _reconfigure(monkeypatch: pytest.MonkeyPatch, **variables: str) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    forget()
    wiring.use_services(None)  # rebuilt from the variables on the next request


def _queue_arn(api: ApiClient) -> str:
    attributes = api.sqs.get_queue_attributes(QueueUrl=api.queue_url, AttributeNames=["QueueArn"])
    arn: str = attributes["Attributes"]["QueueArn"]
    return arn


def test_a_tenant_cannot_register_a_work_queue_as_its_target(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given Bob's paused job, and the deployment's own queue in its own-resource list
    work_queue = _queue_arn(api)
    _reconfigure(monkeypatch, PUNCTUAL_OWN_ARNS=work_queue)
    bobs = api.create(user=BOB)["id"]
    assert api.call("POST", f"/v1/jobs/{bobs}/pause", user=BOB).status == 200

    # When Alice registers an SQS target that is the work queue, with a forged dispatch message
    forged = {"tenant": BOB, "job_id": bobs, "slot": "2026-11-30T09:32:00Z", "attempt": 1, "job_version": 2}
    reply = api.call(
        "POST",
        "/v1/jobs",
        job_spec(schedule="rate(1 minute)", target={"type": "sqs", "queue_arn": work_queue}, payload=forged),
        user=ALICE,
    )

    # Then it is refused at registration, saying why, and nothing is stored or queued
    assert reply.status == 422
    problem = reply.problem
    assert "own resources" in problem["detail"] and work_queue in problem["detail"]
    assert reply.fields() == ["target"]
    assert api.call("GET", "/v1/jobs", user=ALICE).body["items"] == []
    assert api.queued() == []


def test_the_trigger_quota_answers_409_naming_it(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    _reconfigure(monkeypatch, PUNCTUAL_MAX_TRIGGERS_PER_MINUTE_PER_TENANT="100")
    api.create(job_spec(schedule="rate(1 second)"))

    reply = api.call("POST", "/v1/jobs", job_spec(schedule="rate(1 second)"))

    assert reply.status == 409
    problem = reply.problem
    assert problem["quota"] == "maxTriggersPerMinutePerTenant"
    assert "maxTriggersPerMinutePerTenant is 100 scheduled triggers per minute" in problem["detail"]
    assert api.create(job_spec(schedule="rate(1 second)"), user=BOB)["id"]  # Bob has his own quota


def test_the_peak_quota_answers_409_naming_it(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31: hourly jobs at one instant pass the average quota and hit the peak one."""
    _reconfigure(monkeypatch, PUNCTUAL_MAX_SLOTS_PER_MINUTE_PER_TENANT="2")
    for _ in range(2):
        api.create(job_spec(schedule="cron(0 * * * ? *)"))

    reply = api.call("POST", "/v1/jobs", job_spec(schedule="cron(0 * * * ? *)"))

    assert reply.status == 409
    assert reply.problem["type"].endswith("peak-quota-reached")
    assert reply.problem["quota"] == "maxSlotsPerMinutePerTenant"
    assert "2 slots due in one minute" in reply.problem["detail"]
    assert api.create(job_spec(schedule="cron(30 * * * ? *)"))["id"]  # another minute is free
    assert api.create(job_spec(schedule="cron(0 * * * ? *)"), user=BOB)["id"]  # Bob has his own


def test_the_backfill_quota_answers_409_naming_it(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import UTC, datetime, timedelta

    _reconfigure(monkeypatch, PUNCTUAL_MAX_BACKFILLS_PER_TENANT="1")
    job = api.create(job_spec(schedule="cron(0 * * * ? *)", timezone="UTC"))
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=10)

    def backfill(hours: int) -> tuple[int, dict[str, object]]:
        body = {"start": start.isoformat(), "end": (start + timedelta(hours=hours)).isoformat()}
        reply = api.call("POST", f"/v1/jobs/{job['id']}/backfill", body)
        return reply.status, reply.body

    first_status, first = backfill(3)
    assert first_status == 202
    second_status, refused = backfill(4)
    assert second_status == 409 and refused["quota"] == "maxBackfillsPerTenant"
    assert str(refused["type"]).endswith("backfill-quota-reached")
    assert backfill(3)[0] == 202  # the same request again: the one running, not a new one
    api.call("DELETE", f"/v1/jobs/{job['id']}/backfills/{first['id']}")
    assert backfill(4)[0] == 202  # the cancelled one no longer counts


def test_the_job_quota_answers_409_naming_it(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    _reconfigure(monkeypatch, PUNCTUAL_MAX_JOBS_PER_TENANT="1")
    api.create()
    reply = api.call("POST", "/v1/jobs", job_spec())
    assert reply.status == 409
    assert reply.problem["quota"] == "maxJobsPerTenant"
    assert "maxJobsPerTenant is 1" in reply.problem["detail"]


def test_a_tenant_over_its_request_rate_gets_429_and_others_do_not(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    _reconfigure(monkeypatch, PUNCTUAL_API_REQUESTS_PER_MINUTE_PER_TENANT="3")
    replies = [api.call("GET", "/v1/jobs", user=ALICE) for _ in range(4)]

    assert [r.status for r in replies] == [200, 200, 200, 429]
    limited = replies[-1]
    assert limited.problem["quota"] == "apiRequestsPerMinutePerTenant"
    assert "apiRequestsPerMinutePerTenant is 3 requests per minute" in limited.problem["detail"]
    assert 1 <= int(limited.headers["Retry-After"]) <= 60
    assert api.call("GET", "/v1/jobs", user=BOB).status == 200


def test_schedule_previews_are_metered_and_need_a_caller(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31, point 3: /v1/schedules/preview computed up to 100 slots a call, unmetered."""
    _reconfigure(monkeypatch, PUNCTUAL_API_REQUESTS_PER_MINUTE_PER_TENANT="3")
    preview = "/v1/schedules/preview?expression=rate(1%20minute)&count=100"
    replies = [api.call("GET", preview, user=ALICE) for _ in range(4)]

    assert [r.status for r in replies] == [200, 200, 200, 429]
    assert replies[-1].problem["quota"] == "apiRequestsPerMinutePerTenant"
    assert api.call("GET", "/v1/jobs", user=ALICE).status == 429  # the same quota as every route
    assert api.call("GET", preview, user=None).status == 401  # no caller, no preview


def test_outside_local_mode_the_paging_key_comes_from_the_deploy_time_secret(aws: None) -> None:
    secrets = boto3.client("secretsmanager", region_name=REGION)
    arn = secrets.create_secret(Name="punctual-token-key", SecretString="k" * 64)["ARN"]
    settings = Settings(token_key_secret=arn)

    assert wiring.token_key(settings, secrets) == b"k" * 64
    # No key at all: refuse to start rather than fall back to a key anyone could derive.
    with pytest.raises(wiring.TokenKeyError):
        wiring.token_key(Settings(table_name="punctual"))
    assert wiring.token_key(Settings(table_name="punctual", local_mode=True))  # local mode only
