"""Exclusion calendars: days in a calendar's zone, across DST changes and zones; excluded slots are
recorded EXCLUDED at release against the calendar's version, and skipped by next_fire_at."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from execution_harness import LAYOUT, LONG, SHORT
from factories import spec
from punctual.dispatch.polling import Poller, PollerConfig
from punctual.dispatch.queues import MemoryQueues, QueueRouting
from punctual.models import ExecutionStatus, JobState
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.schedules import parse_schedule
from punctual.timing.timers import Lane, minutes_between, slot_key
from punctual.usecases.calendar_service import CalendarInUse, CalendarNotFound, CalendarService
from punctual.usecases.calendars import Calendar, CalendarSpec, days_of, excluding, included_slots
from punctual.usecases.job_errors import InvalidJobError, PreconditionFailedError
from punctual.usecases.jobs import JobService

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def calendar(timezone: str = "UTC", dates: list[str] | None = None, **more: object) -> Calendar:
    return Calendar.model_validate(
        {"name": "c", "timezone": timezone, "dates": dates or [], "created_at": T0, "updated_at": T0, **more}
    )


def hourly_between(start: datetime, end: datetime) -> list[datetime]:
    return [start + timedelta(hours=h) for h in range(int((end - start) / timedelta(hours=1)))]


# --------------------------------------------------------------------------- days and zones


def test_a_day_is_a_day_of_the_calendars_zone_across_dst_changes() -> None:
    berlin = calendar("Europe/Berlin", ["2026-03-29", "2026-10-25"])
    # 2026-03-29 (spring forward) has 23 hours in Berlin, 2026-10-25 (fall back) has 25
    spring = [s for s in hourly_between(datetime(2026, 3, 28, tzinfo=UTC), datetime(2026, 3, 31, tzinfo=UTC))]
    autumn = [
        s for s in hourly_between(datetime(2026, 10, 24, tzinfo=UTC), datetime(2026, 10, 27, tzinfo=UTC))
    ]
    assert sum(berlin.excludes(s) for s in spring) == 23
    assert sum(berlin.excludes(s) for s in autumn) == 25
    # The first excluded UTC hour is local midnight: 23:00Z the day before (CET, +1)...
    assert min(s for s in spring if berlin.excludes(s)) == datetime(2026, 3, 28, 23, tzinfo=UTC)
    # ...and the day ends at local midnight, 22:00Z (CEST, +2) on the spring day, 23:00Z in autumn
    assert max(s for s in spring if berlin.excludes(s)) == datetime(2026, 3, 29, 21, tzinfo=UTC)
    assert max(s for s in autumn if berlin.excludes(s)) == datetime(2026, 10, 25, 22, tzinfo=UTC)


def test_the_same_instant_is_on_different_days_in_different_zones() -> None:
    instant = datetime(2026, 12, 24, 20, 0, tzinfo=UTC)  # Christmas Day in Auckland, Eve in New York
    auckland = calendar("Pacific/Auckland", ["2026-12-25"])
    new_york = calendar("America/New_York", ["2026-12-25"])
    assert auckland.excludes(instant) and not new_york.excludes(instant)
    assert excluding([new_york, auckland], instant) is auckland
    assert not new_york.excludes(instant + timedelta(hours=8, minutes=59))  # 23:59 on the 24th there
    assert new_york.excludes(instant + timedelta(hours=9))  # 00:00 on the 25th in New York (05:00Z)


def test_ranges_include_both_ends_and_bad_input_is_named() -> None:
    spanning = calendar(ranges=[{"start": "2026-12-30", "end": "2027-01-02"}])
    assert days_of(spanning) == {date(2026, 12, 30), date(2026, 12, 31), date(2027, 1, 1), date(2027, 1, 2)}
    assert spanning.excludes(datetime(2027, 1, 2, 23, 59, tzinfo=UTC))
    assert not spanning.excludes(datetime(2027, 1, 3, tzinfo=UTC))
    for bad, words in [
        ({"timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"dates": ["2026-02-30"]}, "dates[0]"),
        ({"dates": ["25.12.2026"]}, "is not a date"),
        ({"ranges": [{"start": "2026-12-02", "end": "2026-12-01"}]}, "before its start"),
        ({"ranges": [{"start": "2026-12-01"}]}, "end"),
        ({"weekends": True}, "weekends"),
    ]:
        with pytest.raises(ValueError, match=r".") as refused:
            CalendarSpec.model_validate(bad)
        assert words in str(refused.value), (bad, str(refused.value))


# --------------------------------------------------------------------------- the property


schedules_under_test = st.sampled_from(
    ["cron(0 * * * ? *)", "cron(30 9 ? * MON-FRI *)", "*/30 * * * *", "rate(7 hours)", "cron(0 2 * * ? *)"]
)
zones = st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Pacific/Auckland", "Asia/Kolkata"])


@settings(max_examples=50, deadline=None)
@given(
    expression=schedules_under_test,
    job_zone=zones,
    calendar_zone=zones,
    offsets=st.sets(st.integers(min_value=-1, max_value=8), max_size=6),
    start_day=st.integers(min_value=0, max_value=365),
)
def test_slots_with_a_calendar_are_the_slots_without_it_minus_the_excluded_days(
    expression: str, job_zone: str, calendar_zone: str, offsets: set[int], start_day: int
) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=start_day)
    days = sorted({(start + timedelta(days=o)).date().isoformat() for o in offsets})
    cal = calendar(calendar_zone, days)
    schedule = parse_schedule(expression, job_zone, now=start)
    end = start + timedelta(days=7)
    without: list[datetime] = []
    slot = schedule.next_after(start, start)
    while slot is not None and slot < end:
        without.append(slot)
        slot = schedule.next_after(slot, start)
    excluded: list[datetime] = []
    kept = included_slots(lambda t: schedule.next_after(t, start), start, [cal], 5000, excluded, until=end)
    zone = ZoneInfo(calendar_zone)
    assert kept == [s for s in without if s.astimezone(zone).date().isoformat() not in days]
    assert sorted(kept + excluded) == without
    # And passing over each run of excluded days at once (no list asked for) finds the same slots
    assert (
        included_slots(lambda t: schedule.next_after(t, start), start, [cal], 5000, None, until=end) == kept
    )


@settings(max_examples=60, deadline=None)
@given(
    expression=st.sampled_from(
        ["cron(0 * * * ? *)", "cron(30 9 ? * MON-FRI *)", "rate(13 minutes)", "cron(0 0 * * ? *)"]
    ),
    job_zone=zones,
    # and zones whose clocks change at midnight (Santiago, Havana, Beirut): a day may begin at 01:00
    calendar_zone=st.sampled_from(
        ["UTC", "Europe/Berlin", "America/Santiago", "America/Havana", "Asia/Beirut"]
    ),
    runs=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 20)), max_size=4),
    singles=st.sets(st.integers(0, 60), max_size=6),
    start_day=st.integers(min_value=0, max_value=365),
)
def test_the_next_included_slots_pass_over_long_runs_of_excluded_days_as_a_walk_would(
    expression: str,
    job_zone: str,
    calendar_zone: str,
    runs: list[tuple[int, int]],
    singles: set[int],
    start_day: int,
) -> None:
    """next_fire_at, the preview and ``punctual next`` jump over a run of excluded days (a fortnight
    of a rate(1 minute) job is 20,160 slots): the same slots as stepping through each one."""
    start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=start_day)
    day = lambda offset: (start + timedelta(days=offset)).date().isoformat()  # noqa: E731
    cal = calendar(
        calendar_zone,
        sorted({day(o) for o in singles}),
        ranges=[{"start": day(first), "end": day(first + length)} for first, length in runs],
    )
    schedule = parse_schedule(expression, job_zone, now=start)
    walked: list[datetime] = []
    next_after = lambda t: schedule.next_after(t, start)  # noqa: E731
    expected = included_slots(next_after, start, [cal], 3, walked)
    if len(walked) >= 19_999:
        return  # the walk gave up (the bound the jump does not need)
    assert included_slots(next_after, start, [cal], 3) == expected


def test_a_job_in_a_fortnight_excluded_shows_its_next_slot_after_it() -> None:
    """A rate(1 minute) job excluded for a fortnight: its next slot is the first after the range (it
    was null, as for a job that never fires again, past 20,000 excluded slots in a row)."""
    world = World(T0)
    world.calendars.put(
        "default", "freeze", CalendarSpec(ranges=[{"start": "2026-11-30", "end": "2026-12-14"}])
    )
    job, _ = world.jobs.register("default", spec("rate(1 minute)", exclude_calendars=["freeze"]))
    assert world.jobs.get("default", job.id).next_fire_at == datetime(2026, 12, 15, tzinfo=UTC)


# --------------------------------------------------------------------------- release and next_fire_at


class World:
    """A job service, a poller and a calendar service over one in-memory store."""

    def __init__(self, now: datetime) -> None:
        self.store = MemoryStore()
        self.clock = ManualClock(now)
        self.queues = MemoryQueues(now=self.clock.now)
        routing = QueueRouting((SHORT,), (LONG,))
        self.jobs = JobService(self.store, self.queues, self.clock, LAYOUT, routing)
        self.calendars = CalendarService(self.store, self.clock)
        config = PollerConfig(
            layout=LAYOUT, short_queue_urls=(SHORT,), long_queue_urls=(LONG,), concurrency=1
        )
        self.poller = Poller(self.store, self.queues, self.clock, config)
        self.released: set[tuple[str, str]] = set()

    def poll(self) -> None:
        now = self.clock.now()
        due = []
        for minute in minutes_between(now - timedelta(minutes=5), now):
            for lane, count in ((Lane.FAR, LAYOUT.shard_count), (Lane.NEAR, LAYOUT.near_shard_count)):
                for shard in range(count):
                    due += [
                        t
                        for t in self.store.query_timers(lane, minute, shard)
                        if t.due <= now and (t.pk, t.sk) not in self.released
                    ]
        self.poller.release(due)
        self.released |= {(t.pk, t.sk) for t in due}

    def sent(self) -> list[str]:
        return [m.slot for m in self.queues.all_messages()]


def test_an_excluded_slot_is_recorded_with_the_calendar_version_and_a_change_applies_next_slot() -> None:
    # Given a daily 09:00 Berlin job that excludes a Berlin holiday calendar
    world = World(datetime(2026, 12, 23, 12, 0, tzinfo=UTC))
    world.calendars.put(
        "default", "holidays", CalendarSpec(timezone="Europe/Berlin", dates=["2026-12-24", "2026-12-25"])
    )
    job, _ = world.jobs.register(
        "default", spec("cron(0 9 * * ? *)", timezone="Europe/Berlin", exclude_calendars=["holidays"])
    )
    # Then next_fire_at passes over the holidays
    assert job.next_fire_at == datetime(2026, 12, 26, 8, 0, tzinfo=UTC)
    # When the 24th's slot is due, it is not sent but recorded EXCLUDED, naming the calendar's version
    world.clock.set(datetime(2026, 12, 24, 8, 0, 1, tzinfo=UTC))
    world.poll()
    assert world.sent() == []
    [excluded] = world.store.list_executions("default", job.id, 10).items
    assert excluded.status is ExecutionStatus.EXCLUDED and excluded.slot == "2026-12-24T08:00:00Z"
    assert excluded.error == "excluded by calendar 'holidays' (version 1)"
    # When the calendar drops the 25th before that slot, the 25th fires: no job was rewritten
    world.calendars.put("default", "holidays", CalendarSpec(timezone="Europe/Berlin", dates=["2026-12-24"]))
    assert world.jobs.get("default", job.id).next_fire_at == datetime(2026, 12, 25, 8, 0, tzinfo=UTC)
    world.clock.set(datetime(2026, 12, 25, 8, 0, 1, tzinfo=UTC))
    world.poll()
    assert world.sent() == ["2026-12-25T08:00:00Z"]
    assert world.store.get_job("default", job.id).version == job.version  # type: ignore[union-attr]
    # And a repeated release of the 24th records nothing new
    world.poller.release(world.store.query_timers(Lane.FAR, datetime(2026, 12, 24, 8, 0, tzinfo=UTC), 0))
    assert [r.slot for r in world.store.list_executions("default", job.id, 10).items] == [
        "2026-12-24T08:00:00Z"
    ]


def test_a_delay_chain_goes_on_past_an_excluded_slot() -> None:
    # QA28: a delay() job's next slot is written by its run's end; a slot its calendar excluded had
    # no run, so nothing wrote one: the job stayed ENABLED and never fired again (until the auditor
    # rearmed it as a broken chain, up to its period later)
    world = World(datetime(2026, 12, 23, 23, 30, tzinfo=UTC))
    world.calendars.put("default", "holidays", CalendarSpec(dates=["2026-12-24"]))
    job, _ = world.jobs.register("default", spec("delay(1 hour)", exclude_calendars=["holidays"]))
    done, _ = world.jobs.register(
        "default",
        spec("delay(1 hour)", exclude_calendars=["holidays"], end_at="2026-12-24T02:00:00Z"),
        job_id="ends",
    )
    while world.clock.now() < datetime(2026, 12, 25, 2, 0, tzinfo=UTC):
        world.clock.advance(600)
        world.poll()
    # Then each slot on the holiday is recorded EXCLUDED, an hour after the one before it, and the
    # chain goes on to the next day, whose first slot is sent
    records = world.store.list_executions("default", job.id, 100).items
    assert {r.status for r in records} == {ExecutionStatus.EXCLUDED} and len(records) == 24
    assert [m.slot[:10] for m in world.queues.all_messages()] == ["2026-12-25"]
    # And a chain that ends on the holiday completes its job, as its last run's end would have
    assert world.jobs.get("default", done.id).state is JobState.COMPLETED
    assert world.jobs.get("default", job.id).state is JobState.ENABLED


def test_a_calendar_in_use_is_not_deleted_and_unknown_calendars_are_refused() -> None:
    world = World(T0)
    with pytest.raises(InvalidJobError) as unknown:
        world.jobs.register("default", spec("rate(1 hour)", exclude_calendars=["nope"]))
    assert unknown.value.field == "exclude_calendars" and "'nope' does not exist" in str(unknown.value)
    world.calendars.put("default", "h", CalendarSpec(dates=["2026-12-25"]))
    world.jobs.register("default", spec("rate(1 hour)", exclude_calendars=["h"]), job_id="a")
    world.jobs.register("default", spec("rate(1 hour)", exclude_calendars=["h"]), job_id="b")
    with pytest.raises(CalendarInUse) as used:
        world.calendars.delete("default", "h")
    assert used.value.jobs == ["a", "b"] and "'a', " not in str(used.value) and "a, b" in str(used.value)
    world.jobs.delete("default", "a")
    world.jobs.replace("default", "b", spec("rate(1 hour)"))  # b no longer excludes it
    # A user recorded by a create that failed later is pruned
    world.store.use_calendars("default", "ghost", ["h"], present=True)
    with pytest.raises(PreconditionFailedError):
        world.calendars.delete("default", "h", expected_version=2)
    world.calendars.delete("default", "h", expected_version=1)
    with pytest.raises(CalendarNotFound):
        world.calendars.get("default", "h")


def test_each_change_bumps_the_version() -> None:
    world = World(T0)
    first, created = world.calendars.put("default", "h", CalendarSpec(dates=["2026-12-25"]))
    second, again = world.calendars.put(
        "default", "h", CalendarSpec(dates=["2026-12-26"]), expected_version=1
    )
    assert (first.version, created, second.version, again) == (1, True, 2, False)
    assert second.created_at == first.created_at
    with pytest.raises(PreconditionFailedError):
        world.calendars.put("default", "h", CalendarSpec(), expected_version=1)
    assert slot_key(T0) == "2026-11-30T10:00:00Z"
