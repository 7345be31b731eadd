"""``recovered`` under every interleaving of a failure with the success that recovers the streak.

Issue 29's finding: a slot that failed while the ``recovered`` alert of the streak before it
was being delivered joined the old streak, which was then closed; the next success sent
nothing, so that failure was never followed by a ``recovered``. A success now reads the streak,
makes the alert, and ends the streak only as it was read (a conditional write); what joined
since, or failed for a later slot, stays as a streak of its own.

The success's steps are: read the streak, make the alert, end the streak, deliver. The failure
(of the slot after the successful one) is let in before each of them, and after the last.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from execution_harness import FakeTarget
from factories import job as make_job
from punctual.delivery.notifications import Alerter
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.models import Alert, AlertCondition, Execution, ExecutionStatus, Job
from punctual.runtime.clock import ManualClock
from punctual.store.base import Streak
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
HOOK = {"type": "http", "url": "https://alerts.example.com/hook"}
STEPS = ("read the streak", "make the alert", "end the streak", "deliver", "after it all")


def ended(job: Job, minute: int, status: ExecutionStatus) -> Execution:
    slot = T0 + timedelta(minutes=minute)
    return Execution(
        job_id=job.id,
        tenant=job.tenant,
        slot=slot_key(slot),
        scheduled_at=slot,
        status=status,
        attempt=1,
        started_at=slot,
        finished_at=slot + timedelta(seconds=1),
        error=None if status is ExecutionStatus.SUCCEEDED else "HTTP 500",
    )


class Interleaving(MemoryStore):
    """A store that lets ``intrude`` run once, just before the step ``before`` of a success."""

    def __init__(self, before: str) -> None:
        super().__init__()
        self.before = before
        self.intrude: Callable[[], None] | None = None

    def _step(self, name: str) -> None:
        if name == self.before and self.intrude is not None:
            intrude, self.intrude = self.intrude, None
            intrude()

    def get_streak(self, tenant: str, job_id: str) -> Streak | None:
        self._step("read the streak")
        return super().get_streak(tenant, job_id)

    def create_alert(self, alert: Alert, ttl_epoch_s: int) -> bool:
        if alert.condition is AlertCondition.RECOVERED:
            self._step("make the alert")
        return super().create_alert(alert, ttl_epoch_s)

    def replace_streak(self, tenant: str, job_id: str, expected: Streak, new: Streak | None) -> bool:
        self._step("end the streak")
        return super().replace_streak(tenant, job_id, expected, new)


@pytest.mark.parametrize("before", STEPS)
def test_a_failure_during_a_recovery_is_recovered_by_the_next_success(before: str) -> None:
    # Given a job failing since slot 0, with rules on failed and recovered
    store = Interleaving(before)
    clock = ManualClock(T0 + timedelta(minutes=10))
    job = make_job(alerts=[{"on": ["failed", "recovered"], "target": HOOK}])
    sent: list[dict[str, Any]] = []

    def deliver(ctx: SlotContext) -> TargetResult:
        if "#alert-recovered" in ctx.slot:
            store._step("deliver")
        return TargetResult.ok("HTTP 200")

    class Recording(FakeTarget):
        def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
            sent.append(payload)
            return super().invoke(target, payload, ctx)

    alerter = Alerter(store, Recording(deliver), clock)
    alerter.ended(job, ended(job, 0, ExecutionStatus.FAILED))
    # When slot 1 succeeds while slot 2's failure comes in at that step
    store.intrude = lambda: alerter.ended(job, ended(job, 2, ExecutionStatus.FAILED))
    alerter.ended(job, ended(job, 1, ExecutionStatus.SUCCEEDED))
    if store.intrude is not None:  # "after it all"
        store.intrude()
    # And slot 3 succeeds
    alerter.ended(job, ended(job, 3, ExecutionStatus.SUCCEEDED))
    # Then each failure was followed by exactly one recovered: slot 1 for slot 0, slot 3 for slot 2
    recovered = [(p["slot"], p["failing_since"]) for p in sent if p["condition"] == "recovered"]
    s = [slot_key(T0 + timedelta(minutes=m)) for m in range(4)]
    assert recovered == [(s[1], s[0]), (s[3], s[2])]
    failed = sorted(p["slot"] for p in sent if p["condition"] == "failed")
    assert failed == [s[0], s[2]]
    # And the job is not failing any more
    assert store.get_streak(job.tenant, job.id) is None


def test_a_success_whose_streak_holds_a_later_slots_failure_recovers_only_the_earlier() -> None:
    # Given slots 0 and 2 failed (slot 2 before slot 1 ended: overlap allow), then slot 1 succeeds
    store = MemoryStore()
    clock = ManualClock(T0 + timedelta(minutes=10))
    job = make_job(alerts=[{"on": ["recovered"], "target": HOOK}])
    hooks = FakeTarget()
    alerter = Alerter(store, hooks, clock)
    for minute, status in (
        (0, ExecutionStatus.FAILED),
        (2, ExecutionStatus.FAILED),
        (1, ExecutionStatus.SUCCEEDED),
    ):
        alerter.ended(job, ended(job, minute, status))
    # Then slot 1 recovered slot 0, and slot 2's failure is a streak still open
    assert store.get_streak(job.tenant, job.id) == Streak(
        slot_key(T0 + timedelta(minutes=2)), 1, slot_key(T0 + timedelta(minutes=2))
    )
    alerter.ended(job, ended(job, 3, ExecutionStatus.SUCCEEDED))
    recovered = [alert.key_slot for alert in store.list_alerts(job.tenant, job.id, 10)]
    assert sorted(recovered) == [slot_key(T0), slot_key(T0 + timedelta(minutes=2))]
    assert store.get_streak(job.tenant, job.id) is None
