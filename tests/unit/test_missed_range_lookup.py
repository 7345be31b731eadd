"""A slot inside a MISSED range record has no record of its own: :func:`covering_range` finds the
range over it (the newest MISSED record before it, when that range reaches it), on both stores
(DynamoDB: a Query from a start key no item has), and :func:`slot_of_range` shows that record as
the slot's, only for a slot of the job's schedule (QA23: ``GET .../executions/{slot}`` answered 404)."""

from __future__ import annotations

from datetime import datetime, timedelta

from factories import spec
from punctual.dispatch.queues import MemoryQueues
from punctual.execution.records import covering_range, slot_of_range
from punctual.models import Execution, ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobStore
from punctual.timing.timers import TimerLayout, slot_key
from punctual.usecases.jobs import JobService, QueueRouting

TTL = 2_000_000_000


def _record(t0: datetime, minute: int, status: ExecutionStatus, **more: object) -> Execution:
    instant = t0 + timedelta(minutes=minute)
    return Execution(
        job_id="j", tenant="t", slot=slot_key(instant), scheduled_at=instant, status=status, **more
    )


def test_the_range_over_a_slot_is_found_and_shown_as_the_slots(store: JobStore, t0: datetime) -> None:
    clock = ManualClock(t0)
    jobs = JobService(
        store, MemoryQueues(now=clock.now), clock, TimerLayout(4, 2, 180), QueueRouting(("s",), ("l",))
    )
    job, _ = jobs.register("t", spec("cron(* * * * ? *)"), job_id="j")
    last = slot_key(t0 + timedelta(minutes=60))
    records = [
        _record(t0, -5, ExecutionStatus.MISSED),  # a slot of its own, before the range
        _record(t0, 1, ExecutionStatus.MISSED, last_slot=last, slot_count=60, error="catch-up policy none"),
        _record(t0, 20, ExecutionStatus.SUCCEEDED, backfill="b1"),  # a backfill ran it since
        _record(t0, 90, ExecutionStatus.MISSED),
    ]
    for record in records:
        store.save_execution(record, None, TTL)

    def over(minute: int, seconds: int = 0) -> Execution | None:
        return covering_range(store, "t", "j", slot_key(t0 + timedelta(minutes=minute, seconds=seconds)))

    assert [r and r.slot for r in (over(2), over(30), over(60))] == [records[1].slot] * 3
    assert [over(0), over(61), over(-4), over(91)] == [None] * 4
    inner = slot_key(t0 + timedelta(minutes=30))
    shown = slot_of_range(job, records[1], inner)
    assert shown is not None
    assert (shown.slot, shown.status, shown.scheduled_at) == (
        inner,
        ExecutionStatus.MISSED,
        t0 + timedelta(minutes=30),
    )
    assert (shown.last_slot, shown.slot_count, shown.error) == (last, 60, "catch-up policy none")
    assert (
        slot_of_range(job, records[1], slot_key(t0 + timedelta(minutes=30, seconds=5))) is None
    )  # off the grid
    assert covering_range(store, "t", "j", inner + "~m123abc") is None  # a run-now slot is in no range
