"""A run's own message back is its lease lapsed, by SQS's clock alone (issue 30, points 3 and 5).

The claim writes the message's id and receive count into the record's owner; the worker's lease
keeper renews the message's visibility (the message lease, 7 s) while the run lasts and lets the
run go before that visibility could end. So the next worker that receives that message takes the
run over at once, whatever the record's ``lease_until`` (12 s, beaten every 5 s: a run shorter
than that writes nothing more) and whatever its clock says. Copies of other messages (the
pollers' takeover, a re-send) still wait for the record's lease.

In-memory store and queues on a manual clock (the queues' visibility runs on it: SQS's clock);
each worker sees it through its own skew; keepers stepped as their thread ticks.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from execution_harness import SHORT, Rig
from punctual.dispatch.queues import MemoryQueues, MessageKind, Visibilities
from punctual.execution import ClaimAction, ClaimOutcome, Delivery, decide_claim
from punctual.execution.keeper import TICK_S, LeaseKeeper
from punctual.execution.records import claim_owner, message_back
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock, OffsetClock
from punctual.runtime.settings import CLOCK_SKEW_S, Settings
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key

MESSAGE_LEASE_S = Settings().message_lease_s


def test_an_owner_names_the_receive_it_was_claimed_by() -> None:
    owner = claim_owner("m-1", 2)
    assert owner != claim_owner("m-1", 2)  # fresh at every claim
    assert message_back(owner, "m-1", 3)
    assert not message_back(owner, "m-1", 2)  # that very receive: not back
    assert not message_back(owner, "m-2", 9)  # another message: a copy
    assert not message_back(owner, "", 9)
    # Owners of no message, and of an earlier build (a plain hex), never match
    assert not message_back(claim_owner("", 1), "m-1", 9)
    assert not message_back("0123abcd", "m-1", 9)
    assert not message_back(None, "m-1", 9)
    assert not message_back("a~x~m-1", "m-1", 9)


def test_the_decision_takes_a_live_lease_over_only_for_the_runs_own_message(t0: datetime) -> None:
    rig = Rig(MemoryStore(), ManualClock(t0))
    job = rig.add_job()
    message = rig.message(job, t0)
    claim = rig.worker().claim(message, Delivery(SHORT, "r-1", 1, "m-1"))
    current = claim.execution
    assert current is not None and current.lease_until is not None and current.lease_until > t0
    retry = job.retry
    copy = decide_claim(current, message, t0, retry.max_attempts, retry.max_age_seconds, True, True)
    assert copy.action is ClaimAction.WAIT
    back = decide_claim(
        current, message, t0, retry.max_attempts, retry.max_age_seconds, True, True, message_back=True
    )
    assert back.action is ClaimAction.TAKEOVER


def _received_run(rig: Rig, behind_s: float = 0.0):  # type: ignore[no-untyped-def]
    """A slot received from the queue, held and claimed by worker A (its clock ``behind_s`` behind
    the queue's) as a Lambda batch does: A, its keeper, the claim and the job."""
    job = rig.add_job(timeout_seconds=600)
    a = rig.worker(clock=OffsetClock(rig.clock, -behind_s))
    keeper, claim = rig.held_run(a, job, rig.clock.now())
    return a, keeper, claim, job


@pytest.mark.parametrize("b_ahead_s", [-CLOCK_SKEW_S, 0.0, CLOCK_SKEW_S])
@pytest.mark.parametrize("dies_at_s", [0.0, 3.0, 30.0])
def test_a_dead_workers_run_is_taken_over_by_its_message_within_the_message_lease(
    t0: datetime, b_ahead_s: float, dies_at_s: float
) -> None:
    # Given a run on worker A, its keeper ticking, and a worker B whose clock is skewed from A's
    rig = Rig(MemoryStore(), ManualClock(t0))
    _, keeper, claim, job = _received_run(rig)
    b = rig.worker(clock=OffsetClock(rig.clock, b_ahead_s))
    ticks = 0
    while ticks * TICK_S < dies_at_s:
        rig.clock.advance(TICK_S)
        ticks += 1
        keeper.step()
        assert rig.queues.receive(SHORT, 1, 0, 900) == []  # held while A lives
    # When A dies (its keeper stops) and B receives whatever becomes visible, every quarter second
    died = rig.clock.now()
    taken = None
    while taken is None and rig.clock.now() - died < timedelta(seconds=30):
        rig.clock.advance(0.25)
        for received in rig.queues.receive(SHORT, 1, 0, 900):
            delivery = Delivery(SHORT, received.receipt, received.receive_count, received.message_id)
            taken = b.claim(received.message, delivery)
    # Then B takes the run over as its next attempt, its record's lease still live, within the
    # message lease of the death, whatever B's clock
    assert taken is not None and taken.outcome is ClaimOutcome.CLAIMED
    assert taken.execution is not None and taken.execution.attempt == 2
    assert (rig.clock.now() - died).total_seconds() <= MESSAGE_LEASE_S
    record = rig.store.get_execution(job.tenant, job.id, claim.message.slot)
    assert record is not None and record.owner == taken.execution.owner
    assert [a.status for a in record.attempts] == [ExecutionStatus.TIMED_OUT]


@pytest.mark.parametrize("a_behind_s", [0.0, CLOCK_SKEW_S])
def test_a_live_run_is_never_taken_over_whatever_the_skew_between_its_worker_and_sqs(
    t0: datetime, a_behind_s: float
) -> None:
    # Given a run of two minutes on worker A, its keeper ticking, and a worker B whose clock is the
    # whole skew allowed between nodes ahead of A's (A's behind SQS's, or B's ahead of it)
    rig = Rig(MemoryStore(), ManualClock(t0))
    _, keeper, claim, job = _received_run(rig, a_behind_s)
    b = rig.worker(clock=OffsetClock(rig.clock, CLOCK_SKEW_S - a_behind_s))
    for _ in range(120):
        rig.clock.advance(TICK_S)
        keeper.step()
        # Then its message never comes back, and a copy of it (the pollers') never starts it
        assert rig.queues.receive(SHORT, 1, 0, 900) == []
        copy = b.claim(rig.message(job, t0, attempt=2, kind=MessageKind.TAKEOVER))
        assert not copy.claimed
    assert claim.live


def test_a_run_shorter_than_the_first_renewal_writes_nothing_and_renews_nothing(t0: datetime) -> None:
    # Given a run held and claimed, the records' writes and visibility requests counted from the claim
    rig = Rig(MemoryStore(), ManualClock(t0))
    _, keeper, claim, _ = _received_run(rig)
    writes: list[object] = []
    save = rig.store.save_execution
    rig.store.save_execution = lambda *a, **k: (writes.append(a), save(*a, **k))  # type: ignore[method-assign,func-returns-value]
    calls = rig.queues.visibility_calls
    # When it runs for 3.9 s (under the first renewal, 4 s), its keeper ticking
    for _ in range(3):
        rig.clock.advance(TICK_S)
        keeper.step()
    rig.clock.advance(0.9)
    keeper.step()
    # Then nothing more was written or asked of SQS
    assert writes == [] and rig.queues.visibility_calls == calls
    assert claim.live


class RefusingQueues(MemoryQueues):
    """Visibility renewals refused (SQS throttling) while ``refusing``, or the next ``refuse_next``."""

    refusing = False
    refuse_next = 0
    refused = 0

    def change_visibility_batch(
        self, queue_url: str, receipts: object, visibility_s: Visibilities
    ) -> list[str]:
        if self.refusing or self.refuse_next:
            self.refuse_next = max(0, self.refuse_next - 1)
            self.refused += 1
            raise RuntimeError("ThrottlingException")
        return super().change_visibility_batch(queue_url, receipts, visibility_s)  # type: ignore[arg-type]


@pytest.mark.parametrize("lane", ["lambda", "ecs"])
def test_a_run_whose_message_cannot_be_renewed_lets_go_before_the_message_is_back(
    t0: datetime, lane: str
) -> None:
    # Given a held run whose message's renewals SQS refuses from its first
    rig = Rig(MemoryStore(), ManualClock(t0))
    rig.queues = RefusingQueues(now=rig.clock.now)
    job = rig.add_job(timeout_seconds=600)
    a = rig.worker(lease_timers=lane == "ecs")
    rig.send(rig.message(job, t0))
    [received] = rig.queues.receive(SHORT, 1, 0, 900)
    keeper = LeaseKeeper(a)
    keeper.hold(SHORT, [received.receipt], rig.clock.now())
    claim = a.claim(received.message, Delivery(SHORT, received.receipt, 1, received.message_id))
    a.live.add(claim)
    rig.queues.refusing = True
    let_go_at = None
    # When its keeper ticks, until the message would be back
    for tick in range(1, MESSAGE_LEASE_S + 1):
        rig.clock.advance(TICK_S)
        keeper.step()
        if let_go_at is None and (claim.lost or claim.detached):
            let_go_at = tick
    # Then the run let go of it before its visibility could end: on the Lambda lane the run is
    # stopped (its message back is the takeover), on the ECS lanes the message is deleted and the
    # run goes on (its backstop timer keeps it)
    assert let_go_at is not None and let_go_at < MESSAGE_LEASE_S
    if lane == "lambda":
        assert claim.lost and claim.cancel.is_set()
        assert [r.message.slot for r in rig.queues.receive(SHORT, 1, 0, 900)] == [slot_key(t0)]
    else:
        assert claim.detached and claim.live and not claim.cancel.is_set()
        assert rig.queues.all_messages(SHORT) == []


def test_a_worker_paused_past_its_message_lease_does_not_call_its_target(t0: datetime) -> None:
    # Given a run held and claimed, whose process is paused before its call (no keeper step)
    rig = Rig(MemoryStore(), ManualClock(t0))
    a, _, claim, _ = _received_run(rig)
    rig.clock.advance(MESSAGE_LEASE_S - 1)
    assert a.leases.held_for_call(claim)  # (still well inside its message lease)
    rig.clock.advance(1)
    # When it resumes: its message may be back with another worker by now
    # Then it lets go of the run rather than call the target beside a takeover
    assert not a.leases.held_for_call(claim)
    assert claim.lost and claim.cancel.is_set()


def test_one_refused_renewal_is_tried_again_in_time_and_the_run_goes_on(t0: datetime) -> None:
    # Given a held run on the Lambda lane whose first renewal SQS refuses (a throttle), and no other
    rig = Rig(MemoryStore(), ManualClock(t0))
    queues = RefusingQueues(now=rig.clock.now)
    rig.queues = queues
    a, keeper, claim, _ = _received_run(rig)
    queues.refuse_next = 1
    # When its keeper ticks for half a minute
    for _ in range(30):
        rig.clock.advance(TICK_S)
        keeper.step()
        # Then its message never comes back, and the run is never let go of
        assert rig.queues.receive(SHORT, 1, 0, 900) == []
    assert queues.refused == 1
    assert claim.live and not claim.detached and a.leases.held_for_call(claim)
