"""What the chaos runs found, each as the smallest reproduction (in memory, a manual clock).

The Lambda worker writes no lease timer: its SQS message is its lease, and a takeover runs
under the message that found the lapsed lease, whatever attempt that message was sent for.
A message sent for attempt 1 that took over as attempt 2 is therefore the only thing that
can recover attempt 2 when its worker dies too. Before the fix, the claim dropped it as "an
older attempt" (RUNNING at 2, message for 1) or, once the attempt had ended, would not
repair it (REPAIR required the very same attempt), and the slot stayed RUNNING (or
RETRY_WAIT with no retry timer) for good: a missed slot after two crashes on one slot.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from execution_harness import Crash, FakeTarget, Rig, statuses
from punctual.delivery.targets.base import TargetResult
from punctual.dispatch.queues import DispatchMessage, MessageKind
from punctual.execution import LEASE_LOST_NOTE, ClaimAction, Delivery, Worker, decide_claim
from punctual.models import Execution, ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerKind, slot_key

S = ExecutionStatus
SHORT = "queue://short"
VISIBILITY_S = 900


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


def deliver(rig: Rig, worker: Worker) -> tuple[object, Delivery]:
    [received] = rig.queues.receive(SHORT, 1, 0, VISIBILITY_S)
    delivery = Delivery(SHORT, received.receipt, received.receive_count)
    return worker.claim(received.message, delivery), delivery


def test_a_lambda_slot_whose_takeover_crashes_too_is_taken_over_again(rig: Rig, t0: datetime) -> None:
    # Given a Lambda job whose worker dies mid-run, twice in a row (the second one after taking over)
    job = rig.add_job(timeout_seconds=10)
    rig.target = FakeTarget(Crash(), Crash(), TargetResult.ok("third time"))
    worker = rig.worker(lease_s=10)
    rig.send(rig.message(job, t0))
    for attempt in (1, 2):
        claim, _ = deliver(rig, worker)
        assert claim.claimed and claim.execution.attempt == attempt  # type: ignore[attr-defined]
        with pytest.raises(Crash):
            worker.run(claim)  # type: ignore[arg-type]
        rig.clock.advance(VISIBILITY_S + 1)  # the message comes back; the lease lapsed long before
    # When the message comes back a third time
    results = rig.work_until_idle(worker)
    # Then the slot is taken over as attempt 3 and succeeds (it used to be dropped: RUNNING for good)
    assert [r.outcome for r in results] == ["SUCCEEDED"]
    [record] = rig.history(job)
    assert statuses(record.attempts) == [(1, "TIMED_OUT"), (2, "TIMED_OUT"), (3, "SUCCEEDED")]
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 1), (slot_key(t0), 2), (slot_key(t0), 3)]


def test_an_ecs_slot_whose_takeover_crashes_too_is_taken_over_again(rig: Rig, t0: datetime) -> None:
    # Given an ECS-lane job (LEASE timers, a lease of seconds, the message kept as the lease) whose
    # worker dies mid-run twice in a row: the sustained-fault phase left such a slot RUNNING, its
    # message dropped as "an older attempt" and its LEASE timer a far backstop
    job = rig.add_job(timeout_seconds=10)
    rig.target = FakeTarget(Crash(), Crash(), TargetResult.ok("third time"))
    worker = rig.worker(lease_timers=True, lease_s=8)
    rig.send(rig.message(job, t0))
    for attempt in (1, 2):
        claim, _ = deliver(rig, worker)
        assert claim.claimed and claim.execution.attempt == attempt  # type: ignore[attr-defined]
        with pytest.raises(Crash):
            worker.run(claim)  # type: ignore[arg-type]
        rig.clock.advance(VISIBILITY_S + 1)
    # When the message comes back a third time
    results = rig.work_until_idle(worker)
    # Then it takes the slot over as attempt 3, which succeeds
    assert [r.outcome for r in results] == ["SUCCEEDED"]
    assert statuses(rig.history(job)[0].attempts) == [(1, "TIMED_OUT"), (2, "TIMED_OUT"), (3, "SUCCEEDED")]


def test_a_takeover_that_dies_after_recording_its_failure_is_repaired(rig: Rig, t0: datetime) -> None:
    # Given attempt 1 lost with its worker, and attempt 2 (taken over by the same message) failing
    # with the worker dying between the RETRY_WAIT record and the retry timer
    retry = {"max_attempts": 5, "backoff": "fixed", "base_seconds": 30, "max_seconds": 30, "jitter": False}
    job = rig.add_job(timeout_seconds=10, retry=retry)
    rig.target = FakeTarget(Crash(), TargetResult.retryable("503"), TargetResult.ok())
    worker = rig.worker(lease_s=10)
    rig.send(rig.message(job, t0))
    claim, _ = deliver(rig, worker)
    with pytest.raises(Crash):
        worker.run(claim)  # type: ignore[arg-type]
    rig.clock.advance(VISIBILITY_S + 1)
    [received] = rig.queues.receive(SHORT, 1, 0, VISIBILITY_S)
    original_put = rig.store.put_timers

    def put_timers(timers: list[Any]) -> None:
        if any(t.kind is TimerKind.RETRY for t in timers):
            raise Crash()  # the worker dies right after the RETRY_WAIT record
        original_put(timers)

    rig.store.put_timers = put_timers  # type: ignore[method-assign]
    with pytest.raises(Crash):
        worker.process(received.message, Delivery(SHORT, received.receipt, received.receive_count))
    rig.store.put_timers = original_put  # type: ignore[method-assign]
    assert (rig.history(job)[0].status, rig.history(job)[0].attempt) == (S.RETRY_WAIT, 2)
    # When the message (sent for attempt 1) comes back
    rig.clock.advance(VISIBILITY_S + 1)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["duplicate"]
    # Then it repairs attempt 2's after-effects: the retry timer exists and attempt 3 runs
    retries = rig.timers(t0, t0 + timedelta(hours=2), TimerKind.RETRY)
    assert [t.attempt for t in retries] == [3]
    rig.clock.set(max(retries[0].due, rig.clock.now()))
    rig.poll(lookback=timedelta(hours=1))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    assert statuses(rig.history(job)[0].attempts) == [(1, "TIMED_OUT"), (2, "FAILED"), (3, "SUCCEEDED")]


def _running(t0: datetime, attempt: int, lease_s: float) -> Execution:
    return Execution(
        job_id="j",
        slot=slot_key(t0),
        scheduled_at=t0,
        attempt=attempt,
        status=S.RUNNING,
        owner="w",
        lease_until=t0 + timedelta(seconds=lease_s),
        attempts=[],
    )


def test_only_a_message_that_is_the_lease_carries_an_older_attempt(t0: datetime) -> None:
    old = DispatchMessage("default", "j", slot_key(t0), t0.isoformat(), 1, 1, MessageKind.FIRE)
    # the message that took over (both lanes) is the running attempt's lease, when received again
    assert decide_claim(_running(t0, 2, -1), old, t0, 5, 3600, True, message_is_lease=True).action is (
        ClaimAction.TAKEOVER
    )
    assert decide_claim(_running(t0, 2, 30), old, t0, 5, 3600, True, message_is_lease=True).action is (
        ClaimAction.WAIT
    )
    ended = _running(t0, 2, -1).model_copy(update={"status": S.SUCCEEDED, "lease_until": None})
    assert decide_claim(ended, old, t0, 5, 3600, True, message_is_lease=True).action is ClaimAction.REPAIR
    assert decide_claim(ended, old, t0, 5, 3600, False, message_is_lease=True).action is ClaimAction.DROP
    # a fresh copy of an older attempt (a duplicate, a re-send) carries nothing: it drops
    fresh = decide_claim(_running(t0, 2, -1), old, t0, 5, 3600, False, message_is_lease=True)
    assert fresh.action is ClaimAction.DROP
    # without message leases (message_is_lease=False), an older message always drops
    assert decide_claim(_running(t0, 2, -1), old, t0, 5, 3600, True).action is ClaimAction.DROP
    assert decide_claim(ended, old, t0, 5, 3600, True).action is ClaimAction.DROP
    assert LEASE_LOST_NOTE  # the lost attempts above are recorded with it (see the tests before)


# --------------------------------------------------------------------------- delay(...) under clock skew
#
# The long chaos run (seed 4) saw both delay(4 seconds) jobs run about once a second for minutes,
# then stop for good. A poller whose clock runs ahead releases a slot early; its run then ends
# before its own slot, and the next slot (N after that end) came only 1 s after it, or was the
# very same slot: the chain's next timer named a slot already done, was dropped, and the chain
# stopped. Skew must move when a slot runs, never how often (DESIGN.md).


@pytest.mark.parametrize("early_s", [2.5, 4.5])
def test_a_delay_run_released_early_still_waits_its_delay_after_its_slot(
    rig: Rig, t0: datetime, early_s: float
) -> None:
    # Given a delay(4 seconds) job whose slot at t0 + 10 s was released early_s seconds early
    job = rig.add_job(schedule="delay(4 seconds)")
    slot = t0 + timedelta(seconds=10)
    worker = rig.worker()
    rig.clock.set(slot - timedelta(seconds=early_s))
    rig.send(rig.message(job, slot))
    # When it runs (and ends at once)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    # Then the next slot is 4 s after the slot, not 4 s after the early end (nor the slot itself)
    fires = rig.timers(t0, t0 + timedelta(minutes=5), TimerKind.FIRE)
    assert [t.slot for t in fires] == [slot_key(slot + timedelta(seconds=4))]


# --------------------------------------------------------------------------- a Lambda slot whose message dies
#
# The same long run, fixed: slow-00's slot 11:42:31 lost three workers in a row. Every crash
# costs its message receives (the return, then a wait for the lease), and at the queue's
# maxReceiveCount (5) SQS moved it to the dead-letter queue: with no lease timer in the Lambda
# lane, nothing was left to recover the slot (RUNNING, lease lapsed). A re-sent duplicate the
# chaos driver happened to inject took it over. A takeover is rare: it now writes a LEASE
# timer, so the poller recovers the slot if its message is gone.


def test_a_taken_over_lambda_slot_survives_the_loss_of_its_message(rig: Rig, t0: datetime) -> None:
    # Given a Lambda job whose first worker dies, and whose takeover's worker dies too
    job = rig.add_job(timeout_seconds=10)
    rig.target = FakeTarget(Crash(), Crash(), TargetResult.ok("recovered"))
    worker = rig.worker(lease_s=10)
    rig.send(rig.message(job, t0))
    for _ in range(2):
        claim, _ = deliver(rig, worker)
        with pytest.raises(Crash):
            worker.run(claim)  # type: ignore[arg-type]
        rig.clock.advance(VISIBILITY_S + 1)
    # When the message is gone (dead-lettered after maxReceiveCount receives)
    [received] = rig.queues.receive(SHORT, 1, 0, VISIBILITY_S)
    rig.queues.delete(SHORT, received.receipt)
    # Then the poller finds the lapsed lease from its timer and sends the next attempt
    rig.poll(lookback=timedelta(hours=1))
    [takeover] = rig.queues.all_messages(SHORT)
    assert (takeover.kind, takeover.attempt) == (MessageKind.TAKEOVER, 3)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    [record] = rig.history(job)
    assert statuses(record.attempts) == [(1, "TIMED_OUT"), (2, "TIMED_OUT"), (3, "SUCCEEDED")]


def test_the_common_lambda_path_still_writes_no_lease_timer(rig: Rig, t0: datetime) -> None:
    job = rig.add_job(timeout_seconds=10)
    worker = rig.worker(lease_s=10)
    rig.send(rig.message(job, t0))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    assert rig.timers(t0 - timedelta(minutes=1), t0 + timedelta(hours=1), TimerKind.LEASE) == []


# A worker paused (SIGSTOP, a frozen VM, a long GC) between its claim and its target's call
# resumed with the claim it held: the run went straight on to call the target, though by its
# own clock its lease had lapsed long before and another worker had taken the slot over and
# run it. Only the lease keeper's next beat (a thread that resumes beside it) would have told
# it so, and the call left first: the target was called again, for an attempt already superseded.


@pytest.mark.parametrize("taken_over", [True, False])
def test_a_worker_paused_past_its_lease_before_the_call_does_not_call_a_slot_taken_over(
    rig: Rig, t0: datetime, taken_over: bool
) -> None:
    # Given a Lambda job claimed by worker A, which is then paused for 20 s before its call
    job = rig.add_job(timeout_seconds=10)
    paused, other = rig.worker(lease_s=8), rig.worker(lease_s=8)
    claim = paused.claim(rig.message(job, t0))
    assert claim.claimed
    rig.clock.advance(20)
    if taken_over:  # meanwhile its message came back to worker B, which took the slot over and ran it
        assert other.process(rig.message(job, t0)).outcome == "SUCCEEDED"
    # When A resumes and goes on with its run
    finished = paused.finish(claim, paused.run(claim))
    calls = rig.target.calls_for(job.id)
    [record] = rig.history(job)
    if taken_over:
        # Then A does not call the target: the slot ran once, under B's attempt, A's is superseded
        assert calls == [(slot_key(t0), 2)]
        assert finished.superseded and record.status is S.SUCCEEDED and record.attempt == 2
    else:
        # Then, nobody having taken it over, A renews its lease and runs the slot (once)
        assert calls == [(slot_key(t0), 1)]
        assert record.status is S.SUCCEEDED and record.attempt == 1
