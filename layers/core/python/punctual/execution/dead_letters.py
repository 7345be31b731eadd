"""A job's own dead-letter queue (EventBridge Scheduler's ``DeadLetterConfig``): after a slot's
last attempt failed, its event goes there.

The message body is the event the target would have received (the payload rendered for the
last attempt: an SQS/SNS target's text as it is, else JSON). Its message attributes are the
ones the service documents for a dead-letter event — ``ERROR_CODE``, ``ERROR_MESSAGE``,
``EXHAUSTED_RETRY_CONDITION`` (``MaximumRetryAttempts``, ``MaximumEventAgeInSeconds``, or
``NonRetryableError`` for a failure no retry would change), ``RETRY_ATTEMPTS``, ``SCHEDULE_ARN``
(a ``/v1`` job: its job id), ``TARGET_ARN`` — and ``SCHEDULED_TIME`` and ``EXECUTION_ID``.

It is sent as the dead-letter queue's own ``role_arn``, else the target's execution role (as the
service does), by the worker that recorded the failure, after the record's write: at least once
(a worker that dies after sending sends again when its message comes back), like the
failed-executions report beside it. The queue passes the tenant boundary first
(:mod:`punctual.security.boundary`: never one of the scheduler's own queues, the same role rules as a
target); a refused one is logged and counted (``DeadLettersRefused``), and nothing is sent.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta

from punctual.delivery.targets.aws_clients import ClientFactory
from punctual.delivery.targets.aws_services import SqsTargetAdapter, message_body, sqs_text
from punctual.delivery.targets.base import Outcome, SlotContext
from punctual.delivery.targets.payload import execution_id, nominal_instant, render_payload
from punctual.execution.records import AGE_CUT_NOTE
from punctual.models import Execution, ExecutionStatus, Job, target_arn
from punctual.runtime.observability import MetricsSink, NullMetrics
from punctual.security.boundary import Boundary, dead_letter_callee
from punctual.timing.instants import format_instant_adaptive
from punctual.timing.retries import retry_delay_s, seeded_random

log = logging.getLogger("punctual.execution")

_CODE_RE = re.compile(r"^[a-z0-9-]+ [A-Za-z]+: ([A-Za-z0-9_.]+)(: |$)")
DEAD_LETTER_TIMEOUT_S = 10.0


def _string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": sqs_text(value) or "-"}  # (QA28: a NUL lost the letter)


def error_code(execution: Execution) -> str:
    """The code in the attempt's error (``sqs SendMessage: AccessDenied: ...`` → ``AccessDenied``)."""
    match = _CODE_RE.match(execution.error or "")
    if match:
        return match.group(1)
    return "TargetTimedOut" if execution.status is ExecutionStatus.TIMED_OUT else "TargetInvocationFailed"


def failed_attempts(execution: Execution) -> int:
    """The slot's attempts that ran and failed: a run handed back at shutdown is not one."""
    return execution.attempt - execution.releases


def exhausted_condition(job: Job, execution: Execution, now: datetime) -> str:
    """Why the slot's retries ended, as EventBridge Scheduler names it: its attempts were used up;
    or its next retry (the wait the worker draws for it) would have come past ``max_age_seconds``
    from where they count (a backfilled slot: its first start); or else no retry would change it.
    (A failure that was not retryable when its retry would also have come too late reads as the
    age limit: the record keeps no more.) QA: the age was counted from the slot's instant at the
    failure, so a backfilled slot's permanent failure read as the age, and a retry cut by the age
    as not retryable."""
    failed = failed_attempts(execution)
    if failed >= job.retry.max_attempts:
        return "MaximumRetryAttempts"
    if AGE_CUT_NOTE in (execution.error or ""):
        return "MaximumEventAgeInSeconds"  # the worker found its retry past the age, hint included
    wait = retry_delay_s(job.retry, failed, seeded_random(job.id, execution.slot, execution.attempt))
    if now + timedelta(seconds=wait) > execution.retry_origin + timedelta(seconds=job.retry.max_age_seconds):
        return "MaximumEventAgeInSeconds"
    return "NonRetryableError"


def dead_letter_attributes(job: Job, execution: Execution, now: datetime) -> dict[str, dict[str, str]]:
    """The message attributes of a dead-letter event (see the module notes)."""
    ctx = _context(job, execution)
    schedule_arn = job.scheduler.arn if job.scheduler else job.id
    called = job.scheduler.target_arn if job.scheduler else target_arn(job.target)
    return {
        "ERROR_CODE": _string(error_code(execution)),
        "ERROR_MESSAGE": _string((execution.error or "")[:1000]),
        "EXHAUSTED_RETRY_CONDITION": _string(exhausted_condition(job, execution, now)),
        # the retries made: a run its worker handed back at shutdown was none (QA23: counted as one)
        "RETRY_ATTEMPTS": {"DataType": "Number", "StringValue": str(max(0, failed_attempts(execution) - 1))},
        "SCHEDULE_ARN": _string(schedule_arn),
        "TARGET_ARN": _string(called),
        # the time the schedule named, as the body's <aws.scheduler.scheduled-time>: not a jittered
        # slot's later release, nor an after() job's dispatch (QA24: both were sent)
        "SCHEDULED_TIME": _string(format_instant_adaptive(nominal_instant(ctx))),
        "EXECUTION_ID": _string(execution_id(ctx)),
    }


def _context(job: Job, execution: Execution) -> SlotContext:
    return SlotContext(
        job_id=job.id,
        tenant=job.tenant,
        slot=execution.slot,
        scheduled_at=execution.scheduled_at,
        attempt=execution.attempt,
        timeout_s=DEAD_LETTER_TIMEOUT_S,
    )


class SqsDeadLetters:
    """Sends dead-letter events with SQS SendMessage, as the queue's (else the target's) role.

    Parameters
    ----------
    clients
        The targets' boto3 client factory (roles assumed as for the target itself).
    boundary
        The tenant boundary the queue passes before anything is sent.
    metrics
        ``DeadLettersRefused``; ``DeadLettersFailed`` (a send that failed: a queue that does not
        exist or refuses the role, throttling).
    """

    def __init__(
        self, clients: ClientFactory, boundary: Boundary, metrics: MetricsSink | None = None
    ) -> None:
        self.sender = SqsTargetAdapter(clients)
        self.boundary = boundary
        self.metrics = metrics or NullMetrics()

    def send(self, job: Job, execution: Execution, now: datetime) -> None:
        callee = dead_letter_callee(job)
        if callee is None:
            return
        refusal = self.boundary.refusal(callee)
        if refusal is not None:
            self.metrics.add("DeadLettersRefused", 1)
            log.error("dead-letter queue of job %s slot %s: %s", job.id, execution.slot, refusal)
            return
        ctx = _context(job, execution)
        body = message_body(render_payload(job.payload, ctx))
        result = self.sender.send(callee.target, body, dead_letter_attributes(job, execution, now), ctx)
        if result.outcome is not Outcome.SUCCEEDED:
            # Not retried here: the failure stays on the execution record and in the report queue;
            # counted, as EventBridge Scheduler counts its own (QA23: only a log line said so)
            self.metrics.add("DeadLettersFailed", 1)
            log.error("dead-letter queue of job %s slot %s: %s", job.id, execution.slot, result.summary)


class MemoryDeadLetters:
    """Keeps what would be sent (tests)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict[str, dict[str, str]]]] = []

    def send(self, job: Job, execution: Execution, now: datetime) -> None:
        if job.dead_letter is None:
            return
        body = message_body(render_payload(job.payload, _context(job, execution)))
        self.sent.append((job.dead_letter.queue_arn, body, dead_letter_attributes(job, execution, now)))


__all__ = ["MemoryDeadLetters", "SqsDeadLetters", "dead_letter_attributes", "error_code"]
