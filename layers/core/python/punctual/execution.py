"""The worker's core: claim, overlap, run, heartbeat, finish, retry, dependencies.

Shared by the worker Lambda (``functions/worker``) and the ECS worker
(:mod:`punctual.worker_service`). Delivery from SQS is at least once; this module makes the
*start* of each attempt of a slot exactly once, and every status change a fenced,
conditional write on the execution record ``(job, slot)``.

Claiming a message for attempt ``n`` (:func:`decide_claim`)::

    record                             message                 action
    none                               n == 1, manual, child   START (create RUNNING n)
    QUEUED at n                        n                       START (overlap checked again)
    RETRY_WAIT at n-1                  n                       START (the next attempt)
    RUNNING at n-1 or n, lease live    -                       WAIT (come back when it lapses)
    RUNNING at n-1 or n, lease lapsed  -                       TAKEOVER as attempt+1, new owner
                                                               (TIMED_OUT when none is left)
    the same attempt, already ended    redelivered             REPAIR (re-apply after-effects)
    anything else                      -                       DROP (whatever its age)

``lease_until`` is always compared with this worker's injected clock. The Lambda worker's
lease is its SQS message: it writes no lease timer, and a crashed invocation's message comes
back after the visibility timeout and takes over the lapsed lease. The message stays the lease
of the attempt it took over (it was sent for an earlier one), so in this mode a message for an
attempt older than the record's is read as one for the record's own attempt: WAIT, TAKEOVER
or, redelivered after the attempt ended, REPAIR (found by the chaos run, local/chaos: after
two crashes on one slot the message was dropped and the slot stayed RUNNING for good). A
takeover in this mode also writes a LEASE timer: the message has been returned at least once
and may reach the queue's maxReceiveCount; the timer recovers the run once it is dead-lettered.

The ECS worker heartbeats (``lease_until`` and the message's visibility) and writes a LEASE
timer at every new ``lease_until``, so the poller recovers an execution whose message was lost.

Overlap (``skip`` / ``queue``) is decided when a slot's *first* attempt is claimed, against
other slots RUNNING with a live lease; retries and takeovers continue a slot already started.

Writes after a finish (retry timer, failed-executions message, next ``delay`` slot,
dependants) come *after* the record's write and are idempotent: if the worker dies between
the two, the message is redelivered, finds the attempt ended and re-applies them (REPAIR).
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import Any, Protocol

from punctual.clock import Clock
from punctual.models import (
    AttemptRecord,
    Execution,
    ExecutionStatus,
    Job,
    JobState,
    Overlap,
)
from punctual.observability import MetricsSink, NullMetrics
from punctual.planning import dispatch_instant, schedule_of
from punctual.queues import DispatchMessage, MessageKind, QueuePort, message_for
from punctual.retries import RandomSource, next_retry_at, seeded_random
from punctual.settings import Settings
from punctual.store.base import ExecutionConflictError, Expect, JobStore
from punctual.targets.base import Outcome, SlotContext, TargetInvoker, TargetResult
from punctual.timers import TimerKind, TimerLayout, slot_instant, slot_key

log = logging.getLogger("punctual.execution")

RELEASED_NOTE = "released: the worker shut down before the run ended"
LEASE_LOST_NOTE = "lease expired: the worker was lost"
SUPERSEDED_NOTE = "superseded: the job changed before this slot started"
MAX_ATTEMPT_RECORDS = 20  # the bounded list of past attempts on the record
STALE_TURN_S = 20 * 60  # a turn whose holder never wrote a record is free after this long
QUEUE_RECHECK_MIN_S = 30  # a queued slot checks that it still waits, at least this far apart
# A first attempt returned this many times is parked (recorded QUEUED, brought back by a timer)
# rather than returned again: the work queues dead-letter at their 5th receive.
PARK_AFTER_RECEIVES = 3
MAX_VISIBILITY_S = 43_200  # SQS: 12 hours
ERROR_BACKOFF_S = 10  # an unexpected error returns the message after this long
FINISH_MARGIN_S = 30  # time a Lambda keeps after a run's timeout to record its result
MAX_SUMMARY_CHARS = 500
_CLAIM_ROUNDS = 5
_LIVE = frozenset({ExecutionStatus.RUNNING})


# --------------------------------------------------------------------------- transitions


class IllegalTransition(Exception):
    """A status change the execution state machine does not allow (a bug, never a race)."""

    def __init__(self, old: ExecutionStatus | None, new: ExecutionStatus) -> None:
        super().__init__(f"illegal execution transition {old.value if old else 'none'} -> {new.value}")
        self.old = old
        self.new = new


_S = ExecutionStatus
TRANSITIONS: Mapping[ExecutionStatus | None, frozenset[ExecutionStatus]] = {
    # MISSED is born as it is: the poller (catch-up policy, paused job) or the claim (a slot
    # released for an older version) records a slot that did not run.
    None: frozenset({_S.RUNNING, _S.QUEUED, _S.SKIPPED, _S.MISSED}),
    _S.QUEUED: frozenset({_S.RUNNING, _S.QUEUED, _S.SKIPPED}),
    _S.RETRY_WAIT: frozenset({_S.RUNNING, _S.QUEUED, _S.SKIPPED}),
    # RUNNING -> RUNNING: a heartbeat, or a takeover by a new owner as the next attempt.
    _S.RUNNING: frozenset({_S.RUNNING, _S.SUCCEEDED, _S.FAILED, _S.TIMED_OUT, _S.RETRY_WAIT}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.TIMED_OUT: frozenset(),
    _S.SKIPPED: frozenset(),
    # A slot the poller recorded as missed (the job was paused, say) that a later release runs
    # after all: resuming with catch-up ``all`` releases the slots missed while paused.
    _S.MISSED: frozenset({_S.RUNNING, _S.QUEUED, _S.SKIPPED}),
}


def check_transition(old: ExecutionStatus | None, new: ExecutionStatus) -> None:
    """Raise :class:`IllegalTransition` unless ``old -> new`` is an edge of the state machine.

    Parameters
    ----------
    old
        The stored status (None: no record yet).
    new
        The status about to be written.
    """
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(old, new)


# --------------------------------------------------------------------------- claim decision


class ClaimAction(StrEnum):
    START = "start"
    TAKEOVER = "takeover"
    EXHAUSTED = "exhausted"
    WAIT = "wait"
    REPAIR = "repair"
    DROP = "drop"


@dataclass(frozen=True)
class ClaimDecision:
    action: ClaimAction
    reason: str
    wait_s: float = 0.0


def lease_live(execution: Execution, now: datetime) -> bool:
    """True while a RUNNING execution's lease has not lapsed (by the caller's clock)."""
    return (
        execution.status is ExecutionStatus.RUNNING
        and execution.lease_until is not None
        and execution.lease_until > now
    )


def decide_claim(
    current: Execution | None,
    message: DispatchMessage,
    now: datetime,
    max_attempts: int,
    max_age_s: float,
    redelivered: bool = False,
    message_is_lease: bool = False,
) -> ClaimDecision:
    """What a worker does with a message for ``message.attempt``, given the record as it is.

    A pure function of its arguments (the table in the module docstring).

    Parameters
    ----------
    current
        The execution record, or None when there is none.
    message
        The delivered message.
    now
        The worker's clock.
    max_attempts, max_age_s
        The job's retry policy: a lapsed lease past them ends the slot TIMED_OUT.
    redelivered
        The same SQS message was received before (its worker may have died after writing
        the record but before its after-effects).
    message_is_lease
        The Lambda worker (no lease timers): the message is the lease of the attempt it
        started or took over, so a message older than the record's attempt still carries it.
        False for the ECS worker, whose LEASE timers recover a lost run: older messages drop.

    Returns
    -------
    ClaimDecision
    """
    n = message.attempt
    carried = message_is_lease and current is not None and current.attempt > n
    if current is None:
        if n == 1 or message.kind in (MessageKind.MANUAL, MessageKind.CHILD):
            return ClaimDecision(ClaimAction.START, "new slot")
        return ClaimDecision(ClaimAction.DROP, f"no record for attempt {n} (expired or never started)")
    status = current.status
    if status is ExecutionStatus.MISSED and (
        n == 1 or message.kind in (MessageKind.MANUAL, MessageKind.CHILD)
    ):
        return ClaimDecision(ClaimAction.START, "slot recorded missed is released after all")
    if status is ExecutionStatus.QUEUED:
        if current.attempt == n:
            return ClaimDecision(ClaimAction.START, "queued slot")
        return ClaimDecision(ClaimAction.DROP, f"slot is queued as attempt {current.attempt}")
    if status is ExecutionStatus.RETRY_WAIT:
        if current.attempt == n - 1:
            return ClaimDecision(ClaimAction.START, "next attempt")
        if redelivered and (current.attempt == n or carried):
            return ClaimDecision(ClaimAction.REPAIR, "redelivery of an attempt that ended")
        return ClaimDecision(ClaimAction.DROP, f"slot waits for attempt {current.attempt + 1}")
    if status is ExecutionStatus.RUNNING:
        if current.attempt not in (n - 1, n) and not carried:
            return ClaimDecision(
                ClaimAction.DROP, f"attempt {current.attempt} is running; message is for {n}"
            )
        if lease_live(current, now):
            assert current.lease_until is not None
            wait = (current.lease_until - now).total_seconds()
            return ClaimDecision(ClaimAction.WAIT, "lease is live", wait_s=wait)
        used = current.attempt - current.releases
        too_old = now > current.scheduled_at + timedelta(seconds=max_age_s)
        if used >= max_attempts or too_old:
            return ClaimDecision(ClaimAction.EXHAUSTED, "lease lapsed and no attempt is left")
        return ClaimDecision(ClaimAction.TAKEOVER, "lease lapsed")
    if redelivered and (current.attempt == n or carried):
        return ClaimDecision(ClaimAction.REPAIR, "redelivery of an attempt that ended")
    return ClaimDecision(ClaimAction.DROP, f"slot already {status.value}")


# --------------------------------------------------------------------------- ports and values


class FailureSink(Protocol):
    """Where finally failed executions are reported (the failed-executions queue)."""

    def publish(self, body: Mapping[str, Any]) -> None: ...


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
    """Where a message came from, so the worker can return it or extend its visibility."""

    queue_url: str
    receipt: str
    receive_count: int = 1


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
        Heartbeat mode: the lease each heartbeat grants. Message mode: the margin added to
        the job's timeout.
    lease_timers
        True for the ECS worker: heartbeats, LEASE timers. False for the Lambda worker,
        whose SQS message is its lease.
    queue_recheck_s
        Overlap ``queue``: the longest a queued slot goes without checking that it still
        waits (a safety net: the slot before it hands it the turn when it ends).
    """

    layout: TimerLayout = field(default_factory=TimerLayout)
    short_queue_urls: tuple[str, ...] = ()
    long_queue_urls: tuple[str, ...] = ()
    retention_days: int = 30
    lease_s: int = 60
    lease_timers: bool = False
    queue_recheck_s: int = 300

    @classmethod
    def from_settings(cls, settings: Settings, *, lease_timers: bool) -> WorkerConfig:
        return cls(
            layout=TimerLayout(settings.shard_count, settings.near_shard_count, settings.far_threshold_s),
            short_queue_urls=tuple(settings.short_queue_urls),
            long_queue_urls=tuple(settings.long_queue_urls),
            retention_days=settings.retention_days,
            lease_s=settings.lease_s,
            lease_timers=lease_timers,
        )


class ClaimOutcome(StrEnum):
    CLAIMED = "claimed"  # this worker owns the attempt: run it
    DUPLICATE = "duplicate"  # dropped without running
    WAITING = "waiting"  # the message comes back later (live lease, overlap queue)
    SKIPPED = "skipped"  # overlap skip, or the job is paused
    QUEUED = "queued"  # overlap queue: recorded QUEUED, it starts when the slot before it ends
    EXHAUSTED = "exhausted"  # lease lapsed with no attempt left: TIMED_OUT
    STALE = "stale"  # the job is gone, or the slot was released for an older version of it


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
    last_heartbeat: datetime | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def claimed(self) -> bool:
        return self.outcome is ClaimOutcome.CLAIMED

    @property
    def live(self) -> bool:
        return self.claimed and not (self.lost or self.released or self.finished)

    @property
    def ack(self) -> bool:
        """Whether the message should be deleted now (not for WAITING: it comes back)."""
        return self.outcome is not ClaimOutcome.WAITING


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


class MessageReturned(Exception):
    """Raised to a batch processor: the message stays in its queue and comes back later."""

    def __init__(self, reason: str, return_after_s: int | None) -> None:
        super().__init__(reason)
        self.return_after_s = return_after_s


# --------------------------------------------------------------------------- helpers


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _bounded(attempts: list[AttemptRecord]) -> list[AttemptRecord]:
    if len(attempts) <= MAX_ATTEMPT_RECORDS:
        return attempts
    return [attempts[0], *attempts[-(MAX_ATTEMPT_RECORDS - 1) :]]  # the first and the latest


def new_owner() -> str:
    """A fresh lease owner: ``uuid.uuid4().hex``, without building a ``UUID`` object."""
    return owner_of(os.urandom(16))


def owner_of(raw: bytes) -> str:
    """``uuid.UUID(bytes=raw, version=4).hex``: the RFC 4122 variant and version 4 bits set."""
    value = int.from_bytes(raw, "big")
    value = (value & ~(0xC000 << 48)) | (0x8000 << 48)
    value = (value & ~(0xF000 << 64)) | (4 << 76)
    return f"{value:032x}"


def _summary(text: str) -> str:
    return text[:MAX_SUMMARY_CHARS]


def _visibility(seconds: float) -> int:
    return max(0, min(MAX_VISIBILITY_S, math.ceil(seconds)))


def queue_url_for_arn(arn: str, urls: Sequence[str]) -> str:
    """The queue URL of an SQS queue ARN: a configured URL with that name, else the AWS form.

    Parameters
    ----------
    arn
        ``arn:aws:sqs:<region>:<account>:<name>`` (a Lambda event's ``eventSourceARN``).
    urls
        The configured queue URLs (local mode and moto use other hosts).
    """
    parts = arn.split(":")
    if len(parts) < 6:
        raise ValueError(f"not an SQS queue ARN: {arn!r}")
    region, account, name = parts[3], parts[4], parts[5]
    for url in urls:
        if url.rstrip("/").rsplit("/", 1)[-1] == name:
            return url
    return f"https://sqs.{region}.amazonaws.com/{account}/{name}"


def default_invoker(settings: Settings, clock: Clock) -> TargetInvoker:
    """The production target invoker (imported late: adapters pull in their own modules)."""
    from punctual.targets import DefaultTargetInvoker

    return DefaultTargetInvoker(None, settings, clock=clock)


def default_signing_secrets(settings: Settings) -> Callable[[Job], tuple[str, ...]]:
    """Decrypts a job's webhook signing secret (cached: a stored form decrypts the same forever)."""
    from punctual.secrets import SecretCipher, SecretsError, job_binding

    try:
        cipher = SecretCipher(settings)
    except SecretsError:
        return lambda job: ()

    @lru_cache(maxsize=4096)
    def decrypt(stored: str, tenant: str, job_id: str) -> str:
        # Bound to the job: a ciphertext copied onto another job's item does not decrypt.
        return cipher.decrypt(stored, job_binding(tenant, job_id))

    def secrets_of(job: Job) -> tuple[str, ...]:
        # Current first; during a rotation the previous one signs too.
        stored = (job.signing_secret_enc, job.signing_secret_prev_enc)
        return tuple(decrypt(s, job.tenant, job.id) for s in stored if s)

    return secrets_of


# --------------------------------------------------------------------------- the worker


class Worker:
    """Claims, runs and finishes executions; the shells (Lambda, ECS) only move messages.

    Parameters
    ----------
    store
        The job store.
    queues
        The FIFO queue port (returning messages, extending visibility, sending dependants).
    invoker
        Runs a job's target.
    clock
        Every ``now`` (and so every lease comparison) comes from here.
    config
        Leases, timers, queues, retention.
    metrics
        Where figures go (the shells forward them to Powertools).
    failures
        Where finally failed executions are reported.
    rng
        ``rng(job_id, slot, attempt)`` gives the jitter source of that attempt's retry.
    signing_secrets
        ``signing_secrets(job)`` gives the job's webhook secrets in plain text.
    """

    def __init__(
        self,
        store: JobStore,
        queues: QueuePort,
        invoker: TargetInvoker,
        clock: Clock,
        config: WorkerConfig,
        *,
        metrics: MetricsSink | None = None,
        failures: FailureSink | None = None,
        rng: Callable[[str, str, int], RandomSource] = seeded_random,
        signing_secrets: Callable[[Job], tuple[str, ...]] | None = None,
    ) -> None:
        self.store = store
        self.queues = queues
        self.invoker = invoker
        self.clock = clock
        self.config = config
        self.metrics = metrics or NullMetrics()
        self.failures = failures or MemoryFailureSink()
        self.rng = rng
        self.signing_secrets = signing_secrets or (lambda job: ())

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        lease_timers: bool,
        invoker: TargetInvoker | None = None,
        clock: Clock | None = None,
        metrics: MetricsSink | None = None,
    ) -> Worker:
        """Wire a worker to AWS from ``PUNCTUAL_*`` settings (boto3 clients made here).

        Parameters
        ----------
        settings
            The validated environment.
        lease_timers
            True for the ECS worker, False for the Lambda worker.
        invoker, clock, metrics
            Replace the defaults (tests, local mode).
        """
        import boto3

        from punctual.clock import SystemClock
        from punctual.queues import SqsQueues
        from punctual.store.dynamo import DynamoStore

        clock = clock or SystemClock(settings.clock_offset_s)
        sqs = boto3.client("sqs")
        config = WorkerConfig.from_settings(settings, lease_timers=lease_timers)
        return cls(
            DynamoStore(boto3.client("dynamodb"), settings.table_name, config.layout),
            SqsQueues(sqs, concurrency=settings.queue_send_concurrency),
            invoker or default_invoker(settings, clock),
            clock,
            config,
            metrics=metrics,
            failures=SqsFailureSink(sqs, settings.failed_queue_url),
            signing_secrets=default_signing_secrets(settings),
        )

    # ------------------------------------------------------------------ the whole path

    def process(
        self, message: DispatchMessage, delivery: Delivery | None = None, time_left_s: float | None = None
    ) -> HandleResult:
        """Claim, run and finish one message.

        Parameters
        ----------
        message
            The delivered message.
        delivery
            Its queue and receipt; needed to return it to the queue (WAITING) and to
            hand it back on shutdown. Without it the caller returns the message itself.
        time_left_s
            What remains of a Lambda invocation: a run that could outlast it is not started
            (the message goes back at once for the next invocation).

        Returns
        -------
        HandleResult
            ``ack`` says whether the shell should delete the message.
        """
        claim = self.claim(message, delivery, time_left_s)
        if not claim.claimed:
            return HandleResult(claim.outcome.value, claim.ack, claim.return_after_s, claim.execution)
        result = self.run(claim)
        finished = self.finish(claim, result)
        outcome = "superseded" if finished.superseded else (finished.status or ExecutionStatus.RUNNING).value
        return HandleResult(outcome, not (claim.released or claim.detached), None, finished.execution)

    def process_sqs_record(self, record: Mapping[str, Any], time_left_s: float | None = None) -> HandleResult:
        """Process one record of a Lambda SQS event (its raw dict); see :meth:`process`.

        A malformed body is logged and dropped. A message that must come back later raises
        :class:`MessageReturned` after its visibility was set, so the batch processor reports
        it as failed and keeps it (with its group's later records) in the queue. Any other
        error sets a short visibility before it propagates: the retry finds the record as
        the failed try left it (a live lease is waited for, then taken over).

        Raises
        ------
        MessageReturned
            The message stays in the queue.
        """
        delivery = Delivery(
            queue_url=queue_url_for_arn(
                record["eventSourceARN"], [*self.config.short_queue_urls, *self.config.long_queue_urls]
            ),
            receipt=record["receiptHandle"],
            receive_count=int(record.get("attributes", {}).get("ApproximateReceiveCount", "1")),
        )
        try:
            message = DispatchMessage.from_body(record["body"])
        except (ValueError, TypeError) as exc:
            log.error("dropping a malformed message %s: %s", record.get("messageId"), exc)
            self.metrics.add("MalformedMessages", 1)
            return HandleResult("malformed", True)
        try:
            handled = self.process(message, delivery, time_left_s)
        except Exception:
            self._return_later(delivery, ERROR_BACKOFF_S)
            raise
        if not handled.ack:
            raise MessageReturned(handled.outcome, handled.return_after_s)
        return handled

    def return_blocked_records(self, event: Mapping[str, Any], failed_ids: set[str]) -> int:
        """Make a batch's records that a FIFO processor skipped visible again at once.

        After a record fails, the processor fails its group's later records without running
        them; they would stay in flight for the queue's whole visibility timeout and block
        their group. The first failed record of each group keeps its own visibility (it sets
        when the group resumes); the rest become visible now and queue up behind it.

        Returns
        -------
        int
            How many records were made visible.
        """
        seen_groups: set[str] = set()
        returned = 0
        urls = [*self.config.short_queue_urls, *self.config.long_queue_urls]
        for record in event.get("Records", []):
            if record.get("messageId") not in failed_ids:
                continue
            group = str(record.get("attributes", {}).get("MessageGroupId", ""))
            if group not in seen_groups:
                seen_groups.add(group)
                continue
            try:
                url = queue_url_for_arn(record["eventSourceARN"], urls)
                self.queues.change_visibility(url, record["receiptHandle"], 0)
                returned += 1
            except Exception:  # best effort: the visibility timeout brings it back anyway
                log.warning("could not return skipped record %s", record.get("messageId"), exc_info=True)
        return returned

    # ------------------------------------------------------------------ claim

    def claim(
        self, message: DispatchMessage, delivery: Delivery | None = None, time_left_s: float | None = None
    ) -> Claim:
        """Take the attempt ``message.attempt`` of the slot, or say why not.

        Returns
        -------
        Claim
            CLAIMED (run it), or an outcome that says what happened instead; WAITING
            messages have had their visibility set when ``delivery`` was given.
        """
        # Half-cost read first; a consistent one only when it may be behind the message.
        job = self.store.get_job(message.tenant, message.job_id, consistent=False)
        if job is None or job.version < message.job_version:
            job = self.store.get_job(message.tenant, message.job_id)
        if job is None or job.state is JobState.DELETED:
            log.info("job %s is gone; dropping slot %s", message.job_id, message.slot)
            self.metrics.add("StaleMessages", 1)
            return Claim(ClaimOutcome.STALE, message, delivery, reason="job is gone")
        if time_left_s is not None and job.timeout_seconds + FINISH_MARGIN_S > time_left_s:
            self.metrics.add("DeferredForTime", 1)
            reason = "not enough time left in this invocation"
            parked = self._park(job, message, delivery, reason)
            return parked or self._wait(message, delivery, job, 0, reason, None)
        if (
            message.kind == MessageKind.FIRE
            and message.attempt == 1
            and job.state is JobState.ENABLED
            and job.version > message.job_version
        ):
            superseded = self._supersede(job, message, delivery)
            if superseded is not None:
                return superseded
        fresh = message.attempt == 1 or message.kind in (MessageKind.MANUAL, MessageKind.CHILD)
        # A first attempt creates the record; on conflict the store returns the record as it
        # is, so the common path costs no read.
        current = None if fresh else self.store.get_execution(message.tenant, message.job_id, message.slot)
        redelivered = delivery is not None and delivery.receive_count > 1
        for _ in range(_CLAIM_ROUNDS):
            now = self.clock.now()
            decision = decide_claim(
                current,
                message,
                now,
                job.retry.max_attempts,
                job.retry.max_age_seconds,
                redelivered,
                message_is_lease=not self.config.lease_timers,
            )
            try:
                return self._apply(decision, current, job, message, delivery, now)
            except ExecutionConflictError as exc:
                current = exc.current or self.store.get_execution(
                    message.tenant, message.job_id, message.slot
                )
        log.warning("claim of %s %s kept racing; trying again later", message.job_id, message.slot)
        return self._wait(message, delivery, job, ERROR_BACKOFF_S, "claim kept racing", current)

    def _supersede(self, job: Job, message: DispatchMessage, delivery: Delivery | None) -> Claim | None:
        """A slot released for an older version of the job: never run against the new spec.

        Recorded MISSED (so a release of the same slot for the current version still runs
        it); None when the slot already has a record (the usual claim decides).
        """
        record = self._new_record(
            job,
            message,
            ExecutionStatus.MISSED,
            finished_at=self.clock.now(),
            error=f"{SUPERSEDED_NOTE} (released for version {message.job_version}, now {job.version})",
        )
        try:
            self._save(record, None, None)
        except ExecutionConflictError:
            return None
        self.metrics.add("SupersededSlots", 1)
        log.info(
            "slot %s of %s was released for version %d: superseded", message.slot, job.id, message.job_version
        )
        return Claim(
            ClaimOutcome.STALE, message, delivery, job, record, reason="superseded by a newer version"
        )

    @staticmethod
    def _new_record(job: Job, message: DispatchMessage, status: ExecutionStatus, **fields: Any) -> Execution:
        """The record of a slot that has no record yet, as ``message`` names it: the one place
        a worker makes one."""
        return Execution(
            job_id=job.id,
            tenant=job.tenant,
            slot=message.slot,
            scheduled_at=datetime.fromisoformat(message.scheduled_at),
            attempt=message.attempt,
            status=status,
            job_version=message.job_version,
            **fields,
        )

    def _apply(
        self,
        decision: ClaimDecision,
        current: Execution | None,
        job: Job,
        message: DispatchMessage,
        delivery: Delivery | None,
        now: datetime,
    ) -> Claim:
        action = decision.action
        if action is ClaimAction.DROP:
            log.info("dropping %s %s attempt %d: %s", job.id, message.slot, message.attempt, decision.reason)
            self.metrics.add("DuplicatesDropped", 1)
            return Claim(ClaimOutcome.DUPLICATE, message, delivery, job, current, reason=decision.reason)
        if action is ClaimAction.REPAIR:
            assert current is not None
            self._after_effects(job, current, now, retry_at=self._retry_instant_of(job, current), repeat=True)
            return Claim(ClaimOutcome.DUPLICATE, message, delivery, job, current, reason=decision.reason)
        if action is ClaimAction.WAIT:
            # One second past the lease, so the retry sees it lapsed even with rounding.
            return self._wait(message, delivery, job, decision.wait_s + 1, decision.reason, current)
        if action is ClaimAction.EXHAUSTED:
            assert current is not None
            ended = self._end_attempt(
                current, ExecutionStatus.TIMED_OUT, ExecutionStatus.TIMED_OUT, now, LEASE_LOST_NOTE
            )
            self._save(ended, current, Expect(_LIVE, current.attempt, current.owner, check_owner=True))
            self._after_effects(job, ended, now)
            return Claim(ClaimOutcome.EXHAUSTED, message, delivery, job, ended, reason=decision.reason)
        if action is ClaimAction.TAKEOVER:
            assert current is not None
            lost = AttemptRecord(
                attempt=current.attempt,
                status=ExecutionStatus.TIMED_OUT,
                started_at=current.started_at,
                finished_at=now,
                error=LEASE_LOST_NOTE,
                owner=current.owner,
            )
            running = current.model_copy(
                update={
                    "attempt": current.attempt + 1,
                    "attempts": _bounded([*current.attempts, lost]),
                    **self._running_fields(job, message, now),
                }
            )
            self._save(running, current, Expect(_LIVE, current.attempt, current.owner, check_owner=True))
            self.metrics.add("Takeovers", 1)
            log.warning("took over %s %s as attempt %d", job.id, current.slot, running.attempt)
            if not self.config.lease_timers:
                # Message mode: this message came back after a crash, and every return costs it
                # receives towards the queue's maxReceiveCount. If it is dead-lettered, a LEASE
                # timer (one write, on this rare path only) lets the poller recover the run.
                self._put_lease_timer(job, running, now)
            return self._claimed(job, message, delivery, running, now)
        return self._start(current, job, message, delivery, now)

    def _start(
        self,
        current: Execution | None,
        job: Job,
        message: DispatchMessage,
        delivery: Delivery | None,
        now: datetime,
    ) -> Claim:
        expect = None if current is None else Expect(frozenset({current.status}), current.attempt)
        if current is not None and current.status is ExecutionStatus.MISSED:
            current = None  # the record only said why the slot had not run: start it afresh
        base = current or self._new_record(job, message, ExecutionStatus.QUEUED)
        if job.state is JobState.PAUSED and message.kind != MessageKind.MANUAL:
            # Pausing stops scheduled starts and retries; a run the user triggers by hand still runs.
            skipped = base.model_copy(
                update={"status": ExecutionStatus.SKIPPED, "finished_at": now, "error": "job is paused"}
            )
            self._save(skipped, current, expect)
            self._pass_turn(job, skipped, now)  # had it been handed the turn, the next slot gets it
            self.metrics.add("PausedSkipped", 1)
            return Claim(ClaimOutcome.SKIPPED, message, delivery, job, skipped, reason="job is paused")
        first_attempt = message.attempt == 1
        holder = None
        if first_attempt and job.overlap is not Overlap.ALLOW:
            holder = self._take_turn(job, message.slot, now)
        if holder is not None and job.overlap is Overlap.SKIP:
            skipped = base.model_copy(
                update={
                    "status": ExecutionStatus.SKIPPED,
                    "finished_at": now,
                    "blocked_by": holder,
                    "error": f"overlap: slot {holder} was still running",
                }
            )
            self._save(skipped, current, expect)
            self.store.add_skipped(job.tenant, job.id, 1)
            self.metrics.add("OverlapSkipped", 1)
            return Claim(ClaimOutcome.SKIPPED, message, delivery, job, skipped, reason="overlap skip")
        if holder is not None:  # Overlap.QUEUE: recorded, acknowledged, started when its turn comes
            queued = current if current is not None and current.status is ExecutionStatus.QUEUED else base
            if queued.status is not ExecutionStatus.QUEUED or queued.blocked_by != holder:
                queued = base.model_copy(
                    update={
                        "status": ExecutionStatus.QUEUED,
                        "attempt": message.attempt,
                        "blocked_by": holder,
                    }
                )
                self._save(queued, current, expect)
            self._put_queued_timer(job, queued, now)
            self.metrics.add("OverlapQueued", 1)
            return Claim(
                ClaimOutcome.QUEUED, message, delivery, job, queued, reason=f"waits for slot {holder}"
            )
        running = base.model_copy(
            update={"attempt": message.attempt, "blocked_by": None, **self._running_fields(job, message, now)}
        )
        self._save(running, current, expect)
        if first_attempt:
            delay_ms = (now - running.scheduled_at).total_seconds() * 1000
            self.metrics.add("StartDelayMs", max(delay_ms, 0.0), "Milliseconds")
        return self._claimed(job, message, delivery, running, now)

    def _running_fields(self, job: Job, message: DispatchMessage, now: datetime) -> dict[str, Any]:
        return {
            "status": ExecutionStatus.RUNNING,
            "started_at": now,
            "finished_at": None,
            "error": None,
            "result": None,
            "owner": new_owner(),
            "lease_until": now + timedelta(seconds=self._lease_s(job)),
            "job_version": message.job_version,
        }

    def _lease_s(self, job: Job) -> int:
        # Heartbeat mode: one lease slice, extended while the run lasts. Message mode: the whole
        # run plus a margin (the SQS visibility timeout is longer still).
        return self.config.lease_s if self.config.lease_timers else job.timeout_seconds + self.config.lease_s

    def _claimed(
        self, job: Job, message: DispatchMessage, delivery: Delivery | None, running: Execution, now: datetime
    ) -> Claim:
        claim = Claim(ClaimOutcome.CLAIMED, message, delivery, job, running, last_heartbeat=now)
        if self.config.lease_timers:
            self._put_lease_timer(job, running, now)
        return claim

    def _wait(
        self,
        message: DispatchMessage,
        delivery: Delivery | None,
        job: Job,
        seconds: float,
        reason: str,
        current: Execution | None,
    ) -> Claim:
        visibility = _visibility(seconds)
        self._return_later(delivery, visibility)
        return Claim(
            ClaimOutcome.WAITING, message, delivery, job, current, return_after_s=visibility, reason=reason
        )

    def _return_later(self, delivery: Delivery | None, seconds: int) -> None:
        if delivery is None:
            return
        try:
            self.queues.change_visibility(delivery.queue_url, delivery.receipt, seconds)
        except Exception:  # the queue's own visibility timeout brings it back anyway
            log.warning("could not set the visibility of a returned message", exc_info=True)

    # ------------------------------------------------------------------ turns (overlap skip/queue)

    def _take_turn(self, job: Job, slot: str, now: datetime) -> str | None:
        """Take the job's turn for ``slot``; None if it now holds it, else the slot that does.

        Exclusion is a conditional write on one item, not a read of the history: two slots
        claimed at once by two workers cannot both get it. A holder whose slot has ended (its
        worker died before passing the turn on) or never started is replaced. A ``queue``
        slot that cannot have the turn waits for it in slot order.
        """
        store = self.store
        turn = store.take_turn(job.tenant, job.id, slot, now)
        if turn.holder == slot or turn.holder is None:
            return None
        if self._turn_is_stale(job, turn.holder, turn.since, now):
            turn = store.take_turn(job.tenant, job.id, slot, now, replacing=turn.holder)
            if turn.holder == slot:
                return None
        if job.overlap is Overlap.QUEUE:
            store.wait_for_turn(job.tenant, job.id, slot)
            turn = store.take_turn(job.tenant, job.id, slot, now)  # freed meanwhile?
            if turn.holder == slot:
                return None
        return turn.holder

    def _turn_is_stale(self, job: Job, holder: str, since: datetime | None, now: datetime) -> bool:
        record = self.store.get_execution(job.tenant, job.id, holder)
        if record is None:
            return since is None or (now - since).total_seconds() > STALE_TURN_S
        return record.status.terminal

    def _pass_turn(self, job: Job, execution: Execution, now: datetime) -> None:
        """A skip/queue slot ended for good: hand the turn to the oldest queued slot and start it."""
        if job.overlap is Overlap.ALLOW or not execution.status.terminal:
            return
        following = self.store.pass_turn(job.tenant, job.id, execution.slot, now)
        if following is None:
            return
        record = self.store.get_execution(job.tenant, job.id, following)
        scheduled = record.scheduled_at if record is not None else slot_instant(following)
        attempt = record.attempt if record is not None else 1
        message = message_for(job, following, scheduled, attempt, MessageKind.TURN, now)
        self.queues.send(self._queue_for(job), [message])
        log.info("slot %s of %s ended: the turn goes to %s", execution.slot, job.id, following)

    def _park(
        self, job: Job, message: DispatchMessage, delivery: Delivery | None, reason: str
    ) -> Claim | None:
        """A first attempt returned to its queue again and again (deferred for lack of time):
        before its receive count reaches the dead-letter queue, record it QUEUED with the
        reason and a timer that brings it back, and delete the message. None: keep returning it.
        """
        parkable = message.kind in (MessageKind.FIRE, MessageKind.TURN, MessageKind.CHECK)
        if (
            delivery is None
            or delivery.receive_count < PARK_AFTER_RECEIVES
            or message.attempt != 1
            or not parkable
        ):
            return None
        now = self.clock.now()
        current = self.store.get_execution(job.tenant, job.id, message.slot)
        if current is None:
            error = f"parked after {delivery.receive_count} deliveries: {reason}"
            current = self._new_record(job, message, ExecutionStatus.QUEUED, error=error)
            try:
                self._save(current, None, None)
            except ExecutionConflictError:
                return None  # someone else wrote it meanwhile: the usual claim decides next time
        elif current.status is not ExecutionStatus.QUEUED:
            return None
        self._put_queued_timer(job, current, now)
        self.metrics.add("ParkedSlots", 1)
        return Claim(ClaimOutcome.QUEUED, message, delivery, job, current, reason=f"parked: {reason}")

    def _put_queued_timer(self, job: Job, execution: Execution, now: datetime) -> None:
        """The safety net of a queued slot: a check that it still waits, sooner while it is new."""
        waited_s = max(0.0, (now - execution.scheduled_at).total_seconds())
        after_s = min(float(self.config.queue_recheck_s), max(QUEUE_RECHECK_MIN_S, waited_s / 2))
        self._put_timer(job, execution, now, now + timedelta(seconds=after_s), TimerKind.QUEUED)

    # ------------------------------------------------------------------ run

    def run(self, claim: Claim) -> TargetResult:
        """Invoke the job's target for a claimed attempt (never raises for a target's failure)."""
        job, execution = self._owned(claim)
        ctx = SlotContext(
            job_id=job.id,
            tenant=job.tenant,
            slot=execution.slot,
            scheduled_at=execution.scheduled_at,
            attempt=execution.attempt,
            timeout_s=float(job.timeout_seconds),
            signing_secrets=self.signing_secrets(job),
            heartbeat=lambda: self.heartbeat_if_due(claim),
        )
        started = self.clock.now()
        try:
            result = self.invoker.invoke(job.target, job.payload, ctx)
        except Exception as exc:
            log.exception("target of %s %s raised", job.id, execution.slot)
            result = TargetResult.retryable(_summary(f"worker error: {type(exc).__name__}: {exc}"))
        self.metrics.add("RunDurationMs", (self.clock.now() - started).total_seconds() * 1000, "Milliseconds")
        return result

    # ------------------------------------------------------------------ heartbeat and release

    def heartbeat(self, claim: Claim) -> bool:
        """Extend the lease (and the message's visibility); False when the lease was lost.

        Conditional on owner and attempt: a worker whose execution was taken over learns it
        here and should stop.
        """
        with claim.lock:
            if not claim.live:
                return False
            job, current = self._owned(claim)
            now = self.clock.now()
            extended = current.model_copy(update={"lease_until": now + timedelta(seconds=self._lease_s(job))})
            try:
                self._save(extended, current, Expect(_LIVE, current.attempt, current.owner, check_owner=True))
            except ExecutionConflictError:
                claim.lost = True
                self.metrics.add("LeasesLost", 1)
                log.warning("lease of %s %s was lost", job.id, current.slot)
                return False
            except Exception:
                # The store is failing. While the lease still outlasts the next heartbeat, the
                # next one tries again; past that another worker may take the slot over, so this
                # run gives up now: it stops (adapters that heartbeat, like ECS, stop their task)
                # and its result is never recorded.
                lapses = current.lease_until
                if lapses is not None and now + timedelta(seconds=self.config.lease_s / 3) >= lapses:
                    claim.lost = True
                    self.metrics.add("LeasesLost", 1)
                    log.warning("lease of %s %s could not be extended before it lapses", job.id, current.slot)
                    return False
                raise
            claim.execution = extended
            claim.last_heartbeat = now
            if self.config.lease_timers:
                self._put_lease_timer(job, extended, now)
            delivery = claim.delivery
            if delivery is not None and not claim.detached:
                try:
                    self.queues.change_visibility(delivery.queue_url, delivery.receipt, self._lease_s(job))
                except Exception:
                    # SQS caps a message's visibility at 12 hours in all. Past that (or if the
                    # receipt went stale) let go of the message: the LEASE timers recover the run.
                    log.info("detaching %s %s from its message", job.id, current.slot, exc_info=True)
                    self._detach(claim)
        return True

    def heartbeat_if_due(self, claim: Claim) -> bool:
        """The adapter's heartbeat: beat when a third of the lease has passed; report the lease."""
        if not claim.live:
            return False
        if not self.config.lease_timers:
            return True  # message mode: the lease covers the whole run
        last = claim.last_heartbeat
        if last is None or (self.clock.now() - last).total_seconds() >= self.config.lease_s / 3:
            return self.heartbeat(claim)
        return True

    def _detach(self, claim: Claim) -> None:
        delivery = claim.delivery
        claim.detached = True
        if delivery is None:
            return
        try:
            self.queues.delete(delivery.queue_url, delivery.receipt)
        except Exception:
            log.warning("could not delete a detached message", exc_info=True)

    def release(self, claim: Claim) -> bool:
        """Hand a running attempt back (shutdown): another worker takes it over at once.

        The record goes RUNNING -> RETRY_WAIT (the attempt is listed as released and does
        not count against ``max_attempts``), the next attempt's message is sent, and this
        one is deleted so the job's FIFO group moves on. A late finish of this run is then
        fenced. If the send fails, a RETRY timer due now does it through the poller.

        Returns
        -------
        bool
            False when the attempt had already ended or been taken over.
        """
        with claim.lock:
            if not claim.live:
                return False
            job, current = self._owned(claim)
            now = self.clock.now()
            note = AttemptRecord(
                attempt=current.attempt,
                status=ExecutionStatus.RETRY_WAIT,
                started_at=current.started_at,
                finished_at=now,
                error=RELEASED_NOTE,
                owner=current.owner,
            )
            released = current.model_copy(
                update={
                    "status": ExecutionStatus.RETRY_WAIT,
                    "finished_at": now,
                    "lease_until": None,
                    "error": RELEASED_NOTE,
                    "releases": current.releases + 1,
                    "attempts": _bounded([*current.attempts, note]),
                }
            )
            try:
                self._save(released, current, Expect(_LIVE, current.attempt, current.owner, check_owner=True))
            except ExecutionConflictError:
                claim.lost = True
                return False
            claim.execution = released
            claim.released = True
        self.metrics.add("ExecutionsReleased", 1)
        next_message = self._message(
            job, released.slot, released.scheduled_at, released.attempt + 1, MessageKind.TAKEOVER, now
        )
        delivery = claim.delivery
        try:
            self.queues.send(delivery.queue_url if delivery else self._queue_for(job), [next_message])
        except Exception:
            log.warning(
                "could not send the takeover of %s %s; leaving it to a timer",
                job.id,
                released.slot,
                exc_info=True,
            )
            self._put_retry_timer(job, released, now, now)
            return True
        if delivery is not None and not claim.detached:
            try:
                self.queues.delete(delivery.queue_url, delivery.receipt)
            except Exception:
                log.warning("could not delete a released message", exc_info=True)
        return True

    # ------------------------------------------------------------------ finish

    def finish(self, claim: Claim, result: TargetResult) -> FinishResult:
        """Record the run's outcome, fenced on owner and attempt, then its after-effects.

        A worker whose attempt was taken over (or handed back) gets ``superseded``: its result
        is noted on the record's attempt list once the slot has ended, never applied.

        Raises
        ------
        IllegalTransition
            The claim does not hold a RUNNING attempt (a caller bug).
        """
        job, current = self._owned(claim)
        now = self.clock.now()
        succeeded = result.outcome is Outcome.SUCCEEDED
        attempt_status = (
            ExecutionStatus.SUCCEEDED
            if succeeded
            else (ExecutionStatus.TIMED_OUT if result.timed_out else ExecutionStatus.FAILED)
        )
        retry_at: datetime | None = None
        if result.outcome is Outcome.RETRYABLE and not result.pause_job:
            retry_at = next_retry_at(
                job.retry,
                failed_attempt=current.attempt - current.releases,
                failed_at=now,
                scheduled_at=current.scheduled_at,
                rng=self.rng(job.id, current.slot, current.attempt),
                retry_after_s=result.retry_after_s,
            )
        status = ExecutionStatus.RETRY_WAIT if retry_at is not None else attempt_status
        summary = _summary(result.summary)
        ended = self._end_attempt(
            current, status, attempt_status, now, None if succeeded else summary, result=summary or None
        )
        with claim.lock:
            if claim.finished:
                raise IllegalTransition(current.status, status)
            superseded: Execution | None = None
            if claim.lost or claim.released:
                fenced = True  # known already: no write can succeed
                superseded = self.store.get_execution(job.tenant, job.id, current.slot)
            else:
                try:
                    self._save(
                        ended, current, Expect(_LIVE, current.attempt, current.owner, check_owner=True)
                    )
                    fenced = False
                except ExecutionConflictError as exc:
                    fenced, superseded = True, exc.current
            if fenced:
                claim.lost = True
                self._note_superseded(claim, attempt_status, summary, superseded)
                return FinishResult(None, True, superseded)
            claim.execution = ended
            claim.finished = True
        self._after_effects(job, ended, now, retry_at=retry_at)
        if result.pause_job:
            self._pause(job, f"the target asked to stop: {summary}")
        return FinishResult(status, False, ended, retry_at)

    def _end_attempt(
        self,
        current: Execution,
        status: ExecutionStatus,
        attempt_status: ExecutionStatus,
        now: datetime,
        error: str | None,
        **more: Any,
    ) -> Execution:
        """The record with its attempt ended (``more``: further fields to set in the same copy)."""
        record = AttemptRecord(
            attempt=current.attempt,
            status=attempt_status,
            started_at=current.started_at,
            finished_at=now,
            error=error,
            owner=current.owner,
        )
        return current.model_copy(
            update={
                "status": status,
                "finished_at": now,
                "lease_until": None,
                "error": error,
                "attempts": _bounded([*current.attempts, record]),
                **more,
            }
        )

    def _note_superseded(
        self, claim: Claim, status: ExecutionStatus, summary: str, current: Execution | None
    ) -> None:
        """Record a fenced-off worker's result on the slot's attempt list, never as the result."""
        owner = claim.execution.owner if claim.execution else None
        attempt = claim.execution.attempt if claim.execution else claim.message.attempt
        self.metrics.add("SupersededResults", 1)
        log.warning(
            "superseded result of %s %s attempt %d (%s: %s) not applied",
            claim.message.job_id,
            claim.message.slot,
            attempt,
            status.value,
            summary,
        )
        if current is None or not current.status.terminal:
            return  # a live owner writes this record: appending now would race its writes
        note = f"late result {status.value}: {summary} (superseded)"
        attempts = list(current.attempts)
        for index, record in enumerate(attempts):
            if record.attempt == attempt and record.owner == owner:
                joined = f"{record.error}; {note}" if record.error else note
                attempts[index] = record.model_copy(update={"error": _summary(joined)})
                break
        else:
            attempts.append(AttemptRecord(attempt=attempt, status=status, error=_summary(note), owner=owner))
        noted = current.model_copy(update={"attempts": _bounded(attempts)})
        try:
            self.store.save_execution(
                noted,
                Expect(frozenset({current.status}), current.attempt, current.owner, check_owner=True),
                self._ttl(self.clock.now()),
            )
        except ExecutionConflictError:
            log.info("could not note the superseded result: the record changed again")

    # ------------------------------------------------------------------ after-effects

    def _after_effects(
        self,
        job: Job,
        execution: Execution,
        now: datetime,
        retry_at: datetime | None = None,
        repeat: bool = False,
    ) -> None:
        """What follows an attempt's end. Every step is idempotent (REPAIR runs it again).

        The failed-executions report is at least once: a worker that dies after sending it
        but before its message is deleted sends it again on the redelivery.
        """
        status = execution.status
        count = NullMetrics() if repeat else self.metrics
        if status is ExecutionStatus.RETRY_WAIT:
            self._put_retry_timer(job, execution, now, retry_at or now)
            if execution.error != RELEASED_NOTE:
                count.add("Retries", 1)
            return
        if status is ExecutionStatus.SUCCEEDED:
            count.add("ExecutionsSucceeded", 1)
            self._dispatch_dependants(job, execution, now)
        elif status in (ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT):
            count.add("ExecutionsFailed", 1)
            if status is ExecutionStatus.TIMED_OUT:
                count.add("ExecutionsTimedOut", 1)
            self.failures.publish(self._failure_report(execution))
        if status.terminal:
            self._chain_delay(job, execution, now)
            self._pass_turn(job, execution, now)

    def _retry_instant_of(self, job: Job, execution: Execution) -> datetime | None:
        """The retry instant of a RETRY_WAIT record, recomputed exactly as it was first computed."""
        if execution.status is not ExecutionStatus.RETRY_WAIT or execution.finished_at is None:
            return None
        if execution.error == RELEASED_NOTE:
            return execution.finished_at
        due = next_retry_at(
            job.retry,
            failed_attempt=execution.attempt - execution.releases,
            failed_at=execution.finished_at,
            scheduled_at=execution.scheduled_at,
            rng=self.rng(job.id, execution.slot, execution.attempt),
        )
        return due or execution.finished_at

    def _put_timer(
        self,
        job: Job,
        execution: Execution,
        now: datetime,
        due: datetime,
        kind: TimerKind,
        attempt: int | None = None,
        owner: str | None = None,
    ) -> None:
        """Write one timer of an execution (retry, lease, queued check): the one way they are made."""
        timer = self.config.layout.make(
            now=now,
            due=due,
            job_id=job.id,
            tenant=job.tenant,
            slot=execution.slot,
            attempt=execution.attempt if attempt is None else attempt,
            kind=kind,
            job_version=job.version,
            owner=owner,
        )
        self.store.put_timers([timer])

    def _put_retry_timer(self, job: Job, execution: Execution, now: datetime, due: datetime) -> None:
        self._put_timer(job, execution, now, due, TimerKind.RETRY, attempt=execution.attempt + 1)

    def _put_lease_timer(self, job: Job, execution: Execution, now: datetime) -> None:
        assert execution.lease_until is not None
        self._put_timer(job, execution, now, execution.lease_until, TimerKind.LEASE, owner=execution.owner)

    @staticmethod
    def _failure_report(execution: Execution) -> dict[str, Any]:
        return {
            "tenant": execution.tenant,
            "job_id": execution.job_id,
            "slot": execution.slot,
            "scheduled_at": _iso(execution.scheduled_at),
            "status": execution.status.value,
            "attempt": execution.attempt,
            "error": execution.error,
            "finished_at": _iso(execution.finished_at) if execution.finished_at else None,
            "attempts": [record.model_dump(mode="json") for record in execution.attempts],
        }

    def _chain_delay(self, job: Job, execution: Execution, now: datetime) -> None:
        """``delay(...)`` jobs: the next slot counts from this finish, for the same job version."""
        if schedule_of(job).kind != "delay" or "~" in execution.slot:
            return  # manual runs do not start a second chain
        current = self.store.get_job(job.tenant, job.id)
        if (
            current is None
            or current.state is not JobState.ENABLED
            or current.version != execution.job_version
        ):
            return  # paused, deleted or re-specified: resume/replace wrote their own timer
        finished = execution.finished_at or now
        # A poller whose clock runs ahead releases a slot early, and its run can end before the
        # slot's own instant: count the delay from the later of the two, so that skew moves when
        # a run starts, never how often, and the chain never names this slot again (it stopped).
        nxt = schedule_of(current).next_after(max(finished, slot_instant(execution.slot)))
        if nxt is None or (current.end_at is not None and nxt > current.end_at):
            return
        timer = self.config.layout.make(
            now=now,
            due=dispatch_instant(current, nxt),
            job_id=current.id,
            tenant=current.tenant,
            slot=slot_key(nxt),
            attempt=1,
            kind=TimerKind.FIRE,
            job_version=current.version,
        )
        self.store.put_timers([timer])

    def _dispatch_dependants(self, job: Job, execution: Execution, now: datetime) -> None:
        """``after(...)`` jobs: record this parent's success; send each child whose parents all succeeded.

        Send first, then record the dispatch: the dedup id makes a repeat harmless, and a
        repeat after SQS's window is dropped by the child's claim.
        """
        if job.dependents <= 0:
            return  # the common case: no job waits on this one, and no query is made
        children = self.store.list_dependents(job.tenant, job.id)
        if not children:
            return
        ttl = self._ttl(now)
        jobs = self.store.batch_get_jobs((job.tenant, child) for child in children)
        for child_id in children:
            done = self.store.record_parent_success(job.tenant, child_id, execution.slot, job.id, ttl)
            child = jobs.get((job.tenant, child_id))
            if child is None or child.state is not JobState.ENABLED:
                continue
            parents = schedule_of(child).parents
            if not parents or not set(parents) <= done:
                continue
            message = self._message(child, execution.slot, now, 1, MessageKind.CHILD, now)
            self.queues.send(self._queue_for(child), [message])
            self.store.claim_child_dispatch(job.tenant, child_id, execution.slot)
            self.metrics.add("ChildrenDispatched", 1)

    def _pause(self, job: Job, reason: str) -> None:
        from punctual.jobs import JobError, JobService, QueueRouting

        service = JobService(
            self.store,
            self.queues,
            self.clock,
            self.config.layout,
            QueueRouting(self.config.short_queue_urls, self.config.long_queue_urls),
        )
        for _ in range(3):
            try:
                service.pause(job.tenant, job.id, reason=reason)
                self.metrics.add("JobsPausedByTarget", 1)
                return
            except JobError as exc:
                log.info("pausing %s: %s; trying again", job.id, exc)
        log.error("could not pause job %s after the target asked to stop", job.id)

    # ------------------------------------------------------------------ plumbing

    def _owned(self, claim: Claim) -> tuple[Job, Execution]:
        if claim.job is None or claim.execution is None or not claim.claimed:
            raise IllegalTransition(
                claim.execution.status if claim.execution else None, ExecutionStatus.RUNNING
            )
        return claim.job, claim.execution

    def _ttl(self, now: datetime) -> int:
        return int((now + timedelta(days=self.config.retention_days)).timestamp())

    def _save(self, new: Execution, current: Execution | None, expect: Expect | None) -> None:
        check_transition(current.status if current is not None else None, new.status)
        self.store.save_execution(new, expect, self._ttl(self.clock.now()))

    def _queue_for(self, job: Job) -> str:
        from punctual.jobs import QueueRouting

        return QueueRouting(self.config.short_queue_urls, self.config.long_queue_urls).queue_for(job)

    @staticmethod
    def _message(
        job: Job, slot: str, scheduled: datetime, attempt: int, kind: str, now: datetime
    ) -> DispatchMessage:
        return message_for(job, slot, scheduled, attempt, kind, now)
