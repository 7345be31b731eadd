"""Execution under faults of its own: a lost lease stops the run, a failing finish write is
tried again instead of re-running the target, and a first attempt that keeps meeting errors is
parked with a record before the queue's dead-letter threshold (issue 15, finding 4 and point 1)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from execution_harness import LONG, SHORT, FakeTarget, Rig, statuses
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.queues import MessageKind, message_for
from punctual.execution import PARK_AFTER_RECEIVES, Delivery, MessageReturned, error_backoff_s
from punctual.models import Execution, ExecutionStatus, Job, JobState
from punctual.runtime.clock import ManualClock
from punctual.store.base import Expect
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerKind, slot_key


class StoreDown(Exception):
    """The store answering with an error (throttling, a 500): not a conditional-check failure."""


class FlakyStore(MemoryStore):
    """A memory store whose writes of a given status fail, and whose reads of a job can fail."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_saves_of: dict[ExecutionStatus, int] = {}
        self.land_then_fail = False  # the write is applied, then its answer is lost
        self.unreadable_jobs: set[str] = set()
        self.fail_job_writes = {"replace": 0, "delete": 0}  # job writes that fail (throttled)
        self.fail_timer_writes = 0

    def save_execution(self, execution: Execution, expect: Expect | None, ttl_epoch_s: int) -> None:
        left = self.fail_saves_of.get(execution.status, 0)
        if left:
            self.fail_saves_of[execution.status] = left - 1
            if self.land_then_fail:
                super().save_execution(execution, expect, ttl_epoch_s)
            raise StoreDown(f"writing {execution.status.value} failed")
        super().save_execution(execution, expect, ttl_epoch_s)

    def replace_job(self, job: Job, expected_version: int, *args: Any, **kwargs: Any) -> None:
        self._job_write("replace")
        super().replace_job(job, expected_version, *args, **kwargs)

    def delete_job(self, tenant: str, job_id: str, *args: Any, **kwargs: Any) -> None:
        self._job_write("delete")
        super().delete_job(tenant, job_id, *args, **kwargs)

    def put_timers(self, timers: Any) -> None:
        if self.fail_timer_writes:
            self.fail_timer_writes -= 1
            raise StoreDown("timer write throttled")
        super().put_timers(timers)

    def _job_write(self, what: str) -> None:
        if self.fail_job_writes[what]:
            self.fail_job_writes[what] -= 1
            raise StoreDown(f"{what} of a job throttled")

    def get_job(self, tenant: str, job_id: str, consistent: bool = True) -> Job | None:
        if job_id in self.unreadable_jobs:
            raise StoreDown(f"reading job {job_id} failed")
        return super().get_job(tenant, job_id, consistent)


@pytest.fixture
def store() -> FlakyStore:
    return FlakyStore()


@pytest.fixture
def rig(store: FlakyStore, t0: datetime) -> Rig:
    return Rig(store, ManualClock(t0))


# --------------------------------------------------------------------------- a lost lease stops the run


def test_a_run_whose_lease_is_taken_over_is_stopped_and_its_result_discarded(rig: Rig, t0: datetime) -> None:
    # Given an ECS-lane run in heartbeat mode, and a target that runs until it is told to stop
    job = rig.add_job(runtime="ecs", timeout_seconds=3600)
    saw: list[bool] = []

    def run_until_cancelled(ctx: SlotContext) -> TargetResult:
        # When another worker takes the slot over (the record names a new owner) and this
        # run's next heartbeat finds it
        stored = rig.store.get_execution(job.tenant, job.id, slot_key(t0))
        assert stored is not None
        taken = stored.model_copy(update={"owner": "someone-else", "attempt": 2})
        rig.store.save_execution(taken, Expect(frozenset({ExecutionStatus.RUNNING}), 1), 0)
        rig.clock.advance(27)  # its next heartbeat is due (a 30 s lease, renewed 3 s before it lapses)
        beat = ctx.heartbeat()
        saw.append(ctx.cancelled)
        return TargetResult.stopped_early("stopped") if ctx.cancelled and not beat else TargetResult.ok()

    worker = rig.worker(lease_timers=True, lease_s=30, target=FakeTarget(run_until_cancelled))
    claim = worker.claim(rig.message(job, t0))
    assert claim.claimed
    finished = worker.finish(claim, worker.run(claim))
    # Then the run was told to stop (its adapter cuts its call short), and its result is not applied
    assert saw == [True]
    assert finished.superseded and claim.lost
    stored = rig.store.get_execution(job.tenant, job.id, slot_key(t0))
    assert stored is not None and (stored.status, stored.owner) == (ExecutionStatus.RUNNING, "someone-else")
    assert rig.metrics.total("LeasesLost") == 1


def test_a_heartbeat_the_store_fails_while_the_lease_outlasts_it_does_not_end_the_run(
    rig: Rig, store: FlakyStore, t0: datetime
) -> None:
    # Given an ECS-lane job of one attempt whose target heartbeats between its polls (as the ECS
    # adapter does while its task runs: ctx.heartbeat() once every poll)
    job = rig.add_job(runtime="ecs", timeout_seconds=3600, retry={"max_attempts": 1})
    beats: list[bool] = []

    def long_task(ctx: SlotContext) -> TargetResult:
        # When the store fails one heartbeat write (throttled) while the lease still has seconds left
        # (its first beat, 3 s into the 10 s lease)
        rig.clock.advance(3)
        store.fail_saves_of[ExecutionStatus.RUNNING] = 1
        beats.append(ctx.heartbeat())
        rig.clock.advance(1)  # and the next heartbeat, a second on, goes through
        beats.append(ctx.heartbeat())
        return TargetResult.ok("task exited 0")

    worker = rig.worker(lease_timers=True, lease_s=10, target=FakeTarget(long_task))
    claim = worker.claim(rig.message(job, t0))
    assert claim.claimed
    worker.finish(claim, worker.run(claim))
    # Then the run goes on (the keeper tries again, as documented) and its result is the slot's:
    # the failed write did not end the attempt as a "worker error" (QA: it did, with the task
    # still running, and the slot of one attempt ended FAILED)
    assert beats == [True, True]
    assert statuses(rig.history(job)) == [(1, "SUCCEEDED")]


@pytest.mark.parametrize("lane", ["lambda", "ecs"])
def test_a_run_stopped_because_the_store_failed_its_heartbeats_is_taken_over_from_its_message(
    rig: Rig, store: FlakyStore, t0: datetime, lane: str
) -> None:
    # Given a long run on either lane whose store fails every heartbeat from 5 s on, until the
    # lease would lapse: the run is stopped (delivery.md: another worker may take the slot over)
    ecs = lane == "ecs"
    queue = LONG if ecs else SHORT
    job = rig.add_job(runtime=lane, timeout_seconds=600, retry={"max_attempts": 3})

    def long_run(ctx: SlotContext) -> TargetResult:
        rig.clock.advance(5)
        store.fail_saves_of[ExecutionStatus.RUNNING] = 10
        while ctx.heartbeat():
            rig.clock.advance(1)
        return TargetResult.stopped_early("cut off: the lease was lost")

    first = rig.worker(lease_timers=ecs, lease_s=8, target=FakeTarget(long_run))
    rig.send(rig.message(job, t0), queue=queue)
    if ecs:
        from punctual.execution.worker_service import WorkerService

        [received] = rig.queues.receive(LONG, 1, 0, 8)
        WorkerService(first, [LONG])._execute(LONG, received)
    else:
        rig.work(first, SHORT, visibility_s=8)
    # When the store is back and the lease has lapsed
    store.fail_saves_of.clear()
    rig.clock.advance(10)
    rig.work_until_idle(rig.worker(lease_timers=ecs, lease_s=8), queue)
    # Then the slot's message came back and the next worker took the run over, within the lease:
    # the stopped run did not delete it (QA: it did, and the record stood RUNNING with nothing to
    # bring it back but the ECS lane's backstop timer minutes later, or the auditor)
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 2)]
    assert statuses(rig.history(job)) == [(2, "SUCCEEDED")]


# --------------------------------------------------------------------------- the finish write


def test_a_finish_write_that_fails_is_tried_again_and_the_target_is_not_run_twice(
    rig: Rig, store: FlakyStore, t0: datetime
) -> None:
    # Given a run that succeeds, and a store that fails the first three writes of its result
    job = rig.add_job()
    worker = rig.worker()
    store.fail_saves_of[ExecutionStatus.SUCCEEDED] = 3
    rig.send(rig.message(job, t0))
    # When the message is worked
    results = rig.work_until_idle(worker)
    # Then the result is recorded on a later try, the message acknowledged, the target called once
    assert [r.outcome for r in results] == ["SUCCEEDED"]
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 1)]
    assert statuses(rig.history(job)) == [(1, "SUCCEEDED")]
    assert rig.metrics.total("FinishWriteRetries") == 3


def test_a_finish_write_that_landed_but_lost_its_answer_is_not_taken_for_a_rival(
    rig: Rig, store: FlakyStore, t0: datetime
) -> None:
    # Given a store that applies the result's write and then answers with an error
    job = rig.add_job()
    worker = rig.worker()
    store.fail_saves_of[ExecutionStatus.SUCCEEDED] = 1
    store.land_then_fail = True
    rig.send(rig.message(job, t0))
    # Then the next try's conditional check fails on its own write: success, not "superseded"
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    assert rig.metrics.total("SupersededResults") == 0
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 1)]


def test_a_finish_write_that_keeps_failing_gives_up_after_finish_retry_s(
    rig: Rig, store: FlakyStore, t0: datetime
) -> None:
    # Given a store that fails every write of the result
    job = rig.add_job()
    worker = rig.worker(finish_retry_s=20)
    store.fail_saves_of[ExecutionStatus.SUCCEEDED] = 10_000
    claim = worker.claim(rig.message(job, t0))
    # Then the finish raises once its retry budget is spent (the record stays RUNNING: a takeover
    # after the lease finds it), and its tries were spaced, not a busy loop
    with pytest.raises(StoreDown):
        worker.finish(claim, worker.run(claim))
    waited = (rig.clock.now() - t0).total_seconds()
    assert 10 <= waited <= 25
    assert 3 <= rig.metrics.total("FinishWriteRetries") <= 20
    stored = rig.store.get_execution(job.tenant, job.id, slot_key(t0))
    assert stored is not None and stored.status is ExecutionStatus.RUNNING


# --------------------------------------------------------------------------- claim errors


def sqs_record(rig: Rig) -> dict[str, Any]:
    [received] = rig.queues.receive(SHORT, 1, 0, 900)
    return {
        "messageId": received.message_id,
        "receiptHandle": received.receipt,
        "body": received.message.to_body(),
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:short",
        "attributes": {"ApproximateReceiveCount": str(received.receive_count), "MessageGroupId": "g"},
    }


def test_a_first_attempt_that_keeps_failing_its_claim_is_parked_with_a_record_not_dead_lettered(
    rig: Rig, store: FlakyStore, t0: datetime
) -> None:
    # Given a job that cannot be read for now
    job = rig.add_job()
    worker = rig.worker()
    store.unreadable_jobs.add(job.id)
    rig.send(rig.message(job, t0))
    returned: list[int] = []
    change_visibility = rig.queues.change_visibility

    def spy(queue_url: str, receipt: str, visibility_s: int) -> None:
        returned.append(visibility_s)
        change_visibility(queue_url, receipt, visibility_s)

    rig.queues.change_visibility = spy  # type: ignore[method-assign]
    # When its message is delivered again and again (the work queues dead-letter past maxReceiveCount)
    for _ in range(1, PARK_AFTER_RECEIVES):
        with pytest.raises(StoreDown):
            worker.process_sqs_record(sqs_record(rig))
        rig.clock.advance(returned[-1])
    third = sqs_record(rig)
    handled = worker.process_sqs_record(third)
    # Then it goes back with a growing backoff, and at its third delivery it is recorded QUEUED
    # with the reason, its message acknowledged, and a timer to bring it back
    assert returned == [error_backoff_s(1), error_backoff_s(2)] == [10, 30]
    assert (handled.outcome, handled.ack) == ("parked", True)
    record = rig.store.get_execution(job.tenant, job.id, slot_key(t0))
    assert record is not None and record.status is ExecutionStatus.QUEUED
    assert "claim failed: StoreDown: reading job" in (record.error or "")
    assert rig.timers(t0, rig.clock.now() + timedelta(minutes=10), TimerKind.QUEUED)
    rig.queues.delete(SHORT, third["receiptHandle"])  # the Lambda deletes an acknowledged record
    # And when the job can be read again, the timer brings the slot back and it runs, once
    store.unreadable_jobs.clear()
    rig.clock.advance(5 * 60)
    rig.poll()
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 1)]


def _lambda_rounds(rig: Rig, worker: Any, seconds: int) -> None:
    """Deliver what is visible once a second for ``seconds``, as the Lambda shell does (a record
    that raises is handed to ``after_error``; acknowledged records are deleted)."""
    for _ in range(seconds):
        rig.lambda_round(worker, (StoreDown,))
        rig.clock.advance(1)


def test_a_one_time_slot_whose_completion_mark_is_throttled_still_runs_as_its_first_attempt(
    rig: Rig, store: FlakyStore, t0: datetime
) -> None:
    # Given a one-time job with one attempt, and a store that throttles the job's write (the
    # COMPLETED mark its last message asks of the worker) once
    job = rig.add_job("once", f"at({t0:%Y-%m-%dT%H:%M:%S})", retry={"max_attempts": 1})
    worker = rig.worker(lease_s=8)
    rig.send(message_for(job, slot_key(t0), t0, 1, MessageKind.FIRE, t0, last=True))
    store.fail_job_writes["replace"] = 1
    # When the worker takes the message (and a redelivery, as the Lambda shell would)
    _lambda_rounds(rig, worker, 60)
    # Then the slot ran once, as its first attempt, and the job is COMPLETED (QA24: the claim
    # stood RUNNING with no run behind it; its lease lapsed and the slot ended TIMED_OUT, "the
    # worker was lost", never run)
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 1)]
    assert statuses(rig.history(job)) == [(1, "SUCCEEDED")]
    completed = store.get_job(job.tenant, job.id)
    assert completed is not None and completed.state is JobState.COMPLETED


def test_a_job_whose_delete_after_completion_is_throttled_is_deleted_on_the_redelivery(
    rig: Rig, store: FlakyStore, t0: datetime
) -> None:
    # Given a one-time job that asked to be deleted once done, and a store that throttles that delete
    job = rig.add_job("gone", f"at({t0:%Y-%m-%dT%H:%M:%S})", delete_after_completion=True)
    worker = rig.worker(lease_s=8)
    rig.send(message_for(job, slot_key(t0), t0, 1, MessageKind.FIRE, t0, last=True))
    store.fail_job_writes["delete"] = 1
    _lambda_rounds(rig, worker, 60)
    # Then the slot ran once and the job is gone (QA24: the failed delete was taken for "changed
    # meanwhile" and the job stayed COMPLETED for good)
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 1)]
    assert store.get_job(job.tenant, job.id) is None


def test_an_ecs_slot_whose_backstop_timer_is_throttled_at_its_claim_runs_as_its_first_attempt(
    rig: Rig, store: FlakyStore, t0: datetime
) -> None:
    # Given an ECS-lane job with one attempt, and a store that throttles the claim's backstop LEASE
    # timer (the message's own lease is the run's, renewed by heartbeats; the backstop is for runs
    # that outlive SQS's 12 hours)
    job = rig.add_job(runtime="ecs", timeout_seconds=3600, retry={"max_attempts": 1})
    worker = rig.worker(lease_timers=True, lease_s=8, backstop_s=240)
    rig.send(rig.message(job, t0), queue=LONG)
    store.fail_timer_writes = 1
    # When an ECS worker takes it
    [received] = rig.queues.receive(LONG, 1, 0, 8)
    claim = worker.claim(received.message, Delivery(LONG, received.receipt, received.receive_count))
    # Then the slot is claimed and runs (QA24: the failed write left the RUNNING record with no run
    # behind it; the lease lapsed, and with no attempt left the slot ended TIMED_OUT, never run)
    assert claim.claimed
    rig.clock.advance(5)
    assert worker.heartbeat(claim)  # the next heartbeat writes the backstop
    assert rig.timers(t0, t0 + timedelta(minutes=10), TimerKind.LEASE)
    worker.finish(claim, worker.run(claim))
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 1)]
    assert statuses(rig.history(job)) == [(1, "SUCCEEDED")]


def test_error_backoff_grows_with_the_receives_and_is_bounded() -> None:
    assert [error_backoff_s(n) for n in (1, 2, 3, 4, 5, 9)] == [10, 30, 90, 270, 810, 900]


class _LockHeldByAHeartbeat:
    """A claim's lock that its heartbeat holds for ``held_s`` of the clock (a slow store write
    under it) before the finish gets it."""

    def __init__(self, clock: ManualClock, held_s: float) -> None:
        self.clock, self.held_s = clock, held_s
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        self.clock.advance(self.held_s)
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_a_finish_write_is_tried_again_for_finish_retry_s_after_the_claims_lock_is_taken(
    rig: Rig, store: FlakyStore, t0: datetime
) -> None:
    # Given a run whose finish waits 25 s for the claim's lock (its heartbeat's write, slow as the
    # store fails), and a store that fails the first two writes of the result
    job = rig.add_job()
    worker = rig.worker(finish_retry_s=20)
    claim = worker.claim(rig.message(job, t0))
    assert claim.claimed
    result = worker.run(claim)
    claim.lock = _LockHeldByAHeartbeat(rig.clock, 25)  # type: ignore[assignment]
    store.fail_saves_of[ExecutionStatus.SUCCEEDED] = 2
    # When it finishes
    finished = worker.finish(claim, result)
    # Then its write is tried again within finish_retry_s of its first try (taken once the lock
    # was), not of the moment it began to wait for the lock: the result is recorded
    assert finished.status is ExecutionStatus.SUCCEEDED
    assert rig.metrics.total("FinishWriteRetries") == 2
    assert statuses(rig.history(job)) == [(1, "SUCCEEDED")]


def test_a_run_that_raises_after_its_claim_is_never_parked(rig: Rig, store: FlakyStore, t0: datetime) -> None:
    # Given a run whose result can never be written (the record is RUNNING)
    job = rig.add_job()
    worker = rig.worker(finish_retry_s=0)
    store.fail_saves_of[ExecutionStatus.SUCCEEDED] = 10_000
    rig.send(rig.message(job, t0))
    with pytest.raises(StoreDown):
        worker.process_sqs_record(sqs_record(rig))
    # Then a parking attempt leaves the RUNNING record alone: the lease decides what happens next
    assert worker.after_error(rig.message(job, t0), Delivery(SHORT, "r", 4), StoreDown("x")) is False
    record = rig.store.get_execution(job.tenant, job.id, slot_key(t0))
    assert record is not None and record.status is ExecutionStatus.RUNNING


def test_message_returned_is_still_raised_for_a_waiting_record(rig: Rig, t0: datetime) -> None:
    # A live lease makes a redelivered message wait: the batch adapter keeps it in the queue
    job = rig.add_job(timeout_seconds=600)
    worker = rig.worker()
    assert worker.claim(rig.message(job, t0)).claimed
    rig.send(rig.message(job, t0, attempt=2))
    with pytest.raises(MessageReturned):
        worker.process_sqs_record(sqs_record(rig))


class _SleepHeld(ManualClock):
    """A manual clock whose sleeps wait until the test lets them go (a finish between two tries)."""

    def __init__(self, start: datetime) -> None:
        super().__init__(start)
        self.sleeping = threading.Event()
        self.go = threading.Event()

    def sleep(self, seconds: float) -> None:
        self.sleeping.set()
        self.go.wait(60)
        super().sleep(seconds)


def test_a_finish_trying_its_write_again_does_not_hold_up_the_heartbeats_of_other_runs(
    store: FlakyStore, t0: datetime
) -> None:
    # Given an ECS worker running two long slots, A and B, one keeper heartbeating both, and a store
    # that fails the first write of A's result (A's finish waits between its tries, for up to
    # finish_retry_s, 20 s, with A's lock held)
    from punctual.execution.keeper import LeaseKeeper

    clock = _SleepHeld(t0)
    rig = Rig(store, clock)
    worker = rig.worker(lease_timers=True, lease_s=8)
    claims = []
    for name in ("a", "b"):
        claim = worker.claim(rig.message(rig.add_job(name, runtime="ecs", timeout_seconds=3600), t0))
        assert claim.claimed
        worker.live.add(claim)
        claims.append(claim)
    store.fail_saves_of[ExecutionStatus.SUCCEEDED] = 1
    finishing = threading.Thread(target=worker.finish, args=(claims[0], TargetResult.ok()), daemon=True)
    finishing.start()
    try:
        assert clock.sleeping.wait(30), "A's finish never retried"
        # When B's heartbeat comes due while A's finish waits to try again
        clock.advance(6)
        step = threading.Thread(target=LeaseKeeper(worker).step, daemon=True)
        step.start()
        step.join(30)
        # Then the keeper's step is not held up by A: B's lease is renewed
        assert not step.is_alive(), "the keeper waited for A's finish"
        b = store.get_execution("default", "b", slot_key(t0))
        assert b is not None and b.lease_until == clock.now() + timedelta(seconds=8)
    finally:
        clock.go.set()
        finishing.join(30)
    # And A's result is recorded on its next try
    assert statuses(rig.history(claims[0].job)) == [(1, "SUCCEEDED")]  # type: ignore[arg-type]


class _BlockingStore(MemoryStore):
    """A memory store whose writes of one job's records block until let go (a throttled write,
    retried under a 30 s read timeout)."""

    def __init__(self, job_id: str) -> None:
        super().__init__()
        self.job_id = job_id
        self.blocking = False
        self.blocked = 0  # writes of that job blocked now
        self.go = threading.Event()

    def save_execution(self, execution: Execution, expect: Expect | None, ttl_epoch_s: int) -> None:
        if self.blocking and execution.job_id == self.job_id:
            self.blocked += 1
            self.go.wait(300)
        super().save_execution(execution, expect, ttl_epoch_s)


def test_a_slow_heartbeat_write_does_not_hold_up_the_heartbeats_of_other_runs(t0: datetime) -> None:
    # Given an ECS worker running two long slots, A then B, one keeper heartbeating both, and a
    # store whose writes of A's record block
    from punctual.execution.keeper import LeaseKeeper

    store = _BlockingStore("a")
    clock = ManualClock(t0)
    rig = Rig(store, clock)
    worker = rig.worker(lease_timers=True, lease_s=8)
    for name in ("a", "b"):
        claim = worker.claim(rig.message(rig.add_job(name, runtime="ecs", timeout_seconds=3600), t0))
        assert claim.claimed
        worker.live.add(claim)
    store.blocking = True
    keeper = LeaseKeeper(worker)
    try:
        # When both heartbeats come due and the keeper steps (twice) while A's write hangs
        clock.advance(6)
        for _ in range(2):
            step = threading.Thread(target=keeper.step, daemon=True)
            step.start()
            step.join(30)
            assert not step.is_alive(), "the keeper's step waited for A's write"
        # Then B's lease is renewed all the same, and A's heartbeat is not stacked behind itself
        renewed = clock.now() + timedelta(seconds=8)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            b = store.get_execution("default", "b", slot_key(t0))
            if b is not None and b.lease_until == renewed:
                break
            time.sleep(0.05)
        assert b is not None and b.lease_until == renewed
        assert store.blocked == 1
    finally:
        store.go.set()


def test_a_held_messages_record_whose_heartbeat_failed_is_beaten_again_before_its_lease_lapses(
    store: FlakyStore, t0: datetime
) -> None:
    # Given a Lambda-lane run whose batch's message the keeper holds (renewing the message, and
    # the record's lease with it), and a store that throttles the record's first heartbeat
    from punctual.execution.keeper import LeaseKeeper

    clock = ManualClock(t0)
    rig = Rig(store, clock)
    job = rig.add_job(timeout_seconds=600)
    worker = rig.worker(lease_s=8)
    rig.send(rig.message(job, t0))
    [received] = rig.queues.receive(SHORT, 1, 0, 900)
    keeper = LeaseKeeper(worker)
    keeper.hold(SHORT, [received.receipt], clock.now())
    claim = worker.claim(received.message, Delivery(SHORT, received.receipt, 1))
    assert claim.claimed
    worker.live.add(claim)
    store.fail_saves_of[ExecutionStatus.RUNNING] = 1
    # When the run goes on for half a minute, the keeper stepping every second
    lapsed = []
    for _ in range(30):
        clock.advance(1)
        keeper.step()
        record = store.get_execution(job.tenant, job.id, slot_key(t0))
        assert record is not None and record.lease_until is not None
        if record.lease_until <= clock.now():
            lapsed.append((clock.now() - t0).total_seconds())
    # Then the record's lease never lapsed under the live run (QA: the failed beat was tried again
    # only with the message's next renewal, 5 s on, and the lease stood lapsed for 2 s, long
    # enough for the pollers' watch to send a takeover: the target called again beside the run)
    assert lapsed == []
    assert not claim.lost and claim.live


def test_the_keepers_beat_threads_end_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a keeper's beat threads (one keeper per process, and one per Lambda batch in tests)
    from punctual.execution import keeper

    monkeypatch.setattr(keeper, "BEAT_IDLE_S", 0.05)
    beats = keeper._Beats(4)
    done = [beats.submit(key, lambda: None) for key in ("a", "b")]
    assert all(d is not None and d.wait(30) for d in done)
    # When they have nothing more to do, they end; a later write starts one again
    deadline = time.monotonic() + 30
    while beats._started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert beats._started == 0
    again = beats.submit("a", lambda: None)
    assert again is not None and again.wait(30)


@pytest.mark.parametrize(
    ("error", "kept"),
    [
        (ClientError({"Error": {"Code": "RequestThrottled"}}, "ChangeMessageVisibility"), True),
        (
            ClientError(
                {"Error": {"Code": "InternalError"}, "ResponseMetadata": {"HTTPStatusCode": 500}}, "C"
            ),
            True,
        ),
        (
            ClientError(
                {"Error": {"Code": "InvalidParameterValue", "Message": "beyond the limit [43200 seconds]"}},
                "C",
            ),
            False,
        ),
    ],
)
def test_a_message_renewal_sqs_refuses_for_now_keeps_the_message(
    rig: Rig, t0: datetime, error: ClientError, kept: bool
) -> None:
    # QA27: any error renewing a run's message let go of it for good (deleted, the run detached):
    # a run lost after a throttled renewal waited for its LEASE timer, minutes, not 10 s. Only SQS's
    # 12-hour cap (or a stale receipt) lets go of it now; a throttle or a 5xx is tried next beat.
    job = rig.add_job(runtime="ecs", timeout_seconds=3600)
    rig.send(rig.message(job, t0), queue=LONG)
    [received] = rig.queues.receive(LONG, 1, 0, 900)
    renew = rig.queues.change_visibility
    failures = [error]

    def flaky(queue_url: str, receipt: str, visibility_s: int) -> None:
        if failures:
            raise failures.pop()
        renew(queue_url, receipt, visibility_s)

    rig.queues.change_visibility = flaky  # type: ignore[method-assign]

    def long_task(ctx: SlotContext) -> TargetResult:
        rig.clock.advance(5)
        ctx.heartbeat()  # the renewal SQS refuses
        rig.clock.advance(5)
        ctx.heartbeat()  # and the next one
        return TargetResult.ok("task exited 0")

    worker = rig.worker(lease_timers=True, lease_s=8, target=FakeTarget(long_task))
    claim = worker.claim(received.message, Delivery(LONG, received.receipt, 1))
    assert claim.claimed
    worker.run(claim)
    assert claim.detached is (not kept)
    assert (len(rig.queues.all_messages(LONG)) == 1) is kept  # (a detached run's message is deleted)
