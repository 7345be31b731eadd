"""The chain auditor and chains in flight (QA29): a chain that waits on something still to come
(a run released whose message no worker has taken yet) is not broken, and is not repaired.

The cluster of :mod:`audit_harness` (real pollers, worker, job service and auditor) on the
in-memory store and a manual clock.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import pytest
from audit_harness import AuditRig

from factories import spec
from punctual.models import Job
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore


@pytest.fixture
def rig(t0: datetime) -> AuditRig:
    return AuditRig(MemoryStore(), ManualClock(t0))


def runs(rig: AuditRig, job: Job) -> Counter[str]:
    return Counter(c.slot for c in rig.target.calls if c.job_id == job.id and c.attempt == 1)


def test_a_delay_chain_whose_released_run_waits_for_the_workers_is_not_repaired(rig: AuditRig) -> None:
    # QA29: the workers down (or behind a backlog) longer than the grace: the next run of a delay()
    # job was released, its message waits in the queue, so no run has ended to chain the one after
    job, _ = rig.jobs.register("default", spec("delay(20 seconds)"), job_id="job")
    rig.run(3)
    work = rig.work
    rig.work = lambda: None  # type: ignore[method-assign]
    rig.run(8)
    waiting = [m.slot for m in rig.sim.sent(job.id) if m.slot not in runs(rig, job)]
    assert waiting  # a run released, not run
    # Then the chain is in flight, not broken: no repair, no second release of that run
    assert rig.repairs == []
    rig.work = work  # type: ignore[method-assign]
    rig.run(3)
    assert rig.repairs == []
    assert runs(rig, job)[waiting[0]] == 1 and max(runs(rig, job).values()) == 1
    assert len(rig.future_chain_timers(job)) == 1
