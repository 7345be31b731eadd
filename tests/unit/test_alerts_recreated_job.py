"""A job deleted while it was failing, and created again at its id (as an EventBridge schedule is
deleted and created again under its name, or a one-time job deleted after completion): the new job
is not told of the old one's failures (QA28: its first success sent a ``recovered`` alert,
``failing_since`` a slot of the deleted job), and its alerts are not held back by the old one's
(its first failure's alert was HELD by the deleted job's ``min_interval_seconds`` mark), nor taken
for alerts it raised already (a backfill failing a slot the deleted job failed told nobody)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig
from factories import spec
from punctual.delivery.notifications import Alerter, EventPublisher, MemoryEventSink, Notifier
from punctual.delivery.targets.base import TargetResult
from punctual.dispatch.queues import MessageKind, message_for
from punctual.models import Job
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobStore
from punctual.timing.timers import slot_key
from punctual.usecases.backfill_runner import BackfillRunner
from punctual.usecases.backfills import BackfillState
from punctual.usecases.jobs import JobService, QueueRouting

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
HOOK = {"type": "http", "url": "https://alerts.example.com/hook"}
RULES = [{"on": ["failed", "recovered"], "target": HOOK}]
FAIL, OK = TargetResult.permanent("HTTP 500"), TargetResult.ok("HTTP 200")


class _Recorder(FakeTarget):
    """The alerts' target: every payload sent."""

    def __init__(self) -> None:
        super().__init__(*[OK] * 10)
        self.payloads: list[Any] = []

    def invoke(self, target: Any, payload: Any, ctx: Any) -> TargetResult:
        self.payloads.append(payload)
        return super().invoke(target, payload, ctx)


def _run(rig: Rig, job: Job, minute: int) -> None:
    slot = T0 + timedelta(minutes=minute)
    rig.clock.set(slot + timedelta(seconds=0.5))
    rig.send(message_for(job, slot_key(slot), slot, 1, MessageKind.FIRE, rig.clock.now()))
    rig.work_until_idle(rig.worker())


def test_a_job_created_again_at_a_failing_jobs_id_is_not_told_it_recovered(store: JobStore) -> None:
    # Given a job with failed and recovered rules whose two slots failed (its failure streak open)
    clock = ManualClock(T0)
    hooks = _Recorder()
    alerter = Alerter(store, hooks, clock, signing_secrets=lambda job: ("whsec_test",))
    rig = Rig(store, clock, target=FakeTarget(FAIL, FAIL, OK, FAIL, OK))
    rig.notifier = Notifier(EventPublisher(MemoryEventSink()), alerter)
    jobs = JobService(store, rig.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    old, _ = jobs.register("default", spec(alerts=RULES, retry={"max_attempts": 1}), job_id="etl")
    _run(rig, old, 0)
    _run(rig, old, 1)
    assert [p["condition"] for p in hooks.payloads] == ["failed", "failed"]
    # When it is deleted and, later, created again at its id
    jobs.delete("default", "etl")
    clock.advance(600)
    new, _ = jobs.register("default", spec(alerts=RULES, retry={"max_attempts": 1}), job_id="etl")
    # Then its first success recovers nothing: it never failed
    _run(rig, new, 20)
    assert [p["condition"] for p in hooks.payloads] == ["failed", "failed"]
    # And its own failure, then success, are told, the recovery since its own failed slot
    _run(rig, new, 21)
    _run(rig, new, 22)
    told = [(p["condition"], p["slot"], p.get("failing_since")) for p in hooks.payloads[2:]]
    since = slot_key(T0 + timedelta(minutes=21))
    assert told == [("failed", since, None), ("recovered", slot_key(T0 + timedelta(minutes=22)), since)]


@pytest.mark.parametrize("kept", [False, True], ids=["one-time-again", "kept-job-again"])
def test_a_one_time_job_deleted_after_its_failed_slot_leaves_no_streak_behind(
    store: JobStore, kept: bool
) -> None:
    # Given a one-time job, deleted once done, whose one slot failed (the alerts of a slot's end
    # come after the delete: they must not leave a failure streak behind it)
    clock = ManualClock(T0)
    hooks = _Recorder()
    rig = Rig(store, clock, target=FakeTarget(FAIL, OK))
    rig.notifier = Notifier(EventPublisher(MemoryEventSink()), Alerter(store, hooks, clock))
    jobs = JobService(store, rig.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    once = {"alerts": RULES, "retry": {"max_attempts": 1}, "delete_after_completion": True}
    job, _ = jobs.register("default", spec("at(2026-11-30T10:05:00)", **once), job_id="reminder")
    slot = T0 + timedelta(minutes=5)
    clock.set(slot + timedelta(seconds=0.5))
    rig.send(message_for(job, slot_key(slot), slot, 1, MessageKind.FIRE, clock.now(), last=True))
    rig.work_until_idle(rig.worker())
    assert store.get_job("default", "reminder") is None  # deleted after completion
    assert store.get_streak("default", "reminder") is None
    # When another job is created at its id (one-time, or one of every minute kept), and succeeds
    clock.advance(600)
    if kept:  # (a one-time job deleted after its success ended the streak itself: QA28 missed it)
        again, _ = jobs.register("default", spec(alerts=RULES, retry={"max_attempts": 1}), job_id="reminder")
        _run(rig, again, 20)
    else:
        again, _ = jobs.register("default", spec("at(2026-11-30T10:30:00)", **once), job_id="reminder")
        slot = T0 + timedelta(minutes=30)
        clock.set(slot + timedelta(seconds=0.5))
        rig.send(message_for(again, slot_key(slot), slot, 1, MessageKind.FIRE, clock.now(), last=True))
        rig.work_until_idle(rig.worker())
    # Then only the first job's failure was told: the second never failed, nor recovered
    assert [p["condition"] for p in hooks.payloads] == ["failed"]


def test_a_job_created_again_at_its_id_is_not_held_back_by_the_deleted_jobs_alerts(store: JobStore) -> None:
    # Given a job whose rule sends at most one alert an hour, whose slot failed (alerted) and whose
    # next slot failed too (its alert held back by the rule)
    clock = ManualClock(T0)
    hooks = _Recorder()
    rig = Rig(store, clock, target=FakeTarget(FAIL, FAIL, FAIL, FAIL))
    rig.notifier = Notifier(EventPublisher(MemoryEventSink()), Alerter(store, hooks, clock))
    jobs = JobService(store, rig.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    hourly = [{"on": ["failed"], "target": HOOK, "min_interval_seconds": 3600}]
    old, _ = jobs.register("default", spec(alerts=hourly, retry={"max_attempts": 1}), job_id="etl")
    _run(rig, old, 0)
    _run(rig, old, 1)
    # When it is deleted and created again at its id ten minutes later, and that job's slot fails
    jobs.delete("default", "etl")
    clock.advance(600)
    new, _ = jobs.register("default", spec(alerts=hourly, retry={"max_attempts": 1}), job_id="etl")
    _run(rig, new, 20)
    # Then the new job's first failure is told (the deleted job's alert held back nothing of it),
    # with nothing held back (the alert the deleted job's rule held back is not the new job's);
    # its own rule holds back its next one
    _run(rig, new, 21)
    told = [(p["slot"], p["held_back"]) for p in hooks.payloads]
    assert told == [(slot_key(T0), 0), (slot_key(T0 + timedelta(minutes=20)), 0)]
    newest = store.list_alerts("default", "etl", 1)
    assert [(a.key_slot, a.status.value) for a in newest] == [(slot_key(T0 + timedelta(minutes=21)), "HELD")]


def test_a_backfill_of_the_job_created_again_alerts_the_slots_the_deleted_job_alerted(
    store: JobStore,
) -> None:
    # Given a job of every minute whose 10:01 slot failed (alerted), deleted and created again
    clock = ManualClock(T0)
    hooks = _Recorder()
    alerter = Alerter(store, hooks, clock)
    rig = Rig(store, clock, target=FakeTarget(*[FAIL] * 5))
    rig.notifier = Notifier(EventPublisher(MemoryEventSink()), alerter)
    routing = QueueRouting((SHORT,), (LONG,))
    jobs = JobService(store, rig.queues, clock, LAYOUT, routing)
    every_minute = spec(
        "cron(* * * * ? *)", alerts=[{"on": ["failed"], "target": HOOK}], retry={"max_attempts": 1}
    )
    old, _ = jobs.register("default", every_minute, job_id="etl")
    _run(rig, old, 1)
    jobs.delete("default", "etl")
    clock.advance(600)
    new, _ = jobs.register("default", every_minute, job_id="etl")
    # When a backfill of the new job runs 10:00 to 10:02, and each of its slots fails again
    runner = BackfillRunner(store, rig.queues, clock, LAYOUT, routing, max_parallel=3, step_s=2.0)
    backfill = runner.start("default", "etl", T0, T0 + timedelta(minutes=3))
    worker = rig.worker()
    while (
        found := store.get_backfill("default", "etl", backfill.id)
    ) and found.state is BackfillState.RUNNING:
        clock.advance(2)
        rig.poll()
        rig.work_until_idle(worker)
    # Then each of the new job's failed slots is told, 10:01 too (the deleted job's alert of it
    # was no alert of the new job's)
    slots = [slot_key(T0 + timedelta(minutes=m)) for m in range(3)]
    told = sorted(p["slot"] for p in hooks.payloads[1:])
    assert told == slots
    # And once: a repeat of the slot's end sends nothing again
    record = store.get_execution("default", "etl", slots[1])
    assert record is not None
    alerter.ended(new, record)
    assert len(hooks.payloads) == 4
    assert [a.created_at >= new.created_at for a in store.list_alerts("default", "etl", 10)] == [True] * 3


def test_a_job_deleted_after_completion_is_told_its_last_slot_recovered(store: JobStore) -> None:
    # Given a job of every minute until 10:01:30, deleted once done, whose 10:00 slot failed
    clock = ManualClock(T0)
    hooks = _Recorder()
    rig = Rig(store, clock, target=FakeTarget(FAIL, OK))
    rig.notifier = Notifier(EventPublisher(MemoryEventSink()), Alerter(store, hooks, clock))
    jobs = JobService(store, rig.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    ending = spec(
        "cron(* * * * ? *)",
        alerts=RULES,
        retry={"max_attempts": 1},
        end_at=T0 + timedelta(minutes=1, seconds=30),
        delete_after_completion=True,
    )
    job, _ = jobs.register("default", ending, job_id="etl")
    _run(rig, job, 0)
    # When its last slot, 10:01, succeeds (and the job is deleted after it)
    _run(rig, job, 1)
    assert store.get_job("default", "etl") is None
    # Then its recovery is told, as any job's is (QA28's delete ended the streak first: untold)
    told = [(p["condition"], p["slot"]) for p in hooks.payloads]
    assert told == [("failed", slot_key(T0)), ("recovered", slot_key(T0 + timedelta(minutes=1)))]
    assert store.get_streak("default", "etl") is None


class _DeletedWhileRunning(FakeTarget):
    """A target whose first run sees its job deleted through the API meanwhile."""

    def __init__(self, jobs: JobService, *results: TargetResult) -> None:
        super().__init__(*results)
        self.jobs, self.deleting = jobs, True

    def invoke(self, target: Any, payload: Any, ctx: Any) -> TargetResult:
        if self.deleting:
            self.deleting = False
            self.jobs.delete("default", "etl")
        return super().invoke(target, payload, ctx)


def test_a_job_created_again_after_a_run_that_failed_past_the_delete_is_not_told_it_recovered(
    store: JobStore,
) -> None:
    # Given a job with failed and recovered rules deleted while a run was in flight, which then
    # failed (counted in a streak the delete had already ended)
    clock = ManualClock(T0)
    hooks = _Recorder()
    rig = Rig(store, clock)
    jobs = JobService(store, rig.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    rig.target = _DeletedWhileRunning(jobs, FAIL, OK)
    rig.notifier = Notifier(EventPublisher(MemoryEventSink()), Alerter(store, hooks, clock))
    old, _ = jobs.register("default", spec(alerts=RULES, retry={"max_attempts": 1}), job_id="etl")
    _run(rig, old, 0)
    assert store.get_job("default", "etl") is None
    # When a job is created again at its id, and its first slot succeeds
    clock.advance(600)
    new, _ = jobs.register("default", spec(alerts=RULES, retry={"max_attempts": 1}), job_id="etl")
    _run(rig, new, 20)
    # Then it is not told it recovered: the deleted job's failures were never its own
    assert [p["condition"] for p in hooks.payloads] == ["failed"]
