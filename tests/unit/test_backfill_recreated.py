"""A backfill of a job created again at a deleted job's id, under races and its own outcomes
(review of abd89a4): a slot replaced from the earlier job's record runs once, and a record the
backfill's own claim wrote (an overlap skip) is its outcome, never the earlier job's."""

from __future__ import annotations

import contextlib
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from execution_harness import LAYOUT, LONG, SHORT, Crash, FakeTarget, Rig
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.queues import MessageKind, QueueRouting
from punctual.models import ExecutionStatus, Overlap
from punctual.runtime.clock import ManualClock
from punctual.store.base import ExecutionConflictError
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key
from punctual.usecases.backfill_runner import BackfillRunner
from punctual.usecases.backfills import BackfillState

DAY = datetime.fromisoformat("2026-11-30T00:00:00+00:00")


class Interleaved:
    """The store as a second worker sees it: its first write of ``slot`` meets the earlier job's
    record, and ``meanwhile`` (a first worker's whole claim and run) happens before its next write."""

    def __init__(self, real: MemoryStore, slot: str, meanwhile: Any) -> None:
        self.real, self.slot, self.meanwhile, self.fired = real, slot, meanwhile, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def save_execution(self, execution: Any, expect: Any, ttl: int) -> None:
        try:
            self.real.save_execution(execution, expect, ttl)
        except ExecutionConflictError:
            if not self.fired and expect is None and execution.slot == self.slot:
                self.fired = True
                self.meanwhile()
            raise


def test_two_claims_that_read_the_earlier_jobs_record_run_the_slot_once(t0: datetime) -> None:
    rig = Rig(MemoryStore(), ManualClock(t0))
    slot = DAY + timedelta(hours=1)
    _, job = rig.created_again_after_a_run(slot)
    message = rig.message(job, slot, kind=MessageKind.BACKFILL)
    first, second = rig.worker(), rig.worker()
    store = Interleaved(rig.store, slot_key(slot), lambda: first.process(message, None))
    for holder in (second, second.claimer, second.claimer.ledger):
        holder.store = store  # type: ignore[attr-defined]
    second.process(message, None)
    assert store.fired
    assert Counter(s for s, _ in rig.target.calls_for(job.id)) == {slot_key(slot): 1}


def test_a_slot_the_backfill_recorded_skipped_is_its_outcome_not_an_earlier_jobs(t0: datetime) -> None:
    rig = Rig(MemoryStore(), ManualClock(t0))
    job = rig.add_job("job-1", "cron(0 * * * ? *)", overlap=Overlap.SKIP)
    runner = BackfillRunner(
        rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)), max_parallel=1, step_s=2.0
    )
    eleven = t0.replace(hour=11, minute=0, second=0)
    busy = {"on": True}

    def target(ctx: SlotContext) -> TargetResult:
        if ctx.slot == slot_key(eleven) and busy["on"]:
            raise Crash()  # the 11:00 run's worker dies: its record stays RUNNING a while
        return TargetResult.ok()

    rig.target = FakeTarget(target)
    rig.advance_to(eleven + timedelta(seconds=1))
    rig.send(rig.message(job, eleven))
    with contextlib.suppress(Crash):
        rig.work_until_idle(rig.worker())
    backfill = runner.start("default", job.id, DAY, DAY + timedelta(hours=1))  # its one slot: 00:00
    worker = rig.worker()
    for _ in range(30):
        rig.poll()
        rig.work_until_idle(worker)
        rig.clock.advance(2)
    busy["on"] = False
    for _ in range(600):  # the 11:00 run is taken over and ends; the backfill's steps go on
        rig.poll()
        rig.work_until_idle(worker)
        rig.clock.advance(2)
    record = rig.store.get_execution("default", job.id, slot_key(DAY))
    done = rig.store.get_backfill("default", job.id, backfill.id)
    assert record is not None and record.status is ExecutionStatus.SKIPPED
    assert done is not None and done.state is BackfillState.DONE and runner.progress(done) == {"SKIPPED": 1}
    assert slot_key(DAY) not in {s for s, _ in rig.target.calls_for(job.id)}
