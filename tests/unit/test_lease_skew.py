"""Leases against the clock skew between nodes the design allows (``CLOCK_SKEW_S``, 5 s).

A lease's end is written by its holder's clock and read by another worker's: a worker whose clock
is ahead of the holder's sees the lease end early. Whatever the skew within the bound, a live run is
never taken over (the target called twice, the first run cut off), a run whose store fails stops
before another worker may take it over, and a copy of a run whose worker died takes it over within
the lease (its own message does sooner: tests/unit/test_message_back_takeover.py).

In-memory store, a manual clock, each worker seeing it through its own skew; the holder's lease
keeper is stepped as the real one ticks (once a second, up to a second after a beat is due).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from execution_harness import Rig
from punctual.dispatch.queues import MessageKind
from punctual.execution import Claim, ClaimAction, Worker, WorkerConfig, decide_claim
from punctual.execution.keeper import TICK_S
from punctual.models import Execution, ExecutionStatus, Job
from punctual.runtime.clock import ManualClock, OffsetClock
from punctual.runtime.settings import CLOCK_SKEW_S, Settings
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key

STEP_S = 0.25
LEASE_S = Settings().lease_s  # the deployment's lease


def _a_run(t0: datetime, behind_s: float) -> tuple[Rig, Job, Worker, Worker, Claim]:
    """A slot's run on worker A, whose clock is ``behind_s`` behind worker B's (the rig's)."""
    rig = Rig(MemoryStore(), ManualClock(t0))
    job = rig.add_job(timeout_seconds=300)
    a = rig.worker(lease_s=LEASE_S, clock=OffsetClock(rig.clock, -behind_s))
    b = rig.worker(lease_s=LEASE_S)
    claim = a.claim(rig.message(job, t0))
    assert claim.claimed
    return rig, job, a, b, claim


def test_the_workers_default_lease_is_the_deployments() -> None:
    assert WorkerConfig().lease_s == LEASE_S


@pytest.mark.parametrize("behind_s", [0.0, CLOCK_SKEW_S / 2, CLOCK_SKEW_S])
def test_a_live_run_is_not_taken_over_by_a_worker_whose_clock_is_ahead(t0: datetime, behind_s: float) -> None:
    # Given a run on worker A, whose clock is behind worker B's, that lasts a minute; A's keeper
    # beats it once a tick, each beat up to a tick after it was due
    rig, job, a, b, claim = _a_run(t0, behind_s)
    taken_at = None
    elapsed = 0.0
    while elapsed < 60:
        rig.clock.advance(STEP_S)
        elapsed += STEP_S
        if elapsed % TICK_S == 0.75:
            assert a.heartbeat_if_due(claim)
        # When B receives a copy of the slot every moment (the pollers' takeover, a re-send)
        copy = b.claim(rig.message(job, t0, attempt=2, kind=MessageKind.TAKEOVER))
        if copy.claimed:
            taken_at = elapsed
            break
    # Then B never starts the run A holds: A still holds it
    assert taken_at is None
    assert claim.live
    record = rig.store.get_execution(job.tenant, job.id, slot_key(t0))
    assert record is not None and (record.attempt, record.owner) == (1, claim.execution.owner)  # type: ignore[union-attr]


@pytest.mark.parametrize("behind_s", [0.0, CLOCK_SKEW_S])
def test_a_copy_of_a_dead_workers_run_takes_it_over_once_its_lease_lapsed(
    t0: datetime, behind_s: float
) -> None:
    # (The run's own message takes it over sooner, within the message lease, whatever the clocks:
    # tests/unit/test_message_back_takeover.py. A copy, another message, goes by the record.)
    # Given a run on worker A (its clock at most as far ahead as B's), beaten for 30 s
    rig, job, a, b, claim = _a_run(t0, behind_s)
    for _ in range(30):
        rig.clock.advance(TICK_S)
        assert a.heartbeat_if_due(claim)
    # When A dies right after a beat (the worst moment)
    rig.clock.advance(TICK_S)
    a.heartbeat(claim)
    died = rig.clock.now()
    # Then B, receiving a copy of the slot (the pollers' takeover), takes the run over within the
    # lease of the death
    while (rig.clock.now() - died).total_seconds() <= 2 * LEASE_S:
        rig.clock.advance(STEP_S)
        if b.claim(rig.message(job, t0, attempt=2, kind=MessageKind.TAKEOVER)).claimed:
            break
    assert (rig.clock.now() - died).total_seconds() <= LEASE_S


def test_a_run_whose_store_fails_stops_before_a_worker_ahead_may_take_it_over(t0: datetime) -> None:
    # Given a run on worker A whose store starts failing at its claim, and a worker B whose clock is
    # CLOCK_SKEW_S ahead of A's
    rig, job, a, _, claim = _a_run(t0, 0.0)
    save = rig.store.save_execution

    def failing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("DynamoDB is throttling")

    rig.store.save_execution = failing  # type: ignore[method-assign]
    stored = claim.execution
    assert stored is not None
    takeover = rig.message(job, t0, attempt=2, kind=MessageKind.TAKEOVER)
    stopped_at = may_take_over_at = None
    elapsed = 0.0
    while elapsed < 30 and (stopped_at is None or may_take_over_at is None):
        rig.clock.advance(STEP_S)
        elapsed += STEP_S
        if stopped_at is None and elapsed % TICK_S == 0 and not a.heartbeat_if_due(claim):
            stopped_at = elapsed
        b_now = rig.clock.now() + timedelta(seconds=CLOCK_SKEW_S)
        decision = decide_claim(stored, takeover, b_now, job.retry.max_attempts, job.retry.max_age_seconds)
        if may_take_over_at is None and decision.action is ClaimAction.TAKEOVER:
            may_take_over_at = elapsed
    rig.store.save_execution = save  # type: ignore[method-assign]
    # Then A stops its run (its call cut short) at least a tick before B may start it again
    assert stopped_at is not None and may_take_over_at is not None
    assert stopped_at + TICK_S <= may_take_over_at


def test_a_held_messages_record_whose_beat_failed_is_beaten_again_before_a_worker_ahead_sees_it_lapsed(
    t0: datetime,
) -> None:
    # Given a Lambda-lane run whose batch's message the lease keeper holds (renewing the message and
    # the record's lease with it), and a store that fails the record's first heartbeat
    rig = Rig(MemoryStore(), ManualClock(t0))
    job = rig.add_job(timeout_seconds=600)
    worker = rig.worker(lease_s=LEASE_S)
    keeper, claim = rig.held_run(worker, job, t0)
    save, failures = rig.store.save_execution, [1]

    def first_beat_fails(new: Execution, *args: Any, **kwargs: Any) -> None:
        if (
            new.status is ExecutionStatus.RUNNING
            and new.lease_until != claim.execution.lease_until
            and failures
        ):  # type: ignore[union-attr]
            failures.pop()
            raise RuntimeError("DynamoDB is throttling")
        save(new, *args, **kwargs)

    rig.store.save_execution = first_beat_fails  # type: ignore[method-assign]
    # When the run goes on for half a minute, the keeper stepping every second
    seen_lapsed = []
    for _ in range(30):
        rig.clock.advance(TICK_S)
        keeper.step()
        record = rig.store.get_execution(job.tenant, job.id, slot_key(t0))
        assert record is not None and record.lease_until is not None
        if record.lease_until <= rig.clock.now() + timedelta(seconds=CLOCK_SKEW_S):
            seen_lapsed.append((rig.clock.now() - t0).total_seconds())
    # Then no worker whose clock is CLOCK_SKEW_S ahead ever sees the live run's lease lapsed: the
    # failed beat was tried again at the next step
    assert failures == []
    assert seen_lapsed == []
    assert claim.live
