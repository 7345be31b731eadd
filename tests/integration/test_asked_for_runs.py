"""Runs a user asked for, and late alerts (QA): a paused job's triggered or backfilled slot keeps
its retries; a backfilled slot and a queued slot's turn raise no ``late`` alert or event (only a
slot's first release can be late)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig
from factories import spec
from punctual.delivery.notifications import Alerter, EventPublisher, MemoryEventSink, Notifier
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.execution.claim import PAUSED_RETRY_NOTE
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.usecases.backfill_runner import BackfillRunner
from punctual.usecases.jobs import JobService, QueueRouting

HOOK = {"type": "http", "url": "https://alerts.example.com/hook"}
FIXED_10S = {"max_attempts": 3, "backoff": "fixed", "base_seconds": 10, "jitter": False}


def T(h: int, m: int, s: float = 0) -> datetime:
    return datetime(2026, 12, 1, h, m, tzinfo=UTC) + timedelta(seconds=s)


class World:
    """The job service, a poller, a worker, events and alerts on one manual clock; the target
    answers ``script(ctx)`` and records (slot, attempt)."""

    def __init__(self, start: datetime, script: Any) -> None:
        self.clock = ManualClock(start)
        self.store = MemoryStore()
        self.events = MemoryEventSink()
        alerter = Alerter(self.store, FakeTarget(), self.clock, signing_secrets=lambda job: ("whsec_test",))
        self.calls: list[tuple[str, int]] = []

        def run(ctx: SlotContext) -> TargetResult:
            self.calls.append((ctx.slot, ctx.attempt))
            result: TargetResult = script(ctx, self)
            return result

        notifier = Notifier(EventPublisher(self.events), alerter)
        self.rig = Rig(self.store, self.clock, target=FakeTarget(run), notifier=notifier)
        routing = QueueRouting((SHORT,), (LONG,))
        self.jobs = JobService(self.store, self.rig.queues, self.clock, LAYOUT, routing)
        self.backfills = BackfillRunner(
            self.store,
            self.rig.queues,
            self.clock,
            LAYOUT,
            routing,
            max_parallel=4,
            max_slots=100,
            step_s=2.0,
        )
        self.worker = self.rig.worker()

    def until(self, end: datetime) -> None:
        while self.clock.now() < end:
            self.clock.set(min(self.clock.now() + timedelta(seconds=1), end))
            self.rig.poll()
            self.rig.work_until_idle(self.worker, SHORT, rounds=200)

    def late(self) -> tuple[list[Any], list[Any]]:
        alerts = [a for a in self.store.list_alerts("default", "j", 100) if a.condition.value == "late"]
        events = [e for e in self.events.events if e.detail_type == "Slot Late"]
        return alerts, events


def _fails_once(ctx: SlotContext, world: World) -> TargetResult:
    return TargetResult.retryable("HTTP 503") if ctx.attempt == 1 else TargetResult.ok()


def _ten_fails_once(ctx: SlotContext, world: World) -> TargetResult:
    if ctx.slot == "2026-12-01T10:00:00Z" and ctx.attempt == 1:
        return TargetResult.retryable("HTTP 503")
    return TargetResult.ok()


@pytest.mark.parametrize("schedule", ["cron(0 * * * ? *)", "after(p)"])
def test_a_paused_jobs_triggered_slot_that_fails_once_is_retried(schedule: str) -> None:
    """QA28, after(p): a run-now of a paused after() job ran its first attempt but ended FAILED ("its
    retry was not started: the job is paused"): the child's own trigger was taken for a parent's,
    whose key its children's slots carry (a parent's trigger is not the child's: the last test)."""
    world = World(T(9, 59, 30), _fails_once)
    world.jobs.register("default", spec("cron(0 * * * ? *)"), job_id="p")
    world.jobs.register("default", spec(schedule, retry=FIXED_10S), job_id="j")
    world.jobs.pause("default", "j")
    slot = world.jobs.trigger("default", "j", request_key="k")
    world.until(T(9, 59, 55))
    assert world.calls == [(slot, 1), (slot, 2)]
    record = world.store.get_execution("default", "j", slot)
    assert record is not None and (record.status.value, record.attempt) == ("SUCCEEDED", 2)


def test_a_paused_jobs_backfilled_slot_that_fails_once_is_retried_and_the_backfill_ends_done() -> None:
    world = World(T(9, 59, 30), _fails_once)
    job = spec("cron(0 * * * ? *)", start_at="2026-12-01T07:00:00Z", retry=FIXED_10S)
    world.jobs.register("default", job, job_id="j")
    world.jobs.pause("default", "j")
    backfill = world.backfills.start("default", "j", T(8, 0), T(8, 30))
    world.until(T(10, 1))
    assert world.calls == [("2026-12-01T08:00:00Z", 1), ("2026-12-01T08:00:00Z", 2)]
    done = world.store.get_backfill("default", "j", backfill.id)
    assert done is not None and done.state.value == "DONE"


def test_backfilled_slots_raise_no_late_alert_or_event() -> None:
    world = World(T(9, 59, 30), lambda ctx, w: TargetResult.ok())
    rule = {"on": ["late"], "late_after_seconds": 30, "target": HOOK}
    world.jobs.register(
        "default", spec("cron(0/30 * * * ? *)", start_at="2026-12-01T07:00:00Z", alerts=[rule]), job_id="j"
    )
    world.backfills.start("default", "j", T(8, 0), T(9, 30))
    world.until(T(9, 59, 50))
    assert len(world.calls) == 3
    assert world.late() == ([], [])


def test_a_queued_slot_released_on_time_raises_no_late_alert_when_its_turn_comes_late() -> None:
    world = World(T(9, 59, 30), _ten_fails_once)
    retry = {"max_attempts": 2, "backoff": "fixed", "base_seconds": 150, "jitter": False}
    rule = {"on": ["late"], "late_after_seconds": 30, "target": HOOK}
    world.jobs.register(
        "default", spec("cron(* * * * ? *)", overlap="queue", retry=retry, alerts=[rule]), job_id="j"
    )
    world.until(T(10, 5))
    assert ("2026-12-01T10:01:00Z", 1) in world.calls  # queued behind 10:00's retry, run at its turn
    assert world.late() == ([], [])


def test_a_cancelled_backfills_queued_slot_does_not_start_at_its_turn() -> None:
    """QA: a queue job's backfilled slot QUEUED behind a slot waiting for its retry ran at its turn,
    after the backfill was cancelled ('what has not started is not run')."""

    world = World(T(9, 59, 30), _ten_fails_once)
    retry = {"max_attempts": 2, "backoff": "fixed", "base_seconds": 100, "jitter": False}
    job = spec("cron(0/10 * * * ? *)", start_at="2026-12-01T09:00:00Z", overlap="queue", retry=retry)
    world.jobs.register("default", job, job_id="j")
    world.until(T(10, 0, 10))  # 10:00 failed once: its retry holds the turn
    backfill = world.backfills.start("default", "j", T(9, 50), T(10, 0))
    world.until(T(10, 0, 20))
    queued = world.store.get_execution("default", "j", "2026-12-01T09:50:00Z")
    assert queued is not None and queued.status.value == "QUEUED"
    world.backfills.cancel("default", "j", backfill.id)
    world.until(T(10, 3))
    assert ("2026-12-01T09:50:00Z", 1) not in world.calls
    ended = world.store.get_execution("default", "j", "2026-12-01T09:50:00Z")
    assert ended is not None and (ended.status.value, ended.error) == ("SKIPPED", "backfill cancelled")
    assert ("2026-12-01T10:00:00Z", 2) in world.calls  # the turn went on


def test_a_paused_childs_retry_does_not_run_because_its_parents_slot_was_triggered() -> None:
    """Review: an after() child's slot carries its parent's key, so the child of a triggered
    parent slot (<instant>~m<token>) counted as asked for and retried while paused."""

    def child_fails_once(ctx: SlotContext, world: World) -> TargetResult:
        failing = ctx.job_id == "c" and ctx.attempt == 1
        return TargetResult.retryable("HTTP 503") if failing else TargetResult.ok()

    world = World(T(9, 59, 30), child_fails_once)
    world.jobs.register("default", spec("cron(0 * * * ? *)"), job_id="p")
    world.jobs.register("default", spec("after(p)", retry=FIXED_10S), job_id="c")
    slot = world.jobs.trigger("default", "p", request_key="k")
    world.until(T(9, 59, 32))  # the parent ran, the child's attempt 1 failed: its retry waits
    world.jobs.pause("default", "c")
    world.until(T(9, 59, 59))
    assert world.calls.count((slot, 2)) == 0
    record = world.store.get_execution("default", "c", slot)
    # its failed attempt ends the slot FAILED, its retry not started (failure report, alert)
    assert record is not None and record.status.value == "FAILED"
    assert record.error == f"HTTP 503; {PAUSED_RETRY_NOTE}"
