"""Issue 28, findings 3-7: what happens to a slot around a replace, a pause, a park, a MISSED
record and a job deleted after completion. The real JobService, Poller and Worker with a manual
clock (tests/execution_harness.py), on the in-memory store and on DynamoDB (moto): the conditions
that make these rules hold are DynamoDB's conditional writes."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig, statuses
from factories import spec
from punctual.api.scheduler.mapping import job_id_of
from punctual.delivery.notifications import Notifier
from punctual.delivery.notifications.alerts import Alerter
from punctual.delivery.notifications.events import EventPublisher, MemoryEventSink
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.polling import Poller, PollerConfig
from punctual.dispatch.queues import MemoryQueues, QueueRouting
from punctual.execution import Delivery
from punctual.execution.dead_letters import MemoryDeadLetters
from punctual.models import AlertStatus, ExecutionStatus, Job
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.store.base import JobStore
from punctual.store.memory import MemoryStore
from punctual.timing.timers import Lane, Timer, TimerKind, slot_key
from punctual.usecases.jobs import JobService

S = ExecutionStatus
MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)
DLQ = "arn:aws:sqs:us-east-1:123456789012:reports-dlq"
HOOK = {"type": "http", "url": "https://alerts.example.com/hook"}


@pytest.fixture
def rig(store: JobStore, t0: datetime) -> Rig:
    return Rig(store, ManualClock(t0))


def service(rig: Rig) -> JobService:
    return JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))


class Calls(FakeTarget):
    """A target that answers per slot and attempt, and keeps the payload of every call."""

    def __init__(self, answer: Any = None) -> None:
        super().__init__(answer or (lambda ctx: TargetResult.ok()))
        self.payloads: list[tuple[str, int, Any]] = []

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        self.payloads.append((ctx.slot, ctx.attempt, payload))
        return super().invoke(target, payload, ctx)


def poll(rig: Rig, metrics: RecordingMetrics | None = None) -> None:
    """:meth:`Rig.poll`, with the poller's figures kept in ``metrics``."""
    now = rig.clock.now()
    due = [t for t in rig.timers(now - timedelta(minutes=15), now) if (t.pk, t.sk) not in rig.released_timers]
    if due:
        config = PollerConfig(
            layout=LAYOUT, short_queue_urls=(SHORT,), long_queue_urls=(LONG,), concurrency=1
        )
        Poller(rig.store, rig.queues, rig.clock, config, metrics, rig.notifier).release(due)
        rig.released_timers.update((t.pk, t.sk) for t in due)


def history(rig: Rig, job: Job) -> dict[str, Any]:
    return {e.slot: e for e in rig.store.list_executions(job.tenant, job.id, limit=500).items}


# --------------------------------------------------------------------------- finding 3


def test_delete_after_completion_waits_for_a_slot_that_waits_for_its_retry(
    store: JobStore, t0: datetime
) -> None:
    # Given a job of two slots that asked to be deleted once complete, with a dead-letter queue
    # and a failed alert; its first slot fails and waits two minutes for its retry
    clock, hooks = ManualClock(t0), FakeTarget()
    events = MemoryEventSink()
    alerter = Alerter(store, hooks, clock, signing_secrets=lambda job: ())
    rig = Rig(store, clock, notifier=Notifier(EventPublisher(events), alerter))
    first, last = t0, t0 + MINUTE

    def answer(ctx: SlotContext) -> TargetResult:
        return TargetResult.retryable("HTTP 503") if ctx.slot == slot_key(first) else TargetResult.ok()

    job = rig.add_job(
        "once-twice",
        "rate(1 minute)",
        end_at=last,
        delete_after_completion=True,
        retry={"max_attempts": 2, "base_seconds": 120, "jitter": False},
        dead_letter={"queue_arn": DLQ},
        alerts=[{"on": ["failed"], "target": HOOK}],
    )
    dead = MemoryDeadLetters()
    worker = rig.worker(target=FakeTarget(answer), dead_letters=dead)
    rig.send(rig.message(job, first))
    rig.work_until_idle(worker)
    assert statuses(rig.history(job)) == [(1, "RETRY_WAIT")]
    # When the last slot ends while the first still waits for its retry
    rig.advance_to(last)
    rig.send(rig.message(job, last))
    rig.work_until_idle(worker)
    # Then the job is kept: the retry's slot is not stranded
    assert store.get_job(job.tenant, job.id) is not None
    # And when the retry comes due it runs to its end: final record, report, dead letter, alert
    rig.advance_to(t0 + timedelta(minutes=3))
    rig.poll()
    rig.work_until_idle(worker)
    record = store.get_execution(job.tenant, job.id, slot_key(first))
    assert record is not None and (record.status, record.attempt) == (S.FAILED, 2)
    assert [body["slot"] for body in rig.failures.bodies] == [slot_key(first)]
    assert len(dead.sent) == 1 and dead.sent[0][0] == DLQ
    alerts = store.list_alerts(job.tenant, job.id, 10)
    assert [(a.key_slot, a.condition.value, a.status) for a in alerts] == [
        (slot_key(first), "failed", AlertStatus.SENT)
    ]
    # And only then, with no slot of it left waiting, is the job deleted (its history stays)
    assert store.get_job(job.tenant, job.id) is None
    assert [r.status for r in rig.history(job)] == [S.SUCCEEDED, S.FAILED]


def test_delete_after_completion_waits_for_a_slot_still_running(rig: Rig, t0: datetime) -> None:
    # Given a one-minute job of two slots whose first is still running when the last ends
    job = rig.add_job("long", "rate(1 minute)", end_at=t0 + MINUTE, delete_after_completion=True)
    worker = rig.worker()
    running = worker.claim(rig.message(job, t0))
    rig.advance_to(t0 + MINUTE)
    rig.send(rig.message(job, t0 + MINUTE))
    rig.work_until_idle(worker)
    assert rig.store.get_job(job.tenant, job.id) is not None
    # When the running one ends, the job is done: deleted
    worker.finish(running, TargetResult.ok())
    assert rig.store.get_job(job.tenant, job.id) is None


def test_delete_after_completion_waits_for_an_earlier_slot_not_claimed_yet(rig: Rig, t0: datetime) -> None:
    # Given a job of two slots (t0+1m, t0+2m) deleted once complete, whose first slot's message
    # comes back late (the worker that received it died before its claim) while the last slot runs
    job = rig.add_job("late-first", "rate(1 minute)", end_at=t0 + 2 * MINUTE, delete_after_completion=True)
    first, last = t0 + MINUTE, t0 + 2 * MINUTE
    target = Calls()
    worker = rig.worker(target=target)
    rig.advance_to(last + 5 * SECOND)
    rig.send(rig.message(job, last))
    rig.work_until_idle(worker)
    # Then the job is kept: its first slot has no record yet
    assert rig.store.get_job(job.tenant, job.id) is not None
    # And when the first slot's message comes back it runs, and only then is the job deleted (QA27:
    # the job was deleted when its last slot ended; the first slot's message found it gone, and the
    # slot never ran)
    rig.send(rig.message(job, first))
    rig.work_until_idle(worker)
    assert sorted(slot for slot, _, _ in target.payloads) == [slot_key(first), slot_key(last)]
    assert rig.store.get_job(job.tenant, job.id) is None


# --------------------------------------------------------------------------- finding 4


def test_a_slot_queued_before_a_replace_runs_once_under_the_new_spec_when_its_turn_comes(
    rig: Rig, t0: datetime
) -> None:
    # Given an overlap-queue job whose slot t0 runs while t0+1m and t0+2m are queued behind it (v1)
    jobs = service(rig)
    v1, _ = jobs.register("default", spec("rate(1 minute)", overlap="queue", payload={"v": 1}), job_id="q")
    target = Calls()
    worker = rig.worker(target=target)
    rig.advance_to(t0 + 2 * MINUTE)
    running = worker.claim(rig.message(v1, t0))
    rig.send(rig.message(v1, t0 + MINUTE), rig.message(v1, t0 + 2 * MINUTE))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["queued", "queued"]
    # When the job is replaced with a new payload, and then slot t0 ends (handing on the turn)
    v2 = jobs.replace("default", "q", spec("rate(1 minute)", overlap="queue", payload={"v": 2}))
    worker.run(running)
    worker.finish(running, TargetResult.ok())
    rig.work_until_idle(worker)
    # Then each queued slot, due by the replace and never started, runs once, in slot order, under
    # version 2's spec (never a mix: t0's started under version 1 and ran it), as a slot due by a
    # replace that no worker had started does (QA23: both were SUPERSEDED, never run)
    assert [(slot, payload) for slot, _, payload in target.payloads] == [
        (slot_key(t0), {"v": 1}),
        (slot_key(t0 + MINUTE), {"v": 2}),
        (slot_key(t0 + 2 * MINUTE), {"v": 2}),
    ]
    for queued_slot in (t0 + MINUTE, t0 + 2 * MINUTE):
        queued = rig.store.get_execution("default", "q", slot_key(queued_slot))
        assert queued is not None and queued.status is S.SUCCEEDED and queued.job_version == v2.version == 2
    # And the new version's next slot runs its own spec at once, and names it
    rig.advance_to(t0 + 3 * MINUTE)
    rig.send(rig.message(v2, t0 + 3 * MINUTE))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    assert target.payloads[-1] == (slot_key(t0 + 3 * MINUTE), 1, {"v": 2})
    ran = rig.store.get_execution("default", "q", slot_key(t0 + 3 * MINUTE))
    assert ran is not None and ran.job_version == v2.version == 2


def test_the_retry_of_a_slot_started_under_one_version_is_superseded_after_a_replace(
    rig: Rig, t0: datetime
) -> None:
    # Given a slot whose first attempt (version 1) failed and waits for its retry
    jobs = service(rig)
    policy = {"max_attempts": 3, "base_seconds": 30, "jitter": False}
    v1, _ = jobs.register("default", spec("rate(1 hour)", retry=policy, payload={"v": 1}), job_id="r")
    target = Calls(lambda ctx: TargetResult.retryable("HTTP 503"))
    worker = rig.worker(target=target)
    slot = t0 + timedelta(hours=1)
    rig.advance_to(slot)
    rig.send(rig.message(v1, slot))
    rig.work_until_idle(worker)
    # When the job is replaced before the retry is due
    jobs.replace("default", "r", spec("rate(1 hour)", retry=policy, payload={"v": 2}))
    rig.advance_to(slot + timedelta(minutes=2))
    rig.poll()
    rig.work_until_idle(worker)
    # Then attempt 2 never ran (not against version 2's spec, nor at all): the slot is SUPERSEDED
    assert [(attempt, payload) for _, attempt, payload in target.payloads] == [(1, {"v": 1})]
    record = rig.store.get_execution("default", "r", slot_key(slot))
    assert record is not None and (record.status, record.job_version) == (S.SUPERSEDED, 1)
    assert "attempt 2" in (record.error or "")
    assert [a.status for a in record.attempts] == [S.FAILED]


def test_pause_and_resume_supersede_nothing_a_slot_released_before_runs_its_spec(
    rig: Rig, t0: datetime
) -> None:
    # Given a slot released for version 1, and its job paused and resumed before a worker takes it
    jobs = service(rig)
    v1, _ = jobs.register("default", spec("rate(1 hour)", payload={"v": 1}), job_id="p")
    slot = t0 + timedelta(hours=1)
    rig.advance_to(slot)
    rig.send(rig.message(v1, slot))
    jobs.pause("default", "p")
    resumed = jobs.resume("default", "p")
    assert resumed.version == 3
    # When a worker takes it
    target = Calls()
    assert [r.outcome for r in rig.work_until_idle(rig.worker(target=target))] == ["SUCCEEDED"]
    # Then it runs: the spec it was released for is still the job's; the record names version 1
    assert target.payloads == [(slot_key(slot), 1, {"v": 1})]
    record = rig.store.get_execution("default", "p", slot_key(slot))
    assert record is not None and (record.status, record.job_version) == (S.SUCCEEDED, 1)


# --------------------------------------------------------------------------- finding 5


def test_a_parked_first_attempt_of_a_queue_job_keeps_its_place(rig: Rig, t0: datetime) -> None:
    # Given an overlap-queue job whose slot t0 keeps landing in invocations with too little time
    job = rig.add_job("q", "rate(1 minute)", overlap="queue", timeout_seconds=600)
    worker = rig.worker()
    rig.send(rig.message(job, t0))
    outcomes = []
    for _ in range(3):
        [received] = rig.queues.receive(SHORT, 10, 0, 900)
        handled = worker.process(
            received.message, Delivery(SHORT, received.receipt, received.receive_count), 60
        )
        outcomes.append(handled.outcome)
        if handled.ack:
            rig.queues.delete(SHORT, received.receipt)
    assert outcomes == ["waiting", "waiting", "queued"]  # parked at its third delivery
    # When slot t0+1m arrives while t0 is parked
    rig.advance_to(t0 + MINUTE)
    rig.send(rig.message(job, t0 + MINUTE))
    rig.work_until_idle(worker)
    # Then it does not take t0's place: it is queued behind it
    later = rig.store.get_execution(job.tenant, job.id, slot_key(t0 + MINUTE))
    assert later is not None and later.status is S.QUEUED and later.blocked_by == slot_key(t0)
    assert rig.target.calls_for(job.id) == []
    # And when the parked slot's timer brings it back, the slots run in slot order, once each
    rig.advance_to(t0 + 2 * MINUTE)
    rig.poll()
    rig.work_until_idle(worker)
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 1), (slot_key(t0 + MINUTE), 1)]
    assert statuses(rig.history(job)) == [(1, "SUCCEEDED"), (1, "SUCCEEDED")]


# --------------------------------------------------------------------------- finding 6


def test_every_slot_due_while_paused_is_accounted_for_under_catch_up_none(rig: Rig, t0: datetime) -> None:
    # Given a minutely job with catch-up none, released at t0, then paused for ten minutes
    jobs = service(rig)
    rig.advance_to(t0 - timedelta(seconds=30))
    job, _ = jobs.register(
        "default", spec("rate(1 minute)", start_at=t0.isoformat(), catchup={"policy": "none"}), job_id="n"
    )
    worker = rig.worker()
    metrics = RecordingMetrics()
    rig.advance_to(t0)
    poll(rig, metrics)
    rig.work_until_idle(worker)
    rig.advance_to(t0 + timedelta(seconds=30))
    jobs.pause("default", "n")
    for minute in range(1, 11):  # pollers keep running while it is paused
        rig.advance_to(t0 + minute * MINUTE + SECOND)
        poll(rig, metrics)
    # When it is resumed
    rig.advance_to(t0 + timedelta(minutes=10, seconds=30))
    jobs.resume("default", "n")
    poll(rig, metrics)
    rig.work_until_idle(worker)
    rig.advance_to(t0 + 11 * MINUTE)
    poll(rig, metrics)
    rig.work_until_idle(worker)
    # Then each of the ten slots due while paused is recorded MISSED, with the reason, once
    found = history(rig, job)
    paused = [slot_key(t0 + m * MINUTE) for m in range(1, 11)]
    assert [found[s].status if s in found else None for s in paused] == [S.MISSED] * 10
    assert {found[s].error for s in paused} == {"job paused: catch-up policy none: missed slots are not run"}
    assert rig.store.get_job("default", "n").skipped_slots == 10
    assert metrics.total("SlotsMissed") == 10
    # And only the slots before the pause and after the resume ran
    assert rig.target.calls_for("n") == [(slot_key(t0), 1), (slot_key(t0 + 11 * MINUTE), 1)]


def test_an_eventbridge_schedule_enabled_again_runs_no_slot_due_while_it_was_disabled(
    rig: Rig, t0: datetime
) -> None:
    # Given a schedule of the EventBridge Scheduler API (its job's id and catch-up policy, all in an
    # hour), every ten minutes, disabled after its first slot and enabled again 35 minutes later
    jobs = service(rig)
    schedule_id = job_id_of("default", "every-ten")
    job, _ = jobs.register(
        "default",
        spec("cron(0/10 * * * ? *)", catchup={"policy": "all", "window_seconds": 3600}),
        job_id=schedule_id,
    )
    worker = rig.worker()
    rig.advance_to(t0 + 10 * MINUTE)
    poll(rig)
    rig.work_until_idle(worker)
    rig.advance_to(t0 + 15 * MINUTE)
    jobs.pause("default", schedule_id)
    rig.advance_to(t0 + 50 * MINUTE + SECOND)
    jobs.resume("default", schedule_id)
    # When the pollers release its chain, at the resume and at its next slot
    poll(rig)
    rig.work_until_idle(worker)
    rig.advance_to(t0 + 60 * MINUTE)
    poll(rig)
    rig.work_until_idle(worker)
    # Then the slots due while it was DISABLED did not run (the service invokes none of them; QA27:
    # 10:20 to 10:50 all ran at the enable), each is recorded MISSED, and the next one runs
    assert rig.target.calls_for(schedule_id) == [
        (slot_key(t0 + 10 * MINUTE), 1),
        (slot_key(t0 + 60 * MINUTE), 1),
    ]
    found = history(rig, job)
    disabled = [slot_key(t0 + m * MINUTE) for m in (20, 30, 40, 50)]
    assert [found[s].status if s in found else None for s in disabled] == [S.MISSED] * 4


def test_a_year_long_pause_of_a_rate_1_second_job_is_accounted_for_in_a_few_records(
    rig: Rig, t0: datetime
) -> None:
    # Given a rate(1 second) job with catch-up none, paused a moment after its first slot
    jobs = service(rig)
    rig.advance_to(t0 - timedelta(milliseconds=500))
    job, _ = jobs.register(
        "default", spec("rate(1 second)", start_at=t0.isoformat(), catchup={"policy": "none"}), job_id="s"
    )
    metrics = RecordingMetrics()
    rig.advance_to(t0)
    poll(rig, metrics)
    rig.advance_to(t0 + timedelta(milliseconds=500))
    jobs.pause("default", "s")
    rig.advance_to(t0 + SECOND)
    poll(rig, metrics)  # the poller meets the paused chain
    # When it is resumed a year later
    resumed_at = t0 + timedelta(days=365)
    rig.advance_to(resumed_at)
    jobs.resume("default", "s")
    poll(rig, metrics)
    # Then every slot due while paused is accounted for, in a handful of range records
    owed = 365 * 86400 - 1  # t0+1s .. resumed_at-1s
    assert rig.store.get_job("default", "s").skipped_slots == owed
    missed = [e for e in history(rig, job).values() if e.status is S.MISSED]
    assert len(missed) <= 3
    assert sum(e.slot_count for e in missed) == owed
    assert min(e.slot for e in missed) == slot_key(t0 + SECOND)
    assert max(e.last_slot or e.slot for e in missed) == slot_key(resumed_at - SECOND)
    assert all(e.error and e.error.startswith("job paused: ") for e in missed)
    assert metrics.total("SlotsMissed") == owed
    # And the chain goes on from the resume: its on-time slot is released, nothing before it
    fired = [m.slot for m in rig.queues.all_messages(SHORT)]
    assert fired == [slot_key(t0), slot_key(resumed_at)]


def test_a_slot_due_before_the_pause_and_released_after_it_is_caught_up_under_all(
    rig: Rig, t0: datetime
) -> None:
    # Given a minutely job whose slot t0 is paused a moment after its instant, before its release
    jobs = service(rig)
    rig.advance_to(t0 - timedelta(seconds=30))
    job, _ = jobs.register("default", spec("rate(1 minute)", start_at=t0.isoformat()), job_id="a")
    rig.advance_to(t0 + timedelta(milliseconds=300))
    jobs.pause("default", "a")
    rig.advance_to(t0 + SECOND)
    poll(rig)  # the poller meets slot t0 after the pause
    assert rig.queues.all_messages(SHORT) == []
    assert history(rig, job) == {}  # not recorded MISSED: the resume owes it
    # When it is resumed five minutes later (catch-up all, the default)
    rig.advance_to(t0 + timedelta(minutes=5, seconds=10))
    jobs.resume("default", "a")
    poll(rig)
    rig.work_until_idle(rig.worker())
    # Then t0 and every slot due while paused ran, once each, and nothing is MISSED
    assert rig.target.calls_for("a") == [(slot_key(t0 + m * MINUTE), 1) for m in range(6)]
    assert {e.status for e in history(rig, job).values()} == {S.SUCCEEDED}


def test_a_slot_due_before_a_pause_met_only_after_the_resume_still_runs(rig: Rig, t0: datetime) -> None:
    # Given a minutely job paused and resumed within a second of its slot t0, before the poller
    # released t0 (the resume started the chain again at the first slot after the pause)
    jobs = service(rig)
    rig.advance_to(t0 - timedelta(seconds=30))
    jobs.register("default", spec("rate(1 minute)", start_at=t0.isoformat()), job_id="o")
    rig.advance_to(t0 + timedelta(milliseconds=300))
    jobs.pause("default", "o")
    rig.advance_to(t0 + timedelta(milliseconds=600))
    jobs.resume("default", "o")
    # When the poller meets t0's timer, then the next minute's
    worker = rig.worker()
    for instant in (t0 + SECOND, t0 + MINUTE + SECOND):
        rig.advance_to(instant)
        poll(rig)
        rig.work_until_idle(worker)
    # Then t0 ran, and so did t0+1m, each once
    assert rig.target.calls_for("o") == [(slot_key(t0), 1), (slot_key(t0 + MINUTE), 1)]


def test_a_resume_before_the_next_slot_keeps_the_chain_when_its_pending_timer_is_packed(
    rig: Rig, t0: datetime
) -> None:
    # Given two hourly jobs of one shard (slots at :00:30), released together at t0+30s: their
    # next timers share an item (a pack) in DynamoDB
    jobs = service(rig)
    rig.advance_to(t0)
    first = t0 + timedelta(seconds=30)
    for job_id in ("hourly-0", "hourly-4"):  # the same far shard of the test layout
        jobs.register("default", spec("rate(1 hour)", start_at=first.isoformat()), job_id=job_id)
    worker = rig.worker()
    rig.advance_to(first)
    poll(rig)
    rig.work_until_idle(worker)
    # When one is paused and resumed before its next slot: the resume writes that slot's timer
    # anew, for its own version, where the packed one of the old version is still stored
    rig.advance_to(first + 10 * MINUTE)
    jobs.pause("default", "hourly-0")
    rig.advance_to(first + 11 * MINUTE)
    jobs.resume("default", "hourly-0")
    rig.advance_to(first + timedelta(hours=1, seconds=1))
    poll(rig)
    rig.work_until_idle(worker)
    # Then both fire at the next slot, once each: the resumed chain is not lost to the old timer
    for job_id in ("hourly-0", "hourly-4"):
        assert rig.target.calls_for(job_id) == [
            (slot_key(first), 1),
            (slot_key(first + timedelta(hours=1)), 1),
        ]


def test_a_poller_holds_a_newer_versions_timer_of_a_slot_it_holds_already(t0: datetime) -> None:
    # A near timer comes back in every poll of its look-back; the first timer of a resumed (or
    # replaced) job can name the same slot, due at the same instant, as the old chain's
    clock = ManualClock(t0)
    poller = Poller(MemoryStore(), MemoryQueues(now=clock.now), clock, PollerConfig(layout=LAYOUT))
    run = poller.minute_poll(t0)
    due_ms = round((t0 + 30 * SECOND).timestamp() * 1000)
    base = {"lane": Lane.NEAR, "shard": 1, "due_ms": due_ms, "job_id": "j", "tenant": "t", "slot": "s"}
    run.drain.hold([Timer(**base, attempt=1, kind=TimerKind.FIRE, job_version=1)])  # type: ignore[arg-type]
    run.drain.hold([Timer(**base, attempt=1, kind=TimerKind.FIRE, job_version=1)])  # type: ignore[arg-type]
    run.drain.hold([Timer(**base, attempt=1, kind=TimerKind.FIRE, job_version=3)])  # type: ignore[arg-type]
    # Then the repeat is held once, and the newer version's timer is held too (not taken for it)
    assert sorted(entry[-1].job_version for entry in run.drain.heap) == [1, 3]


# --------------------------------------------------------------------------- finding 7


def test_a_slot_recorded_missed_never_runs_when_its_message_arrives_later(rig: Rig, t0: datetime) -> None:
    # Given a catch-up-none job whose slot t0 was sent, then released again by a restarted
    # poller two minutes later (its first release's next timer was lost): t0 is recorded MISSED
    jobs = service(rig)
    rig.advance_to(t0 - timedelta(seconds=30))
    catchup = {"policy": "none"}
    jobs.register("default", spec("rate(1 minute)", start_at=t0.isoformat(), catchup=catchup), job_id="m")
    rig.advance_to(t0)
    poll(rig)
    [original] = [m for m in rig.queues.all_messages(SHORT) if m.slot == slot_key(t0)]
    rig.released_timers.clear()  # both t0's timer and the next one it wrote are read again
    rig.advance_to(t0 + timedelta(minutes=2, seconds=5))
    poll(rig)
    record = rig.store.get_execution("default", "m", slot_key(t0))
    assert record is not None and record.status is S.MISSED
    # When the original message of t0 is worked (it arrives late, or a duplicate of it)
    rig.send(original)
    rig.work_until_idle(rig.worker())
    # Then t0 never runs: the claim meets the MISSED record and drops the slot
    assert (slot_key(t0), 1) not in rig.target.calls_for("m")
    record = rig.store.get_execution("default", "m", slot_key(t0))
    assert record is not None and record.status is S.MISSED
