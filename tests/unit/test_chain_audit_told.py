"""A repair tells of its lost range step by step (review of QA29).

The repair writes the chain's next timer first, then tells of the range: its ``missed`` alert, its
after() children's same slots recorded MISSED, the skipped count. Those were one try in a row, so
a conflict on the count (a write of the job item a transaction can hold) lost the alert and the
children's records as well. Each step is now its own, tried again; one that still fails loses only
itself.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from audit_harness import AuditRig, Breaker

from factories import spec
from punctual.auditing.repairs import TELL_TRIES
from punctual.dispatch.queues import MessageKind
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.conflicts import CONFLICT_RETRY
from punctual.store.memory import MemoryStore
from punctual.store.memory.fidelity import Fidelity

ALERTS = [{"on": ["missed"], "target": {"type": "http", "url": "https://a.example.com/h"}}]


def _broken(t0: datetime, with_child: bool, conflict: bool) -> AuditRig:
    """A job whose chain broke, a child after it, and the skipped count failing every try."""
    clock = ManualClock(t0)
    fidelity = Fidelity(clock=lambda: clock.now().timestamp())
    rig = AuditRig(MemoryStore(fidelity=fidelity), clock)
    job, _ = rig.jobs.register("default", spec("rate(1 minute)", alerts=ALERTS), job_id="job")
    if with_child:
        rig.jobs.register("default", spec("after(job)"), job_id="child")
    rig.run(3)
    breaker = Breaker(rig.store)
    breaker.drop_next_timers(job)
    rig.run(1, audit_at_s=None)
    breaker.stop_dropping()
    rig.run(3, audit_at_s=None)
    if conflict:
        fidelity.inject_conflict("add_skipped", times=CONFLICT_RETRY.attempts * TELL_TRIES * 2)
    return rig


@pytest.mark.parametrize("conflict", [False, True])
def test_a_repairs_missed_alert_is_sent_even_when_the_skipped_count_fails(
    t0: datetime, conflict: bool
) -> None:
    rig = _broken(t0, with_child=False, conflict=conflict)
    [repair] = rig.audit().repairs
    assert repair.applied and repair.missed_count >= 1
    alerts = [m.slot for _, m in rig.sim.queues.log if m.kind is MessageKind.ALERT]
    assert alerts == [repair.missed_from]  # the team is told of the lost range


@pytest.mark.parametrize("conflict", [False, True])
def test_a_repairs_after_children_are_recorded_even_when_the_skipped_count_fails(
    t0: datetime, conflict: bool
) -> None:
    rig = _broken(t0, with_child=True, conflict=conflict)
    [repair] = [r for r in rig.audit().repairs if r.job_id == "job"]
    assert repair.applied
    child = rig.store.get_job("default", "child")
    missed = [r.slot for r in rig.history(child) if r.status is ExecutionStatus.MISSED]
    assert missed == [repair.missed_from]
