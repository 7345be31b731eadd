"""Review of the message-back takeover (030012c1, 82df0225, 9d4acabb): a run's own message back is
its takeover, so its holder must never let that message come back while its run is live.

Each test is one defect found reviewing it: the behaviour the lease docstrings promise, on a manual
clock (the in-memory queues' visibility follows it: SQS's clock), keepers stepped by hand, a peer
worker receiving whatever becomes visible.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from datetime import datetime

from botocore.exceptions import ClientError

from execution_harness import LONG, SHORT, FakeTarget, Rig
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.queue_acks import BatchedDeletes
from punctual.dispatch.queues import MemoryQueues, Visibilities
from punctual.execution import ClaimOutcome, Delivery, Worker
from punctual.execution.keeper import LeaseKeeper
from punctual.execution.worker_service import WorkerService
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore


def _refused(operation: str) -> ClientError:
    return ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, operation)


class Brownout(MemoryQueues):
    """SQS refusing visibility changes and deletes (throttled) while ``refusing``; ``refuse_once``:
    the next single ChangeMessageVisibility only. Deletes one by one (no DeleteMessageBatch: a
    BatchedDeletes in front of it then makes no retry rounds, no sleeps)."""

    refusing = False
    refuse_once = False
    delete_batch = None  # type: ignore[assignment]

    def delete(self, queue_url: str, receipt: str) -> None:
        if self.refusing:
            raise _refused("DeleteMessage")
        with self._lock:
            self.delete_requests += 1
            self.queues[queue_url] = [s for s in self.queues.get(queue_url, []) if s.receipt != receipt]

    def change_visibility(self, queue_url: str, receipt: str, visibility_s: int) -> None:
        if self.refusing or self.refuse_once:
            self.refuse_once = False
            raise _refused("ChangeMessageVisibility")
        super().change_visibility(queue_url, receipt, visibility_s)

    def change_visibility_batch(
        self, queue_url: str, receipts: Sequence[str], visibility_s: Visibilities
    ) -> list[str]:
        if self.refusing:
            raise _refused("ChangeMessageVisibilityBatch")
        return super().change_visibility_batch(queue_url, receipts, visibility_s)


def _peer_takes(
    rig: Rig, peer: Worker, queue: str, taken: list[tuple[float, ClaimOutcome]], t0: datetime
) -> None:
    """The peer receives whatever is visible on ``queue`` and claims it (noted: seconds, outcome)."""
    for got in rig.queues.receive(queue, 10, 0, peer.config.message_visibility_s):
        delivery = Delivery(queue, got.receipt, got.receive_count, got.message_id)
        outcome = peer.claim(got.message, delivery).outcome
        taken.append(((rig.clock.now() - t0).total_seconds(), outcome))


def test_an_ecs_run_whose_message_cannot_be_deleted_when_let_go_is_stopped_before_the_message_is_back(
    t0: datetime,
) -> None:
    # Given an ECS task's run, its worker's deletes batched as the task's main() wires them
    # (BatchedDeletes: delete() only queues the receipt), and SQS refusing its renewals and deletes
    # from the claim on (a brownout)
    rig = Rig(MemoryStore(), ManualClock(t0))
    queues = Brownout(now=rig.clock.now)
    rig.queues = queues
    job = rig.add_job(timeout_seconds=3600, runtime="ecs")
    batched = BatchedDeletes(queues, start=False)
    a = rig.worker(lease_timers=True, queues=batched)
    peer = rig.worker(lease_timers=True, target=FakeTarget())
    rig.send(rig.message(job, t0), queue=LONG)
    [item] = queues.receive(LONG, 1, 0, a.config.message_visibility_s)
    keeper = LeaseKeeper(a)
    keeper.adopt(LONG, item.receipt, rig.clock.now())
    claim = a.claim(item.message, Delivery(LONG, item.receipt, item.receive_count, item.message_id))
    assert claim.claimed
    a.live.add(claim)
    queues.refusing = True
    taken: list[tuple[float, ClaimOutcome]] = []
    live_when_taken: list[bool] = []
    # When its keeper ticks (the delete batcher flushing after each step) and a peer receives
    # whatever is visible, every quarter second, for 20 s
    for quarter in range(1, 81):
        rig.clock.advance(0.25)
        if quarter % 4 == 0:
            keeper.step()
            batched.flush()
        before = len(taken)
        _peer_takes(rig, peer, LONG, taken, t0)
        live_when_taken += [claim.live] * (len(taken) - before)
    # Then the run could not let go of its message (the delete failed), so it was stopped before
    # the message came back: never two live runs of the slot (the lease docstring: "if the delete
    # fails, stopped"). Found: the batched delete never raises, the run is marked detached and goes
    # on, and the peer takes it over at 7 s while it runs.
    assert (ClaimOutcome.CLAIMED, True) not in list(zip([o for _, o in taken], live_when_taken, strict=True))
    assert claim.lost and claim.cancel.is_set()


def test_an_ecs_groups_next_message_whose_give_back_failed_is_never_taken_over_under_its_run(
    t0: datetime,
) -> None:
    # Given an ECS task that received two messages it runs one after the other (as for a queue
    # job's group), the second held (renewed) by its keeper while the first runs 19 s, and a peer
    # receiving whatever is visible
    rig = Rig(MemoryStore(), ManualClock(t0))
    queues = Brownout(now=rig.clock.now)
    rig.queues = queues
    first_job = rig.add_job("job-1", timeout_seconds=600)
    second_job = rig.add_job("job-2", timeout_seconds=600)
    peer = rig.worker(lease_timers=True, target=FakeTarget())
    taken: list[tuple[float, ClaimOutcome]] = []
    service: WorkerService | None = None

    def runs_for(seconds: int, then_refuse_once: bool) -> Callable[[SlotContext], TargetResult]:
        def run(ctx: SlotContext) -> TargetResult:
            assert service is not None
            for quarter in range(1, 4 * seconds + 1):
                rig.clock.advance(0.25)
                if quarter % 4 == 0:
                    service.keeper.step()
                _peer_takes(rig, peer, LONG, taken, t0)
            # SQS refuses the next single visibility change (a 5xx, a throttle): the give-back of
            # the group's next message (the keeper's renewals are batch requests)
            queues.refuse_once = then_refuse_once
            return TargetResult.ok()

        return run

    target = FakeTarget(runs_for(19, True), runs_for(12, False))
    worker = rig.worker(lease_timers=True, target=target)
    service = WorkerService(worker, [LONG], wait_s=0)
    rig.send(rig.message(first_job, t0), rig.message(second_job, t0), queue=LONG)
    items = queues.receive(LONG, 10, 0, worker.config.message_visibility_s)
    assert len(items) == 2
    service.keeper.hold(LONG, [items[1].receipt], rig.clock.now())  # as _start holds the group's later ones
    # When it runs them in order
    service._execute_in_order(LONG, items, rig.clock.now())
    # Then each ran once, there: the peer never claimed either (the second's message came back at
    # 22 s, its last renewal's end, under its live run: the give-back that failed was taken for a
    # fresh message lease, and the keeper's next renewal came at 24 s)
    assert [o for _, o in taken if o is ClaimOutcome.CLAIMED] == []
    assert sorted(target.calls_for("job-1") + target.calls_for("job-2")) == sorted(
        [(items[0].message.slot, 1), (items[1].message.slot, 1)]
    )


class _HungRenewals:
    """The keeper's beat threads, run in line, but a queue's renewal once ``hung`` never returns
    (a request stalled: a read timeout, retries): its key stays busy, as :class:`_Beats` keeps it."""

    def __init__(self) -> None:
        self.hung = False
        self.pending: dict[Hashable, Callable[[], object]] = {}

    def submit(self, key: Hashable, write: Callable[[], object]) -> threading.Event | None:
        if isinstance(key, tuple) and key and key[0] == "renew" and self.hung:
            self.pending.setdefault(key, write)
            return None
        write()
        done = threading.Event()
        done.set()
        return done

    def idle(self, timeout_s: float) -> bool:
        return True


def test_a_held_run_whose_renewal_stalls_lets_go_before_its_message_can_be_back(t0: datetime) -> None:
    # Given a Lambda batch's held run, and its keeper ticking once a second (a quarter of a second
    # after the batch's hold: a thread's ticks drift by each step's length), whose renewal request
    # stalls from the first (sent, never answered)
    rig = Rig(MemoryStore(), ManualClock(t0))
    job = rig.add_job(timeout_seconds=600)
    a = rig.worker()
    peer = rig.worker(target=FakeTarget())
    keeper, claim = rig.held_run(a, job, t0)
    beats = _HungRenewals()
    keeper._beats = beats  # type: ignore[assignment]
    beats.hung = True
    taken: list[tuple[float, ClaimOutcome]] = []
    live_when_taken: list[bool] = []
    # When the keeper ticks and a peer receives whatever is visible, every quarter second
    for quarter in range(1, 61):
        rig.clock.advance(0.25)
        if quarter % 4 == 1:  # (at 0.25 s, 1.25 s, ...)
            keeper.step()
        before = len(taken)
        _peer_takes(rig, peer, SHORT, taken, t0)
        live_when_taken += [claim.live] * (len(taken) - before)
    # Then the run was let go of (stopped) before its message could be back (the message lease, 7 s
    # after the hold): the keeper's check (_lapsing, now >= since + 6.5 s) looks at no later tick,
    # as _renew's does, so with ticks a second apart it comes at 7.25 s, after the message is back
    # and taken over under the live run
    assert claim.lost
    assert all(not live for live in live_when_taken), list(zip(taken, live_when_taken, strict=True))


def test_a_single_refused_renewal_of_a_run_whose_batch_hold_failed_is_tried_again_and_the_run_goes_on(
    t0: datetime,
) -> None:
    # Given a Lambda batch whose hold request failed (SQS throttled it: the message keeps the
    # queue's visibility, renewed by its run's heartbeats, Leases._hide), its run claimed
    rig = Rig(MemoryStore(), ManualClock(t0))
    queues = Brownout(now=rig.clock.now)
    rig.queues = queues
    job = rig.add_job(timeout_seconds=600)
    a = rig.worker(lease_s=12)
    rig.send(rig.message(job, t0))
    [received] = queues.receive(SHORT, 1, 0, 960)
    keeper = LeaseKeeper(a)
    queues.refusing = True
    keeper.hold(SHORT, [received.receipt], rig.clock.now())
    queues.refusing = False
    assert keeper.held == 1  # (held all the same: the keeper tries its renewal again each step)
    claim = a.claim(received.message, Delivery(SHORT, received.receipt, 1, received.message_id))
    a.live.add(claim)
    # When its keeper ticks for half a minute, SQS refusing one renewal only (the second, at 10 s)
    for second in range(1, 31):
        rig.clock.advance(1.0)
        queues.refuse_once = second == 10
        keeper.step()
        queues.refuse_once = False
        # Then its message never comes back
        assert queues.receive(SHORT, 1, 0, 960) == []
    # And the run goes on, as a held run's does after one refused renewal (9d4acabb): the refused
    # renewal had 2 s left to be tried again. Found: the retry waits for the next heartbeat (5 s),
    # so Leases._hide gives up at once and the run is stopped (its target then called again by the
    # takeover)
    assert claim.live
