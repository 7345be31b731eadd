"""Overlap policies at claim time, with a previous slot of the same job still running."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from execution_harness import SHORT, Rig, statuses
from punctual.clock import ManualClock
from punctual.execution import ClaimOutcome, Delivery
from punctual.models import ExecutionStatus
from punctual.store.memory import MemoryStore
from punctual.targets.base import TargetResult
from punctual.timers import slot_key

S = ExecutionStatus
MINUTE = timedelta(minutes=1)


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


def test_allow_runs_the_next_slot_alongside(rig: Rig, t0: datetime) -> None:
    job = rig.add_job(overlap="allow", timeout_seconds=600)
    worker = rig.worker()
    long_run = worker.claim(rig.message(job, t0))
    rig.clock.set(t0 + MINUTE)
    rig.send(rig.message(job, t0 + MINUTE))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    assert long_run.live
    assert [r.status for r in rig.history(job)] == [S.SUCCEEDED, S.RUNNING]


def test_skip_records_every_slot_that_falls_inside_a_long_run(rig: Rig, t0: datetime) -> None:
    # Given slot 1 running for ten minutes (longer than the overlap check's look-back of records)
    job = rig.add_job(overlap="skip", timeout_seconds=800)
    worker = rig.worker()
    long_run = worker.claim(rig.message(job, t0))
    # When slots 2..10 arrive meanwhile, one a minute
    for i in range(1, 10):
        rig.clock.set(t0 + i * MINUTE)
        rig.send(rig.message(job, t0 + i * MINUTE))
        assert [r.outcome for r in rig.work_until_idle(worker)] == ["skipped"]
    # Then each is SKIPPED (recorded, pointing at the run that blocked it); nothing else ran
    history = rig.history(job)
    assert [r.status for r in history] == [S.SKIPPED] * 9 + [S.RUNNING]
    assert {r.blocked_by for r in history[:-1]} == {slot_key(t0)}
    assert rig.target.calls == []
    skipped_job = rig.store.get_job(job.tenant, job.id)
    assert skipped_job is not None and skipped_job.skipped_slots == 9
    assert rig.metrics.total("OverlapSkipped") == 9
    # And once slot 1 finished, the next slot runs
    worker.finish(long_run, TargetResult.ok())
    rig.clock.set(t0 + 10 * MINUTE)
    rig.send(rig.message(job, t0 + 10 * MINUTE))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]


def test_skip_ignores_a_previous_slot_whose_lease_lapsed(rig: Rig, t0: datetime) -> None:
    # A dead worker's slot is recovered by its own takeover; it does not block later slots
    job = rig.add_job(overlap="skip", timeout_seconds=60)
    worker = rig.worker()
    worker.claim(rig.message(job, t0))
    rig.clock.set(t0 + 5 * MINUTE)  # lease: 60 + 60 s
    rig.send(rig.message(job, t0 + 5 * MINUTE))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]


def test_queue_waits_in_place_and_runs_after_the_previous_slot(rig: Rig, t0: datetime) -> None:
    # Given slot 1 running, and slots 2 and 3 of the same job behind it in its FIFO group
    job = rig.add_job(overlap="queue", timeout_seconds=600)
    worker = rig.worker(queue_wait_s=30)
    long_run = worker.claim(rig.message(job, t0))
    rig.clock.set(t0 + MINUTE)
    rig.send(rig.message(job, t0 + MINUTE), rig.message(job, t0 + 2 * MINUTE))
    # When a worker receives slot 2
    [received] = rig.queues.receive(SHORT, 10, 0, 900)  # FIFO: slot 3 waits behind slot 2
    claim = worker.claim(received.message, Delivery(SHORT, received.receipt, received.receive_count))
    # Then slot 2 is QUEUED and its message returns later; slot 3 keeps its place behind it
    assert claim.outcome is ClaimOutcome.WAITING and claim.return_after_s == 30
    assert [r.status for r in rig.history(job)] == [S.QUEUED, S.RUNNING]
    rig.clock.advance(29)
    assert rig.queues.receive(SHORT, 10, 0, 900) == []  # the group is blocked, order preserved
    rig.clock.advance(1)
    assert [r.outcome for r in rig.work(worker)] == ["waiting"]  # slot 1 still runs
    # When slot 1 finishes, the waiting slots run, in order, once each
    worker.finish(long_run, TargetResult.ok())
    for _ in range(3):
        rig.clock.advance(30)
        rig.work_until_idle(worker)
    assert rig.target.calls_for(job.id) == [(slot_key(t0 + MINUTE), 1), (slot_key(t0 + 2 * MINUTE), 1)]
    assert statuses(rig.history(job)) == [(1, "SUCCEEDED"), (1, "SUCCEEDED"), (1, "SUCCEEDED")]
    assert rig.queues.all_messages() == []
