"""``overlap: queue``: the turn's hand-over passes over a waiting slot that has ended for good (a
duplicate of its message put it back in the list), but not one whose record a claim starts afresh
(SUPERSEDED, released again for the new spec; MISSED, backfilled): that one is a real waiter, in
slot order (review: a later slot ran first)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from execution_harness import Rig
from punctual.delivery.targets.base import TargetResult
from punctual.models import Execution, ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key

MINUTE = timedelta(minutes=1)


def test_a_waiter_over_a_superseded_record_keeps_its_place(t0: datetime) -> None:
    rig = Rig(MemoryStore(), ManualClock(t0))
    job = rig.add_job(overlap="queue", timeout_seconds=600, version=2, spec_version=2)
    worker = rig.worker()
    first, second, third = t0, t0 + MINUTE, t0 + 2 * MINUTE
    long_run = worker.claim(rig.message(job, first))  # the first slot holds the turn
    rig.clock.set(third)
    old = Execution(
        job_id=job.id,
        tenant=job.tenant,
        slot=slot_key(second),
        scheduled_at=second,
        status=ExecutionStatus.SUPERSEDED,
        job_version=1,
        finished_at=rig.clock.now(),
    )
    rig.store.save_execution(old, None, 0)  # the second slot, released for v1, superseded
    rig.send(rig.message(job, third))
    rig.work_until_idle(worker)  # the third waits behind the first
    # The second is released again for v2; the first ends while its claim is between taking its
    # place in the waiting list and writing its QUEUED record
    real = rig.store.take_turn
    calls = {"n": 0}

    def take_turn(tenant: str, job_id: str, slot: str, now: datetime, replacing: Any = None) -> Any:
        turn = real(tenant, job_id, slot, now, replacing)
        if slot == slot_key(second):
            calls["n"] += 1
            if calls["n"] == 2:
                worker.finish(long_run, TargetResult.ok())
        return turn

    rig.store.take_turn = take_turn  # type: ignore[method-assign]
    rig.send(rig.message(job, second))
    rig.work_until_idle(worker)
    rig.store.take_turn = real  # type: ignore[method-assign]
    rig.work_until_idle(worker)
    assert [slot for slot, _ in rig.target.calls_for(job.id)] == [slot_key(second), slot_key(third)]
