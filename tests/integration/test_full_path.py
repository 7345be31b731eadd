"""The whole path on moto: register, dispatch, claim, run, fail twice, succeed on the third attempt.

Every part is the real one (JobService, DynamoDB store, the Poller, SQS FIFO,
the worker core) except the target, which answers 503, 503, then 200. Time is a manual clock,
so each step happens at the instant the design says it should.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import boto3

from execution_harness import FakeTarget
from factories import spec
from punctual.delivery.targets.base import TargetResult
from punctual.dispatch.polling import Poller, PollerConfig
from punctual.dispatch.queues import DispatchMessage, MessageKind, SqsQueues
from punctual.execution import Delivery, MemoryFailureSink, Worker, WorkerConfig
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.store.dynamo import DynamoStore
from punctual.timing.timers import Lane, Timer, TimerKind, TimerLayout, minutes_between, slot_key
from punctual.usecases.jobs import JobService, QueueRouting

LAYOUT = TimerLayout(shard_count=4, near_shard_count=2, far_threshold_s=180)


def test_register_dispatch_fail_twice_succeed_on_the_third_attempt(dynamo_client, t0: datetime) -> None:  # type: ignore[no-untyped-def]
    # --- the system: one table, one short FIFO queue, a clock we move ourselves
    clock = ManualClock(t0)
    store = DynamoStore(dynamo_client, "punctual-test")
    sqs = boto3.client("sqs", region_name="us-east-1")
    queue_url = sqs.create_queue(QueueName="short.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    queues = SqsQueues(sqs)
    jobs = JobService(store, queues, clock, LAYOUT, QueueRouting((queue_url,), ()))
    poller = Poller(store, queues, clock, PollerConfig(layout=LAYOUT, short_queue_urls=(queue_url,)))
    target = FakeTarget(
        TargetResult.retryable("HTTP 503 Service Unavailable"),
        TargetResult.retryable("HTTP 503 Service Unavailable"),
        TargetResult.ok("HTTP 200"),
    )
    failures = MemoryFailureSink()
    worker = Worker(
        store,
        queues,
        target,
        clock,
        WorkerConfig(layout=LAYOUT, short_queue_urls=(queue_url,)),
        metrics=RecordingMetrics(),
        failures=failures,
    )
    released: set[tuple[str, str]] = set()

    def poll_at(instant: datetime) -> list[Timer]:
        """Move the clock to ``instant`` and release every timer due by then, as a poller would."""
        clock.set(instant)
        due = [t for t in timers_due_by(store, instant) if (t.pk, t.sk) not in released]
        poller.release(due)
        released.update((t.pk, t.sk) for t in due)
        return due

    def work() -> list[tuple[int, str]]:
        """One worker pass over the queue: claim, run and finish what is there; delete on ack."""
        handled = []
        for received in queues.receive(queue_url, 10, 0, 900):
            result = worker.process(
                received.message, Delivery(queue_url, received.receipt, received.receive_count)
            )
            if result.ack:
                queues.delete(queue_url, received.receipt)
            handled.append((received.message.attempt, result.outcome))
        return handled

    # Given a job registered at 10:00 to run every hour from 11:00, retrying 30 s then 60 s apart
    job, _ = jobs.register(
        "default",
        spec(
            "rate(1 hour)",
            start_at=(t0 + timedelta(hours=1)).isoformat(),
            retry={"max_attempts": 3, "backoff": "linear", "base_seconds": 30, "jitter": False},
        ),
        job_id="nightly-report",
    )
    slot = t0 + timedelta(hours=1)
    [first_timer] = timers_due_by(store, slot)
    assert (first_timer.kind, first_timer.slot, first_timer.lane) == (
        TimerKind.FIRE,
        slot_key(slot),
        Lane.FAR,
    )

    # When the poller reaches 11:00, it releases the slot and writes the next one (12:00)
    assert poll_at(slot) == [first_timer]
    [next_timer] = timers_due_by(store, slot + timedelta(hours=1))
    assert (next_timer.kind, next_timer.slot) == (TimerKind.FIRE, slot_key(slot + timedelta(hours=1)))
    # ... and a worker claims it and runs the target: 503, so attempt 2 is due 30 s later
    assert work() == [(1, "RETRY_WAIT")]
    assert store.get_execution("default", job.id, slot_key(slot)).status is ExecutionStatus.RETRY_WAIT  # type: ignore[union-attr]

    # When the poller reaches the retry timer at 11:00:30, attempt 2 runs: 503 again, next at +60 s
    [retry] = poll_at(slot + timedelta(seconds=30))
    assert (retry.kind, retry.attempt, retry.lane) == (TimerKind.RETRY, 2, Lane.NEAR)
    assert work() == [(2, "RETRY_WAIT")]

    # When the poller reaches 11:01:30, attempt 3 runs and succeeds (a second later here: its
    # tenant's retry rate put attempt 2 on the first instant of its grid, a few ms after 11:00:30)
    [retry] = poll_at(slot + timedelta(seconds=91))
    assert (retry.kind, retry.attempt) == (TimerKind.RETRY, 3)
    assert work() == [(3, "SUCCEEDED")]

    # Then the target was called three times with the same idempotency key, attempts numbered
    assert [(c.attempt, c.idempotency_key) for c in target.calls] == [
        (n, f"nightly-report:{slot_key(slot)}") for n in (1, 2, 3)
    ]
    # ... the history holds one execution for the slot, SUCCEEDED at attempt 3, with every attempt
    [record] = store.list_executions("default", job.id, limit=10).items
    assert (record.slot, record.status, record.attempt, record.result) == (
        slot_key(slot),
        ExecutionStatus.SUCCEEDED,
        3,
        "HTTP 200",
    )
    assert [(a.attempt, a.status.value, a.error) for a in record.attempts] == [
        (1, "FAILED", "HTTP 503 Service Unavailable"),
        (2, "FAILED", "HTTP 503 Service Unavailable"),
        (3, "SUCCEEDED", None),
    ]
    # ... nothing went to the failed-executions queue, the queue is empty, and the chain goes on at 12:00
    assert failures.bodies == []
    assert work() == []
    assert poll_at(slot + timedelta(hours=1)) == [next_timer]
    [message] = peek(queues, queue_url)
    assert (message.slot, message.attempt, message.kind) == (
        slot_key(slot + timedelta(hours=1)),
        1,
        MessageKind.FIRE,
    )


def timers_due_by(store: DynamoStore, instant: datetime) -> list[Timer]:
    """The timer rows of ``instant``'s minute and the one before, due by then (what a poller reads)."""
    found: list[Timer] = []
    for minute in minutes_between(instant - timedelta(minutes=1), instant):
        for lane, count in ((Lane.FAR, LAYOUT.shard_count), (Lane.NEAR, LAYOUT.near_shard_count)):
            for shard in range(count):
                found.extend(store.query_timers(lane, minute, shard))
    return sorted((t for t in found if t.due <= instant), key=lambda t: (t.due_ms, t.sk))


def peek(queues: SqsQueues, queue_url: str) -> list[DispatchMessage]:
    """The messages waiting in the queue (received with visibility 0, so they stay)."""
    return [r.message for r in queues.receive(queue_url, 10, 0, 0)]
