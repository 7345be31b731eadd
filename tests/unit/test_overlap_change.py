"""A job's ``overlap`` changed while its runs are in flight: runs started under ``allow`` take no
turn, and the slots due after a change to ``skip`` or ``queue`` still wait for them (QA22)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from execution_harness import LAYOUT, LONG, SHORT, Rig
from factories import spec
from punctual.delivery.targets.base import TargetResult
from punctual.execution import Claim, Worker
from punctual.models import ExecutionStatus, Job
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobStore
from punctual.timing.timers import slot_key
from punctual.usecases.jobs import JobService, QueueRouting

S = ExecutionStatus
MINUTE = timedelta(minutes=1)


@pytest.fixture
def rig(store: JobStore, t0: datetime) -> Rig:
    return Rig(store, ManualClock(t0))  # the memory store and DynamoDB (moto)


def _replace(rig: Rig, job: Job, overlap: str) -> Job:
    service = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    service.replace(job.tenant, job.id, spec("rate(1 minute)", overlap=overlap, timeout_seconds=600))
    changed = rig.store.get_job(job.tenant, job.id)
    assert changed is not None
    return changed


def _due(rig: Rig, worker: Worker, job: Job, slot: datetime) -> list[str]:
    """The outcomes of ``slot`` of ``job`` coming due now."""
    rig.clock.set(slot)
    rig.send(rig.message(job, slot))
    return [r.outcome for r in rig.work_until_idle(worker)]


def _queued_behind_an_allow_run(rig: Rig, t0: datetime) -> tuple[Job, Worker, Claim]:
    """An 'allow' job with a long run of ``t0`` in flight, changed to 'queue' 10 s later, and its
    next slot due meanwhile: (the job, the worker, that run's claim)."""
    job = rig.add_job(overlap="allow", timeout_seconds=600)
    worker = rig.worker()
    first = worker.claim(rig.message(job, t0))
    rig.clock.set(t0 + timedelta(seconds=10))
    job = _replace(rig, job, "queue")
    assert _due(rig, worker, job, t0 + MINUTE) == ["queued"]
    return job, worker, first


def _status(rig: Rig, job: Job, slot: datetime) -> ExecutionStatus:
    record = rig.store.get_execution(job.tenant, job.id, slot_key(slot))
    assert record is not None
    return record.status


def test_skip_after_allow_skips_the_slots_due_while_the_allow_runs_are_in_flight(
    rig: Rig, t0: datetime
) -> None:
    # Given an 'allow' job with two long runs in flight
    job = rig.add_job(overlap="allow", timeout_seconds=600)
    worker = rig.worker()
    first = worker.claim(rig.message(job, t0))
    rig.clock.set(t0 + MINUTE)
    second = worker.claim(rig.message(job, t0 + MINUTE))
    assert first.live and second.live
    # When its overlap becomes 'skip'
    rig.clock.set(t0 + MINUTE + timedelta(seconds=10))
    job = _replace(rig, job, "skip")
    # Then the slots due while either run is in flight are skipped, naming it, never run beside it
    assert _due(rig, worker, job, t0 + 2 * MINUTE) == ["skipped"]
    worker.finish(second, TargetResult.ok())  # one of the two ends: the other still runs
    assert _due(rig, worker, job, t0 + 3 * MINUTE) == ["skipped"]
    skipped = rig.store.get_execution(job.tenant, job.id, slot_key(t0 + 2 * MINUTE))
    assert skipped is not None and skipped.blocked_by in {slot_key(t0), slot_key(t0 + MINUTE)}
    assert rig.target.calls_for(job.id) == []
    # And once both ended, the next slot runs
    worker.finish(first, TargetResult.ok())
    assert _due(rig, worker, job, t0 + 4 * MINUTE) == ["SUCCEEDED"]
    assert rig.target.calls_for(job.id) == [(slot_key(t0 + 4 * MINUTE), 1)]


def test_queue_after_allow_starts_the_queued_slot_once_the_allow_run_ended(rig: Rig, t0: datetime) -> None:
    # Given an 'allow' job with a long run in flight, changed to 'queue', and its next slot due
    # while that run is in flight: it waits for it (QUEUED), and nothing ran beside it
    job, worker, first = _queued_behind_an_allow_run(rig, t0)
    assert _status(rig, job, t0 + MINUTE) is S.QUEUED
    assert rig.target.calls_for(job.id) == []
    # And after the run ended, the queued slot's check starts it
    worker.finish(first, TargetResult.ok())
    rig.clock.set(t0 + MINUTE + timedelta(seconds=40))
    rig.poll()
    rig.work_until_idle(worker)
    assert _status(rig, job, t0 + MINUTE) is S.SUCCEEDED
    assert rig.target.calls_for(job.id)[0] == (slot_key(t0 + MINUTE), 1)


def test_allow_again_leaves_no_slot_queued_behind_an_allow_run(rig: Rig, t0: datetime) -> None:
    # Given a slot queued behind a run started under 'allow' (allow -> queue)
    job, worker, first = _queued_behind_an_allow_run(rig, t0)
    # When the job goes back to 'allow' while that run is still in flight
    rig.clock.set(t0 + MINUTE + timedelta(seconds=10))
    job = _replace(rig, job, "allow")
    assert job.overlap_checks_until is None
    # Then its next slots run beside it (allowed), and the queued slot does not stay QUEUED: due
    # by the change and never started, its check runs it once under the new spec, beside the run
    # too (QA23: it was SUPERSEDED, never run)
    assert "SUCCEEDED" in _due(rig, worker, job, t0 + 2 * MINUTE)
    rig.clock.set(t0 + 2 * MINUTE + timedelta(seconds=30))
    rig.poll()
    rig.work_until_idle(worker)
    assert _status(rig, job, t0 + MINUTE) is S.SUCCEEDED
    assert rig.target.calls_for(job.id).count((slot_key(t0 + MINUTE), 1)) == 1
    worker.finish(first, TargetResult.ok())
    assert all(r.status.terminal for r in rig.history(job))


def test_the_allow_runs_are_looked_for_only_for_a_while_after_the_change(rig: Rig, t0: datetime) -> None:
    # Given an 'allow' job with a timeout of 300 s made 'skip'
    job = rig.add_job(overlap="allow", timeout_seconds=300)
    rig.clock.set(t0 + timedelta(seconds=10))
    job = _replace(rig, job, "skip")
    # Then the look lasts the old runs' timeout and a margin, and a later change keeps it
    assert job.overlap_checks_until == t0 + timedelta(seconds=10 + 300 + 60)
    rig.clock.set(t0 + timedelta(seconds=20))
    assert _replace(rig, job, "queue").overlap_checks_until == job.overlap_checks_until
