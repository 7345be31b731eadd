"""Slots that follow from finishes: ``after(A, B)`` dependants and ``delay(...)`` chains."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig, statuses
from factories import spec
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.queues import MessageKind
from punctual.execution import Worker
from punctual.execution.ports import ClaimOutcome
from punctual.models import Job
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerKind, slot_key
from punctual.usecases.job_admission import find_cycle
from punctual.usecases.job_errors import InvalidJobError
from punctual.usecases.jobs import JobService, QueueRouting

MINUTE = timedelta(minutes=1)


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


def jobs(rig: Rig) -> JobService:
    return JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))


# --------------------------------------------------------------------------- after(A, B)


def dependency_rig(rig: Rig) -> tuple[Job, Job, Job]:
    service = jobs(rig)
    a, _ = service.register("default", spec("rate(1 hour)"), job_id="extract-a")
    b, _ = service.register("default", spec("rate(1 hour)"), job_id="extract-b")
    child, _ = service.register("default", spec("after(extract-a, extract-b)"), job_id="load")
    return a, b, child


def test_child_runs_once_per_slot_only_after_both_parents_succeed(rig: Rig, t0: datetime) -> None:
    # Given load = after(extract-a, extract-b), and both parents' slot S delivered
    a, b, child = dependency_rig(rig)
    slot = t0 + timedelta(hours=1)
    rig.clock.set(slot)
    worker = rig.worker()
    rig.send(rig.message(a, slot))
    # When only A has succeeded, the child waits
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    assert rig.target.calls_for(child.id) == []
    # When B succeeds too (and a duplicate of A's message comes back after the dedup window)
    rig.clock.advance(30)
    rig.send(rig.message(b, slot))
    rig.work(worker)
    rig.clock.advance(600)
    rig.send(rig.message(a, slot))
    rig.work_until_idle(worker)
    # Then the child ran exactly once, for slot S, as a child message
    assert rig.target.calls_for(child.id) == [(slot_key(slot), 1)]
    assert statuses(rig.history(child)) == [(1, "SUCCEEDED")]
    assert rig.metrics.total("ChildrenDispatched") == 1


def test_child_does_not_run_when_a_parent_fails(rig: Rig, t0: datetime) -> None:
    a, b, child = dependency_rig(rig)
    slot = t0 + timedelta(hours=1)
    rig.clock.set(slot)

    def b_fails(ctx: SlotContext) -> TargetResult:
        return TargetResult.permanent("bad input") if ctx.job_id == b.id else TargetResult.ok()

    rig.target = FakeTarget(b_fails)
    rig.send(rig.message(a, slot), rig.message(b, slot))
    rig.work_until_idle(rig.worker())
    assert [c.job_id for c in rig.target.calls] == [a.id, b.id]
    # The child's slot is recorded SKIPPED, naming the parent (QA: it had no record at all)
    [skipped] = rig.history(child)
    assert (
        skipped.status.value == "SKIPPED" and skipped.error == "not run: parent extract-b's slot ended FAILED"
    )
    assert rig.queues.all_messages() == []


def test_a_parents_unsuccessful_slot_is_recorded_down_the_after_chain_once(rig: Rig, t0: datetime) -> None:
    # Given load = after(extract-a, extract-b) and report = after(load)
    a, b, child = dependency_rig(rig)
    report, _ = jobs(rig).register("default", spec("after(load)"), job_id="report")
    slot = t0 + timedelta(hours=1)
    rig.clock.set(slot)
    rig.target = FakeTarget(
        lambda ctx: TargetResult.permanent("boom") if ctx.job_id == a.id else TargetResult.ok()
    )
    # When A fails slot S for good (and its message comes again: the after-effects repeat), B succeeds
    rig.send(rig.message(a, slot), rig.message(b, slot))
    rig.work_until_idle(rig.worker())
    rig.send(rig.message(a, slot))
    rig.work_until_idle(rig.worker())
    # Then load and report have slot S recorded SKIPPED once each, naming why; neither ran
    assert [(r.slot, r.status.value, r.error) for r in rig.history(child)] == [
        (slot_key(slot), "SKIPPED", "not run: parent extract-a's slot ended FAILED")
    ]
    assert [(r.status.value, r.error) for r in rig.history(report)] == [
        ("SKIPPED", "not run: parent load's slot ended SKIPPED")
    ]
    assert rig.target.calls_for(child.id) == [] and rig.target.calls_for(report.id) == []
    # And the next slot, which A completes, runs both
    rig.target = FakeTarget(lambda ctx: TargetResult.ok())
    nxt = slot + timedelta(hours=1)
    rig.clock.set(nxt)
    rig.send(rig.message(a, nxt), rig.message(b, nxt))
    rig.work_until_idle(rig.worker())
    assert rig.target.calls_for(child.id) == [(slot_key(nxt), 1)]
    assert rig.target.calls_for(report.id) == [(slot_key(nxt), 1)]


def test_each_slot_dispatches_its_own_child(rig: Rig, t0: datetime) -> None:
    a, b, child = dependency_rig(rig)
    worker = rig.worker()
    slots = [t0 + timedelta(hours=h) for h in (1, 2)]
    for slot in slots:
        rig.clock.set(slot)
        rig.send(rig.message(b, slot), rig.message(a, slot))
        rig.work_until_idle(worker)
    assert rig.target.calls_for(child.id) == [(slot_key(s), 1) for s in slots]


def test_dependency_cycles_are_rejected_at_registration(rig: Rig) -> None:
    a, _, child = dependency_rig(rig)
    service = jobs(rig)
    with pytest.raises(InvalidJobError, match="cycle"):
        service.replace("default", a.id, spec("after(load)"))  # extract-a -> load -> extract-a
    with pytest.raises(InvalidJobError, match="itself"):
        service.replace("default", child.id, spec("after(load)"))
    parents = {"x": ("y",), "y": ("z",), "z": ()}
    assert find_cycle("z", ("x",), parents.get) == ["z", "x", "y", "z"]
    assert find_cycle("w", ("x",), parents.get) is None


def test_child_message_shape(rig: Rig, t0: datetime) -> None:
    a, b, child = dependency_rig(rig)
    rig.clock.set(t0 + timedelta(hours=1))
    worker = rig.worker()
    for parent in (a, b):
        claim = worker.claim(rig.message(parent, t0 + timedelta(hours=1)))
        worker.finish(claim, TargetResult.ok())
    [message] = rig.queues.all_messages(SHORT)
    assert (message.job_id, message.slot, message.attempt, message.kind) == (
        child.id,
        slot_key(t0 + timedelta(hours=1)),
        1,
        MessageKind.CHILD,
    )


# --------------------------------------------------------------------------- delay(...)


def fire_timers(rig: Rig, job: Job) -> list[tuple[datetime, int]]:
    now = rig.clock.now()
    return [
        (t.due, t.job_version)
        for t in rig.timers(now - timedelta(days=1), now + timedelta(days=1), TimerKind.FIRE)
        if t.job_id == job.id
    ]


def test_delay_chains_each_slot_from_the_previous_finish(rig: Rig, t0: datetime) -> None:
    # Given delay(10 minutes): runs that take 3 minutes, then 30 seconds
    job = rig.add_job(schedule="delay(10 minutes)")
    worker = rig.worker()
    finishes = [3 * 60, 30]
    slot = t0
    chained = []
    for seconds in finishes:
        # When a slot runs and finishes `seconds` after its start
        rig.clock.set(slot)
        claim = worker.claim(rig.message(job, slot))
        rig.clock.advance(seconds + 0.25)
        worker.finish(claim, TargetResult.ok())
        # Then the next slot is due 10 minutes after the finish (whole seconds), same job version
        expected = slot + timedelta(seconds=seconds + 1) + 10 * MINUTE
        assert (expected, job.version) in fire_timers(rig, job)
        chained.append(slot_key(expected))
        slot = expected
    # And the poller releases exactly those slots
    rig.clock.set(slot)
    rig.poll()
    assert [m.slot for m in rig.queues.all_messages()] == chained


def test_delay_chains_after_a_final_failure_but_not_after_a_retry(rig: Rig, t0: datetime) -> None:
    job = rig.add_job(
        schedule="delay(5 minutes)",
        retry={"max_attempts": 2, "backoff": "fixed", "base_seconds": 60, "jitter": False},
    )
    rig.target = FakeTarget(TargetResult.retryable("503"))
    worker = rig.worker()
    claim = worker.claim(rig.message(job, t0))
    worker.finish(claim, worker.run(claim))
    assert fire_timers(rig, job) == []  # RETRY_WAIT: the slot is not over yet
    rig.clock.set(t0 + MINUTE)
    retry = worker.claim(rig.message(job, t0, attempt=2, kind=MessageKind.RETRY))
    worker.finish(retry, worker.run(retry))
    assert fire_timers(rig, job) == [(t0 + 6 * MINUTE, job.version)]


def test_delay_does_not_chain_for_a_paused_or_respecified_job(rig: Rig, t0: datetime) -> None:
    service = jobs(rig)
    job, _ = service.register("default", spec("delay(5 minutes)"), job_id="chain")
    worker = rig.worker()
    first = t0 + 5 * MINUTE
    rig.clock.set(first)
    claim = worker.claim(rig.message(job, first))
    service.pause("default", job.id)  # while the slot runs
    rig.clock.advance(10)
    worker.finish(claim, TargetResult.ok())
    assert [v for _, v in fire_timers(rig, job)] == [job.version]  # only registration's timer
    # Resume writes its own timer (new version); a manual run of the resumed job does not fork the chain
    resumed = service.resume("default", job.id)
    manual = rig.message(resumed, f"{slot_key(rig.clock.now())}~mabc", kind=MessageKind.MANUAL)
    claim = worker.claim(manual)
    worker.finish(claim, TargetResult.ok())
    assert [v for _, v in fire_timers(rig, job)].count(resumed.version) == 1


def parents_delivered(rig: Rig, t0: datetime) -> tuple[Job, datetime, Worker]:
    """Both parents' messages of load's slot an hour on, in the queue; its child, slot, a worker."""
    a, b, child = dependency_rig(rig)
    slot = t0 + timedelta(hours=1)
    rig.clock.set(slot)
    rig.send(rig.message(a, slot), rig.message(b, slot))
    return child, slot, rig.worker()


def test_a_child_whose_worker_died_before_claiming_it_is_sent_again_by_its_check(
    rig: Rig, t0: datetime
) -> None:
    # Given both parents of load succeeded, and the worker that received the child's message
    # died before its handler ran (the message stays in flight for the queue's whole timeout)
    child, slot, worker = parents_delivered(rig, t0)
    rig.work(worker)
    [lost] = rig.queues.receive(SHORT, 10, 0, 960)
    assert lost.message.kind == MessageKind.CHILD
    # When the poller releases the child's check, 5 s on
    [check] = rig.timers(slot, slot + MINUTE, TimerKind.CHILD)
    assert check.due == slot + timedelta(seconds=5)
    rig.clock.advance(5)
    rig.poll()
    # Then the slot is sent again past the held group, and runs once
    rig.work_until_idle(worker)
    assert rig.target.calls_for(child.id) == [(slot_key(slot), 1)]
    # And the held original, back after its timeout, is dropped by the claim
    rig.clock.advance(960)
    rig.work_until_idle(worker)
    assert rig.target.calls_for(child.id) == [(slot_key(slot), 1)]


def test_a_claimed_child_is_not_sent_again_by_its_check(rig: Rig, t0: datetime) -> None:
    # Given both parents succeeded and the child ran
    child, slot, worker = parents_delivered(rig, t0)
    rig.work_until_idle(worker)
    assert rig.target.calls_for(child.id) == [(slot_key(slot), 1)]
    # When its check is released
    rig.clock.advance(5)
    assert TimerKind.CHILD in [t.kind for t in rig.poll()]
    # Then nothing is sent for the child
    assert [m for m in rig.queues.all_messages() if m.job_id == child.id] == []


def test_a_paused_childs_slot_is_recorded_missed_with_its_event_and_alert_not_dropped(t0: datetime) -> None:
    """The parents of a paused after() job succeed: its slot is recorded MISSED (job paused), its
    event and missed alert go out; resumed, it runs the next slot its parents complete."""
    from punctual.delivery.notifications import Alerter, EventPublisher, MemoryEventSink, Notifier
    from punctual.delivery.notifications.events import SLOT_MISSED
    from punctual.execution.after import PAUSED_CHILD_NOTE
    from punctual.models import ExecutionStatus

    store = MemoryStore()
    clock = ManualClock(t0)
    rig = Rig(
        store,
        clock,
        notifier=Notifier(EventPublisher(MemoryEventSink()), Alerter(store, FakeTarget(), clock)),
    )
    service = jobs(rig)
    hook = {"type": "http", "url": "https://alerts.example.com/hook"}
    a, _ = service.register("default", spec("rate(1 hour)"), job_id="extract")
    child, _ = service.register(
        "default", spec("after(extract)", alerts=[{"on": ["missed"], "target": hook}]), job_id="load"
    )
    service.pause("default", child.id)
    worker = rig.worker()
    first, second = t0 + timedelta(hours=1), t0 + timedelta(hours=2)
    rig.clock.set(first)
    rig.send(rig.message(a, first))
    rig.work_until_idle(worker)
    rig.work_until_idle(worker)  # the missed alert's delivery
    [missed] = rig.history(child)
    assert (missed.slot, missed.status, missed.error) == (
        slot_key(first),
        ExecutionStatus.MISSED,
        PAUSED_CHILD_NOTE,
    )
    [alert] = store.list_alerts("default", child.id, 10)
    assert (alert.key_slot, alert.condition.value) == (slot_key(first), "missed")
    events = rig.notifier.events.sink.events
    assert [
        (e.detail_type, e.detail["job_id"], e.detail["slot"]) for e in events if e.detail_type == SLOT_MISSED
    ] == [(SLOT_MISSED, child.id, slot_key(first))]
    assert rig.target.calls_for(child.id) == []
    # A repeat of the parent's after-effects (its message again, past SQS's window) changes nothing
    rig.clock.advance(600)
    rig.send(rig.message(a, first))
    rig.work_until_idle(worker)
    assert [(r.slot, r.status) for r in rig.history(child)] == [(slot_key(first), ExecutionStatus.MISSED)]
    # Resumed, the child runs its parents' next slot
    service.resume("default", child.id)
    rig.clock.set(second)
    a = store.get_job("default", a.id)
    rig.send(rig.message(a, second))
    rig.work_until_idle(worker)
    assert rig.target.calls_for(child.id) == [(slot_key(second), 1)]


def test_a_childs_slot_sent_before_a_replace_of_the_child_runs_under_the_new_spec(
    rig: Rig, t0: datetime
) -> None:
    # the after() oracle: a payload edit seconds after the parents' success, before any worker took
    # the child's slot, recorded it SUPERSEDED, never run (a scheduled slot runs under the new spec)
    a, b, child = dependency_rig(rig)
    slot = t0 + timedelta(hours=1)
    rig.clock.set(slot)
    worker = rig.worker()
    rig.send(rig.message(a, slot), rig.message(b, slot))
    rig.work(worker)  # both parents succeed: the child's slot is sent, not yet taken
    assert rig.metrics.total("ChildrenDispatched") == 1 and rig.target.calls_for(child.id) == []
    service = jobs(rig)
    edited = service.replace("default", child.id, spec("after(extract-a, extract-b)", payload={"v": 2}))
    rig.clock.advance(10)  # the workers behind: past the seconds a claim trusts its message's copy
    rig.work_until_idle(worker)
    [record] = rig.history(child)
    assert (record.status.value, record.job_version) == ("SUCCEEDED", edited.version)
    assert rig.target.calls_for(child.id) == [(slot_key(slot), 1)]


def test_a_childs_slot_sent_before_a_replace_that_adds_a_parent_is_superseded(rig: Rig, t0: datetime) -> None:
    # a parent the replace added counts from its next success: the slot sent for the old spec is not run
    a, b, child = dependency_rig(rig)
    jobs(rig).register("default", spec("rate(1 hour)"), job_id="extract-c")
    slot = t0 + timedelta(hours=1)
    rig.clock.set(slot)
    worker = rig.worker()
    rig.send(rig.message(a, slot), rig.message(b, slot))
    rig.work(worker)
    jobs(rig).replace("default", child.id, spec("after(extract-a, extract-b, extract-c)"))
    rig.clock.advance(10)
    rig.work_until_idle(worker)
    assert [r.status.value for r in rig.history(child)] == ["SUPERSEDED"]
    assert rig.target.calls_for(child.id) == []


def ended_with_its_worker_lost(
    rig: Rig,
    job: Job,
    slot: datetime,
    monkeypatch: pytest.MonkeyPatch,
    *,
    result: TargetResult,
    after_s: float,
    failing: str = "put_timers",
) -> None:
    """``slot`` ran and ended with ``result`` ``after_s`` in, its worker lost (its Region lost)
    between its record and its end's first call of the store's ``failing``."""
    rig.clock.set(slot)
    worker = rig.worker()
    claim = worker.claim(rig.message(job, slot))
    rig.clock.advance(after_s)
    with monkeypatch.context() as lost:
        lost.setattr(rig.store, failing, lambda *args: (_ for _ in ()).throw(ConnectionError("lost")))
        with pytest.raises(ConnectionError):
            worker.finish(claim, result)


def ended_without_its_next_timer(rig: Rig, job: Job, slot: datetime, monkeypatch: pytest.MonkeyPatch) -> None:
    """``slot`` ran and ended SUCCEEDED, its worker lost before its end wrote the chain's next
    timer (its Region lost between the two writes)."""
    ended_with_its_worker_lost(rig, job, slot, monkeypatch, result=TargetResult.ok(), after_s=30.25)
    assert statuses(rig.history(job))[-1] == (1, "SUCCEEDED")


def test_a_first_copy_of_an_ended_delay_slot_writes_the_next_timer_its_end_left_unwritten(
    rig: Rig, t0: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given delay(10 minutes), slot t0 ended but its chain's next timer was never written
    job = rig.add_job(schedule="delay(10 minutes)")
    ended_without_its_next_timer(rig, job, t0, monkeypatch)
    assert fire_timers(rig, job) == []
    # When another Region's copy of the slot reaches a worker for the first time, after the end
    rig.clock.advance(2)
    claim = rig.worker().claim(rig.message(job, t0))
    # Then it is dropped (nothing runs twice) and the chain goes on: its next slot is due 10
    # minutes after the run's end (QA25: it waited for the auditor, an audit period in the cloud)
    assert claim.outcome is ClaimOutcome.DUPLICATE and statuses(rig.history(job)) == [(1, "SUCCEEDED")]
    assert fire_timers(rig, job) == [(t0 + timedelta(seconds=31) + 10 * MINUTE, job.version)]


def test_a_copy_of_an_older_delay_slot_writes_no_timer_once_the_chain_moved_on(
    rig: Rig, t0: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given delay(10 minutes) whose chain went on past slot t0: its next slot has a record
    job = rig.add_job(schedule="delay(10 minutes)")
    worker = rig.worker()
    rig.clock.set(t0)
    worker.finish(worker.claim(rig.message(job, t0)), TargetResult.ok())
    [(nxt, _)] = fire_timers(rig, job)
    rig.clock.set(nxt)
    worker.finish(worker.claim(rig.message(job, nxt)), TargetResult.ok())
    [(after_nxt, _)] = [timer for timer in fire_timers(rig, job) if timer[0] > nxt]
    rig.clock.advance(5)
    written: list[object] = []
    monkeypatch.setattr(rig.store, "put_timers", written.extend)
    # When a late copy of slot t0 comes (its timer re-released, another Region's copy)
    claim = rig.worker().claim(rig.message(job, t0))
    # Then it is dropped and no timer is written again (its released slot would be released again)
    assert claim.outcome is ClaimOutcome.DUPLICATE and written == []
    # While a copy of the chain's last ended slot writes the timer its end wrote, the same one
    rig.worker().claim(rig.message(job, nxt))
    assert [(timer.due, timer.kind) for timer in written] == [(after_nxt, TimerKind.FIRE)]  # type: ignore[attr-defined]


def test_a_first_copy_of_a_slot_waiting_for_its_retry_writes_the_retry_timer_its_end_left_unwritten(
    rig: Rig, t0: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a job with retries whose slot t0 failed attempt 1, its worker lost (its Region lost)
    # between the RETRY_WAIT record and the retry timer: only that Region's message would repair it
    job = rig.add_job(retry={"max_attempts": 3, "backoff": "fixed", "base_seconds": 10, "jitter": False})
    ended_with_its_worker_lost(
        rig, job, t0, monkeypatch, result=TargetResult.retryable("HTTP 503"), after_s=0.5
    )
    assert statuses(rig.history(job)) == [(1, "RETRY_WAIT")]
    retries = [(t.due, t.attempt) for t in rig.timers(t0, t0 + timedelta(hours=1), TimerKind.RETRY)]
    assert retries == []
    # When another Region's copy of the slot reaches a worker for the first time, after the end
    rig.clock.advance(1)
    copy = rig.worker().claim(rig.message(job, t0))
    # Then it is dropped (attempt 1 does not run again) and the retry is on: attempt 2's timer, at
    # the backoff's instant (QA27: the slot waited for the lost Region to come back)
    assert copy.outcome is ClaimOutcome.DUPLICATE and statuses(rig.history(job)) == [(1, "RETRY_WAIT")]
    retries = [(t.due, t.attempt) for t in rig.timers(t0, t0 + timedelta(hours=1), TimerKind.RETRY)]
    assert retries == [(t0 + timedelta(seconds=10.5), 2)]
    rig.clock.set(t0 + timedelta(seconds=11))
    rig.poll()
    rig.work_until_idle(rig.worker())
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 2)]  # (attempt 1 ran through claim and finish)
    assert statuses(rig.history(job)) == [(2, "SUCCEEDED")]


def test_a_first_copy_of_a_parents_ended_slot_dispatches_the_children_its_end_left_undispatched(
    rig: Rig, t0: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given load = after(extract-a, extract-b): B's slot S succeeded, then A's, A's worker lost
    # (its Region lost) between its record and the children's dispatch
    a, b, child = dependency_rig(rig)
    slot = t0 + timedelta(hours=1)
    rig.clock.set(slot)
    worker = rig.worker()
    rig.send(rig.message(b, slot))
    rig.work_until_idle(worker)
    ended_with_its_worker_lost(
        rig, a, slot, monkeypatch, result=TargetResult.ok(), after_s=0.5, failing="list_dependents"
    )
    assert statuses(rig.history(a)) == [(1, "SUCCEEDED")] and rig.queues.all_messages() == []
    # When another Region's copy of A's slot reaches a worker for the first time, after the end
    rig.clock.advance(1)
    copy = rig.worker().claim(rig.message(a, slot))
    assert copy.outcome is ClaimOutcome.DUPLICATE
    rig.work_until_idle(rig.worker())
    # Then A's slot did not run again and the child ran its slot S, once (QA27: it never ran while
    # the lost Region was away)
    assert statuses(rig.history(a)) == [(1, "SUCCEEDED")] and rig.target.calls_for(a.id) == []
    assert rig.target.calls_for(child.id) == [(slot_key(slot), 1)]
    # And a further copy dispatches nothing again
    rig.worker().claim(rig.message(a, slot))
    assert rig.queues.all_messages() == []


def test_a_first_copy_of_a_queue_jobs_ended_slot_passes_on_the_turn_its_end_left_held(
    rig: Rig, t0: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an overlap-queue job whose slot 1 runs while slot 2 waits for it, and slot 1's worker
    # lost (its Region lost) between its end record and passing the turn on
    job = rig.add_job(overlap="queue", timeout_seconds=600)
    worker = rig.worker()
    first = worker.claim(rig.message(job, t0))
    rig.clock.set(t0 + MINUTE)
    assert worker.claim(rig.message(job, t0 + MINUTE)).outcome is ClaimOutcome.QUEUED
    rig.clock.advance(5)
    with monkeypatch.context() as lost:
        lost.setattr(rig.store, "pass_turn", lambda *args: (_ for _ in ()).throw(ConnectionError("lost")))
        with pytest.raises(ConnectionError):
            worker.finish(first, TargetResult.ok())
    assert rig.queues.all_messages() == []
    # When another Region's copy of slot 1 reaches a worker for the first time, after the end
    rig.clock.advance(1)
    assert rig.worker().claim(rig.message(job, t0)).outcome is ClaimOutcome.DUPLICATE
    # Then slot 2 gets the turn and starts now (QA27: it waited for its queued check, 30 s on, or
    # for the next slot's claim)
    rig.work_until_idle(rig.worker())
    assert rig.target.calls_for(job.id) == [(slot_key(t0 + MINUTE), 1)]


def test_a_wide_fan_out_is_dispatched_side_by_side_and_each_child_runs_once(
    rig: Rig, t0: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # QA27: a parent's children were dispatched one after another (a few writes and a send each,
    # ~20 ms in the cloud): the last of 500 would start ~10 s after its parent succeeded
    service = jobs(rig)
    parent, _ = service.register("default", spec("rate(1 hour)"), job_id="extract")
    children = [service.register("default", spec("after(extract)"), job_id=f"load-{k}")[0] for k in range(40)]
    threads: set[str] = set()
    recorded = rig.store.record_parent_success

    def record(*args: object, **kwargs: object) -> frozenset[str]:
        threads.add(threading.current_thread().name)
        return recorded(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rig.store, "record_parent_success", record)
    slot = t0 + timedelta(hours=1)
    rig.clock.set(slot)
    rig.send(rig.message(parent, slot))
    rig.work_until_idle(rig.worker())
    assert len(threads) > 1 and all(name.startswith("children") for name in threads)
    for child in children:
        assert rig.target.calls_for(child.id) == [(slot_key(slot), 1)]
