"""Schedule semantics (QA 17): the preview answers as a job of the expression would be answered.

* ``show_excluded`` only adds the slots passed over: it never takes slots away. A run of more
  than :data:`MAX_SKIPPED_IN_A_ROW` excluded slots (an every-minute job in a fortnight's freeze)
  listed one by one stopped one short of the cap, so the API answered 200 with no slot (and
  19,999 excluded ones) where its own check meant a 422, and ``punctual next --show-excluded``
  printed no slot at all, exit 0, where without the flag it printed the first slot after the freeze.
* A zone a job refuses (``localtime``, ``posix/...``, ``Factory``) is refused by the preview too,
  as ``punctual next`` refuses it.
* An expression with no slot after the preview's instant (an ``at()`` that is past, a ``rate``
  whose first slot is after 2199) is a 422 naming it, as for a cron whose years are past, a job
  of it and ``punctual next``: not a 200 with no slots.
* A ``delay(...)`` job keeps to its ``end_at``: a first run past it is refused at registration
  (it ran once, past its end), and a chain that ends there leaves the job COMPLETED (it stayed
  ENABLED with nothing to run).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

import pytest

# The API's in-process harness lives beside the integration tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from api_harness import ApiClient
from api_harness import api as api  # the fixture

from punctual.timing.schedules import parse_schedule
from punctual.usecases.calendars import MAX_SKIPPED_IN_A_ROW, Calendar, included_slots
from punctual_cli import cli

FREEZE = [f"2027-01-{day:02d}" for day in range(1, 16)]  # 15 days: 21,600 minutes


def _freeze() -> Calendar:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    return Calendar.model_validate(
        {"name": "freeze", "timezone": "UTC", "dates": FREEZE, "created_at": now, "updated_at": now}
    )


def _preview(api: ApiClient, **query: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    reply = api.call("GET", "/v1/schedules/preview?" + urlencode(query))
    return reply.status, reply.body


def test_a_listing_stopped_by_the_cap_holds_the_whole_cap() -> None:
    schedule = parse_schedule("* * * * *")
    listed: list[datetime] = []
    after = datetime(2026, 12, 31, 23, 59, tzinfo=UTC)

    found = included_slots(lambda t: schedule.next_after(t), after, [_freeze()], 1, listed)

    assert found == []
    assert len(listed) == MAX_SKIPPED_IN_A_ROW  # so that a caller can tell the cap stopped it


def test_preview_with_show_excluded_never_answers_fewer_slots_silently(api: ApiClient) -> None:
    put = api.call("PUT", "/v1/calendars/freeze", {"timezone": "UTC", "dates": FREEZE})
    assert put.status == 201
    query = {"expression": "* * * * *", "after": "2026-12-31T23:59:00Z", "count": "1", "calendars": "freeze"}

    assert _preview(api, **query) == (200, {**_preview(api, **query)[1], "slots": ["2027-01-16T00:00:00Z"]})
    status, body = _preview(api, **query, show_excluded="true")

    assert status == 422, body.get("slots")
    assert body["errors"][0]["field"] == "query.calendars"


def test_the_preview_keeps_a_rate_on_its_grid_past_excluded_days(api: ApiClient) -> None:
    # QA28: the grid restarted where the walk over a run of excluded days resumed (00:00, not 00:30)
    assert api.call("PUT", "/v1/calendars/holiday", {"dates": ["2027-01-11"]}).status == 201
    query = {"after": "2027-01-10T23:30:00Z", "count": "2", "calendars": "holiday"}
    for expression, slots in (
        ("rate(1 hour)", ["2027-01-12T00:30:00Z", "2027-01-12T01:30:00Z"]),
        ("delay(1 hour)", ["2027-01-12T00:30:00Z"]),  # its first slot only, as without calendars
    ):
        for shown in ("false", "true"):
            status, body = _preview(api, expression=expression, show_excluded=shown, **query)
            assert (status, body["slots"]) == (200, slots), (expression, shown)


def test_punctual_next_show_excluded_says_the_cap_stopped_it(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["next", "* * * * *", "--after", "2026-12-31T23:59:00Z", "--count", "1"]
    for day in FREEZE:
        argv += ["--exclude-date", day]

    assert cli.main(argv) == 0
    assert capsys.readouterr().out.splitlines() == ["2027-01-16T00:00:00Z"]
    code = cli.main([*argv, "--show-excluded"])
    captured = capsys.readouterr()

    assert code == 2
    assert captured.out == ""
    assert str(MAX_SKIPPED_IN_A_ROW) in captured.err.replace(",", "")


@pytest.mark.parametrize("zone", ["localtime", "posix/Europe/Berlin", "right/UTC", "Factory", "posixrules"])
def test_preview_refuses_a_zone_a_job_refuses(api: ApiClient, zone: str) -> None:
    status, body = _preview(api, expression="0 0 * * *", timezone=zone)

    assert status == 422
    assert body["errors"][0]["field"] == "query.timezone"
    assert zone in body["errors"][0]["message"]


@pytest.mark.parametrize("expression", ["at(2020-01-01T00:00:00)", "rate(999999999 days)"])
def test_preview_of_an_expression_with_no_slot_left_is_422(api: ApiClient, expression: str) -> None:
    status, body = _preview(api, expression=expression, after="2026-12-05T00:00:00Z")

    assert status == 422, body
    assert body["errors"][0]["field"] == "query.expression"
    assert "2026-12-05T00:00:00Z" in body["errors"][0]["message"]


# --------------------------------------------------------------------------- delay() and end_at


class _DelaySim:
    """A delay(...) job over the job service, the poller and a worker on a manual clock."""

    def __init__(self, now: datetime) -> None:
        from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig
        from punctual.delivery.targets.base import TargetResult
        from punctual.runtime.clock import ManualClock
        from punctual.store.memory import MemoryStore
        from punctual.usecases.jobs import JobService, QueueRouting

        self.clock = ManualClock(now)
        self.rig = Rig(MemoryStore(), self.clock)
        self.jobs = JobService(
            self.rig.store, self.rig.queues, self.clock, LAYOUT, QueueRouting((SHORT,), (LONG,))
        )
        self.runs: list[str] = []
        self.rig.target = FakeTarget(lambda ctx: (self.runs.append(ctx.slot), TargetResult.ok())[1])
        self.worker = self.rig.worker()
        self.lanes = (SHORT, LONG)

    def run_for(self, span: timedelta, step: timedelta = timedelta(seconds=5)) -> None:
        end = self.clock.now() + span
        while self.clock.now() < end:
            self.clock.set(self.clock.now() + step)
            self.rig.poll(timedelta(hours=2))
            for lane in self.lanes:
                self.rig.work(self.worker, lane)


def test_a_delay_job_whose_first_run_is_past_end_at_is_refused_not_run() -> None:
    from factories import spec
    from punctual.usecases.job_errors import InvalidJobError

    sim = _DelaySim(datetime(2027, 1, 1, 10, 0, tzinfo=UTC))
    with pytest.raises(InvalidJobError, match="end_at"):  # its first run (10:10) is after end_at
        sim.jobs.register("default", spec("delay(10 minutes)", end_at="2027-01-01T10:05:00Z"), job_id="job-1")
    sim.run_for(timedelta(minutes=20))

    assert sim.runs == []


def test_a_delay_job_runs_nothing_after_end_at() -> None:
    from factories import spec

    sim = _DelaySim(datetime(2027, 1, 1, 10, 0, tzinfo=UTC))
    sim.jobs.register("default", spec("delay(10 minutes)", end_at="2027-01-01T10:25:00Z"), job_id="job-1")
    sim.run_for(timedelta(minutes=40))

    assert sim.runs == ["2027-01-01T10:10:00Z", "2027-01-01T10:20:00Z"]


def test_a_delay_job_past_end_at_is_completed() -> None:
    from factories import spec
    from punctual.models import JobState

    sim = _DelaySim(datetime(2027, 1, 1, 10, 0, tzinfo=UTC))
    sim.jobs.register("default", spec("delay(10 minutes)", end_at="2027-01-01T10:25:00Z"), job_id="job-1")
    sim.run_for(timedelta(minutes=40))

    assert sim.jobs.get("default", "job-1").state is JobState.COMPLETED


# --------------------------------------------------------------------------- refusals name the bound as given


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        (
            {"schedule": "at(2027-01-01T00:00:00)", "start_at": "2027-01-01T00:00:00.5Z"},
            "2027-01-01T00:00:00.500Z",
        ),
        (
            {
                "schedule": "cron(0 0 * * ? *)",
                "start_at": "2027-01-01T00:00:00.5Z",
                "end_at": "2027-01-01T00:00:00.9Z",
            },
            "2027-01-01T00:00:00.900Z",
        ),
    ],
)
def test_a_no_slot_refusal_names_a_sub_second_bound_as_it_is(fields: dict[str, str], named: str) -> None:
    """QA: 'no slot on or after start_at 2027-01-01T00:00:00Z: at(2027-01-01T00:00:00) is before it'
    read as a contradiction: the bound's fraction was cut from the message."""
    from factories import spec
    from punctual.usecases.job_errors import InvalidJobError

    sim = _DelaySim(datetime(2026, 12, 1, tzinfo=UTC))
    with pytest.raises(InvalidJobError, match=named.replace(".", r"\.")):
        sim.jobs.register("default", spec(**fields), job_id="job-1")


def test_preview_says_the_cap_stopped_it_only_for_a_run_in_a_row(api: ApiClient) -> None:
    """20,160 slots passed over in two runs of 10,080 (an hour between them, and the schedule ends
    after the second) are no run of more than 20,000 in a row: the answer lists them all."""
    week = {"start": "2027-12-18", "end": "2027-12-24"}
    assert api.call("PUT", "/v1/calendars/utc-week", {"timezone": "UTC", "ranges": [week]}).status == 201
    west = {"start": "2027-12-25", "end": "2027-12-31"}  # Etc/GMT+1: from 01:00Z on the 25th
    assert (
        api.call("PUT", "/v1/calendars/west-week", {"timezone": "Etc/GMT+1", "ranges": [west]}).status == 201
    )
    query = {
        "expression": "cron(* * * * ? 2027)",
        "after": "2027-12-17T23:59:00Z",
        "count": "100",
        "calendars": "utc-week,west-week",
        "show_excluded": "true",
    }

    status, body = _preview(api, **query)

    assert status == 200, body
    assert len(body["slots"]) == 60  # 00:00 to 00:59 on the 25th, UTC
    assert len(body["excluded"]) == 7 * 1440  # those before the last slot


def test_a_cron_whose_last_times_fall_in_dst_gaps_says_so_under_gap_skip() -> None:
    from punctual.timing.schedules import ScheduleError
    from punctual.timing.schedules.dst import DstOptions

    now = datetime(2026, 12, 5, tzinfo=UTC)
    with pytest.raises(ScheduleError, match=r"fall in daylight-saving gaps, which dst\.gap 'skip' skips"):
        parse_schedule("cron(30 2 14 3 ? 2027)", "America/New_York", DstOptions(gap="skip"), now=now)
    with pytest.raises(ScheduleError) as past:  # a cause of its own: named as before
        parse_schedule("cron(30 2 14 3 ? 2025)", "America/New_York", DstOptions(gap="skip"), now=now)
    assert "gap" not in str(past.value)


def test_an_at_job_that_would_fire_twice_in_a_repeated_hour_is_refused() -> None:
    from pydantic import ValidationError

    from punctual.models import ACCEPTED, Job, JobSpec

    body = {
        "schedule": "at(2027-11-07T01:30:00)",
        "timezone": "America/New_York",
        "dst": {"repeat": "both"},
        "target": {"type": "http", "url": "https://e.com/x"},
    }
    with pytest.raises(ValidationError, match="an at\\(\\) job fires once"):
        JobSpec.model_validate(body)
    JobSpec.model_validate({**body, "dst": {"repeat": "first"}})
    stamp = "2026-12-01T00:00:00Z"
    stored = {**body, "id": "a", "tenant": "t", "created_at": stamp, "updated_at": stamp, "anchor": stamp}
    assert Job.model_validate(stored, context=ACCEPTED).dst is not None  # stored: still readable
