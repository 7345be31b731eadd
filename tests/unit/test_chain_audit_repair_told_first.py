"""A chain repair tells of the range it repaired before the chain goes on (QA30): an auditor that
died right after writing the repaired timer had told nothing (no missed alert, skipped count,
Chain Repaired or Slot Missed event), and no later pass would, the chain being live again."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from audit_harness import AuditRig, Breaker

from factories import spec
from punctual.auditing import AuditReport
from punctual.delivery.notifications.events import CHAIN_REPAIRED as CHAIN_REPAIRED_EVENT
from punctual.delivery.notifications.events import SLOT_MISSED
from punctual.dispatch.queues import MessageKind
from punctual.models import ExecutionStatus, Job, JobState
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import Timer


class Died(BaseException):
    """The auditor's process ended (a Lambda cut off): nothing after it runs."""


class DiesOnce:
    """A port of the repairer's whose first call of ``method`` dies with the process: after its
    write lands (``after``), or before it."""

    def __init__(self, inner: Any, method: str, after: bool) -> None:
        self._inner, self._method, self._after = inner, method, after
        self.died = False

    def __getattr__(self, name: str) -> Any:
        called = getattr(self._inner, name)
        if name != self._method or self.died:
            return called

        def dying(*args: Any) -> None:
            self.died = True
            if self._after:
                called(*args)
            raise Died

        return dying


def _broken(t0: datetime, **over: Any) -> tuple[AuditRig, Job, Timer]:
    """A rate job with a missed alert rule whose head timer is deleted (its chain broken), and an
    auditor whose death (:class:`Died`) ends its pass, the next pass going on as usual. ``over``:
    the job spec's other fields."""
    rig = AuditRig(MemoryStore(), ManualClock(t0))
    alert = {"on": ["missed"], "target": {"type": "http", "url": "https://example.com/a"}}
    job = rig.jobs.register("default", spec("rate(1 minute)", alerts=[alert], **over), job_id="job")[0]
    rig.run(3)
    [head] = rig.future_chain_timers(job)
    Breaker(rig.store).delete(head)
    audit = rig.audit

    def audit_or_die() -> AuditReport | None:
        try:
            return audit()
        except Died:
            return None

    rig.audit = audit_or_die  # type: ignore[method-assign]
    return rig, job, head


def test_an_auditor_that_dies_after_the_repaired_timer_has_told_of_the_range(t0: datetime) -> None:
    rig, job, head = _broken(t0)
    dying = DiesOnce(rig.store, "put_timers", after=True)
    rig.auditor.repairer.store = dying
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


def test_a_range_an_auditor_died_before_telling_of_is_told_by_the_next_repair(t0: datetime) -> None:
    rig, job, head = _broken(t0)
    dying = DiesOnce(rig.auditor.repairer.queues, "send", after=False)  # the range's missed alert
    rig.auditor.repairer.queues = dying
    # When the auditor dies after recording the lost range, before telling of it or writing the timer
    rig.run(8)
    assert dying.died
    # Then the next pass repaired the chain from after that range, and told of both ranges
    missed = sorted((r for r in rig.history(job) if r.status is ExecutionStatus.MISSED), key=lambda r: r.slot)
    assert len(missed) == 2 and missed[0].slot == head.slot
    assert rig.future_chain_timers(job)
    counted = sum(r.slot_count or 1 for r in missed)
    assert rig.store.get_job("default", job.id).skipped_slots == counted
    alerts = [m.slot for m in rig.sim.sent(job.id) if m.kind == MessageKind.ALERT]
    assert sorted(alerts) == [r.slot for r in missed]
    slots_missed = [e.detail["slot"] for e in rig.events.events if e.detail_type == SLOT_MISSED]
    assert sorted(slots_missed) == [r.slot for r in missed]


def _told(rig: AuditRig, job: Job) -> tuple[list[str], int, list[str], list[str], int]:
    """The job's MISSED ranges (first slots), the slots they stand for, its missed alerts' slots, its
    Slot Missed events' slots, and its skipped count."""
    missed = sorted((r for r in rig.history(job) if r.status is ExecutionStatus.MISSED), key=lambda r: r.slot)
    alerts = sorted(m.slot for m in rig.sim.sent(job.id) if m.kind == MessageKind.ALERT)
    slots_missed = sorted(e.detail["slot"] for e in rig.events.events if e.detail_type == SLOT_MISSED)
    skipped = rig.store.get_job("default", job.id).skipped_slots
    return [r.slot for r in missed], sum(r.slot_count for r in missed), alerts, slots_missed, skipped


def test_an_auditor_that_dies_after_telling_before_the_timer_has_the_range_told_once(t0: datetime) -> None:
    """Review of QA30: the next repair told of the range again (a second skipped count, Slot Missed
    and Chain Repaired) though its repairer had told of it: one fault counted it twice."""
    rig, job, head = _broken(t0)
    dying = DiesOnce(rig.store, "put_timers", after=False)
    rig.auditor.repairer.store = dying
    # When the auditor tells of the range, then dies just before the timer's write
    rig.run(8)
    assert dying.died
    # Then the next pass repairs from after that range, and each range is told of once
    ranges, counted, alerts, slots_missed, skipped = _told(rig, job)
    assert len(ranges) == 2 and ranges[0] == head.slot
    assert rig.future_chain_timers(job)
    assert skipped == counted
    assert alerts == ranges and slots_missed == ranges
    types = [e.detail_type for e in rig.events.events]
    assert types.count(CHAIN_REPAIRED_EVENT) == 2


def test_a_range_untold_by_a_dead_repairer_is_told_when_the_next_repair_completes_the_job(
    t0: datetime,
) -> None:
    """Review of QA30: the untold range was told only when the next repair wrote a timer; one that
    completed the job (its end_at passed) left it untold for good."""
    rig, job, head = _broken(t0, end_at=(t0 + timedelta(minutes=6)).isoformat())
    dying = DiesOnce(rig.auditor.repairer.queues, "send", after=False)  # at the range's missed alert
    rig.auditor.repairer.queues = dying
    # When the auditor dies before telling of the range, and the next repair finds no slot left
    rig.run(8)
    assert dying.died
    # Then the job is completed and both ranges were told of
    assert rig.store.get_job("default", job.id).state is JobState.COMPLETED
    ranges, counted, alerts, slots_missed, skipped = _told(rig, job)
    assert len(ranges) == 2 and ranges[0] == head.slot
    assert skipped == counted
    assert alerts == ranges and slots_missed == ranges
