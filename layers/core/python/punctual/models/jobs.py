"""The job: what a user registers (:class:`JobSpec`) and what is stored (:class:`Job`).

Validation errors name the field and the problem; the API turns them into 422 problem
details. The schedule string is checked by :mod:`punctual.timing.schedules` so that an
expression that can never fire is refused at registration.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import Any, Final

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from punctual.models.alerts import MAX_ALERT_RULES, AlertRule
from punctual.models.base import (
    ACCEPTED,
    CALENDAR_NAME_RE,
    CALENDAR_NAME_RULE,
    CARRIED,
    MAX_DESCRIPTION_CHARS,
    MAX_ECS_TIMEOUT_S,
    MAX_JITTER_S,
    MAX_JOB_CALENDARS,
    MAX_LAMBDA_TIMEOUT_S,
    MAX_NAME_CHARS,
    MAX_PAYLOAD_BYTES,
    MAX_SCHEDULE_CHARS,
    MAX_TAG_KEY_CHARS,
    MAX_TAG_VALUE_CHARS,
    MAX_TAGS,
    MAX_TIMEZONE_CHARS,
    PAYLOAD_TOO_LARGE,
    StrictModel,
    _check_text,
    accepted_before,
    check_json_value,
    flag_field,
    instant_text,
    int_field,
    is_json_media_type,
    label_refusal,
    text_charset_problem,
    validator_without,
)
from punctual.models.policies import (
    CatchupPolicy,
    DeadLetterQueue,
    DstPolicy,
    Overlap,
    RetryPolicy,
    Runtime,
    SchedulerIdentity,
)
from punctual.models.targets import EventBridgeTarget, HttpTarget, Target
from punctual.timing import schedules

_COMPACT_JSON = json.JSONEncoder(
    separators=(",", ":")
)  # json.dumps(..., separators=...) without a new encoder a call

_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")
_ID_RE_STORED = re.compile(r"^[A-Za-z0-9_-]{1,64}\n?\Z")


@lru_cache(maxsize=1024)
def _check_zone(name: str) -> None:
    """``validate_timezone`` once per known zone name (every stored job is validated on read)."""
    schedules.validate_timezone(name)


SPEC_EXAMPLE: dict[str, Any] = {
    "name": "nightly-report",
    "schedule": "cron(0 2 * * ? *)",
    "timezone": "Europe/Berlin",
    "target": {"type": "http", "url": "https://hooks.example.com/report"},
    "payload": {"report": "daily", "slot": "<slot>"},
    "retry": {"max_attempts": 5, "backoff": "exponential", "base_seconds": 2, "max_seconds": 300},
    "timeout_seconds": 60,
    "overlap": "skip",
    "tags": {"team": "data"},
}


def instant_in_years(value: datetime, field: str) -> datetime:
    """``value`` when it is an instant of the years schedules have (UTC), else a ``ValueError``
    naming ``field`` (also for one no UTC date can hold: 9999-12-31T23:00:00-14:00)."""
    try:
        year = value.astimezone(UTC).year
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        year = 0
    if not schedules.MIN_YEAR <= year <= schedules.MAX_YEAR:
        raise ValueError(
            f"{field} must be between {schedules.MIN_YEAR}-01-01 and {schedules.MAX_YEAR}-12-31 (UTC)"
        )
    return value


class JobSpec(StrictModel):
    """What a user registers. Everything a job does comes from here."""

    model_config = ConfigDict(json_schema_extra={"examples": [SPEC_EXAMPLE]})

    name: str = Field(
        default="",
        max_length=MAX_NAME_CHARS,
        description="A label for people; need not be unique (the id is).",
        examples=["nightly-report"],
    )
    description: str = Field(
        default="", max_length=MAX_DESCRIPTION_CHARS, description="Free text for people."
    )
    schedule: str = Field(
        min_length=1,
        max_length=MAX_SCHEDULE_CHARS,
        description=(
            "When the job runs: cron(...) (AWS 6 fields), 5-field Unix cron, rate(n unit), at(local time), "
            "delay(n unit) (after the previous run ends) or after(job-id, ...) (when the parents succeed)."
        ),
        examples=["cron(0 2 * * ? *)", "*/15 * * * *", "rate(5 minutes)", "at(2027-01-01T09:00:00)"],
    )
    timezone: str = Field(
        default="UTC",
        min_length=1,
        max_length=MAX_TIMEZONE_CHARS,
        description="IANA time zone the schedule is read in.",
        examples=["Europe/Berlin"],
    )
    start_at: AwareDatetime | None = Field(
        default=None,
        description="No slot before this instant; rate(...) counts from it (RFC 3339 with offset).",
        examples=["2027-01-01T00:00:00Z"],
    )
    end_at: AwareDatetime | None = Field(
        default=None,
        description="No slot after this instant; the job is then COMPLETED.",
        examples=["2027-12-31T23:59:59Z"],
    )
    target: Target = Field(description="What each slot calls, selected by `type`.")
    payload: Any = Field(
        default=None,
        description=(
            "Any JSON value (at most 256 KB, 32 levels deep, 10,000 members; no NaN or Infinity) sent to "
            "the target. Strings anywhere in it may hold the placeholders <job_id>, <slot>, <attempt> and "
            "<scheduled_at>, filled per run. HTTP: sent as JSON, or a string as it is when the target's "
            "Content-Type header is not JSON."
        ),
        examples=[{"report": "daily", "key": "<job_id>:<slot>"}],
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy, description="How a failed attempt is retried.")
    timeout_seconds: int = int_field(
        300,
        "Each attempt's time limit; at most 840 for runtime lambda, 604800 for ecs.",
        ge=1,
        le=MAX_ECS_TIMEOUT_S,
    )
    runtime: Runtime = Field(
        default=Runtime.LAMBDA,
        description="Which workers run the slot: lambda (attempts up to 14 minutes) or ecs (long jobs).",
    )
    overlap: Overlap = Field(
        default=Overlap.ALLOW,
        description=(
            "A slot due while the previous one still runs: allow (run both), skip (record it SKIPPED) or "
            "queue (run it when the previous one ends)."
        ),
    )
    catchup: CatchupPolicy = Field(
        default_factory=CatchupPolicy,
        description="What happens to slots missed while the job was paused or the scheduler was down.",
    )
    jitter_seconds: int = int_field(
        0,
        "Delay each slot by a stable pseudo-random 0..n seconds (spreads load; at most a day).",
        ge=0,
        le=MAX_JITTER_S,
    )
    max_lateness_seconds: int | None = Field(
        default=None,
        ge=0,
        le=3600,
        strict=True,
        description=(
            "Burst smoothing: how long after its instant a slot may be held back to keep its target"
            " within its rate budget (None: the deployment's default, 10 s). Never exceeded: past it"
            " the slot fires on time and an overrun is reported."
        ),
    )
    dst: DstPolicy | None = Field(
        default=None,
        description=(
            "Daylight-saving behaviour of fixed-time expressions; default: a skipped time fires right after"
            " the gap, a repeated time fires once."
        ),
    )
    tags: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_TAGS,
        description="Up to 50 key/value labels; GET /v1/jobs filters by them.",
        examples=[{"team": "data"}],
    )
    dead_letter: DeadLetterQueue | None = Field(
        default=None, description="Where a slot's event goes after its last attempt failed (SQS)."
    )
    events_bus: EventBridgeTarget | None = Field(
        default=None,
        description="A bus of yours that gets a copy of this job's execution events (as its role).",
    )
    delete_after_completion: bool = flag_field(
        False, "Delete the job once it is COMPLETED (a one-time at(), or end_at passed) and its slot ended."
    )
    scheduler: SchedulerIdentity | None = Field(
        default=None,
        description="Set by the EventBridge Scheduler API (/schedules): the schedule's group, name and ARN.",
    )
    alerts: list[AlertRule] = Field(
        default_factory=list,
        max_length=MAX_ALERT_RULES,
        description=(
            "Up to 10 alert rules: who is told when a slot fails, runs late, is missed, or the job recovers."
            " Each alert is sent once per slot and condition (recovered: once per failure streak)."
        ),
    )
    exclude_calendars: list[str] = Field(
        default_factory=list,
        max_length=MAX_JOB_CALENDARS,
        description=(
            "Names of the tenant's calendars (PUT /v1/calendars/{name}) whose days this job does not"
            " fire on: such a slot is recorded EXCLUDED instead of run. Checked at each slot's release,"
            " so a calendar change applies from the next slot on."
        ),
        examples=[["public-holidays"]],
    )

    @field_validator("exclude_calendars")
    @classmethod
    def _calendars(cls, value: list[str], info: ValidationInfo) -> list[str]:
        for name in value:  # (a stored job's names: checked when it was written, under that rule)
            if not accepted_before(info.context) and not CALENDAR_NAME_RE.fullmatch(name):
                raise ValueError(f"calendar name {name[:80]!r}: {CALENDAR_NAME_RULE}")
        if len(set(value)) != len(value):
            raise ValueError("a calendar is named twice")
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str, info: ValidationInfo) -> str:
        try:
            _check_zone(value)
            if not accepted_before(info.context):
                schedules.check_place(value)
        except schedules.ScheduleError as exc:  # the field is named once, by the error's location
            raise ValueError(str(exc).removeprefix("timezone: ")) from None
        return value

    @field_validator("target", mode="before")
    @classmethod
    def _target_type(cls, value: Any) -> Any:
        if isinstance(value, dict) and "type" not in value:
            if "url" in value:
                return {**value, "type": "http"}  # the schema's default type: a webhook
            raise ValueError(
                "type is required: http, lambda, sqs, sns, eventbridge, stepfunctions or ecs"
                " (http when the target has a url)"
            )
        return value

    @field_validator("schedule")
    @classmethod
    def _expression_text(cls, value: str, info: ValidationInfo) -> str:
        if accepted_before(info.context):
            return value
        try:
            schedules.check_new_expression(value)
        except schedules.ScheduleError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("start_at", "end_at", mode="before")
    @classmethod
    def _instant_text(cls, value: Any, info: ValidationInfo) -> Any:
        return instant_text(value, str(info.field_name))

    @field_validator("start_at", "end_at")
    @classmethod
    def _instant_range(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        if value is None or accepted_before(info.context):
            return value
        return instant_in_years(value, str(info.field_name))

    @field_validator("name")
    @classmethod
    def _name(cls, value: str, info: ValidationInfo) -> str:
        if any(ord(ch) < 32 for ch in value):
            raise ValueError("name must not contain control characters")
        refusal = None if accepted_before(info.context) else label_refusal(value)  # (input only)
        if refusal is not None:
            raise ValueError(f"name {refusal}")
        return value

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if len(value) > MAX_TAGS:
            raise ValueError(f"at most {MAX_TAGS} tags")
        for key, tag_value in value.items():
            _check_text(key, "tag key")  # a lone surrogate: not Unicode, no UTF-8 form to store
            _check_text(tag_value, f"tag {key.encode('utf-8', 'backslashreplace').decode()!r}")
            if not 1 <= len(key) <= MAX_TAG_KEY_CHARS:
                raise ValueError(f"tag keys must be 1-{MAX_TAG_KEY_CHARS} characters")
            if "=" in key and not accepted_before(info.context):  # (input only: stored ones stay readable)
                raise ValueError(
                    f"tag key {key!r} holds '=': a list's ?tag=key=value filter could never name it"
                )
            if len(tag_value) > MAX_TAG_VALUE_CHARS:
                raise ValueError(f"tag {key!r}: value longer than {MAX_TAG_VALUE_CHARS} characters")
            if not accepted_before(info.context):  # (input only: stored ones stay readable)
                if (refusal := label_refusal(key)) is not None:
                    raise ValueError(f"tag key {key!r} {refusal}")
                if (refusal := label_refusal(tag_value)) is not None:
                    raise ValueError(f"tag {key!r}: value {refusal}")
        return value

    @field_validator("payload")
    @classmethod
    def _payload_size(cls, value: Any, info: ValidationInfo) -> Any:
        if info.context and info.context.get(
            CARRIED
        ):  # checked when stored: punctual.dispatch.queues.job_from_spec
            return value
        bound = check_json_value(value)
        if bound is not None and bound <= MAX_PAYLOAD_BYTES:
            return value  # (its encoding, at most ``bound`` bytes, need not be measured)
        size = len(_COMPACT_JSON.encode(value).encode())
        if size > MAX_PAYLOAD_BYTES:
            raise ValueError(f"payload is {size} bytes, {PAYLOAD_TOO_LARGE} {MAX_PAYLOAD_BYTES} allowed")
        return value

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> JobSpec:
        if info.context and info.context.get(CARRIED):  # checked when stored (see _payload_size)
            return self
        if self.start_at and self.end_at and self.end_at <= self.start_at:
            raise ValueError("end_at must be after start_at")
        if isinstance(self.target, HttpTarget):
            if self.target.method == "GET" and self.payload is not None and not accepted_before(info.context):
                # (QA17: taken, and silently never sent)
                raise ValueError(
                    "payload: a GET request carries no body; leave the payload out, or use another method"
                )
            content_type = self.target.content_type() if self.target.headers else None
            if (
                content_type
                and not is_json_media_type(content_type)
                and not (self.payload is None or isinstance(self.payload, str))
            ):
                raise ValueError(
                    f"payload must be a string when target.headers Content-Type is {content_type[:80]!r}"
                    " (only JSON media types carry a JSON payload)"
                )
            if (
                content_type
                and isinstance(self.payload, str)
                and not is_json_media_type(content_type)
                and (problem := text_charset_problem(self.payload, content_type)) is not None
                and not accepted_before(info.context)
            ):
                raise ValueError(f"payload: {problem}")  # (QA22: sent as UTF-8 whatever it named)
        if self.runtime is Runtime.LAMBDA and self.timeout_seconds > MAX_LAMBDA_TIMEOUT_S:
            raise ValueError(
                f"timeout_seconds {self.timeout_seconds} exceeds {MAX_LAMBDA_TIMEOUT_S} for runtime 'lambda';"
                " use runtime 'ecs' for long jobs"
            )
        try:
            parsed = self.parsed_schedule()
        except schedules.ScheduleError as exc:
            raise ValueError(f"schedule: {exc}") from None
        twice = parsed.kind == "at" and self.dst is not None and self.dst.repeat == "both"
        if twice and not accepted_before(info.context):  # (QA17: a one-time job fired twice)
            raise ValueError(f"dst: {schedules.AT_FIRES_ONCE}")
        if parsed.kind == "after" and self.jitter_seconds and not accepted_before(info.context):
            # (QA17: taken and ignored: a child is sent when its last parent succeeds)
            raise ValueError(
                "jitter_seconds: an after() job runs when its parents succeed, at no instant of its"
                " own to spread; leave it 0"
            )
        if self.start_at and self.end_at and parsed.kind not in ("after", "delay"):
            start = self.start_at.astimezone(UTC)
            first = parsed.next_after(start - timedelta(seconds=1), anchor=start)
            if first is None or first > self.end_at:
                raise ValueError("schedule has no slot between start_at and end_at")
        return self

    def parsed_schedule(self) -> schedules.Schedule:
        """The parsed schedule (cached parsing lives in :mod:`punctual.timing.schedules`)."""
        return schedules.cached_schedule(
            self.schedule, self.timezone, self.dst.options() if self.dst else None
        )


class JobState(StrEnum):
    """A job's state: ENABLED, PAUSED, COMPLETED (one-time done or end_at passed), DELETED."""

    ENABLED = "ENABLED"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    DELETED = "DELETED"


class ChainRestart(BaseModel):
    """A write that restarted a job's chain: the old chain's timers carry versions from
    ``from_version`` up to ``until_version``, its slots due by ``at`` (the write's instant, or the
    pause's when the job was paused then: later ones are the resume's) are owed, on ``timing`` (its
    timing fields as JSON when the write changed them; None: the next chain's)."""

    model_config = ConfigDict(extra="ignore")

    until_version: int
    at: AwareDatetime
    timing: dict[str, Any] | None = None
    from_version: int = 0


class Job(JobSpec):
    """A registered job: the spec plus identity, state and bookkeeping."""

    model_config = ConfigDict(extra="ignore")

    id: str
    tenant: str = "default"
    state: JobState = JobState.ENABLED
    version: int = 1
    created_at: AwareDatetime
    updated_at: AwareDatetime
    anchor: AwareDatetime  # registration instant (or start_at): rate/delay count from here
    next_fire_at: AwareDatetime | None = None
    skipped_slots: int = 0
    paused_at: AwareDatetime | None = None
    dependents: int = Field(default=0, exclude=True)  # store-maintained: jobs whose schedule is after(this)
    # Micro-triggers per minute this job adds to its tenant's total (punctual.security.quotas); 0 for jobs
    # stored before the quota existed, which were never added.
    trigger_rate: int = Field(default=0, exclude=True)
    state_reason: str | None = None  # why the job was paused or completed, when not by a user
    # The version whose spec this is: a replace sets it, pause and resume keep it (0: stored
    # before it was kept, read as ``version``). Slots released for an older spec are superseded.
    spec_version: int = 0
    # A paused job: the first slot due before the pause that was not released (the resume owes it).
    owed_from: str | None = None
    # A delay(...) job changed while this slot's run was in flight: that run's end starts its
    # chain (punctual.usecases.delay_chains).
    delay_after: str | None = None
    # A replace made ``overlap`` stricter than ``allow`` while runs it started may still be in
    # flight (they take no turn): until then a slot that gets the turn looks for one
    # (punctual.execution.turns; :func:`overlap_checks_until`).
    overlap_checks_until: AwareDatetime | None = None
    # The writes that restarted the job's chain at a new version (a replace, a secret rotation),
    # oldest first, the last MAX_RESTARTS: an old chain's slots due by its end that no poller had
    # released are still owed, on its own timing (punctual.dispatch.polling.chains).
    restarts: list[ChainRestart] = Field(default_factory=list)
    signing_secret_enc: str | None = Field(default=None, exclude=True, repr=False)
    # While a secret is rotated, the previous one still signs (Standard Webhooks sends both).
    signing_secret_prev_enc: str | None = Field(default=None, exclude=True, repr=False)

    @field_validator("id")
    @classmethod
    def _id(cls, value: str, info: ValidationInfo) -> str:
        # A stored job's id: as the rule was (its $ let a final newline through), so it stays readable.
        if not (_ID_RE_STORED if accepted_before(info.context) else _ID_RE).match(value):
            raise ValueError("job id must be 1-64 characters of letters, digits, '-' and '_'")
        return value

    def spec(self) -> JobSpec:
        return JobSpec.model_validate(self.model_dump(include=set(JobSpec.model_fields)), context=ACCEPTED)

    @property
    def spec_since(self) -> int:
        """The version from which the job's spec is the one it has now."""
        return self.spec_version or self.version


_CARRIED: Final = {CARRIED: True}
_CARRIED_TYPES = validator_without(Job)
# A stored job's read leaves out the validators that do nothing for it (input-only rules, each
# returning at once for a job accepted before) and the repair of an old document's target without
# its type (a document without it is then validated in full, which repairs it).
_STORED_READ = validator_without(
    Job, {"JobSpec._expression_text", "JobSpec._instant_range", "JobSpec._target_type"}
)


def read_accepted(document: str) -> Job:
    """``Job.model_validate_json(document, context=ACCEPTED)``: the same job, or the same error,
    without a Python call for the validators that do nothing for a stored job (about 1 µs of
    each of the poller's reads)."""
    try:
        job: Job = _STORED_READ.validate_json(document, context=ACCEPTED)
    except ValidationError:
        return Job.model_validate_json(document, context=ACCEPTED)  # decides, errors included
    return job


def read_carried(document: str) -> Job:
    """The job a dispatch message carries (its :class:`Job` JSON; ValueError when it does not read).

    Its types are validated (a field of the wrong type, a missing one, a string too long, a value
    out of range: refused); its rules, the Python validators, are not checked again: the message
    is signed by the scheduler, whose read of the job checked them (as the store's rules: for a
    carried job no rule of the input is stricter) a moment before. Each rule is a Python call
    (about 0.4 µs), half the worker's parse of the job. A document its types alone refuse is
    validated in full, with the rules, which decide as before (an old document's target without
    its type, which a rule reads as a webhook's)."""
    try:
        carried: Job = _CARRIED_TYPES.validate_json(document)  # (no rule to read a context)
    except ValidationError:
        return Job.model_validate_json(document, context=_CARRIED)
    return carried


# --------------------------------------------------------------------------- executions


# What decides a job's slot instants (a replace that changes one of them moves its chain's slots).
SLOT_FIELDS = ("schedule", "timezone", "start_at", "end_at", "dst", "anchor")  # its nominal slots
TIMING_FIELDS = (*SLOT_FIELDS, "jitter_seconds")  # and when each is dispatched
MAX_RESTARTS = 8  # kept on the job: a chain older than these when its timer is met is stale


METADATA_FIELDS = ("name", "description", "tags")  # what a job is called, not what or when it runs


def only_labels_differ(job: Job, spec: JobSpec) -> bool:
    """Whether ``spec`` (as accepted) is ``job``'s own but for its :data:`METADATA_FIELDS`: no run
    would differ (a replace of it supersedes nothing, and leaves a COMPLETED job completed)."""
    labels = set(METADATA_FIELDS)
    return job.spec().model_dump(exclude=labels) == spec.model_dump(exclude=labels)


def replaced_state(current: Job, labels_only: bool) -> dict[str, Any]:
    """The state of ``current`` once a new spec replaces it: a COMPLETED job is ENABLED again (a new
    schedule may run), unless only its labels change (``labels_only``: :func:`only_labels_differ`
    of the stored job): then it stays COMPLETED, its reason kept (QA23: a rename re-enabled it, and a
    one-time job past its instant was refused with "no future slot"). A paused job stays paused, its
    reason kept (QA23: a replace dropped why its target had paused it)."""
    if current.state is JobState.PAUSED:  # still paused: why it was stays (its target asked, ...)
        return {"state": current.state, "state_reason": current.state_reason}
    if current.state is not JobState.COMPLETED:
        return {"state": current.state}
    if labels_only:
        return {"state": JobState.COMPLETED, "state_reason": current.state_reason}
    return {"state": JobState.ENABLED}


def restarted(old: Job, new: Job, at: datetime) -> list[ChainRestart]:
    """``new``'s restarts: ``old``'s and the end of ``old``'s chain at ``at`` (with ``old``'s timing
    when ``new`` changes it)."""
    kept = all(getattr(old, name) == getattr(new, name) for name in TIMING_FIELDS)
    timing = None if kept else old.model_dump(mode="json", include=set(TIMING_FIELDS))
    if old.state is JobState.PAUSED and old.paused_at is not None:
        at = min(at, old.paused_at)  # its chain ended at the pause: what came due since, the resume owes
    # Its first chain starts at its creation's version: a job created again at a deleted job's id
    # starts past that job's versions, whose timers and messages are not its own (review: the
    # deleted job's released slot ran on the new one after an edit). With no restart kept, the
    # spec is still its creation's (pause and resume keep spec_version; 0: stored before it).
    first = old.restarts[-1].until_version + 1 if old.restarts else (old.spec_version or 1)
    restart = ChainRestart(until_version=old.version, at=at, timing=timing, from_version=first)
    return [*old.restarts, restart][-MAX_RESTARTS:]


# How long after a replace a run started under ``allow`` may still be in flight, beyond its
# timeout: a slot released before the change may start with the job its message carries (5 s),
# and its worker records its end up to 30 s after the timeout.
ALLOW_RUNS_MARGIN_S = 60


def replaced(old: Job, new: Job, at: datetime) -> dict[str, Any]:
    """What a replace of ``old`` by ``new`` at ``at`` keeps of the old job: its chain's end
    (:func:`restarted`), and :attr:`Job.overlap_checks_until`: a change from ``allow`` to ``skip``
    or ``queue`` leaves ``old``'s runs in flight, holding no turn, for at most their timeout (their
    next attempts are superseded by the change); another change keeps what ``old`` had, and
    ``allow`` takes no turn at all."""
    until = old.overlap_checks_until
    if new.overlap is Overlap.ALLOW:
        until = None
    elif old.overlap is Overlap.ALLOW:
        until = at + timedelta(seconds=old.timeout_seconds + ALLOW_RUNS_MARGIN_S)
    return {"restarts": restarted(old, new, at), "overlap_checks_until": until}


def chain_end(job: Job, version: int) -> tuple[ChainRestart, Job] | None:
    """The restart that ended the chain whose timers carry ``version`` (older than the job's), and
    the job on that chain's timing (itself when no restart since moved it); None: not kept."""
    if job.restarts and version < job.restarts[0].from_version:
        return None  # older than the restarts kept (more than MAX_RESTARTS since): not known
    for index, restart in enumerate(job.restarts):
        if restart.until_version >= version:
            timing = next((later.timing for later in job.restarts[index:] if later.timing), None)
            if timing is None:
                return restart, job
            return restart, Job.model_validate({**job.model_dump(), **timing}, context=ACCEPTED)
    return None
