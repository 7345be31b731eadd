"""Deletes go out as DeleteMessageBatch calls of up to ten (punctual.dispatch.queue_acks)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from punctual.dispatch.queue_acks import BatchedDeletes
from punctual.dispatch.queues import DispatchMessage, MemoryQueues, Received, SqsQueues

URL = "queue://short"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class RecordingPort:
    """A port that records each delete request; ``fail_once`` receipts fail their first try."""

    def __init__(self, fail_once: Sequence[str] = ()) -> None:
        self.batches: list[list[str]] = []
        self.singles: list[str] = []
        self.fail_once = set(fail_once)
        self.lock = threading.Lock()

    def send(self, queue_url: str, messages: Sequence[DispatchMessage]) -> None:
        raise AssertionError("not used")

    def receive(self, queue_url: str, max_messages: int, wait_s: int, visibility_s: int) -> list[Received]:
        return []

    def change_visibility(self, queue_url: str, receipt: str, visibility_s: int) -> None:
        pass

    def delete(self, queue_url: str, receipt: str) -> None:
        self.singles.append(receipt)

    def delete_batch(self, queue_url: str, receipts: Sequence[str]) -> list[str]:
        with self.lock:
            self.batches.append(list(receipts))
            failed = [r for r in receipts if r in self.fail_once]
            self.fail_once -= set(failed)
            return failed


def test_twenty_five_deletes_are_three_requests_of_ten_ten_and_five() -> None:
    port = RecordingPort()
    clock = FakeClock()
    acks = BatchedDeletes(port, linger_s=0.1, monotonic=clock, start=False)
    for i in range(25):
        acks.delete(URL, f"r{i}")
    # Two full batches went out at once; five wait for their linger
    assert [len(b) for b in port.batches] == [10, 10]
    acks.flush_due()
    assert [len(b) for b in port.batches] == [10, 10]
    clock.t = 0.1
    acks.flush_due()
    assert [len(b) for b in port.batches] == [10, 10, 5]
    assert sorted(r for b in port.batches for r in b) == sorted(f"r{i}" for i in range(25))
    assert port.singles == []
    assert acks.requests == 3 and acks.deleted == 25


def test_each_queue_has_its_own_batches() -> None:
    port = RecordingPort()
    acks = BatchedDeletes(port, monotonic=FakeClock(), start=False)
    for i in range(6):
        acks.delete(URL if i % 2 else "queue://other", f"r{i}")
    acks.flush()
    assert sorted(map(sorted, port.batches)) == [["r0", "r2", "r4"], ["r1", "r3", "r5"]]


def test_a_failed_entry_is_tried_again_and_the_rest_is_not() -> None:
    port = RecordingPort(fail_once=["r3"])
    acks = BatchedDeletes(port, monotonic=FakeClock(), start=False)
    for i in range(10):
        acks.delete(URL, f"r{i}")
    assert port.batches == [[f"r{i}" for i in range(10)], ["r3"]]
    assert acks.deleted == 10 and acks.dropped == 0


def test_the_flusher_thread_sends_a_lone_receipt_after_its_linger_and_close_sends_the_rest() -> None:
    port = RecordingPort()
    acks = BatchedDeletes(port, linger_s=0.05)
    try:
        acks.delete(URL, "lone")
        deadline = threading.Event()
        for _ in range(400):  # a generous deadline: 20 s
            if port.batches:
                break
            deadline.wait(0.05)
        assert port.batches == [["lone"]]
    finally:
        acks.close()
    acks.delete(URL, "after-close")  # closed: sent at once
    assert port.batches[-1] == ["after-close"]


def test_memory_queues_delete_a_batch_in_one_request() -> None:
    queues = MemoryQueues(now=lambda: T0)
    messages = [
        DispatchMessage(
            tenant="t", job_id=f"j{i}", slot="2026-12-01T12:00:00Z", scheduled_at="", attempt=1, job_version=1
        )
        for i in range(12)
    ]
    queues.send(URL, messages)
    received = queues.receive(URL, 10, 0, 30) + queues.receive(URL, 10, 0, 30)
    acks = BatchedDeletes(queues, monotonic=FakeClock(), start=False)
    for item in received:
        acks.delete(URL, item.receipt)
    acks.flush()
    assert queues.all_messages(URL) == []
    assert queues.delete_requests == 2


class FakeSqs:
    def __init__(self, reply: dict[str, Any]) -> None:
        self.reply = reply
        self.calls: list[dict[str, Any]] = []

    def delete_message_batch(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return self.reply


def test_sqs_delete_batch_retries_throttled_entries_only() -> None:
    sqs = FakeSqs(
        {
            "Successful": [{"Id": "0"}],
            "Failed": [
                {"Id": "1", "SenderFault": True, "Code": "ReceiptHandleIsInvalid"},
                {"Id": "2", "SenderFault": False, "Code": "InternalError"},
            ],
        }
    )
    retry = SqsQueues(sqs).delete_batch(URL, ["a", "b", "c"])
    assert retry == ["c"]
    assert sqs.calls == [
        {
            "QueueUrl": URL,
            "Entries": [
                {"Id": "0", "ReceiptHandle": "a"},
                {"Id": "1", "ReceiptHandle": "b"},
                {"Id": "2", "ReceiptHandle": "c"},
            ],
        }
    ]
