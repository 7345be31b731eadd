"""A long run handed back at shutdown (SIGTERM of an ECS task) after its job changed under it.

The hand-back sends the next attempt's message at once, and that message carries the job as the
run's claim read it, minutes or hours before. QA: the next worker trusted that copy as a fresh
read (it was stamped as sent just now), so a replace during the run did not supersede the next
attempt (it called the old target, where a worker that took the message a few seconds later
recorded the slot SUPERSEDED), and a delete did not stop it (it ran a deleted job's slot, where
a later worker dropped it and left the record RETRY_WAIT for good).
"""

from __future__ import annotations

from datetime import datetime

import pytest

from execution_harness import LAYOUT, LONG, SHORT, Rig, statuses
from factories import spec
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key
from punctual.usecases.jobs import JobService, QueueRouting


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


def handed_back_after(rig: Rig, t0: datetime, change: str) -> None:
    """An ECS job's slot at ``t0`` runs for ten minutes on worker A; then the job is changed
    (``replace``, ``delete`` or ``pause``) and A, stopping, hands the run back; worker B takes
    the next attempt's message a second later."""
    jobs = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    long = spec("rate(1 hour)", runtime="ecs", timeout_seconds=3600)
    job, _ = jobs.register("default", long, job_id="long")
    first = rig.worker(lease_timers=True, lease_s=8)
    rig.send(rig.message(job, t0), queue=LONG)
    [received] = rig.queues.receive(LONG, 1, 0, 8)
    claim = first.claim(received.message)
    assert claim.claimed
    for _ in range(120):  # ten minutes of heartbeats
        rig.clock.advance(5)
        assert first.heartbeat(claim, message=False)
    rig.queues.delete(LONG, received.receipt)  # (the message's lease is not what this is about)
    if change == "replace":
        jobs.replace(job.tenant, job.id, long.model_copy(update={"payload": {"spec": "new"}}))
    elif change == "delete":
        jobs.delete(job.tenant, job.id)
    else:
        jobs.pause(job.tenant, job.id)
    assert first.release(claim)
    rig.clock.advance(1)
    rig.work_until_idle(rig.worker(lease_timers=True, lease_s=8), LONG)


def test_a_run_handed_back_after_a_replace_is_superseded_not_run_again_with_the_old_spec(
    rig: Rig, t0: datetime
) -> None:
    # Given a long run handed back after its job was replaced
    handed_back_after(rig, t0, "replace")
    # Then its next attempt does not start (the old target is not called again): SUPERSEDED,
    # as the next attempt of a slot started under the old spec is
    assert rig.target.calls_for("long") == []
    record = rig.store.get_execution("default", "long", slot_key(t0))
    assert record is not None and record.status is ExecutionStatus.SUPERSEDED


def test_a_run_handed_back_after_a_delete_is_not_run_again_and_its_record_ends(
    rig: Rig, t0: datetime
) -> None:
    # Given a long run handed back after its job was deleted
    handed_back_after(rig, t0, "delete")
    # Then the deleted job's slot is not started again, and its record does not stay open
    assert rig.target.calls_for("long") == []
    record = rig.store.get_execution("default", "long", slot_key(t0))
    assert record is not None and record.status is ExecutionStatus.FAILED
    assert record.error is not None and record.error.endswith(
        "its retry was not started: the job was deleted"
    )
    assert rig.queues.all_messages() == []


def test_a_run_handed_back_after_a_pause_goes_on(rig: Rig, t0: datetime) -> None:
    # Given a long run handed back after its job was paused
    handed_back_after(rig, t0, "pause")
    # Then it goes on as its next attempt, as a run started before a pause does
    assert rig.target.calls_for("long") == [(slot_key(t0), 2)]
    record = rig.store.get_execution("default", "long", slot_key(t0))
    assert record is not None and statuses([record]) == [(2, "SUCCEEDED")]


def test_a_run_handed_back_a_day_after_its_slot_goes_on_whatever_max_age_seconds(
    rig: Rig, t0: datetime
) -> None:
    # Given an ECS job whose runs last days (timeout 3 days; retry.max_age_seconds at its default,
    # a day), and a run handed back 25 hours in (its task stopped: a deploy, a Fargate retirement)
    job = rig.add_job("long", runtime="ecs", timeout_seconds=3 * 86_400)
    first = rig.worker(lease_timers=True, lease_s=8)
    rig.send(rig.message(job, t0), queue=LONG)
    [received] = rig.queues.receive(LONG, 1, 0, 8)
    claim = first.claim(received.message)
    assert claim.claimed
    rig.clock.advance(25 * 3600)
    assert first.heartbeat(claim, message=False)
    rig.queues.delete(LONG, received.receipt)
    assert first.release(claim)
    # When another worker takes the next attempt's message
    rig.clock.advance(1)
    rig.work_until_idle(rig.worker(lease_timers=True, lease_s=8), LONG)
    # Then the run goes on (a hand-back is not counted against the retry policy): it is not ended
    # FAILED "past max_age" by its own scheduler's shutdown
    assert rig.target.calls_for("long") == [(slot_key(t0), 2)]
    record = rig.store.get_execution("default", "long", slot_key(t0))
    assert record is not None and statuses([record]) == [(2, "SUCCEEDED")]
