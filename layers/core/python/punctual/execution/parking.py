"""Parking: a first attempt that keeps coming back is recorded QUEUED with the reason and a timer
that brings it back, before the queue's dead-letter threshold; a message that waits or met an
error goes back to its queue (with a backoff that grows with its receives).

So no first attempt reaches a dead-letter queue without a record saying why. The claim
(:mod:`punctual.execution.claim`) parks and returns messages through :class:`Parking`.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from punctual.dispatch.queues import DispatchMessage, MessageKind, QueuePort
from punctual.execution.ports import Claim, ClaimOutcome, Delivery, WorkerConfig
from punctual.execution.recall import Recalls
from punctual.execution.records import Ledger, new_record, summary
from punctual.execution.turns import Turns
from punctual.models import Execution, ExecutionStatus, Job, Runtime
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink
from punctual.store.base import ExecutionConflictError
from punctual.timing.timers import TimerKind

log = logging.getLogger("punctual.execution")

QUEUE_RECHECK_MIN_S = 30  # a queued slot checks that it still waits, at least this far apart
# A first attempt returned this many times is parked (recorded QUEUED, brought back by a timer)
# rather than returned again, well before the work queues' maxReceiveCount (10 by default).
PARK_AFTER_RECEIVES = 3
ERROR_BACKOFF_S = 10  # an unexpected error returns the message after this long (then 3x per receive)
ERROR_BACKOFF_MAX_S = 900
_PARKABLE = (MessageKind.FIRE, MessageKind.TURN, MessageKind.CHECK, MessageKind.BACKFILL)
# A worker's fresh copies of a waiting message count their ``resend`` from past this, apart from
# the pollers' re-sends and takeovers (a few: punctual.dispatch.polling.resend), so that no copy
# has the deduplication id of one they sent within SQS's five minutes (it would be dropped).
RESEND_WAITING_FROM = 1000


def error_backoff_s(receive_count: int) -> int:
    """How long a message that met an unexpected error stays away: 10 s, 30 s, 90 s, ... 15 min."""
    return int(min(ERROR_BACKOFF_MAX_S, ERROR_BACKOFF_S * 3 ** max(receive_count - 1, 0)))


def _redelivery_counts(claim: Claim) -> bool:
    """Whether the claim waits on being received again, which a fresh copy is not: the message as
    the lease of a later attempt (a takeover's, back while the lease it carries is live), or the
    run of a deleted job (:func:`punctual.execution.claim.gone_jobs_run`). Such a message is
    returned as before; a taken-over run has a LEASE timer should it be dead-lettered."""
    current = claim.execution
    if current is None:
        return False
    return claim.job is None or current.attempt > claim.message.attempt


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
        self.recalls = Recalls(queues, clock, metrics, config.max_receive_count)

    def return_later(self, delivery: Delivery | None, seconds: int) -> bool:
        """Set the message's visibility to ``seconds``; whether it was set."""
        if delivery is None:
            return False
        try:
            self.queues.change_visibility(delivery.queue_url, delivery.receipt, seconds)
        except Exception:  # the queue's own visibility timeout brings it back anyway
            log.warning("could not set the visibility of a returned message", exc_info=True)
            return False
        return True

    def return_after_error(self, message: DispatchMessage, delivery: Delivery | None) -> int:
        """Return a message that met an unexpected error with its backoff (its seconds), to be
        recalled sooner once the store answers again (:mod:`punctual.execution.recall`)."""
        seconds = error_backoff_s(delivery.receive_count if delivery else 1)
        if self.return_later(delivery, seconds):  # (else back when it was due anyway: not recalled,
            self.recalls.returned(message, delivery, seconds)  # its receipt may be another's by then)
        return seconds

    def resend_waiting(self, claim: Claim) -> bool:
        """A message that waits (a live lease, a rate budget's or its slot's instant, a turn) and
        would reach its queue's dead-letter limit at its next receive: sent afresh instead of
        returned, and True (its claim then says to delete it). False: returned as before.

        A wait is never a failure, but each return is one more receive: a copy of a slot (the
        pollers' re-send, another Region's release) that meets the run under a live lease comes
        back every lease for as long as the run lasts, and a run of a minute or more dead-lettered
        it, the dead-letter alarm firing for a slot that ran once and well (QA24). Dropping it
        would drop a backup: in a multi-Region deployment it may be the only message left to take
        the run over when the Region it runs in is lost. So the copy goes on waiting: the same
        content, ``resend`` one more (past :data:`RESEND_WAITING_FROM`: a message group and
        deduplication id of its own, signed as any message sent), in the same queue. It is sent
        at once (a FIFO queue delays no message of its own), so its first receive waits again and
        returns it for the wait this one had. One SendMessage per about maxReceiveCount returns;
        the claim's conditional writes keep the slot to one run whichever message wins.
        """
        delivery = claim.delivery
        limit = self.config.max_receive_count
        if delivery is None or delivery.receive_count < limit - 1 or _redelivery_counts(claim):
            return False
        message = claim.message
        copy = replace(message, resend=max(message.resend, RESEND_WAITING_FROM) + 1, sig="")
        try:
            self.queues.send(delivery.queue_url, [copy])
        except Exception:  # returned as before: this receive is not yet the one dead-lettered
            log.warning("could not send a waiting message afresh", exc_info=True)
            return False
        self.metrics.add("WaitingMessagesResent", 1)
        log.info(
            "%s %s waits at receive %d of %d: sent afresh as resend %d",
            message.job_id,
            message.slot,
            delivery.receive_count,
            limit,
            copy.resend,
        )
        claim.resent = True
        return True

    def short_of_time(
        self, job: Job, message: DispatchMessage, delivery: Delivery | None, reason: str
    ) -> Claim | None:
        """A message without the time to run in this (Lambda) invocation: parked (:meth:`park`), or
        None: returned to come back. One whose job runs on the ECS lane (made an ECS job after the
        message was sent to the Lambda lane: a run-now, a dependant's slot, a queued slot's turn
        routed by the copy of the job its previous slot's run held) never has the time here: it is
        sent to its job's lane and let go here (the claim there decides it as any copy). QA26: it
        came back at once, again and again, for good (a run-now or child message is never parked),
        even once its check's copy had run the slot on the long lane."""
        lane = self.config.routing.queue_for(job)
        if delivery is None or job.runtime is not Runtime.ECS or lane == delivery.queue_url:
            return self.park(job.version, message, delivery, reason)
        self.queues.send(lane, [replace(message, sig="")])  # (signed as any message sent)
        self.metrics.add("MessagesMovedToTheirLane", 1)
        log.info("%s %s: sent to its job's lane (runtime ecs)", message.job_id, message.slot)
        return Claim(ClaimOutcome.DUPLICATE, message, delivery, job, reason="sent to its job's lane")

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
        self.return_after_error(message, delivery)
        return False
