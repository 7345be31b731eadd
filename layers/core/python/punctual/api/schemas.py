"""What the API answers: the response models of the OpenAPI document.

Requests use the core's :class:`~punctual.models.JobSpec` as they are. Responses show
a job or an execution without internal bookkeeping (tenant, anchor, lease owner
tokens). Instants are RFC 3339 UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, PlainSerializer

from punctual.models import (
    Execution,
    ExecutionStatus,
    Job,
    JobSpec,
    JobState,
)


def _utc(value: datetime) -> str:
    """RFC 3339 UTC: whole seconds as ``...:00Z``, else milliseconds (``...:00.250Z``)."""
    spec = "seconds" if value.microsecond == 0 else "milliseconds"
    return value.astimezone(UTC).isoformat(timespec=spec).replace("+00:00", "Z")


Instant = Annotated[AwareDatetime, PlainSerializer(_utc, return_type=str, when_used="json")]


class JobOut(JobSpec):
    """A registered job as the API shows it: its spec plus identity, state and bookkeeping."""

    model_config = ConfigDict(extra="ignore")

    id: str
    state: JobState
    version: int = Field(description="Increases on every change; send it back in If-Match.")
    created_at: Instant
    updated_at: Instant
    next_fire_at: Instant | None = Field(
        default=None, description="The next scheduled instant (null when paused, completed or after())."
    )
    paused_at: Instant | None = None
    state_reason: str | None = None
    skipped_slots: int = 0

    @classmethod
    def of(cls, job: Job) -> JobOut:
        return cls.model_validate(job.model_dump(exclude={"tenant", "anchor", "signing_secret_enc"}))


class JobCreated(JobOut):
    """A job just registered: HTTP targets get their webhook signing secret here, once."""

    signing_secret: str | None = Field(
        default=None,
        description="HTTP targets only: the Standard Webhooks secret (whsec_...). Shown once; store it.",
    )


class JobPage(BaseModel):
    items: list[JobOut]
    next_token: str | None = Field(description="Pass as next_token for the next page; null on the last.")


class AttemptOut(BaseModel):
    attempt: int
    status: ExecutionStatus
    started_at: Instant | None = None
    finished_at: Instant | None = None
    error: str | None = None


class ExecutionOut(BaseModel):
    """One slot of a job: its latest attempt, and every attempt in ``attempts``."""

    job_id: str
    slot: str = Field(description="The slot key, e.g. 2026-11-30T09:32:00Z (run-now slots add ~m<hex>).")
    scheduled_at: Instant
    attempt: int
    status: ExecutionStatus
    started_at: Instant | None = None
    finished_at: Instant | None = None
    error: str | None = None
    result: str | None = None
    lease_until: Instant | None = None
    attempts: list[AttemptOut]

    @classmethod
    def of(cls, execution: Execution) -> ExecutionOut:
        data: dict[str, Any] = execution.model_dump(
            exclude={"tenant", "owner", "releases", "blocked_by", "job_version", "attempts"}
        )
        # Ended attempts are kept on the record; a live one is the record itself.
        history = [AttemptOut.model_validate(a.model_dump(exclude={"owner"})) for a in execution.attempts]
        if not any(a.attempt == execution.attempt for a in history):
            history.append(
                AttemptOut(
                    attempt=execution.attempt,
                    status=execution.status,
                    started_at=execution.started_at,
                    finished_at=execution.finished_at,
                    error=execution.error,
                )
            )
        return cls.model_validate({**data, "attempts": history})


class ExecutionPage(BaseModel):
    items: list[ExecutionOut]
    next_token: str | None


class TriggerAccepted(BaseModel):
    job_id: str
    slot: str = Field(description="The new slot's key: GET /v1/jobs/{id}/executions/{slot} follows it.")


class SchedulePreview(BaseModel):
    expression: str
    timezone: str
    slots: list[Instant]
