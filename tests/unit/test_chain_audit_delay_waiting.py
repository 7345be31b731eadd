"""A ``delay()`` run whose message waits in its queue through a worker outage longer than the
auditor's grace is not a broken chain (QA30: reported "repaired", a Chain Repaired event and
ChainsBroken, a false alarm). Its timer was released; the auditor releases it again in case the
message was lost (the claim keeps the slot to one run) and counts that apart, not as a repair."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from audit_harness import LONG, SHORT, AuditRig

from factories import spec
from punctual.delivery.notifications.events import CHAIN_REPAIRED as CHAIN_REPAIRED_EVENT
from punctual.models import ExecutionStatus, Job
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore


def _runs(rig: AuditRig, job_id: str) -> Counter[str]:
    return Counter(slot for slot, _ in rig.target.calls_for(job_id))


def test_a_delay_run_waiting_through_a_long_outage_is_not_reported_repaired(t0: datetime) -> None:
    rig = AuditRig(MemoryStore(), ManualClock(t0))
    job = rig.jobs.register("default", spec("delay(20 seconds)"), job_id="job")[0]
    rig.run(3)
    ran = len(rig.target.calls)
    assert ran >= 3
    work = rig.work
    rig.work = lambda: None  # type: ignore[method-assign]  # every worker down: messages wait
    rig.run(8)  # four times the audit grace
    assert len(rig.target.calls) == ran
    rig.work = work  # type: ignore[method-assign]
    rig.run(3)
    # Then the waiting run ran (once), the chain went on, and nothing was reported repaired
    assert len(rig.target.calls) >= ran + 3
    assert max(_runs(rig, job.id).values()) == 1
    assert rig.repairs == []
    assert not [e for e in rig.events.events if e.detail_type == CHAIN_REPAIRED_EVENT]
    assert rig.metrics.total("ChainsBroken") == 0
    assert rig.metrics.total("DelayRunsReleasedAgain") >= 1  # counted apart
    assert not [r for r in rig.history(job) if r.status is ExecutionStatus.MISSED]


def test_a_delay_run_whose_message_was_dead_lettered_runs_again(t0: datetime) -> None:
    """The auditor cannot tell a message lost (dead-lettered: the DLQ's alarm says so) from one
    waiting: either way its timer is released again after the grace, and the chain goes on."""
    rig, job = _dead_lettered(t0, repair=True)
    before = len(rig.target.calls)
    rig.run(6)
    assert len(rig.target.calls) >= before + 3  # within the audit grace (120 s here), not 70 min
    assert max(_runs(rig, job.id).values()) == 1
    assert rig.metrics.total("DelayRunsReleasedAgain") >= 1 and rig.repairs == []


def test_with_repairs_off_a_dead_lettered_delay_run_is_reported_found(t0: datetime) -> None:
    """``PUNCTUAL_AUDIT_REPAIR=false`` finds and reports without repairing (review of QA30: the run
    was counted DelayRunsReleasedAgain with nothing written, no "found" repair, no ChainsBroken: the
    chain stopped silently)."""
    rig, job = _dead_lettered(t0, repair=False)
    before = len(rig.target.calls)
    rig.run(10)
    # Then nothing is released (repairs are off), the broken chain is reported found, alarmed, and
    # nothing is counted released again (no timer was written)
    assert len(rig.target.calls) == before
    found = [r for r in rig.repairs if r.job_id == job.id]
    assert found and all(r.kind == "found" and not r.applied for r in found)
    assert rig.metrics.total("ChainsBroken") >= 1
    assert rig.metrics.total("DelayRunsReleasedAgain") == 0


def _dead_lettered(t0: datetime, repair: bool) -> tuple[AuditRig, Job]:
    """A delay() chain of three runs whose fourth run's message goes to the DLQ (poison,
    maxReceiveCount), never run."""
    rig = AuditRig(MemoryStore(), ManualClock(t0), repair=repair)
    job = rig.jobs.register("default", spec("delay(20 seconds)"), job_id="job")[0]
    rig.run(3)
    work = rig.work

    def dead_letter() -> None:
        for queue in (SHORT, LONG):
            for received in rig.queues.receive(queue, 100, 0, 900):
                rig.queues.delete(queue, received.receipt)

    rig.work = dead_letter  # type: ignore[method-assign]
    rig.run(1, audit_at_s=None)
    rig.work = work  # type: ignore[method-assign]
    return rig, job
