"""local/motopatch.py's SQS index changes how moto finds messages, never what SQS answers.

Random traffic (sends with repeated dedup ids and shared groups, receives of any size,
deletes of current, old, deleted and bogus receipt handles, visibility changes, purges,
redrive to a dead-letter queue, clock jumps past visibility timeouts) runs in lockstep on
queues served by unpatched moto and by patched moto, at the same instants of a stand-in
clock; every answer and every count must be the same. Then what the patch adds: a waiting
receive wakes for a send, and concurrent receivers never get one message twice.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local import motopatch

KINDS = ("fifo", "content", "redrive", "standard")
_names = itertools.count()


class Clock:
    """moto's ``utcnow`` frozen at an instant the test moves."""

    def __init__(self) -> None:
        import datetime

        self.now = datetime.datetime(2026, 1, 1)
        self.step = datetime.timedelta

    def __call__(self) -> Any:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += self.step(seconds=seconds)


@pytest.fixture
def clock(aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    import moto.core.utils

    stand_in = Clock()
    monkeypatch.setattr(moto.core.utils, "utcnow", stand_in)
    yield stand_in
    motopatch.revert()


def _queues(sqs: Any, kind: str, side: str) -> tuple[str, str | None]:
    """(queue url, dead-letter queue url or None) of one kind, for one side."""
    n = next(_names)
    fifo = kind != "standard"
    suffix = ".fifo" if fifo else ""
    attributes: dict[str, str] = {"VisibilityTimeout": "30"}
    if fifo:
        attributes["FifoQueue"] = "true"
    if kind == "content":
        attributes["ContentBasedDeduplication"] = "true"
    dlq = None
    if kind == "redrive":
        dlq = sqs.create_queue(QueueName=f"dlq-{side}-{n}{suffix}", Attributes={"FifoQueue": "true"})[
            "QueueUrl"
        ]
        arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        attributes["RedrivePolicy"] = f'{{"deadLetterTargetArn": "{arn}", "maxReceiveCount": "2"}}'
    url = sqs.create_queue(QueueName=f"q-{side}-{n}{suffix}", Attributes=attributes)["QueueUrl"]
    return url, dlq


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", call()
    except ClientError as exc:
        return "error", exc.response["Error"]["Code"]


class Side:
    """One queue (and its dead-letter queue) and the receipt handles it has handed out."""

    def __init__(self, sqs: Any, kind: str, name: str) -> None:
        self.sqs = sqs
        self.kind = kind
        self.url, self.dlq = _queues(sqs, kind, name)
        self.handles: list[str] = []

    def handle(self, k: int) -> str:
        return self.handles[k % len(self.handles)] if self.handles else "bogus"

    def run(self, op: tuple[Any, ...]) -> Any:
        name, *args = op
        sqs, url = self.sqs, self.url
        if name == "send":
            entries = []
            for i, (group, dedup, delay) in enumerate(args[0]):
                entry: dict[str, Any] = {"Id": str(i), "MessageBody": f"body-{group}-{dedup}"}
                if self.kind == "standard":
                    entry["DelaySeconds"] = delay
                else:
                    entry["MessageGroupId"] = f"g{group}"
                    if self.kind != "content":
                        entry["MessageDeduplicationId"] = f"d{dedup}"
                entries.append(entry)
            reply = sqs.send_message_batch(QueueUrl=url, Entries=entries)
            return sorted(e["Id"] for e in reply.get("Successful", [])), reply.get("Failed", [])
        if name == "receive":
            count, visibility = args
            request: dict[str, Any] = {
                "QueueUrl": url,
                "MaxNumberOfMessages": count,
                "MessageSystemAttributeNames": ["All"],
            }
            if visibility is not None:
                request["VisibilityTimeout"] = visibility
            messages = sqs.receive_message(**request).get("Messages", [])
            self.handles.extend(m["ReceiptHandle"] for m in messages)
            return [
                (m["Body"], {k: v for k, v in m["Attributes"].items() if k != "SequenceNumber"})
                for m in messages
            ]
        if name == "delete":
            return _outcome(
                lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle=self.handle(args[0])) and "deleted"
            )
        if name == "delete_batch":
            entries = [{"Id": str(i), "ReceiptHandle": self.handle(k)} for i, k in enumerate(args[0])]

            def delete_batch() -> tuple[list[str], list[dict[str, Any]]]:
                reply = sqs.delete_message_batch(QueueUrl=url, Entries=entries)
                failed = [  # the message quotes the handle, which differs between the sides
                    {**e, "Message": e["Message"].replace(entries[int(e["Id"])]["ReceiptHandle"], "<h>")}
                    for e in reply.get("Failed", [])
                ]
                return sorted(e["Id"] for e in reply.get("Successful", [])), failed

            return _outcome(delete_batch)
        if name == "visibility":
            k, timeout = args
            return _outcome(
                lambda: (
                    sqs.change_message_visibility(
                        QueueUrl=url, ReceiptHandle=self.handle(k), VisibilityTimeout=timeout
                    )
                    and "changed"
                )
            )
        if name == "purge":
            return _outcome(lambda: sqs.purge_queue(QueueUrl=url) and "purged")
        if name == "counts":
            out = {}
            for which, queue in (("queue", url), ("dlq", self.dlq)):
                if queue is None:
                    continue
                attributes = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
                out[which] = {k: v for k, v in attributes.items() if k.startswith("ApproximateNumberOf")}
            return out
        raise AssertionError(name)


_MESSAGE = st.tuples(st.integers(0, 3), st.integers(0, 6), st.sampled_from([0, 0, 5]))
_OPS = st.one_of(
    st.tuples(st.just("send"), st.lists(_MESSAGE, min_size=1, max_size=10)),
    st.tuples(st.just("receive"), st.integers(1, 10), st.sampled_from([None, 0, 10, 60])),
    st.tuples(st.just("delete"), st.integers(0, 50)),
    st.tuples(st.just("delete_batch"), st.lists(st.integers(0, 50), min_size=1, max_size=10, unique=True)),
    st.tuples(st.just("visibility"), st.integers(0, 50), st.sampled_from([0, 5, 40])),
    st.tuples(st.just("purge")),
    st.tuples(st.just("counts")),
    st.tuples(st.just("wait"), st.sampled_from([0.5, 3, 31, 400])),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS), ops=st.lists(_OPS, min_size=1, max_size=30))
def test_random_queue_traffic_gets_the_same_answers(
    clock: Clock, kind: str, ops: list[tuple[Any, ...]]
) -> None:
    # Given a queue of one kind served by unpatched moto and one served by patched moto
    sqs = boto3.client("sqs", region_name="us-east-1")
    plain = Side(sqs, kind, "plain")
    motopatch.apply()
    try:
        patched = Side(sqs, kind, "patched")
    finally:
        motopatch.revert()
    # When each operation runs on both at the same instant
    for step, op in enumerate([*ops, ("counts",), ("receive", 10, None), ("counts",)]):
        clock.advance(1)
        if op[0] == "wait":
            clock.advance(op[1])
            continue
        expected = plain.run(op)
        motopatch.apply()
        try:
            got = patched.run(op)
        finally:
            motopatch.revert()
        # Then the answers are the same
        assert got == expected, (step, op, ops)


def test_the_dedup_window_and_the_queue_list_stay_moto_s(clock: Clock) -> None:
    # Given a patched FIFO queue
    motopatch.apply()
    sqs = boto3.client("sqs", region_name="us-east-1")
    url = sqs.create_queue(QueueName="window.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]

    def send(dedup: str) -> None:
        sqs.send_message(QueueUrl=url, MessageBody=dedup, MessageGroupId="g", MessageDeduplicationId=dedup)

    def depth() -> int:
        reply = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        return int(reply["Attributes"]["ApproximateNumberOfMessages"])

    # When a dedup id repeats within five minutes, and again after them
    send("a")
    send("a")
    assert depth() == 1
    clock.advance(301)
    send("a")
    # Then the first repeat is dropped and the late one kept, as moto does
    assert depth() == 2
    from moto.sqs.models import sqs_backends

    queue = sqs_backends["123456789012"]["us-east-1"].queues["window.fifo"]
    assert isinstance(queue._messages, motopatch._Messages)
    assert [m.body for m in queue._messages] == ["a", "a"]
    assert len(queue._messages) == 2 and queue._messages[0].body == "a"


def test_a_waiting_receive_wakes_for_a_send_and_receivers_never_share_a_message(aws: None) -> None:
    # Given a patched FIFO queue with 300 messages in 150 groups, and four receivers
    motopatch.apply()
    try:
        from moto.sqs.models import sqs_backends

        backend = sqs_backends["123456789012"]["us-east-1"]
        backend.create_queue("many.fifo", FifoQueue="true", VisibilityTimeout="300")
        for i in range(300):
            backend.send_message("many.fifo", f"m{i}", group_id=f"g{i // 2}", deduplication_id=f"d{i}")
        got: list[str] = []
        lock = threading.Lock()

        def receiver() -> None:
            idle = 0
            while idle < 3:
                messages = backend.receive_message("many.fifo", 10, 1, 300)
                idle = 0 if messages else idle + 1
                for m in messages:
                    with lock:
                        got.append(m.body)
                    backend.delete_message("many.fifo", m.receipt_handle)

        # When they drain it concurrently
        threads = [threading.Thread(target=receiver) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        # Then every message was received exactly once
        assert sorted(got) == sorted(f"m{i}" for i in range(300))

        # And a receive waiting on the empty queue gets a message sent meanwhile
        woke: list[Any] = []
        waiting = threading.Thread(
            target=lambda: woke.extend(backend.receive_message("many.fifo", 1, 20, 30))
        )
        waiting.start()
        backend.send_message("many.fifo", "late", group_id="late", deduplication_id="late")
        waiting.join(timeout=60)
        assert [m.body for m in woke] == ["late"]
    finally:
        motopatch.revert()


class _RecordingLock:
    """A queue's lock whose waits are recorded and pass on the stand-in clock, not the real one."""

    def __init__(self, lock: Any, clock: Clock) -> None:
        self.lock, self.clock, self.waits = lock, clock, []  # type: ignore[var-annotated]

    def __enter__(self) -> Any:
        return self.lock.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self.lock.__exit__(*exc)

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        self.clock.advance(timeout)
        return False

    def notify_all(self) -> None:
        self.lock.notify_all()


def test_a_waiting_receive_wakes_when_a_message_in_flight_becomes_visible(clock: Clock) -> None:
    """QA30: a long poll looked again only each second, so a message back from its visibility
    timeout (a copy that waited out another Region's lease) was received up to 1 s after it was
    visible, which SQS would answer at once. The Region-loss run's takeovers came that much late."""
    motopatch.apply()
    from moto.sqs.models import sqs_backends

    # Given a message received with a visibility of 1 s, 0.7 s ago
    backend = sqs_backends["123456789012"]["us-east-1"]
    backend.create_queue("back.fifo", FifoQueue="true", VisibilityTimeout="30")
    backend.send_message("back.fifo", "copy", group_id="slot", deduplication_id="copy")
    assert [m.body for m in backend.receive_message("back.fifo", 1, 0, 1)] == ["copy"]
    clock.advance(0.7)
    queue = backend.get_queue("back.fifo")
    recording = queue._messages_lock = _RecordingLock(queue._messages_lock, clock)
    # When a receive waits on the queue (a long poll of 20 s)
    got = backend.receive_message("back.fifo", 1, 20, 30)
    # Then it gets the message as it becomes visible, 0.3 s on, not at its next look a second on
    assert [m.body for m in got] == ["copy"]
    assert sum(recording.waits) == pytest.approx(0.3, abs=0.01), recording.waits


def test_items_and_messages_are_not_kept_for_the_dashboard(aws: None) -> None:
    from moto.dynamodb.models.dynamo_type import Item
    from moto.sqs.models import Message

    motopatch.apply()
    try:
        Message("id", "body")
        assert len(Message.instances_tracked) == 0  # type: ignore[attr-defined]
        assert len(Item.instances_tracked) == 0  # type: ignore[attr-defined]
    finally:
        motopatch.revert()
    assert isinstance(Message.instances_tracked, list)  # type: ignore[attr-defined]
