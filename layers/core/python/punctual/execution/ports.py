"""The worker's values and ports: its configuration, what a claim holds, where results go.

Nothing here does I/O except :class:`SqsFailureSink`; the parts of the worker
(:mod:`~punctual.execution.claim`, :mod:`~punctual.execution.lease`,
:mod:`~punctual.execution.finish`, :mod:`~punctual.execution.after`) pass these around.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from punctual.dispatch.queues import DispatchMessage, QueueRouting
from punctual.dispatch.smoothing import parse_budgets
from punctual.models import Execution, ExecutionStatus, Job
from punctual.runtime.settings import Settings
from punctual.runtime.stop_signal import StopSignal
from punctual.timing.timers import TimerLayout

log = logging.getLogger("punctual.execution")

BACKSTOP_MARGIN_S = 60  # the backstop LEASE timer is due this long past the far threshold


class FailureSink(Protocol):
    """Where finally failed executions are reported (the failed-executions queue)."""

    def publish(self, body: Mapping[str, Any]) -> None: ...


class DeadLetterSink(Protocol):
    """Sends a finally failed slot's event to its job's dead-letter queue, if it has one
    (:mod:`punctual.execution.dead_letters`)."""

    def send(self, job: Job, execution: Execution, now: datetime) -> None: ...


class SqsFailureSink:
    """Sends a JSON body to the failed-executions queue (a standard queue)."""

    def __init__(self, client: Any, queue_url: str) -> None:
        self.client = client
        self.queue_url = queue_url

    def publish(self, body: Mapping[str, Any]) -> None:
        if not self.queue_url:
            log.error("no failed-executions queue configured; dropping report %s", body)
            return
        self.client.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps(body, default=str))


@dataclass
class MemoryFailureSink:
    """Keeps every report (tests, local mode)."""

    bodies: list[dict[str, Any]] = field(default_factory=list)

    def publish(self, body: Mapping[str, Any]) -> None:
        self.bodies.append(dict(body))


@dataclass(frozen=True)
class Delivery:
    """Where a message came from, so the worker can return it or extend its visibility.

    ``message_id`` (SQS's, the same at every receive) and ``receive_count`` name this receive of
    it: a claim writes them into its record's owner, so that the same message received again
    proves by SQS's clock alone that the run's lease lapsed (:func:`punctual.execution.records.
    message_back`). Empty: a message of no queue (tests, a hand-made delivery): the record's
    ``lease_until`` alone judges the lease."""

    queue_url: str
    receipt: str
    receive_count: int = 1
    message_id: str = ""


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker claims and finishes.

    Attributes
    ----------
    layout
        Where timers go.
    short_queue_urls, long_queue_urls
        Where dependants' slots and takeover messages are sent.
    retention_days
        The execution record's TTL.
    lease_s
        The lease of a running attempt's record on both lanes: ``lease_until`` is set this far
        ahead at the claim and by each heartbeat (every :func:`punctual.execution.lease.beat_interval_s`).
    message_lease_s
        The lease of every message a worker holds (running or not): its visibility, set by the
        receive (ECS) or the batch's hold (Lambda) and renewed by the lease keeper; a run's message
        back is its run's lease lapsed (:func:`punctual.execution.records.message_back`). At most
        ``lease_s`` is used (:attr:`message_visibility_s`).
    lease_timers
        True for the ECS workers: a backstop LEASE timer (``backstop_s`` ahead) recovers a run
        whose message was lost. False for the Lambda worker, whose message always returns.
    backstop_s
        How far ahead the backstop LEASE timer is due: past the far threshold, so it is a far
        timer (``Settings.far_threshold_s`` plus a minute).
    queue_recheck_s
        Overlap ``queue``: the longest a queued slot goes without checking that it still
        waits (a safety net: the slot before it hands it the turn when it ends).
    finish_retry_s
        How long a finished run keeps trying to record its result while the store fails
        (a result that is never recorded is run again by a takeover).
    max_lateness_s, rate_budgets
        The deployment's lateness bound (``maxLatenessSeconds``: a job's own overrides it) and
        rate budgets (``targetRateBudgets``, as :func:`punctual.dispatch.smoothing.parse_budgets`
        reads them), which a smoothed call that reaches its worker late is placed again under.
    max_receive_count
        The work queues' ``maxReceiveCount``: a message that waits is sent afresh rather than
        returned for the receive that would dead-letter it (:mod:`punctual.execution.parking`).
    max_runs_in_flight, max_long_runs_in_flight
        ``maxRunsInFlightPerTenant`` and ``maxLongRunsInFlightPerTenant``: a tenant's runs in flight
        (those past their first lease) on the short lane and on the ECS long lane at which its next
        runs on that lane wait (:mod:`punctual.execution.inflight`; 0: no cap).
    """

    layout: TimerLayout = field(default_factory=TimerLayout)
    short_queue_urls: tuple[str, ...] = ()
    long_queue_urls: tuple[str, ...] = ()
    retention_days: int = 30
    lease_s: int = 12  # (Settings.lease_s)
    message_lease_s: int = 7  # (Settings.message_lease_s)
    lease_timers: bool = False
    backstop_s: int = 240
    queue_recheck_s: int = 300
    finish_retry_s: float = 20.0
    max_lateness_s: float = 10.0
    rate_budgets: Mapping[tuple[str, str], float] = field(default_factory=dict)
    max_receive_count: int = 10
    max_runs_in_flight: int = 0
    max_long_runs_in_flight: int = 0
    max_retries_per_second: float = 0.0  # (Settings.max_retries_per_second_per_tenant; 0: no limit)

    @property
    def message_visibility_s(self) -> int:
        """The visibility of a message held but not running: the message lease, never past a run's."""
        return min(self.message_lease_s, self.lease_s)

    @property
    def routing(self) -> QueueRouting:
        return QueueRouting(self.short_queue_urls, self.long_queue_urls)

    @classmethod
    def from_settings(cls, settings: Settings, *, lease_timers: bool) -> WorkerConfig:
        return cls(
            layout=settings.layout(),
            short_queue_urls=tuple(settings.short_queue_urls),
            long_queue_urls=tuple(settings.long_queue_urls),
            retention_days=settings.retention_days,
            lease_s=settings.lease_s,
            message_lease_s=settings.message_lease_s,
            lease_timers=lease_timers,
            backstop_s=settings.far_threshold_s + BACKSTOP_MARGIN_S,
            max_lateness_s=settings.max_lateness_seconds,
            rate_budgets=parse_budgets(settings.target_rate_budgets),
            max_receive_count=settings.max_receive_count,
            max_runs_in_flight=settings.max_runs_in_flight_per_tenant,
            max_long_runs_in_flight=settings.max_long_runs_in_flight_per_tenant,
            max_retries_per_second=float(settings.max_retries_per_second_per_tenant),
        )


class ClaimOutcome(StrEnum):
    CLAIMED = "claimed"  # this worker owns the attempt: run it
    DUPLICATE = "duplicate"  # dropped without running
    WAITING = "waiting"  # the message comes back later (live lease, overlap queue)
    SKIPPED = "skipped"  # overlap skip, or the job is paused
    QUEUED = "queued"  # overlap queue: recorded QUEUED, it starts when the slot before it ends
    EXHAUSTED = "exhausted"  # lease lapsed with no attempt left: TIMED_OUT
    STALE = "stale"  # the job is gone, or the slot was released for an older version of it
    FORGED = "forged"  # not signed with the dispatch key: dropped unread
    # verifies under no dispatch key held while the key cannot be read again: back to its queue
    UNVERIFIED = "unverified"


@dataclass
class Claim:
    """The result of a claim; when CLAIMED, the handle of the running attempt."""

    outcome: ClaimOutcome
    message: DispatchMessage
    delivery: Delivery | None
    job: Job | None = None
    execution: Execution | None = None
    return_after_s: int | None = None
    reason: str = ""
    lost: bool = False  # a conditional write found another owner: stop, never write again
    released: bool = False  # handed back on shutdown: the message is no longer ours
    finished: bool = False
    detached: bool = False  # the message was deleted early: LEASE timers alone recover it
    unmarked: bool = False  # a chain's last slot whose job could not be marked COMPLETED at its claim
    resent: bool = False  # WAITING, sent afresh near the dead-letter limit: delete this message
    last_heartbeat: datetime | None = None
    # A message the lease keeper does not hold (execution.keeper): the instant by the worker's clock
    # until which its heartbeats hid it (its visibility set), unknown (None) before the first
    message_until: datetime | None = None
    backstop_due: datetime | None = None  # the ECS lanes' backstop LEASE timer (execution.lease)
    in_flight: tuple[
        int, ...
    ] = ()  # the windows its tenant's runs in flight counted it in (execution.inflight)
    # Set when the run must stop now (lease lost, or shutdown: stop_reason says which); the
    # target adapter sees it as SlotContext.cancel.
    cancel: StopSignal = field(default_factory=StopSignal, repr=False, compare=False)
    stop_reason: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def claimed(self) -> bool:
        return self.outcome is ClaimOutcome.CLAIMED

    @property
    def live(self) -> bool:
        return self.claimed and not (self.lost or self.released or self.finished)

    @property
    def ack(self) -> bool:
        """Whether the message should be deleted now (not for WAITING nor UNVERIFIED: it comes back;
        but for a WAITING one sent afresh in its place)."""
        if self.outcome is ClaimOutcome.WAITING:
            return self.resent
        return self.outcome is not ClaimOutcome.UNVERIFIED


@dataclass(frozen=True)
class FinishResult:
    status: ExecutionStatus | None  # what was written; None when superseded
    superseded: bool
    execution: Execution | None
    retry_at: datetime | None = None


@dataclass(frozen=True)
class HandleResult:
    """What happened to one message, and what its shell should do with it."""

    outcome: str  # a ClaimOutcome value, "superseded", or the status the run ended in
    ack: bool  # delete the message (False: it was returned to the queue, or handed back)
    return_after_s: int | None = None
    execution: Execution | None = None


# A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: twice the time
# of setting its ``__dict__`` at once, which the values made for every message are built with.
_new = object.__new__
_set_dict = object.__setattr__
_Frozen = TypeVar("_Frozen")


def made_at_once(cls: type[_Frozen], fields: dict[str, Any]) -> _Frozen:
    """``cls(**fields)`` for a frozen dataclass (no ``__post_init__``, no slots) and ``fields``
    that name every one of its fields, in declaration order: its ``__dict__`` set at once."""
    made: _Frozen = _new(cls)
    _set_dict(made, "__dict__", fields)
    return made


def finish_result(
    status: ExecutionStatus | None,
    superseded: bool,
    execution: Execution | None,
    retry_at: datetime | None = None,
) -> FinishResult:
    """``FinishResult(status, superseded, execution, retry_at)``, its fields set at once."""
    return made_at_once(
        FinishResult,
        {"status": status, "superseded": superseded, "execution": execution, "retry_at": retry_at},
    )


def handle_result(
    outcome: str, ack: bool, return_after_s: int | None = None, execution: Execution | None = None
) -> HandleResult:
    """``HandleResult(outcome, ack, return_after_s, execution)``, its fields set at once."""
    return made_at_once(
        HandleResult,
        {"outcome": outcome, "ack": ack, "return_after_s": return_after_s, "execution": execution},
    )


class MessageReturned(Exception):
    """Raised to a batch processor: the message stays in its queue and comes back later."""

    def __init__(self, reason: str, return_after_s: int | None) -> None:
        super().__init__(reason)
        self.return_after_s = return_after_s


class JobPauser(Protocol):
    """Pauses a job when its target asks never to be called again (HTTP 410)."""

    def pause(self, tenant: str, job_id: str, reason: str) -> None: ...
