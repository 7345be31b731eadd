"""The catch-up pace may delay a held slot, never change its fate
(:mod:`punctual.dispatch.polling.fate_lines`).

A slot released more than 60 s after its instant is judged by its job's catch-up policy, and one
past ``catchup.window_seconds`` is MISSED whatever the policy: a pace that holds owed timers past
those lines turned slots that would have run into MISSED ones (QA 2026-12-07: a dead poller's
minute of 600 catch-up ``none`` jobs 35 s late, workers claiming 20 a second: 70 MISSED paced,
none unpaced). The in-process rig (:class:`simulation.SteadyWorkers`) as in
``tests/unit/test_catchup_pace.py``: "unpaced" is a queue port that cannot count its backlog.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from punctual.models import ExecutionStatus

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _dead_pollers_minute(
    counted: bool, jobs_due: int, schedule: str, catchup: dict[str, Any]
) -> dict[str, int]:
    """``jobs_due`` jobs of five tenants first due at 12:00:45, whose minute's poller died (the
    next minute's takes it up at 12:01:20, 35 s on); workers claiming 20 a second. What became of
    their slots due by the end: how many ran (first claims), were MISSED, were sent more than once."""
    from factories import spec
    from punctual.runtime.clock import ManualClock
    from punctual.store.memory import MemoryStore
    from punctual.usecases.jobs import JobService, QueueRouting
    from simulation import LONG, SHORT, SteadyWorkers

    clock = ManualClock(T - timedelta(minutes=2))
    rig = type("Workers", (SteadyWorkers,), {"RATE": 20.0, "counted": counted})
    store = MemoryStore()
    sim = rig(store, clock)
    jobs = JobService(store, sim.queues, clock, sim.config.layout, QueueRouting((SHORT,), (LONG,)))
    due = (T + timedelta(seconds=45)).isoformat()
    owed = {
        jobs.register(f"tenant-{i % 5}", spec(schedule, start_at=due, catchup=catchup))[0].id
        for i in range(jobs_due)
    }
    sim.run([T + timedelta(minutes=1), T + timedelta(minutes=2)], until=T + timedelta(minutes=3))
    missed = sum(
        record.slot_count or 1
        for (_, job, _), record in store._executions.items()
        if job in owed and record.status is ExecutionStatus.MISSED
    )
    ran = sum(1 for (job, _) in sim.started if job in owed)
    sent = [(m.job_id, m.slot) for _, m in sim.queues.log if m.job_id in owed]
    return {"ran": ran, "missed": missed, "sent twice": len(sent) - len(set(sent))}


@pytest.mark.parametrize(
    ("schedule", "catchup"),
    [
        ("rate(1 hour)", {"policy": "none"}),
        ("rate(20 seconds)", {"policy": "latest"}),
        ("rate(1 hour)", {"policy": "all", "window_seconds": 0}),
        ("rate(1 hour)", {"policy": "all", "window_seconds": 80}),
    ],
)
def test_a_held_dead_pollers_minute_runs_every_slot_it_ran_unpaced(
    schedule: str, catchup: dict[str, Any]
) -> None:
    # Given a dead poller's minute of 1,000 jobs whose slots are 35 s late when the next poller
    # takes the minute up, and workers claiming 20 a second: unpaced, every slot goes out at once,
    # under 60 s late (under the window), and runs
    unpaced = _dead_pollers_minute(False, 1000, schedule, catchup)
    assert unpaced["missed"] == 0 and unpaced["ran"] > 0
    # When the pace holds them (the queues hold a second of the workers' work: 50 s to send all)
    paced = _dead_pollers_minute(True, 1000, schedule, catchup)
    # Then each still goes out before its fate line: none is MISSED for the hold, every slot that
    # ran unpaced runs, and once (none is sent twice)
    assert paced["missed"] == 0, paced
    assert paced["ran"] == unpaced["ran"] and paced["sent twice"] == unpaced["sent twice"] == 0


@pytest.mark.parametrize(
    ("catchup", "keep_s"),
    [
        ({"policy": "all"}, 3600),
        ({"policy": "all", "window_seconds": 20}, 60),
        ({"policy": "latest"}, 60),
        ({"policy": "none"}, 60),
    ],
)
def test_a_chain_timer_carries_the_line_past_which_its_fate_could_change(
    catchup: dict[str, Any], keep_s: int
) -> None:
    from factories import job
    from punctual.dispatch.polling.fate_lines import fate_line_ms
    from punctual.timing.fate import noted_line_ms
    from punctual.timing.slots import fire_timer
    from punctual.timing.timers import TimerKind, TimerLayout, to_ms

    owing = job(schedule="rate(1 minute)", catchup=catchup)
    slot, now = T, T + timedelta(minutes=5)
    late = fire_timer(TimerLayout(), owing, slot, now, chained=True)
    ahead = fire_timer(TimerLayout(), owing, now + timedelta(minutes=1), now)
    resumed = fire_timer(TimerLayout(), owing, slot, now, resumed=True)
    assert (late.kind, ahead.kind, resumed.kind) == (TimerKind.CATCHUP, TimerKind.FIRE, TimerKind.RESUME)
    # The line is the first slot's instant plus what its policy allows (not the clamped due)
    assert noted_line_ms(late.owner, to_ms(slot)) == fate_line_ms(late) == to_ms(slot) + 1000 * keep_s
    assert fate_line_ms(ahead) == to_ms(now + timedelta(minutes=1)) + 1000 * keep_s
    # A resumed chain's first slots were owed by the pause: they wait for nothing
    assert fate_line_ms(resumed) == to_ms(slot)


def test_timers_written_before_lines_were_noted_are_held_no_longer_than_a_minute() -> None:
    from dataclasses import replace

    from factories import job
    from punctual.dispatch.polling.fate_lines import FateIndex, fate_line_ms
    from punctual.timing.slots import MISSED_AFTER_S, fire_timer
    from punctual.timing.timers import TimerKind, TimerLayout, to_ms

    owing = job(schedule="rate(1 minute)")
    fire = replace(fire_timer(TimerLayout(), owing, T, T - timedelta(minutes=5)), owner=None)
    catchup = replace(fire_timer(TimerLayout(), owing, T, T + timedelta(minutes=5), chained=True), owner=None)
    retry = replace(fire, kind=TimerKind.RETRY)
    assert fate_line_ms(fire) == to_ms(T) + 1000 * MISSED_AFTER_S
    assert fate_line_ms(catchup) == to_ms(T)  # (its first slot's instant: not held)
    assert fate_line_ms(retry) is None  # (no slot of it is judged by its lateness)
    # The index gives them earliest line first, only those due by the instant asked
    index = FateIndex([fire, retry, catchup])
    assert len(index) == 2
    assert index.due(to_ms(T), 10) == [catchup] and index.due(to_ms(T) + 60_000, 10) == [fire]


def _two_dead_pollers_minutes(counted: bool, store: Any = None) -> dict[str, int]:
    """Two minutes whose pollers died: 12:00 with 2,000 catch-up ``all`` jobs due at 12:00:30,
    12:01 with 300 catch-up ``none`` jobs due at 12:01:45 (35 s late when the 12:02 poller owes
    that minute); workers claiming 20 a second. What became of the ``none`` jobs' slots."""
    from factories import spec
    from punctual.runtime.clock import ManualClock
    from punctual.store.memory import MemoryStore
    from punctual.usecases.jobs import JobService, QueueRouting
    from simulation import LONG, SHORT, SteadyWorkers

    clock = ManualClock(T - timedelta(minutes=2))
    rig = type("Workers", (SteadyWorkers,), {"RATE": 20.0, "counted": counted})
    store = store or MemoryStore()
    sim = rig(store, clock)
    jobs = JobService(store, sim.queues, clock, sim.config.layout, QueueRouting((SHORT,), (LONG,)))
    first, second = (T + timedelta(seconds=30)).isoformat(), (T + timedelta(seconds=105)).isoformat()
    owing = {jobs.register(f"all-{i % 5}", spec("rate(1 hour)", start_at=first))[0].id for i in range(2000)}
    owed = {
        jobs.register(f"none-{i % 5}", spec("rate(1 hour)", start_at=second, catchup={"policy": "none"}))[
            0
        ].id
        for i in range(300)
    }
    minutes = [T + timedelta(minutes=m) for m in (2, 3, 4)]
    sim.run(minutes, until=T + timedelta(minutes=5))
    missed = sum(
        1
        for (_, job, _), record in store._executions.items()
        if job in owed and record.status is ExecutionStatus.MISSED
    )
    sent = [(m.job_id, m.slot) for _, m in sim.queues.log if m.job_id in owed]
    return {
        "ran": sum(1 for (job, _) in sim.started if job in owed),
        "missed": missed,
        "sent twice": len(sent) - len(set(sent)),
        "all ran": sum(1 for (job, _) in sim.started if job in owing),
    }


def test_a_past_minute_behind_one_the_pace_holds_open_is_read_ahead_for_its_lines() -> None:
    # Given two dead pollers' minutes, the first holding 2,000 catch-up `all` slots (100 s of the
    # workers' work), the second 300 catch-up `none` slots 35 s late when owed: unpaced both go out
    # at once and every `none` slot runs
    assert _two_dead_pollers_minutes(False) == {"ran": 300, "missed": 0, "sent twice": 0, "all ran": 2000}
    # When the pace holds the first minute open (catch-up opens the owed minutes one at a time)
    paced = _two_dead_pollers_minutes(True)
    # Then the second is read ahead and its slots go out by their lines all the same: all run
    # (until then all 300 were MISSED); and none goes out twice, nor is judged again late by the
    # next minute's poller, which drains both minutes again from their progress marks (20 were
    # MISSED while their message waited, until the minute read ahead marked its progress)
    assert (paced["ran"], paced["missed"], paced["sent twice"]) == (300, 0, 0)


def test_an_owed_minute_that_cannot_be_read_ahead_does_not_hold_the_one_before() -> None:
    # Given the two dead pollers' minutes, the second one's buckets unreadable (a throttled store)
    from punctual.store.memory import MemoryStore

    class Throttled(MemoryStore):
        def query_timers(self, lane, minute, shard, *args, **kwargs):  # type: ignore[no-untyped-def]
            if minute == T + timedelta(minutes=1):
                raise RuntimeError("ProvisionedThroughputExceededException")
            return super().query_timers(lane, minute, shard, *args, **kwargs)

    throttled = _two_dead_pollers_minutes(True, Throttled())
    # Then the first minute's catch-up goes on at the pace's rate, as when the second minute is
    # read (a read ahead that fails leaves the turn to the pace: when it held the turn, 620 of the
    # 2,000 ran in the three minutes, against 1,320 and more), none sent twice
    readable = _two_dead_pollers_minutes(True)
    assert throttled["all ran"] >= readable["all ran"] > 0 and throttled["sent twice"] == 0


def _poller_down_45_s(counted: bool, policy: str, **scene: Any) -> int:
    """10 catch-up ``all`` and 3 catch-up ``policy`` ``rate(1 second)`` jobs; the pollers die at
    12:00:10 and their minute's poller comes back 45 s later (each job owes 45 slots, under 60 s
    late: 30 go at once, the rest wait their turn as a CATCHUP timer); workers claiming 14 a
    second (the on-time slots 13); ``scene`` may set those four figures (all_jobs, owed_jobs, rate,
    down_at_s). How many of the ``policy`` jobs' slots were MISSED."""
    from factories import spec
    from punctual.runtime.clock import ManualClock
    from punctual.store.memory import MemoryStore
    from punctual.usecases.jobs import JobService, QueueRouting
    from simulation import LONG, SHORT, SteadyWorkers

    clock = ManualClock(T - timedelta(minutes=1))
    all_jobs, owed_jobs = scene.get("all_jobs", 10), scene.get("owed_jobs", 3)
    rate, down_at_s = scene.get("rate", 14.0), scene.get("down_at_s", 10)
    rig = type("Workers", (SteadyWorkers,), {"RATE": rate, "counted": counted})
    store = MemoryStore()
    sim = rig(store, clock)
    jobs = JobService(store, sim.queues, clock, sim.config.layout, QueueRouting((SHORT,), (LONG,)))
    start = (T - timedelta(seconds=30)).isoformat()
    for i in range(all_jobs):
        jobs.register(f"all-{i % 5}", spec("rate(1 second)", start_at=start))
    owed = {
        jobs.register(f"{policy}-{i}", spec("rate(1 second)", start_at=start, catchup={"policy": policy}))[
            0
        ].id
        for i in range(owed_jobs)
    }
    minutes = [T + timedelta(minutes=m) for m in (-1, 0, 1, 2)]
    sim.run(minutes, until=T + timedelta(minutes=3), kills=[T + timedelta(seconds=down_at_s)], restart_s=45)
    return sum(
        record.slot_count or 1
        for (_, job, _), record in store._executions.items()
        if job in owed and record.status is ExecutionStatus.MISSED
    )


@pytest.mark.parametrize("policy", ["none", "latest"])
def test_the_rest_of_a_chain_under_a_minute_late_is_not_held_past_its_line(policy: str) -> None:
    # Given a poller down 45 s: every job's slots are under 60 s late when it is back, so unpaced
    # all of them run, whatever the policy
    assert _poller_down_45_s(False, policy) == 0
    # When the pace holds the rest of each chain (its CATCHUP timer) behind the short lane's
    # backlog, Then the `none` and `latest` jobs' go out before their first slot is 60 s late: none
    # MISSED (until then 54 were)
    assert _poller_down_45_s(True, policy) == 0


class _Releaser:
    """A releaser that fails (a throttled send) while ``failing``; else records what it sends."""

    def __init__(self) -> None:
        from punctual.dispatch.polling import PollerConfig
        from punctual.runtime.clock import ManualClock

        self.config = PollerConfig()
        self.clock = ManualClock(datetime(2026, 12, 1, tzinfo=UTC))  # (a failed release's instant)
        self.failing = True
        self.sent: list[Any] = []

    def release(self, timers: list[Any], uncertain: bool = False, sent_by_ms: int | None = None) -> Any:
        from punctual.dispatch.polling.release import ReleaseReport

        if self.failing and timers:
            raise RuntimeError("throttled")
        self.sent.extend(timers)
        return ReleaseReport(released=len(timers))


def _timers(policy: str, seconds: list[int], now: datetime, chained: bool) -> list[Any]:
    from factories import job
    from punctual.timing.slots import fire_timer
    from punctual.timing.timers import TimerLayout

    return [
        fire_timer(
            TimerLayout(),
            job(f"job-{s}", "rate(1 hour)", catchup={"policy": policy}),
            T + timedelta(seconds=s),
            now,
            chained=chained,
        )
        for s in seconds
    ]


def test_a_past_minutes_urgent_timer_goes_with_those_due_before_it_and_is_held_again_on_failure() -> None:
    from punctual.dispatch.polling.drain import MinuteDrain
    from punctual.timing.timers import to_ms

    # Given a past minute's timers: `all` ones at :10 and :20 (lines an hour on), a `none` one at
    # :30 (its line at 12:01:30), another `none` at :50
    releaser = _Releaser()
    drain = MinuteDrain(releaser, uncertain_through_ms=None)  # type: ignore[arg-type]
    drain.hold(_timers("all", [10, 20], T - timedelta(hours=1), False))
    drain.hold(_timers("none", [30, 50], T - timedelta(hours=1), False))
    by = to_ms(T + timedelta(seconds=95))  # (12:01:35: the :30 one's line came, not the :50's)
    # When its release fails, Then nothing is lost: all four are held, the :30 one still urgent
    with pytest.raises(RuntimeError):
        drain.release_urgent(by, 100)
    assert len(drain) == 4 and releaser.sent == []
    # And once it goes, the :30 one goes with those due before it, in order (no hole behind the
    # minute's progress mark), and the mark is through it
    releaser.failing = False
    report, taken = drain.release_urgent(by, 100)
    assert [t.job_id for t in releaser.sent] == ["job-10", "job-20", "job-30"] and taken == 3
    assert report.released == 3 and drain.released_through_ms == to_ms(T + timedelta(seconds=30))
    assert drain.release_urgent(by, 100) == (report.__class__(), 0)  # (nothing else due by its line)


def test_lagging_urgent_timers_go_out_of_turn_and_come_back_in_order_on_failure() -> None:
    from punctual.dispatch.polling.drain import MinuteDrain
    from punctual.timing.timers import to_ms

    # Given the minute's lagging CATCHUP timers: an `all` chain's and two `none` chains' (their
    # first slots 40 s late: lines 20 s on)
    now = T + timedelta(seconds=100)
    releaser = _Releaser()
    drain = MinuteDrain(releaser, uncertain_through_ms=None, defer_catchup=True)  # type: ignore[arg-type]
    drain.hold(_timers("all", [55], now, True) + _timers("none", [60, 61], now, True))
    releaser.failing = False
    drain.release_due(to_ms(now))
    assert len(drain.lagging) == 3 and releaser.sent == []
    by = to_ms(now + timedelta(seconds=25))
    # When their release fails, Then they wait in lagging again, in due order, still urgent
    releaser.failing = True
    before = list(drain.lagging)
    with pytest.raises(RuntimeError):
        drain.release_urgent(by, 100)
    assert list(drain.lagging) == before
    # And then the `none` ones go, out of their turn, the `all` one waits its turn
    releaser.failing = False
    _, taken = drain.release_urgent(by, 100)
    assert sorted(t.job_id for t in releaser.sent) == ["job-60", "job-61"] and taken == 2
    assert [t.job_id for t in drain.lagging] == ["job-55"]


def test_the_rest_of_a_chain_sent_by_its_line_is_not_judged_again_by_the_next_minutes_poller() -> None:
    # Given 20 catch-up `all` and 20 catch-up `none` `rate(1 second)` jobs, the pollers down from
    # 12:00:45 for 45 s, workers claiming 25 a second: unpaced, none of the `none` slots is MISSED
    assert _poller_down_45_s(False, "none", all_jobs=20, owed_jobs=20, rate=25.0, down_at_s=45) == 0
    # When the pace holds the chains' rest (CATCHUP timers lagging in the 12:01 poller's minute),
    # the `none` ones going out of their turn by their lines, and the `all` ones before them still
    # waiting when the minute ends: Then the next minute's poller, which drains 12:01 again from
    # its progress mark, does not release them again and record MISSED what was sent and not yet
    # claimed (95 were: sent at 12:02:05, 50 s late, recorded MISSED at 12:02:20, never run).
    # A minute handed on holds no hole behind its mark: the lagging timers due before the last
    # one released out of turn go with the minute's end, in order
    assert _poller_down_45_s(True, "none", all_jobs=20, owed_jobs=20, rate=25.0, down_at_s=45) == 0
