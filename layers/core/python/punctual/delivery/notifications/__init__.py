"""Telling people what happened: execution events on EventBridge, and per-job alerts.

:class:`Notifier` is the one port the worker (:mod:`punctual.execution`) and the poller
(:mod:`punctual.dispatch.polling.release`) call at each state change of an execution; it publishes the
event (:mod:`.events`) and, in the worker, raises the alerts the job's rules ask for
(:mod:`.alerts`): made where they are decided, delivered through ``later``
(:mod:`.background`), never on a claim's path. The poller only publishes: it hands a missed
slot's alert, and each alert's sweep (:mod:`.sweep`), to a worker (an ``alert`` message), since
only workers may call targets. It never raises: a failure to notify is logged and counted,
never a failure of the slot. A job without alert rules costs no store operation here, and with
events turned off nothing is built.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from punctual.delivery.notifications.alerts import Alerter, late_bound_s
from punctual.delivery.notifications.background import DeliveryThreads, Later, run_now
from punctual.delivery.notifications.copies import EventCopies
from punctual.delivery.notifications.events import (
    OVER_BUDGET,
    RATE_BUDGET_OVERRUN,
    SLOT_LATE,
    SLOT_MISSED,
    STATUS_CHANGE,
    Event,
    EventBridgeSink,
    EventPublisher,
    EventSink,
    MemoryEventSink,
    execution_event,
)
from punctual.dispatch.smoothing import Overrun
from punctual.models import Execution, ExecutionStatus, Job

__all__ = [
    "Alerter",
    "DeliveryThreads",
    "Event",
    "EventBridgeSink",
    "EventCopies",
    "EventPublisher",
    "EventSink",
    "MemoryEventSink",
    "Notifier",
]

log = logging.getLogger("punctual.delivery.notifications")

# The records of slots not run that the poller hands to a worker to copy to the job's own bus.
_HANDED = frozenset({ExecutionStatus.MISSED, ExecutionStatus.SKIPPED})
# An attempt's routine status changes: on the stack's bus only with events_status_changes ``all``
ROUTINE_STATUSES = frozenset({ExecutionStatus.RUNNING, ExecutionStatus.SUCCEEDED})


class Notifier:
    """Events and alerts at each state change of an execution.

    Parameters
    ----------
    events
        The event publisher (a disabled one when events are turned off).
    alerter
        Raises alerts (None: alert rules are not acted on, e.g. a process that cannot call targets).
    copies
        Copies a job's events to the bus it named (``events_bus``; :mod:`.copies`); None: not
        copied (a process that cannot call targets: the poller hands those to a worker).
    routine
        Whether an attempt's routine changes (RUNNING, SUCCEEDED) go to ``events`` too
        (``events_status_changes`` ``all``); a job's copies get them either way.
    """

    def __init__(
        self,
        events: EventPublisher | None = None,
        alerter: Alerter | None = None,
        copies: EventCopies | None = None,
        routine: bool = True,
    ) -> None:
        self.events = events or EventPublisher(None)
        self.routine = routine
        self.alerter = alerter
        self.later: Later = run_now
        self.deliveries: DeliveryThreads | None = None
        self.copies = copies
        self._held = 0

    def deliver_beside(self) -> DeliveryThreads:
        """From now on, run deliveries (alerts, :meth:`flush_soon`) on threads beside the caller's
        work; returns those threads (made on the first call, shared by every worker that uses
        this notifier), whose :meth:`~DeliveryThreads.settle` waits for them."""
        if self.deliveries is None:
            self.deliveries = DeliveryThreads()
            self.later = self.deliveries.submit
            if self.alerter is not None:
                self.alerter.later = self.later
        return self.deliveries

    def _wanted(self, job: Job, status: ExecutionStatus | None = None) -> bool:
        """Whether an event of ``job`` goes anywhere (the bus, or the job's own copy); a status
        change to ``status`` (RUNNING, SUCCEEDED) reaches the bus only when routine ones do."""
        return self._to_bus(status) or (self.copies is not None and job.events_bus is not None)

    def _to_bus(self, status: ExecutionStatus | None) -> bool:
        return self.events.enabled and (self.routine or status not in ROUTINE_STATUSES)

    def _emit(self, job: Job, event: Event, status: ExecutionStatus | None = None) -> None:
        if self._to_bus(status):
            self.events.add(event)
        if self.copies is not None:
            self.copies.add(job, event)

    @contextmanager
    def batched(self) -> Iterator[None]:
        """Hold events until the block ends (a Lambda worker's SQS batch: ten slots' events go in
        two PutEvents calls, not ten); a full call's worth is still sent at once."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            self.flush_unless_held()

    def flush_unless_held(self) -> None:
        if not self._held:
            self.flush()

    def flush_soon(self) -> None:
        """Send the buffered events through ``later`` (a heartbeat worker's started event: sent at
        once, but not on the claim's path)."""
        self.later(self.flush)

    def reads_release_delay(self, job: Job) -> bool:
        """Whether :meth:`late` and :meth:`started` read a first attempt's release delay for
        ``job``: only against its alert rules' late bound (a job without rules: the caller need
        not compute it)."""
        return bool(job.alerts)

    def late(self, job: Job, execution: Execution, fire_delay_ms: float | None) -> None:
        """A first attempt about to start whose release came later than one of the job's ``late``
        rules allows: the ``late`` alert is made now (a conditional write and its sweep timer; no
        target is called) and delivered through ``later``."""
        try:
            bound = late_bound_s(job) if job.alerts else None
            if bound is None or fire_delay_ms is None or fire_delay_ms <= bound * 1000:
                return
            if self.alerter is not None:
                self.alerter.late(job, execution, fire_delay_ms)
        except Exception:
            log.exception("raising the late alert of %s %s failed", job.id, execution.slot)

    def started(self, job: Job, execution: Execution, now: datetime, fire_delay_ms: float | None) -> None:
        """An attempt started (``fire_delay_ms``: the first attempt's release delay, else None):
        its event, and a ``Slot Late`` event when the release passed the job's smallest
        ``late_after_seconds``. Buffered: they are sent with the batch, or by :meth:`flush_soon`.

        The status event's ``fire_delay_ms`` is the first attempt's start delay, as on every other
        status event of the slot (the schema's meaning); only ``Slot Late`` carries the release's."""
        try:
            if self._wanted(job, execution.status):
                self._emit(job, execution_event(job, execution, now), execution.status)
        except Exception:
            log.exception("notifying the start of %s %s failed", job.id, execution.slot)
        self.slot_late(job, execution, now, fire_delay_ms)

    def slot_late(self, job: Job, execution: Execution, now: datetime, fire_delay_ms: float | None) -> None:
        """A ``Slot Late`` event (buffered) when a first release passed the job's smallest
        ``late_after_seconds``: at its start, or as it is queued behind a run (overlap ``queue``)."""
        try:
            bound = late_bound_s(job) if job.alerts else None
            if bound is None or fire_delay_ms is None or fire_delay_ms <= bound * 1000:
                return
            if not self._wanted(job):
                return
            late = execution_event(
                job,
                execution,
                now,
                detail_type=SLOT_LATE,
                status="LATE",
                fire_delay_ms=fire_delay_ms,
                late_after_seconds=bound,
            )
            self._emit(job, late)
        except Exception:
            log.exception("notifying the late release of %s %s failed", job.id, execution.slot)

    def changed(self, job: Job, execution: Execution, now: datetime) -> None:
        """A recorded status change (ended, retry scheduled, skipped): event, then alerts."""
        try:
            if self._wanted(job, execution.status):
                self._emit(job, execution_event(job, execution, now), execution.status)
            if self.alerter is not None and job.alerts and execution.status.terminal:
                self.alerter.ended(job, execution)
        except Exception:
            log.exception("notifying %s %s %s failed", job.id, execution.slot, execution.status.value)
        self.flush_unless_held()

    def missed(self, missed: list[tuple[Job, Execution]], now: datetime) -> None:
        """Slots recorded MISSED: one event each, batched, and its copy where this notifier copies
        (a worker's: an after() child's slot it recorded MISSED; QA23: its job's own bus never got
        it). (The poller's has no copies: it hands them, and the ``missed`` alerts, to a worker as
        ``alert`` messages.)"""
        try:
            for job, execution in missed:
                if execution.status is ExecutionStatus.MISSED and self._wanted(job):
                    self._emit(job, execution_event(job, execution, now, detail_type=SLOT_MISSED))
        except Exception:
            log.exception("notifying missed slots failed")
        self.flush()

    def handed_copy(self, job: Job, execution: Execution, now: datetime) -> None:
        """A slot the poller recorded not run, handed to a worker: the copy of its event on the
        job's own bus (MISSED: Slot Missed; SKIPPED, an after() child's under an EXCLUDED parent
        slot: its status change; QA23: that one was never copied)."""
        status = execution.status
        if self.copies is None or job.events_bus is None or status not in _HANDED:
            return
        try:
            detail_type = SLOT_MISSED if status is ExecutionStatus.MISSED else STATUS_CHANGE
            self.copies.add(job, execution_event(job, execution, now, detail_type=detail_type))
        except Exception:
            log.exception("copying the unrun slot %s %s failed", job.id, execution.slot)
        self.flush_unless_held()

    def overrun(self, job: Job, overrun: Overrun, now: datetime) -> None:
        """A slot the poller released on time over its target's rate budget: one event (sent
        with the release's others, :meth:`flush`)."""
        if not self.events.enabled:
            return
        try:
            slot = Execution(
                tenant=job.tenant,
                job_id=job.id,
                slot=overrun.slot,
                scheduled_at=overrun.due,
                status=ExecutionStatus.QUEUED,  # a carrier: the event's status is OVER_BUDGET
                attempt=1,
                error=(
                    f"released on time over the rate budget of {overrun.target}"
                    f" ({overrun.rate_per_s:g}/s): holding it back would pass max_lateness_seconds"
                    f" ({overrun.max_lateness_s:g} s)"
                ),
            )
            extra = {
                "target": overrun.target,
                "rate_budget_per_second": overrun.rate_per_s,
                "max_lateness_seconds": overrun.max_lateness_s,
            }
            event = execution_event(
                job, slot, now, detail_type=RATE_BUDGET_OVERRUN, status=OVER_BUDGET, extra=extra
            )
            self.events.add(event)
        except Exception:
            log.exception("notifying the rate budget overrun of %s %s failed", job.id, overrun.slot)

    def flush(self) -> None:
        self.events.flush()
        if self.copies is not None:
            self.copies.flush()
