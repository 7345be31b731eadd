"""Telling an untold range is held by one auditor at a time (review of QA30, a149643f): two
auditors repairing one broken chain at once both retold an earlier range its repairer had died
before telling of, so one of them counted it in ``skipped_slots`` and sent its Chain Repaired and
Slot Missed a second time. Its telling is now claimed first (a conditional save of its record), and
a claim held by a teller that died lapses after a minute: told once, never zero times."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from audit_harness import minute_of
from test_chain_audit_repair_told_first import DiesOnce, _broken, _told

from punctual.auditing import AuditReport
from punctual.delivery.notifications.events import SLOT_MISSED
from punctual.models import ExecutionStatus


class RunsFirst:
    """A port of the first auditor's repairer whose first call of ``method`` (one that ``when``
    picks, by its arguments) lets a second auditor's whole pass run before it."""

    def __init__(self, inner: Any, method: str, second_pass: Any, when: Any = lambda *args: True) -> None:
        self._inner, self._method, self._second, self._when = inner, method, second_pass, when
        self.report: AuditReport | None = None

    def __getattr__(self, name: str) -> Any:
        called = getattr(self._inner, name)
        if name != self._method or self.report is not None:
            return called

        def hooked(*args: Any) -> Any:
            if self._when(*args):
                self.report = self._second()
            return called(*args)

        return hooked


def _slot_missed_events(rig: Any) -> list[str]:
    return sorted(e.detail["slot"] for e in rig.events.events if e.detail_type == SLOT_MISSED)


def test_two_auditors_racing_tell_an_untold_range_once(t0: datetime) -> None:
    rig, job, _ = _broken(t0)
    dying = DiesOnce(rig.auditor.repairer.queues, "send", after=False)  # range 1 recorded, untold
    rig.auditor.repairer.queues = dying
    second = rig.make_auditor()

    def at_a_missed_records_save(execution: Any, expect: Any, ttl: int) -> bool:
        return expect is not None and expect.statuses == frozenset({ExecutionStatus.MISSED})

    # When the next repair's first save of range 1 (claim or told mark) lets a second auditor's
    # whole pass run before it: both read range 1 untold
    racing = RunsFirst(
        rig.store,
        "save_execution",
        lambda: second.run(minute_of(rig.clock.now())),
        at_a_missed_records_save,
    )
    rig.auditor.repairer.store = racing
    rig.run(8)
    assert dying.died and racing.report is not None
    # Then each range is counted once and has one Slot Missed event
    ranges, counted, alerts, _, skipped = _told(rig, job)
    assert len(ranges) == 2
    assert skipped == counted
    assert _slot_missed_events(rig) == ranges
    assert alerts == ranges


def test_a_range_its_writer_is_telling_of_is_left_to_it(t0: datetime) -> None:
    rig, job, head = _broken(t0)
    second = rig.make_auditor()
    # When a second auditor's pass runs while the repairer that recorded the range is telling of it
    racing = RunsFirst(rig.auditor.repairer.queues, "send", lambda: second.run(minute_of(rig.clock.now())))
    rig.auditor.repairer.queues = racing
    rig.run(8)
    # Then the second auditor wrote and told nothing: the range is told once, by its writer
    assert racing.report is not None and racing.report.repaired == 0
    ranges, counted, alerts, slots_missed, skipped = _told(rig, job)
    assert ranges == [head.slot]
    assert (skipped, alerts, slots_missed) == (counted, ranges, ranges)


def test_a_range_whose_claimer_died_before_telling_is_told_by_a_later_repair(t0: datetime) -> None:
    rig, job, head = _broken(t0)
    # When the range's writer dies before telling of it, and so does the next repair, which had
    # claimed it (each at the range's missed alert)
    claimer = DiesOnce(rig.auditor.repairer.queues, "send", after=False)
    writer = DiesOnce(claimer, "send", after=False)
    rig.auditor.repairer.queues = writer
    rig.run(8)
    assert writer.died and claimer.died
    # Then a later repair, its claim lapsed, told of it: every range told of once, never zero times
    ranges, counted, alerts, slots_missed, skipped = _told(rig, job)
    assert ranges[0] == head.slot and rig.future_chain_timers(job)
    assert (skipped, alerts, slots_missed) == (counted, ranges, ranges)
