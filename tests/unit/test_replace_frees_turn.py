"""A slot of an ``overlap: skip`` / ``queue`` job waiting for its retry when a replace changes the
job's spec: its retry will never start (it is SUPERSEDED: no attempt runs a spec its slot was not
released for), so it does not hold the job's turn against the new spec's slots until its retry's
instant (QA26: a replace that fixed a failing target left every slot of the next half hour
SKIPPED, or QUEUED, behind a retry that was then recorded SUPERSEDED without a call)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig
from factories import spec
from punctual.delivery.targets.base import TargetResult
from punctual.execution import Worker
from punctual.models import ExecutionStatus, Job
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobStore
from punctual.timing.timers import slot_key
from punctual.usecases.jobs import JobService, QueueRouting

S = ExecutionStatus
MINUTE = timedelta(minutes=1)
# A retry half an hour on: far past the next slots of a rate(1 minute) job.
RETRY = {"max_attempts": 3, "backoff": "fixed", "base_seconds": 1800, "max_seconds": 1800, "jitter": False}


@pytest.fixture
def rig(store: JobStore, t0: datetime) -> Rig:
    return Rig(
        store, ManualClock(t0), target=FakeTarget(TargetResult.retryable("HTTP 503"), TargetResult.ok())
    )


def _service(rig: Rig) -> JobService:
    return JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))


def _run_until(rig: Rig, worker: Worker, instant: datetime) -> None:
    """Release what comes due and work it, every 10 s, until ``instant``."""
    while rig.clock.now() < instant:
        rig.clock.advance(10)
        rig.poll()
        rig.work_until_idle(worker)


def _first_slot_waits_for_its_retry(rig: Rig, t0: datetime, overlap: str) -> tuple[Job, Worker]:
    _service(rig).register("default", spec(overlap=overlap, retry=RETRY), job_id="r")
    job = rig.store.get_job("default", "r")
    assert job is not None
    worker = rig.worker()
    _run_until(rig, worker, t0 + MINUTE)
    assert [r.status for r in rig.history(job)] == [S.RETRY_WAIT]
    return job, worker


@pytest.mark.parametrize("overlap", ["skip", "queue"])
def test_a_replace_frees_the_turn_of_a_slot_waiting_for_its_retry(
    rig: Rig, t0: datetime, overlap: str
) -> None:
    # Given a skip (queue) job whose 10:01 slot failed and waits half an hour for its retry
    job, worker = _first_slot_waits_for_its_retry(rig, t0, overlap)
    # When its spec is replaced (the target fixed), and the next slots come due
    rig.clock.advance(10)
    _service(rig).replace("default", "r", spec(overlap=overlap, retry=RETRY, payload={"fixed": True}))
    _run_until(rig, worker, t0 + 4 * MINUTE)
    # Then they run under the new spec, one after the other, not SKIPPED (QUEUED) behind the old slot
    history = {r.slot: r.status for r in rig.history(job)}
    assert [history[slot_key(t0 + i * MINUTE)] for i in (2, 3, 4)] == [S.SUCCEEDED] * 3
    # And the old slot's retry, at its instant, is SUPERSEDED: its target is not called again
    rig.clock.set(t0 + MINUTE + timedelta(seconds=1800 + 20))
    rig.poll()
    rig.work_until_idle(worker)
    assert history[slot_key(t0 + MINUTE)] is S.RETRY_WAIT
    assert rig.store.get_execution("default", "r", slot_key(t0 + MINUTE)).status is S.SUPERSEDED  # type: ignore[union-attr]
    assert [a for s, a in rig.target.calls_for("r") if s == slot_key(t0 + MINUTE)] == [1]


def test_a_label_edit_keeps_the_turn_of_a_slot_waiting_for_its_retry(rig: Rig, t0: datetime) -> None:
    # Given the same, but the replace changes only the job's name: the retry will still run
    job, worker = _first_slot_waits_for_its_retry(rig, t0, "skip")
    rig.clock.advance(10)
    _service(rig).replace("default", "r", spec(overlap="skip", retry=RETRY, name="renamed"))
    _run_until(rig, worker, t0 + 3 * MINUTE)
    # Then the next slots are skipped behind it, as before any change
    history = {r.slot: r.status for r in rig.history(job)}
    assert [history[slot_key(t0 + i * MINUTE)] for i in (1, 2, 3)] == [S.RETRY_WAIT, S.SKIPPED, S.SKIPPED]
