"""Execution state-change events on an EventBridge bus: what happened to every slot, for rules.

Every state change of an execution (started, succeeded, failed after its last attempt, timed
out, retry scheduled, skipped, missed, late beyond the job's bound) becomes one event with
``source`` :data:`SOURCE` and a detail-type of :data:`DETAIL_TYPES`; its detail is documented by
``docs/events.schema.json`` (version ``"1"``: fields are only ever added). Users route events
with ordinary EventBridge rules (docs/alerts.md: *Execution events*).

Publishing is at least once and never fails the job: events are buffered and sent in
PutEvents calls of at most :data:`MAX_ENTRIES_PER_CALL` entries; entries a call reports failed
are sent once more, then counted (``EventsFailed``) and logged. A repeat of an attempt's
after-effects (a redelivered message) may publish its event again; a consumer that needs
exactly once dedupes on ``detail.event_id`` (job, slot, attempt and status).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import quote

from punctual.models import Execution, Job
from punctual.runtime.observability import MetricsSink, NullMetrics
from punctual.timing.instants import format_instant_ms

log = logging.getLogger("punctual.events")

SOURCE = "punctual"
STATUS_CHANGE = "Execution Status Change"
SLOT_MISSED = "Slot Missed"
SLOT_LATE = "Slot Late"
# A slot released on time although its target's rate budget was spent (punctual.dispatch.smoothing): the
# budget and the job's max_lateness_seconds could not both hold, and lateness won.
RATE_BUDGET_OVERRUN = "Rate Budget Overrun"
# A job's chain the auditor found broken and repaired (punctual.auditing): every one is a bug.
CHAIN_REPAIRED = "Chain Repaired"
DETAIL_TYPES = (STATUS_CHANGE, SLOT_MISSED, SLOT_LATE, RATE_BUDGET_OVERRUN, CHAIN_REPAIRED)
REPAIRED = "REPAIRED"  # the status a Chain Repaired event carries
OVER_BUDGET = "OVER_BUDGET"  # the status a Rate Budget Overrun event carries
SCHEMA_VERSION = "1"
MAX_ENTRIES_PER_CALL = 10  # PutEvents' limit
LATE = "LATE"  # the status a Slot Late event carries


def execution_path(job_id: str, slot: str) -> str:
    """The API path of one execution (the slot URL-encoded, as the API expects it)."""
    return f"/v1/jobs/{job_id}/executions/{quote(slot, safe='')}"


def _ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() * 1000, 3)


def first_start(execution: Execution) -> datetime | None:
    """When the slot's first attempt started (the fire delay is measured to it)."""
    first = execution.attempts[0].started_at if execution.attempts else None
    return first or execution.started_at


@dataclass(frozen=True)
class Event:
    """One event: its detail-type, detail and instant."""

    detail_type: str
    detail: dict[str, Any]
    time: datetime


def execution_event(
    job: Job,
    execution: Execution,
    now: datetime,
    *,
    detail_type: str = STATUS_CHANGE,
    status: str | None = None,
    fire_delay_ms: float | None = None,
    late_after_seconds: int | None = None,
    extra: dict[str, Any] | None = None,
) -> Event:
    """The event of ``execution``'s current status (or ``status``), with the job's name and tags."""
    status = status or execution.status.value
    started = first_start(execution)
    if fire_delay_ms is None:
        fire_delay_ms = _ms(execution.scheduled_at, started)
    detail: dict[str, Any] = {
        "version": SCHEMA_VERSION,
        "event_id": f"{job.tenant}:{job.id}:{execution.slot}:{execution.attempt}:{status}",
        "tenant": job.tenant,
        "job_id": job.id,
        "job_name": job.name,
        "tags": dict(job.tags),
        "slot": execution.slot,
        "scheduled_at": format_instant_ms(execution.scheduled_at),
        "attempt": execution.attempt,
        "status": status,
        "error": execution.error,
        "fire_delay_ms": fire_delay_ms,
        "duration_ms": _ms(execution.started_at, execution.finished_at),
        "execution_path": execution_path(job.id, execution.slot),
    }
    if late_after_seconds is not None:
        detail["late_after_seconds"] = late_after_seconds
    if execution.slot_count > 1:  # a MISSED range record: the slots it stands for
        detail["last_slot"] = execution.last_slot
        detail["slot_count"] = execution.slot_count
    detail.update(extra or {})
    return Event(detail_type, detail, now)


class EventSink(Protocol):
    """Sends one PutEvents call's worth of events (at most :data:`MAX_ENTRIES_PER_CALL`)."""

    def put(self, events: Sequence[Event]) -> int:
        """Send ``events``; returns how many could not be sent."""
        ...


class EventBridgeSink:
    """PutEvents on one bus (``default`` or a bus the stack made, by name or ARN)."""

    def __init__(self, client: Any, bus: str) -> None:
        self.client = client
        self.bus = bus or "default"

    def entry(self, event: Event) -> dict[str, Any]:
        return {
            "Source": SOURCE,
            "DetailType": event.detail_type,
            "Detail": json.dumps(event.detail, separators=(",", ":")),
            "EventBusName": self.bus,
            "Time": event.time,
        }

    def put(self, events: Sequence[Event]) -> int:
        entries = [self.entry(event) for event in events]
        for _ in range(2):  # entries a call reports failed are sent once more
            reply = self.client.put_events(Entries=entries)
            if not reply.get("FailedEntryCount"):
                return 0
            results = reply.get("Entries", [])
            entries = [
                entry for entry, result in zip(entries, results, strict=False) if result.get("ErrorCode")
            ]
        return len(entries)


class HttpEventSink:
    """Local mode: POSTs each call's events, as EventBridge would deliver them, to one URL (the
    local receiver's ``/events``); an operator's setting, never a tenant's."""

    def __init__(self, url: str, timeout_s: float = 2.0) -> None:
        self.url = url
        self.timeout_s = timeout_s

    def put(self, events: Sequence[Event]) -> int:
        import urllib.request

        body = [
            {
                "source": SOURCE,
                "detail-type": e.detail_type,
                "time": format_instant_ms(e.time),
                "detail": e.detail,
            }
            for e in events
        ]
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
            return 0 if 200 <= reply.status < 300 else len(events)


@dataclass
class MemoryEventSink:
    """Keeps every call's events (tests, local mode's receiver feed)."""

    calls: list[list[Event]] = field(default_factory=list)

    def put(self, events: Sequence[Event]) -> int:
        self.calls.append(list(events))
        return 0

    @property
    def events(self) -> list[Event]:
        return [event for call in self.calls for event in call]


class EventPublisher:
    """Buffers events and sends them in calls of at most ten; never raises.

    Parameters
    ----------
    sink
        Where events go; None: publishing is turned off (nothing is built or buffered).
    metrics
        ``EventsPublished`` and ``EventsFailed``.
    """

    def __init__(self, sink: EventSink | None, metrics: MetricsSink | None = None) -> None:
        self.sink = sink
        self.metrics = metrics or NullMetrics()
        self._buffer: list[Event] = []
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.sink is not None

    def add(self, event: Event) -> None:
        """Buffer one event; a full call's worth is sent at once."""
        if self.sink is None:
            return
        with self._lock:
            self._buffer.append(event)
            full = len(self._buffer) >= MAX_ENTRIES_PER_CALL
        if full:
            self.flush()

    def publish(self, events: Sequence[Event]) -> None:
        """Buffer ``events`` and send everything buffered."""
        for event in events:
            self.add(event)
        self.flush()

    def flush(self) -> None:
        """Send what is buffered, ten per call."""
        if self.sink is None:
            return
        with self._lock:
            pending, self._buffer = self._buffer, []
        for start in range(0, len(pending), MAX_ENTRIES_PER_CALL):
            chunk = pending[start : start + MAX_ENTRIES_PER_CALL]
            try:
                failed = self.sink.put(chunk)
            except Exception:
                log.warning("publishing %d events failed", len(chunk), exc_info=True)
                failed = len(chunk)
            if failed:
                self.metrics.add("EventsFailed", failed)
            if len(chunk) > failed:
                self.metrics.add("EventsPublished", len(chunk) - failed)
