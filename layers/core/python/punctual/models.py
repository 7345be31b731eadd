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
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticUndefined

from punctual import schedules

# Validation context key: a job a dispatch message carries (signed by the scheduler, validated when
# it was stored), whose whole-spec checks are not made again on the hot path.
CARRIED = "carried"
MAX_PAYLOAD_BYTES = 256 * 1024
PAYLOAD_TOO_LARGE = "more than the"  # how the size error reads: the API answers it 413, not 422
MAX_NAME_CHARS = 128
MAX_DESCRIPTION_CHARS = 1024
MAX_TAGS = 50
MAX_TAG_KEY_CHARS = 128
MAX_TAG_VALUE_CHARS = 256
MAX_LAMBDA_TIMEOUT_S = 840  # leaves the worker Lambda a minute of its 15 to record the result
MAX_ECS_TIMEOUT_S = 7 * 24 * 3600
MAX_HEADERS = 50
MAX_HEADER_VALUE_CHARS = 8192
# A payload is a JSON document bounded in size, depth and members: a deeper document breaks
# JSON parsers (pydantic's stops at 200 levels) and every reader of the stored job with it.
MAX_PAYLOAD_DEPTH = 32
MAX_PAYLOAD_MEMBERS = 10_000
MAX_PAYLOAD_KEY_CHARS = 1024
MAX_TIMEZONE_CHARS = 64
# Headers an HTTP target may not set: the worker owns framing, routing, and the signature.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
        "idempotency-key",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "punctual-fencing-token",
        "punctual-fencing-signature",
    }
)
MAX_ATTEMPTS = 186  # EventBridge Scheduler's MaximumRetryAttempts (185) plus the first attempt
MAX_JITTER_S = 24 * 3600  # EventBridge Scheduler's widest flexible time window (1440 minutes)
MAX_JOB_CALENDARS = 10
CALENDAR_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
CALENDAR_NAME_RULE = "1-64 characters of letters, digits, '-', '_' and '.'"
MAX_ATTEMPT_RECORDS = 20  # the bounded list of past attempts on an execution record

_COMPACT_JSON = json.JSONEncoder(
    separators=(",", ":")
)  # json.dumps(..., separators=...) without a new encoder a call
_object_setattr = object.__setattr__
_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class _Strict(BaseModel):
    """Base for user input: unknown fields are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


def _int(default: int, description: str, **limits: Any) -> Any:
    """An integer field: ``true`` is not 1 and ``2.5`` is not 2 (strict), within ``limits``."""
    return Field(default=default, strict=True, description=description, **limits)


def _seconds(default: float, description: str, **limits: Any) -> Any:
    """A number of seconds: no booleans, no NaN or Infinity."""
    return Field(default=default, strict=True, allow_inf_nan=False, description=description, **limits)


def _flag(default: bool, description: str) -> Any:
    """A boolean field: only ``true`` or ``false`` (not ``1``, ``"yes"``)."""
    return Field(default=default, strict=True, description=description)


def _check_text(text: str, path: str) -> None:
    """JSON text is Unicode: a lone surrogate (``"\\ud800"``) has no UTF-8 form to store or send."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{path}: a string holds a lone surrogate, which is not Unicode text") from None


def check_json_value(value: Any, what: str = "payload") -> None:
    """Refuse what is not plain, bounded JSON: NaN/Infinity, depth, member count, long keys.

    Walks the document without recursion, so a hostile depth cannot exhaust the stack.
    """
    stack: list[tuple[Any, str, int]] = [(value, what, 0)]
    members = 0
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item, path)
            continue
        if isinstance(item, bool) or item is None or isinstance(item, int):
            continue
        if isinstance(item, float):
            if item != item or item in (float("inf"), float("-inf")):
                raise ValueError(f"{path}: NaN and Infinity are not JSON numbers")
            continue
        if isinstance(item, dict | list):
            if depth >= MAX_PAYLOAD_DEPTH:
                raise ValueError(f"{what} is nested more than {MAX_PAYLOAD_DEPTH} levels deep (at {path})")
            members += len(item)
            if members > MAX_PAYLOAD_MEMBERS:
                raise ValueError(f"{what} has more than {MAX_PAYLOAD_MEMBERS} object members and array items")
            if isinstance(item, dict):
                for key, member in item.items():
                    if not isinstance(key, str):
                        raise ValueError(f"{path}: object keys must be strings")
                    _check_text(key, path)
                    if len(key) > MAX_PAYLOAD_KEY_CHARS:
                        raise ValueError(f"{path}: a key is longer than {MAX_PAYLOAD_KEY_CHARS} characters")
                    stack.append((member, f"{path}.{key[:40]}", depth + 1))
            else:
                stack.extend((member, f"{path}[{i}]", depth + 1) for i, member in enumerate(item))
            continue
        raise ValueError(f"{path}: {type(item).__name__} is not a JSON value")


def is_json_media_type(content_type: str) -> bool:
    """``application/json``, ``application/*+json`` (parameters ignored)."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


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


def _rate_budget() -> Any:
    """The rate budget every target may carry (burst smoothing, ``punctual.smoothing``)."""
    return Field(
        default=None,
        gt=0,
        le=100_000,
        strict=True,
        allow_inf_nan=False,
        description=(
            "Burst smoothing: at most this many calls a second to this target (its host, or its ARN),"
            " shared by the tenant's jobs that name it; a burst's slots are spread over time, never"
            " later than the job's max_lateness_seconds (a slot the budget cannot take by then fires"
            " on time and is counted as an overrun). None: no budget (a deployment-wide one may apply)."
        ),
        examples=[50],
    )


class HttpTarget(_Strict):
    """A webhook: the payload is POSTed (or sent with ``method``) to ``url``, signed (Standard Webhooks)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"type": "http", "url": "https://hooks.example.com/report"}]}
    )

    type: Literal["http"] = Field(default="http", description="Selects the webhook target.")
    rate_budget_per_second: float | None = _rate_budget()
    url: str = Field(
        min_length=1,
        max_length=2048,
        description="http:// or https:// URL; private, loopback and link-local addresses are refused.",
        examples=["https://hooks.example.com/report"],
    )
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = Field(
        default="POST", description="HTTP method; GET sends no body."
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_HEADERS,
        description=(
            "Extra request headers (at most 50). Host, framing headers, Idempotency-Key, webhook-* and "
            "Punctual-Fencing-* are set by Punctual and refused here. A non-JSON Content-Type sends a "
            "string payload as it is."
        ),
        examples=[{"Authorization": "Bearer abc123", "Content-Type": "text/plain; charset=utf-8"}],
    )
    follow_redirects: bool = _flag(
        False, "Follow 3xx redirects (never from https to http); else a redirect fails the attempt."
    )

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
        seen: set[str] = set()
        for name, header_value in value.items():
            if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,256}", name):
                raise ValueError(f"invalid header name {name[:80]!r}")
            if name.lower() in RESERVED_HEADERS:
                raise ValueError(f"header {name!r} is reserved: Punctual sets it on every request")
            if name.lower() in seen:
                raise ValueError(f"header {name!r} is given twice (header names are case-insensitive)")
            seen.add(name.lower())
            if any(ord(ch) < 32 and ch != "\t" for ch in header_value) or "\x7f" in header_value:
                raise ValueError(f"header {name!r}: control characters are not allowed in a value")
            if len(header_value) > MAX_HEADER_VALUE_CHARS:
                raise ValueError(f"header {name!r}: value longer than {MAX_HEADER_VALUE_CHARS} characters")
        return value

    def content_type(self) -> str | None:
        """The Content-Type header the job sets, if any."""
        return next((v for k, v in self.headers.items() if k.lower() == "content-type"), None)


class _AwsTarget(_Strict):
    """An AWS service target; ``role_arn`` is the execution role the worker assumes to call it.

    As with EventBridge Scheduler, the role's trust policy lets the scheduler's workers assume
    it with ``sts:ExternalId`` equal to the tenant's id (see the README); without a role the
    workers call the target with the deployment's own target role.
    """

    rate_budget_per_second: float | None = _rate_budget()
    role_arn: str | None = Field(
        default=None,
        max_length=2048,
        description=(
            "The IAM role the workers assume (external id: your tenant id) to call the target; "
            "default: the deployment's own target role."
        ),
        examples=["arn:aws:iam::123456789012:role/punctual-target"],
    )

    @field_validator("role_arn")
    @classmethod
    def _role(cls, value: str | None) -> str | None:
        if value is not None and not _IAM_ROLE_ARN_RE.match(value):
            raise ValueError(
                f"role_arn must be an IAM role ARN (arn:aws:iam::<12-digit account>:role/<name>): {value!r}"
            )
        return value


class LambdaTarget(_AwsTarget):
    """A Lambda function invoked with the payload."""

    type: Literal["lambda"] = Field(default="lambda", description="Selects the Lambda target.")
    function_arn: str = Field(
        max_length=2048,
        description="The function's ARN (optionally with a version or alias).",
        examples=["arn:aws:lambda:eu-west-1:123456789012:function:report"],
    )
    invocation_type: Literal["RequestResponse", "Event"] = Field(
        default="RequestResponse",
        description="RequestResponse waits for the result (an error fails the attempt); Event queues it.",
    )

    @field_validator("function_arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        return check_arn(value, "lambda", "function:", LAMBDA_FUNCTION_RE)


class SqsTarget(_AwsTarget):
    """An SQS queue: the payload is the message body."""

    type: Literal["sqs"] = Field(default="sqs", description="Selects the SQS target.")
    queue_arn: str = Field(
        max_length=2048,
        description="The queue's ARN (standard or FIFO).",
        examples=["arn:aws:sqs:eu-west-1:123456789012:reports"],
    )
    message_group_id: str | None = Field(
        default=None, max_length=128, description="FIFO queues: the message group (default: the job id)."
    )

    @field_validator("queue_arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        return check_arn(value, "sqs", None, SQS_QUEUE_RE)


class SnsTarget(_AwsTarget):
    """An SNS topic: the payload is the message."""

    type: Literal["sns"] = Field(default="sns", description="Selects the SNS target.")
    topic_arn: str = Field(
        max_length=2048,
        description="The topic's ARN (standard or FIFO).",
        examples=["arn:aws:sns:eu-west-1:123456789012:reports"],
    )

    @field_validator("topic_arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        return check_arn(value, "sns", None, SNS_TOPIC_RE)


class EventBridgeTarget(_AwsTarget):
    """An EventBridge bus: the payload (a JSON object) is the event detail."""

    type: Literal["eventbridge"] = Field(default="eventbridge", description="Selects the EventBridge target.")
    event_bus_arn: str = Field(
        max_length=2048,
        description="The event bus's ARN.",
        examples=["arn:aws:events:eu-west-1:123456789012:event-bus/default"],
    )
    detail_type: str = Field(
        default="Punctual Scheduled Job", min_length=1, max_length=128, description="The event's detail-type."
    )
    source: str = Field(
        default="scheduled-job",
        min_length=1,
        max_length=256,
        description="The event's source (not punctual*).",
    )

    @field_validator("event_bus_arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        return check_arn(value, "events", "event-bus/", EVENT_BUS_RE)


class StepFunctionsTarget(_AwsTarget):
    """A Step Functions state machine: one execution per slot, the payload as its input."""

    type: Literal["stepfunctions"] = Field(
        default="stepfunctions", description="Selects the Step Functions target."
    )
    state_machine_arn: str = Field(
        max_length=2048,
        description="The state machine's ARN.",
        examples=["arn:aws:states:eu-west-1:123456789012:stateMachine:report"],
    )

    @field_validator("state_machine_arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        return check_arn(value, "states", "stateMachine:", STATE_MACHINE_RE)


_AwsId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9-]+$")]


class EcsTarget(_AwsTarget):
    """An ECS task started with RunTask; the payload is in its environment (PUNCTUAL_PAYLOAD)."""

    type: Literal["ecs"] = Field(default="ecs", description="Selects the ECS RunTask target.")
    cluster_arn: str = Field(
        max_length=2048,
        description="The cluster's ARN.",
        examples=["arn:aws:ecs:eu-west-1:123456789012:cluster/jobs"],
    )
    task_definition_arn: str = Field(
        max_length=2048,
        description="The task definition's ARN (with or without a revision).",
        examples=["arn:aws:ecs:eu-west-1:123456789012:task-definition/report:3"],
    )
    subnets: list[_AwsId] = Field(
        min_length=1, max_length=16, description="Subnet ids for the task.", examples=[["subnet-0abc1234"]]
    )
    security_groups: list[_AwsId] = Field(
        default_factory=list, max_length=5, description="Security group ids.", examples=[["sg-0abc1234"]]
    )
    assign_public_ip: bool = _flag(False, "Give the task a public IP (Fargate in a public subnet).")
    container_name: str | None = Field(
        default=None,
        max_length=255,
        description="The container that gets the PUNCTUAL_* environment (default: the first essential one).",
    )
    launch_type: Literal["FARGATE", "EC2"] = Field(default="FARGATE", description="Where the task runs.")

    @field_validator("cluster_arn")
    @classmethod
    def _cluster(cls, value: str) -> str:
        return check_arn(value, "ecs", "cluster/", ECS_CLUSTER_RE)

    @field_validator("task_definition_arn")
    @classmethod
    def _task(cls, value: str) -> str:
        return check_arn(value, "ecs", "task-definition/", ECS_TASK_DEFINITION_RE)


def target_arn(target: HttpTarget | _AwsTarget) -> str:
    """The ARN a target calls (an HTTP target: its URL), as EventBridge Scheduler's ``Target.Arn``."""
    if isinstance(target, HttpTarget):
        return target.url
    for name in (
        "queue_arn",
        "function_arn",
        "topic_arn",
        "event_bus_arn",
        "state_machine_arn",
        "cluster_arn",
    ):
        value = getattr(target, name, None)
        if value:
            return str(value)
    return ""


Target = Annotated[
    HttpTarget | LambdaTarget | SqsTarget | SnsTarget | EventBridgeTarget | StepFunctionsTarget | EcsTarget,
    Field(discriminator="type"),
]


# --------------------------------------------------------------------------- policies


class Backoff(StrEnum):
    """How the wait between attempts grows: fixed, linear or exponential."""

    FIXED = "fixed"
    LINEAR = "linear"
    EXPONENTIAL = "exponential"


class RetryPolicy(_Strict):
    """How a failed attempt is retried. ``max_attempts`` counts the first attempt."""

    max_attempts: int = _int(
        3,
        "Attempts per slot, the first included (1: never retry; 186: EventBridge Scheduler's 185 retries).",
        ge=1,
        le=MAX_ATTEMPTS,
    )
    backoff: Backoff = Field(
        default=Backoff.EXPONENTIAL,
        description="Wait before retry n: fixed = base; linear = base * n; exponential = base * 2^(n-1).",
    )
    base_seconds: float = _seconds(2.0, "The backoff's base wait, in seconds.", gt=0, le=86400)
    max_seconds: float = _seconds(300.0, "The longest wait between attempts, in seconds.", gt=0, le=7 * 86400)
    jitter: bool = _flag(True, "Randomise each wait (full jitter) so retries of many jobs spread out.")
    max_age_seconds: int = _int(
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


class CatchupPolicy(_Strict):
    """What happens to slots missed while the scheduler was down or the job paused."""

    # Exactly once means not zero times: by default every slot owed within the window runs.
    policy: CatchupKind = Field(
        default=CatchupKind.ALL,
        description="all: run every missed slot; latest: only the newest; none: skip them (recorded MISSED).",
    )
    window_seconds: int = _int(
        3600, "How far back missed slots are caught up; older ones are recorded MISSED.", ge=0, le=7 * 86400
    )


class DstPolicy(_Strict):
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


class DeadLetterQueue(_Strict):
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
    _role = field_validator("role_arn")(_AwsTarget._role.__func__)  # type: ignore[attr-defined]

    @field_validator("queue_arn")
    @classmethod
    def _arn(cls, value: str) -> str:
        return check_arn(value, "sqs", None, SQS_QUEUE_RE)


class SchedulerIdentity(_Strict):
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


# --------------------------------------------------------------------------- alerts

MAX_ALERT_RULES = 10


class AlertCondition(StrEnum):
    """When an alert rule fires: the slot ended FAILED (or TIMED_OUT) after its last attempt, its first
    release came more than ``late_after_seconds`` after its instant, it was recorded MISSED, or it is
    the first success after one or more failed slots."""

    FAILED = "failed"
    LATE = "late"
    MISSED = "missed"
    RECOVERED = "recovered"


class AlertRule(_Strict):
    """One alert rule of a job: which conditions, sent where, how often at most."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "on": ["failed", "recovered"],
                    "target": {"type": "http", "url": "https://hooks.example.com/a"},
                }
            ]
        },
    )

    on: list[AlertCondition] = Field(
        min_length=1,
        max_length=4,
        description="The conditions that send this alert: failed, late, missed, recovered.",
        examples=[["failed", "recovered"]],
    )
    target: Target = Field(
        description="Where the alert goes: any target type, with the same validation and guards as the job's."
    )
    late_after_seconds: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=86_400,
        description="`late`: a slot whose first release comes more than this many seconds after its instant.",
    )
    min_interval_seconds: int = _int(
        0,
        "At most one alert of this rule per interval; the next says how many were held back (0: no limit).",
        ge=0,
        le=7 * 86_400,
    )
    format: Literal["json", "slack"] = Field(
        default="json",
        description='json: the alert document; slack: a Slack incoming-webhook message ({"text": summary}).',
    )

    @field_validator("on")
    @classmethod
    def _distinct(cls, value: list[AlertCondition]) -> list[AlertCondition]:
        if len(set(value)) != len(value):
            raise ValueError("on: a condition is listed twice")
        return value

    @model_validator(mode="after")
    def _late_bound(self) -> AlertRule:
        if AlertCondition.LATE in self.on and self.late_after_seconds is None:
            raise ValueError("a rule on 'late' needs late_after_seconds")
        if AlertCondition.LATE not in self.on and self.late_after_seconds is not None:
            raise ValueError("late_after_seconds is only for a rule on 'late'")
        return self


# --------------------------------------------------------------------------- the job


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


class JobSpec(_Strict):
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
        max_length=256,
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
    timeout_seconds: int = _int(
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
    jitter_seconds: int = _int(
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
    delete_after_completion: bool = _flag(
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
    def _calendars(cls, value: list[str]) -> list[str]:
        for name in value:
            if not CALENDAR_NAME_RE.fullmatch(name):
                raise ValueError(f"calendar name {name[:80]!r}: {CALENDAR_NAME_RULE}")
        if len(set(value)) != len(value):
            raise ValueError("a calendar is named twice")
        return value

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
    def _payload_size(cls, value: Any, info: ValidationInfo) -> Any:
        if info.context and info.context.get(CARRIED):  # checked when stored: punctual.queues.job_from_spec
            return value
        check_json_value(value)
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
            content_type = self.target.content_type()
            if (
                content_type
                and not is_json_media_type(content_type)
                and not (self.payload is None or isinstance(self.payload, str))
            ):
                raise ValueError(
                    f"payload must be a string when target.headers Content-Type is {content_type[:80]!r}"
                    " (only JSON media types carry a JSON payload)"
                )
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
    """A job's state: ENABLED, PAUSED, COMPLETED (one-time done or end_at passed), DELETED."""

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
    # The version whose spec this is: a replace sets it, pause and resume keep it (0: stored
    # before it was kept, read as ``version``). Slots released for an older spec are superseded.
    spec_version: int = 0
    # A paused job: the first slot due before the pause that was not released (the resume owes it).
    owed_from: str | None = None
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

    @property
    def spec_since(self) -> int:
        """The version from which the job's spec is the one it has now."""
        return self.spec_version or self.version


# --------------------------------------------------------------------------- executions


class ExecutionStatus(StrEnum):
    """An execution's status: QUEUED, RUNNING, then SUCCEEDED, FAILED, TIMED_OUT, RETRY_WAIT (a retry
    is due), SKIPPED (overlap, or the job was paused), MISSED (catch-up policy or window), EXCLUDED
    (the day is in a calendar the job excludes) or SUPERSEDED (the job's spec changed first)."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    RETRY_WAIT = "RETRY_WAIT"
    SKIPPED = "SKIPPED"
    MISSED = "MISSED"  # never run: the catch-up policy, its window, or a paused/deleted job (see error)
    EXCLUDED = "EXCLUDED"  # never run: the day is in a calendar the job excludes (error names it)
    # Not run (or not retried) because the job's spec changed first; a release of the slot for
    # the new spec may still run it.
    SUPERSEDED = "SUPERSEDED"

    @property
    def terminal(self) -> bool:
        return self in (
            ExecutionStatus.SUCCEEDED,
            ExecutionStatus.FAILED,
            ExecutionStatus.TIMED_OUT,
            ExecutionStatus.SKIPPED,
            ExecutionStatus.MISSED,
            ExecutionStatus.EXCLUDED,
            ExecutionStatus.SUPERSEDED,
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
    # MISSED is born as it is: the poller records a slot the catch-up policy or its window drops.
    # EXCLUDED is born as it is too: the poller found the slot's day in an excluded calendar.
    None: frozenset({_S.RUNNING, _S.QUEUED, _S.SKIPPED, _S.MISSED, _S.EXCLUDED, _S.SUPERSEDED}),
    # A slot waiting for its turn or its retry is superseded when the job's spec changes first.
    _S.QUEUED: frozenset({_S.RUNNING, _S.QUEUED, _S.SKIPPED, _S.SUPERSEDED}),
    _S.RETRY_WAIT: frozenset({_S.RUNNING, _S.QUEUED, _S.SKIPPED, _S.SUPERSEDED}),
    # RUNNING -> RUNNING: a heartbeat, or a takeover by a new owner as the next attempt.
    # RUNNING -> SUPERSEDED: a lost run's takeover after the job's spec changed.
    _S.RUNNING: frozenset({_S.RUNNING, _S.SUCCEEDED, _S.FAILED, _S.TIMED_OUT, _S.RETRY_WAIT, _S.SUPERSEDED}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.TIMED_OUT: frozenset(),
    _S.SKIPPED: frozenset(),
    _S.EXCLUDED: frozenset(),
    # MISSED is final for the scheduler (the claim drops any message of the slot); only a
    # backfill, which a user asks for, runs such a slot after all.
    _S.MISSED: frozenset({_S.RUNNING, _S.QUEUED, _S.SKIPPED, _S.SUPERSEDED}),
    # A release of the slot for the job's new spec runs it.
    _S.SUPERSEDED: frozenset({_S.RUNNING, _S.QUEUED, _S.SKIPPED}),
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
    # Backfill (punctual.backfill): the id of the backfill that ran this slot, and whether its
    # after() dependants run too when it succeeds.
    backfill: str | None = None
    backfill_dependants: bool = False
    # A range record (MISSED): it stands for ``slot_count`` slots, ``slot`` to ``last_slot``.
    last_slot: str | None = None
    slot_count: int = 1

    @property
    def retry_origin(self) -> datetime:
        """Where ``retry.max_age_seconds`` counts from: the slot's instant, or for a backfilled
        slot (whose instant is long past by design) the start of its first attempt."""
        if self.backfill:
            first = self.attempts[0].started_at if self.attempts else self.started_at
            return first or self.scheduled_at
        return self.scheduled_at

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


# --------------------------------------------------------------------------- alerts sent


class AlertStatus(StrEnum):
    """An alert's delivery: SENDING (a worker delivers it now), SENT, FAILED (every try failed,
    the last error kept), HELD (held back by the rule's ``min_interval_seconds``)."""

    SENDING = "SENDING"
    SENT = "SENT"
    FAILED = "FAILED"
    HELD = "HELD"


class AlertDelivery(BaseModel):
    """What became of one rule's copy of an alert."""

    rule: int  # the rule's index in the job's ``alerts``
    status: AlertStatus
    tries: int = 0
    error: str | None = None
    held_back: int = 0  # alerts of this rule held back by min_interval_seconds before this one
    sent_at: AwareDatetime | None = None


class Alert(BaseModel):
    """One alert: at most one per (job, ``key_slot``, condition), made by a conditional write.

    ``key_slot`` is the slot the alert is about, except for ``recovered``, where it is the first
    failed slot of the streak that ended (so a streak recovers once); ``slot`` in ``body`` is
    always the slot that triggered it. ``owner`` and ``claimed_at`` say who delivers it; a
    delivery left SENDING longer than the stale bound is taken over (its worker died).
    """

    tenant: str
    job_id: str
    key_slot: str
    condition: AlertCondition
    status: AlertStatus = AlertStatus.SENDING
    created_at: AwareDatetime
    claimed_at: AwareDatetime
    owner: str
    body: dict[str, Any] = Field(default_factory=dict)
    deliveries: list[AlertDelivery] = Field(default_factory=list)
    rules: list[int] = Field(default_factory=list)  # the rules it goes to (a takeover delivers the rest)
