"""The calendar and backfill routes in-process on moto: success paths and every 4xx named."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from api_harness import ALICE, ALICE_ID, BOB, TABLE, ApiClient, job_spec
from api_harness import api as api  # the fixture

from punctual.store.dynamo.calendar_schema import calendar_key
from punctual.timing.instants import format_instant_ms

HOLIDAYS = {
    "timezone": "Europe/Berlin",
    "dates": ["2026-12-25"],
    "ranges": [{"start": "2026-12-31", "end": "2027-01-01"}],
}


def test_calendar_put_get_list_replace_and_delete(api: ApiClient) -> None:
    created = api.call("PUT", "/v1/calendars/holidays", HOLIDAYS)
    assert created.status == 201 and created.headers["ETag"] == '"1"'
    assert created.headers["Location"].endswith("/v1/calendars/holidays")
    assert created.body["name"] == "holidays" and created.body["version"] == 1
    # get, edit, put: the output-only fields are ignored; If-Match guards the version
    edited = {**created.body, "dates": ["2026-12-24", "2026-12-25"]}
    replaced = api.call("PUT", "/v1/calendars/holidays", edited, headers={"If-Match": '"1"'})
    assert replaced.status == 200 and replaced.body["version"] == 2
    stale = api.call("PUT", "/v1/calendars/holidays", edited, headers={"If-Match": '"1"'})
    assert stale.status == 412 and stale.problem["current_version"] == 2
    assert api.call("GET", "/v1/calendars/holidays").body["dates"] == ["2026-12-24", "2026-12-25"]
    assert api.call("GET", "/v1/calendars/holidays", user=BOB).status == 404  # another tenant's
    api.call("PUT", "/v1/calendars/another", {"dates": []})
    page = api.call("GET", "/v1/calendars?limit=1")
    assert [c["name"] for c in page.body["items"]] == ["another"] and page.body["next_token"]
    rest = api.call("GET", f"/v1/calendars?limit=1&next_token={page.body['next_token']}")
    assert [c["name"] for c in rest.body["items"]] == ["holidays"]
    assert api.call("DELETE", "/v1/calendars/holidays").status == 204
    assert api.call("GET", "/v1/calendars/holidays").status == 404
    assert api.call("DELETE", "/v1/calendars/holidays").status == 404


def test_if_match_on_a_calendar_that_does_not_exist_says_so_without_none(api: ApiClient) -> None:
    """Issue 31: the 412 printed Python's ``None`` as the calendar's version."""
    reply = api.call("PUT", "/v1/calendars/missing", HOLIDAYS, headers={"If-Match": '"3"'})

    assert reply.status == 412
    assert "None" not in reply.problem["detail"]
    assert "does not exist" in reply.problem["detail"]
    assert "ETag" not in reply.headers and reply.problem.get("current_version") is None
    assert api.call("GET", "/v1/calendars/missing").status == 404  # nothing was created


def test_bad_calendars_are_422_naming_the_problem(api: ApiClient) -> None:
    for body, field, words in [
        ({"timezone": "Mars/Olympus"}, "timezone", "unknown time zone"),
        ({"dates": ["2026-02-30"]}, "dates", "not a valid date"),
        ({"ranges": [{"start": "2026-12-05", "end": "2026-12-01"}]}, "ranges.0", "before its start"),
        ({"dates": "2026-12-25"}, "dates", ""),
        ({"weekdays": ["MON"]}, "weekdays", ""),
    ]:
        reply = api.call("PUT", "/v1/calendars/c", body)
        assert reply.status == 422, (body, reply)
        assert field in reply.fields(), (body, reply.problem)
        assert words in reply.problem["detail"] + str(reply.problem["errors"]), (body, reply.problem)
    bad_name = api.call("PUT", "/v1/calendars/no%20spaces", {"dates": []})
    assert bad_name.status == 422 and bad_name.fields() == ["path.name"]
    for dots in ("%2E", "%2E%2E", "..."):  # a path segment of dots alone: clients normalise it away
        reply = api.call("PUT", f"/v1/calendars/{dots}", {"dates": []})
        assert reply.status == 422 and "not dots alone" in reply.problem["detail"], (dots, reply)
    assert api.call("PUT", "/v1/calendars/.hidden", {"dates": []}).status == 201


def test_jobs_exclude_calendars_and_a_calendar_in_use_is_409_naming_them(api: ApiClient) -> None:
    unknown = api.call("POST", "/v1/jobs", job_spec(exclude_calendars=["holidays"]))
    assert unknown.status == 422 and unknown.fields() == ["exclude_calendars"]
    assert "'holidays' does not exist" in unknown.problem["detail"]
    api.call("PUT", "/v1/calendars/holidays", HOLIDAYS)
    job = api.create(job_spec(exclude_calendars=["holidays"]))
    in_use = api.call("DELETE", "/v1/calendars/holidays")
    assert in_use.status == 409 and job["id"] in in_use.problem["detail"]
    # a preview with the calendar passes over its days, and can show them
    preview = api.call(
        "GET",
        "/v1/schedules/preview?expression=cron(0%209%20*%20*%20%3F%20*)&timezone=Europe/Berlin&count=2"
        "&after=2026-12-24T12:00:00Z&calendars=holidays&show_excluded=true",
    )
    assert preview.status == 200
    assert preview.body["slots"] == ["2026-12-26T08:00:00Z", "2026-12-27T08:00:00Z"]
    assert preview.body["excluded"] == ["2026-12-25T08:00:00Z"]
    missing = api.call("GET", "/v1/schedules/preview?expression=rate(1%20hour)&calendars=nope")
    assert missing.status == 422 and missing.fields() == ["query.calendars"]
    api.call("PUT", f"/v1/jobs/{job['id']}", job_spec())
    assert api.call("DELETE", "/v1/calendars/holidays").status == 204


def _range(hours_back: int, hours_long: int) -> dict[str, str]:
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = now - timedelta(hours=hours_back)
    return {"start": format_instant_ms(start), "end": format_instant_ms(start + timedelta(hours=hours_long))}


def test_backfill_is_202_idempotent_shows_progress_and_cancels(api: ApiClient) -> None:
    job = api.create(job_spec(schedule="cron(0 * * * ? *)", timezone="UTC"))
    body = _range(10, 4)
    first = api.call("POST", f"/v1/jobs/{job['id']}/backfill", body)
    assert first.status == 202, first
    assert first.body["slots"] == 4 and first.body["state"] == "RUNNING"
    assert first.body["progress"] == {"PENDING": 4}
    assert first.headers["Location"].endswith(f"/v1/jobs/{job['id']}/backfills/{first.body['id']}")
    again = api.call("POST", f"/v1/jobs/{job['id']}/backfill", body)
    assert (again.status, again.body["id"], again.body["slots"]) == (202, first.body["id"], 4)
    shown = api.call("GET", f"/v1/jobs/{job['id']}/backfills/{first.body['id']}")
    assert shown.status == 200 and shown.body["id"] == first.body["id"]
    cancelled = api.call("DELETE", f"/v1/jobs/{job['id']}/backfills/{first.body['id']}")
    assert cancelled.status == 200 and cancelled.body["state"] == "CANCELLED"
    assert api.call("GET", f"/v1/jobs/{job['id']}/backfills/{'0' * 20}").status == 404
    assert api.call("GET", f"/v1/jobs/{job['id']}/backfills/not-an-id").status == 404
    assert api.call("POST", f"/v1/jobs/{job['id']}/backfill", body, user=BOB).status == 404


def test_a_backfill_asked_again_with_other_dependants_is_409_not_the_first_one(api: ApiClient) -> None:
    """QA22: the same range asked for with include_dependants was answered 202 with the backfill
    made without it (its after() children never run), as if done as asked."""
    job = api.create(job_spec(schedule="cron(0 * * * ? *)", timezone="UTC"))
    path = f"/v1/jobs/{job['id']}/backfill"
    body = _range(10, 4)
    first = api.call("POST", path, body)
    assert first.status == 202 and first.body["include_dependants"] is False
    other = api.call("POST", path, {**body, "include_dependants": True})
    assert other.status == 409, other
    assert "without include_dependants" in other.problem["detail"], other.problem
    assert api.call("POST", path, body).status == 202  # the same request still answers it
    api.call("DELETE", f"/v1/jobs/{job['id']}/backfills/{first.body['id']}")
    again = api.call("POST", path, {**body, "include_dependants": True})  # cancelled: asked anew
    assert (again.status, again.body["id"], again.body["include_dependants"]) == (202, first.body["id"], True)


def test_bad_backfills_are_4xx_naming_the_problem(api: ApiClient) -> None:
    job = api.create(job_spec(schedule="cron(0/5 * * * ? *)", timezone="UTC"))
    path = f"/v1/jobs/{job['id']}/backfill"
    future = _range(1, 3)
    for body, field, words in [
        ({"start": "2026-01-01T00:00:00", "end": "2026-01-02T00:00:00Z"}, "start", ""),
        ({"start": "yesterday", "end": "2026-01-02T00:00:00Z"}, "start", ""),
        ({**_range(5, 1), "max_parallel": 0}, "max_parallel", ""),
        ({**_range(5, 1), "include_dependants": "yes"}, "include_dependants", ""),
        ({**_range(5, 1), "extra": 1}, "extra", ""),
        ({"start": _range(5, 1)["end"], "end": _range(5, 1)["start"]}, "end", "after start"),
        (future, "end", "in the future"),
        (_range(24 * 30, 24 * 10), "end", "more than 1000 slots"),
        ({"start": 1, "end": 2}, "start", ""),  # not epoch seconds
        ({"start": _range(5, 1)["start"], "end": 1.5e9}, "end", ""),
    ]:
        reply = api.call("POST", path, body, user=ALICE)
        assert reply.status == 422, (body, reply)
        assert field in reply.fields(), (body, reply.problem)
        assert words in reply.problem["detail"], (body, reply.problem)
        if words:  # QA: a range the backfill refuses was titled "Invalid job"
            assert reply.problem["title"] == "Invalid backfill", reply.problem
    assert api.call("POST", "/v1/jobs/nope/backfill", _range(5, 1)).status == 404


def test_a_backfill_instant_no_utc_date_holds_is_422_naming_it(api: ApiClient) -> None:
    """QA22: an end of 9999-12-31 west of UTC (or a start of 0001-01-01 east of it) is past the
    dates UTC can hold: the range check raised OverflowError, a 500."""
    job = api.create(job_spec(schedule="cron(0 * * * ? *)", timezone="UTC"))
    path = f"/v1/jobs/{job['id']}/backfill"
    for body, field in [
        ({"start": "2026-01-01T00:00:00Z", "end": "9999-12-31T23:59:59-14:00"}, "end"),
        ({"start": "0001-01-01T00:00:00+14:00", "end": "2026-01-01T00:00:00Z"}, "start"),
        ({"start": "2026-01-01T00:00:00Z", "end": "2200-01-01T00:00:00Z"}, "end"),
    ]:
        reply = api.call("POST", path, body)
        assert reply.status == 422, (body, reply)
        assert field in reply.fields() and "must be between 1970-01-01" in str(reply.problem), reply.problem
    assert api.call("GET", f"/v1/jobs/{job['id']}/executions").body["items"] == []


def test_a_calendar_zone_that_is_no_place_is_422_and_one_stored_before_still_works(api: ApiClient) -> None:
    """QA: a calendar took 'posix/Europe/Berlin', 'localtime', 'right/UTC' (refused for a job):
    its use then failed with a 500 (the job stored anyway), and so did every list of the tenant."""
    for zone in ("posix/Europe/Berlin", "localtime", "posixrules", "right/UTC"):
        reply = api.call("PUT", "/v1/calendars/c", {"timezone": zone, "dates": ["2026-12-25"]})
        assert reply.status == 422 and reply.fields() == ["timezone"], (zone, reply.problem)
        assert "not an IANA time zone" in str(reply.problem["errors"]), reply.problem
    # One stored before the rule is read as its place, as a job's legacy zone is
    api.call("PUT", "/v1/calendars/old", HOLIDAYS)
    job = api.create(job_spec(exclude_calendars=["old"]))
    key = calendar_key(ALICE_ID, "old")
    item = api.dynamodb.get_item(TableName=TABLE, Key=key)["Item"]
    doc = json.loads(item["doc"]["S"])
    api.dynamodb.update_item(
        TableName=TABLE,
        Key=key,
        UpdateExpression="SET doc = :d",
        ExpressionAttributeValues={":d": {"S": json.dumps({**doc, "timezone": "posix/Europe/Berlin"})}},
    )
    assert api.call("GET", f"/v1/jobs/{job['id']}").status == 200
    assert api.call("GET", "/v1/jobs").status == 200
    assert api.call("GET", "/v1/calendars/old").body["timezone"] == "posix/Europe/Berlin"
    preview = api.call(
        "GET",
        "/v1/schedules/preview?expression=cron(0%209%20*%20*%20%3F%20*)&timezone=Europe/Berlin&count=1"
        "&after=2026-12-24T12:00:00Z&calendars=old",
    )
    assert preview.status == 200 and preview.body["slots"] == ["2026-12-26T08:00:00Z"]
    second = api.call("POST", "/v1/jobs", job_spec(exclude_calendars=["old"]))
    assert second.status == 201


def test_if_none_match_star_creates_a_calendar_only_and_never_overwrites_one(api: ApiClient) -> None:
    """QA: If-None-Match: * was ignored; the PUT replaced the calendar (its dates wiped)."""
    created = api.call("PUT", "/v1/calendars/hol", HOLIDAYS, headers={"If-None-Match": "*"})
    assert created.status == 201
    again = api.call("PUT", "/v1/calendars/hol", {"dates": []}, headers={"If-None-Match": "*"})
    assert again.status == 412 and "exists" in again.problem["detail"], again.problem
    assert api.call("GET", "/v1/calendars/hol").body["dates"] == HOLIDAYS["dates"]
    odd = api.call("PUT", "/v1/calendars/other", {"dates": []}, headers={"If-None-Match": '"1"'})
    assert odd.status == 400 and odd.fields() == ["header.If-None-Match"], odd.problem
    assert api.call("GET", "/v1/calendars/other").status == 404
