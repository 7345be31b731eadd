"""punctual.execution.hold_gate: a record's own visibility change waits for its batch's hold in
flight; nothing else does (the Lambda lane's hold beside its claims)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from punctual.dispatch.queues import MemoryQueues
from punctual.execution.hold_gate import HoldGate


class Recording(MemoryQueues):
    """MemoryQueues that logs every visibility call, in order."""

    def __init__(self) -> None:
        super().__init__(now=lambda: datetime.now(UTC))
        self.calls: list[tuple[str, str, int]] = []
        self.marker = "the wrapped port's own attribute"

    def change_visibility(self, queue_url: str, receipt: str, visibility_s: int) -> None:
        self.calls.append(("one", receipt, visibility_s))

    def change_visibility_batch(
        self, queue_url: str, receipts: Sequence[str], visibility_s: int
    ) -> list[str]:
        self.calls.extend(("batch", r, visibility_s) for r in receipts)
        return []


def test_a_records_own_change_waits_for_the_hold_of_its_message() -> None:
    inner = Recording()
    gate = HoldGate(inner)
    event = gate.holding([("q", "r1"), ("q", "r2")])
    done = threading.Event()
    thread = threading.Thread(target=lambda: (gate.change_visibility("q", "r1", 3), done.set()))
    thread.start()
    # While the hold is in flight, the record's change waits
    assert not done.wait(0.3)
    assert inner.calls == []
    # The hold lands (its batch request goes straight through), then the record's change follows it
    gate.change_visibility_batch("q", ["r1", "r2"], 8)
    gate.held([("q", "r1"), ("q", "r2")], event)
    assert done.wait(10)
    thread.join(10)
    assert inner.calls == [("batch", "r1", 8), ("batch", "r2", 8), ("one", "r1", 3)]
    assert gate.pending() == 0


def test_other_messages_and_other_calls_never_wait() -> None:
    inner = Recording()
    gate = HoldGate(inner, wait_s=120.0)
    gate.holding([("q", "r1")])  # never lands in this test: a call that waited would take 120 s
    done = threading.Event()

    def calls() -> None:
        gate.change_visibility("q", "other", 0)
        gate.change_visibility("other-queue", "r1", 0)
        assert gate.change_visibility_batch("q", ["r1"], 8) == []
        done.set()

    threading.Thread(target=calls, daemon=True).start()
    assert done.wait(60)
    assert inner.calls == [("one", "other", 0), ("one", "r1", 0), ("batch", "r1", 8)]
    assert gate.marker == "the wrapped port's own attribute"


def test_a_hold_that_never_lands_holds_a_change_back_for_wait_s_at_most() -> None:
    inner = Recording()
    gate = HoldGate(inner, wait_s=0.2)
    gate.holding([("q", "r1")])
    began = time.monotonic()
    gate.change_visibility("q", "r1", 5)
    assert (
        time.monotonic() - began >= 0.19
    )  # it waited (a lower bound: a busy machine only adds), then went through
    assert inner.calls == [("one", "r1", 5)]
