"""A message that met a live lease comes back when the lease ends, and takes the run over then.

The Region-loss run (tests/e2e/test_region_loss.py) once had a slot 12.41 s late: Region b's worker
claimed it and was killed before calling the target, and Region a's copy of the slot, which had met
b's live lease, came back a second past the lease's end (and the whole seconds rounding it up), so
the run was taken over 11 to 12 s after the death instead of within the 10 s lease. The same held
in one Region for a worker's own message, leased as its batch arrived, a moment before its claim.

In-memory store and queues on a manual clock, stepped a hundredth of a second at a time.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from execution_harness import Rig
from punctual.execution import ClaimOutcome
from punctual.execution.worker import Worker
from punctual.models import Job
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key

LEASE_S = 10
STEP_S = 0.01  # as a long poll receives a message the moment it is visible


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


def _until_taken_over(rig: Rig, worker: Worker, job: Job, within_s: float) -> datetime:
    """Step the clock, the worker receiving what is visible each step, until the target is called."""
    deadline = rig.clock.now() + timedelta(seconds=within_s)
    while not rig.target.calls_for(job.id):
        assert rig.clock.now() < deadline, "the run was not taken over"
        rig.clock.advance(STEP_S)
        rig.work(worker, visibility_s=LEASE_S)
    return rig.clock.now()


def test_another_regions_copy_takes_the_run_over_when_the_lease_ends(rig: Rig, t0: datetime) -> None:
    # Given Region b's worker claiming the slot and lost before it called the target
    job = rig.add_job(timeout_seconds=60)
    rig.clock.advance(0.05)
    held = rig.worker(lease_s=LEASE_S).claim(rig.message(job, t0))
    assert held.claimed and held.execution is not None and held.execution.lease_until is not None
    lease_until = held.execution.lease_until
    # And Region a's own copy of the slot, received a moment later, finding the lease live
    survivor = rig.worker(lease_s=LEASE_S)
    rig.send(rig.message(job, t0))
    rig.clock.advance(0.1)
    [waiting] = rig.work(survivor, visibility_s=LEASE_S)
    assert waiting.outcome == ClaimOutcome.WAITING.value
    # When the clock runs on
    taken_at = _until_taken_over(rig, survivor, job, 3 * LEASE_S)
    # Then Region a takes the run over as attempt 2 within the second after the lease ended
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 2)]
    assert lease_until <= taken_at < lease_until + timedelta(seconds=1), taken_at - lease_until


def test_a_dead_workers_own_message_takes_the_run_over_when_the_lease_ends(rig: Rig, t0: datetime) -> None:
    # Given a worker whose message was leased as its batch arrived, claimed a moment later, and
    # the worker dying before it called the target
    job = rig.add_job(timeout_seconds=60)
    rig.send(rig.message(job, t0))
    [received] = rig.queues.receive("queue://short", 1, 0, LEASE_S)
    rig.clock.advance(0.05)
    held = rig.worker(lease_s=LEASE_S).claim(received.message)
    assert held.claimed and held.execution is not None and held.execution.lease_until is not None
    lease_until = held.execution.lease_until
    # When its message comes back (a moment before the lease ends) to another worker
    taken_at = _until_taken_over(rig, rig.worker(lease_s=LEASE_S), job, 3 * LEASE_S)
    # Then that worker takes the run over within the second after the lease ended
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 2)]
    assert lease_until <= taken_at < lease_until + timedelta(seconds=1), taken_at - lease_until
