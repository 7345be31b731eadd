"""Inputs a real client sends that the API once answered with a 500, or accepted and then failed on
every run, or answered with the wrong 4xx: each now a 4xx naming the problem, nothing stored."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote

import pytest
from api_harness import ApiClient, http_spec, job_spec
from api_harness import api as api  # the fixture

HTTP = {"type": "http", "url": "https://hooks.example.com/x"}


def _errors(reply: Any) -> str:
    return str(reply.body)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("start_at", "0001-01-01T00:00:00Z"),
        ("start_at", "0001-01-01T00:00:00+01:00"),  # before year 1 in UTC
        ("start_at", "9999-12-31T23:59:59.999Z"),
        ("end_at", "9999-12-31T23:59:59Z"),
    ],
)
def test_instants_outside_the_schedulable_years_are_refused_by_name(
    api: ApiClient, field: str, value: str
) -> None:
    spec = job_spec(schedule="rate(1 hour)", target=HTTP, **{field: value})
    created = api.call("POST", "/v1/jobs", spec)
    assert (
        created.status == 422
        and field in _errors(created)
        and "1970-01-01 and 2199-12-31" in _errors(created)
    )
    put = api.call("PUT", "/v1/jobs/edge-1", spec, headers={"If-None-Match": "*"})
    assert put.status == 422 and api.call("GET", "/v1/jobs/edge-1").status == 404
    # in a batch the bad job fails alone: the good one is stored and said so, in a 200
    batch = api.call(
        "POST",
        "/v1/job-batches",
        {"jobs": [{"id": "z-ok", "job": job_spec(target=HTTP)}, {"id": "z-bad", "job": spec}]},
    )
    assert batch.status == 200, batch
    results = {r["id"]: r for r in batch.body["results"]}
    assert results["z-ok"]["status"] == "created" and results["z-bad"]["code"] == 422
    assert api.call("GET", "/v1/jobs/z-bad").status == 404


def test_instants_must_be_text_not_numbers(api: ApiClient) -> None:
    for value in (12345, 1.5, True):
        reply = api.call("POST", "/v1/jobs", job_spec(target=HTTP, start_at=value))
        assert reply.status == 422 and "RFC 3339" in _errors(reply), reply


def test_a_number_with_more_digits_than_python_converts_is_422(api: ApiClient) -> None:
    raw = (
        '{"schedule": "rate(1 hour)", "target": {"type": "http", "url": "https://e.example/x"}, "payload": 1'
    )
    reply = api.call("POST", "/v1/jobs", raw=raw + "0" * 5000 + "}")
    assert reply.status == 422 and "digits" in reply.body["detail"], reply


def test_media_types_are_case_insensitive(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs", job_spec(target=HTTP), headers={"Content-Type": "APPLICATION/JSON"})
    assert reply.status == 201, reply
    form = api.call("POST", "/v1/jobs", job_spec(target=HTTP), headers={"Content-Type": "Text/Plain"})
    assert form.status == 415


@pytest.mark.parametrize(
    "schedule", ["cron(0 0 * * ? *)\n", "\n0 0 * * *", "rate(5 minutes)\r", "rate(5\tminutes)"]
)
def test_control_characters_in_a_schedule_are_refused(api: ApiClient, schedule: str) -> None:
    reply = api.call("POST", "/v1/jobs", job_spec(schedule=schedule, target=HTTP))
    assert reply.status == 422 and "control characters" in _errors(reply)


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ({**HTTP, "headers": {"X-A": "€ü"}}, "ISO-8859-1"),
        ({**HTTP, "url": "https://hooks.example.com/hook/ü?x=ü"}, "/hook/%C3%BC?x=%C3%BC"),
        ({**HTTP, "url": "https://hooks.example.com/a b"}, "/a%20b"),
        ({**HTTP, "url": "https://bücher.example/x"}, "xn--bcher-kva.example"),
    ],
)
def test_an_http_target_no_request_can_carry_is_refused_with_what_would_work(
    api: ApiClient, target: dict[str, Any], says: str
) -> None:
    """Once accepted (201), then every run FAILED: an ASCII request line, ISO-8859-1 header values."""
    reply = api.call("POST", "/v1/jobs", job_spec(target=target))
    assert reply.status == 422 and says in _errors(reply), reply
    latin = api.call("POST", "/v1/jobs", job_spec(target={**HTTP, "headers": {"X-A": "café"}}))
    assert latin.status == 201  # ISO-8859-1 is what HTTP/1.1 sends


@pytest.mark.parametrize("zone", ["localtime", "Factory", "posixrules", "right/UTC", "posix/Europe/Berlin"])
def test_names_that_are_not_places_are_not_time_zones(api: ApiClient, zone: str) -> None:
    reply = api.call("POST", "/v1/jobs", job_spec(target=HTTP, timezone=zone))
    assert reply.status == 422 and "is not an IANA time zone" in _errors(reply)
    assert "timezone: timezone" not in _errors(reply)  # the field named once


def test_a_resumed_job_shows_no_paused_at(api: ApiClient) -> None:
    job = api.create(job_spec(target=HTTP))
    paused = api.call("POST", f"/v1/jobs/{job['id']}/pause").body
    assert paused["paused_at"] is not None
    resumed = api.call("POST", f"/v1/jobs/{job['id']}/resume").body
    assert resumed["state"] == "ENABLED" and resumed["paused_at"] is None
    assert api.call("GET", f"/v1/jobs/{job['id']}").body["paused_at"] is None


@pytest.mark.parametrize("job_id", ["a.b", "a:b", "a~b", "bad%20id", "x" * 65])
def test_creating_at_an_id_outside_the_rule_names_the_rule(api: ApiClient, job_id: str) -> None:
    reply = api.call("PUT", f"/v1/jobs/{job_id}", job_spec(target=HTTP), headers={"If-None-Match": "*"})
    assert reply.status == 422 and "letters, digits, '-' and '_'" in _errors(reply), reply
    assert api.call("GET", f"/v1/jobs/{job_id}").status == 404  # reading one: there is none


def test_a_parent_of_after_jobs_cannot_be_deleted_while_they_name_it(api: ApiClient) -> None:
    """Deleting it would leave its children ENABLED and never firing, silently (and no longer
    editable as they are): refused with 409 naming them, as a calendar in use is."""
    assert (
        api.call("PUT", "/v1/jobs/parent", job_spec(target=HTTP), headers={"If-None-Match": "*"}).status
        == 201
    )
    child = job_spec(schedule="after(parent)", target=HTTP)
    assert api.call("PUT", "/v1/jobs/child", child, headers={"If-None-Match": "*"}).status == 201
    refused = api.call("DELETE", "/v1/jobs/parent")
    assert refused.status == 409 and "child" in refused.body["detail"], refused
    assert api.call("GET", "/v1/jobs/parent").status == 200
    # a child that no longer names it does not hold it
    assert api.call("PUT", "/v1/jobs/child", job_spec(schedule="rate(1 hour)", target=HTTP)).status == 200
    assert api.call("DELETE", "/v1/jobs/parent").status == 204


def test_a_target_without_a_type_is_a_webhook_when_it_has_a_url(api: ApiClient) -> None:
    created = api.call("POST", "/v1/jobs", job_spec(target={"url": "https://hooks.example.com/x"}))
    assert created.status == 201 and created.body["target"]["type"] == "http"
    untyped = api.call(
        "POST", "/v1/jobs", job_spec(target={"queue_arn": "arn:aws:sqs:us-east-1:123456789012:q"})
    )
    assert untyped.status == 422 and "type is required" in _errors(untyped)


def test_a_missing_calendar_is_named_once(api: ApiClient) -> None:
    reply = api.call("POST", "/v1/jobs", job_spec(target=HTTP, exclude_calendars=["nope"]))
    assert reply.status == 422 and "calendar 'nope' does not exist" in _errors(reply)
    assert "exclude_calendars: exclude_calendars" not in _errors(reply)


def test_a_job_re_created_at_a_deleted_jobs_id_does_not_claim_its_history(api: ApiClient) -> None:
    """As an EventBridge schedule deleted and created again under its name: the old job's records
    stay readable under the id, marked job_deleted; the new job's own are not."""
    from datetime import UTC, datetime, timedelta

    from api_harness import ALICE_ID

    from punctual.models import Execution, ExecutionStatus

    def record(slot: datetime, started: datetime | None) -> None:
        api.store.save_execution(
            Execution(
                job_id="reuse",
                tenant=ALICE_ID,
                slot=slot.strftime("%Y-%m-%dT%H:%M:%SZ"),
                scheduled_at=slot,
                status=ExecutionStatus.SUCCEEDED if started else ExecutionStatus.MISSED,
                started_at=started,
            ),
            None,
            ttl_epoch_s=2_000_000_000,
        )

    headers = {"If-None-Match": "*"}
    assert api.call("PUT", "/v1/jobs/reuse", job_spec(target=HTTP), headers=headers).status == 201
    past = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    record(past, past)  # the first job's run
    record(past + timedelta(minutes=1), None)  # and a slot it missed
    assert api.call("DELETE", "/v1/jobs/reuse").status == 204
    gone = api.call("GET", "/v1/jobs/reuse/executions").body
    assert gone["job_deleted"] is True and all(e["job_deleted"] for e in gone["items"])
    assert api.call("PUT", "/v1/jobs/reuse", job_spec(target=HTTP), headers=headers).status == 201
    later = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=5)
    record(later, later)  # the new job's own run
    listed = api.call("GET", "/v1/jobs/reuse/executions").body
    assert listed["job_deleted"] is False
    assert {e["slot"]: e["job_deleted"] for e in listed["items"]} == {
        later.strftime("%Y-%m-%dT%H:%M:%SZ"): False,
        (past + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ"): True,
        past.strftime("%Y-%m-%dT%H:%M:%SZ"): True,
    }
    one = api.call("GET", f"/v1/jobs/reuse/executions/{quote(past.strftime('%Y-%m-%dT%H:%M:%SZ'), safe='')}")
    assert one.body["job_deleted"] is True


def test_a_job_stored_before_a_tightened_rule_stays_readable_and_keeps_firing(api: ApiClient) -> None:
    """A job a deployment accepted before these input rules (a far end_at, a host-only zone name, a
    newline after its expression, a header HTTP cannot carry) is read back as it was: an upgrade
    never turns a stored job unreadable, which would stop it."""
    import json

    from api_harness import ALICE_ID

    from punctual.store.dynamo import schema

    created = api.create(job_spec(schedule="cron(0 9 * * ? *)", timezone="UTC", target=HTTP))
    key = schema.job_key(ALICE_ID, created["id"])
    item = api.store.client.get_item(TableName=api.store.table, Key=key)["Item"]
    doc = json.loads(item["doc"]["S"])
    doc.update(
        schedule="cron(0 9 * * ? *)\n",
        timezone="localtime",
        end_at="9999-12-31T23:59:59Z",
        target={**doc["target"], "headers": {"X-Name": "€uro"}},
    )
    api.store.client.update_item(
        TableName=api.store.table,
        Key=key,
        UpdateExpression="SET doc = :d",
        ExpressionAttributeValues={":d": {"S": json.dumps(doc)}},
    )
    got = api.call("GET", f"/v1/jobs/{created['id']}")
    assert got.status == 200 and got.body.get("unreadable") is not True, got
    assert got.body["timezone"] == "localtime" and got.body["next_fire_at"] is not None


@pytest.mark.parametrize("suffix", ["%0A", "%0D%0A", "%0a"])
def test_an_id_with_a_trailing_newline_is_refused_everywhere(api: ApiClient, suffix: str) -> None:
    """A regex's ``$`` also matches before a final newline: ``nightly\\n`` was stored beside
    ``nightly`` (a look-alike), and its webhook could never be called (the newline went into the
    Idempotency-Key header). Every id check ends at the end of the text."""
    created = api.call(
        "PUT", f"/v1/jobs/nightly{suffix}", job_spec(target=HTTP), headers={"If-None-Match": "*"}
    )
    assert created.status == 422 and "job id" in _errors(created)
    assert (
        api.call("PUT", "/v1/jobs/nightly", job_spec(target=HTTP), headers={"If-None-Match": "*"}).status
        == 201
    )
    for method, path in [
        ("GET", f"/v1/jobs/nightly{suffix}"),
        ("POST", f"/v1/jobs/nightly{suffix}/trigger"),
        ("GET", f"/v1/jobs/nightly/executions/2026-11-30T09%3A32%3A00Z{suffix}"),
    ]:
        assert api.call(method, path).status in (404, 422), (method, path)
    assert [job["id"] for job in api.call("GET", "/v1/jobs").body["items"]] == ["nightly"]


def test_values_an_older_rule_let_in_stay_readable_and_removable(api: ApiClient) -> None:
    """Review of the tightened name rules: a calendar named '...', a job excluding it, a job id and
    an ARN that end in a newline (the old rules' $ let them in) are read back, listed, released and
    removable after an upgrade; and one job that cannot be read at all never fails the others'
    batch read (the poller's release chunk)."""
    import json

    from api_harness import ALICE_ID

    from punctual.models import JobState
    from punctual.store.dynamo import schema
    from punctual.store.dynamo.calendar_schema import calendar_key

    client, table = api.store.client, api.store.table
    # As the old version stored them: a calendar '...', and jobs naming it / with newlines
    assert api.call("PUT", "/v1/calendars/dots", {"dates": ["2026-12-25"]}).status == 201
    cal = client.get_item(TableName=table, Key=calendar_key(ALICE_ID, "dots"))["Item"]
    doc = json.loads(cal["doc"]["S"]) | {"name": "..."}
    client.put_item(
        TableName=table, Item={**cal, **calendar_key(ALICE_ID, "..."), "doc": {"S": json.dumps(doc)}}
    )
    created = api.create(job_spec(schedule="cron(0 9 * * ? *)", timezone="UTC", target=HTTP))
    key = schema.job_key(ALICE_ID, created["id"])
    item = client.get_item(TableName=table, Key=key)["Item"]
    old = json.loads(item["doc"]["S"]) | {"exclude_calendars": ["..."]}
    old["dead_letter"] = {"queue_arn": "arn:aws:sqs:eu-west-1:123456789012:dlq\n"}
    client.update_item(
        TableName=table,
        Key=key,
        UpdateExpression="SET doc = :d",
        ExpressionAttributeValues={":d": {"S": json.dumps(old)}},
    )
    broken = api.create(job_spec(schedule="cron(0 9 * * ? *)", timezone="UTC", target=HTTP))
    client.update_item(
        TableName=table,
        Key=schema.job_key(ALICE_ID, broken["id"]),
        UpdateExpression="SET doc = :d",
        ExpressionAttributeValues={":d": {"S": "{not json"}},
    )
    # Then they read back, the calendar lists, and a batch read skips only the broken job
    got = api.call("GET", f"/v1/jobs/{created['id']}")
    assert got.status == 200 and got.body["exclude_calendars"] == ["..."], got
    assert "..." in [c["name"] for c in api.call("GET", "/v1/calendars").body["items"]]
    assert api.call("GET", "/v1/calendars/...").status == 200
    found = api.store.batch_get_jobs([(ALICE_ID, created["id"]), (ALICE_ID, broken["id"])])
    assert (
        list(found) == [(ALICE_ID, created["id"])]
        and found[(ALICE_ID, created["id"])].state is JobState.ENABLED
    )
    # And they can be removed: the job, then the calendar it held
    assert api.call("DELETE", f"/v1/jobs/{created['id']}").status == 204
    assert api.call("DELETE", "/v1/calendars/...").status == 204


def test_an_at_schedule_before_its_start_at_names_start_at(api: ApiClient) -> None:
    """QA: the 422 said the instant 'is not after' now, though it was in the future."""
    reply = api.call(
        "POST",
        "/v1/jobs",
        job_spec(schedule="at(2099-01-01T00:00:00)", start_at="2099-02-01T00:00:00Z"),
    )
    assert reply.status == 422 and "start_at" in reply.problem["detail"], reply.problem
    assert "is before it" in reply.problem["detail"], reply.problem


def test_a_tag_key_holding_an_equals_sign_is_refused_as_no_filter_could_name_it(api: ApiClient) -> None:
    """QA: ?tag=a=b=c splits at the first '=': a job tagged {"a=b": "c"} was never listed by it."""
    reply = api.call("POST", "/v1/jobs", job_spec(tags={"a=b": "c"}))
    assert reply.status == 422 and reply.fields() == ["tags"], reply.problem
    tagged = api.create(job_spec(tags={"team": "a=b"}))  # '=' in a value is fine: the key ends first
    listed = api.call("GET", "/v1/jobs?tag=team=a%3Db")
    assert [job["id"] for job in listed.body["items"]] == [tagged["id"]]


def test_a_body_sent_to_a_route_that_takes_none_is_ignored_whatever_its_type(api: ApiClient) -> None:
    # docs/api.md: pause, resume and trigger take no body, one sent is ignored (QA: a text/plain
    # body was 415, malformed JSON as application/json went through)
    job = api.create(http_spec())
    for path, status in (("pause", 200), ("resume", 200), ("trigger", 202), ("rotate-secret", 200)):
        for content_type, raw in (
            ("text/plain", "run it"),
            ("application/json", "{not json"),
            ("image/png", "x"),
        ):
            reply = api.call(
                "POST", f"/v1/jobs/{job['id']}/{path}", raw=raw, headers={"Content-Type": content_type}
            )
            assert reply.status == status, (path, content_type, reply)
    # A route that takes a body still says what is wrong with its media type
    reply = api.call("POST", "/v1/jobs", raw="x", headers={"Content-Type": "text/plain"})
    assert reply.status == 415


def test_a_binary_body_sent_to_a_route_that_takes_none_is_ignored(api: ApiClient) -> None:
    # review: the UTF-8 check of a base64 body came before the body was dropped (400)
    from api_harness import LambdaContext, rest_event

    job = api.create()
    raw = base64.b64encode(b"\xff\xfe\x00").decode()
    event = rest_event(
        "POST", f"/v1/jobs/{job['id']}/pause", raw, {"Content-Type": "application/octet-stream"}
    )
    event["isBase64Encoded"] = True
    assert api.handler.handler(event, LambdaContext())["statusCode"] == 200


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/v1/jobs?limit=5&limit=6", "limit"),
        ("/v1/jobs?state=PAUSED&state=ENABLED", "state"),
        ("/v1/calendars?limit=5&limit=5", "limit"),
        ("/v1/schedules/preview?expression=rate(1%20hour)&calendars=a&calendars=b", "calendars"),
    ],
)
def test_a_repeated_query_parameter_is_named_as_repeated(api: ApiClient, path: str, name: str) -> None:
    """QA24: ``?limit=5&limit=6`` was 422 "Input should be a valid integer" (both are), and a
    repeated ``calendars`` "Input should be a valid string": the repetition was never named."""
    reply = api.call("GET", path)
    assert reply.status == 400 and reply.problem["type"].endswith("repeated-parameter"), reply
    assert f"query parameter {name} is given more than once" in reply.problem["detail"]
    assert api.call("GET", path.split("&")[0]).status == 200  # given once, it is taken


@pytest.mark.parametrize("value", ["*", '"1"'])
def test_if_none_match_on_a_change_guarded_by_if_match_is_refused_not_ignored(
    api: ApiClient, value: str
) -> None:
    """QA24: DELETE (of a job or a calendar), pause, resume and rotate-secret ignored
    If-None-Match, so ``If-None-Match: *`` ("only where there is none", RFC 9110 13.1.2) deleted
    the job that exists. They take If-Match only: If-None-Match is 400 naming it, nothing changed."""
    job = api.create(job_spec(target=HTTP))
    assert api.call("PUT", "/v1/calendars/days", {"dates": ["2026-12-25"]}).status == 201
    header = {"If-None-Match": value}
    for method, path in [
        ("DELETE", f"/v1/jobs/{job['id']}"),
        ("POST", f"/v1/jobs/{job['id']}/pause"),
        ("POST", f"/v1/jobs/{job['id']}/resume"),
        ("POST", f"/v1/jobs/{job['id']}/rotate-secret"),
        ("DELETE", "/v1/calendars/days"),
    ]:
        reply = api.call(method, path, headers=header)
        assert reply.status == 400 and "If-None-Match" in reply.problem["detail"], (method, path, reply)
    kept = api.call("GET", f"/v1/jobs/{job['id']}")
    assert kept.status == 200 and kept.body["version"] == job["version"] and kept.body["state"] == "ENABLED"
    assert api.call("GET", "/v1/calendars/days").status == 200
    # where it means something it still works: a PUT that creates
    put = api.call("PUT", "/v1/jobs/fresh", job_spec(target=HTTP), headers={"If-None-Match": "*"})
    assert put.status == 201
    assert api.call("DELETE", f"/v1/jobs/{job['id']}").status == 204
