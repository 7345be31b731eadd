"""The vocabulary: what a user registers (JobSpec), what is stored (Job, Execution).

Validation errors name the field and the problem; the API turns them into 422 problem
details. The schedule string is checked by :mod:`punctual.schedules` so that an
expression that can never fire is refused at registration.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticUndefined

from punctual import schedules

MAX_PAYLOAD_BYTES = 256 * 1024
MAX_NAME_CHARS = 128
MAX_DESCRIPTION_CHARS = 1024
MAX_TAGS = 50
MAX_TAG_KEY_CHARS = 128
MAX_TAG_VALUE_CHARS = 256
MAX_LAMBDA_TIMEOUT_S = 840  # leaves the worker Lambda a minute of its 15 to record the result
MAX_ECS_TIMEOUT_S = 7 * 24 * 3600
MAX_HEADERS = 50
MAX_ATTEMPT_RECORDS = 20  # the bounded list of past attempts on an execution record

_COMPACT_JSON = json.JSONEncoder(
    separators=(",", ":")
)  # json.dumps(..., separators=...) without a new encoder a call
_object_setattr = object.__setattr__
_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class _Strict(BaseModel):
    """Base for user input: unknown fields are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


# --------------------------------------------------------------------------- targets

_ARN_RE = re.compile(
    r"^arn:(?P<partition>aws|aws-cn|aws-us-gov):(?P<service>[a-z0-9-]+):(?P<region>[a-z]{2}(-[a-z]+)+-\d)"
    r":(?P<account>\d{12}):(?P<resource>.+)$"
)


_PARTITION_REGIONS = {"aws-cn": "cn-", "aws-us-gov": "us-gov-"}

# Resource names as each service allows them (the part after the prefix). The SQS
# adapter builds the queue URL from the name, so it must be a plain name.
SQS_QUEUE_RE = r"[A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo"
SNS_TOPIC_RE = r"[A-Za-z0-9_-]{1,256}|[A-Za-z0-9_-]{1,251}\.fifo"
LAMBDA_FUNCTION_RE = r"[A-Za-z0-9_-]{1,64}(:(\$LATEST|[0-9]+|[A-Za-z0-9_-]{1,128}))?"
EVENT_BUS_RE = r"[A-Za-z0-9._/-]{1,256}"
STATE_MACHINE_RE = r"[^\s<>{}\[\]?*\"#%\\^|~`$&,;:/]{1,80}(:[A-Za-z0-9_-]{1,80})?"
ECS_CLUSTER_RE = r"[A-Za-z0-9_-]{1,255}"
ECS_TASK_DEFINITION_RE = r"[A-Za-z0-9_-]{1,255}(:[0-9]{1,10})?"
IAM_ROLE_RE = r"([A-Za-z0-9+=,.@_-]{1,512}/)*[A-Za-z0-9+=,.@_-]{1,64}"
_IAM_ROLE_ARN_RE = re.compile(r"^arn:(aws|aws-cn|aws-us-gov):iam::\d{12}:role/" + IAM_ROLE_RE + "$")


def check_arn(
    value: str, service: str, resource_prefix: str | None = None, resource_pattern: str | None = None
) -> str:
    """Validate an ARN's shape: partition, service, region, 12-digit account, resource.

    ``resource_pattern`` (a regular expression) must match the whole resource after
    ``resource_prefix``; the partition must fit the region (``aws-cn`` with ``cn-*``).
    """
    if len(value) > 2048:
        raise ValueError("ARN is longer than 2048 characters")
    match = _ARN_RE.match(value)
    if not match:
        raise ValueError(f"not a valid ARN (arn:aws:{service}:<region>:<12-digit account>:...): {value!r}")
    if match.group("service") != service:
        raise ValueError(f"ARN names service {match.group('service')!r}, expected {service!r}")
    partition, region = match.group("partition"), match.group("region")
    expected_prefix = _PARTITION_REGIONS.get(partition)
    in_special = any(region.startswith(prefix) for prefix in _PARTITION_REGIONS.values())
    if (expected_prefix and not region.startswith(expected_prefix)) or (not expected_prefix and in_special):
        raise ValueError(f"region {region!r} is not in partition {partition!r}")
    resource = match.group("resource")
    if resource_prefix and not resource.startswith(resource_prefix):
        raise ValueError(f"ARN resource must start with {resource_prefix!r}")
    name = resource[len(resource_prefix or "") :]
    if resource_pattern and not re.fullmatch(resource_pattern, name):
        raise ValueError(f"invalid {service} resource name {name!r} in ARN")
    return value


class HttpTarget(_Strict):
    """A webhook: the payload is POSTed (or sent with ``method``) to ``url``, signed."""

    type: Literal["http"] = "http"
    url: str = Field(min_length=1, max_length=2048)
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    follow_redirects: bool = False

    @field_validator("url")
    @classmethod
    def _url_scheme(cls, value: str) -> str:
        lowered = value.lower()
        if not (lowered.startswith("http://") or lowered.startswith("https://")):
            raise ValueError("url must start with http:// or https://")
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_HEADERS:
            raise ValueError(f"at most {MAX_HEADERS} headers")
        for name, header_value in value.items():
            if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,256}", name):
                raise ValueError(f"invalid header name {name!r}")
            if "\r" in header_value or "\n" in header_value or len(header_value) > 8192:
                raise ValueError(f"invalid value for header {name!r}")
        return value


class _AwsTarget(_Strict):
    """An AWS service target; ``role_arn`` is the execution role the worker assumes to call it.

    As with EventBridge Scheduler, the role's trust policy lets the scheduler's workers assume
    it with ``sts:ExternalId`` equal to the tenant's id (see the README); without a role the
    workers call the target with the deployment's own target role.
    """

    role_arn: str | None = Field(default=None, max_length=2048)

    @field_validator("role_arn")
    @classmethod
    def _role(cls, value: str | None) -> str | None:
        if value is not None and not _IAM_ROLE_ARN_RE.match(value):
            raise ValueError(
                f"role_arn must be an IAM role ARN (arn:aws:iam::<12-digit account>:role/<name>): {value!r}"
            )
        return value


class LambdaTarget(_AwsTarget):
    type: Literal["lambda"] = "lambda"
    function_arn: str
    invocation_type: Literal["RequestResponse", "Event"] = "RequestResponse"

    @field_validator("function_arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        return check_arn(value, "lambda", "function:", LAMBDA_FUNCTION_RE)


class SqsTarget(_AwsTarget):
    type: Literal["sqs"] = "sqs"
    queue_arn: str
    message_group_id: str | None = Field(default=None, max_length=128)

    @field_validator("queue_arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        return check_arn(value, "sqs", None, SQS_QUEUE_RE)


class SnsTarget(_AwsTarget):
    type: Literal["sns"] = "sns"
    topic_arn: str

    @field_validator("topic_arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        return check_arn(value, "sns", None, SNS_TOPIC_RE)


class EventBridgeTarget(_AwsTarget):
    type: Literal["eventbridge"] = "eventbridge"
    event_bus_arn: str
    detail_type: str = Field(default="Punctual Scheduled Job", min_length=1, max_length=128)
    source: str = Field(default="punctual", min_length=1, max_length=256)

    @field_validator("event_bus_arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        return check_arn(value, "events", "event-bus/", EVENT_BUS_RE)


class StepFunctionsTarget(_AwsTarget):
    type: Literal["stepfunctions"] = "stepfunctions"
    state_machine_arn: str

    @field_validator("state_machine_arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        return check_arn(value, "states", "stateMachine:", STATE_MACHINE_RE)


class EcsTarget(_AwsTarget):
    type: Literal["ecs"] = "ecs"
    cluster_arn: str
    task_definition_arn: str
    subnets: list[str] = Field(min_length=1, max_length=16)
    security_groups: list[str] = Field(default_factory=list, max_length=5)
    assign_public_ip: bool = False
    container_name: str | None = Field(default=None, max_length=255)
    launch_type: Literal["FARGATE", "EC2"] = "FARGATE"

    @field_validator("cluster_arn")
    @classmethod
    def _cluster(cls, value: str) -> str:
        return check_arn(value, "ecs", "cluster/", ECS_CLUSTER_RE)

    @field_validator("task_definition_arn")
    @classmethod
    def _task(cls, value: str) -> str:
        return check_arn(value, "ecs", "task-definition/", ECS_TASK_DEFINITION_RE)


Target = Annotated[
    HttpTarget | LambdaTarget | SqsTarget | SnsTarget | EventBridgeTarget | StepFunctionsTarget | EcsTarget,
    Field(discriminator="type"),
]


# --------------------------------------------------------------------------- policies


class Backoff(StrEnum):
    FIXED = "fixed"
    LINEAR = "linear"
    EXPONENTIAL = "exponential"


class RetryPolicy(_Strict):
    """How a failed attempt is retried. ``max_attempts`` counts the first attempt."""

    max_attempts: int = Field(default=3, ge=1, le=100)
    backoff: Backoff = Backoff.EXPONENTIAL
    base_seconds: float = Field(default=2.0, gt=0, le=86400)
    max_seconds: float = Field(default=300.0, gt=0, le=7 * 86400)
    jitter: bool = True
    max_age_seconds: int = Field(default=86400, ge=1, le=30 * 86400)

    @model_validator(mode="after")
    def _cap_above_base(self) -> RetryPolicy:
        if self.max_seconds < self.base_seconds:
            raise ValueError("retry.max_seconds must be at least retry.base_seconds")
        return self


class Overlap(StrEnum):
    ALLOW = "allow"
    SKIP = "skip"
    QUEUE = "queue"


class CatchupKind(StrEnum):
    ALL = "all"
    LATEST = "latest"
    NONE = "none"


class CatchupPolicy(_Strict):
    """What happens to slots missed while the scheduler was down or the job paused."""

    # Exactly once means not zero times: by default every slot owed within the window runs.
    policy: CatchupKind = CatchupKind.ALL
    window_seconds: int = Field(default=3600, ge=0, le=7 * 86400)


class DstPolicy(_Strict):
    """Overrides for fixed-time expressions around daylight-saving transitions."""

    gap: Literal["shift", "skip"] | None = None
    repeat: Literal["first", "both"] | None = None

    def options(self) -> schedules.DstOptions:
        return schedules.DstOptions(gap=self.gap, repeat=self.repeat)


class Runtime(StrEnum):
    LAMBDA = "lambda"
    ECS = "ecs"


# --------------------------------------------------------------------------- the job


@lru_cache(maxsize=1024)
def _check_zone(name: str) -> None:
    """``validate_timezone`` once per known zone name (every stored job is validated on read)."""
    schedules.validate_timezone(name)


class JobSpec(_Strict):
    """What a user registers. Everything a job does comes from here."""

    name: str = Field(default="", max_length=MAX_NAME_CHARS)
    description: str = Field(default="", max_length=MAX_DESCRIPTION_CHARS)
    schedule: str = Field(min_length=1, max_length=256)
    timezone: str = "UTC"
    start_at: AwareDatetime | None = None
    end_at: AwareDatetime | None = None
    target: Target
    payload: Any = None
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    timeout_seconds: int = Field(default=300, ge=1, le=MAX_ECS_TIMEOUT_S)
    runtime: Runtime = Runtime.LAMBDA
    overlap: Overlap = Overlap.ALLOW
    catchup: CatchupPolicy = Field(default_factory=CatchupPolicy)
    jitter_seconds: int = Field(default=0, ge=0, le=3600)
    dst: DstPolicy | None = None
    tags: dict[str, str] = Field(default_factory=dict)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            _check_zone(value)
        except schedules.ScheduleError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if any(ord(ch) < 32 for ch in value):
            raise ValueError("name must not contain control characters")
        return value

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_TAGS:
            raise ValueError(f"at most {MAX_TAGS} tags")
        for key, tag_value in value.items():
            if not 1 <= len(key) <= MAX_TAG_KEY_CHARS:
                raise ValueError(f"tag keys must be 1-{MAX_TAG_KEY_CHARS} characters")
            if len(tag_value) > MAX_TAG_VALUE_CHARS:
                raise ValueError(f"tag {key!r}: value longer than {MAX_TAG_VALUE_CHARS} characters")
        return value

    @field_validator("payload")
    @classmethod
    def _payload_size(cls, value: Any) -> Any:
        size = len(_COMPACT_JSON.encode(value).encode())
        if size > MAX_PAYLOAD_BYTES:
            raise ValueError(f"payload is {size} bytes, more than the {MAX_PAYLOAD_BYTES} allowed")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        if self.start_at and self.end_at and self.end_at <= self.start_at:
            raise ValueError("end_at must be after start_at")
        if self.runtime is Runtime.LAMBDA and self.timeout_seconds > MAX_LAMBDA_TIMEOUT_S:
            raise ValueError(
                f"timeout_seconds {self.timeout_seconds} exceeds {MAX_LAMBDA_TIMEOUT_S} for runtime 'lambda';"
                " use runtime 'ecs' for long jobs"
            )
        try:
            parsed = self.parsed_schedule()
        except schedules.ScheduleError as exc:
            raise ValueError(f"schedule: {exc}") from None
        if self.start_at and self.end_at and parsed.kind not in ("after", "delay"):
            start = self.start_at.astimezone(UTC)
            first = parsed.next_after(start - timedelta(seconds=1), anchor=start)
            if first is None or first > self.end_at:
                raise ValueError("schedule has no slot between start_at and end_at")
        return self

    def parsed_schedule(self) -> schedules.Schedule:
        """The parsed schedule (cached parsing lives in :mod:`punctual.schedules`)."""
        return schedules.cached_schedule(
            self.schedule, self.timezone, self.dst.options() if self.dst else None
        )


class JobState(StrEnum):
    ENABLED = "ENABLED"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    DELETED = "DELETED"


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
    # Micro-triggers per minute this job adds to its tenant's total (punctual.quotas); 0 for jobs
    # stored before the quota existed, which were never added.
    trigger_rate: int = Field(default=0, exclude=True)
    state_reason: str | None = None  # why the job was paused or completed, when not by a user
    signing_secret_enc: str | None = Field(default=None, exclude=True, repr=False)
    # While a secret is rotated, the previous one still signs (Standard Webhooks sends both).
    signing_secret_prev_enc: str | None = Field(default=None, exclude=True, repr=False)

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _ID_RE.match(value):
            raise ValueError("job id must be 1-64 characters of letters, digits, '-' and '_'")
        return value

    def spec(self) -> JobSpec:
        return JobSpec.model_validate(self.model_dump(include=set(JobSpec.model_fields)))


# --------------------------------------------------------------------------- executions


class ExecutionStatus(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    RETRY_WAIT = "RETRY_WAIT"
    SKIPPED = "SKIPPED"
    MISSED = "MISSED"  # never run: the catch-up policy, its window, or a paused/deleted job (see error)

    @property
    def terminal(self) -> bool:
        return self in (
            ExecutionStatus.SUCCEEDED,
            ExecutionStatus.FAILED,
            ExecutionStatus.TIMED_OUT,
            ExecutionStatus.SKIPPED,
            ExecutionStatus.MISSED,
        )


class IllegalTransition(Exception):
    """A status change the execution state machine does not allow (a bug, never a race)."""

    def __init__(self, old: ExecutionStatus | None, new: ExecutionStatus) -> None:
        super().__init__(f"illegal execution transition {old.value if old else 'none'} -> {new.value}")
        self.old = old
        self.new = new


_S = ExecutionStatus
# The execution record's state machine: every status a stored status (None: no record yet)
# may be written as next. Every write of a record is checked against it (check_transition).
TRANSITIONS: dict[ExecutionStatus | None, frozenset[ExecutionStatus]] = {
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
    """Raise :class:`IllegalTransition` unless ``old -> new`` is an edge of :data:`TRANSITIONS`."""
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(old, new)


class _ShallowCopy(BaseModel):
    """``copy.copy`` (and so ``model_copy``) as pydantic's ``__copy__`` does it, faster.

    The worker copies an execution record three times a trigger. Pydantic's ``__copy__``
    goes through ``copy.copy`` for each of the three dicts and sets; these models have no
    private attributes, so the copy is the same made directly.
    """

    def __copy__(self) -> Self:
        cls = type(self)
        m = cls.__new__(cls)
        _object_setattr(m, "__dict__", self.__dict__.copy())
        extra = self.__pydantic_extra__
        _object_setattr(m, "__pydantic_extra__", None if extra is None else extra.copy())
        _object_setattr(m, "__pydantic_fields_set__", self.__pydantic_fields_set__.copy())
        private = getattr(self, "__pydantic_private__", None)
        if private is not None:
            private = {k: v for k, v in private.items() if v is not PydanticUndefined}
        _object_setattr(m, "__pydantic_private__", private)
        return m


class AttemptRecord(_ShallowCopy):
    """One past attempt of an execution, kept in a bounded list on the record."""

    attempt: int
    status: ExecutionStatus
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None
    error: str | None = None
    owner: str | None = None


class Execution(_ShallowCopy):
    """One slot of one job: the record every attempt of that slot writes to."""

    job_id: str
    tenant: str = "default"
    slot: str  # the slot key, e.g. 2026-11-30T09:32:00Z (manual triggers add ~<id>)
    scheduled_at: AwareDatetime
    attempt: int = 1
    status: ExecutionStatus
    started_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None
    error: str | None = None
    lease_until: AwareDatetime | None = None
    owner: str | None = None
    job_version: int = 1
    attempts: list[AttemptRecord] = Field(default_factory=list)
    result: str | None = None
    # Attempts a worker handed back on shutdown: they do not count against max_attempts.
    releases: int = 0
    # Overlap: the slot that was still running when this one was SKIPPED or QUEUED. The next
    # slot follows this pointer, so the overlap check reads O(1) items, not the job's history.
    blocked_by: str | None = None

    def closed_attempt(self, status: ExecutionStatus, now: datetime, error: str | None) -> AttemptRecord:
        """The entry of the attempt list that says how this record's current attempt ended:
        the one place an attempt record is made from a running attempt."""
        return AttemptRecord(
            attempt=self.attempt,
            status=status,
            started_at=self.started_at,
            finished_at=now,
            error=error,
            owner=self.owner,
        )

    @staticmethod
    def bounded(attempts: list[AttemptRecord]) -> list[AttemptRecord]:
        """``attempts`` bounded as the record keeps them: the first and the latest."""
        if len(attempts) <= MAX_ATTEMPT_RECORDS:
            return attempts
        return [attempts[0], *attempts[-(MAX_ATTEMPT_RECORDS - 1) :]]

    def ended(
        self,
        status: ExecutionStatus,
        now: datetime,
        error: str | None,
        *,
        attempt_status: ExecutionStatus | None = None,
        **more: Any,
    ) -> Execution:
        """This record with its current attempt ended as ``status`` (the slot's status) and
        listed as ``attempt_status`` (default: the same); ``more`` sets further fields. Built, not
        checked: the write (which may be fenced off) checks the transition."""
        closed = self.closed_attempt(attempt_status or status, now, error)
        return self.model_copy(
            update={
                "status": status,
                "finished_at": now,
                "lease_until": None,
                "error": error,
                "attempts": self.bounded([*self.attempts, closed]),
                **more,
            }
        )
