"""A parent's slot recorded SUPERSEDED that no later release runs gives its ``after()`` children's
slot a MISSED record (execution.versions.superseded_for_good); one the new spec still runs does not.

The rule: a child's slot is run, or recorded with why not, whatever its parents' slot did (QA17:
a parent's retry superseded by the replace that fixed its target left the child with no record).
A SUPERSEDED slot the current spec releases again (a slot after the replace that the new spec
also has) runs then, and its end decides the children, as any run's does.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from execution_harness import LAYOUT, LONG, SHORT, Crash, FakeTarget, Rig
from factories import spec
from punctual.delivery.targets.base import TargetResult
from punctual.dispatch.queues import MessageKind, message_for
from punctual.execution.after import AfterEffects
from punctual.models import ExecutionStatus, Job
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key
from punctual.usecases.jobs import JobService, QueueRouting


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


def _family(rig: Rig) -> tuple[JobService, Job, Job]:
    jobs = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    parent, _ = jobs.register("default", spec("rate(1 hour)"), job_id="parent")
    child, _ = jobs.register("default", spec("after(parent)"), job_id="child")
    return jobs, parent, child


def _released_early_then_replaced(
    rig: Rig,
    jobs: JobService,
    parent: Job,
    slot: datetime,
    new: str,
    *,
    paused: bool = False,
    claim: bool = True,
) -> None:
    """The slot's message is sent for the parent's first version two seconds ahead (a poller's
    lead), a replace (and a pause, ``paused``) lands a second before the slot, and a worker claims
    it at the slot (``claim``)."""
    rig.target = FakeTarget(TargetResult.ok())
    rig.clock.set(slot - timedelta(seconds=2))
    rig.send(rig.message(parent, slot))
    rig.clock.set(slot - timedelta(seconds=1))
    jobs.replace("default", parent.id, spec(new, payload={"fixed": True}))
    if paused:
        jobs.pause("default", parent.id)
    rig.clock.set(slot)
    if claim:
        rig.work_until_idle(rig.worker())


def test_a_slot_the_new_spec_runs_again_is_left_to_that_run(rig: Rig, t0: datetime) -> None:
    jobs, parent, child = _family(rig)
    slot = t0 + timedelta(hours=1)
    _released_early_then_replaced(rig, jobs, parent, slot, "rate(1 hour)")
    superseded = rig.store.get_execution("default", parent.id, slot_key(slot))
    assert superseded is not None and superseded.status is ExecutionStatus.SUPERSEDED
    assert rig.store.get_execution("default", child.id, slot_key(slot)) is None  # not decided yet
    # The new chain releases the same slot for the new spec: it runs, and so does the child
    rig.poll()
    worker = rig.worker()
    rig.work_until_idle(worker)
    rig.work_until_idle(worker)
    ran = rig.store.get_execution("default", parent.id, slot_key(slot))
    assert ran is not None and ran.status is ExecutionStatus.SUCCEEDED
    followed = rig.store.get_execution("default", child.id, slot_key(slot))
    assert followed is not None and followed.status is ExecutionStatus.SUCCEEDED


def test_a_slot_the_new_spec_does_not_have_is_missed_by_the_child(rig: Rig, t0: datetime) -> None:
    jobs, parent, child = _family(rig)
    slot = t0 + timedelta(hours=1)
    _released_early_then_replaced(rig, jobs, parent, slot, "cron(30 * * * ? *)")  # no slot at :00
    superseded = rig.store.get_execution("default", parent.id, slot_key(slot))
    assert superseded is not None and superseded.status is ExecutionStatus.SUPERSEDED
    record = rig.store.get_execution("default", child.id, slot_key(slot))
    assert record is not None and record.status is ExecutionStatus.MISSED
    assert record.error == "not run: parent parent's slot was SUPERSEDED"


def test_a_paused_parents_superseded_slot_is_missed_when_no_resume_can_run_it(rig: Rig, t0: datetime) -> None:
    """Review: left to a resume that never releases it (a resume releases only what the chain did
    not), the child's slot had no record for good."""
    jobs, parent, child = _family(rig)
    slot = t0 + timedelta(hours=1)
    _released_early_then_replaced(rig, jobs, parent, slot, "cron(30 * * * ? *)", paused=True)
    record = rig.store.get_execution("default", child.id, slot_key(slot))
    assert record is not None and record.status is ExecutionStatus.MISSED


def test_a_paused_parents_superseded_slot_the_new_spec_has_is_left_to_its_resume(
    rig: Rig, t0: datetime
) -> None:
    jobs, parent, child = _family(rig)
    slot = t0 + timedelta(hours=1)
    _released_early_then_replaced(rig, jobs, parent, slot, "rate(1 hour)", paused=True)
    assert rig.store.get_execution("default", child.id, slot_key(slot)) is None


def test_a_worker_lost_before_the_childrens_records_leaves_them_to_the_redelivery(
    rig: Rig, t0: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: the redelivery found the record SUPERSEDED, returned at once, and the child's slot
    never got its record."""
    jobs, parent, child = _family(rig)
    slot = t0 + timedelta(hours=1)
    _released_early_then_replaced(rig, jobs, parent, slot, "cron(30 * * * ? *)", claim=False)
    real = AfterEffects.superseded
    crashes = [Crash("the worker died after the SUPERSEDED write")]

    def dying(self: AfterEffects, *args: Any, **kwargs: Any) -> None:
        if crashes:
            raise crashes.pop()
        real(self, *args, **kwargs)

    monkeypatch.setattr(AfterEffects, "superseded", dying)
    worker = rig.worker()
    with pytest.raises(Crash):
        rig.work(worker)
    assert rig.store.get_execution("default", child.id, slot_key(slot)) is None
    rig.clock.set(slot + timedelta(seconds=901))  # the message comes back after its visibility
    rig.work_until_idle(worker)
    record = rig.store.get_execution("default", child.id, slot_key(slot))
    assert record is not None and record.status is ExecutionStatus.MISSED


def test_a_paused_parents_slot_its_resume_owes_is_left_to_it(rig: Rig, t0: datetime) -> None:
    """Review: a slot that ran just after the pause (its message carried the job), superseded
    while paused, was recorded MISSED for the child; the resume then ran it, and the child's
    message was dropped ('slot is recorded missed')."""
    jobs = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    retry = {"max_attempts": 3}
    parent, _ = jobs.register("default", spec("rate(1 hour)", retry=retry), job_id="parent")
    child, _ = jobs.register("default", spec("after(parent)"), job_id="child")
    slot = t0 + timedelta(hours=1)
    rig.target = FakeTarget(TargetResult.retryable("503"), *[TargetResult.ok()] * 5)
    rig.clock.set(slot - timedelta(seconds=2))
    rig.send(message_for(parent, slot_key(slot), slot, 1, MessageKind.FIRE, rig.clock.now()))
    rig.clock.set(slot - timedelta(seconds=1))
    jobs.pause("default", parent.id)
    rig.clock.set(slot)
    rig.work_until_idle(rig.worker())  # claimed on the job it carries: it runs, and fails
    rig.clock.set(slot + timedelta(seconds=1))
    jobs.replace("default", parent.id, spec("rate(1 hour)", retry=retry, payload={"fixed": True}))
    for k in range(1, 40):  # its retry comes due and is superseded
        rig.clock.set(slot + timedelta(seconds=10 * k))
        rig.poll()
        rig.work_until_idle(rig.worker())
    assert rig.store.get_execution("default", child.id, slot_key(slot)) is None  # the resume's to run
    rig.clock.set(slot + timedelta(minutes=10))
    jobs.resume("default", parent.id)
    for k in range(1, 10):
        rig.clock.set(slot + timedelta(minutes=10, seconds=10 * k))
        rig.poll()
        rig.work_until_idle(rig.worker())
    ran = rig.store.get_execution("default", child.id, slot_key(slot))
    assert ran is not None and ran.status is ExecutionStatus.SUCCEEDED


def test_a_childs_slot_superseded_by_a_schedule_of_its_own_is_missed_by_its_child(
    rig: Rig, t0: datetime
) -> None:
    """QA24: an after() job's slot, sent when its parent succeeded, superseded before a worker took
    it by a replace that gave the job a cron schedule: no parent sends it again, and its own child's
    slot had no record at all (skip_dependants and superseded() both left it)."""
    jobs, parent, child = _family(rig)
    grandchild, _ = jobs.register("default", spec("after(child)"), job_id="grandchild")
    slot = t0 + timedelta(hours=1)
    rig.clock.set(slot)
    rig.send(rig.message(parent, slot))
    worker = rig.worker()
    rig.work(worker)  # the parent succeeds: the child's slot is sent
    assert [m.kind for m in rig.queues.all_messages(SHORT)] == [MessageKind.CHILD]
    rig.clock.set(slot + timedelta(seconds=1))
    jobs.replace("default", child.id, spec("cron(0 * * * ? *)"))  # before a worker took it
    rig.clock.set(slot + timedelta(seconds=8))  # older than the spec its message carries
    rig.work_until_idle(worker)
    superseded = rig.store.get_execution("default", child.id, slot_key(slot))
    assert superseded is not None and superseded.status is ExecutionStatus.SUPERSEDED
    record = rig.store.get_execution("default", grandchild.id, slot_key(slot))
    assert record is not None and record.status is ExecutionStatus.MISSED
    assert record.error == "not run: parent child's slot was SUPERSEDED"
