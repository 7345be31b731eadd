"""A tenant's own copy of its jobs' execution events, on a bus in its own account.

The deployment's events go to Punctual's own bus, which tenants cannot read. A job that names
``events_bus`` (an EventBridge bus ARN and, usually, ``role_arn``) also gets each of its events
put on that bus by the worker, as that role (assumed like a target's execution role: the
tenant's id as external id), so the tenant routes them with its own rules. The copy is the
same event (source ``punctual``, the same detail-types and detail), since it is Punctual's.

The bus passes the tenant boundary (:mod:`punctual.security.boundary`) before each call: never one of
the scheduler's own resources, the same role rules as a target. A refused or failed copy is
counted (``EventCopiesRefused``, ``EventCopiesFailed``) and logged, never a failure of the slot.

What is copied: what the workers publish (RUNNING, SUCCEEDED, FAILED, TIMED_OUT, RETRY_WAIT,
SKIPPED, Slot Late), Slot Missed, and the SKIPPED slots of after() children the poller records
(it hands such a slot of such a job to a worker, as it does a ``missed`` alert). Rate Budget
Overrun events, which the poller publishes while it releases, stay on Punctual's bus.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict
from typing import Any

from punctual.delivery.notifications.events import MAX_ENTRIES_PER_CALL, SOURCE, Event
from punctual.delivery.targets.aws_clients import ClientFactory, api_call_timeouts, role_for
from punctual.delivery.targets.base import SlotContext
from punctual.models import Job
from punctual.runtime.observability import MetricsSink, NullMetrics
from punctual.security.boundary import Boundary, events_callee

log = logging.getLogger("punctual.events")

COPY_TIMEOUT_S = 10.0

_Key = tuple[str, str, str]  # (bus ARN, role ARN or "", tenant)


class EventCopies:
    """Buffers copies per (bus, role, tenant) and puts them, ten per call, on :meth:`flush`.

    Parameters
    ----------
    clients
        The targets' client factory (roles assumed as for a target).
    boundary
        The tenant boundary every bus passes.
    metrics
        ``EventCopiesSent``, ``EventCopiesFailed``, ``EventCopiesRefused``.
    """

    def __init__(
        self, clients: ClientFactory, boundary: Boundary, metrics: MetricsSink | None = None
    ) -> None:
        self.clients = clients
        self.boundary = boundary
        self.metrics = metrics or NullMetrics()
        self._pending: dict[_Key, list[tuple[Job, Event]]] = defaultdict(list)
        self._lock = threading.Lock()

    def add(self, job: Job, event: Event) -> None:
        """Hold a copy of ``event`` for ``job``'s bus (nothing when the job names none)."""
        bus = job.events_bus
        if bus is None:
            return
        with self._lock:
            self._pending[(bus.event_bus_arn, bus.role_arn or "", job.tenant)].append((job, event))

    def flush(self) -> None:
        """Put every held copy; never raises."""
        with self._lock:
            pending, self._pending = self._pending, defaultdict(list)
        for items in pending.values():
            try:
                self._put(items)
            except Exception:
                log.warning("copying %d events failed", len(items), exc_info=True)
                self.metrics.add("EventCopiesFailed", len(items))

    def _put(self, items: list[tuple[Job, Event]]) -> None:
        job = items[0][0]
        callee = events_callee(job)
        if callee is None:
            return
        refusal = self.boundary.refusal(callee)
        if refusal is not None:
            self.metrics.add("EventCopiesRefused", len(items))
            log.error("events of job %s not copied: %s", job.id, refusal)
            return
        bus = str(callee.target.event_bus_arn)
        ctx = SlotContext(job.id, job.tenant, "", items[0][1].time, 1, COPY_TIMEOUT_S)
        role = role_for(callee.target, ctx, str(getattr(self.clients, "default_role_arn", "") or ""))
        extra: dict[str, Any] = {"role": role} if role is not None else {}
        timeouts = api_call_timeouts(COPY_TIMEOUT_S)
        client = self.clients("events", bus.split(":")[3], timeouts=timeouts, **extra)
        for start in range(0, len(items), MAX_ENTRIES_PER_CALL):
            chunk = items[start : start + MAX_ENTRIES_PER_CALL]
            entries = [
                {
                    "Source": SOURCE,
                    "DetailType": event.detail_type,
                    "Detail": json.dumps(event.detail, separators=(",", ":")),
                    "EventBusName": bus,
                    "Time": event.time,
                }
                for _, event in chunk
            ]
            reply = client.put_events(Entries=entries)
            failed = int(reply.get("FailedEntryCount", 0))
            if failed:
                self.metrics.add("EventCopiesFailed", failed)
            if len(chunk) > failed:
                self.metrics.add("EventCopiesSent", len(chunk) - failed)


__all__ = ["EventCopies"]
