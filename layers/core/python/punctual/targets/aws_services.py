"""AWS service targets: Lambda, SQS, SNS, EventBridge, Step Functions, ECS RunTask.

Every adapter takes a *client factory*, a callable ``clients(service, timeouts=...)``
returning a boto3 client, so tests and local mode pass endpoint-configured clients.
When the target ARN names a region other than the client's, the factory is asked
again as ``clients(service, region, timeouts=...)``; :class:`Boto3ClientFactory`
supports both.

Every call is bounded by the job's timeout (``ctx.timeout_s``): ``timeouts`` is a
:class:`CallTimeouts` (socket connect and read timeouts, SDK attempts) that the
factory builds the client with, derived from the timeout by
:func:`lambda_wait_timeouts` for a synchronous Lambda Invoke (read timeout
``min(timeout, 900) + 5 s``) and by :func:`api_call_timeouts` for every other call
(connect, read, SDK retries and their back-off together within ``min(timeout, 60 s)``).
A call cut off by them is a retryable, timed-out result.

What each target does about duplicates (a slot re-run after a worker crash):

* **SQS FIFO / SNS FIFO**: the deduplication id is derived from the slot (not the
  attempt), so SQS/SNS drop a repeat within their five-minute window.
* **SQS / SNS standard**: every message carries the message attributes
  ``punctual-idempotency-key`` (``<job_id>:<slot>``), ``punctual-fencing-token``
  (``<job_id>:<slot>:<attempt>``, see :attr:`SlotContext.fencing_token`),
  ``punctual-job-id``, ``punctual-tenant``, ``punctual-slot`` and ``punctual-attempt``;
  consumers dedupe on the key (with the tenant when they serve several).
* **Step Functions**: the execution name is derived from the slot, so the service
  refuses a second start of the same slot (standard workflows, while the first
  execution's history is kept: 90 days). Express workflows do not check names.
* **ECS**: a task still running for the slot is adopted instead of starting
  another; RunTask's ``clientToken`` makes a retried API call idempotent; the
  container gets ``PUNCTUAL_IDEMPOTENCY_KEY`` and ``PUNCTUAL_FENCING_TOKEN`` in its
  environment (an adopted task keeps the token of the attempt that started it).
* **Lambda**: synchronous calls carry the key and the fencing token in the client
  context (``context.client_context.custom["idempotency_key"]`` and
  ``["fencing_token"]``); asynchronous ones only via the payload placeholders.
  Lambda may itself retry async invocations.
* **EventBridge**: events carry only what the payload carries; put the key in the
  detail with the ``<job_id>`` and ``<slot>`` placeholders.

Execution roles (EventBridge Scheduler's semantics): a target with ``role_arn`` is called
with that role's credentials. The worker assumes it (``sts:AssumeRole`` with
``ExternalId`` = the tenant's id and the session tag ``punctual-tenant``), and the
credentials are kept and refreshed before they expire (botocore's refreshable
credentials: a few minutes ahead). A target without one is called with the deployment's
target role (``PUNCTUAL_TARGET_ROLE_ARN``: only the operator's ``targetArnPatterns``,
every own resource denied), or, where none is set (local mode), the worker's own
credentials. See :class:`AssumedRole`.

IAM actions the workers need, per target: ``lambda:InvokeFunction``;
``sqs:SendMessage`` (the queue URL is built from the ARN, no ``GetQueueUrl``);
``sns:Publish``; ``events:PutEvents``; ``states:StartExecution``; ECS
``ecs:RunTask`` (task definition), ``ecs:DescribeTasks`` and ``ecs:StopTask``
(task), ``iam:PassRole`` for the task's roles, and, optionally,
``ecs:ListTasks`` (adopting a running task) and ``ecs:DescribeTaskDefinition``
(finding the essential container when ``container_name`` is not set). Without the
optional two the adapter still runs the task, without adoption or without the
``PUNCTUAL_*`` environment respectively.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError, ReadTimeoutError

from punctual.clock import Clock, SystemClock
from punctual.instants import format_instant_adaptive
from punctual.targets.base import Outcome, SlotContext, TargetResult

__all__ = [
    "AssumedRole",
    "Boto3ClientFactory",
    "CallTimeouts",
    "ClientFactory",
    "EcsTargetAdapter",
    "EventBridgeTargetAdapter",
    "LambdaTargetAdapter",
    "SnsTargetAdapter",
    "SqsTargetAdapter",
    "StepFunctionsTargetAdapter",
    "api_call_timeouts",
    "classify_aws_error",
    "decide_task_outcome",
    "dedup_id",
    "execution_name",
    "lambda_wait_timeouts",
]

logger = logging.getLogger(__name__)

MAX_LAMBDA_RESPONSE_BYTES = 64 * 1024
MAX_ECS_OVERRIDE_CHARS = 8192  # AWS limit on the containerOverrides JSON
ECS_POLL_INTERVAL_S = 10.0
ECS_CANCEL_POLL_S = 0.5  # a cancelled run stops tracking its task within this long
ECS_MAX_DESCRIBE_ERRORS = 5  # consecutive DescribeTasks failures before giving up
SFN_NAME_CHARS = 80

# Call timeouts (see CallTimeouts).
LAMBDA_MAX_RUN_S = 900.0  # the longest a Lambda function can run
LAMBDA_READ_MARGIN_S = 5.0  # lets a function's own time-out answer arrive before ours cuts it off
API_CALL_BUDGET_S = 60.0  # an API call (not a synchronous Invoke) never needs longer, SDK retries included
API_CONNECT_S = 5.0
API_READ_S = 30.0
SDK_ATTEMPTS = 3  # "standard" retry mode, when the budget holds three tries
# Standard-mode back-off before the 2nd and 3rd try: at most 1 s and 2 s for throttling,
# each raised by at most 5 s more when the service sends x-amz-retry-after.
SDK_BACKOFF_S = 13.0
MAX_CACHED_CLIENTS = 128

# Error codes that mean "not now" rather than "never": throttling, capacity,
# a resource being updated, the service's own failures.
_RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "ThrottledException",
        "Throttled",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "AWS.SimpleQueueService.RequestThrottled",
        "ProvisionedThroughputExceededException",
        "LimitExceededException",
        "SlowDown",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "InternalException",
        "ServiceException",
        "ServerException",
        "ResourceConflictException",
        "ResourceNotReadyException",
        "EC2ThrottledException",
        "ENILimitReachedException",
        "SubnetIPAddressLimitReachedException",
        "KMSThrottlingException",
        "KMSThrottled",
        "KmsThrottled",
        "KMSInternalException",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
    }
)


@dataclass(frozen=True)
class CallTimeouts:
    """How long one AWS call may take: socket timeouts and SDK attempts.

    Attributes
    ----------
    connect_s : float
        Socket connect timeout of each try.
    read_s : float
        Socket read timeout of each try (AWS answers in one piece, so it bounds the
        wait for the answer).
    max_attempts : int
        Tries in all, the first included (botocore's ``total_max_attempts``).
    """

    connect_s: float
    read_s: float
    max_attempts: int = 1

    @property
    def worst_case_s(self) -> float:
        """The longest the call can take: every try timing out, plus the SDK's back-off."""
        backoff = SDK_BACKOFF_S if self.max_attempts > 1 else 0.0
        return self.max_attempts * (self.connect_s + self.read_s) + backoff

    def config(self) -> Any:
        """The botocore ``Config`` of a client that keeps to these timeouts."""
        from botocore.config import Config

        return Config(
            connect_timeout=self.connect_s,
            read_timeout=self.read_s,
            retries={"mode": "standard", "total_max_attempts": self.max_attempts},
            max_pool_connections=32,
        )


def api_call_timeouts(timeout_s: float, *, sdk_retries: bool = True) -> CallTimeouts:
    """Timeouts of an AWS API call made for a job with ``timeout_s``.

    The call's budget is ``min(timeout_s, 60 s)``. With 60 s the SDK tries three
    times (throttling and 5xx are retried at once, as before) and the three tries
    and the back-off between them fit in the budget; with less, or without
    ``sdk_retries``, it tries once and the one try gets the whole budget. Each try
    gives the connect at most 5 s and half its share, and the answer the rest, at
    most 30 s.

    Parameters
    ----------
    timeout_s : float
        The job's timeout (``SlotContext.timeout_s``).
    sdk_retries : bool, default True
        False for calls the SDK must not repeat (a Lambda ``Event`` Invoke would
        queue the function twice).

    Returns
    -------
    CallTimeouts
        ``worst_case_s`` never exceeds the budget.
    """
    budget = max(min(float(timeout_s), API_CALL_BUDGET_S), 0.002)
    if sdk_retries and budget >= API_CALL_BUDGET_S:
        attempts = SDK_ATTEMPTS
        per_try = min(API_CONNECT_S + API_READ_S, (budget - SDK_BACKOFF_S) / attempts)
    else:
        attempts = 1
        per_try = min(API_CONNECT_S + API_READ_S, budget)
    connect = min(API_CONNECT_S, per_try / 2)
    return CallTimeouts(_floor_ms(connect), _floor_ms(per_try - connect), attempts)


def lambda_wait_timeouts(timeout_s: float, margin_s: float = LAMBDA_READ_MARGIN_S) -> CallTimeouts:
    """Timeouts of a synchronous (``RequestResponse``) Lambda Invoke for a job with ``timeout_s``.

    The answer is awaited ``min(timeout_s, 900) + margin_s``: no function runs
    longer than 900 s, and the margin lets a function whose own timeout equals the
    job's report its time-out before the client gives up. One try: the SDK must not
    start the function again while the first run may still be going.
    """
    timeout = max(float(timeout_s), 0.002)
    connect = min(API_CONNECT_S, timeout / 2)
    return CallTimeouts(_floor_ms(connect), _floor_ms(min(timeout, LAMBDA_MAX_RUN_S) + margin_s), 1)


def _floor_ms(seconds: float) -> float:
    return max(int(seconds * 1000) / 1000, 0.001)


ROLE_SESSION_S = 3600  # credentials of an assumed role last an hour, refreshed before expiry
MAX_CACHED_ROLES = 256


@dataclass(frozen=True)
class AssumedRole:
    """A role the factory assumes before building a client.

    Attributes
    ----------
    role_arn : str
        The role.
    external_id : str or None
        ``sts:ExternalId`` (a job's execution role: the tenant's id; the deployment's own
        target role: none).
    tenant : str
        Tagged on the session as ``punctual-tenant`` and named in the session name, so the
        role's CloudTrail entries say whose job made the call.
    """

    role_arn: str
    external_id: str | None = None
    tenant: str = ""

    def assume_request(self) -> dict[str, Any]:
        """The ``sts:AssumeRole`` parameters."""
        digest = hashlib.sha256(self.tenant.encode()).hexdigest()[:16]
        request: dict[str, Any] = {
            "RoleArn": self.role_arn,
            "RoleSessionName": f"punctual-{digest}",
            "DurationSeconds": ROLE_SESSION_S,
        }
        if self.external_id is not None:
            request["ExternalId"] = self.external_id
        if self.tenant:
            # Tag values allow letters, digits, spaces and _.:/=+-@; a tenant id is made of those.
            request["Tags"] = [{"Key": "punctual-tenant", "Value": self.tenant[:256]}]
        return request


def role_for(target: Any, ctx: SlotContext, default_role_arn: str = "") -> AssumedRole | None:
    """The role a target is called with: its ``role_arn`` (tenant's external id), else the default."""
    role_arn = getattr(target, "role_arn", None)
    if role_arn:
        return AssumedRole(str(role_arn), external_id=ctx.tenant, tenant=ctx.tenant)
    if default_role_arn:
        return AssumedRole(default_role_arn, external_id=None, tenant=ctx.tenant)
    return None


class ClientFactory(Protocol):
    """Returns a boto3 client for a service (and, when asked, a region).

    Adapters call it as ``clients(service, timeouts=t)`` and, for a target in another
    region, ``clients(service, region, timeouts=t)``. A factory that honours
    ``timeouts`` (:class:`Boto3ClientFactory` does) returns a client configured with
    them; one that ignores them (a test's stub) gives up the bound.
    """

    def __call__(self, service: str, /, *args: Any, **kwargs: Any) -> Any: ...


class Boto3ClientFactory:
    """The default :class:`ClientFactory`: cached boto3 clients per service, region and timeouts.

    Asked with ``timeouts`` (a :class:`CallTimeouts`), it returns a client built
    with exactly those socket timeouts and SDK attempts; the adapters derive them
    from each job's timeout, so no call outlives the job. The clients are cached
    (the least recently used beyond :data:`MAX_CACHED_CLIENTS` are dropped): jobs
    share a few timeouts, and a client per timeout costs one creation.

    Without ``timeouts``, SDK retries stay on for every service but Lambda: a
    synchronous Invoke that times out on the client side may still be running, and
    the SDK would start it again. Lambda throttles come back as retryable results
    instead.

    Parameters
    ----------
    session : boto3.session.Session, optional
        Defaults to a new session (environment credentials and region).
    endpoint_url : str, optional
        One endpoint for every service (local mode: moto server).
    region_name : str, optional
        Default region when the caller does not name one.
    """

    def __init__(
        self,
        session: Any | None = None,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        default_role_arn: str = "",
    ) -> None:
        import boto3  # the Lambda runtime ships it; imported late to keep imports cheap

        self._session = session or boto3.session.Session(region_name=region_name)
        self._endpoint_url = endpoint_url
        self._region = region_name or self._session.region_name
        self.default_role_arn = default_role_arn
        self._clients: OrderedDict[tuple[str, str | None, CallTimeouts, AssumedRole | None], Any] = (
            OrderedDict()
        )
        self._role_sessions: OrderedDict[AssumedRole, Any] = OrderedDict()
        self._lock = threading.Lock()  # boto3 sessions are not thread-safe for client creation

    def _session_for(self, role: AssumedRole) -> Any:
        """A session whose credentials come from assuming ``role``, refreshed before they expire."""
        session = self._role_sessions.get(role)
        if session is not None:
            self._role_sessions.move_to_end(role)
            return session
        import boto3
        import botocore.session
        from botocore.credentials import RefreshableCredentials

        sts = self._session.client("sts", region_name=self._region, endpoint_url=self._endpoint_url)

        def fetch() -> dict[str, str]:
            credentials = sts.assume_role(**role.assume_request())["Credentials"]
            return {
                "access_key": credentials["AccessKeyId"],
                "secret_key": credentials["SecretAccessKey"],
                "token": credentials["SessionToken"],
                "expiry_time": credentials["Expiration"].isoformat(),
            }

        credentials = RefreshableCredentials.create_from_metadata(
            metadata=fetch(), refresh_using=fetch, method="sts-assume-role"
        )
        core = botocore.session.get_session()
        core._credentials = credentials  # botocore's documented way to give a session fixed providers
        session = boto3.session.Session(botocore_session=core, region_name=self._region)
        self._role_sessions[role] = session
        while len(self._role_sessions) > MAX_CACHED_ROLES:
            self._role_sessions.popitem(last=False)
        return session

    def __call__(
        self,
        service: str,
        region: str | None = None,
        *,
        timeouts: CallTimeouts | None = None,
        role: AssumedRole | None = None,
    ) -> Any:
        region = region or self._region
        if timeouts is None:
            timeouts = (
                lambda_wait_timeouts(LAMBDA_MAX_RUN_S)
                if service == "lambda"
                else CallTimeouts(API_CONNECT_S, API_READ_S, SDK_ATTEMPTS)
            )
        key = (service, region, timeouts, role)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                session = self._session if role is None else self._session_for(role)
                client = session.client(
                    service, region_name=region, endpoint_url=self._endpoint_url, config=timeouts.config()
                )
                self._clients[key] = client
                while len(self._clients) > MAX_CACHED_CLIENTS:
                    self._clients.popitem(last=False)
            else:
                self._clients.move_to_end(key)
            return client


# --------------------------------------------------------------------------- helpers


def _arn_parts(arn: str) -> tuple[str, str, str]:
    """(region, account, resource) of an ARN already validated by the model."""
    parts = arn.split(":", 5)
    if len(parts) != 6:
        raise ValueError(f"not an ARN: {arn!r}")
    return parts[3], parts[4], parts[5]


def _client(
    clients: ClientFactory, service: str, region: str, timeouts: CallTimeouts, role: AssumedRole | None = None
) -> Any:
    # ``role`` is passed only when there is one: factories written before roles keep working.
    extra: dict[str, Any] = {"role": role} if role is not None else {}
    client = clients(service, timeouts=timeouts, **extra)
    client_region = getattr(getattr(client, "meta", None), "region_name", None)
    if region and client_region and client_region != region:
        client = clients(service, region, timeouts=timeouts, **extra)
    return client


def _api_client(clients: ClientFactory, service: str, region: str, target: Any, ctx: SlotContext) -> Any:
    """The client of an API call for ``target`` (:func:`api_call_timeouts`, the target's role)."""
    return _client(clients, service, region, api_call_timeouts(ctx.timeout_s), _role(clients, target, ctx))


def _role(clients: ClientFactory, target: Any, ctx: SlotContext) -> AssumedRole | None:
    """The target's execution role, else the factory's default target role (if it has one)."""
    return role_for(target, ctx, str(getattr(clients, "default_role_arn", "") or ""))


def _digest(*parts: str) -> str:
    """A stable hex digest of the parts (tenant is included so job ids may repeat across tenants)."""
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def dedup_id(ctx: SlotContext) -> str:
    """The SQS/SNS FIFO deduplication id of a slot: the same for every attempt.

    A hex SHA-256 of tenant and ``<job_id>:<slot>`` (64 characters, inside the
    128-character, punctuation-restricted limit whatever the slot key holds).
    """
    return _digest(ctx.tenant, ctx.idempotency_key)


def execution_name(ctx: SlotContext) -> str:
    """The Step Functions execution name of a slot.

    The readable ``<job_id>-<slot>`` with every character outside
    ``[A-Za-z0-9_-]`` replaced by ``-``, cut so that a ``-`` and a 16-hex-digit
    digest of tenant and key fit in 80 characters. The digest keeps two slots
    apart even when cutting or replacing made their readable parts equal.
    """
    readable = re.sub(r"[^A-Za-z0-9_-]", "-", f"{ctx.job_id}-{ctx.slot}")
    suffix = _digest(ctx.tenant, ctx.idempotency_key)[:16]
    return f"{readable[: SFN_NAME_CHARS - len(suffix) - 1]}-{suffix}"


def _json_body(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def message_body(payload: Any) -> str:
    """SQS/SNS bodies: a string payload is sent as it is, anything else as JSON."""
    return payload if isinstance(payload, str) and payload else _json_body(payload)


def _slot_attributes(ctx: SlotContext) -> dict[str, dict[str, str]]:
    return {
        "punctual-idempotency-key": {"DataType": "String", "StringValue": ctx.idempotency_key},
        "punctual-fencing-token": {"DataType": "String", "StringValue": ctx.fencing_token},
        "punctual-job-id": {"DataType": "String", "StringValue": ctx.job_id},
        "punctual-tenant": {"DataType": "String", "StringValue": ctx.tenant},
        "punctual-slot": {"DataType": "String", "StringValue": ctx.slot},
        "punctual-attempt": {"DataType": "Number", "StringValue": str(ctx.attempt)},
    }


def _access_denied(exc: Exception) -> bool:
    if not isinstance(exc, ClientError):
        return False
    code = str(exc.response.get("Error", {}).get("Code", ""))
    return code in ("AccessDeniedException", "AccessDenied", "UnauthorizedOperation")


def classify_aws_error(exc: Exception, action: str) -> TargetResult:
    """Turn a boto3 failure into a result: throttling, 5xx and network trouble retry.

    Parameters
    ----------
    exc : Exception
        What the client raised.
    action : str
        ``"<service> <Operation>"``, for the summary.

    Returns
    -------
    TargetResult
        Retryable for throttling, service-side (5xx) and connection errors;
        permanent for everything the caller got wrong (4xx, bad parameters).
    """
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        message = str(error.get("Message", "")).strip()
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        summary = f"{action}: {code}" + (f": {message}" if message else "")
        if code in _RETRYABLE_CODES or status >= 500 or status == 429:
            return TargetResult.retryable(summary[:500])
        return TargetResult.permanent(summary[:500])
    if isinstance(exc, ParamValidationError):
        return TargetResult.permanent(f"{action}: invalid parameters: {exc}"[:500])
    if isinstance(exc, BotoCoreError):
        result = TargetResult.retryable(f"{action}: {type(exc).__name__}: {exc}"[:500])
        result.timed_out = isinstance(exc, ReadTimeoutError)
        return result
    return TargetResult.retryable(f"{action}: unexpected {type(exc).__name__}: {exc}"[:500])


# --------------------------------------------------------------------------- Lambda


class LambdaTargetAdapter:
    """``lambda``: Invoke a function.

    ``RequestResponse`` waits for the function: a function error (``FunctionError``
    in the response) is a retryable failure, with the error type and message in
    the summary. ``Event`` queues the invocation: accepted (202) is success.

    The wait is bounded by the job's timeout (:func:`lambda_wait_timeouts`: read
    timeout ``min(timeout, 900 s)`` plus ``read_margin_s``, one try); an Event
    invocation is an API call (:func:`api_call_timeouts`, one try too: an SDK
    retry after a lost answer would queue the function twice). A call cut off is a
    retryable, timed-out result. The function itself is not stopped: Lambda runs it
    to its own timeout, so give the function a timeout no longer than the job's.

    Parameters
    ----------
    clients : ClientFactory
        Supplies the ``lambda`` client.
    read_margin_s : float, optional
        Seconds awaited past the job's timeout for a synchronous answer.
    """

    def __init__(self, clients: ClientFactory, *, read_margin_s: float = LAMBDA_READ_MARGIN_S) -> None:
        self.clients = clients
        self.read_margin_s = read_margin_s

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        """Invoke ``target.function_arn`` with the JSON payload; see the class notes."""
        arn = str(target.function_arn)
        invocation_type = str(getattr(target, "invocation_type", "RequestResponse"))
        try:
            region, _, _ = _arn_parts(arn)
            body = _json_body(payload).encode()
        except (TypeError, ValueError) as exc:
            return TargetResult.permanent(f"lambda target: {exc}")
        request: dict[str, Any] = {"FunctionName": arn, "InvocationType": invocation_type, "Payload": body}
        if invocation_type == "RequestResponse":
            # Client context reaches synchronous invocations only.
            custom = {
                "idempotency_key": ctx.idempotency_key,
                "fencing_token": ctx.fencing_token,
                "job_id": ctx.job_id,
                "tenant": ctx.tenant,
                "slot": ctx.slot,
                "attempt": str(ctx.attempt),
            }
            request["ClientContext"] = base64.b64encode(json.dumps({"custom": custom}).encode()).decode()
        timeouts = (
            lambda_wait_timeouts(ctx.timeout_s, self.read_margin_s)
            if invocation_type == "RequestResponse"
            else api_call_timeouts(ctx.timeout_s, sdk_retries=False)
        )
        try:
            response = _client(
                self.clients, "lambda", region, timeouts, _role(self.clients, target, ctx)
            ).invoke(**request)
            status = int(response.get("StatusCode", 0))
            function_error = response.get("FunctionError")
            stream = response.get("Payload")
            data: bytes = stream.read(MAX_LAMBDA_RESPONSE_BYTES) if stream is not None else b""
        except Exception as exc:
            return classify_aws_error(exc, "lambda Invoke")
        text = data.decode("utf-8", "replace")
        detail: dict[str, Any] = {"status_code": status, "response": text[:1024]}
        if version := response.get("ExecutedVersion"):
            detail["executed_version"] = version
        if function_error:
            error_type, error_message = _lambda_error(text)
            summary = f"function error ({function_error}): {error_type}: {error_message}".strip(": ")
            result = TargetResult.retryable(summary[:500])
            result.timed_out = "timed out" in error_message.lower() or error_type == "Sandbox.Timedout"
            result.detail = detail
            return result
        expected = 202 if invocation_type == "Event" else 200
        if status != expected:
            result = TargetResult.retryable(f"lambda Invoke answered status {status}, expected {expected}")
            result.detail = detail
            return result
        return TargetResult.ok("invoked" if invocation_type == "RequestResponse" else "queued", **detail)


def _lambda_error(text: str) -> tuple[str, str]:
    try:
        body = json.loads(text)
    except ValueError:
        return "", " ".join(text.split())[:300]
    if isinstance(body, dict):
        return str(body.get("errorType", "")), " ".join(str(body.get("errorMessage", "")).split())[:300]
    return "", " ".join(text.split())[:300]


# --------------------------------------------------------------------------- SQS


class SqsTargetAdapter:
    """``sqs``: SendMessage to a queue named by ARN.

    FIFO queues (name ending in ``.fifo``) get ``MessageGroupId`` (the target's
    ``message_group_id``, else the job id) and a ``MessageDeduplicationId`` from
    the slot, so a re-run of the slot within five minutes is dropped by SQS.
    Every message carries the slot's message attributes (see the module notes).

    Parameters
    ----------
    clients : ClientFactory
        Supplies the ``sqs`` client.
    """

    def __init__(self, clients: ClientFactory) -> None:
        self.clients = clients

    @staticmethod
    def _queue_url(client: Any, arn: str) -> str:
        # Built, not looked up: GetQueueUrl would need a permission the workers do not
        # have, and the client's endpoint is right for every partition and for local mode.
        _, account, name = _arn_parts(arn)
        return f"{str(client.meta.endpoint_url).rstrip('/')}/{account}/{name}"

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        """Send the payload to ``target.queue_arn``; see the class notes."""
        try:
            body = message_body(payload)
        except (TypeError, ValueError) as exc:
            return TargetResult.permanent(f"sqs target: {exc}")
        return self.send(target, body, _slot_attributes(ctx), ctx)

    def send(
        self, target: Any, body: str, attributes: dict[str, dict[str, str]], ctx: SlotContext
    ) -> TargetResult:
        """Send ``body`` with ``attributes`` to ``target.queue_arn`` as the target's role (a job's
        dead-letter queue is sent to this way too)."""
        arn = str(target.queue_arn)
        try:
            region, _, name = _arn_parts(arn)
        except ValueError as exc:
            return TargetResult.permanent(f"sqs target: {exc}")
        request: dict[str, Any] = {"MessageBody": body, "MessageAttributes": attributes}
        if name.endswith(".fifo"):
            request["MessageGroupId"] = getattr(target, "message_group_id", None) or ctx.message_group
            request["MessageDeduplicationId"] = dedup_id(ctx)
        try:
            client = _api_client(self.clients, "sqs", region, target, ctx)
            request["QueueUrl"] = self._queue_url(client, arn)
            response = client.send_message(**request)
        except Exception as exc:
            return classify_aws_error(exc, "sqs SendMessage")
        detail = {"message_id": response.get("MessageId")}
        if "SequenceNumber" in response:
            detail["sequence_number"] = response["SequenceNumber"]
        return TargetResult.ok("sent", **detail)


# --------------------------------------------------------------------------- SNS


class SnsTargetAdapter:
    """``sns``: Publish to a topic; FIFO topics get a group and a slot dedup id.

    Parameters
    ----------
    clients : ClientFactory
        Supplies the ``sns`` client.
    """

    def __init__(self, clients: ClientFactory) -> None:
        self.clients = clients

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        """Publish the payload to ``target.topic_arn`` with the slot's message attributes."""
        arn = str(target.topic_arn)
        try:
            region, _, name = _arn_parts(arn)
            message = message_body(payload)
        except (TypeError, ValueError) as exc:
            return TargetResult.permanent(f"sns target: {exc}")
        request: dict[str, Any] = {
            "TopicArn": arn,
            "Message": message,
            "MessageAttributes": _slot_attributes(ctx),
        }
        if name.endswith(".fifo"):
            request["MessageGroupId"] = ctx.message_group
            request["MessageDeduplicationId"] = dedup_id(ctx)
        try:
            client = _api_client(self.clients, "sns", region, target, ctx)
            response = client.publish(**request)
        except Exception as exc:
            return classify_aws_error(exc, "sns Publish")
        return TargetResult.ok("published", message_id=response.get("MessageId"))


# --------------------------------------------------------------------------- EventBridge

_EVENTS_RETRYABLE_ENTRY_CODES = frozenset(
    {"ThrottlingException", "InternalFailure", "InternalException", "ServiceUnavailable"}
)


class EventBridgeTargetAdapter:
    """``eventbridge``: PutEvents of one event whose detail is the payload.

    The detail must be a JSON object (an EventBridge rule); anything else is a
    permanent failure. ``Time`` is the slot's scheduled instant. A failed entry
    (``FailedEntryCount`` > 0) is a failure even though the call itself succeeded:
    retryable for throttling and internal failures, permanent otherwise.

    Parameters
    ----------
    clients : ClientFactory
        Supplies the ``events`` client.
    """

    def __init__(self, clients: ClientFactory) -> None:
        self.clients = clients

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        """Put one event on ``target.event_bus_arn``; see the class notes."""
        arn = str(target.event_bus_arn)
        if not isinstance(payload, dict):
            return TargetResult.permanent(
                f"eventbridge detail must be a JSON object, the payload is {type(payload).__name__}"
            )
        try:
            region, _, _ = _arn_parts(arn)
            detail = _json_body(payload)
        except (TypeError, ValueError) as exc:
            return TargetResult.permanent(f"eventbridge target: {exc}")
        entry = {
            "Time": ctx.scheduled_at,
            "Source": str(target.source),
            "DetailType": str(getattr(target, "detail_type", "Punctual Scheduled Job")),
            "Detail": detail,
            "EventBusName": arn,
        }
        try:
            client = _api_client(self.clients, "events", region, target, ctx)
            response = client.put_events(Entries=[entry])
        except Exception as exc:
            return classify_aws_error(exc, "events PutEvents")
        entries = response.get("Entries") or [{}]
        first = entries[0]
        if int(response.get("FailedEntryCount", 0)) > 0 or first.get("ErrorCode"):
            code = str(first.get("ErrorCode", "Unknown"))
            summary = f"events PutEvents: entry failed: {code}: {first.get('ErrorMessage', '')}".strip(": ")
            if code in _EVENTS_RETRYABLE_ENTRY_CODES:
                return TargetResult.retryable(summary[:500])
            return TargetResult.permanent(summary[:500])
        return TargetResult.ok("event put", event_id=first.get("EventId"))


# --------------------------------------------------------------------------- Step Functions


class StepFunctionsTargetAdapter:
    """``stepfunctions``: StartExecution named after the slot (:func:`execution_name`).

    A second start of the same slot (a retry, or a re-run after a worker crash)
    is refused by the service with ``ExecutionAlreadyExists``, which counts as
    success: the slot's execution exists. Success means *started*; the
    execution's own outcome is the state machine's business.

    Parameters
    ----------
    clients : ClientFactory
        Supplies the ``stepfunctions`` client.
    """

    def __init__(self, clients: ClientFactory) -> None:
        self.clients = clients

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        """Start an execution of ``target.state_machine_arn`` with the payload as input."""
        arn = str(target.state_machine_arn)
        name = execution_name(ctx)
        try:
            region, _, _ = _arn_parts(arn)
            execution_input = _json_body(payload)
        except (TypeError, ValueError) as exc:
            return TargetResult.permanent(f"stepfunctions target: {exc}")
        try:
            client = _api_client(self.clients, "stepfunctions", region, target, ctx)
            response = client.start_execution(stateMachineArn=arn, name=name, input=execution_input)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ExecutionAlreadyExists":
                return TargetResult.ok("already started for this slot", execution_name=name)
            return classify_aws_error(exc, "stepfunctions StartExecution")
        except Exception as exc:
            return classify_aws_error(exc, "stepfunctions StartExecution")
        return TargetResult.ok("started", execution_arn=response.get("executionArn"), execution_name=name)


# --------------------------------------------------------------------------- ECS


def _started_by(ctx: SlotContext) -> str:
    """ECS ``startedBy`` (36 characters at most): marks the task as this slot's."""
    return "punctual-" + _digest(ctx.tenant, ctx.idempotency_key)[:27]


class EcsTargetAdapter:
    """``ecs``: RunTask, then poll DescribeTasks until the task stops.

    * A task already RUNNING for this slot (``startedBy`` marks it) is adopted,
      not started again: a worker that took over a crashed worker's execution
      keeps tracking the same task.
    * RunTask's ``clientToken`` is derived from slot and attempt, so an SDK retry
      of the call starts one task.
    * The container gets ``PUNCTUAL_JOB_ID``, ``PUNCTUAL_SLOT``,
      ``PUNCTUAL_ATTEMPT``, ``PUNCTUAL_SCHEDULED_AT``,
      ``PUNCTUAL_IDEMPOTENCY_KEY``, ``PUNCTUAL_FENCING_TOKEN`` and
      ``PUNCTUAL_PAYLOAD`` (JSON) in its environment: ``container_name``, else
      the task definition's first essential container.
    * Between polls ``ctx.heartbeat()`` extends the lease; if the lease was lost, or
      the run is cancelled (``ctx.cancel``: the worker shuts down), the adapter stops
      tracking and leaves the task running for the next attempt, which adopts it.
      When ``ctx.timeout_s`` passes, the task is stopped and the result is a
      retryable time-out. No poll sleeps past that instant, and each ECS call is
      bounded by :func:`api_call_timeouts`, so the adapter returns at most two
      calls (the last DescribeTasks and the StopTask) after the timeout.
    * The exit code decides: ``container_name``'s, else every essential
      container's. All 0 succeeds; anything else, or a task that failed to
      start, is a retryable failure with the stop reason in the summary.

    Parameters
    ----------
    clients : ClientFactory
        Supplies the ``ecs`` client.
    clock : Clock, optional
        Measures the job timeout and sleeps between polls.
    poll_interval_s : float, optional
        Seconds between DescribeTasks calls (each also heartbeats).
    """

    def __init__(
        self,
        clients: ClientFactory,
        *,
        clock: Clock | None = None,
        poll_interval_s: float = ECS_POLL_INTERVAL_S,
    ) -> None:
        self.clients = clients
        self.clock: Clock = clock or SystemClock()
        self.poll_interval_s = poll_interval_s
        self._essentials: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        """Run (or adopt) the slot's task and wait for it to stop; see the class notes."""
        cluster = str(target.cluster_arn)
        started_at = self.clock.now()
        try:
            region, _, _ = _arn_parts(cluster)
        except ValueError as exc:
            return TargetResult.permanent(f"ecs target: {exc}")
        try:
            client = _api_client(self.clients, "ecs", region, target, ctx)
            named = getattr(target, "container_name", None)
            decisive = (
                (named,) if named else self._essential_containers(client, str(target.task_definition_arn))
            )
            task_arn, adopted = self._start(client, target, payload, ctx, decisive[0] if decisive else None)
        except _EcsFailure as failure:
            return failure.result
        except Exception as exc:
            return classify_aws_error(exc, "ecs")
        result = self._track(client, cluster, task_arn, ctx, started_at, decisive)
        result.detail.setdefault("task_arn", task_arn)
        result.detail["adopted"] = adopted
        return result

    # -- starting

    def _start(
        self, client: Any, target: Any, payload: Any, ctx: SlotContext, container: str | None
    ) -> tuple[str, bool]:
        cluster = str(target.cluster_arn)
        started_by = _started_by(ctx)
        try:
            running = client.list_tasks(cluster=cluster, startedBy=started_by, desiredStatus="RUNNING")
        except Exception as exc:
            if not _access_denied(exc):
                raise _EcsFailure(classify_aws_error(exc, "ecs ListTasks")) from None
            # Without ecs:ListTasks a running task cannot be adopted; starting one is
            # still right (the container sees the idempotency key).
            logger.warning("ecs:ListTasks denied on %s: running tasks of a slot are not adopted", cluster)
            running = {}
        if running.get("taskArns"):
            return str(running["taskArns"][0]), True

        try:
            payload_json = _json_body(payload)
        except (TypeError, ValueError) as exc:
            raise _EcsFailure(TargetResult.permanent(f"ecs target: payload is not JSON: {exc}")) from None
        environment: list[dict[str, str]] = [
            {"name": "PUNCTUAL_JOB_ID", "value": ctx.job_id},
            {"name": "PUNCTUAL_TENANT", "value": ctx.tenant},
            {"name": "PUNCTUAL_SLOT", "value": ctx.slot},
            {"name": "PUNCTUAL_ATTEMPT", "value": str(ctx.attempt)},
            {"name": "PUNCTUAL_SCHEDULED_AT", "value": format_instant_adaptive(ctx.scheduled_at)},
            {"name": "PUNCTUAL_IDEMPOTENCY_KEY", "value": ctx.idempotency_key},
            {"name": "PUNCTUAL_FENCING_TOKEN", "value": ctx.fencing_token},
            {"name": "PUNCTUAL_PAYLOAD", "value": payload_json},
        ]
        overrides: dict[str, Any] = (
            {"containerOverrides": [{"name": container, "environment": environment}]} if container else {}
        )
        if len(json.dumps(overrides)) > MAX_ECS_OVERRIDE_CHARS:
            raise _EcsFailure(
                TargetResult.permanent(
                    "ecs target: payload too large for container overrides "
                    f"({MAX_ECS_OVERRIDE_CHARS} characters in all)"
                )
            )
        vpc: dict[str, Any] = {
            "subnets": list(target.subnets),
            "assignPublicIp": "ENABLED" if getattr(target, "assign_public_ip", False) else "DISABLED",
        }
        if security_groups := list(getattr(target, "security_groups", None) or []):
            vpc["securityGroups"] = security_groups
        request: dict[str, Any] = {
            "cluster": cluster,
            "taskDefinition": str(target.task_definition_arn),
            "count": 1,
            "launchType": str(getattr(target, "launch_type", "FARGATE")),
            "networkConfiguration": {"awsvpcConfiguration": vpc},
            "startedBy": started_by,
            "clientToken": _digest(ctx.tenant, ctx.idempotency_key, str(ctx.attempt)),
        }
        if overrides:
            request["overrides"] = overrides
        try:
            response = client.run_task(**request)
        except Exception as exc:
            raise _EcsFailure(classify_aws_error(exc, "ecs RunTask")) from None
        tasks = response.get("tasks") or []
        if not tasks:
            reasons = "; ".join(
                str(f.get("reason", "unknown")) + (f" ({f['detail']})" if f.get("detail") else "")
                for f in response.get("failures") or []
            )
            raise _EcsFailure(
                TargetResult.retryable(f"ecs RunTask started no task: {reasons or 'no reason given'}"[:500])
            )
        return str(tasks[0]["taskArn"]), False

    def _essential_containers(self, client: Any, task_definition: str) -> tuple[str, ...]:
        with self._lock:
            cached = self._essentials.get(task_definition)
        if cached:
            return cached
        try:
            definition = client.describe_task_definition(taskDefinition=task_definition)["taskDefinition"]
        except Exception as exc:
            if not _access_denied(exc):
                raise _EcsFailure(classify_aws_error(exc, "ecs DescribeTaskDefinition")) from None
            # Without ecs:DescribeTaskDefinition the essential container is unknown: the
            # task runs without the PUNCTUAL_* environment and every container's exit decides.
            logger.warning(
                "ecs:DescribeTaskDefinition denied on %s: name container_name on the target", task_definition
            )
            return ()
        containers = definition.get("containerDefinitions") or []
        names = tuple(str(c["name"]) for c in containers if c.get("essential", True))
        if not names:
            raise _EcsFailure(TargetResult.permanent("ecs task definition has no essential container"))
        with self._lock:
            self._essentials[task_definition] = names
        return names

    # -- tracking

    def _track(
        self,
        client: Any,
        cluster: str,
        task_arn: str,
        ctx: SlotContext,
        started_at: datetime,
        decisive: tuple[str, ...],
    ) -> TargetResult:
        deadline = started_at + timedelta(seconds=ctx.timeout_s)
        errors = 0
        while True:
            try:
                described = client.describe_tasks(cluster=cluster, tasks=[task_arn])
            except Exception as exc:
                failure = classify_aws_error(exc, "ecs DescribeTasks")
                errors += 1
                if errors >= ECS_MAX_DESCRIBE_ERRORS or failure.outcome is not Outcome.RETRYABLE:
                    failure.summary = f"lost track of the ecs task: {failure.summary}"
                    return failure
            else:
                errors = 0
                tasks = described.get("tasks") or []
                if not tasks:
                    reasons = ", ".join(str(f.get("reason", "")) for f in described.get("failures") or [])
                    return TargetResult.retryable(f"ecs task disappeared ({reasons or 'MISSING'})")
                if tasks[0].get("lastStatus") == "STOPPED":
                    return decide_task_outcome(tasks[0], decisive)
            # Lease lost, or the run cancelled (the worker shuts down): the task keeps running,
            # and the attempt that follows adopts it (startedBy names the slot), so nothing
            # starts twice.
            if ctx.cancelled:
                return TargetResult.stopped_early(
                    "stopped: the run was cancelled; the ecs task is left running for the next attempt"
                )
            if not ctx.heartbeat():
                return TargetResult.stopped_early(
                    "lease lost: the ecs task is left to the worker that took over"
                )
            now = self.clock.now()
            if now >= deadline:
                return self._stop_for_timeout(client, cluster, task_arn, ctx)
            self._pause(ctx, min(self.poll_interval_s, (deadline - now).total_seconds()))

    def _pause(self, ctx: SlotContext, seconds: float) -> None:
        """Sleep between polls, in short steps so that a cancelled run stops tracking at once."""
        until = self.clock.now() + timedelta(seconds=seconds)
        while not ctx.cancelled:
            left = (until - self.clock.now()).total_seconds()
            if left <= 0:
                return
            self.clock.sleep(min(left, ECS_CANCEL_POLL_S))

    @staticmethod
    def _stop_for_timeout(client: Any, cluster: str, task_arn: str, ctx: SlotContext) -> TargetResult:
        note = ""
        try:
            client.stop_task(
                cluster=cluster, task=task_arn, reason=f"Punctual: timeout of {ctx.timeout_s:g}s"
            )
        except Exception as exc:
            note = f" (StopTask failed: {classify_aws_error(exc, 'ecs StopTask').summary})"
        result = TargetResult.retryable(
            f"ecs task ran past the {ctx.timeout_s:g}s timeout and was stopped{note}"
        )
        result.timed_out = True
        return result


def decide_task_outcome(task: Mapping[str, Any], decisive: tuple[str, ...] = ()) -> TargetResult:
    """Judge a STOPPED ECS task by its containers' exit codes.

    Parameters
    ----------
    task : mapping
        One entry of DescribeTasks' ``tasks``.
    decisive : tuple of str
        Container names whose exit codes decide; all containers when empty or
        when none of them is present.

    Returns
    -------
    TargetResult
        Success when every decisive container exited 0; otherwise retryable, with
        the exit code, the container's reason and the task's stop reason.
    """
    stop_code = str(task.get("stopCode", ""))
    stopped_reason = " ".join(str(task.get("stoppedReason", "")).split())
    containers = list(task.get("containers") or [])
    chosen = [c for c in containers if c.get("name") in decisive] or containers
    detail: dict[str, Any] = {
        "stop_code": stop_code,
        "stopped_reason": stopped_reason[:500],
        "exit_codes": {str(c.get("name")): c.get("exitCode") for c in chosen},
    }
    if stop_code == "TaskFailedToStart":
        result = TargetResult.retryable(f"ecs task failed to start: {stopped_reason}"[:500])
    elif not chosen or any(c.get("exitCode") is None for c in chosen):
        result = TargetResult.retryable(
            f"ecs task stopped without an exit code ({stop_code or 'no stop code'}: {stopped_reason})"[:500]
        )
    elif failed := [c for c in chosen if c.get("exitCode") != 0]:
        first = failed[0]
        why = f" ({first['reason']})" if first.get("reason") else ""
        tail = f"; {stopped_reason}" if stopped_reason else ""
        result = TargetResult.retryable(
            f"container {first.get('name')} exited with code {first['exitCode']}{why}{tail}"[:500]
        )
    else:
        result = TargetResult.ok("task exited 0")
    result.detail = detail
    return result


class _EcsFailure(Exception):
    """Carries a finished result out of the start-up steps."""

    def __init__(self, result: TargetResult) -> None:
        super().__init__(result.summary)
        self.result = result
