"""The target port: what the worker calls when a slot runs, and what it gets back.

Adapters (HTTP, Lambda, SQS, SNS, EventBridge, Step Functions, ECS) implement
:class:`TargetAdapter`; the execution core only sees :class:`TargetInvoker`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from punctual.runtime.stop_signal import Cancellation, StopSignal


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    RETRYABLE = "retryable"  # try again under the retry policy
    PERMANENT = "permanent"  # no retry: the request itself is wrong


@dataclass(frozen=True)
class SlotContext:
    """Everything an adapter may know about the run it performs.

    ``heartbeat`` extends the lease; it returns False when the lease was lost (another
    worker took the execution over), and a long-running adapter should then stop.

    ``cancel`` is set when the run must stop now: its lease was lost, or the worker is
    shutting down and hands the attempt to another worker. An adapter that can cut its call
    short (the HTTP adapter closes the connection; the ECS adapter stops tracking, leaving the
    task to the next attempt, which adopts it) returns a result with ``stopped`` set.
    """

    job_id: str
    tenant: str
    slot: str
    scheduled_at: datetime
    attempt: int
    timeout_s: float
    signing_secrets: tuple[str, ...] = field(default=(), repr=False)  # current first; two while rotating
    heartbeat: Callable[[], bool] = field(default=lambda: True, compare=False)
    cancel: Cancellation = field(default_factory=StopSignal, compare=False, repr=False)
    # The job's field that names the target, as a refusal names it: an alert rule's is alerts.N.target
    target_field: str = "target"

    @property
    def cancelled(self) -> bool:
        """True once the run was asked to stop (see ``cancel``)."""
        return self.cancel.is_set()

    @property
    def idempotency_key(self) -> str:
        """``<job_id>:<slot>``: the same for every attempt of one slot."""
        return f"{self.job_id}:{self.slot}"

    @property
    def message_group(self) -> str:
        """The FIFO message group of the job's messages to a queue or topic whose target names
        none: the job id and 12 hex digits of a digest of the tenant, so two tenants' alike job
        ids (one schedule name) sending to one FIFO queue are two groups, never one."""
        return f"{self.job_id}.{hashlib.sha256(self.tenant.encode()).hexdigest()[:12]}"

    @property
    def fencing_token(self) -> str:
        """``<job_id>:<slot>:<attempt>``: the idempotency key and this run's fencing number.

        The number (after the last ``:``) is the attempt, which only grows within a slot:
        a retry, a takeover of a lost lease and a run handed back at shutdown each run as
        the next attempt, and the execution record's conditional writes (on attempt and
        owner) let no superseded run claim a higher one. A receiver that keeps, per
        idempotency key, the highest number it has seen can therefore refuse a call (or
        the commit of one) carrying a lower number: it comes from a superseded run.
        """
        return f"{self.idempotency_key}:{self.attempt}"


@dataclass
class TargetResult:
    """What happened. ``summary`` is short and goes into the execution record."""

    outcome: Outcome
    summary: str = ""
    retry_after_s: float | None = None  # a hint from the receiver (HTTP Retry-After)
    pause_job: bool = False  # the receiver asked never to be called again (HTTP 410)
    timed_out: bool = False
    stopped: bool = False  # cut short because ``SlotContext.cancel`` was set, not an answer
    # Not called: the scheduler's own infrastructure (KMS, STS) failed for a moment before the
    # call; the worker defers the slot without counting an attempt (Finisher)
    deferred: bool = False
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def ok(cls, summary: str = "ok", **detail: Any) -> TargetResult:
        return cls(Outcome.SUCCEEDED, summary, detail=detail)

    @classmethod
    def retryable(cls, summary: str, retry_after_s: float | None = None) -> TargetResult:
        return cls(Outcome.RETRYABLE, summary, retry_after_s=retry_after_s)

    @classmethod
    def stopped_early(cls, summary: str) -> TargetResult:
        """The call was cut short on ``SlotContext.cancel``: not an answer from the target."""
        result = cls(Outcome.RETRYABLE, summary)
        result.stopped = True
        return result

    @classmethod
    def deferred_by(cls, summary: str) -> TargetResult:
        """The target was not called: infrastructure the call needs failed transiently."""
        result = cls(Outcome.RETRYABLE, summary)
        result.deferred = True
        return result

    @classmethod
    def permanent(cls, summary: str, pause_job: bool = False) -> TargetResult:
        return cls(Outcome.PERMANENT, summary, pause_job=pause_job)


class TargetAdapter(Protocol):
    """One kind of target. Adapters never raise for a failed call: they return a result."""

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult: ...


class TargetInvoker(Protocol):
    """Runs any job's target: picks the adapter by ``target.type``."""

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult: ...


def one_line(text: str, limit: int) -> str:
    """``text`` from outside (a receiver's answer, a function's error) as one line of at most
    ``limit`` characters for a record's summary: whitespace runs as one space, and every other
    character that does not print (a control character, ESC, a format or noncharacter) as U+FFFD.
    (QA28: a receiver's escape sequences reached the CLI's terminal in the execution's error, and
    its NUL made SQS refuse the dead letter's ERROR_MESSAGE: the dead letter was lost.)"""
    flat = "".join(ch if ch.isprintable() else "\ufffd" for ch in " ".join(text.split()))
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"


def secrets_to_sign(
    target: Any, job: Any, read: Callable[[Any], tuple[str, ...]]
) -> tuple[str, ...] | TargetResult:
    """What a call of ``target`` for ``job`` is signed with: ``read(job)`` for an HTTP target (no
    other target signs: nothing to read), or why it cannot be read, for the caller to fail that
    call naming it (nothing is sent unsigned): deferred while KMS throttles or is unavailable
    (:func:`transient_aws_error`), retryable otherwise (another key, KMS refusing)."""
    if getattr(target, "type", None) != "http":
        return ()
    try:
        return read(job)
    except Exception as exc:
        if transient_aws_error(exc):
            return TargetResult.deferred_by(
                f"KMS unavailable: the job's signing secret cannot be read now: {exc}"
            )
        return TargetResult.retryable(f"the job's signing secret cannot be read: {exc}")


# Error codes AWS services answer for a moment's trouble of their own (KMS, STS): not the caller's
TRANSIENT_AWS_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "KMSInternalException",
        "DependencyTimeoutException",
        "InternalFailure",
        "InternalError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "RequestTimeout",
        "RequestTimeoutException",
        "IDPCommunicationError",
    }
)


def transient_aws_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is an AWS service's transient trouble: a
    throttle, an internal error or a 5xx, a time-out, a connection that failed. An access denied,
    a disabled or deleted key, a ciphertext that does not open are not: they do not pass."""
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

    seen: BaseException | None = exc
    for _ in range(4):  # the error and the few it was raised from (a SecretsError hides KMS's)
        if seen is None:
            return False
        if isinstance(seen, (ConnectionError, HTTPClientError)):
            return True
        if isinstance(seen, ClientError):
            status = int(seen.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            return str(seen.response.get("Error", {}).get("Code", "")) in TRANSIENT_AWS_CODES or status >= 500
        seen = seen.__cause__ or seen.__context__
    return False
