"""Recall: the messages a worker returned to their queue after an unexpected error come back as
soon as its store answers again, not when their backoff ends.

A message that met an unexpected error (the store, KMS or Secrets Manager unreachable or
throttled) goes back to its queue with a backoff that grows with its receives
(:func:`punctual.execution.parking.error_backoff_s`: 10 s, 30 s, 90 s, 270 s, ... 15 minutes), so
that a long outage does not dead-letter it. Alone, that backoff also set the end of the outage's
lateness: a slot whose message went back for 270 s during a five-minute outage ran up to 270 s
after the store was healthy again (QA25, in-process: a 2-minute outage's slots ran up to 79 s
after its end, a 5-minute outage's up to 268 s).

So the worker process remembers the messages it returned that way (at most :data:`RECALL_MAX`,
the oldest forgotten first) and, once a claim of its has read the store again with no unexpected
error for :data:`RECALL_QUIET_S`, makes them visible at once (ChangeMessageVisibilityBatch to 0,
one request per ten; :data:`RECALL_AT_ONCE` a claim): the backlog comes back within seconds of the
outage's end.

The dead-letter horizon stays as it was: a recall never gives a message a receive past its queue's
``maxReceiveCount`` (one already at it is not remembered), and each message is recalled once at
most (one that fails again goes back with its usual backoff), so however the outage flaps, a
recall skips at most one of its backoffs; a first attempt is still parked at its third receive.
Messages returned by a worker that is gone (an execution environment reclaimed, a task replaced)
keep their backoff. Nothing is read or called while no message is remembered.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from datetime import datetime, timedelta

from punctual.dispatch.queues import DispatchMessage, QueuePort
from punctual.execution.ports import Delivery
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink

log = logging.getLogger("punctual.execution")

RECALL_MAX = 1000  # messages a worker remembers (100 requests to recall them all)
RECALL_AT_ONCE = 100  # recalled by one claim (10 requests), oldest first; the rest by the next
RECALL_QUIET_S = 3  # no unexpected error for this long before a claim that read the store recalls


class Recalls:
    """The messages a worker returned after an unexpected error, recalled once its store answers.

    Parameters
    ----------
    queues
        Makes recalled messages visible.
    clock, metrics
        As the worker's.
    max_receive_count
        The work queues' ``maxReceiveCount``: a message received that often is never recalled.
    """

    def __init__(self, queues: QueuePort, clock: Clock, metrics: MetricsSink, max_receive_count: int) -> None:
        self.queues = queues
        self.clock = clock
        self.metrics = metrics
        self.max_receive_count = max_receive_count
        # (queue URL, deduplication id) -> (receipt, when its backoff ends)
        self._returned: OrderedDict[tuple[str, str], tuple[str, datetime]] = OrderedDict()
        self._recalled: OrderedDict[tuple[str, str], None] = OrderedDict()  # never again
        self._last_error: datetime | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._returned)

    def returned(self, message: DispatchMessage, delivery: Delivery | None, seconds: int) -> None:
        """``message`` met an unexpected error and went back to its queue for ``seconds``."""
        now = self.clock.now()
        with self._lock:
            self._last_error = now
            if delivery is None or delivery.receive_count >= self.max_receive_count:
                return  # its next receive dead-letters it: never sooner than its backoff says
            key = (delivery.queue_url, message.dedup_id)
            if key in self._recalled:
                return  # recalled once already: back with its backoff, as before
            self._returned.pop(key, None)
            self._returned[key] = (delivery.receipt, now + timedelta(seconds=seconds))
            while len(self._returned) > RECALL_MAX:
                self._returned.popitem(last=False)

    def answered(self) -> int:
        """A claim read the store: when no unexpected error came for :data:`RECALL_QUIET_S`,
        make the remembered messages whose backoff has not ended visible now (the oldest
        :data:`RECALL_AT_ONCE`). Returns how many were recalled (those deleted or received again
        meanwhile are not counted)."""
        if not self._returned:  # (the healthy path: nothing to do)
            return 0
        now = self.clock.now()
        with self._lock:
            last = self._last_error
            if last is not None and (now - last).total_seconds() < RECALL_QUIET_S:
                return 0
            due: list[tuple[tuple[str, str], str]] = []
            for key, (receipt, until) in list(self._returned.items()):
                if len(due) == RECALL_AT_ONCE:
                    break  # the rest at the next claim: this one's run is not held up for long
                del self._returned[key]
                if until > now:  # (else back already, or being received: its receipt is stale)
                    due.append((key, receipt))
            for key, _ in due:
                self._recalled[key] = None
            while len(self._recalled) > RECALL_MAX:
                self._recalled.popitem(last=False)
        by_queue: dict[str, list[str]] = {}
        for (url, _), receipt in due:
            by_queue.setdefault(url, []).append(receipt)
        recalled = 0
        for url, receipts in by_queue.items():
            try:
                recalled += len(receipts) - len(self.queues.change_visibility_batch(url, receipts, 0))
            except Exception:  # their backoff brings them back anyway
                log.warning("could not recall %d messages of %s", len(receipts), url, exc_info=True)
        if recalled:
            self.metrics.add("MessagesRecalled", recalled)
            log.info("the store answers again: %d messages returned after errors recalled", recalled)
        return recalled
