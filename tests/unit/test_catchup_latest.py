"""Catch-up ``latest`` after an outage longer than one release's walk (QA): only the newest due
slot runs, or none when the regular slot is due at once; every other one is recorded MISSED."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from execution_harness import LAYOUT as RIG_LAYOUT
from execution_harness import Rig
from factories import spec
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.usecases.calendars import Calendar
from punctual.usecases.jobs import JobService, QueueRouting
from punctual.usecases.next_fire import NextFire
from simulation import LAYOUT, LONG, SHORT, Simulation


def T(h: int, m: int, s: int = 0) -> datetime:
    return datetime(2026, 12, 1, h, m, s, tzinfo=UTC)


@pytest.mark.parametrize("outage_minutes", [20, 45, 61, 100])
def test_latest_runs_no_late_slot_when_the_regular_one_is_due_and_records_every_other(
    outage_minutes: int,
) -> None:
    # Given a rate(1 minute) job with catch-up latest (window an hour), whose pollers stop after
    # 10:10 and come back `outage_minutes` later (the walk of one release takes 30 slots)
    store, clock = MemoryStore(), ManualClock(T(10, 0))
    sim = Simulation(store, clock, claim_latency_s=0.3)
    jobs = JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    jobs.register(
        "default",
        spec("rate(1 minute)", start_at="2026-12-01T10:00:00Z", catchup={"policy": "latest"}),
        job_id="j",
    )
    sim.run([T(10, m) for m in range(11)], until=T(10, 10, 30))
    back = T(10, 10) + timedelta(minutes=outage_minutes)  # the regular slot then is due at once
    clock.set(back + timedelta(seconds=1))  # the minute before is 61 s late: missed, not on time
    sim.run([back, back + timedelta(minutes=1)], until=back + timedelta(seconds=90))
    # Then no slot of the outage ran (the regular slot was due at once), and each is recorded
    ran = [datetime.fromisoformat(s) for s in sim.slots("j")]
    assert [s for s in ran if s > T(10, 10)] == [back, back + timedelta(minutes=1)]
    records = store.list_executions("default", "j", limit=1000).items
    covered = sum(r.slot_count or 1 for r in records if r.status.value == "MISSED")
    assert covered == outage_minutes - 1  # 10:11 up to the minute before the pollers came back


def paused_over_a_weekend(policy: str, excluded: list[str]) -> tuple[dict[str, tuple[str, str | None]], Rig]:
    """A daily 09:00 job (catch-up window 4 days) excluding the days ``excluded``, paused after
    Thursday's slot and resumed on Sunday at noon: its records by slot, and the rig."""
    rig = Rig(MemoryStore(), ManualClock(datetime(2026, 12, 2, 8, 0, tzinfo=UTC)))
    now = rig.clock.now()
    rig.store.put_calendar(Calendar(name="weekend", dates=excluded, created_at=now, updated_at=now), None)
    jobs = JobService(rig.store, rig.queues, rig.clock, RIG_LAYOUT, QueueRouting((SHORT,), (LONG,)))
    daily = spec(
        "cron(0 9 * * ? *)",
        catchup={"policy": policy, "window_seconds": 4 * 86400},
        exclude_calendars=["weekend"],
    )
    jobs.register("default", daily, job_id="j")
    worker = rig.worker()

    def run_until(instant: datetime) -> None:
        while rig.clock.now() < instant:
            rig.clock.advance(1)
            rig.poll()
            rig.work_until_idle(worker)

    for day in (2, 3):  # Wednesday's and Thursday's slots run
        rig.clock.set(datetime(2026, 12, day, 8, 59, 58, tzinfo=UTC))
        run_until(datetime(2026, 12, day, 9, 0, 2, tzinfo=UTC))
    jobs.pause("default", "j")
    rig.clock.set(datetime(2026, 12, 6, 12, 0, tzinfo=UTC))
    jobs.resume("default", "j")
    resumed_at = rig.clock.now()
    if policy == "latest":  # next_fire_at says the resume runs a slot now
        shown = NextFire(rig.store, rig.clock.now).of(rig.store.get_job("default", "j"))
        assert shown.next_fire_at == resumed_at
    run_until(resumed_at + timedelta(seconds=3))
    job = rig.store.get_job("default", "j")
    assert job is not None
    return {r.slot: (r.status.value, r.error) for r in rig.history(job)}, rig


FRI, SAT, SUN = "2026-12-04T09:00:00Z", "2026-12-05T09:00:00Z", "2026-12-06T09:00:00Z"
EXCLUDED = ("EXCLUDED", "excluded by calendar 'weekend' (version 1)")


def test_latest_runs_the_newest_slot_no_calendar_excludes() -> None:
    """QA22: with catch-up latest, a newest owed slot on an excluded day (a weekend calendar) was
    recorded EXCLUDED and every older one MISSED "a newer slot ran instead": none ran. The newest
    slot that runs is the newest one not excluded; the excluded ones are recorded EXCLUDED."""
    records, rig = paused_over_a_weekend("latest", ["2026-12-05", "2026-12-06"])
    assert (records[FRI], records[SAT], records[SUN]) == (("SUCCEEDED", None), EXCLUDED, EXCLUDED)
    assert [slot for slot, _ in rig.target.calls_for("j")][-1] == FRI


@pytest.mark.parametrize(
    ("policy", "excluded", "friday", "sunday"),
    [
        ("none", ["2026-12-05", "2026-12-06"], "MISSED", "EXCLUDED"),
        ("latest", ["2026-12-05"], "MISSED", "SUCCEEDED"),
        ("all", ["2026-12-05"], "SUCCEEDED", "SUCCEEDED"),
    ],
)
def test_a_slot_the_catch_up_policy_drops_on_an_excluded_day_is_excluded_not_missed(
    policy: str, excluded: list[str], friday: str, sunday: str
) -> None:
    """QA22: a slot on an excluded day that the catch-up policy dropped was recorded MISSED (with a
    missed alert and event), although it would not have run: the calendar decides it first."""
    records, _ = paused_over_a_weekend(policy, excluded)
    assert (records[FRI][0], records[SAT], records[SUN][0]) == (friday, EXCLUDED, sunday)


def test_latest_after_an_outage_runs_the_newest_late_slot_when_the_one_due_at_once_is_excluded() -> None:
    # Given an hourly job with catch-up latest (window 4 h) excluding 2 December, pollers down from
    # 21:30 on the 1st until the 2nd's midnight slot is due
    rig = Rig(MemoryStore(), ManualClock(T(20, 0)))
    now = rig.clock.now()
    rig.store.put_calendar(Calendar(name="h", dates=["2026-12-02"], created_at=now, updated_at=now), None)
    jobs = JobService(rig.store, rig.queues, rig.clock, RIG_LAYOUT, QueueRouting((SHORT,), (LONG,)))
    jobs.register(
        "default",
        spec(
            "cron(0 * * * ? *)",
            catchup={"policy": "latest", "window_seconds": 14400},
            exclude_calendars=["h"],
        ),
        job_id="j",
    )
    worker = rig.worker()
    rig.clock.set(T(21, 0, 1))
    rig.poll()
    rig.work_until_idle(worker)
    # When they come back with the 2nd's first slot (excluded) due at once
    rig.clock.set(datetime(2026, 12, 2, 0, 0, 30, tzinfo=UTC))
    rig.poll(lookback=timedelta(hours=4))
    rig.work_until_idle(worker)
    # Then the newest late slot not excluded, 23:00, runs in its place; 22:00 is MISSED
    job = rig.store.get_job("default", "j")
    assert job is not None
    records = {r.slot: r.status.value for r in rig.history(job)}
    assert records == {
        "2026-12-01T21:00:00Z": "SUCCEEDED",
        "2026-12-01T22:00:00Z": "MISSED",
        "2026-12-01T23:00:00Z": "SUCCEEDED",
        "2026-12-02T00:00:00Z": "EXCLUDED",
    }
