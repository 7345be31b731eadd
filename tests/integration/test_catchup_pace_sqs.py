"""The catch-up pace's gauge on SQS (moto): the short lane's waiting messages, as
``ApproximateNumberOfMessages`` counts them (:mod:`punctual.dispatch.polling.catchup_pace`)."""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime, timedelta

import boto3

from factories import job as make_job
from punctual.dispatch.polling import Poller, PollerConfig
from punctual.dispatch.polling.queue_counts import BackgroundCount, NotYet
from punctual.dispatch.queues import MessageKind, SqsQueues, message_for
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerLayout

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LAYOUT = TimerLayout(shard_count=4, near_shard_count=2, far_threshold_s=180)


def _messages(count: int, job_id: str = "owed") -> list:  # type: ignore[type-arg]
    job = make_job(job_id, "rate(1 second)", now=T - timedelta(hours=1), tenant="acme")
    slots = [T - timedelta(seconds=count - i) for i in range(count)]
    return [message_for(job, f"{s:%Y-%m-%dT%H:%M:%SZ}", s, 1, MessageKind.FIRE, T) for s in slots]


def test_the_gauge_counts_what_waits_in_every_short_queue_not_what_is_in_flight(aws: None) -> None:
    sqs = boto3.client("sqs", region_name="us-east-1")
    urls = [
        sqs.create_queue(QueueName=f"short-{i}.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        for i in range(3)
    ]
    queues = SqsQueues(sqs)
    # Given 25 messages in one short queue and 12 in another
    queues.send(urls[0], _messages(25))
    queues.send(urls[2], _messages(12, "other"))
    assert queues.waiting(urls) == 37
    assert queues.waiting(urls[:1]) == 25
    # When a worker receives 10 (in flight, not yet deleted), Then they no longer wait
    received = queues.receive(urls[0], 10, 0, 30)
    assert len(received) == 10 and queues.waiting(urls) == 27
    # And the ones it finished are gone for good
    for message in received:
        queues.delete(urls[0], message.receipt)
    assert queues.waiting(urls) == 27


def test_a_poller_on_sqs_paces_its_catch_up_by_its_short_queues(aws: None) -> None:
    sqs = boto3.client("sqs", region_name="us-east-1")
    short = sqs.create_queue(QueueName="short.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    long = sqs.create_queue(QueueName="long.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    queues = SqsQueues(sqs)
    poller = Poller(
        MemoryStore(),
        queues,
        ManualClock(T),
        PollerConfig(layout=LAYOUT, short_queue_urls=(short,), long_queue_urls=(long,)),
    )
    queues.send(short, _messages(7))
    queues.send(long, _messages(5, "long"))
    pace = poller.minute_poll(T).pace
    # read off the poller's loop (a throttled read must not hold the minute's on-time releases)
    assert isinstance(pace.count, BackgroundCount)
    assert _answer(pace.count) == 7  # the short lane only
    queues.send(short, _messages(3, "more"))
    assert _answer(pace.count) == 10


def _answer(count: BackgroundCount) -> int:
    """The count's next answer (its reads run on a thread of their own)."""
    with contextlib.suppress(NotYet):
        count()  # (an answer from before: a new read starts)
    deadline = time.monotonic() + 30
    while True:
        try:
            return count()
        except NotYet:
            assert time.monotonic() < deadline, "the backlog read never answered"
            time.sleep(0.01)
