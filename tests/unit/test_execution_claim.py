"""Claiming: exactly one start per attempt, whatever duplicates, crashes and slow workers do.

In-memory store, MemoryQueues (AWS's five-minute dedup window) and a manual clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from execution_harness import LONG, SHORT, Crash, FakeTarget, Rig, statuses
from punctual.delivery.targets.base import TargetResult
from punctual.dispatch.queues import DispatchMessage, MessageKind
from punctual.execution import (
    LEASE_LOST_NOTE,
    TRANSITIONS,
    ClaimAction,
    ClaimOutcome,
    Delivery,
    IllegalTransition,
    check_transition,
    decide_claim,
)
from punctual.models import Execution, ExecutionStatus, Runtime
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import Lane, TimerKind, slot_key

S = ExecutionStatus


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


# --------------------------------------------------------------------------- the state machine


@given(old=st.sampled_from([None, *S]), new=st.sampled_from(list(S)))
def test_only_edges_of_the_state_machine_are_allowed(old: S | None, new: S) -> None:
    if new in TRANSITIONS[old]:
        check_transition(old, new)
    else:
        with pytest.raises(IllegalTransition):
            check_transition(old, new)


def test_terminal_states_are_final_and_nothing_is_born_finished() -> None:
    for status in (S.SUCCEEDED, S.FAILED, S.TIMED_OUT, S.SKIPPED):
        assert TRANSITIONS[status] == frozenset()
    with pytest.raises(IllegalTransition, match="none -> SUCCEEDED"):
        check_transition(None, S.SUCCEEDED)
    with pytest.raises(IllegalTransition):
        check_transition(S.QUEUED, S.FAILED)  # a run cannot fail before it started
    # MISSED is final for the scheduler; only a backfill (a user's request) starts such a slot
    assert TRANSITIONS[S.MISSED] == frozenset({S.RUNNING, S.QUEUED, S.SKIPPED, S.SUPERSEDED})
    with pytest.raises(IllegalTransition):
        check_transition(S.MISSED, S.SUCCEEDED)
    # A SUPERSEDED slot may be released again for the job's new spec
    assert TRANSITIONS[S.SUPERSEDED] == frozenset({S.RUNNING, S.QUEUED, S.SKIPPED})


def test_finishing_twice_is_an_illegal_transition(rig: Rig, t0: datetime) -> None:
    job = rig.add_job()
    worker = rig.worker()
    claim = worker.claim(rig.message(job, t0))
    worker.finish(claim, TargetResult.ok())
    with pytest.raises(IllegalTransition):
        worker.finish(claim, TargetResult.ok())
    dropped = worker.claim(rig.message(job, t0))
    with pytest.raises(IllegalTransition):  # a claim that holds nothing cannot run or finish
        worker.run(dropped)


# --------------------------------------------------------------------------- the claim table


def _record(status: S, attempt: int, lease_s: float | None, t0: datetime, releases: int = 0) -> Execution:
    return Execution(
        job_id="j",
        slot=slot_key(t0),
        scheduled_at=t0,
        attempt=attempt,
        status=status,
        owner="w",
        lease_until=t0 + timedelta(seconds=lease_s) if lease_s is not None else None,
        releases=releases,
    )


def _msg(t0: datetime, attempt: int, kind: str = MessageKind.FIRE) -> DispatchMessage:
    return DispatchMessage("default", "j", slot_key(t0), t0.isoformat(), attempt, 1, kind)


@pytest.mark.parametrize(
    ("record", "attempt", "kind", "redelivered", "action"),
    [
        (None, 1, MessageKind.FIRE, False, ClaimAction.START),
        (None, 2, MessageKind.RETRY, False, ClaimAction.DROP),  # record expired: nothing to retry
        (None, 1, MessageKind.CHILD, False, ClaimAction.START),
        ((S.QUEUED, 1, None), 1, MessageKind.FIRE, False, ClaimAction.START),
        ((S.RETRY_WAIT, 1, None), 2, MessageKind.RETRY, False, ClaimAction.START),
        ((S.RETRY_WAIT, 2, None), 2, MessageKind.RETRY, False, ClaimAction.DROP),  # a duplicate retry
        ((S.RETRY_WAIT, 2, None), 2, MessageKind.RETRY, True, ClaimAction.REPAIR),  # its worker died
        ((S.RETRY_WAIT, 1, None), 3, MessageKind.RETRY, False, ClaimAction.DROP),
        ((S.RUNNING, 1, 30), 1, MessageKind.FIRE, False, ClaimAction.WAIT),
        ((S.RUNNING, 1, 30), 2, MessageKind.TAKEOVER, False, ClaimAction.WAIT),
        ((S.RUNNING, 1, -1), 1, MessageKind.FIRE, True, ClaimAction.TAKEOVER),  # redelivered after a crash
        ((S.RUNNING, 1, -1), 2, MessageKind.TAKEOVER, False, ClaimAction.TAKEOVER),  # from a lease timer
        ((S.RUNNING, 3, -1), 3, MessageKind.FIRE, True, ClaimAction.EXHAUSTED),  # 3 of 3 used
        ((S.RUNNING, 2, -1), 1, MessageKind.FIRE, True, ClaimAction.DROP),  # an older attempt
        ((S.SUCCEEDED, 1, None), 1, MessageKind.FIRE, False, ClaimAction.DROP),
        ((S.SUCCEEDED, 1, None), 1, MessageKind.FIRE, True, ClaimAction.REPAIR),
        ((S.FAILED, 3, None), 2, MessageKind.RETRY, True, ClaimAction.DROP),
        # a retry the claim ended FAILED (past its age, its job paused), its worker lost before the
        # after-effects: the message back repairs them (review: they were lost)
        ((S.FAILED, 1, None), 2, MessageKind.RETRY, True, ClaimAction.REPAIR),
        ((S.FAILED, 1, None), 2, MessageKind.RETRY, False, ClaimAction.DROP),
        ((S.SKIPPED, 1, None), 1, MessageKind.FIRE, False, ClaimAction.DROP),
    ],
)
def test_claim_decisions(record, attempt, kind, redelivered, action, t0):  # type: ignore[no-untyped-def]
    current = _record(*record, t0=t0) if record else None
    decision = decide_claim(current, _msg(t0, attempt, kind), t0, 3, 3600, redelivered)
    assert decision.action is action, decision.reason


def test_a_retry_past_max_age_is_exhausted_with_a_grace_for_its_claim(t0: datetime) -> None:
    waiting = _record(S.RETRY_WAIT, 1, None, t0)
    retry = _msg(t0, 2, MessageKind.RETRY)
    # QA: attempt 2 started 301 s after the slot, max_age_seconds 120; review: one due inside the
    # age and claimed 0.6 s past it was refused
    assert decide_claim(waiting, retry, t0 + timedelta(seconds=301), 3, 120).action is ClaimAction.EXHAUSTED
    assert decide_claim(waiting, retry, t0 + timedelta(seconds=120.6), 3, 120).action is ClaimAction.START


def test_lapsed_lease_past_max_age_times_out_and_released_attempts_do_not_count(t0: datetime) -> None:
    old = _record(S.RUNNING, 1, -1, t0)
    late = t0 + timedelta(hours=2)
    assert decide_claim(old, _msg(t0, 2), late, 3, 3600).action is ClaimAction.EXHAUSTED
    # Attempt 3 of 3, but one earlier attempt was handed back on shutdown: one is left.
    handed_back = _record(S.RUNNING, 3, -1, t0, releases=1)
    assert decide_claim(handed_back, _msg(t0, 4), t0, 3, 3600).action is ClaimAction.TAKEOVER


# --------------------------------------------------------------------------- 1. duplicate delivery


def test_same_message_twice_and_after_the_dedup_window_runs_once(rig: Rig, t0: datetime) -> None:
    # Given a job whose slot was released, and the poller resending it (it crashed after the send)
    job = rig.add_job()
    worker = rig.worker()
    message = rig.message(job, t0)
    rig.send(message)
    rig.send(message)  # inside SQS's window: dropped by the queue
    assert len(rig.queues.all_messages()) == 1
    # When the worker runs it, and the same message arrives again after the five-minute window
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    rig.clock.advance(6 * 60)
    rig.send(message)
    assert len(rig.queues.all_messages()) == 1  # AWS no longer drops it
    later = rig.work_until_idle(worker)
    # Then the claim drops it: one run, one record, the message deleted
    assert [(r.outcome, r.ack) for r in later] == [("duplicate", True)]
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 1)]
    assert statuses(rig.history(job)) == [(1, "SUCCEEDED")]
    assert rig.queues.all_messages() == []
    assert rig.metrics.total("DuplicatesDropped") == 1


def test_duplicate_while_the_first_still_runs_waits_and_is_then_dropped(rig: Rig, t0: datetime) -> None:
    # Given attempt 1 running on worker A (its lease: 60 s here, renewed while it runs)
    job = rig.add_job(timeout_seconds=120)
    worker = rig.worker(lease_s=60)
    first = worker.claim(rig.message(job, t0))
    assert first.claimed
    # When a duplicate of the same message is delivered to worker B
    rig.send(rig.message(job, t0))
    [received] = rig.queues.receive("queue://short", 1, 0, 900)
    second = worker.claim(received.message, Delivery("queue://short", received.receipt, 1))
    # Then B does not run it: it comes back as A's lease would lapse
    assert second.outcome is ClaimOutcome.WAITING
    assert second.return_after_s == 60  # the lease left
    rig.clock.advance(59)
    assert rig.queues.receive("queue://short", 1, 0, 900) == []  # invisible meanwhile
    # And when A finishes first, the returned duplicate is dropped
    worker.finish(first, TargetResult.ok())
    rig.clock.advance(1)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["duplicate"]
    assert statuses(rig.history(job)) == [(1, "SUCCEEDED")]


# --------------------------------------------------------------------------- 2. crashes


@pytest.mark.parametrize("crash_at", ["after_claim", "mid_run", "after_run"])
def test_lambda_worker_crash_is_taken_over_on_redelivery(rig: Rig, t0: datetime, crash_at: str) -> None:
    # Given a job whose first run crashes at some point (the Lambda dies; its message stays)
    job = rig.add_job(timeout_seconds=60)
    rig.target = FakeTarget(*([Crash()] if crash_at == "mid_run" else []), TargetResult.ok("done"))
    worker = rig.worker()
    rig.send(rig.message(job, t0))
    [received] = rig.queues.receive("queue://short", 1, 0, 900)
    delivery = Delivery("queue://short", received.receipt, 1)
    claim = worker.claim(received.message, delivery)
    if crash_at == "mid_run":
        with pytest.raises(Crash):
            worker.run(claim)
    elif crash_at == "after_run":
        worker.run(claim)  # the target ran; the worker died before recording it
    # When SQS redelivers the message after its visibility timeout (the lease lapsed long before)
    rig.clock.advance(901)
    results = rig.work_until_idle(worker)
    # Then a new owner takes over as attempt 2 and finishes once; attempt 1 is listed as lost
    assert [r.outcome for r in results] == ["SUCCEEDED"]
    [record] = rig.history(job)
    assert (record.status, record.attempt) == (S.SUCCEEDED, 2)
    assert statuses(record.attempts) == [(1, "TIMED_OUT"), (2, "SUCCEEDED")]
    assert record.attempts[0].error == LEASE_LOST_NOTE
    assert record.owner != claim.execution.owner  # type: ignore[union-attr]
    started = [a for a in rig.target.calls_for(job.id)]
    assert started == ([(slot_key(t0), 1)] if crash_at != "after_claim" else []) + [(slot_key(t0), 2)]
    assert rig.metrics.total("Takeovers") == 1
    assert rig.queues.all_messages() == []


def test_ecs_worker_crash_is_recovered_by_its_lease_timer(rig: Rig, t0: datetime) -> None:
    # Given an ECS job whose worker claims it, heartbeats once, then dies and its message is lost
    job = rig.add_job(runtime="ecs", timeout_seconds=3600)
    worker = rig.worker(lease_timers=True, lease_s=30, backstop_s=240)
    claim = worker.claim(rig.message(job, t0))
    rig.clock.advance(27)
    assert worker.heartbeat(claim)
    lease_until = t0 + timedelta(seconds=57)
    assert claim.execution.lease_until == lease_until  # type: ignore[union-attr]
    # Then its one LEASE timer is the backstop, written at the claim and due past the far threshold
    # (a far timer: a burst's do not crowd the near buckets); the heartbeat did not write another
    [backstop] = rig.timers(t0, t0 + timedelta(minutes=10), TimerKind.LEASE)
    assert backstop.due == t0 + timedelta(seconds=240) and backstop.lane is Lane.FAR
    # When the poller reaches it (the lease lapsed long before, the message never came back)
    rig.clock.set(backstop.due)
    rig.poll()
    # Then it sends the takeover, and attempt 2 runs exactly once
    [takeover] = rig.queues.all_messages("queue://long")
    assert (takeover.kind, takeover.attempt) == (MessageKind.TAKEOVER, 2)
    assert [r.outcome for r in rig.work_until_idle(worker, "queue://long")] == ["SUCCEEDED"]
    assert statuses(rig.history(job)[0].attempts) == [(1, "TIMED_OUT"), (2, "SUCCEEDED")]


def test_a_long_run_rewrites_its_backstop_before_it_is_due(rig: Rig, t0: datetime) -> None:
    # Given an ECS run that lasts ten minutes, heartbeating as its 8 s lease asks
    job = rig.add_job(runtime="ecs", timeout_seconds=3600)
    worker = rig.worker(lease_timers=True, lease_s=8, backstop_s=240)
    claim = worker.claim(rig.message(job, t0))
    for _ in range(120):
        rig.clock.advance(5)
        assert worker.heartbeat_if_due(claim)
    # Then it heartbeated every 5 s, and wrote a backstop at the claim and every 2 minutes after:
    # one LEASE timer per 24 heartbeats, each due four minutes after it was written
    assert rig.metrics.total("Heartbeats") == 120
    backstops = rig.timers(t0, t0 + timedelta(minutes=20), TimerKind.LEASE)
    assert [b.due - t0 for b in backstops] == [timedelta(seconds=240 + 120 * k) for k in range(6)]
    # And the poller finds each stale while the run lives (its lease is live)
    rig.clock.set(t0 + timedelta(seconds=240))
    assert worker.heartbeat_if_due(claim)
    rig.poll()
    assert rig.queues.all_messages() == []


def test_crash_between_the_record_and_its_retry_timer_is_repaired(rig: Rig, t0: datetime) -> None:
    # Given attempt 1 failing, and the worker dying right after writing RETRY_WAIT
    retry = {
        "max_attempts": 3,
        "backoff": "fixed",
        "base_seconds": 1800,
        "max_seconds": 3600,
        "jitter": False,
    }
    job = rig.add_job(retry=retry)
    rig.target = FakeTarget(TargetResult.retryable("503"), TargetResult.ok())
    worker = rig.worker()
    rig.send(rig.message(job, t0))
    [received] = rig.queues.receive("queue://short", 1, 0, 900)
    original_put = rig.store.put_timers
    rig.store.put_timers = lambda timers: (_ for _ in ()).throw(Crash())  # type: ignore[method-assign]
    with pytest.raises(Crash):
        worker.process(received.message, Delivery("queue://short", received.receipt, 1))
    rig.store.put_timers = original_put  # type: ignore[method-assign]
    assert rig.history(job)[0].status is S.RETRY_WAIT
    assert rig.timers(t0, t0 + timedelta(hours=1)) == []
    # When the message is redelivered
    rig.clock.advance(901)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["duplicate"]
    # Then the retry timer is written (same instant as first computed) and the retry runs
    [retry] = rig.timers(t0, t0 + timedelta(hours=1), TimerKind.RETRY)
    assert (retry.attempt, retry.due) == (2, t0 + timedelta(seconds=1800))
    rig.clock.set(retry.due)
    rig.poll()
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    assert statuses(rig.history(job)[0].attempts) == [(1, "FAILED"), (2, "SUCCEEDED")]


# --------------------------------------------------------------------------- 3. fencing


def test_slow_worker_whose_lease_was_taken_over_cannot_finish(rig: Rig, t0: datetime) -> None:
    # Given worker A running attempt 1 past its lease (hung target), and worker B taking over
    job = rig.add_job(timeout_seconds=60)
    slow = rig.worker()
    a = slow.claim(rig.message(job, t0))
    rig.clock.advance(121)  # the lease was timeout + 60 s
    fast = rig.worker(target=FakeTarget(TargetResult.ok("B's result")))
    b = fast.claim(rig.message(job, t0, attempt=2, kind=MessageKind.TAKEOVER))
    assert b.claimed and b.execution.attempt == 2  # type: ignore[union-attr]
    # When A finishes while B still runs, and again after B finished
    early = slow.finish(a, TargetResult.ok("A's result"))
    assert early.superseded and early.status is None
    assert slow.heartbeat(a) is False  # A learns it lost the lease
    fast.finish(b, fast.run(b))
    # Then B's result stands; A's is counted, never applied
    [record] = rig.history(job)
    assert (record.status, record.attempt, record.result) == (S.SUCCEEDED, 2, "B's result")
    assert record.owner == b.execution.owner  # type: ignore[union-attr]
    assert rig.metrics.total("SupersededResults") == 1


def test_superseded_result_is_noted_on_the_attempt_list_once_the_slot_ended(rig: Rig, t0: datetime) -> None:
    job = rig.add_job(timeout_seconds=60)
    slow = rig.worker()
    a = slow.claim(rig.message(job, t0))
    rig.clock.advance(121)
    fast = rig.worker()
    b = fast.claim(rig.message(job, t0, attempt=2, kind=MessageKind.TAKEOVER))
    fast.finish(b, TargetResult.ok("B"))
    late = slow.finish(a, TargetResult.retryable("A failed late"))
    assert late.superseded
    [record] = rig.history(job)
    assert (record.status, record.attempt, record.result) == (S.SUCCEEDED, 2, "B")
    assert statuses(record.attempts) == [(1, "TIMED_OUT"), (2, "SUCCEEDED")]
    assert "late result FAILED: A failed late (superseded)" in (record.attempts[0].error or "")
    assert rig.timers(t0, t0 + timedelta(hours=1), TimerKind.RETRY) == []  # A's failure scheduled nothing


def test_lapsed_lease_with_no_attempt_left_ends_timed_out_and_reports_it(rig: Rig, t0: datetime) -> None:
    # Given a job with one attempt whose worker died mid-run
    job = rig.add_job(timeout_seconds=60, retry={"max_attempts": 1})
    worker = rig.worker()
    rig.send(rig.message(job, t0))
    [received] = rig.queues.receive("queue://short", 1, 0, 900)
    worker.claim(received.message, Delivery("queue://short", received.receipt, 1))
    # When the message comes back
    rig.clock.advance(901)
    results = rig.work_until_idle(worker)
    # Then nothing runs again: the slot is TIMED_OUT, reported to the failed-executions queue
    assert [r.outcome for r in results] == ["exhausted"]
    assert rig.target.calls == []
    [record] = rig.history(job)
    assert (record.status, record.attempt) == (S.TIMED_OUT, 1)
    [report] = rig.failures.bodies
    assert (report["job_id"], report["status"], report["error"]) == (job.id, "TIMED_OUT", LEASE_LOST_NOTE)
    assert rig.metrics.total("ExecutionsTimedOut") == 1


def test_heartbeat_extends_the_lease_and_the_visibility(rig: Rig, t0: datetime) -> None:
    job = rig.add_job(runtime="ecs", timeout_seconds=3600)
    worker = rig.worker(lease_timers=True, lease_s=30)
    rig.send(rig.message(job, t0), queue="queue://long")
    [received] = rig.queues.receive("queue://long", 1, 0, 30)
    claim = worker.claim(received.message, Delivery("queue://long", received.receipt, 1))
    for _ in range(10):  # five minutes of a long run, heartbeating every 30 s... of a 30 s lease
        rig.clock.advance(20)
        assert worker.heartbeat_if_due(claim)
    # The message never became visible to another worker, and the lease is still ahead
    assert rig.queues.receive("queue://long", 1, 0, 30) == []
    stored = rig.store.get_execution(job.tenant, job.id, slot_key(t0))
    assert stored is not None and stored.lease_until == rig.clock.now() + timedelta(seconds=30)


def test_a_run_whose_lease_cannot_be_extended_in_time_stops_and_records_nothing(
    rig: Rig, t0: datetime
) -> None:
    # Given an ECS run (lease 60 s) and a store that starts failing
    job = rig.add_job(runtime="ecs", timeout_seconds=3600)
    worker = rig.worker(lease_timers=True, lease_s=60)
    claim = worker.claim(rig.message(job, t0))
    assert claim.claimed
    save = rig.store.save_execution

    def failing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("DynamoDB is throttling")

    rig.store.save_execution = failing  # type: ignore[method-assign]
    # When a heartbeat fails while the lease still outlasts the next one, the run goes on ...
    rig.clock.advance(20)
    with pytest.raises(RuntimeError):
        worker.heartbeat(claim)
    assert claim.live
    # ... but when the next try (a second on) would come once a worker whose clock is 5 s ahead
    # may see the lease lapsed, the run gives up: the adapters see it in ctx.heartbeat() (the ECS
    # target stops its task)
    rig.clock.advance(33)
    with pytest.raises(RuntimeError):
        worker.heartbeat(claim)
    rig.clock.advance(1)
    assert worker.heartbeat(claim) is False
    assert not claim.live and not worker.heartbeat_if_due(claim)
    assert rig.metrics.total("LeasesLost") == 1
    # And its result is never recorded over a takeover's
    rig.store.save_execution = save  # type: ignore[method-assign]
    finished = worker.finish(claim, TargetResult.ok())
    assert finished.superseded
    record = rig.store.get_execution(job.tenant, job.id, slot_key(t0))
    assert record is not None and record.status is ExecutionStatus.RUNNING  # for the takeover to end


# --------------------------------------------------------------------------- wiring


def test_queue_url_of_an_event_source_arn() -> None:
    from punctual.execution import queue_url_for_arn

    arn = "arn:aws:sqs:eu-west-1:123456789012:punctual-short-0.fifo"
    local = "http://127.0.0.1:5000/123456789012/punctual-short-0.fifo"
    assert queue_url_for_arn(arn, ["http://x/1/other.fifo", local]) == local
    assert (
        queue_url_for_arn(arn, []) == "https://sqs.eu-west-1.amazonaws.com/123456789012/punctual-short-0.fifo"
    )


def test_the_worker_hands_the_target_its_decrypted_signing_secret(rig: Rig, t0: datetime) -> None:
    from punctual.execution import default_signing_secrets
    from punctual.runtime.settings import Settings
    from punctual.security.signing_secrets import SecretCipher

    settings = Settings(secret_key="a-local-key-of-enough-length")
    plain, stored = SecretCipher(settings).new_secret("default", "job-1")  # bound to this job
    job = rig.add_job("job-1", signing_secret_enc=stored)
    assert job.tenant == "default"
    worker = rig.worker()
    worker.signing_secrets = default_signing_secrets(settings)
    claim = worker.claim(rig.message(job, t0))
    worker.run(claim)
    assert rig.target.calls[0].signing_secrets == (plain,)
    assert default_signing_secrets(Settings())(job) == ()  # no key configured: nothing to sign with


def test_a_signing_secret_that_cannot_be_read_fails_the_attempt_naming_why(rig: Rig, t0: datetime) -> None:
    # A secret sealed under another key (a local key changed, a KMS key disabled or throttled):
    # the error escaped the run and left it RUNNING, so each attempt ended by its lease lapsing,
    # "lease expired: the worker was lost", and the reason was nowhere (QA22)
    from punctual.execution import default_signing_secrets
    from punctual.runtime.settings import Settings
    from punctual.security.signing_secrets import SecretCipher

    _, stored = SecretCipher(Settings(secret_key="another-local-key-of-length")).new_secret(
        "default", "job-1"
    )
    job = rig.add_job("job-1", signing_secret_enc=stored)
    worker = rig.worker()
    worker.signing_secrets = default_signing_secrets(Settings(secret_key="a-local-key-of-enough-length"))
    rig.send(rig.message(job, t0))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["RETRY_WAIT"]
    assert rig.target.calls == []  # nothing unsigned was sent
    record = rig.store.get_execution(job.tenant, job.id, slot_key(t0))
    assert record is not None and "signing secret cannot be read" in (record.error or "")
    assert "integrity check" in (record.error or "")
    # A target that signs nothing runs: the job's secret signs its http alerts, not its queue
    queued = {"type": "sqs", "queue_arn": "arn:aws:sqs:eu-west-1:123456789012:q"}
    other = rig.add_job("job-2", target=queued, signing_secret_enc=stored)
    rig.send(rig.message(other, t0))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]


class _FlakyKms:
    """A KMS stub: ``Encrypt`` keeps the text, ``Decrypt`` answers ``failing`` (an error code) or
    gives it back."""

    def __init__(self) -> None:
        self.failing: str | None = None

    def encrypt(self, KeyId: str, Plaintext: bytes, EncryptionContext: dict[str, str]) -> dict[str, bytes]:
        return {"CiphertextBlob": Plaintext}

    def decrypt(self, CiphertextBlob: bytes, EncryptionContext: dict[str, str]) -> dict[str, bytes]:
        from botocore.exceptions import ClientError

        if self.failing:
            raise ClientError({"Error": {"Code": self.failing, "Message": "no"}}, "Decrypt")
        return {"Plaintext": CiphertextBlob}


def test_a_kms_outage_defers_the_slot_without_using_its_attempts(rig: Rig, t0: datetime) -> None:
    # QA24: with the default policy (3 attempts, 2 s exponential) a 10 s KMS outage ended a webhook
    # slot FAILED, its dead letter and 'failed' alert sent, the target never called
    from punctual.runtime.settings import Settings
    from punctual.security.signing_secrets import SecretCipher, job_binding

    kms = _FlakyKms()
    cipher = SecretCipher(Settings(kms_key_id="alias/k"), kms_client=kms)
    _, stored = cipher.new_secret("default", "job-1")
    job = rig.add_job("job-1", signing_secret_enc=stored)
    worker = rig.worker()
    worker.signing_secrets = lambda j: (cipher.decrypt(j.signing_secret_enc, job_binding(j.tenant, j.id)),)
    kms.failing = "ThrottlingException"
    rig.send(rig.message(job, t0))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["RETRY_WAIT"]
    record = rig.store.get_execution(job.tenant, job.id, slot_key(t0))
    assert record is not None and record.releases == 1
    assert (record.error or "").startswith("deferred, not counted as an attempt: KMS unavailable")
    outcomes = []
    for second in range(1, 60):
        if second == 10:
            kms.failing = None  # KMS answers again
        rig.clock.set(t0 + timedelta(seconds=second))
        rig.poll()
        outcomes += [r.outcome for r in rig.work_until_idle(worker)]
    assert outcomes[-1] == "SUCCEEDED" and "FAILED" not in outcomes
    assert rig.target.calls_for(job.id) == [(slot_key(t0), len(outcomes) + 1)]  # once, late
    assert rig.failures.bodies == [] and rig.metrics.total("Retries") == 0
    assert rig.metrics.total("AttemptsDeferred") == len(outcomes)
    # KMS refusing (a key disabled, access denied) is the job's: it fails the attempt, counted
    rig.send(rig.message(job, t0 + timedelta(minutes=1)))
    kms.failing = "AccessDeniedException"
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["RETRY_WAIT"]
    record = rig.store.get_execution(job.tenant, job.id, slot_key(t0 + timedelta(minutes=1)))
    assert record is not None and record.releases == 0 and "AccessDenied" in (record.error or "")


def test_a_slot_released_for_a_replaced_version_is_superseded_not_run_with_the_new_spec(
    rig: Rig, t0: datetime
) -> None:
    # Given a slot released for version 1, and the job replaced (version 2) before it is claimed
    old = rig.add_job()
    stale = rig.message(old, t0)
    new = old.model_copy(update={"version": 2, "payload": {"spec": "new"}})
    rig.store.replace_job(new, expected_version=1)
    worker = rig.worker()
    rig.send(stale)
    # When a worker takes it
    results = rig.work_until_idle(worker)
    # Then nothing ran: the slot is recorded SUPERSEDED, and the message is deleted
    assert [(r.outcome, r.ack) for r in results] == [("stale", True)]
    assert rig.target.calls_for(old.id) == []
    record = rig.store.get_execution(old.tenant, old.id, slot_key(t0))
    assert record is not None and record.status is ExecutionStatus.SUPERSEDED
    assert "superseded" in (record.error or "") and record.job_version == 1
    assert rig.metrics.total("SupersededSlots") == 1
    # And when the new version releases the same slot (a replacement a moment before it), it
    # is a different message (no FIFO drop) and runs, once, with the new spec
    rig.send(rig.message(new, t0))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    assert rig.target.calls_for(old.id) == [(slot_key(t0), 1)]
    rig.clock.advance(6 * 60)  # past SQS's dedup window, the old message comes back once more
    rig.send(stale)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["duplicate"]
    assert statuses(rig.history(new)) == [(1, "SUCCEEDED")]


def test_a_first_attempt_deferred_again_and_again_is_parked_not_dead_lettered(rig: Rig, t0: datetime) -> None:
    # Given a slot whose message keeps landing where the invocation has too little time left
    job = rig.add_job(timeout_seconds=600)
    worker = rig.worker()
    rig.send(rig.message(job, t0))
    outcomes = []
    for _ in range(3):
        [received] = rig.queues.receive(SHORT, 10, 0, 900)
        delivery = Delivery(SHORT, received.receipt, received.receive_count)
        handled = worker.process(received.message, delivery, time_left_s=60)
        outcomes.append((handled.outcome, handled.ack))
        if handled.ack:
            rig.queues.delete(SHORT, received.receipt)
    # Then it is returned twice, and on its third delivery (well before the queue's
    # maxReceiveCount) recorded QUEUED with the reason, and its message deleted
    assert outcomes == [("waiting", False), ("waiting", False), ("queued", True)]
    record = rig.store.get_execution(job.tenant, job.id, slot_key(t0))
    assert record is not None and record.status is ExecutionStatus.QUEUED
    assert "not enough time left" in (record.error or "")
    assert rig.queues.all_messages() == []
    # And its timer brings it back, and an invocation with time runs it, once
    rig.clock.advance(60)
    rig.poll()
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 1)]
    assert statuses(rig.history(job)) == [(1, "SUCCEEDED")]


def test_an_ecs_jobs_run_now_on_the_lambda_lane_goes_to_the_long_lane_not_round_for_ever(
    rig: Rig, t0: datetime
) -> None:
    # Given a run-now slot sent to the short lane, and its job made an ECS job of an hour a moment
    # later (a run-now or child message is never parked: it bounced at once, for good, even once
    # its check's copy had run the slot on the long lane)
    job = rig.add_job(timeout_seconds=600)
    manual = rig.message(job, "2026-11-30T10:00:00Z~m0123456789ab", kind=MessageKind.MANUAL)
    rig.send(manual)
    moved = job.model_copy(
        update={"runtime": Runtime.ECS, "timeout_seconds": 3600, "version": 2, "spec_version": 2}
    )
    rig.store.replace_job(moved, job.version, [])
    worker = rig.worker()
    # When a Lambda worker (15 minutes at most) receives it
    [received] = rig.queues.receive(SHORT, 10, 0, 900)
    handled = worker.process(received.message, Delivery(SHORT, received.receipt, 1), time_left_s=890)
    # Then it is sent to the job's lane and let go here, not returned to come straight back
    assert (handled.outcome, handled.ack) == ("duplicate", True)
    rig.queues.delete(SHORT, received.receipt)
    assert rig.queues.all_messages(SHORT) == []
    assert [m.slot for m in rig.queues.all_messages(LONG)] == [manual.slot]
    # And the ECS lane's claim decides it, as its check's copy would: released for the spec before
    # the change, it is recorded SUPERSEDED, not run; nothing is left to come round
    assert [r.outcome for r in rig.work_until_idle(worker, LONG)] == ["stale"]
    record = rig.store.get_execution(job.tenant, job.id, manual.slot)
    assert record is not None and record.status is ExecutionStatus.SUPERSEDED
    assert rig.queues.all_messages() == [] and rig.target.calls == []


def test_only_a_backfill_runs_a_slot_an_earlier_job_at_the_id_ran(rig: Rig, t0: datetime) -> None:
    """A job deleted and created again at its id: the earlier job's record of a slot stops a release
    of it (exactly once per slot, whichever job), but a backfill, which a user asks for, runs it
    anew, over that record, once."""
    import dataclasses

    from punctual.usecases.backfills import backfill_ref

    slot = t0 - timedelta(hours=1)
    _, job = rig.created_again_after_a_run(slot)
    worker = rig.worker()
    # A fresh release of the slot (or a repeat of the earlier job's) is a duplicate
    rig.send(rig.message(job, slot))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["duplicate"]
    # A backfill's runs it once, over the earlier job's record
    backfilled = dataclasses.replace(
        rig.message(job, slot, kind=MessageKind.BACKFILL), backfill=backfill_ref("b1", False, 0)
    )
    rig.send(backfilled)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    rig.clock.advance(6 * 60)  # past SQS's deduplication window, the same backfill message again
    rig.send(backfilled)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["duplicate"]
    assert rig.target.calls_for(job.id) == [(slot_key(slot), 1)]
    (record,) = rig.history(job)
    assert (record.status, record.backfill, record.started_at) == (
        S.SUCCEEDED,
        "b1",
        t0 + timedelta(seconds=120),
    )
