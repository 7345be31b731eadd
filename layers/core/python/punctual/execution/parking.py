"""Parking: a first attempt that keeps coming back is recorded QUEUED with the reason and a timer
that brings it back, before the queue's dead-letter threshold; a message that waits or met an
error goes back to its queue (with a backoff that grows with its receives).

So no first attempt reaches a dead-letter queue without a record saying why. The claim
(:mod:`punctual.execution.claim`) parks and returns messages through :class:`Parking`.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from punctual.dispatch.queues import DispatchMessage, MessageKind, QueuePort
from punctual.execution.ports import Claim, ClaimOutcome, Delivery, WorkerConfig
from punctual.execution.records import Ledger, new_record, summary
from punctual.execution.turns import Turns
from punctual.models import Execution, ExecutionStatus
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink
from punctual.store.base import ExecutionConflictError
from punctual.timing.timers import TimerKind

log = logging.getLogger("punctual.execution")

QUEUE_RECHECK_MIN_S = 30  # a queued slot checks that it still waits, at least this far apart
# A first attempt returned this many times is parked (recorded QUEUED, brought back by a timer)
# rather than returned again: the work queues dead-letter at their 5th receive.
PARK_AFTER_RECEIVES = 3
ERROR_BACKOFF_S = 10  # an unexpected error returns the message after this long (then 3x per receive)
ERROR_BACKOFF_MAX_S = 900
_PARKABLE = (MessageKind.FIRE, MessageKind.TURN, MessageKind.CHECK, MessageKind.BACKFILL)


def error_backoff_s(receive_count: int) -> int:
    """How long a message that met an unexpected error stays away: 10 s, 30 s, 90 s, ... 15 min."""
    return int(min(ERROR_BACKOFF_MAX_S, ERROR_BACKOFF_S * 3 ** max(receive_count - 1, 0)))


class Parking:
    """Parks first attempts that keep coming back, and returns messages to their queue.

    Parameters
    ----------
    ledger, turns
        Records and timers; overlap turns (a parked ordered slot keeps its place).
    queues
        Returns messages that wait.
    clock, config, metrics
        As the worker's.
    """

    def __init__(
        self,
        ledger: Ledger,
        queues: QueuePort,
        turns: Turns,
        clock: Clock,
        config: WorkerConfig,
        metrics: MetricsSink,
    ) -> None:
        self.ledger = ledger
        self.store = ledger.store
        self.queues = queues
        self.turns = turns
        self.clock = clock
        self.config = config
        self.metrics = metrics

    def return_later(self, delivery: Delivery | None, seconds: int) -> None:
        if delivery is None:
            return
        try:
            self.queues.change_visibility(delivery.queue_url, delivery.receipt, seconds)
        except Exception:  # the queue's own visibility timeout brings it back anyway
            log.warning("could not set the visibility of a returned message", exc_info=True)

    def park(
        self, version: int, message: DispatchMessage, delivery: Delivery | None, reason: str
    ) -> Claim | None:
        """A first attempt returned to its queue again and again: before its receive count
        reaches the dead-letter queue, record it QUEUED with the reason and a timer that brings
        it back, and let its message be deleted. None: keep returning it.

        ``version`` is the job's version (the message's when the job could not be read).
        """
        if (
            delivery is None
            or delivery.receive_count < PARK_AFTER_RECEIVES
            or message.attempt != 1
            or message.kind not in _PARKABLE
        ):
            return None
        now = self.clock.now()
        current = self.store.get_execution(message.tenant, message.job_id, message.slot)
        error = summary(f"parked after {delivery.receive_count} deliveries: {reason}")
        if current is None:
            current = new_record(message, ExecutionStatus.QUEUED, error=error)
            try:
                self.ledger.save(current, None, None)
            except ExecutionConflictError:
                return None  # someone else wrote it meanwhile: the usual claim decides next time
        elif current.status is not ExecutionStatus.QUEUED:
            return None
        if message.ordered:
            # Overlap queue: the parked slot keeps its place, holding the turn if it is free or
            # waiting for it in slot order, so that no later slot runs before it.
            self.turns.take_slot(message.tenant, message.job_id, message.slot, now, queue=True)
        self.put_queued_timer(version, current, now)
        self.metrics.add("ParkedSlots", 1)
        return Claim(ClaimOutcome.QUEUED, message, delivery, None, current, reason=f"parked: {reason}")

    def put_queued_timer(self, version: int, execution: Execution, now: datetime) -> None:
        """The safety net of a queued slot: a check that it still waits, sooner while it is new."""
        waited_s = max(0.0, (now - execution.scheduled_at).total_seconds())
        after_s = min(float(self.config.queue_recheck_s), max(QUEUE_RECHECK_MIN_S, waited_s / 2))
        self.ledger.put_timer(
            execution, now, now + timedelta(seconds=after_s), TimerKind.QUEUED, version=version
        )

    def after_error(self, message: DispatchMessage, delivery: Delivery | None, error: BaseException) -> bool:
        """A message met an unexpected error: park it (True: delete the message) or return it
        with a backoff that grows with its receives (10 s, 30 s, 90 s, ...), so that a first
        attempt is parked with a record saying why before the dead-letter queue takes it."""
        reason = summary(f"claim failed: {type(error).__name__}: {error}")
        try:
            if self.park(message.job_version, message, delivery, reason) is not None:
                log.warning("parked %s %s after repeated errors", message.job_id, message.slot)
                return True
        except Exception:
            log.warning("could not park %s %s", message.job_id, message.slot, exc_info=True)
        self.return_later(delivery, error_backoff_s(delivery.receive_count if delivery else 1))
        return False
