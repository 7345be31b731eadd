"""AWS service targets: Lambda, SQS, SNS, EventBridge, Step Functions (and ECS RunTask, in :mod:`.ecs`).

Every adapter takes a *client factory* (:mod:`punctual.delivery.targets.aws_clients`: call
timeouts bounded by the job's timeout, execution roles); the ECS adapter is
:mod:`punctual.delivery.targets.ecs`.

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
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError, ReadTimeoutError

from punctual.delivery.targets.aws_clients import (
    LAMBDA_READ_MARGIN_S,
    ClientFactory,
    api_call_timeouts,
    api_client,
    lambda_wait_timeouts,
    target_client,
    target_role,
)
from punctual.delivery.targets.base import SlotContext, TargetResult, one_line, transient_aws_error
from punctual.delivery.targets.payload import nominal_instant

__all__ = [
    "REQUEST_LIMIT_BYTES",
    "EventBridgeTargetAdapter",
    "LambdaTargetAdapter",
    "SnsTargetAdapter",
    "SqsTargetAdapter",
    "StepFunctionsTargetAdapter",
    "classify_aws_error",
    "dedup_id",
    "execution_name",
    "request_bytes",
    "sqs_refused_character",
    "sqs_text",
]

logger = logging.getLogger(__name__)

MAX_LAMBDA_RESPONSE_BYTES = 64 * 1024
# Lambda's message when the function outlived its own timeout ("2026-11-30T10:00:03Z Task timed out
# after 3.00 seconds"; newer runtimes: errorType Sandbox.Timedout)
_LAMBDA_TIMEOUT_RE = re.compile(r"\bTask timed out after [0-9.]+ seconds")
SFN_NAME_CHARS = 80

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
        "KmsThrottlingException",  # Step Functions
        "KMSThrottling",  # SNS (the code its KMSThrottlingException is sent as)
        "KMSThrottled",
        "KmsThrottled",
        "KMS.ThrottlingException",  # SQS, an SSE-KMS queue: KmsThrottled's query-compatible code
        "ExecutionLimitExceeded",  # Step Functions: open executions at the quota, until some end
        "SnapStartNotReadyException",  # Lambda: a SnapStart version still initialising
        "ENINotReadyException",
        "KMSInternalException",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
    }
)


# --------------------------------------------------------------------------- helpers


def arn_parts(arn: str) -> tuple[str, str, str]:
    """(region, account, resource) of an ARN already validated by the model."""
    parts = arn.split(":", 5)
    if len(parts) != 6:
        raise ValueError(f"not an ARN: {arn!r}")
    return parts[3], parts[4], parts[5]


def slot_digest(*parts: str) -> str:
    """A stable hex digest of the parts (tenant is included so job ids may repeat across tenants)."""
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def dedup_id(ctx: SlotContext) -> str:
    """The SQS/SNS FIFO deduplication id of a slot: the same for every attempt.

    A hex SHA-256 of tenant and ``<job_id>:<slot>`` (64 characters, inside the
    128-character, punctuation-restricted limit whatever the slot key holds).
    """
    return slot_digest(ctx.tenant, ctx.idempotency_key)


def execution_name(ctx: SlotContext) -> str:
    """The Step Functions execution name of a slot.

    The readable ``<job_id>-<slot>`` with every character outside
    ``[A-Za-z0-9_-]`` replaced by ``-``, cut so that a ``-`` and a 16-hex-digit
    digest of tenant and key fit in 80 characters. The digest keeps two slots
    apart even when cutting or replacing made their readable parts equal.
    """
    readable = re.sub(r"[^A-Za-z0-9_-]", "-", f"{ctx.job_id}-{ctx.slot}")
    suffix = slot_digest(ctx.tenant, ctx.idempotency_key)[:16]
    return f"{readable[: SFN_NAME_CHARS - len(suffix) - 1]}-{suffix}"


def json_body(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


# What SQS refuses in a message (InvalidMessageContents): anything outside #x9, #xA, #xD,
# #x20-#xD7FF, #xE000-#xFFFD and #x10000-#x10FFFF (JSON escapes the control characters, not these)
_SQS_REFUSED_RE = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def sqs_refused_character(text: str) -> str | None:
    """The first character of ``text`` SQS refuses in a message body, or None."""
    found = _SQS_REFUSED_RE.search(text)
    return found.group(0) if found else None


def sqs_text(text: str) -> str:
    """``text`` with every character SQS refuses as U+FFFD (a message attribute's value: an
    execution's error, recorded before its summary was cleaned, holds what a receiver sent)."""
    return _SQS_REFUSED_RE.sub("\ufffd", text)


def message_body(payload: Any) -> str:
    """SQS/SNS bodies: a string payload is sent as it is, anything else as JSON (with the
    noncharacters U+FFFE and U+FFFF escaped: SQS refused every send of a payload holding one)."""
    if isinstance(payload, str) and payload:
        return payload
    return _SQS_REFUSED_RE.sub(lambda found: f"\\u{ord(found.group(0)):04x}", json_body(payload))


def _slot_attributes(ctx: SlotContext) -> dict[str, dict[str, str]]:
    return {
        "punctual-idempotency-key": {"DataType": "String", "StringValue": ctx.idempotency_key},
        "punctual-fencing-token": {"DataType": "String", "StringValue": ctx.fencing_token},
        "punctual-job-id": {"DataType": "String", "StringValue": ctx.job_id},
        "punctual-tenant": {"DataType": "String", "StringValue": ctx.tenant},
        "punctual-slot": {"DataType": "String", "StringValue": ctx.slot},
        "punctual-attempt": {"DataType": "Number", "StringValue": str(ctx.attempt)},
    }


# What SNS Publish, an EventBridge entry and a Step Functions input may hold: 256 KiB each, SNS
# counting the message attributes (name, type, value) and EventBridge the entry's time (14 bytes),
# source and detail-type with its detail (PutEvents "Calculating the entry size").
REQUEST_LIMIT_BYTES = 256 * 1024


def request_bytes(target: Any, payload: Any, ctx: SlotContext) -> tuple[str, int] | None:
    """The service and the bytes it counts against :data:`REQUEST_LIMIT_BYTES` when ``target``
    is called with the rendered ``payload`` (None: a target without that limit)."""
    kind = getattr(target, "type", None)
    if kind == "sns":
        attributes = sum(
            len(name) + len(value["DataType"]) + len(value["StringValue"].encode())
            for name, value in _slot_attributes(ctx).items()
        )
        return "SNS Publish (message and attributes)", len(message_body(payload).encode()) + attributes
    if kind == "eventbridge":
        entry = 14 + len(str(target.source).encode()) + len(str(target.detail_type).encode())
        return "an EventBridge entry", entry + len(json_body({} if payload is None else payload).encode())
    if kind == "stepfunctions":
        return "a Step Functions input", len(json_body(payload).encode())
    return None


def access_denied(exc: Exception) -> bool:
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
        Retryable for throttling, time-outs (408), service-side (5xx) and connection errors;
        permanent for everything the caller got wrong (4xx, bad parameters).
    """
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        message = str(error.get("Message", "")).strip()
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        summary = f"{action}: {code}" + (f": {message}" if message else "")
        if getattr(exc, "operation_name", None) == "AssumeRole" and transient_aws_error(exc):
            # STS failing for a moment (the job's role is assumed as the call starts): not the
            # target's answer, nor the job's configuration (an AccessDenied is): deferred
            return TargetResult.deferred_by(f"STS unavailable: {summary}"[:500])
        # 408: a time-out on the service's side (Lambda: SnapStart restore, EFS mount), as HTTP's
        if code in _RETRYABLE_CODES or status >= 500 or status in (408, 429):
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
            region, _, _ = arn_parts(arn)
            body = json_body(payload).encode()
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
            response = target_client(
                self.clients, "lambda", region, timeouts, target_role(self.clients, target, ctx)
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
            result.timed_out = _lambda_timed_out(error_type, error_message)
            result.detail = detail
            return result
        expected = 202 if invocation_type == "Event" else 200
        if status != expected:
            result = TargetResult.retryable(f"lambda Invoke answered status {status}, expected {expected}")
            result.detail = detail
            return result
        return TargetResult.ok("invoked" if invocation_type == "RequestResponse" else "queued", **detail)


def _lambda_timed_out(error_type: str, error_message: str) -> bool:
    """Whether a function error is Lambda's own timeout: ``Sandbox.Timedout``, or (older runtimes)
    no error type and ``Task timed out after N seconds``. Not the function's own error saying
    "timed out" (QA28: a ``ReadTimeout`` it raised was recorded TIMED_OUT)."""
    return error_type == "Sandbox.Timedout" or (
        not error_type and _LAMBDA_TIMEOUT_RE.search(error_message) is not None
    )


def _lambda_error(text: str) -> tuple[str, str]:
    try:
        body = json.loads(text)
    except ValueError:
        return "", one_line(text, 300)
    if isinstance(body, dict):
        return one_line(str(body.get("errorType", "")), 300), one_line(str(body.get("errorMessage", "")), 300)
    return "", one_line(text, 300)


# --------------------------------------------------------------------------- SQS


class SqsTargetAdapter:
    """``sqs``: SendMessage to a queue named by ARN.

    FIFO queues (name ending in ``.fifo``) get ``MessageGroupId`` (the target's
    ``message_group_id``, else :attr:`SlotContext.message_group`) and a ``MessageDeduplicationId`` from
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
        _, account, name = arn_parts(arn)
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
            region, _, name = arn_parts(arn)
        except ValueError as exc:
            return TargetResult.permanent(f"sqs target: {exc}")
        request: dict[str, Any] = {"MessageBody": body, "MessageAttributes": attributes}
        if name.endswith(".fifo"):
            request["MessageGroupId"] = getattr(target, "message_group_id", None) or ctx.message_group
            request["MessageDeduplicationId"] = dedup_id(ctx)
        try:
            client = api_client(self.clients, "sqs", region, target, ctx)
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
            region, _, name = arn_parts(arn)
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
            client = api_client(self.clients, "sns", region, target, ctx)
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

    The detail must be a JSON object (an EventBridge rule): no payload puts ``{}``,
    anything else is a permanent failure. ``Time`` is the slot's scheduled instant. A failed entry
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
        if payload is None:  # no payload (registration takes it): the empty detail (QA: every slot failed)
            payload = {}
        if not isinstance(payload, dict):
            return TargetResult.permanent(
                f"eventbridge detail must be a JSON object, the payload is {type(payload).__name__}"
            )
        try:
            region, _, _ = arn_parts(arn)
            detail = json_body(payload)
        except (TypeError, ValueError) as exc:
            return TargetResult.permanent(f"eventbridge target: {exc}")
        entry = {
            "Time": nominal_instant(ctx),
            "Source": str(target.source),
            "DetailType": str(getattr(target, "detail_type", "Punctual Scheduled Job")),
            "Detail": detail,
            "EventBusName": arn,
        }
        try:
            client = api_client(self.clients, "events", region, target, ctx)
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
            region, _, _ = arn_parts(arn)
            execution_input = json_body(payload)
        except (TypeError, ValueError) as exc:
            return TargetResult.permanent(f"stepfunctions target: {exc}")
        try:
            client = api_client(self.clients, "stepfunctions", region, target, ctx)
            response = client.start_execution(stateMachineArn=arn, name=name, input=execution_input)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ExecutionAlreadyExists":
                return TargetResult.ok("already started for this slot", execution_name=name)
            return classify_aws_error(exc, "stepfunctions StartExecution")
        except Exception as exc:
            return classify_aws_error(exc, "stepfunctions StartExecution")
        return TargetResult.ok("started", execution_arn=response.get("executionArn"), execution_name=name)
