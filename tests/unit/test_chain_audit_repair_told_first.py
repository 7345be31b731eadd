"""A chain repair tells of the range it repaired before the chain goes on (QA30): an auditor that
died right after writing the repaired timer had told nothing (no missed alert, skipped count,
Chain Repaired or Slot Missed event), and no later pass would, the chain being live again."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from audit_harness import AuditRig, Breaker

from factories import spec
from punctual.auditing import AuditReport
from punctual.delivery.notifications.events import CHAIN_REPAIRED as CHAIN_REPAIRED_EVENT
from punctual.delivery.notifications.events import SLOT_MISSED
from punctual.dispatch.queues import MessageKind
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobStore
from punctual.store.memory import MemoryStore
from punctual.timing.timers import Timer


class Died(BaseException):
    """The auditor's process ended (a Lambda cut off): nothing after it runs."""


class DiesAfterATimer:
    """The repairer's store: its first timer write lands, then the process dies."""

    def __init__(self, store: JobStore) -> None:
        self._store = store
        self.died = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def put_timers(self, timers: Sequence[Timer]) -> None:
        self._store.put_timers(timers)
        if not self.died:
            self.died = True
            raise Died


def test_an_auditor_that_dies_after_the_repaired_timer_has_told_of_the_range(t0: datetime) -> None:
    rig = AuditRig(MemoryStore(), ManualClock(t0))
    alert = {"on": ["missed"], "target": {"type": "http", "url": "https://example.com/a"}}
    job = rig.jobs.register("default", spec("rate(1 minute)", alerts=[alert]), job_id="job")[0]
    rig.run(3)
    [head] = rig.future_chain_timers(job)
    Breaker(rig.store).delete(head)  # its chain is broken
    dying = DiesAfterATimer(rig.store)
    rig.auditor.repairer.store = dying  # type: ignore[assignment]
    audit = rig.audit

    def audit_or_die() -> AuditReport | None:
        try:
            return audit()
        except Died:
            return None

    rig.audit = audit_or_die  # type: ignore[method-assign]
    # When the auditor repairs the chain and dies right after the timer's write
    rig.run(8)
    assert dying.died
    # Then the chain goes on, and the range it lost was told of all the same
    [missed] = [r for r in rig.history(job) if r.status is ExecutionStatus.MISSED]
    assert missed.slot == head.slot and missed.slot_count
    assert rig.future_chain_timers(job)
    assert rig.store.get_job("default", job.id).skipped_slots == missed.slot_count
    alerts = [m for m in rig.sim.sent(job.id) if m.kind == MessageKind.ALERT]
    assert [m.slot for m in alerts] == [head.slot]
    types = [e.detail_type for e in rig.events.events]
    assert types.count(CHAIN_REPAIRED_EVENT) == 1 and types.count(SLOT_MISSED) == 1
