"""Deleting received messages in batches of ten (``DeleteMessageBatch``), not one call each.

A worker that runs many messages at once (an ECS worker task, a burst task) acknowledges each
when its run ends. One ``DeleteMessage`` per message is one SQS request per trigger: at a
600,000-slot burst started in 4.5 s that is ~130,000 deletes a second on one queue, about
twice a high-throughput FIFO queue's quota per API action (70,000 transactions a second,
``docs/capacity.md``). :class:`BatchedDeletes` puts the acknowledgements of a whole process
into ``DeleteMessageBatch`` calls of up to ten receipts per queue: a batch goes out as soon
as ten are waiting, or ``linger_s`` after its first receipt (a message waits at most that
long to be deleted, far inside its visibility timeout, so it is never delivered again for it).

It wraps a :class:`~punctual.dispatch.queues.QueuePort` and is one itself: ``delete`` enqueues,
everything else passes through, so the execution core's own deletes (a detached or
handed-back run) are batched too. A failed entry is retried (throttling, a service error)
up to a few rounds; an entry SQS refuses for good (a receipt handle that has expired: the
message was already delivered again) is logged and counted, never raised — the next
delivery is dropped by the claim, which is what makes deletes best-effort safe.
``close`` (or ``flush``) sends what is waiting: the ECS worker calls it when it drains.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from punctual.dispatch.queues import SQS_BATCH_MAX, DispatchMessage, QueuePort, Received, Visibilities

log = logging.getLogger("punctual.dispatch.queue_acks")

LINGER_S = 0.1  # the longest a receipt waits for nine others before its batch goes out
RETRY_ROUNDS = 5


@dataclass
class _Pending:
    receipts: list[str] = field(default_factory=list)
    since: float = 0.0


class BatchedDeletes:
    """A :class:`QueuePort` whose deletes go out as ``DeleteMessageBatch`` calls.

    Parameters
    ----------
    queues
        The port that really talks to SQS: its ``delete_batch(queue_url, receipts)`` (which
        returns the receipts worth trying again) when it has one, else one ``delete`` each.
    linger_s
        How long the first receipt of a batch waits for others.
    monotonic
        The flusher's clock (tests pass a fake one).
    """

    def __init__(
        self,
        queues: QueuePort,
        linger_s: float = LINGER_S,
        monotonic: Callable[[], float] = time.monotonic,
        start: bool = True,
    ) -> None:
        self.queues = queues
        self.linger_s = linger_s
        self.monotonic = monotonic
        self.requests = 0  # delete requests made (batches and single deletes): the figure that matters
        self.deleted = 0
        self.dropped = 0  # receipts SQS refused for good (expired: delivered again)
        self._pending: dict[str, _Pending] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self._run, name="sqs-delete-batches", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ QueuePort

    def send(self, queue_url: str, messages: Sequence[DispatchMessage]) -> None:
        self.queues.send(queue_url, messages)

    def receive(self, queue_url: str, max_messages: int, wait_s: int, visibility_s: int) -> list[Received]:
        return self.queues.receive(queue_url, max_messages, wait_s, visibility_s)

    def change_visibility(self, queue_url: str, receipt: str, visibility_s: int) -> None:
        self.queues.change_visibility(queue_url, receipt, visibility_s)

    def change_visibility_batch(
        self, queue_url: str, receipts: Sequence[str], visibility_s: Visibilities
    ) -> list[str]:
        return self.queues.change_visibility_batch(queue_url, receipts, visibility_s)

    def delete(self, queue_url: str, receipt: str) -> None:
        """Acknowledge one message: it is deleted with up to nine others, within ``linger_s``."""
        full: list[str] | None = None
        with self._cond:
            if self._closed:
                full = [receipt]
            else:
                pending = self._pending.setdefault(queue_url, _Pending())
                if not pending.receipts:
                    pending.since = self.monotonic()
                pending.receipts.append(receipt)
                if len(pending.receipts) >= SQS_BATCH_MAX:
                    full = pending.receipts[:SQS_BATCH_MAX]
                    pending.receipts = pending.receipts[SQS_BATCH_MAX:]
                    pending.since = self.monotonic()
                else:
                    self._cond.notify()
        if full:
            self._send(queue_url, full)

    def delete_now(self, queue_url: str, receipt: str) -> None:
        """Delete one message at once, through the wrapped port, raising when it fails: for a
        caller that must know the message is gone (a run letting go of its message goes on only
        then: :meth:`punctual.execution.lease.Leases.message_lapsing`)."""
        self.requests += 1
        self.queues.delete(queue_url, receipt)
        self.deleted += 1

    # ------------------------------------------------------------------ flushing

    def flush(self) -> None:
        """Delete everything waiting now."""
        with self._cond:
            due = {url: p.receipts for url, p in self._pending.items() if p.receipts}
            self._pending.clear()
        for url, receipts in due.items():
            for start in range(0, len(receipts), SQS_BATCH_MAX):
                self._send(url, receipts[start : start + SQS_BATCH_MAX])

    def close(self) -> None:
        """Flush and stop the flusher; later deletes are sent at once."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.flush()

    def flush_due(self) -> None:
        """Send the batches whose first receipt has waited ``linger_s`` (the flusher's step)."""
        now = self.monotonic()
        due: list[tuple[str, list[str]]] = []
        with self._cond:
            for url, pending in self._pending.items():
                if pending.receipts and now - pending.since >= self.linger_s:
                    due.append((url, pending.receipts[:SQS_BATCH_MAX]))
                    pending.receipts = pending.receipts[SQS_BATCH_MAX:]
                    pending.since = now
        for url, receipts in due:
            self._send(url, receipts)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                waiting = [p.since for p in self._pending.values() if p.receipts]
                if not waiting:
                    self._cond.wait()
                    continue
                left = min(waiting) + self.linger_s - self.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
            try:
                self.flush_due()
            except Exception:  # never let the flusher die: the next round tries again
                log.exception("deleting a batch of messages failed")

    def _send(self, queue_url: str, receipts: list[str]) -> None:
        batch = getattr(self.queues, "delete_batch", None)
        if batch is None:
            for receipt in receipts:
                self.requests += 1
                try:
                    self.queues.delete(queue_url, receipt)
                    self.deleted += 1
                except Exception:
                    self.dropped += 1
                    log.warning("could not delete a message", exc_info=True)
            return
        left = receipts
        for round_no in range(RETRY_ROUNDS):
            self.requests += 1
            try:
                failed = batch(queue_url, left)
            except Exception:
                log.warning("DeleteMessageBatch failed (round %d)", round_no + 1, exc_info=True)
                failed = left
            self.deleted += len(left) - len(failed)
            if not failed:
                return
            left = failed
            time.sleep(min(1.0, 0.05 * 2**round_no))
        self.dropped += len(left)
        log.warning("%d messages could not be deleted: they come back and their claims drop them", len(left))
