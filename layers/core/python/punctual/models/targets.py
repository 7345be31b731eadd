"""Targets: what a slot calls (an HTTP webhook or an AWS service), each ARN checked for its shape."""

from __future__ import annotations

import re
import urllib.parse
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from punctual.models.base import (
    MAX_HEADER_VALUE_CHARS,
    MAX_HEADERS,
    RESERVED_HEADERS,
    StrictModel,
    accepted_before,
    flag_field,
    header_key,
)

_ARN_RE = re.compile(
    r"^arn:(?P<partition>aws|aws-cn|aws-us-gov):(?P<service>[a-z0-9-]+):(?P<region>[a-z]{2}(-[a-z]+)+-\d)"
    r":(?P<account>\d{12}):(?P<resource>.+)\Z"
)
_ARN_RE_STORED = re.compile(_ARN_RE.pattern.removesuffix("\\Z") + "$")


_URL_SAFE = "/?&=#:@!$'()*+,;%~-._"  # what a URL's path and query keep as is
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
_IAM_ROLE_ARN_RE = re.compile(r"^arn:(aws|aws-cn|aws-us-gov):iam::\d{12}:role/" + IAM_ROLE_RE + r"\Z")
_IAM_ROLE_ARN_RE_STORED = re.compile(_IAM_ROLE_ARN_RE.pattern.removesuffix("\\Z") + "$")


def check_arn(
    value: str,
    service: str,
    resource_prefix: str | None = None,
    resource_pattern: str | None = None,
    info: ValidationInfo | None = None,
) -> str:
    """Validate an ARN's shape: partition, service, region, 12-digit account, resource.

    ``resource_pattern`` (a regular expression) must match the whole resource after
    ``resource_prefix``; the partition must fit the region (``aws-cn`` with ``cn-*``).
    ``info``: the validation's, whose context says whether the ARN was stored before (read back, or
    carried by a message): then it is held to the rule it was written under.
    """
    if len(value) > 2048:
        raise ValueError("ARN is longer than 2048 characters")
    # (a stored ARN: as the rule was, whose $ let a final newline through: it stays readable)
    match = (_ARN_RE_STORED if info is not None and accepted_before(info.context) else _ARN_RE).match(value)
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
    """The rate budget every target may carry (burst smoothing, ``punctual.dispatch.smoothing``)."""
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


class HttpTarget(StrictModel):
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
    follow_redirects: bool = flag_field(
        False, "Follow 3xx redirects (never from https to http); else a redirect fails the attempt."
    )

    @field_validator("url")
    @classmethod
    def _url_scheme(cls, value: str, info: ValidationInfo) -> str:
        lowered = value.lower()
        if not (lowered.startswith("http://") or lowered.startswith("https://")):
            raise ValueError("url must start with http:// or https://")
        if accepted_before(info.context):
            return value
        if not value.isascii() or any(ch <= " " or ch == "\x7f" for ch in value):
            # a request line carries visible ASCII only: every call would fail
            scheme, _, rest = value.partition("://")
            host, slash, path = rest.partition("/")
            try:
                ascii_host = host.encode("idna").decode()
            except UnicodeError:
                ascii_host = host
            suggested = f"{scheme}://{ascii_host}{slash}{urllib.parse.quote(path, safe=_URL_SAFE)}"
            raise ValueError(f"url must be visible ASCII (percent-encode the rest): {suggested[:300]!r}")
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        if len(value) > MAX_HEADERS:
            raise ValueError(f"at most {MAX_HEADERS} headers")
        seen: set[str] = set()
        for name, header_value in value.items():
            if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,256}", name):
                raise ValueError(f"invalid header name {name[:80]!r}")
            if name.lower() in RESERVED_HEADERS:
                raise ValueError(f"header {name!r} is reserved: Punctual sets it on every request")
            if header_key(name) in RESERVED_HEADERS and not accepted_before(info.context):
                # (QA21: a CGI or WSGI receiver reads Punctual_Tenant as Punctual-Tenant, and joined
                # the job's value to Punctual's; a stored one is still read, and not sent)
                raise ValueError(f"header {name!r} is reserved: it reads as {name.replace('_', '-')!r}")
            if name.lower() in seen:
                raise ValueError(f"header {name!r} is given twice (header names are case-insensitive)")
            seen.add(name.lower())
            if any(ord(ch) < 32 and ch != "\t" for ch in header_value) or "\x7f" in header_value:
                raise ValueError(f"header {name!r}: control characters are not allowed in a value")
            beyond = next((ch for ch in header_value if ord(ch) > 0xFF), None)
            # HTTP/1.1 sends a field value as ISO-8859-1 bytes: every call would fail
            if beyond is not None and not accepted_before(info.context):
                raise ValueError(
                    f"header {name!r}: {beyond!r} cannot be sent in an HTTP header (ISO-8859-1 only);"
                    " percent- or base64-encode the value"
                )
            if len(header_value) > MAX_HEADER_VALUE_CHARS:
                raise ValueError(f"header {name!r}: value longer than {MAX_HEADER_VALUE_CHARS} characters")
        return value

    def content_type(self) -> str | None:
        """The Content-Type header the job sets, if any."""
        return next((v for k, v in self.headers.items() if k.lower() == "content-type"), None)


class AwsTarget(StrictModel):
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
    def _role(cls, value: str | None, info: ValidationInfo) -> str | None:
        lax = accepted_before(info.context)  # a stored role: the rule it was written under ($)
        if value is not None and not (_IAM_ROLE_ARN_RE_STORED if lax else _IAM_ROLE_ARN_RE).match(value):
            raise ValueError(
                f"role_arn must be an IAM role ARN (arn:aws:iam::<12-digit account>:role/<name>): {value!r}"
            )
        return value


class LambdaTarget(AwsTarget):
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
    def _arn(cls, value: str, info: ValidationInfo) -> str:
        return check_arn(value, "lambda", "function:", LAMBDA_FUNCTION_RE, info)


class SqsTarget(AwsTarget):
    """An SQS queue: the payload is the message body."""

    type: Literal["sqs"] = Field(default="sqs", description="Selects the SQS target.")
    queue_arn: str = Field(
        max_length=2048,
        description="The queue's ARN (standard or FIFO).",
        examples=["arn:aws:sqs:eu-west-1:123456789012:reports"],
    )
    message_group_id: str | None = Field(
        default=None,
        max_length=128,
        description=(
            "FIFO queues: the message group (default: the job id, a '.' and 12 hex digits of a digest"
            " of the tenant, so two tenants' alike job ids are two groups)."
        ),
    )

    @field_validator("queue_arn")
    @classmethod
    def _arn(cls, value: str, info: ValidationInfo) -> str:
        return check_arn(value, "sqs", None, SQS_QUEUE_RE, info)

    @field_validator("message_group_id")
    @classmethod
    def _group(cls, value: str | None, info: ValidationInfo) -> str | None:
        # SQS takes alphanumeric characters and punctuation only: every SendMessage would fail
        # (QA: "a b\u00e9" was taken)
        if value and not accepted_before(info.context) and not re.fullmatch(r"[!-~]+", value):
            bad = next(ch for ch in value if not "!" <= ch <= "~")
            raise ValueError(
                f"message_group_id: {bad!r} is not allowed; SQS takes letters, digits and punctuation "
                "(!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~) only"
            )
        return value


class SnsTarget(AwsTarget):
    """An SNS topic: the payload is the message."""

    type: Literal["sns"] = Field(default="sns", description="Selects the SNS target.")
    topic_arn: str = Field(
        max_length=2048,
        description="The topic's ARN (standard or FIFO).",
        examples=["arn:aws:sns:eu-west-1:123456789012:reports"],
    )

    @field_validator("topic_arn")
    @classmethod
    def _arn(cls, value: str, info: ValidationInfo) -> str:
        return check_arn(value, "sns", None, SNS_TOPIC_RE, info)


class EventBridgeTarget(AwsTarget):
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
        description="The event's source (not punctual*, not aws.*).",
    )

    @field_validator("event_bus_arn")
    @classmethod
    def _arn(cls, value: str, info: ValidationInfo) -> str:
        return check_arn(value, "events", "event-bus/", EVENT_BUS_RE, info)

    @field_validator("source")
    @classmethod
    def _source(cls, value: str, info: ValidationInfo) -> str:
        # PutEvents refuses AWS's own sources, so every slot would fail (QA: "aws.ec2" was taken);
        # EventBridge Scheduler's EventBridgeParameters.Source refuses them too (pattern (?!aws\.))
        if accepted_before(info.context):
            return value
        if value.startswith("aws."):
            raise ValueError(
                f"source {value[:80]!r}: sources starting with 'aws.' are AWS's own; choose your own"
            )
        return value


class StepFunctionsTarget(AwsTarget):
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
    def _arn(cls, value: str, info: ValidationInfo) -> str:
        return check_arn(value, "states", "stateMachine:", STATE_MACHINE_RE, info)


_AwsId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9-]+$")]


class EcsTarget(AwsTarget):
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
    assign_public_ip: bool = flag_field(False, "Give the task a public IP (Fargate in a public subnet).")
    container_name: str | None = Field(
        default=None,
        max_length=255,
        description="The container that gets the PUNCTUAL_* environment (default: the first essential one).",
    )
    launch_type: Literal["FARGATE", "EC2"] = Field(default="FARGATE", description="Where the task runs.")

    @field_validator("cluster_arn")
    @classmethod
    def _cluster(cls, value: str, info: ValidationInfo) -> str:
        return check_arn(value, "ecs", "cluster/", ECS_CLUSTER_RE, info)

    @field_validator("task_definition_arn")
    @classmethod
    def _task(cls, value: str, info: ValidationInfo) -> str:
        return check_arn(value, "ecs", "task-definition/", ECS_TASK_DEFINITION_RE, info)

    @field_validator("container_name")
    @classmethod
    def _container(cls, value: str | None, info: ValidationInfo) -> str | None:
        # a name no task definition can hold: every RunTask's override would be refused (QA: " " was taken)
        if value and not accepted_before(info.context) and not re.fullmatch(r"[A-Za-z0-9_-]{1,255}", value):
            raise ValueError(
                f"container_name {value[:80]!r}: ECS container names are letters, digits, '_' and '-'"
            )
        return value


def target_arn(target: HttpTarget | AwsTarget) -> str:
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
