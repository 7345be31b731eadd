"""The Lambda lane's hold beside its claims: a batch's first visibility change is not on the
claim path.

A Lambda batch leases its messages for seconds as soon as it arrives (:mod:`.batch`: one
ChangeMessageVisibilityBatch request per ten). Made before the first claim, that request was a
round trip in front of every slot of the batch (10 to 20 ms in AWS; 13 to 250 ms in local mode at
a burst's instant, measured). Made beside the claims, it must still come before any visibility a
record sets of its own (a message returned to come back at its smoothed instant, a slot that
waits for a lease): otherwise the hold, landing later, would overwrite it.

:class:`HoldGate` is the worker's queue port for that: a record's ``change_visibility`` of a
message whose hold is still in flight waits for the hold to land (at most ``wait_s``), then goes
through. Everything else goes straight to the port it wraps; so does ``change_visibility_batch``,
which only the hold itself and the lease keeper's renewals (of messages already held) use.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

from punctual.dispatch.queues import DispatchMessage, QueuePort, Received, Visibilities

HOLD_WAIT_S = 10.0  # longer than the hold's request takes, short of the queue's visibility timeout

Key = tuple[str, str]  # (queue URL, receipt handle)


class HoldGate:
    """A :class:`~punctual.dispatch.queues.QueuePort` whose single visibility changes wait for the
    holds in flight (see the module docstring)."""

    def __init__(self, queues: QueuePort, wait_s: float = HOLD_WAIT_S) -> None:
        self.queues = queues
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._pending: dict[Key, threading.Event] = {}

    def holding(self, keys: Iterable[Key]) -> threading.Event:
        """Mark ``keys`` as being held; set the returned event (through :meth:`held`) once the
        hold has landed or failed."""
        event = threading.Event()
        with self._lock:
            for key in keys:
                self._pending[key] = event
        return event

    def held(self, keys: Iterable[Key], event: threading.Event) -> None:
        with self._lock:
            for key in keys:
                if self._pending.get(key) is event:
                    del self._pending[key]
        event.set()

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    # ------------------------------------------------------------------ the port

    def send(self, queue_url: str, messages: Sequence[DispatchMessage]) -> None:
        self.queues.send(queue_url, messages)

    def receive(self, queue_url: str, max_messages: int, wait_s: int, visibility_s: int) -> list[Received]:
        return self.queues.receive(queue_url, max_messages, wait_s, visibility_s)

    def delete(self, queue_url: str, receipt: str) -> None:
        self.queues.delete(queue_url, receipt)

    def change_visibility(self, queue_url: str, receipt: str, visibility_s: int) -> None:
        with self._lock:
            event = self._pending.get((queue_url, receipt))
        if event is not None:
            event.wait(self.wait_s)
        self.queues.change_visibility(queue_url, receipt, visibility_s)

    def change_visibility_batch(
        self, queue_url: str, receipts: Sequence[str], visibility_s: Visibilities
    ) -> list[str]:
        return self.queues.change_visibility_batch(queue_url, receipts, visibility_s)

    def __getattr__(self, name: str) -> Any:
        # What the wrapped port has beyond the protocol (its signer, a batch delete) stays reachable.
        if name == "queues":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.queues, name)
