"""A long run of slots a pause owes and the catch-up policy drops is one MISSED range record, keyed
by its first slot. That first slot is the first one at or after the pause's instant, and it may
have run already: released just before the pause landed (the API node's clock a fraction of a
second behind the poller's, or a poller a little ahead). The range record's write found that
slot's record, took it for "recorded before", and the whole run went unrecorded (QA23: a
``rate(20 seconds)`` job paused for two hours and resumed with catch-up ``all`` had its first hour,
179 slots older than the window, in no record, no ``skipped_slots``, no ``missed`` event). The
range now starts at the first slot that has no record."""

from __future__ import annotations

from datetime import datetime, timedelta

from execution_harness import LAYOUT, LONG, SHORT, Rig
from factories import spec
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock, OffsetClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_instant, slot_key
from punctual.usecases.jobs import JobService, QueueRouting

PERIOD = timedelta(seconds=20)


def _covered(rig: Rig, job_id: str) -> tuple[list[str], list[str]]:
    """The slots the job's records stand for: (run, missed), a range record's slots counted out."""
    ran, missed = [], []
    for record in rig.store.list_executions("default", job_id, limit=500).items:
        if record.status is ExecutionStatus.MISSED:
            first = slot_instant(record.slot)
            missed += [slot_key(first + n * PERIOD) for n in range(record.slot_count)]
            assert missed[-1] == (record.last_slot or record.slot)
        else:
            ran.append(record.slot)
    return sorted(ran), sorted(missed)


def test_every_slot_of_a_long_pause_is_recorded_when_the_first_one_owed_ran(t0: datetime) -> None:
    rig = Rig(MemoryStore(), ManualClock(t0))
    routing = QueueRouting((SHORT,), (LONG,))
    jobs = JobService(rig.store, rig.queues, rig.clock, LAYOUT, routing)
    api_behind = JobService(rig.store, rig.queues, OffsetClock(rig.clock, -0.2), LAYOUT, routing)
    jobs.register("default", spec("rate(20 seconds)", catchup={"policy": "all"}), job_id="r")
    worker = rig.worker()
    first = t0 + PERIOD
    rig.advance_to(first + 2 * PERIOD)  # 10:01:00: the 10:01:00 slot is released and runs
    rig.poll()
    rig.work_until_idle(worker)
    api_behind.pause("default", "r")  # paused_at 10:00:59.8: that slot is the first one owed
    rig.advance_to(first + 2 * PERIOD + timedelta(hours=2))
    rig.poll()
    resumed_at = rig.clock.now()
    jobs.resume("default", "r")
    for _ in range(10):  # the catch-up goes 30 slots a release
        rig.poll()
        rig.work_until_idle(worker)

    ran, missed = _covered(rig, "r")

    due = [slot_key(first + n * PERIOD) for n in range((resumed_at - first) // PERIOD + 1)]
    assert sorted(set(ran) | set(missed)) == due  # each slot is accounted for...
    assert not set(ran) & set(missed)  # ...once
    window = slot_key(resumed_at - timedelta(hours=1))  # catch-up all: the last hour runs
    assert missed == [slot for slot in due if first + 2 * PERIOD < slot_instant(slot) and slot < window]
    assert jobs.get("default", "r").skipped_slots == len(missed)
