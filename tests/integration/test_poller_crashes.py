"""Dispatch survives its own crashes (issue 14): a restarted poller resumes in seconds,
re-sends almost nothing, catch-up is bounded work, and no slot is silently lost.

Time here is simulated (tests/simulation.py): the lateness asserted is the logical delay
of the design (restart delay, poll interval), not a wall-clock timing.
"""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import datetime, timedelta

import pytest
from crash_harness import T0, crash_cost

from factories import spec
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobStore
from punctual.store.memory import MemoryStore
from punctual.timing.slots import MISSED_BY_LATEST, MISSED_BY_NONE, MISSED_OUTSIDE_WINDOW
from punctual.timing.timers import Lane, slot_key
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import LAYOUT, SHORT, Simulation


def service(store: JobStore, clock: ManualClock, sim: Simulation) -> JobService:
    return JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), ("queue://long",)))


@pytest.mark.parametrize(
    ("kills", "most_entries_per_slot"),
    [([5], 1.5), ([30], 1.5), ([55], 1.5), ([5, 15, 25, 35, 45, 55], 2.0)],
)
def test_a_restarted_poller_resumes_and_resends_almost_nothing(
    kills: list[float], most_entries_per_slot: float
) -> None:
    # Given 1,000 slots in one minute (rate(1 second) chains, minutely near timers, far timers)
    # When every poller is killed at these seconds of the minute and restarted a second later
    cost = crash_cost(1000, kills)
    # Then every slot was released, with few SQS entries per slot
    assert cost.restarts >= len(kills)
    assert cost.released == cost.slots == 1000
    assert cost.entries_per_slot <= most_entries_per_slot, cost
    # And the slots due after the first kill waited for the restart, not for a re-read of the minute
    p99 = cost.p99_after_kill_ms()
    assert p99 is not None and p99 <= 1000 + 2000, cost.p99_after_kill_ms()


def test_fire_delay_is_counted_once_per_slot_not_once_per_read() -> None:
    # Given the same run with and without six poller crashes in one minute
    calm = crash_cost(1000, [])
    crashing = crash_cost(1000, [5, 15, 25, 35, 45, 55])
    # Then a restart re-reads hundreds of timers, and counts none of them again: the only
    # extra FireDelayMs values are slots sent again because no worker had claimed them yet
    # (the worker's StartDelayMs counts those once, at the claim)
    assert crashing.execution_keys_read > 500
    assert calm.resends == 0 and 0 < crashing.resends <= 20
    assert (
        calm.fire_delays_counted < crashing.fire_delays_counted <= calm.fire_delays_counted + crashing.resends
    )


def test_without_progress_marks_a_restart_would_resend_the_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    # The marks are what saves the work: a store that loses them costs far more (so the test
    # above measures them, not an accident of the mix).
    monkeypatch.setattr(MemoryStore, "put_progress", lambda *args, **kwargs: None)
    without = crash_cost(1000, [55])
    with_marks = crash_cost(1000, [])
    assert without.released == 1000
    assert without.entries >= with_marks.entries
    assert without.execution_keys_read > 500  # every far timer read again was checked


def test_a_later_timer_proves_the_earlier_slots_of_its_chain(store, t0):  # type: ignore[no-untyped-def]
    # Given a rate(1 second) job that ran 20 s into the minute, and no workers (so no records)
    clock = ManualClock(t0 - timedelta(minutes=2))
    sim = Simulation(store, clock)
    job, _ = service(store, clock, sim).register("default", spec("rate(1 second)", start_at=t0.isoformat()))
    sim.run([t0 - timedelta(minutes=1), t0], until=t0 + timedelta(seconds=20, milliseconds=500))
    assert len(sim.slots(job.id)) == 21
    before = sim.queues.sends
    # When a new poller of the same minute starts with no memory (its progress marks lost too)
    run = sim.poller().poller.minute_poll(t0)
    run.store.get_progress = lambda minute: []  # type: ignore[method-assign]
    run.start()
    run.step()
    # Then the 21 fire timers it read back are superseded by the newest (slot 21, not yet due)
    assert run.report.superseded == 21
    assert sim.queues.sends - before <= 1


def test_backlog_bigger_than_a_poller_minute_drains_with_progress_every_minute() -> None:
    # Given 300 rate(10 seconds) jobs and a ten-minute outage of every poller: 19,800 owed
    # slots, and sending costs 5 ms an entry, so the drain is more than a poller-minute of work
    store = MemoryStore()
    clock = ManualClock(T0 - timedelta(minutes=3))
    sim = Simulation(store, clock, claim_latency_s=0.5)
    jobs = service(store, clock, sim)
    ids = [
        jobs.register("default", spec("rate(10 seconds)", start_at=T0.isoformat()))[0].id for _ in range(300)
    ]
    sentinel, _ = jobs.register(
        "default", spec("rate(1 minute)", start_at=(T0 + timedelta(minutes=11)).isoformat())
    )
    sim.run([T0 - timedelta(minutes=1), T0], until=T0 + timedelta(seconds=1))
    clock.set(T0 + timedelta(minutes=10, seconds=40))
    sim.queues.ms_per_entry = 5.0
    # When pollers run again, minute after minute
    back = T0 + timedelta(minutes=11)
    progress: list[int] = []
    backlog = set(ids)

    def measure() -> None:
        progress.append(len({(msg.job_id, msg.slot) for msg in sim.sent() if msg.job_id in backlog}))

    ends = [(back + timedelta(minutes=m, seconds=59), measure) for m in range(6)]
    sim.run([back + timedelta(minutes=m) for m in range(6)], until=back + timedelta(minutes=6), events=ends)
    # Then each minute released more of the backlog (no poller stalled without progress) ...
    owed = 300 * (6 * 10 + 6 * 6 + 1)  # the outage's slots, then each minute's six
    assert all(later > earlier for earlier, later in itertools.pairwise(progress)), progress
    assert progress[0] < 300 * 66, progress  # the first minute could not do it all
    # ... every owed slot was released exactly once, and the sentinel job never waited for the drain
    keys = Counter((msg.job_id, msg.slot) for msg in sim.sent())
    assert max(keys.values()) == 1
    assert progress[-1] >= owed - 300 * 2, (progress, owed)
    assert sim.slots(sentinel.id) == [slot_key(back + timedelta(minutes=i)) for i in range(6)]
    late_s = [
        (at - datetime.fromisoformat(m.scheduled_at)).total_seconds()
        for at, m in sim.queues.log
        if m.job_id == sentinel.id
    ]
    assert max(late_s) < 10, late_s  # catch-up slices are bounded: on-time slots go first
    marks = store.get_watermarks(Lane.FAR, list(range(LAYOUT.shard_count)))
    assert min(marks.values()) >= back


@pytest.mark.parametrize(
    ("policy", "window_s", "reasons"),
    [
        ("latest", 3600, {MISSED_BY_LATEST: 2}),
        ("none", 3600, {MISSED_BY_NONE: 3}),
        ("all", 400, {MISSED_OUTSIDE_WINDOW: 1}),
    ],
)
def test_slots_not_run_have_a_missed_record_that_says_why(store, t0, policy, window_s, reasons):  # type: ignore[no-untyped-def]
    # Given a job every three minutes that fired at t0, then a ten-minute outage
    clock = ManualClock(t0 - timedelta(minutes=2))
    sim = Simulation(store, clock)
    catchup = {"policy": policy, "window_seconds": window_s}
    job, _ = service(store, clock, sim).register(
        "default", spec("rate(3 minutes)", start_at=t0.isoformat(), catchup=catchup)
    )
    sim.run([t0 - timedelta(minutes=1), t0], until=t0 + timedelta(seconds=80))
    clock.set(t0 + timedelta(minutes=10, seconds=40))
    back = t0 + timedelta(minutes=11)
    # When pollers run again (twice over the same minute: the second read finds the records)
    sim.run([back], until=back + timedelta(seconds=30))
    sim.run([back], until=back + timedelta(minutes=1, seconds=5))
    # Then every slot of the outage either ran or has a MISSED record with the reason, once
    history = {e.slot: e for e in store.list_executions("default", job.id, limit=50).items}
    missed = Counter(e.error for e in history.values() if e.status is ExecutionStatus.MISSED)
    assert dict(missed) == reasons
    sent = set(sim.slots(job.id))
    owed = {slot_key(t0 + timedelta(minutes=m)) for m in (3, 6, 9)}
    assert owed <= sent | {s for s, e in history.items() if e.status is ExecutionStatus.MISSED}
    assert store.get_job("default", job.id).skipped_slots == sum(reasons.values())
