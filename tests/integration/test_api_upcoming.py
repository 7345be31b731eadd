"""``GET /v1/jobs/{id}/upcoming``: a job's own next slots, as its chain will release them (its
anchor and start_at, end_at, time zone, jitter, excluded calendars), where the expression preview
knows none of these (QA17: a rate() job with a start_at could not be previewed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

from api_harness import BOB, ApiClient, http_spec
from api_harness import api as api  # the fixture

BERLIN = ZoneInfo("Europe/Berlin")


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _upcoming(api: ApiClient, job_id: str, **query: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    suffix = "?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else ""
    reply = api.call("GET", f"/v1/jobs/{job_id}/upcoming{suffix}")
    return reply.status, reply.body


def test_weekday_mornings_in_berlin_pass_over_an_excluded_day(api: ApiClient) -> None:
    now = datetime.now(BERLIN)
    days = [now.date() + timedelta(days=n) for n in range(30)]
    weekdays = [
        d for d in days if d.weekday() < 5 and datetime(d.year, d.month, d.day, 9, tzinfo=BERLIN) > now
    ]
    holiday = weekdays[2]
    put = api.call(
        "PUT", "/v1/calendars/holidays", {"timezone": "Europe/Berlin", "dates": [holiday.isoformat()]}
    )
    assert put.status == 201
    job = api.create(
        http_spec(
            schedule="cron(0 9 ? * MON-FRI *)", timezone="Europe/Berlin", exclude_calendars=["holidays"]
        )
    )

    status, body = _upcoming(api, job["id"], count="5")

    assert status == 200, body
    expected = [d for d in weekdays if d != holiday][:5]
    nine = [datetime(d.year, d.month, d.day, 9, tzinfo=BERLIN).astimezone(UTC) for d in expected]
    assert [_instant(s["slot"]) for s in body["slots"]] == nine
    assert [s["fires_at"] for s in body["slots"]] == [s["slot"] for s in body["slots"]]  # no jitter
    assert body["state"] == "ENABLED" and body["note"] is None


def test_a_rate_job_counts_from_its_start_at_and_stops_at_its_end_at(api: ApiClient) -> None:
    start = (datetime.now(UTC) + timedelta(days=1)).replace(hour=10, minute=17, second=0, microsecond=0)
    end = start + timedelta(hours=2, minutes=30)
    job = api.create(
        http_spec(schedule="rate(1 hour)", start_at=start.isoformat(), end_at=end.isoformat(), timezone="UTC")
    )

    status, body = _upcoming(api, job["id"])

    assert status == 200, body
    assert [_instant(s["slot"]) for s in body["slots"]] == [start + timedelta(hours=n) for n in range(3)]


def test_a_jittered_slot_fires_within_its_jitter(api: ApiClient) -> None:
    job = api.create(http_spec(schedule="rate(1 hour)", timezone="UTC", jitter_seconds=600))

    status, body = _upcoming(api, job["id"], count="20")

    assert status == 200 and len(body["slots"]) == 20
    for item in body["slots"]:
        offset = (_instant(item["fires_at"]) - _instant(item["slot"])).total_seconds()
        assert 0 <= offset <= 600
    slots = [_instant(s["slot"]) for s in body["slots"]]
    assert slots == sorted(slots) and all(b - a == timedelta(hours=1) for a, b in pairwise(slots))


def test_jobs_that_release_no_slot_of_their_own_say_why(api: ApiClient) -> None:
    parent = api.create(http_spec(schedule="rate(1 hour)", timezone="UTC"))
    child = api.create(http_spec(schedule=f"after({parent['id']})"))
    paused = api.create(http_spec(schedule="rate(1 hour)", timezone="UTC"))
    assert api.call("POST", f"/v1/jobs/{paused['id']}/pause").status == 200
    delayed = api.create(http_spec(schedule="delay(10 minutes)", timezone="UTC"))

    for job_id, says in ((child["id"], "after()"), (paused["id"], "PAUSED"), (delayed["id"], "delay()")):
        status, body = _upcoming(api, job_id)
        assert status == 200 and body["slots"] == [] and says in body["note"]
        # (QA23: a delay() job's note sent the reader to next_fire_at, which is null for it)
        assert (
            "next_fire_at" not in body["note"] or api.call("GET", f"/v1/jobs/{job_id}").body["next_fire_at"]
        )


def test_another_tenants_job_and_bad_counts_are_refused(api: ApiClient) -> None:
    job = api.create(http_spec(schedule="rate(1 hour)", timezone="UTC"))

    assert api.call("GET", f"/v1/jobs/{job['id']}/upcoming", user=BOB).status == 404
    assert _upcoming(api, "no-such-job")[0] == 404
    for count in ("0", "101", "x"):
        status, body = _upcoming(api, job["id"], count=count)
        assert status == 422 and body["errors"][0]["field"] == "query.count"


def test_an_at_job_lists_its_one_slot_and_then_none(api: ApiClient) -> None:
    when = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    job = api.create(http_spec(schedule=f"at({when.replace(tzinfo=None).isoformat()})", timezone="UTC"))

    status, body = _upcoming(api, job["id"], count="3")

    assert status == 200 and [_instant(s["slot"]) for s in body["slots"]] == [when]


def test_a_job_whose_slots_left_are_all_excluded_says_so_not_that_none_is_left(api: ApiClient) -> None:
    """QA22: an at() job whose one slot, years ahead, is on an excluded day was said to have 'no slot
    left: its end_at passed, or its one slot did', which neither had."""
    when = (datetime.now(UTC) + timedelta(days=3)).replace(hour=9, minute=0, second=0, microsecond=0)
    day = when.date().isoformat()
    assert api.call("PUT", "/v1/calendars/freeze", {"dates": [day]}).status == 201
    job = api.create(
        http_spec(schedule=f"at({when.replace(tzinfo=None).isoformat()})", exclude_calendars=["freeze"])
    )

    status, body = _upcoming(api, job["id"])

    assert status == 200 and body["slots"] == []
    assert "calendars exclude" in body["note"] and "freeze" in body["note"], body
    assert "end_at passed" not in body["note"]
