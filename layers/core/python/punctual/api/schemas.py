"""What the API answers: the response models of the OpenAPI document.

Requests use the core's :class:`~punctual.models.JobSpec`, as :class:`JobInput`: a job as
GET returns it may be sent back, its output-only fields (``readOnly`` in the document)
ignored. Responses show a job or an execution without internal bookkeeping (tenant,
anchor, lease owner tokens). Instants are RFC 3339 UTC.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    ValidationInfo,
    field_validator,
    model_validator,
)

from punctual.models import (
    ACCEPTED,
    SPEC_EXAMPLE,
    Alert,
    AlertCondition,
    AlertStatus,
    Execution,
    ExecutionStatus,
    Job,
    JobSpec,
    JobState,
    instant_in_years,
)
from punctual.models.base import instant_text
from punctual.store.base import UnreadableJob
from punctual.timing.instants import format_instant_adaptive
from punctual.usecases.backfills import Backfill, BackfillState
from punctual.usecases.calendars import Calendar, CalendarSpec

Instant = Annotated[
    AwareDatetime, PlainSerializer(format_instant_adaptive, return_type=str, when_used="json")
]


_READ_ONLY: dict[str, JsonValue] = {"readOnly": True}
JOB_EXAMPLE: dict[str, Any] = {
    **SPEC_EXAMPLE,
    "id": "3f2a9c0e5b7d4e1f8a6b2c9d0e1f2a3b",
    "state": "ENABLED",
    "version": 1,
    "created_at": "2026-11-30T09:00:00Z",
    "updated_at": "2026-11-30T09:00:00Z",
    "next_fire_at": "2026-12-01T01:00:00Z",
}


class JobOut(JobSpec):
    """A registered job as the API shows it: its spec plus identity, state and bookkeeping."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [JOB_EXAMPLE]})

    id: str = Field(description="The job's id, chosen by the API.", json_schema_extra=_READ_ONLY)
    state: JobState = Field(
        description="ENABLED, PAUSED, or COMPLETED (a one-time job done, or end_at passed).",
        json_schema_extra=_READ_ONLY,
    )
    version: int = Field(
        description="Increases on every change; send it back in If-Match.", json_schema_extra=_READ_ONLY
    )
    created_at: Instant = Field(description="When the job was registered.", json_schema_extra=_READ_ONLY)
    updated_at: Instant = Field(description="When the job last changed.", json_schema_extra=_READ_ONLY)
    next_fire_at: Instant | None = Field(
        default=None,
        description="The next scheduled instant (null when paused, completed, delay(...) or after()).",
        json_schema_extra=_READ_ONLY,
    )
    paused_at: Instant | None = Field(
        default=None,
        description=(
            "When the job was paused (null unless paused; null for a job created paused too: its "
            "resume owes no slot from before it)."
        ),
        json_schema_extra=_READ_ONLY,
    )
    state_reason: str | None = Field(
        default=None,
        description="Why the job was paused or completed when not by a user.",
        json_schema_extra=_READ_ONLY,
    )
    skipped_slots: int = Field(
        default=0,
        description=(
            "Slots not run so far by the job's own policies: SKIPPED by its overlap policy, or recorded "
            "MISSED (its catch-up policy or window, after a pause or an outage; a chain repaired): each "
            "slot of a MISSED range counts."
        ),
        json_schema_extra=_READ_ONLY,
    )

    @classmethod
    def of(cls, job: Job) -> JobOut:
        shown = job.model_dump(exclude={"tenant", "anchor", "signing_secret_enc"})
        if job.state is not JobState.PAUSED:  # kept by a resumed job (the owed slots count from it)
            shown["paused_at"] = None
        return cls.model_validate(shown, context=ACCEPTED)


OUTPUT_ONLY_FIELDS = frozenset({*(set(JobOut.model_fields) - set(JobSpec.model_fields)), "signing_secret"})
# What JobInput drops before validation: the output-only fields but ``state``, which a create
# reads (PAUSED: created paused).
_IGNORED_INPUT = OUTPUT_ONLY_FIELDS - {"state"}


def _output_only(description: str = "Output only; ignored.") -> Any:
    """A field GET shows that POST and PUT accept and ignore (documented ``readOnly``)."""
    return Field(default=None, exclude=True, description=description, json_schema_extra=_READ_ONLY)


class JobInput(JobSpec):
    """A job spec as POST and PUT take it.

    A job as GET returns it may be sent back as it is: its output-only fields (``readOnly``)
    are ignored, so get, edit, put works with any client.
    """

    model_config = ConfigDict(json_schema_extra={"examples": [SPEC_EXAMPLE]})

    id: str | None = _output_only()
    state: JobState | None = Field(
        default=None,
        exclude=True,
        description=(
            "On a create, PAUSED stores the job paused in the same write (no slot fires until it is "
            "resumed; EventBridge Scheduler's State DISABLED). Any other value, and any value on a "
            "replace, is ignored: pause and resume change a job's state."
        ),
    )
    version: int | None = _output_only("Output only; ignored (send If-Match to require a version).")
    created_at: str | None = _output_only()
    updated_at: str | None = _output_only()
    next_fire_at: str | None = _output_only()
    paused_at: str | None = _output_only()
    state_reason: str | None = _output_only()
    skipped_slots: int | None = _output_only()
    signing_secret: str | None = _output_only()

    @model_validator(mode="before")
    @classmethod
    def _ignore_output_only(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if key not in _IGNORED_INPUT}
        return data

    @property
    def paused(self) -> bool:
        """Whether a create stores the job paused (``state: PAUSED``)."""
        return self.state is JobState.PAUSED

    def spec(self) -> JobSpec:
        """The plain spec (validated already: nothing is checked again)."""
        fields = {name: getattr(self, name) for name in JobSpec.model_fields}
        return JobSpec.model_construct(self.model_fields_set & set(JobSpec.model_fields), **fields)


class UnreadableJobOut(BaseModel):
    """A stored job this version cannot read (stored by an older, laxer one).

    Replace it with PUT (any valid spec, If-Match its version) or delete it.
    """

    id: str = Field(description="The job's id.")
    state: str = Field(description="The state stored with it.")
    version: int = Field(description="Its version: send it in If-Match to replace or delete it.")
    unreadable: Literal[True] = Field(description="Always true: the marker of an unreadable job.")
    reason: str = Field(description="What today's model refuses in the stored job.")

    @classmethod
    def of(cls, job: UnreadableJob) -> UnreadableJobOut:
        return cls(id=job.id, state=job.state, version=job.version, unreadable=True, reason=job.reason)


class ListedState(StrEnum):
    """The states a job list can be filtered by (deleted jobs are not listed)."""

    ENABLED = "ENABLED"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"


class JobCreated(JobOut):
    """A job just registered: HTTP targets get their webhook signing secret here, once."""

    signing_secret: str | None = Field(
        default=None,
        description="HTTP targets only: the Standard Webhooks secret (whsec_...). Shown once; store it.",
        json_schema_extra=_READ_ONLY,
    )

    @classmethod
    def made(cls, job: Job, secret: str | None = None) -> JobCreated:
        """``job`` as just registered (or rotated), with its secret when one was made."""
        return cls.model_validate({**JobOut.of(job).model_dump(), "signing_secret": secret}, context=ACCEPTED)


class JobPage(BaseModel):
    """One page of jobs, ordered by id."""

    items: list[JobOut | UnreadableJobOut] = Field(
        description="The jobs; one stored job that cannot be read is shown as an UnreadableJobOut."
    )
    next_token: str | None = Field(description="Pass as next_token for the next page; null on the last.")


class AttemptOut(BaseModel):
    """One attempt of a slot."""

    attempt: int = Field(description="1 for the first attempt, then 2, 3, ...", examples=[1])
    status: ExecutionStatus = Field(description="How the attempt ended (or RUNNING).")
    started_at: Instant | None = Field(default=None, description="When a worker started it.")
    finished_at: Instant | None = Field(default=None, description="When it ended.")
    error: str | None = Field(default=None, description="Why it failed, timed out or was not run.")


class ExecutionOut(BaseModel):
    """One slot of a job: its latest attempt, and every attempt in ``attempts``."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "job_id": "3f2a9c0e5b7d4e1f8a6b2c9d0e1f2a3b",
                    "slot": "2026-12-01T01:00:00Z",
                    "scheduled_at": "2026-12-01T01:00:00Z",
                    "attempt": 1,
                    "status": "SUCCEEDED",
                    "started_at": "2026-12-01T01:00:00.042Z",
                    "finished_at": "2026-12-01T01:00:00.318Z",
                    "result": "HTTP 200",
                    "attempts": [{"attempt": 1, "status": "SUCCEEDED"}],
                }
            ]
        }
    )

    job_id: str = Field(description="The job's id.")
    slot: str = Field(
        description=(
            "The slot key: its instant, e.g. 2026-11-30T09:32:00Z; a run-now slot adds ~m<12 hex digits>"
            " (the first three: its milliseconds, so that a second's run-now slots sort in the order"
            " they were asked for)."
        ),
        examples=["2026-11-30T09:32:00Z", "2026-11-30T09:32:07Z~m1273f2a9c0e"],
    )
    scheduled_at: Instant = Field(
        description=(
            "When the slot was due to run: its instant, plus the job's jitter for a job with"
            " jitter_seconds (`slot` keeps the instant itself); an after() job's run its parents"
            " started: when they sent it."
        )
    )
    attempt: int = Field(description="The latest attempt's number.")
    status: ExecutionStatus = Field(description="The latest attempt's status.")
    started_at: Instant | None = Field(default=None, description="When the latest attempt started.")
    finished_at: Instant | None = Field(default=None, description="When the latest attempt ended.")
    error: str | None = Field(default=None, description="Why the latest attempt failed (or was not run).")
    result: str | None = Field(default=None, description="A short summary of the target's answer.")
    lease_until: Instant | None = Field(
        default=None, description="RUNNING only: when the worker's lease lapses unless extended."
    )
    attempts: list[AttemptOut] = Field(description="Every attempt, oldest first.")
    backfill: str | None = Field(
        default=None, description="The backfill that ran this slot (POST /v1/jobs/{id}/backfill), if one did."
    )
    job_version: int = Field(
        default=1,
        description=(
            "The job version the slot was released for: every attempt ran that version's spec"
            " (SUPERSEDED: the spec changed before the slot, or its next attempt, started)."
        ),
    )
    last_slot: str | None = Field(
        default=None,
        description="A MISSED range record: the last of the consecutive slots it stands for (from `slot`).",
    )
    slot_count: int = Field(
        default=1, description="How many slots the record stands for (more than 1: a MISSED range record)."
    )
    range_slot: str | None = Field(
        default=None,
        description=(
            "A slot asked for by its key that has no record of its own but is one of a MISSED range"
            " record's: the range's first slot, its record's key (`last_slot` and `slot_count` are the"
            " range's; GET /v1/jobs/{id}/executions/{slot} answers the range's record for each of its slots)."
        ),
    )
    job_deleted: bool = Field(
        default=False, description="True when the job was deleted: its history is kept until it expires."
    )

    @classmethod
    def of(
        cls, execution: Execution, job_deleted: bool = False, range_slot: str | None = None
    ) -> ExecutionOut:
        data: dict[str, Any] = execution.model_dump(
            exclude={
                "tenant",
                "owner",
                "releases",
                "blocked_by",
                "attempts",
                "backfill_dependants",
                "retry_after_s",
                "told_at",
            }
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
        return cls.model_validate(
            {**data, "attempts": history, "job_deleted": job_deleted, "range_slot": range_slot}
        )


class ExecutionPage(BaseModel):
    """One page of a job's executions, newest slot first."""

    items: list[ExecutionOut] = Field(description="The executions.")
    next_token: str | None = Field(description="Pass as next_token for the next page; null on the last.")
    job_deleted: bool = Field(
        default=False, description="True when the job was deleted: its history is kept until it expires."
    )


class TriggerAccepted(BaseModel):
    """A run-now slot was queued."""

    job_id: str = Field(description="The job's id.")
    slot: str = Field(
        description="The new slot's key: GET /v1/jobs/{id}/executions/{slot} follows it.",
        examples=["2026-11-30T09:32:07Z~m1273f2a9c0e"],
    )


class SchedulePreview(BaseModel):
    """The next slots of an expression."""

    expression: str = Field(description="The expression, as sent.", examples=["cron(0 9 ? * MON-FRI *)"])
    timezone: str = Field(description="The time zone it was read in.", examples=["Europe/Berlin"])
    slots: list[Instant] = Field(description="The next slots, as UTC instants.")
    excluded: list[Instant] | None = Field(
        default=None,
        description=(
            "With calendars and show_excluded: the slots passed over (on an excluded day) before the last one"
            " shown, as UTC instants."
        ),
    )


class UpcomingSlotOut(BaseModel):
    """One slot a job's chain releases next."""

    slot: Instant = Field(description="The slot's instant (its key in the job's history).")
    fires_at: Instant = Field(description="When it is released: the slot's instant, plus the job's jitter.")


class JobUpcoming(BaseModel):
    """The next slots a job releases, as the job is now (its schedule, start_at and end_at, time zone
    and DST options, jitter and the calendars it excludes)."""

    job_id: str = Field(description="The job's id.")
    state: str = Field(description="The job's state: only an ENABLED job releases slots.")
    slots: list[UpcomingSlotOut] = Field(
        description="In slot order (a jitter may release one before another)."
    )
    note: str | None = Field(default=None, description="Why no slot is listed, when none is.")


class AlertDeliveryOut(BaseModel):
    """What became of one rule's copy of an alert."""

    rule: int = Field(description="The rule's index in the job's alerts.")
    status: AlertStatus = Field(description="SENT, FAILED (every try failed), HELD (min_interval_seconds).")
    tries: int = Field(description="Delivery tries made.")
    error: str | None = Field(default=None, description="The last try's error.")
    held_back: int = Field(default=0, description="Alerts of this rule held back before this one.")
    sent_at: Instant | None = Field(default=None, description="When it was delivered.")


class AlertOut(BaseModel):
    """One alert: made once per (job, slot, condition); recovered once per failure streak."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "condition": "failed",
                    "slot": "2026-12-01T01:00:00Z",
                    "status": "SENT",
                    "created_at": "2026-12-01T01:00:07.120Z",
                    "summary": "job nightly-report: slot 2026-12-01T01:00:00Z FAILED after attempt 3",
                    "body": {"condition": "failed", "slot": "2026-12-01T01:00:00Z"},
                    "deliveries": [{"rule": 0, "status": "SENT", "tries": 1}],
                }
            ]
        }
    )

    condition: AlertCondition = Field(description="failed, late, missed or recovered.")
    slot: str = Field(description="The slot that raised it (recovered: the slot that succeeded).")
    key_slot: str = Field(description="The slot it is keyed on (recovered: the streak's first failed slot).")
    status: AlertStatus = Field(description="SENDING, SENT, FAILED or HELD.")
    created_at: Instant = Field(description="When it was raised.")
    summary: str = Field(description="One human-readable line.")
    body: dict[str, Any] = Field(description="The alert document the rules' targets received.")
    deliveries: list[AlertDeliveryOut] = Field(description="One per rule on this condition.")
    job_deleted: bool = Field(
        default=False,
        description="True when the job it was raised for was deleted (a job created again at the id"
        " came after it): kept until it expires.",
    )

    @classmethod
    def of(cls, alert: Alert, job_deleted: bool = False) -> AlertOut:
        return cls(
            condition=alert.condition,
            slot=str(alert.body.get("slot", alert.key_slot)),
            key_slot=alert.key_slot,
            status=alert.status,
            created_at=alert.created_at,
            summary=str(alert.body.get("summary", "")),
            body=alert.body,
            deliveries=[AlertDeliveryOut.model_validate(d.model_dump()) for d in alert.deliveries],
            job_deleted=job_deleted,
        )


class AlertList(BaseModel):
    """A job's last alerts, newest slot first."""

    items: list[AlertOut] = Field(description="The alerts.")
    job_deleted: bool = Field(
        default=False, description="True when the job was deleted: its alerts are kept until they expire."
    )


# --------------------------------------------------------------------------- calendars


class CalendarOut(CalendarSpec):
    """A calendar as the API shows it: its days, zone, name and version."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(description="The calendar's name (unique per tenant).", json_schema_extra=_READ_ONLY)
    version: int = Field(
        description="One more on every change; send it back in If-Match.", json_schema_extra=_READ_ONLY
    )
    created_at: Instant = Field(description="When the calendar was created.", json_schema_extra=_READ_ONLY)
    updated_at: Instant = Field(description="When the calendar last changed.", json_schema_extra=_READ_ONLY)

    @classmethod
    def of(cls, calendar: Calendar) -> CalendarOut:
        # accepted when written (a zone an older rule let in, such as 'posix/...', stays readable)
        return cls.model_validate(calendar.model_dump(exclude={"tenant"}), context=ACCEPTED)


class CalendarInput(CalendarSpec):
    """A calendar's days, as PUT takes them; a calendar as GET returns it may be sent back (its
    output-only fields are ignored)."""

    name: str | None = _output_only("Output only; ignored (the name is in the path).")
    version: int | None = _output_only("Output only; ignored (send If-Match to require a version).")
    created_at: str | None = _output_only()
    updated_at: str | None = _output_only()

    @model_validator(mode="before")
    @classmethod
    def _ignore_output_only(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if k not in ("name", "version", "created_at", "updated_at")}
        return data

    def spec(self) -> CalendarSpec:
        return CalendarSpec.model_validate(self.model_dump(include=set(CalendarSpec.model_fields)))


class CalendarPage(BaseModel):
    """One page of the caller's calendars, by name."""

    items: list[CalendarOut] = Field(description="The calendars.")
    next_token: str | None = Field(description="Pass as next_token for the next page; null on the last.")


# --------------------------------------------------------------------------- backfills


class BackfillRequest(BaseModel):
    """Run the job's past slots in [start, end) that have no execution yet."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"start": "2026-11-01T00:00:00Z", "end": "2026-11-08T00:00:00Z"}]},
    )

    start: AwareDatetime = Field(description="First instant of the range (RFC 3339 with offset), included.")
    end: AwareDatetime = Field(description="End of the range, excluded; not in the future.")
    include_dependants: bool = Field(
        default=False,
        strict=True,
        description="Also run the after() jobs of each backfilled slot that succeeds.",
    )
    max_parallel: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=100,
        description="Slots in flight at once (default: the deployment's; 1 for overlap skip and queue).",
    )

    @field_validator("start", "end", mode="before")
    @classmethod
    def _instant_text(cls, value: Any, info: ValidationInfo) -> Any:
        return instant_text(value, str(info.field_name))

    @field_validator("start", "end")
    @classmethod
    def _instant_range(cls, value: datetime, info: ValidationInfo) -> datetime:
        # QA22: an end no UTC date holds (9999-12-31T23:59:59-14:00) was a 500
        return instant_in_years(value, str(info.field_name))


class BackfillOut(BaseModel):
    """A backfill and its progress."""

    id: str = Field(description="The backfill's id: the same for the same job and range.")
    job_id: str = Field(description="The job backfilled.")
    start: Instant = Field(description="The range's start (included).")
    end: Instant = Field(description="The range's end (excluded).")
    state: BackfillState = Field(description="RUNNING, DONE (every slot ended) or CANCELLED.")
    reason: str | None = Field(default=None, description="Why it was cancelled, when not by a user.")
    slots: int = Field(description="Slots this backfill runs (those of the range without an execution).")
    already_run: int = Field(description="Slots of the range that had an execution: left alone.")
    excluded: int = Field(description="Slots of the range on a day of a calendar the job excludes.")
    dropped: int = Field(
        default=0,
        description="Slots not sent yet that the job's spec, replaced since, does not have: not run.",
    )
    include_dependants: bool = Field(description="Whether after() jobs run for its slots.")
    max_parallel: int = Field(description="Slots in flight at once.")
    progress: dict[str, int] = Field(
        description=(
            "Its slots by status: PENDING (not sent yet), SENT (sent, not yet started), and execution"
            " statuses (RUNNING, SUCCEEDED, FAILED, ...)."
        ),
        examples=[{"PENDING": 3, "RUNNING": 2, "SUCCEEDED": 19}],
    )
    created_at: Instant = Field(description="When it was created.")
    updated_at: Instant = Field(description="When it last moved.")

    @classmethod
    def of(cls, backfill: Backfill, progress: dict[str, int]) -> BackfillOut:
        data = backfill.model_dump(exclude={"slots", "tenant"})
        return cls.model_validate({**data, "slots": len(backfill.slots), "progress": progress})
