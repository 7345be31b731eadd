"""A job's policies: retry, overlap, catch-up, DST, runtime, dead-letter queue, scheduler identity."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import (
    AwareDatetime,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from punctual.models.base import (
    MAX_ATTEMPTS,
    StrictModel,
    flag_field,
    int_field,
    seconds_field,
)
from punctual.models.targets import SQS_QUEUE_RE, AwsTarget, check_arn
from punctual.timing import schedules


class Backoff(StrEnum):
    """How the wait between attempts grows: fixed, linear or exponential."""

    FIXED = "fixed"
    LINEAR = "linear"
    EXPONENTIAL = "exponential"


class RetryPolicy(StrictModel):
    """How a failed attempt is retried. ``max_attempts`` counts the first attempt."""

    max_attempts: int = int_field(
        3,
        "Attempts per slot, the first included (1: never retry; 186: EventBridge Scheduler's 185 retries).",
        ge=1,
        le=MAX_ATTEMPTS,
    )
    backoff: Backoff = Field(
        default=Backoff.EXPONENTIAL,
        description="Wait before retry n: fixed = base; linear = base * n; exponential = base * 2^(n-1).",
    )
    base_seconds: float = seconds_field(2.0, "The backoff's base wait, in seconds.", gt=0, le=86400)
    max_seconds: float = seconds_field(
        300.0, "The longest wait between attempts, in seconds.", gt=0, le=7 * 86400
    )
    jitter: bool = flag_field(True, "Randomise each wait (full jitter) so retries of many jobs spread out.")
    max_age_seconds: int = int_field(
        86400, "No retry starts later than this after the slot's instant.", ge=1, le=30 * 86400
    )

    @model_validator(mode="after")
    def _cap_above_base(self) -> RetryPolicy:
        if self.max_seconds < self.base_seconds:
            raise ValueError("retry.max_seconds must be at least retry.base_seconds")
        return self


class Overlap(StrEnum):
    """What a slot does while the previous slot of its job still runs."""

    ALLOW = "allow"
    SKIP = "skip"
    QUEUE = "queue"


class CatchupKind(StrEnum):
    """Which missed slots run: all, only the latest, or none."""

    ALL = "all"
    LATEST = "latest"
    NONE = "none"


class CatchupPolicy(StrictModel):
    """What happens to slots missed while the scheduler was down or the job paused."""

    # Exactly once means not zero times: by default every slot owed within the window runs.
    policy: CatchupKind = Field(
        default=CatchupKind.ALL,
        description="all: run every missed slot; latest: only the newest; none: skip them (recorded MISSED).",
    )
    window_seconds: int = int_field(
        3600, "How far back missed slots are caught up; older ones are recorded MISSED.", ge=0, le=7 * 86400
    )


class DstPolicy(StrictModel):
    """Overrides for fixed-time expressions around daylight-saving transitions."""

    gap: Literal["shift", "skip"] | None = Field(
        default=None,
        description="A local time skipped by a DST change: shift (fire right after the gap) or skip it.",
    )
    repeat: Literal["first", "both"] | None = Field(
        default=None, description="A local time that occurs twice: fire at the first only, or at both."
    )

    def options(self) -> schedules.DstOptions:
        return schedules.DstOptions(gap=self.gap, repeat=self.repeat)


class Runtime(StrEnum):
    """Which workers run a job: Lambda (attempts up to 14 minutes) or ECS (long jobs)."""

    LAMBDA = "lambda"
    ECS = "ecs"


class DeadLetterQueue(StrictModel):
    """Where a slot's event goes when its last attempt failed (EventBridge Scheduler's DLQ)."""

    queue_arn: str = Field(
        max_length=2048,
        description=(
            "An SQS queue's ARN. After a slot's last attempt failed, its rendered payload is sent there with "
            "the message attributes EventBridge Scheduler documents (ERROR_CODE, ERROR_MESSAGE, "
            "EXHAUSTED_RETRY_CONDITION, RETRY_ATTEMPTS, SCHEDULE_ARN, TARGET_ARN, ...), as the target's role."
        ),
        examples=["arn:aws:sqs:eu-west-1:123456789012:report-dlq"],
    )

    role_arn: str | None = Field(
        default=None, max_length=2048, description="Sent as this role (else the target's)."
    )
    _role = field_validator("role_arn")(AwsTarget._role.__func__)  # type: ignore[attr-defined]

    @field_validator("queue_arn")
    @classmethod
    def _arn(cls, value: str, info: ValidationInfo) -> str:
        return check_arn(value, "sqs", None, SQS_QUEUE_RE, info)


class SchedulerIdentity(StrictModel):
    """What the EventBridge Scheduler API knows a job by (set by that API; see ``punctual.api.scheduler``)."""

    group: str = Field(
        min_length=1, max_length=64, pattern=r"^[0-9a-zA-Z_.-]+$", description="Schedule group."
    )
    name: str = Field(min_length=1, max_length=64, pattern=r"^[0-9a-zA-Z_.-]+$", description="Schedule name.")
    arn: str = Field(max_length=1224, description="The schedule's ARN (the <aws.scheduler.schedule-arn>).")
    target_arn: str = Field(max_length=1600, description="Target.Arn as the schedule gave it.")
    input: str | None = Field(
        default=None, description="Target.Input exactly as given (GetSchedule returns it)."
    )
    client_token: str | None = Field(default=None, max_length=64, description="ClientToken of the creation.")
    flexible_window_minutes: int | None = Field(
        default=None, ge=1, le=1440, description="FlexibleTimeWindow FLEXIBLE: the window (jitter_seconds)."
    )
    started_at_once: bool = Field(
        default=False,
        description=(
            "A rate schedule given no StartDate: it started invoking at once, as the service does (start_at"
            " is when it was written; GetSchedule shows no StartDate)."
        ),
    )
    at_start_date: AwareDatetime | None = Field(
        default=None,
        description=(
            "StartDate as an at() schedule gave it (whole seconds): ignored, as the service ignores it"
            " (start_at is unset); GetSchedule returns it."
        ),
    )
    at_end_date: AwareDatetime | None = Field(
        default=None,
        description=(
            "EndDate as an at() schedule gave it (whole seconds): ignored, as the service ignores it"
            " (end_at is unset); GetSchedule returns it."
        ),
    )


# --------------------------------------------------------------------------- alerts
