"""Every route of the API, success and error paths, in-process with API Gateway proxy events on moto."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest
from api_harness import ALICE, ALICE_ID, BOB, ROOT, ApiClient, http_spec, job_spec
from api_harness import api as api  # the fixture
from botocore.exceptions import ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

from punctual.models import AttemptRecord, Execution, ExecutionStatus, JobState

SLOT_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z~m[0-9a-f]{12}$")


# --------------------------------------------------------------------------- create


STAGE_URL = "https://abc123defg.execute-api.us-east-1.amazonaws.com/prod"


def test_create_returns_201_with_the_job_etag_and_location(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs", job_spec())

    assert reply.status == 201
    job = reply.body
    assert job["name"] == "nightly report" and job["schedule"] == "cron(0 2 * * ? *)"
    assert job["state"] == "ENABLED" and job["version"] == 1
    assert reply.headers["ETag"] == '"1"'
    assert reply.headers["Location"] == f"{STAGE_URL}/v1/jobs/{job['id']}"
    assert job["next_fire_at"].endswith("Z") and job["created_at"].endswith("Z")
    for internal in ("tenant", "anchor", "signing_secret_enc"):
        assert internal not in job
    assert job["signing_secret"] is None  # only HTTP targets get one


def test_http_target_gets_its_signing_secret_once(api: ApiClient) -> None:
    created = api.create(http_spec())

    assert created["signing_secret"].startswith("whsec_")
    fetched = api.call("GET", f"/v1/jobs/{created['id']}").body
    assert "signing_secret" not in fetched


def test_idempotency_key_retry_returns_the_same_job_and_secret(api: ApiClient) -> None:
    headers = {"Idempotency-Key": "create-report-1"}

    first = api.call("POST", "/v1/jobs", http_spec(), headers)
    again = api.call("POST", "/v1/jobs", http_spec(), headers)

    assert first.status == again.status == 201
    assert again.body["id"] == first.body["id"]
    assert again.body["signing_secret"] == first.body["signing_secret"]
    assert [j["id"] for j in api.call("GET", "/v1/jobs").body["items"]] == [first.body["id"]]


def test_idempotency_key_with_a_different_body_is_422(api: ApiClient) -> None:
    headers = {"Idempotency-Key": "k-1"}
    assert api.call("POST", "/v1/jobs", job_spec(), headers).status == 201

    reply = api.call("POST", "/v1/jobs", job_spec(name="another"), headers)

    assert reply.status == 422
    assert reply.problem["type"].endswith("idempotency-key-reused")
    assert reply.fields() == ["header.Idempotency-Key"]


def test_idempotency_keys_are_per_tenant(api: ApiClient) -> None:
    headers = {"Idempotency-Key": "same-key"}

    mine = api.call("POST", "/v1/jobs", job_spec(), headers, user=ALICE)
    theirs = api.call("POST", "/v1/jobs", job_spec(), headers, user=BOB)

    assert mine.status == theirs.status == 201
    assert mine.body["id"] != theirs.body["id"]


def test_malformed_json_is_400(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs", raw='{"schedule": "rate(1 hour)",')

    assert reply.status == 400
    assert reply.problem["type"].endswith("malformed-json")
    assert "JSON" in reply.problem["detail"]


def test_unknown_field_is_422_naming_it(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs", job_spec(colour="blue"))

    assert reply.status == 422
    assert reply.problem["type"].endswith("validation")
    assert reply.problem["errors"] == [{"field": "colour", "message": "Extra inputs are not permitted"}]


def test_invalid_schedule_is_422_with_the_reason(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs", job_spec(schedule="cron(0 25 * * ? *)"))

    assert reply.status == 422
    [error] = reply.problem["errors"]
    assert error["field"] == "schedule"
    assert "hour" in error["message"] and "25" in error["message"]


def test_whole_spec_checks_name_their_field(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs", job_spec(timeout_seconds=900))

    assert reply.status == 422
    assert reply.fields() == ["timeout_seconds"]
    assert "runtime 'ecs'" in reply.problem["errors"][0]["message"]


def test_nested_fields_are_named_by_their_path(api: ApiClient) -> None:
    spec = job_spec(target={"type": "http", "url": "ftp://example.com"}, retry={"max_attempts": 0})

    reply = api.call("POST", "/v1/jobs", spec)

    assert reply.status == 422
    assert sorted(reply.fields()) == ["retry.max_attempts", "target.url"]


def test_missing_body_is_422(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs")

    assert reply.status == 422
    assert reply.problem["errors"]


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"name": "n" * 129}, "name"),
        ({"tags": {f"k{i}": "v" for i in range(51)}}, "tags"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
    ],
)
def test_limits_are_422_naming_the_field(api: ApiClient, override: dict[str, object], field: str) -> None:
    reply = api.call("POST", "/v1/jobs", job_spec(**override))

    assert reply.status == 422
    assert reply.fields() == [field]


def test_payload_over_256_kb_is_413(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs", job_spec(payload="x" * (256 * 1024)))

    assert reply.status == 413
    assert reply.problem["type"].endswith("payload-too-large")
    assert "262144" in reply.problem["detail"]


def test_body_over_the_limit_is_413_before_parsing(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs", raw="[" * (400 * 1024))

    assert reply.status == 413


def test_webhook_to_a_private_address_is_refused(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs", http_spec(target={"type": "http", "url": "http://169.254.169.254/"}))

    assert reply.status == 422
    assert reply.fields() == ["target.url"]
    assert "link-local" in reply.problem["detail"]


def test_job_limit_is_a_409_saying_so(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from punctual.api import wiring

    monkeypatch.setenv("PUNCTUAL_MAX_JOBS_PER_TENANT", "2")
    wiring.use_services(None)
    api.create()
    api.create()

    reply = api.call("POST", "/v1/jobs", job_spec())

    assert reply.status == 409
    assert reply.problem["title"] == "Job limit reached"
    assert api.create(user=BOB)["id"]  # the limit is per tenant


def test_schedule_without_a_future_slot_is_422(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs", job_spec(schedule="at(2020-01-01T00:00:00)", timezone="UTC"))

    assert reply.status == 422
    assert reply.fields() == ["schedule"]


def test_unsupported_media_type_is_415(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs", raw="schedule=x", headers={"Content-Type": "text/plain"})

    assert reply.status == 415
    assert reply.problem["type"].endswith("unsupported-media-type")


# --------------------------------------------------------------------------- list


def test_list_pages_through_every_job_once(api: ApiClient) -> None:
    ids = sorted(api.create()["id"] for _ in range(5))
    seen: list[str] = []
    token = None

    for _ in range(5):
        query = "/v1/jobs?limit=2" + (f"&next_token={quote(token)}" if token else "")
        page = api.call("GET", query)
        assert page.status == 200
        seen += [job["id"] for job in page.body["items"]]
        token = page.body["next_token"]
        if token is None:
            break

    assert seen == ids


def test_list_filters_by_state_and_tag(api: ApiClient) -> None:
    a = api.create(job_spec(tags={"team": "data"}))
    b = api.create(job_spec(tags={"team": "web"}))
    api.call("POST", f"/v1/jobs/{b['id']}/pause")

    paused = api.call("GET", "/v1/jobs?state=PAUSED").body["items"]
    data = api.call("GET", "/v1/jobs?tag=team%3Ddata").body["items"]
    any_team = api.call("GET", "/v1/jobs?tag=team").body["items"]

    assert [j["id"] for j in paused] == [b["id"]]
    assert [j["id"] for j in data] == [a["id"]]
    assert {j["id"] for j in any_team} == {a["id"], b["id"]}


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "limit=ten", "state=SLEEPING"])
def test_list_rejects_bad_query_values(api: ApiClient, query: str) -> None:
    reply = api.call("GET", f"/v1/jobs?{query}")

    assert reply.status == 422
    assert reply.fields() == [f"query.{query.split('=')[0]}"]


def test_next_token_is_bound_to_its_filters_and_tamper_proof(api: ApiClient) -> None:
    for _ in range(3):
        api.create()
    token = api.call("GET", "/v1/jobs?limit=1").body["next_token"]
    assert token

    other_filter = api.call("GET", f"/v1/jobs?limit=1&state=ENABLED&next_token={quote(token)}")
    _payload, mac = token.split(".")
    forged_payload = base64.urlsafe_b64encode(json.dumps({"c": "", "s": "x"}).encode()).decode().rstrip("=")
    forged = api.call("GET", f"/v1/jobs?next_token={quote(forged_payload + '.' + mac)}")
    garbage = api.call("GET", "/v1/jobs?next_token=not-a-token")

    for reply in (other_filter, forged, garbage):
        assert reply.status == 400
        assert reply.problem["type"].endswith("invalid-next-token")
        assert reply.fields() == ["query.next_token"]


# --------------------------------------------------------------------------- get / put / delete


def test_get_unknown_job_is_404(api: ApiClient) -> None:
    for job_id in ("0123456789abcdef", "not%20an%20id", "x" * 300):
        reply = api.call("GET", f"/v1/jobs/{job_id}")
        assert reply.status == 404
        assert reply.problem["type"].endswith("not-found")


def test_put_replaces_the_spec_and_bumps_the_version(api: ApiClient) -> None:
    job = api.create()

    reply = api.call(
        "PUT", f"/v1/jobs/{job['id']}", job_spec(schedule="rate(10 minutes)"), {"If-Match": '"1"'}
    )

    assert reply.status == 200
    assert reply.body["schedule"] == "rate(10 minutes)" and reply.body["version"] == 2
    assert reply.headers["ETag"] == '"2"'
    assert api.call("GET", f"/v1/jobs/{job['id']}").body["version"] == 2


def test_put_with_a_stale_if_match_is_412_and_changes_nothing(api: ApiClient) -> None:
    job = api.create()
    api.call("POST", f"/v1/jobs/{job['id']}/pause")  # now version 2

    reply = api.call("PUT", f"/v1/jobs/{job['id']}", job_spec(name="late"), {"If-Match": '"1"'})

    assert reply.status == 412
    assert reply.problem["current_version"] == 2
    assert reply.headers["ETag"] == '"2"'
    assert api.call("GET", f"/v1/jobs/{job['id']}").body["name"] == "nightly report"


def test_put_with_a_malformed_if_match_is_400(api: ApiClient) -> None:
    job = api.create()

    reply = api.call("PUT", f"/v1/jobs/{job['id']}", job_spec(), {"If-Match": "yesterday"})

    assert reply.status == 400
    assert reply.fields() == ["header.If-Match"]


def test_put_validates_the_body_and_unknown_job(api: ApiClient) -> None:
    job = api.create()

    invalid = api.call("PUT", f"/v1/jobs/{job['id']}", job_spec(timeout_seconds=0))
    unknown = api.call("PUT", "/v1/jobs/nope", job_spec())

    assert invalid.status == 422 and invalid.fields() == ["timeout_seconds"]
    assert unknown.status == 404


def test_delete_is_204_then_the_job_is_gone(api: ApiClient) -> None:
    job = api.create()

    stale = api.call("DELETE", f"/v1/jobs/{job['id']}", headers={"If-Match": '"9"'})
    deleted = api.call("DELETE", f"/v1/jobs/{job['id']}", headers={"If-Match": '"1"'})

    assert stale.status == 412
    assert deleted.status == 204 and deleted.body is None
    assert api.call("GET", f"/v1/jobs/{job['id']}").status == 404
    assert api.call("DELETE", f"/v1/jobs/{job['id']}").status == 404


# --------------------------------------------------------------------------- pause / resume / trigger


def test_pause_and_resume(api: ApiClient) -> None:
    job = api.create()

    paused = api.call("POST", f"/v1/jobs/{job['id']}/pause")
    again = api.call("POST", f"/v1/jobs/{job['id']}/pause")
    resumed = api.call("POST", f"/v1/jobs/{job['id']}/resume", headers={"If-Match": '"2"'})

    assert paused.status == 200 and paused.body["state"] == JobState.PAUSED
    assert paused.body["next_fire_at"] is None and paused.body["paused_at"]
    assert again.body["version"] == 2  # pausing a paused job changes nothing
    assert resumed.status == 200 and resumed.body["state"] == JobState.ENABLED
    assert resumed.body["version"] == 3 and resumed.body["next_fire_at"]


def test_pause_resume_errors(api: ApiClient) -> None:
    job = api.create()

    assert api.call("POST", "/v1/jobs/missing/pause").status == 404
    assert api.call("POST", "/v1/jobs/missing/resume").status == 404
    assert api.call("POST", f"/v1/jobs/{job['id']}/pause", headers={"If-Match": '"5"'}).status == 412
    assert api.call("POST", f"/v1/jobs/{job['id']}/resume", headers={"If-Match": "v1"}).status == 400


def test_trigger_queues_a_run_now_slot(api: ApiClient) -> None:
    job = api.create()

    reply = api.call("POST", f"/v1/jobs/{job['id']}/trigger")

    assert reply.status == 202
    assert reply.body["job_id"] == job["id"] and SLOT_RE.match(reply.body["slot"])
    assert (
        reply.headers["Location"]
        == f"{STAGE_URL}/v1/jobs/{job['id']}/executions/{quote(reply.body['slot'], safe='')}"
    )
    [message] = api.queued()
    assert (message["job_id"], message["slot"], message["kind"]) == (job["id"], reply.body["slot"], "manual")


def test_trigger_with_an_idempotency_key_names_one_slot(api: ApiClient) -> None:
    job = api.create()
    headers = {"Idempotency-Key": "run-now-7"}

    first = api.call("POST", f"/v1/jobs/{job['id']}/trigger", headers=headers)
    retry = api.call("POST", f"/v1/jobs/{job['id']}/trigger", headers=headers)
    other = api.call("POST", f"/v1/jobs/{job['id']}/trigger")

    assert first.status == retry.status == other.status == 202
    assert retry.body["slot"] == first.body["slot"]
    assert other.body["slot"] != first.body["slot"]
    assert sorted(m["slot"] for m in api.queued()) == sorted([first.body["slot"], other.body["slot"]])


def test_trigger_unknown_job_is_404(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs/missing/trigger", headers={"Idempotency-Key": "k"})

    assert reply.status == 404
    assert api.queued() == []


# --------------------------------------------------------------------------- executions


def _record(api: ApiClient, job_id: str, slot: str, status: ExecutionStatus, tenant: str = ALICE_ID) -> None:
    instant = datetime.strptime(slot.split("~")[0], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    attempts = []
    attempt = 1
    if status is ExecutionStatus.SUCCEEDED:
        attempt = 2
        attempts = [
            AttemptRecord(
                attempt=1,
                status=ExecutionStatus.FAILED,
                started_at=instant,
                finished_at=instant + timedelta(seconds=1),
                error="HTTP 503",
                owner="w-1",
            ),
            AttemptRecord(
                attempt=2,
                status=ExecutionStatus.SUCCEEDED,
                started_at=instant + timedelta(seconds=3),
                finished_at=instant + timedelta(seconds=4),
                owner="w-2",
            ),
        ]
    execution = Execution(
        job_id=job_id,
        tenant=tenant,
        slot=slot,
        scheduled_at=instant,
        attempt=attempt,
        status=status,
        started_at=instant,
        finished_at=instant + timedelta(seconds=4) if status.terminal else None,
        owner="w-2",
        attempts=attempts,
    )
    api.store.save_execution(execution, None, ttl_epoch_s=2_000_000_000)  # expires long after the test


def test_executions_newest_first_filtered_and_paged(api: ApiClient) -> None:
    job = api.create()
    slots = [f"2026-11-{day:02d}T02:00:00Z" for day in range(20, 25)]
    for i, slot in enumerate(slots):
        _record(api, job["id"], slot, ExecutionStatus.SUCCEEDED if i % 2 == 0 else ExecutionStatus.FAILED)

    first = api.call("GET", f"/v1/jobs/{job['id']}/executions?limit=3")
    second = api.call(
        "GET", f"/v1/jobs/{job['id']}/executions?limit=3&next_token={quote(first.body['next_token'])}"
    )
    failed = api.call("GET", f"/v1/jobs/{job['id']}/executions?status=FAILED")

    assert [e["slot"] for e in first.body["items"] + second.body["items"]] == slots[::-1]
    assert second.body["next_token"] is None
    assert [e["slot"] for e in failed.body["items"]] == [slots[3], slots[1]]
    assert all("owner" not in e and "tenant" not in e for e in first.body["items"])


def test_execution_token_is_bound_to_the_job_and_status(api: ApiClient) -> None:
    job, other = api.create(), api.create()
    for day in (1, 2):
        _record(api, job["id"], f"2026-11-0{day}T02:00:00Z", ExecutionStatus.FAILED)
    token = api.call("GET", f"/v1/jobs/{job['id']}/executions?limit=1").body["next_token"]

    on_other_job = api.call("GET", f"/v1/jobs/{other['id']}/executions?next_token={quote(token)}")
    other_status = api.call("GET", f"/v1/jobs/{job['id']}/executions?status=FAILED&next_token={quote(token)}")

    assert on_other_job.status == other_status.status == 400


def test_execution_shows_every_attempt_and_takes_encoded_slots(api: ApiClient) -> None:
    job = api.create()
    slot = "2026-11-30T09:32:00Z"
    manual = "2026-11-30T09:33:07Z~m0123456789ab"
    _record(api, job["id"], slot, ExecutionStatus.SUCCEEDED)
    _record(api, job["id"], manual, ExecutionStatus.RUNNING)

    done = api.call("GET", f"/v1/jobs/{job['id']}/executions/{quote(slot, safe='')}")
    running = api.call("GET", f"/v1/jobs/{job['id']}/executions/{quote(manual, safe='')}")

    assert done.status == 200
    assert done.body["slot"] == slot and done.body["status"] == "SUCCEEDED" and done.body["attempt"] == 2
    assert [(a["attempt"], a["status"], a["error"]) for a in done.body["attempts"]] == [
        (1, "FAILED", "HTTP 503"),
        (2, "SUCCEEDED", None),
    ]
    assert all("owner" not in a for a in done.body["attempts"])
    assert running.status == 200
    assert [(a["attempt"], a["status"]) for a in running.body["attempts"]] == [(1, "RUNNING")]


def test_execution_errors(api: ApiClient) -> None:
    job = api.create()

    unknown_slot = api.call("GET", f"/v1/jobs/{job['id']}/executions/2026-01-01T00%3A00%3A00Z")
    garbage_slot = api.call("GET", f"/v1/jobs/{job['id']}/executions/yesterday")
    unknown_job = api.call("GET", "/v1/jobs/missing/executions")
    bad_status = api.call("GET", f"/v1/jobs/{job['id']}/executions?status=LOST")

    assert unknown_slot.status == garbage_slot.status == unknown_job.status == 404
    assert bad_status.status == 422 and bad_status.fields() == ["query.status"]


# --------------------------------------------------------------------------- schedules, meta


def test_schedule_preview(api: ApiClient) -> None:
    reply = api.call(
        "GET",
        "/v1/schedules/preview?expression="
        + quote("cron(30 9 ? * MON *)")
        + "&timezone=Europe/Berlin&count=3&after=2026-03-20T00:00:00Z",
    )

    assert reply.status == 200
    # The clocks go forward on 2026-03-29: 09:30 in Berlin is 08:30 UTC from then on.
    assert reply.body["slots"] == ["2026-03-23T08:30:00Z", "2026-03-30T07:30:00Z", "2026-04-06T07:30:00Z"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("expression=cron(61%20*%20*%20*%20%3F%20*)", "query.expression"),
        ("expression=rate(1%20hour)&timezone=Nowhere/Land", "query.timezone"),
        ("expression=after(a)", "query.expression"),
        ("expression=rate(1%20hour)&count=0", "query.count"),
        ("expression=rate(1%20hour)&after=soon", "query.after"),
        ("expression=cron(0%099%20*%20*%20%3F%20*)", "query.expression"),  # a tab, as a job refuses (QA26)
        ("timezone=UTC", "query.expression"),
    ],
)
def test_schedule_preview_errors(api: ApiClient, query: str, field: str) -> None:
    reply = api.call("GET", f"/v1/schedules/preview?{query}")

    assert reply.status == 422
    assert reply.fields() == [field]


def test_a_past_at_in_another_zone_is_refused_naming_its_utc_instant(api: ApiClient) -> None:
    """QA26: "at(2026-01-01T15:00:00) has no slot after 2026-01-01T10:00:00Z" of an Asia/Tokyo
    expression, whose instant is 06:00Z: its local time read as after the instant compared."""
    query = "expression=at(2026-01-01T15:00:00)&timezone=Asia/Tokyo&after=2026-01-01T10:00:00Z"
    reply = api.call("GET", f"/v1/schedules/preview?{query}")

    assert reply.status == 422 and reply.fields() == ["query.expression"]
    assert reply.problem["detail"] == (
        "at(2026-01-01T15:00:00) in Asia/Tokyo (2026-01-01T06:00:00Z) has no slot after 2026-01-01T10:00:00Z"
    )


def test_openapi_route_serves_the_committed_document(api: ApiClient) -> None:
    from punctual.api.app import openapi_text

    committed = (ROOT / "openapi.json").read_text()
    served = api.call("GET", "/v1/openapi.json")

    assert committed == openapi_text(), "openapi.json drifted: python -m punctual.api.app > openapi.json"
    # The served document names the server the caller reached; the committed one, local mode.
    assert served.status == 200 and {**served.body, "servers": []} == {**json.loads(committed), "servers": []}


def test_unknown_route_is_a_404_problem(api: ApiClient) -> None:
    reply = api.call("GET", "/v1/nothing-here")

    assert reply.status == 404
    assert reply.problem["type"].endswith("not-found")


def test_throttled_storage_is_a_503_with_retry_after(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from api_harness import LambdaContext, rest_event
    from botocore.exceptions import ClientError

    from punctual.api import wiring

    job = api.create()

    def throttled(*args: object, **kwargs: object) -> None:
        raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException"}}, "GetItem")

    monkeypatch.setattr(wiring.services().store, "get_job", throttled)
    out = api.handler.handler(rest_event("GET", f"/v1/jobs/{job['id']}"), LambdaContext())

    assert out["statusCode"] == 503
    assert out["multiValueHeaders"]["Retry-After"] == ["1"]
    assert json.loads(out["body"])["title"] == "Service busy"


def test_batch_reads_left_unprocessed_are_a_503_with_retry_after(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA22: DynamoDB throttles a BatchGetItem by leaving its keys unprocessed (moto never does);
    through every retry that was a RuntimeError, answered 500."""
    from api_harness import LambdaContext, rest_event

    from punctual.api import wiring
    from punctual.store.dynamo import base

    api.call("PUT", "/v1/calendars/holidays", {"dates": ["2026-12-25"]})
    client = wiring.services().store.client
    monkeypatch.setattr(client, "batch_get_item", lambda RequestItems: {"UnprocessedKeys": RequestItems})
    monkeypatch.setattr(base, "_backoff", lambda round_no: None)
    path = "/v1/schedules/preview?expression=rate(1%20day)&calendars=holidays"
    out = api.handler.handler(rest_event("GET", path), LambdaContext())

    assert out["statusCode"] == 503
    assert out["multiValueHeaders"]["Retry-After"] == ["1"]
    assert json.loads(out["body"])["title"] == "Service busy"


@pytest.mark.parametrize(
    ("error", "status", "title"),
    [
        (lambda: EndpointConnectionError(endpoint_url="https://dynamodb"), 503, "Service busy"),
        (lambda: ReadTimeoutError(endpoint_url="https://dynamodb"), 504, "Storage timed out"),
        (lambda: ConnectionClosedError(endpoint_url="https://dynamodb"), 504, "Storage timed out"),
    ],
    ids=["unreached", "read-timeout", "connection-dropped"],
)
def test_storage_that_cannot_be_reached_or_does_not_answer_is_a_503_or_504_not_a_500(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch, error: Any, status: int, title: str
) -> None:
    """botocore's connection errors and timeouts (after its retries) were no answer the API knew:
    a 500 'internal error'. Not reached is a 503 (nothing was done, come back: Retry-After); no
    answer a 504 (a write may have been made: a client sends only what can be repeated again),
    for a request and for one item of a batch (the others still registered)."""
    from punctual.api import wiring

    job = api.create()
    store = wiring.services().store

    def failing(*args: object, **kwargs: object) -> None:
        raise error()

    real_create, real_get = store.create_job, store.get_job
    monkeypatch.setattr(store, "get_job", failing)
    from api_harness import LambdaContext, rest_event, undeclared

    out = api.handler.handler(rest_event("GET", f"/v1/jobs/{job['id']}"), LambdaContext())
    headers = {k: v[-1] for k, v in out["multiValueHeaders"].items()}
    assert out["statusCode"] == status and json.loads(out["body"])["title"] == title, out
    assert ("Retry-After" in headers) is (status == 503)
    assert not undeclared("GET", f"/v1/jobs/{job['id']}", status, headers)  # in openapi.json

    real_group = store.create_job_group

    def second_fails(job: Any, *args: object, **kwargs: object) -> Any:
        if job.name == "second":
            raise error()
        return real_create(job, *args, **kwargs)

    def group_with_second_fails(jobs: Any, *args: object, **kwargs: object) -> Any:
        if any(job.name == "second" for job, _ in jobs):
            raise error()
        return real_group(jobs, *args, **kwargs)

    monkeypatch.setattr(store, "get_job", real_get)
    monkeypatch.setattr(store, "create_job", second_fails)
    monkeypatch.setattr(store, "create_job_group", group_with_second_fails)
    spec = {"schedule": "rate(1 hour)", "target": {"type": "http", "url": "https://x.example"}}
    # A batch's jobs are stored 33 a transaction: "second" alone in the second group, and "third"
    # alone as a job with a calendar is (its own transaction)
    api.call("PUT", "/v1/calendars/holidays", {"dates": ["2026-12-25"]})
    names = [*(f"first-{n}" for n in range(33)), "second"]
    items = [{"id": name, "job": {**spec, "name": name}} for name in names]
    items.append({"id": "third", "job": {**spec, "name": "third", "exclude_calendars": ["holidays"]}})
    reply = api.call("POST", "/v1/job-batches", {"jobs": items})
    assert reply.status == 200, reply.body
    assert [(r["status"], r["code"]) for r in reply.body["results"]] == [
        *[("created", 201)] * 33,
        ("failed", status),
        ("created", 201),
    ]
    assert reply.body["results"][33]["problem"]["title"] == title


@pytest.mark.parametrize(
    "code", ["ThrottlingException", "KMSInternalException", "DependencyTimeoutException"]
)
def test_kms_throttled_or_unavailable_is_a_503_naming_kms(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    """QA24: a webhook job's secret is sealed under its tenant's data key; the errors KMS documents
    as transient (retry them) answered 500 'internal error', and a throttle 'storage is throttling'."""
    import boto3
    from api_harness import LambdaContext, rest_event
    from botocore.exceptions import ClientError

    from punctual.api import wiring
    from punctual.security.tenant_keys import TenantKeyring

    monkeypatch.setenv("PUNCTUAL_KMS_KEY_ID", boto3.client("kms").create_key()["KeyMetadata"]["KeyId"])
    wiring.use_services(None)

    class Down:
        def generate_data_key(self, **kwargs: object) -> None:
            raise ClientError({"Error": {"Code": code, "Message": "try again"}}, "GenerateDataKey")

    monkeypatch.setattr(TenantKeyring, "_kms", lambda self: Down())
    out = api.handler.handler(rest_event("POST", "/v1/jobs", json.dumps(http_spec())), LambdaContext())

    assert out["statusCode"] == 503, out
    assert out["multiValueHeaders"]["Retry-After"] == ["1"]
    assert "KMS" in json.loads(out["body"])["detail"]
    assert api.call("GET", "/v1/jobs").body["items"] == []  # nothing was registered
