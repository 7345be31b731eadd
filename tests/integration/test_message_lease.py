"""The message lease (issue 30, point 3): every message a worker holds, started or not, is back
within the message lease (7 s) of its worker's death, and a run's own message back is the run's
takeover, whatever its record's lease (12 s) and the workers' clocks say.

Against moto's SQS and DynamoDB in virtual time: moto's SQS reads the test's ManualClock (its
visibility timeouts are the clock's), and the Lambda lane's lease keeper is stepped by the run
itself, a virtual second at a time, as its thread would step it. A worker dies as a process does:
an exception nothing catches, raised from inside its target's call (nothing renews anything after).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from factories import delete_succeeded, lambda_sqs_event
from factories import job as make_job
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.queues import DispatchMessage, MessageKind, SqsQueues, message_for
from punctual.execution import Worker, WorkerConfig
from punctual.execution.batch import LambdaBatch
from punctual.execution.keeper import LeaseKeeper
from punctual.models import ExecutionStatus, Job
from punctual.runtime.clock import Clock, ManualClock, OffsetClock
from punctual.store.dynamo import DynamoStore, table_definition
from punctual.timing.timers import slot_key

TABLE = "punctual-message-lease-test"
REGION = "us-east-1"
LEASE_S = 12  # the record's lease (the default)
MESSAGE_LEASE_S = 7  # a held message's (the default)
POLL_S = 0.25  # how often the event source mapping looks, virtual seconds


class _Died(BaseException):
    """The worker's process died (nothing catches it)."""


class SteppedKeeper(LeaseKeeper):
    """The lease keeper without its thread: stepped by the run, once a virtual second."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(worker, tick_s=60.0)  # a step waits for its writes up to this (real s)

    def start(self) -> LeaseKeeper:
        return self


class Runs:
    """A target whose listed (job, attempt) runs last ``seconds`` virtual seconds, the keeper stepped
    each second, and then die (``dies``) or succeed; any other run succeeds at once."""

    def __init__(self, clock: ManualClock, runs: dict[tuple[str, int], tuple[float, bool]]) -> None:
        self.clock = clock
        self.runs = runs
        self.keeper: LeaseKeeper | None = None
        self.calls: list[tuple[str, str, int, datetime]] = []

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        self.calls.append((ctx.job_id, ctx.slot, ctx.attempt, self.clock.now()))
        seconds, dies = self.runs.get((ctx.job_id, ctx.attempt), (0.0, False))
        for _ in range(int(seconds)):
            self.clock.advance(1.0)
            if self.keeper is not None:
                self.keeper.step()
        if dies:
            raise _Died
        return TargetResult.ok()


@dataclass
class Lane:
    sqs: Any
    store: DynamoStore
    url: str
    arn: str
    clock: ManualClock
    visibility_requests: list[list[int]]

    def batch(self, target: Runs, clock: Clock | None = None) -> LambdaBatch:
        config = WorkerConfig(short_queue_urls=(self.url,), lease_s=LEASE_S, message_lease_s=MESSAGE_LEASE_S)
        worker = Worker(self.store, SqsQueues(self.sqs), target, clock or self.clock, config)
        keeper = SteppedKeeper(worker)
        target.keeper = keeper
        return LambdaBatch(worker, keeper)

    def receive(self) -> list[dict[str, Any]]:
        """What the event source mapping receives: up to ten, with the queue's visibility timeout."""
        reply = self.sqs.receive_message(
            QueueUrl=self.url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
        )
        return list(reply.get("Messages", []))

    def event(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        return lambda_sqs_event(messages, self.arn, REGION)

    def invoke(self, batch: LambdaBatch, messages: list[dict[str, Any]]) -> set[str]:
        """One invocation, and the mapping's deletes of what its partial batch response does not name;
        the ids it named."""
        event = self.event(messages)
        return delete_succeeded(self.sqs, self.url, event, batch.handle(event, lambda: 900.0))

    def dies(self, batch: LambdaBatch, messages: list[dict[str, Any]]) -> datetime:
        """Worker A's invocation, to its death; when it died."""
        with pytest.raises(_Died):
            batch.handle(self.event(messages), lambda: 900.0)
        return self.clock.now()

    def add_job(self, job_id: str, **overrides: Any) -> Job:
        created = make_job(job_id, now=self.clock.now(), **overrides)
        self.store.create_job(created, None, max_jobs=100)
        return created

    def send(self, *messages: DispatchMessage) -> None:
        SqsQueues(self.sqs).send(self.url, list(messages))

    def record(self, job: Job, slot: datetime) -> Any:
        return self.store.get_execution(job.tenant, job.id, slot_key(slot))


@pytest.fixture
def lane(aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lane]:
    import moto.sqs.models as sqs_models

    clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
    # moto's SQS keeps its visibility timeouts by the test's clock
    monkeypatch.setattr(sqs_models, "unix_time", lambda *_: clock.now().timestamp())
    monkeypatch.setattr(sqs_models, "unix_time_millis", lambda *_: clock.now().timestamp() * 1000.0)
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    dynamodb.create_table(**table_definition(TABLE))
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(
        QueueName="punctual-short-0.fifo", Attributes={"FifoQueue": "true", "VisibilityTimeout": "600"}
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    requests: list[list[int]] = []
    original = sqs.change_message_visibility_batch

    def counted(**kwargs: Any) -> Any:
        requests.append([entry["VisibilityTimeout"] for entry in kwargs["Entries"]])
        return original(**kwargs)

    sqs.change_message_visibility_batch = counted
    yield Lane(sqs, DynamoStore(dynamodb, TABLE), url, arn, clock, requests)


def fire(job: Job, slot: datetime) -> DispatchMessage:
    return message_for(job, slot_key(slot), slot, 1, MessageKind.FIRE, slot)


def succeeded(record: Any) -> bool:
    return record is not None and record.status is ExecutionStatus.SUCCEEDED


def slot_of(message: dict[str, Any]) -> str:
    return str(DispatchMessage.from_body(message["Body"]).slot)


def run_b(
    lane: Lane, batch: LambdaBatch, died: datetime, done: Any
) -> dict[str, list[tuple[datetime, bool]]]:
    """Worker B: the mapping's receives every :data:`POLL_S` from the death until ``done()`` (a
    minute at most); each message's returns, by slot: when, and whether B's invocation returned it
    (a batch item failure) rather than ending it."""
    back: dict[str, list[tuple[datetime, bool]]] = {}
    while lane.clock.now() < died + timedelta(seconds=60) and not done():
        lane.clock.advance(POLL_S)
        messages = lane.receive()
        if messages:
            failed = lane.invoke(batch, messages)
            for message in messages:
                back.setdefault(slot_of(message), []).append(
                    (lane.clock.now(), message["MessageId"] in failed)
                )
    return back


def test_a_dead_workers_run_is_taken_over_by_its_message_within_the_message_lease_its_batch_renewed_in_one_request(
    lane: Lane,
) -> None:
    # Given a queue-overlap job (one FIFO group) whose two slots worker A received in one batch: the
    # first runs, the second waits behind it, unstarted
    now = lane.clock.now()
    job = lane.add_job("job-q", overlap="queue", timeout_seconds=120)
    first, second = now - timedelta(seconds=10), now
    lane.send(fire(job, first), fire(job, second))
    received = lane.receive()
    assert [slot_of(m) for m in received] == [slot_key(first), slot_key(second)]
    target_a = Runs(lane.clock, {(job.id, 1): (6.0, True)})
    # When A dies 6 s into the first run, after its lease keeper's first renewal (4 s)
    died = lane.dies(lane.batch(target_a), received)
    # Then every step renewed the batch in one request, each message for the message lease (the
    # hold, then at 4 s), and the record's lease was beaten once (5 s: lease_s less the skew and 2 s)
    assert lane.visibility_requests == [[MESSAGE_LEASE_S, MESSAGE_LEASE_S]] * 2
    running = lane.record(job, first)
    assert running.status is ExecutionStatus.RUNNING
    assert running.lease_until == died + timedelta(seconds=LEASE_S - 1)
    # And the run's message is back at the message lease of its last renewal (the group's second
    # with it: FIFO returns a group's messages behind its first), its record's lease still live, and
    # worker B takes the run over at once as attempt 2, then runs the second once
    target_b = Runs(lane.clock, {})
    back = run_b(lane, lane.batch(target_b), died, lambda: succeeded(lane.record(job, second)))
    renewed = died - timedelta(seconds=2)
    assert (  # (within the mapping's polls: the one it came back at, and the next)
        renewed + timedelta(seconds=MESSAGE_LEASE_S)
        < back[slot_key(first)][0][0]
        <= renewed + timedelta(seconds=MESSAGE_LEASE_S + 2 * POLL_S)
    )
    assert back[slot_key(first)][0][0] < running.lease_until
    assert [(s, a) for _, s, a, _ in target_b.calls] == [(slot_key(first), 2), (slot_key(second), 1)]
    assert target_b.calls[0][3] - died <= timedelta(seconds=MESSAGE_LEASE_S)
    for slot, attempt in ((first, 2), (second, 1)):
        record = lane.record(job, slot)
        assert (record.status, record.attempt) == (ExecutionStatus.SUCCEEDED, attempt)
    assert [(s, a) for _, s, a, _ in target_a.calls] == [(slot_key(first), 1)]


def test_messages_a_worker_received_and_died_before_starting_are_back_within_the_message_lease(
    lane: Lane, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two slots of two jobs (two FIFO groups) that worker A received in one batch and held
    now = lane.clock.now()
    jobs = [lane.add_job("job-a"), lane.add_job("job-b")]
    lane.send(*(fire(job, now) for job in jobs))
    received = lane.receive()
    assert len(received) == 2
    target_a = Runs(lane.clock, {})
    batch_a = lane.batch(target_a)

    def dies(*_: Any) -> Any:
        raise _Died

    # When A dies before it started either (its process dies in their claims)
    monkeypatch.setattr(batch_a.worker, "process_sqs_record", dies)
    died = lane.dies(batch_a, received)
    assert lane.visibility_requests == [[MESSAGE_LEASE_S, MESSAGE_LEASE_S]]  # the hold
    # Then both are back within the message lease of the death, and worker B runs each once
    target_b = Runs(lane.clock, {})
    back = run_b(lane, lane.batch(target_b), died, lambda: len(target_b.calls) == 2)
    for slot_back in back.values():
        assert died + timedelta(seconds=MESSAGE_LEASE_S) < slot_back[0][0]
        assert slot_back[0][0] <= died + timedelta(seconds=MESSAGE_LEASE_S + POLL_S)
    assert sorted((j, a) for j, _, a, _ in target_b.calls) == [("job-a", 1), ("job-b", 1)]
    assert target_a.calls == []
    for job in jobs:
        record = lane.record(job, now)
        assert (record.status, record.attempt) == (ExecutionStatus.SUCCEEDED, 1)


def test_a_runs_message_back_while_its_record_lease_is_live_takes_it_over_at_once_and_runs_once(
    lane: Lane,
) -> None:
    # Given a slot worker A claimed and started, its message held for the message lease
    now = lane.clock.now()
    job = lane.add_job("job-a")
    lane.send(fire(job, now))
    target_a = Runs(lane.clock, {(job.id, 1): (0.0, True)})
    # When A dies at once, before its lease keeper renewed anything (the record's lease, 12 s,
    # outlasts the message's, 7 s)
    died = lane.dies(lane.batch(target_a), lane.receive())
    assert lane.visibility_requests == [[MESSAGE_LEASE_S]]
    # Then the message is back at the message lease, and worker B takes the run over at once,
    # under the record's live lease (the message is the run's: its owner names its receive)
    target_b = Runs(lane.clock, {})
    batch_b = lane.batch(target_b)
    back = run_b(lane, batch_b, died, lambda: bool(target_b.calls))
    returns = back[slot_key(now)]
    assert [returned for _, returned in returns] == [False]
    assert target_b.calls[0][3] <= died + timedelta(seconds=MESSAGE_LEASE_S + POLL_S)
    assert target_b.calls[0][3] < died + timedelta(seconds=LEASE_S)
    assert [a for _, _, a, _ in target_b.calls] == [2]
    # ... and nothing of the slot comes back after (a minute on)
    assert run_b(lane, batch_b, lane.clock.now(), lambda: False) == {}
    assert [a for _, _, a, _ in target_b.calls] == [2] and [a for _, _, a, _ in target_a.calls] == [1]
    record = lane.record(job, now)
    assert (record.status, record.attempt) == (ExecutionStatus.SUCCEEDED, 2)


class DiesAfterReceive(SqsQueues):
    """SQS for an ECS or burst task (the worker service) that dies as its receive returns."""

    def receive(self, queue_url: str, max_messages: int, wait_s: int, visibility_s: int) -> Any:
        super().receive(queue_url, max_messages, wait_s, visibility_s)
        raise _Died


def test_an_ecs_or_burst_task_that_dies_after_its_receive_gives_its_messages_back_within_the_message_lease(
    lane: Lane, monkeypatch: pytest.MonkeyPatch
) -> None:
    from punctual.execution.worker_service import WorkerService

    # Given two slots on a queue and a worker service (the ECS lane's task; a burst task is the same
    # service on the short queues)
    now = lane.clock.now()
    jobs = [lane.add_job("job-a"), lane.add_job("job-b")]
    lane.send(*(fire(job, now) for job in jobs))
    config = WorkerConfig(
        short_queue_urls=(lane.url,), lease_s=LEASE_S, message_lease_s=MESSAGE_LEASE_S, lease_timers=True
    )
    target = Runs(lane.clock, {})
    service = WorkerService(
        Worker(lane.store, DiesAfterReceive(lane.sqs), target, lane.clock, config), [lane.url], wait_s=0
    )
    monkeypatch.setattr(service, "_heartbeats", lambda: None)  # (no thread left behind)
    # When the task dies as its receive returns, before it started either
    with pytest.raises(_Died):
        service.run()
    died = lane.clock.now()
    # Then both are back within the message lease, and another worker runs each once
    target_b = Runs(lane.clock, {})
    back = run_b(lane, lane.batch(target_b), died, lambda: len(target_b.calls) == 2)
    assert sorted(back) == [slot_key(now)] and len(back[slot_key(now)]) == 2
    for when, returned in back[slot_key(now)]:
        assert (
            died + timedelta(seconds=MESSAGE_LEASE_S)
            < when
            <= died + timedelta(seconds=MESSAGE_LEASE_S + POLL_S)
        )
        assert not returned
    assert sorted(j for j, _, _, _ in target_b.calls) == ["job-a", "job-b"] and target.calls == []


class LatestReceipts:
    """An SQS client that keeps receipts as AWS does, where moto takes any a message ever had: only a
    message's latest receipt changes its visibility (an older one is ReceiptHandleIsInvalid), and a
    delete with an older one succeeds but deletes nothing."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._latest: dict[str, str] = {}  # message id -> its latest receipt
        self._message_of: dict[str, str] = {}  # receipt -> message id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def _stale(self, receipt: str) -> bool:
        return self._latest.get(self._message_of.get(receipt, ""), receipt) != receipt

    def receive_message(self, **kwargs: Any) -> Any:
        reply = self._client.receive_message(**kwargs)
        for message in reply.get("Messages", []):
            self._latest[message["MessageId"]] = message["ReceiptHandle"]
            self._message_of[message["ReceiptHandle"]] = message["MessageId"]
        return reply

    def change_message_visibility(self, **kwargs: Any) -> Any:
        if self._stale(kwargs["ReceiptHandle"]):
            error = {"Error": {"Code": "ReceiptHandleIsInvalid", "Message": "stale receipt"}}
            raise ClientError(error, "ChangeMessageVisibility")  # type: ignore[arg-type]
        return self._client.change_message_visibility(**kwargs)

    def change_message_visibility_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> Any:
        fresh = [e for e in Entries if not self._stale(e["ReceiptHandle"])]
        reply = (
            self._client.change_message_visibility_batch(QueueUrl=QueueUrl, Entries=fresh) if fresh else {}
        )
        stale = [
            {"Id": e["Id"], "SenderFault": True, "Code": "ReceiptHandleIsInvalid", "Message": "stale receipt"}
            for e in Entries
            if self._stale(e["ReceiptHandle"])
        ]
        return {"Successful": reply.get("Successful", []), "Failed": [*reply.get("Failed", []), *stale]}

    def delete_message(self, **kwargs: Any) -> Any:
        if self._stale(kwargs["ReceiptHandle"]):
            return {}
        return self._client.delete_message(**kwargs)


class Stalls:
    """Worker A's run: its lease keeper stalls (no step) ``stall_s`` virtual seconds while worker B
    works what the mapping receives each :data:`POLL_S`; then the keeper steps each second until the
    run ends, ``run_s`` in all."""

    def __init__(self, clock: ManualClock, stall_s: float, run_s: float, meanwhile: Any) -> None:
        self.clock = clock
        self.stall_s = stall_s
        self.run_s = run_s
        self.meanwhile = meanwhile
        self.keeper: LeaseKeeper | None = None
        self.calls: list[tuple[str, str, int, datetime]] = []

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        started = self.clock.now()
        self.calls.append((ctx.job_id, ctx.slot, ctx.attempt, started))
        while self.clock.now() < started + timedelta(seconds=self.stall_s):
            self.clock.advance(POLL_S)
            self.meanwhile()
        while self.clock.now() < started + timedelta(seconds=self.run_s):
            self.clock.advance(1.0)
            assert self.keeper is not None
            self.keeper.step()
        return TargetResult.ok()


@pytest.mark.parametrize("b_ahead_s", [-5.0, 0.0, 5.0])
@pytest.mark.parametrize("stall_s", [3.0, 8.5])
def test_a_stalled_live_worker_is_taken_over_only_once_its_message_is_back_whatever_the_clocks(
    lane: Lane, stall_s: float, b_ahead_s: float
) -> None:
    """A live worker whose lease keeper stalls in its run's call (a frozen process): stalled less
    than its first renewal (4 s), nobody takes it over, whatever worker B's clock (5 s behind, in
    step, or ahead); stalled past its message lease (7 s), the message is back and B takes it over
    as its next attempt, whatever its clock, while A is still in its call: the target sees attempt 2's higher fencing token
    (``<job_id>:<slot>:<attempt>``), A's run lets go of its lease as it resumes, and the record
    keeps attempt 2's one result (QA30 review: 15199ed6's case only held in step)."""
    # Given SQS's receipts as AWS keeps them, and worker B beside worker A, B's clock b_ahead_s ahead
    lane.sqs = LatestReceipts(lane.sqs)
    now = lane.clock.now()
    job = lane.add_job("job-a")
    lane.send(fire(job, now))
    target_b = Runs(lane.clock, {})
    batch_b = lane.batch(target_b, clock=OffsetClock(lane.clock, b_ahead_s))
    returned: list[datetime] = []
    ended: list[datetime] = []

    def b_polls() -> None:
        messages = lane.receive()
        if messages:
            failed = lane.invoke(batch_b, messages)
            (returned if messages[0]["MessageId"] in failed else ended).append(lane.clock.now())

    # When A's run (12 s) has its lease keeper stalled for its first stall_s seconds, B polling
    target_a = Stalls(lane.clock, stall_s=stall_s, run_s=12.0, meanwhile=b_polls)
    batch_a = lane.batch(target_a)  # (sets target_a.keeper)
    lane.invoke(batch_a, lane.receive())
    run_b(lane, batch_b, lane.clock.now(), lambda: False)
    record = lane.record(job, now)
    assert [a for _, _, a, _ in target_a.calls] == [1]
    assert lane.receive() == [] and returned == []
    if stall_s < 4:
        # Then (renewed in time) the message never came back, and A's run was the only one
        assert target_b.calls == []
        assert (record.status, record.attempt) == (ExecutionStatus.SUCCEEDED, 1)
    else:
        # Then B took the run over as attempt 2 as the message came back, while A was still calling
        # the target: the target saw attempt 1, then attempt 2 (a higher fencing token), and the
        # record keeps attempt 2's one result (A's is fenced)
        assert [a for _, _, a, _ in target_b.calls] == [2]
        [(_, _, _, b_called)] = target_b.calls
        assert (
            now + timedelta(seconds=MESSAGE_LEASE_S)
            <= b_called
            <= now + timedelta(seconds=MESSAGE_LEASE_S + POLL_S)
        )
        assert (record.status, record.attempt) == (ExecutionStatus.SUCCEEDED, 2)
