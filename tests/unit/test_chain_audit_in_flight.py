"""The chain auditor and chains in flight (QA29): a chain that waits on something still to come
(a run released whose message no worker has taken yet) is not broken, and is not repaired.

The cluster of :mod:`audit_harness` (real pollers, worker, job service and auditor) on the
in-memory store and a manual clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from audit_harness import AuditRig, Breaker

from factories import spec
from punctual.auditing.repairs import TELL_TRIES
from punctual.delivery.notifications.events import CHAIN_REPAIRED as CHAIN_REPAIRED_EVENT
from punctual.models import ExecutionStatus, Job, JobState
from punctual.runtime.clock import ManualClock
from punctual.store.conflicts import CONFLICT_RETRY
from punctual.store.memory import MemoryStore
from punctual.store.memory.fidelity import Fidelity


@pytest.fixture
def rig(t0: datetime) -> AuditRig:
    return AuditRig(MemoryStore(), ManualClock(t0))


def runs(rig: AuditRig, job: Job) -> Counter[str]:
    return Counter(c.slot for c in rig.target.calls if c.job_id == job.id and c.attempt == 1)


def workers_down(rig: AuditRig) -> Callable[[], None]:
    """Stop the workers (messages wait in their queues); the call that brings them back."""
    work = rig.work
    rig.work = lambda: None  # type: ignore[method-assign]

    def back() -> None:
        rig.work = work  # type: ignore[method-assign]

    return back


def no_repair_then_back(rig: AuditRig, job: Job, back: Callable[[], None]) -> Counter[str]:
    """No repair while the workers were down, nor once they are back and ran what waited: the runs."""
    assert rig.repairs == []
    back()
    rig.run(3)
    assert rig.repairs == []
    return runs(rig, job)


def test_last_slots_released_behind_a_long_backlog_are_not_recorded_missed(
    rig: AuditRig, t0: datetime
) -> None:
    # QA29: a job's last slots, released on time while the workers were down far longer than the
    # grace: more of them than the auditor stepped through (eight) were recorded MISSED as "lost"
    # by a completion repair, and their runs dropped when the workers came back
    end = t0 + timedelta(minutes=18, seconds=30)
    job, _ = rig.jobs.register("default", spec("rate(1 minute)", end_at=end.isoformat()), job_id="job")
    rig.run(4)
    back = workers_down(rig)
    rig.run(20)
    ran = no_repair_then_back(rig, job, back)
    assert len(ran) == 18 and max(ran.values()) == 1  # 10:01 .. 10:18, each once (the last at 10:18:00)
    assert not [r for r in rig.history(job) if r.status is ExecutionStatus.MISSED]
    assert rig.store.get_job("default", job.id).state is JobState.COMPLETED


def test_a_resumes_caught_up_last_slots_waiting_for_the_workers_are_not_a_broken_chain(
    rig: AuditRig, t0: datetime
) -> None:
    # QA29: a job paused, resumed past its end_at: the resume's catch-up released its owed slots
    # (the last one completes the job when a worker takes it) while the workers were down
    end = t0 + timedelta(minutes=9, seconds=30)
    job, _ = rig.jobs.register(
        "default", spec("rate(3 minutes)", end_at=end.isoformat(), catchup={"policy": "all"}), job_id="job"
    )
    rig.run(1)
    rig.jobs.pause("default", job.id)
    rig.run(12)
    back = workers_down(rig)
    rig.jobs.resume("default", job.id)
    rig.run(8)
    ran = no_repair_then_back(rig, job, back)
    assert len(ran) == 3 and max(ran.values()) == 1  # 10:03, 10:06, 10:09
    stored = rig.store.get_job("default", job.id)
    assert stored.state is JobState.COMPLETED and stored.state_reason is None


def test_a_repair_whose_bookkeeping_fails_has_restarted_the_chain_first(t0: datetime) -> None:
    # QA29: a repair took its lock (the lost slots' MISSED record) and then counted the job's
    # skipped slots (a write of the job item, which a transaction on it can hold) before it wrote
    # the chain's next timer: that write failing left the lock taken and no timer, so the job
    # stayed stopped until the next audit period found the slots after it lost as well, and the
    # audit failed with the repair unreported
    clock = ManualClock(t0)
    fidelity = Fidelity(clock=lambda: clock.now().timestamp())
    rig = AuditRig(MemoryStore(fidelity=fidelity), clock)
    job, _ = rig.jobs.register("default", spec("rate(1 minute)"), job_id="job")
    rig.run(3)
    breaker = Breaker(rig.store)
    breaker.drop_next_timers(job)
    rig.run(1, audit_at_s=None)
    breaker.stop_dropping()
    rig.run(3, audit_at_s=None)
    before = len(runs(rig, job))
    # every try of the count fails (the store's own retries, and each of the repair's)
    fidelity.inject_conflict("add_skipped", times=CONFLICT_RETRY.attempts * TELL_TRIES)
    [repair] = rig.audit().repairs  # (the skipped count is not added: logged)
    assert repair.applied and repair.missed_count >= 1
    assert [e for e in rig.events.events if e.detail_type == CHAIN_REPAIRED_EVENT]
    rig.run(4, audit_at_s=None)  # no audit comes back to it
    assert len(runs(rig, job)) >= before + 3
    assert max(runs(rig, job).values()) == 1
    assert rig.store.get_job("default", job.id).skipped_slots == 0
