"""The Lambda lane's leases of seconds, against moto's SQS and DynamoDB (issue 30, point 3 and 4).

The event source mapping receives a batch with the queue's visibility timeout, which AWS requires
to be at least the function's timeout; the worker then leases each message for seconds and
renews it while the batch holds it (punctual.execution.batch, punctual.execution.keeper). These
tests take what the mapping does (ReceiveMessage with the queue's timeout, DeleteMessage of what
the partial batch response does not name) and kill the worker in the ways a Lambda dies: mid-run,
with messages received but not started, in a FIFO group, and before its handler ran at all.

Time is real here (moto's visibility timeouts are), with the shortest lease Settings allows (5 s).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from factories import delete_succeeded, lambda_sqs_event
from factories import job as make_job
from punctual.delivery.notifications import EventPublisher, MemoryEventSink, Notifier
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.polling.resend import ResendWatch
from punctual.dispatch.queues import DispatchMessage, MessageKind, SqsQueues, message_for
from punctual.execution import Worker, WorkerConfig
from punctual.execution.batch import LambdaBatch
from punctual.execution.hold_gate import HoldGate
from punctual.models import ExecutionStatus, Job
from punctual.runtime.clock import SystemClock
from punctual.runtime.observability import RecordingMetrics
from punctual.store.dynamo import DynamoStore, table_definition
from punctual.timing.instants import format_instant_ms
from punctual.timing.timers import slot_key

TABLE = "punctual-lease-test"
REGION = "us-east-1"
LEASE_S = 5  # the shortest Settings allows; heartbeats come 2.5 s apart
QUEUE_VISIBILITY_S = 600  # what the mapping receives with (at least the function's timeout)


class HeldTarget:
    """A target whose first call of each listed job blocks until released (a run in flight)."""

    def __init__(self, hold: set[str]) -> None:
        self.hold = set(hold)
        self.calls: list[tuple[str, str, int, float]] = []  # job, slot, attempt, when
        self.started = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        with self._lock:
            self.calls.append((ctx.job_id, ctx.slot, ctx.attempt, time.monotonic()))
            held = ctx.job_id in self.hold
            self.hold.discard(ctx.job_id)
        if held:
            self.started.set()
            self.release.wait(60)
        return TargetResult.ok()

    def attempts(self, job_id: str) -> list[int]:
        return [attempt for job, _, attempt, _ in self.calls if job == job_id]


@dataclass
class Lane:
    sqs: Any
    store: DynamoStore
    url: str
    arn: str

    def worker(self, target: Any, metrics: RecordingMetrics | None = None, **config: Any) -> Worker:
        config = WorkerConfig(short_queue_urls=(self.url,), lease_s=LEASE_S, **config)
        return Worker(self.store, SqsQueues(self.sqs), target, SystemClock(), config, metrics=metrics)

    def receive(self, wait_s: int = 0) -> list[dict[str, Any]]:
        """What the event source mapping receives: up to ten, with the queue's visibility timeout."""
        reply = self.sqs.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=10,
            MessageSystemAttributeNames=["All"],
            WaitTimeSeconds=wait_s,
        )
        return list(reply.get("Messages", []))

    def receive_within(self, seconds: float) -> tuple[list[dict[str, Any]], float]:
        """Poll as the mapping does until something comes; what came and when (monotonic)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            got = self.receive(wait_s=1)
            if got:
                return got, time.monotonic()
        return [], time.monotonic()

    def event(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        return lambda_sqs_event(messages, self.arn, REGION)

    def invoke(self, batch: LambdaBatch, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """One invocation, and what the mapping does with its partial batch response."""
        event = self.event(messages)
        response = batch.handle(event, lambda: 900.0)
        delete_succeeded(self.sqs, self.url, event, response)
        return response

    def add_job(self, job_id: str, **overrides: Any) -> Job:
        created = make_job(job_id, now=datetime.now(UTC), **overrides)
        self.store.create_job(created, None, max_jobs=100)
        return created

    def send(self, *messages: DispatchMessage) -> None:
        SqsQueues(self.sqs).send(self.url, list(messages))


@pytest.fixture
def lane(aws: None) -> Iterator[Lane]:
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    dynamodb.create_table(**table_definition(TABLE))
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(
        QueueName="punctual-short-0.fifo",
        Attributes={"FifoQueue": "true", "VisibilityTimeout": str(QUEUE_VISIBILITY_S)},
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    yield Lane(sqs, DynamoStore(dynamodb, TABLE), url, arn)


def fire(job: Job, slot: datetime) -> DispatchMessage:
    return message_for(job, slot_key(slot), slot, 1, MessageKind.FIRE, slot)


def record_of(lane: Lane, job: Job, slot: datetime) -> Any:
    return lane.store.get_execution(job.tenant, job.id, slot_key(slot))


def test_a_run_whose_worker_dies_is_taken_over_within_a_lease(lane: Lane) -> None:
    # Given a slot whose run is in flight on worker A, and a batch mate that ran at once
    now = datetime.now(UTC).replace(microsecond=0)
    job, mate = lane.add_job("job-a"), lane.add_job("job-b")
    lane.send(fire(job, now), fire(mate, now))
    target = HeldTarget({job.id})
    batch_a = LambdaBatch(lane.worker(target))
    received = lane.receive()
    assert len(received) == 2
    runner = threading.Thread(target=batch_a.handle, args=(lane.event(received), lambda: 900.0), daemon=True)
    runner.start()
    assert target.started.wait(20)
    # The whole batch was leased on arrival: nothing is visible although the queue's timeout is 600 s
    assert lane.receive() == []
    # ... and the run outlives its first lease: A's heartbeats keep it (record and message)
    time.sleep(LEASE_S + 1)
    assert lane.receive() == []
    leased = record_of(lane, job, now)
    assert leased.status is ExecutionStatus.RUNNING and leased.lease_until > datetime.now(UTC)
    # When worker A dies (nothing renews its lease any more; its call is left hanging)
    batch_a.keeper.stop()
    died = time.monotonic()
    # Then the batch is back within a lease (the mate's message too: the mapping deletes a batch's
    # successes only when the invocation returns), and worker B takes the run over as attempt 2
    back, returned = lane.receive_within(LEASE_S + 5)
    assert sorted(m["MessageId"] for m in back) == sorted(m["MessageId"] for m in received)
    assert returned - died <= LEASE_S + 2
    target_b = HeldTarget(set())
    response = lane.invoke(LambdaBatch(lane.worker(target_b)), back)
    assert response == {"batchItemFailures": []}
    assert target_b.attempts(job.id) == [2]
    assert target_b.calls[0][3] - died <= LEASE_S + 3  # started again within 10 s of the death
    record = record_of(lane, job, now)
    assert (record.status, record.attempt) == (ExecutionStatus.SUCCEEDED, 2)
    # And A's late result, when its call returns, is fenced off: the slot keeps B's success
    target.release.set()
    runner.join(timeout=20)
    assert (record_of(lane, job, now).status, record_of(lane, job, now).attempt) == (
        ExecutionStatus.SUCCEEDED,
        2,
    )
    # And the mate ran once: its returned message was dropped by the claim
    assert target.attempts(mate.id) == [1] and target_b.attempts(mate.id) == []


def test_a_long_runs_started_event_goes_out_while_it_runs_not_only_with_its_batch(lane: Lane) -> None:
    # Given a batch held as the worker handler holds it (its events in as few calls as possible)
    now = datetime.now(UTC).replace(microsecond=0)
    job = lane.add_job("job-a")
    lane.send(fire(job, now))
    target = HeldTarget({job.id})
    sink = MemoryEventSink()
    config = WorkerConfig(short_queue_urls=(lane.url,), lease_s=LEASE_S)
    worker = Worker(
        lane.store,
        SqsQueues(lane.sqs),
        target,
        SystemClock(),
        config,
        notifier=Notifier(EventPublisher(sink)),
    )
    batch = LambdaBatch(worker)

    def handle() -> None:
        with worker.notifier.batched():
            batch.handle(lane.event(lane.receive()), lambda: 900.0)

    runner = threading.Thread(target=handle, daemon=True)
    runner.start()
    assert target.started.wait(20)
    # When its run outlives its first lease (the keeper renews the batch's messages)
    time.sleep(LEASE_S + 1)
    # Then its RUNNING event is out: a worker that dies now loses no event of the slot (QA: a
    # Lambda worker killed 5 s into a 20 s run left attempt 1 with no event at all; it went out
    # only with the batch's end, up to 14 minutes after the start)
    assert [(e.detail["status"], e.detail["attempt"]) for e in sink.events] == [("RUNNING", 1)]
    target.release.set()
    runner.join(timeout=20)
    assert [e.detail["status"] for e in sink.events] == ["RUNNING", "SUCCEEDED"]


def test_messages_received_but_not_started_return_within_a_lease_of_the_death(lane: Lane) -> None:
    # Given an overlap-queue job (one FIFO group) whose two slots a worker received in one batch
    now = datetime.now(UTC).replace(microsecond=0)
    job = lane.add_job("job-q", overlap="queue", timeout_seconds=120)
    first, second = now - timedelta(seconds=10), now
    lane.send(fire(job, first), fire(job, second))
    target = HeldTarget({job.id})
    batch = LambdaBatch(lane.worker(target))
    received = lane.receive()
    assert [m["Body"].count(slot_key(first)) for m in received] == [1, 0]
    runner = threading.Thread(target=batch.handle, args=(lane.event(received), lambda: 900.0), daemon=True)
    runner.start()
    assert target.started.wait(20)  # the first slot runs; the second waits behind it, unstarted
    # When the worker dies while the group's second message was held but not started
    batch.keeper.stop()
    died = time.monotonic()
    # Then the group is not held past a lease: its messages come back within it
    back, returned = lane.receive_within(LEASE_S + 5)
    assert back and returned - died <= LEASE_S + 2
    # And new workers finish both, in the job's order (moto hands a group's returned messages back
    # last first, unlike SQS: the claim's overlap turn keeps the order all the same): the first
    # taken over as attempt 2, the second run once after it
    target_b = HeldTarget(set())
    batch_b = LambdaBatch(lane.worker(target_b))
    deadline = time.monotonic() + 4 * LEASE_S
    while back and time.monotonic() < deadline:
        lane.invoke(batch_b, back)
        back, _ = lane.receive_within(LEASE_S + 2)
    assert [(s, a) for _, s, a, _ in target_b.calls] == [(slot_key(first), 2), (slot_key(second), 1)]
    for slot, attempt in ((first, 2), (second, 1)):
        record = record_of(lane, job, slot)
        assert (record.status, record.attempt) == (ExecutionStatus.SUCCEEDED, attempt)
    target.release.set()
    runner.join(timeout=20)


def test_a_batch_of_short_runs_is_leased_once_and_never_renewed(lane: Lane) -> None:
    # Given ten slots of ten jobs whose runs are short
    now = datetime.now(UTC).replace(microsecond=0)
    jobs = [lane.add_job(f"job-{i}") for i in range(10)]
    lane.send(*(fire(job, now) for job in jobs))
    metrics = RecordingMetrics()
    calls: list[str] = []
    sqs = lane.sqs
    original = sqs.change_message_visibility_batch

    def counted(**kwargs: Any) -> Any:
        calls.append(kwargs["QueueUrl"])
        return original(**kwargs)

    sqs.change_message_visibility_batch = counted
    batch = LambdaBatch(lane.worker(HeldTarget(set()), metrics))
    # When one invocation works them (its groups side by side)
    received = lane.receive()
    assert len(received) == 10
    assert lane.invoke(batch, received) == {"batchItemFailures": []}
    # Then the batch cost one visibility request (its lease on arrival) and no heartbeat at all
    assert calls == [lane.url]
    assert metrics.total("Heartbeats") == 0 and metrics.total("VisibilityRenewals") == 0
    assert all(record_of(lane, job, now).status is ExecutionStatus.SUCCEEDED for job in jobs)


def _checked_until_resent(watch: ResendWatch, ahead_s: float = 0.0) -> int:
    """Check as the poller's loop does (every 0.2 s, ``ahead_s`` on the clock) until something is
    re-sent, 10 s at most: the queue's count is read off the loop, and a watch whose reads just
    started holds its first unclaimed message until the count shows whether it waits
    (``resend_backlog.RESTART_S``). Returns how many the check that re-sent re-sent."""
    deadline = time.monotonic() + 10.0
    while (sent := watch.check(datetime.now(UTC) + timedelta(seconds=ahead_s))) == 0:
        if time.monotonic() > deadline:
            return 0
        time.sleep(0.2)
    return sent


def test_a_worker_dead_before_its_handler_is_covered_by_the_pollers_resend(lane: Lane) -> None:
    # Given a slot the poller sent, received by a worker that died before its handler ran (an init
    # failure): the message stays in flight for the queue's whole visibility timeout
    now = datetime.now(UTC).replace(microsecond=0)
    job = lane.add_job("job-init")
    metrics = RecordingMetrics()
    watch = ResendWatch(lane.store, SqsQueues(lane.sqs), [lane.url], metrics, after_s=1.0)
    sent = fire(job, now)
    lane.send(sent)
    watch.sent(lane.url, [sent], datetime.now(UTC))
    [stuck] = lane.receive()
    assert lane.receive() == []
    # When the poller checks it after a second and finds no claim
    time.sleep(1.1)
    assert _checked_until_resent(watch) == 1
    # Then a copy in a message group of its own is deliverable at once, and a worker runs it
    [copy] = lane.receive()
    assert DispatchMessage.from_body(copy["Body"]).resend == 1
    target = HeldTarget(set())
    lane.invoke(LambdaBatch(lane.worker(target)), [copy])
    assert target.attempts(job.id) == [1]
    # And a check later finds the slot claimed: nothing more is sent
    assert watch.check(datetime.now(UTC) + timedelta(seconds=10)) == 0
    # And when the stuck original finally comes back (the queue's timeout), the claim drops it
    lane.sqs.change_message_visibility(
        QueueUrl=lane.url, ReceiptHandle=stuck["ReceiptHandle"], VisibilityTimeout=0
    )
    [original] = lane.receive()
    assert lane.invoke(LambdaBatch(lane.worker(target)), [original]) == {"batchItemFailures": []}
    assert target.attempts(job.id) == [1]
    record = record_of(lane, job, now)
    assert (record.status, record.attempt) == (ExecutionStatus.SUCCEEDED, 1)
    assert metrics.total("UnclaimedResent") == 1


def test_the_resend_leaves_a_claimed_slot_alone(lane: Lane) -> None:
    # Given two slots sent: one a worker claimed, one nobody took yet
    now = datetime.now(UTC).replace(microsecond=0)
    taken, left = lane.add_job("job-taken"), lane.add_job("job-left")
    watch = ResendWatch(lane.store, SqsQueues(lane.sqs), [lane.url], RecordingMetrics(), after_s=1.0)
    messages = [fire(taken, now), fire(left, now)]
    lane.send(*messages)
    watch.sent(lane.url, messages, datetime.now(UTC))
    assert lane.worker(HeldTarget(set())).claim(messages[0]).claimed
    # When the poller checks them
    assert _checked_until_resent(watch, ahead_s=2.0) == 1
    # Then only the unclaimed one was sent again
    queued = [DispatchMessage.from_body(m["Body"]) for m in lane.receive()]
    assert [(m.job_id, m.resend) for m in queued if m.resend] == [("job-left", 1)]


def test_a_claimed_slot_whose_lease_lapsed_with_its_message_stuck_is_taken_over_by_the_resend(
    lane: Lane,
) -> None:
    # Given a slot a worker claimed and then died on (its record RUNNING, no heartbeat), whose
    # message came back and was received by a worker that died before its handler held it: the
    # message is in flight for the queue's whole visibility timeout, and the Lambda lane writes
    # no LEASE timer
    now = datetime.now(UTC).replace(microsecond=0)
    job, alive = lane.add_job("job-lost"), lane.add_job("job-alive")
    metrics = RecordingMetrics()
    watch = ResendWatch(lane.store, SqsQueues(lane.sqs), [lane.url], metrics, after_s=1.0)
    lost, running = fire(job, now), fire(alive, now)
    lane.send(lost, running)
    watch.sent(lane.url, [lost, running], datetime.now(UTC))
    stuck = lane.receive()
    assert len(stuck) == 2 and lane.receive() == []
    target = HeldTarget(set())
    dead = lane.worker(target)
    assert dead.claim(lost).claimed
    # ... beside a slot whose worker lives and renews its lease
    living = lane.worker(target)
    claim = living.claim(running)
    assert claim.claimed
    # When the poller checks them while the leases are live, nothing is sent
    assert watch.check(datetime.now(UTC) + timedelta(seconds=1.5)) == 0
    assert lane.receive() == []
    # When the first lease has lapsed (and the other was renewed)
    deadline = time.monotonic() + LEASE_S + 10
    while time.monotonic() < deadline:
        living.leases.heartbeat(claim, message=False)
        if record_of(lane, job, now).lease_until + timedelta(seconds=1.1) < datetime.now(UTC):
            break
        time.sleep(0.5)
    living.leases.heartbeat(claim, message=False)
    # Then the check sends a takeover of the lost slot's next attempt, in a group of its own
    assert watch.check(datetime.now(UTC)) == 1
    [copy] = lane.receive()
    sent = DispatchMessage.from_body(copy["Body"])
    assert (sent.job_id, sent.kind, sent.attempt) == (job.id, MessageKind.TAKEOVER, 2)
    # And a worker runs it once, as attempt 2
    lane.invoke(LambdaBatch(lane.worker(target)), [copy])
    assert target.attempts(job.id) == [2]
    record = record_of(lane, job, now)
    assert (record.status, record.attempt) == (ExecutionStatus.SUCCEEDED, 2)
    assert target.attempts(alive.id) == []  # the living run was never taken over
    assert metrics.total("LapsedLeasesTakenOver") == 1


# ---------------------------------------------------------------------------------------------
# The hold beside the claims (punctual.execution.hold_gate): a slot's claim and call do not wait
# for the batch's ChangeMessageVisibilityBatch, and a record's own visibility (a smoothed message
# sent back to come again at its instant) is set after the hold, never overwritten by it.


class SlowHold(SqsQueues):
    """SQS whose ChangeMessageVisibilityBatch (the batch's hold) waits for ``go``; every visibility
    change is logged in the order it reached SQS."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.go = threading.Event()
        self.order: list[tuple[str, int]] = []

    def change_visibility_batch(
        self, queue_url: str, receipts: Sequence[str], visibility_s: int
    ) -> list[str]:
        self.go.wait(60)
        self.order.append(("hold", visibility_s))
        return super().change_visibility_batch(queue_url, receipts, visibility_s)

    def change_visibility(self, queue_url: str, receipt: str, visibility_s: int) -> None:
        self.order.append(("own", visibility_s))
        super().change_visibility(queue_url, receipt, visibility_s)


def _gated_batch(lane: Lane, target: Any) -> tuple[LambdaBatch, SlowHold]:
    slow = SlowHold(lane.sqs)
    gate = HoldGate(slow)
    config = WorkerConfig(short_queue_urls=(lane.url,), lease_s=LEASE_S)
    return LambdaBatch(Worker(lane.store, gate, target, SystemClock(), config), gate=gate), slow


def _handle_in_thread(batch: LambdaBatch, event: dict[str, Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.update(batch.handle(event, lambda: 900.0)), daemon=True)
    thread.start()
    return thread, out


def test_a_slot_is_claimed_and_called_while_its_batch_hold_is_still_in_flight(lane: Lane) -> None:
    # Given a due slot, received by a worker whose hold request is slow to land
    now = datetime.now(UTC).replace(microsecond=0)
    job = lane.add_job("job-a")
    lane.send(fire(job, now))
    target = HeldTarget(set())
    batch, slow = _gated_batch(lane, target)
    runner, response = _handle_in_thread(batch, lane.event(lane.receive()))
    # When the batch is handled, then its target is called before the hold has been made
    deadline = time.monotonic() + 30
    while not target.calls and time.monotonic() < deadline:
        time.sleep(0.05)
    assert target.attempts(job.id) == [1]
    assert slow.order == []
    # (the finish is written after the call returns, in the handler's thread: waited for, not
    # assumed; a full run here once read the record still RUNNING)
    record = record_of(lane, job, now)
    while record.status is not ExecutionStatus.SUCCEEDED and time.monotonic() < deadline:
        time.sleep(0.05)
        record = record_of(lane, job, now)
    assert record.status is ExecutionStatus.SUCCEEDED
    assert slow.order == []  # and still before the hold landed
    # And the invocation ends only once the hold has landed (no change of its messages after it)
    assert runner.is_alive()
    slow.go.set()
    runner.join(timeout=30)
    assert response == {"batchItemFailures": []}
    assert slow.order == [("hold", LEASE_S)]
    assert batch.keeper.held == 0


def test_a_records_own_visibility_is_set_after_the_hold_not_overwritten_by_it(lane: Lane) -> None:
    # Given a smoothed slot whose turn is 30 s away (its claim sends it back to come again then),
    # received by a worker whose hold request is slow to land
    now = datetime.now(UTC).replace(microsecond=0)
    job = lane.add_job("job-s")
    held_until = now + timedelta(seconds=30)
    lane.send(replace(fire(job, now), not_before=format_instant_ms(held_until)))
    batch, slow = _gated_batch(lane, HeldTarget(set()))
    received = lane.receive()
    runner, response = _handle_in_thread(batch, lane.event(received))
    # When the hold lands (after the claim decided to send the message back)
    time.sleep(0.5)
    slow.go.set()
    runner.join(timeout=30)
    # Then SQS got the hold first and the record's own visibility last: the message comes back
    # for its turn (about 28 s), not after a lease
    assert [kind for kind, _ in slow.order] == ["hold", "own"], slow.order
    assert slow.order[0][1] == LEASE_S and slow.order[1][1] > LEASE_S
    assert response["batchItemFailures"] == [{"itemIdentifier": received[0]["MessageId"]}]
    assert batch.keeper.held == 0


def _two_regions_run_in_a(
    lane: Lane, job: Job, now: datetime, **attributes: str
) -> tuple[Lane, HeldTarget, LambdaBatch, threading.Thread]:
    """Two Regions over one table, each of which sent the slot to its own queue (every Region
    releases every slot; Region b's queue with ``attributes``), and Region a's worker running it
    (its call in flight): Region b's lane, a's target, batch and runner."""
    url_b = lane.sqs.create_queue(
        QueueName="punctual-short-b.fifo",
        Attributes={"FifoQueue": "true", "VisibilityTimeout": str(QUEUE_VISIBILITY_S), **attributes},
    )["QueueUrl"]
    arn_b = lane.sqs.get_queue_attributes(QueueUrl=url_b, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    region_b = replace(lane, url=url_b, arn=arn_b)
    lane.send(fire(job, now))
    region_b.send(fire(job, now))
    target_a = HeldTarget({job.id})
    batch_a = LambdaBatch(lane.worker(target_a))
    runner = threading.Thread(
        target=batch_a.handle, args=(lane.event(lane.receive()), lambda: 900.0), daemon=True
    )
    runner.start()
    assert target_a.started.wait(20)
    return region_b, target_a, batch_a, runner


def _taken_over_after_a_is_lost(
    region_b: Lane, batch_b: LambdaBatch, target_b: HeldTarget, batch_a: LambdaBatch
) -> float:
    """Region a lost with the run in flight; Region b's messages worked until its worker takes
    the run over (or 4 leases pass): when a was lost (monotonic)."""
    batch_a.keeper.stop()  # nothing renews a's lease any more; a's queue is gone with its Region
    died = time.monotonic()
    while not target_b.calls and time.monotonic() < died + 4 * LEASE_S:
        back, _ = region_b.receive_within(1)
        if back:
            region_b.invoke(batch_b, back)
    return died


def test_a_run_in_flight_in_a_lost_region_is_taken_over_by_another_regions_message(lane: Lane) -> None:
    # Given two Regions, each of which sent the slot to its own queue: Region a's worker runs it
    now = datetime.now(UTC).replace(microsecond=0)
    job = lane.add_job("job-r")
    region_b, target_a, batch_a, runner = _two_regions_run_in_a(lane, job, now)
    # When Region b's worker gets its own message meanwhile, it leaves the live run alone (the
    # message goes back until the lease ends), and then Region a is lost with the run in flight
    target_b = HeldTarget(set())
    batch_b = LambdaBatch(region_b.worker(target_b))
    response = region_b.invoke(batch_b, region_b.receive())
    assert len(response["batchItemFailures"]) == 1 and target_b.calls == []
    died = _taken_over_after_a_is_lost(region_b, batch_b, target_b, batch_a)
    # Then Region b's message comes back once the lease lapses, and its worker takes the run over
    # as attempt 2 within about a lease of the loss (not after the job's timeout)
    assert target_b.attempts(job.id) == [2]
    assert target_b.calls[0][3] - died <= LEASE_S + 3
    record = record_of(lane, job, now)
    assert (record.status, record.attempt) == (ExecutionStatus.SUCCEEDED, 2)
    target_a.release.set()
    runner.join(timeout=20)


def test_another_regions_message_waiting_on_a_long_run_is_sent_afresh_not_dead_lettered(lane: Lane) -> None:
    """QA24: the waiting message came back every lease while the run lasted, and past the queue's
    maxReceiveCount it was dead-lettered (a false alarm). Near the limit it is sent afresh and
    deleted, and the fresh copy still takes the run over when the run's Region is lost."""
    limit = 3  # the queue's maxReceiveCount here (10 deployed): sent afresh at its 2nd receive
    now = datetime.now(UTC).replace(microsecond=0)
    job = lane.add_job("job-w")
    dlq = lane.sqs.create_queue(QueueName="punctual-short-b-dlq.fifo", Attributes={"FifoQueue": "true"})
    dlq_arn = lane.sqs.get_queue_attributes(QueueUrl=dlq["QueueUrl"], AttributeNames=["QueueArn"])
    redrive = f'{{"deadLetterTargetArn":"{dlq_arn["Attributes"]["QueueArn"]}","maxReceiveCount":{limit}}}'
    region_b, target_a, batch_a, runner = _two_regions_run_in_a(lane, job, now, RedrivePolicy=redrive)
    # Region b's message meets the live run again and again (each lease, for 3 leases and more)
    target_b = HeldTarget(set())
    metrics = RecordingMetrics()
    batch_b = LambdaBatch(region_b.worker(target_b, metrics, max_receive_count=limit))
    seen: list[tuple[int, int]] = []  # (receive count, resend) of each receive
    until = time.monotonic() + 3.5 * LEASE_S
    while time.monotonic() < until:
        back, _ = region_b.receive_within(1)
        for m in back:
            body = DispatchMessage.from_body(m["Body"])
            seen.append((int(m["Attributes"]["ApproximateReceiveCount"]), body.resend))
        if back:
            region_b.invoke(batch_b, back)
    assert target_b.calls == [] and max(count for count, _ in seen) <= limit - 1
    assert metrics.total("WaitingMessagesResent") >= 1 and max(resend for _, resend in seen) > 1000
    # When Region a is lost, the message sent afresh takes the run over as attempt 2
    _taken_over_after_a_is_lost(region_b, batch_b, target_b, batch_a)
    assert target_b.attempts(job.id) == [2]
    record = record_of(lane, job, now)
    assert (record.status, record.attempt) == (ExecutionStatus.SUCCEEDED, 2)
    assert lane.sqs.receive_message(QueueUrl=dlq["QueueUrl"]).get("Messages", []) == []
    target_a.release.set()
    runner.join(timeout=20)


class FailsFirstThenHolds(HeldTarget):
    """``flaky``'s first attempt fails (retryable); ``slow``'s run is held until released."""

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        if ctx.job_id == "flaky" and ctx.attempt == 1:
            with self._lock:
                self.calls.append((ctx.job_id, ctx.slot, ctx.attempt, time.monotonic()))
            return TargetResult.retryable("HTTP 500")
        return super().invoke(target, payload, ctx)


def test_a_retry_is_not_held_back_by_its_batch_mates_long_run(lane: Lane) -> None:
    """The retry goes out in its slot's message group, which FIFO keeps closed while the failed
    attempt's message is in flight: a batch mate's long run held it to the batch's end, past its
    backoff (seconds late, on every retry). The failed attempt's message is deleted at once."""
    now = datetime.now(UTC).replace(microsecond=0)
    flaky = lane.add_job(
        "flaky", retry={"max_attempts": 2, "backoff": "fixed", "base_seconds": 1, "jitter": False}
    )
    slow = lane.add_job("slow")
    lane.send(fire(flaky, now), fire(slow, now))
    target = FailsFirstThenHolds({"slow"})
    batch = LambdaBatch(lane.worker(target))
    received = lane.receive()
    assert len(received) == 2
    event = lane.event(received)
    thread, _ = _handle_in_thread(batch, event)
    try:
        assert target.started.wait(20)  # slow's run is in flight
        deadline = time.monotonic() + 20
        # (the batch runs its messages side by side: flaky's record may not exist yet)
        while (record := record_of(lane, flaky, now)) is None or (
            record.status is not ExecutionStatus.RETRY_WAIT
        ):
            assert time.monotonic() < deadline, "flaky's first attempt never failed"
            time.sleep(0.05)
        # When the retry is sent (the poller releases its timer), while slow still runs
        lane.send(message_for(flaky, slot_key(now), now, 2, MessageKind.RETRY, datetime.now(UTC)))
        got, _ = lane.receive_within(5)
        # Then it is received at once: the group is not held by attempt 1's message
        assert [DispatchMessage.from_body(m["Body"]).attempt for m in got] == [2]
    finally:
        target.release.set()
        thread.join(30)


def test_a_queue_jobs_next_slot_is_not_held_back_by_another_tenants_long_run(lane: Lane) -> None:
    """An overlap ``queue`` job's slots share one message group (its job's), which FIFO keeps
    closed while one of its messages is in flight: its ended slot's message held to the batch's end
    kept the job's next slot (and its turn hand-over) from every worker for as long as a batch
    mate's run lasted, another tenant's slow target making it minutes late. An ended run of an
    ordered job has its message deleted at once."""
    now = datetime.now(UTC).replace(microsecond=0)
    ordered = lane.add_job("orders", tenant="tenant-b", overlap="queue")
    slow = lane.add_job("slow", tenant="tenant-a")
    lane.send(fire(ordered, now), fire(slow, now))
    target = HeldTarget({"slow"})
    batch = LambdaBatch(lane.worker(target))
    received = lane.receive()
    assert len(received) == 2
    thread, _ = _handle_in_thread(batch, lane.event(received))
    try:
        assert target.started.wait(20)  # tenant A's run is in flight
        deadline = time.monotonic() + 20
        while (record := record_of(lane, ordered, now)) is None or (
            record.status is not ExecutionStatus.SUCCEEDED
        ):
            assert time.monotonic() < deadline, "tenant B's slot never ended"
            time.sleep(0.05)
        # When tenant B's next slot is released, while tenant A's run still lasts
        after = now + timedelta(minutes=1)
        lane.send(fire(ordered, after))
        got, _ = lane.receive_within(5)
        # Then it is received at once: its group is not held by the ended slot's message
        assert [DispatchMessage.from_body(m["Body"]).slot for m in got] == [slot_key(after)]
    finally:
        target.release.set()
        thread.join(30)
