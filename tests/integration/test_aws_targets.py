"""Each AWS target against moto, and the botocore Stubber where moto cannot answer.

Stubber is used (and says so in the test) only for answers moto never gives: a Lambda
function error or throttle, a failed PutEvents entry, and ECS tasks that stop with a
non-zero exit code, fail to start, or cannot be placed.

The ECS target: test_aws_target_ecs.py; the shared moto rig: aws_targets_harness.py.
"""

from __future__ import annotations

import base64
import io
import json
import zipfile
from typing import Any

import pytest
from aws_targets_harness import ACCOUNT, REGION, T0, Clients, ctx, stubbed
from aws_targets_harness import clients as clients  # the fixture
from botocore.exceptions import ClientError, EndpointConnectionError, ParamValidationError, ReadTimeoutError
from botocore.response import StreamingBody
from botocore.stub import ANY

from punctual.delivery.targets import DefaultTargetInvoker
from punctual.delivery.targets.aws_clients import api_call_timeouts, lambda_wait_timeouts
from punctual.delivery.targets.aws_services import (
    EventBridgeTargetAdapter,
    LambdaTargetAdapter,
    SnsTargetAdapter,
    SqsTargetAdapter,
    StepFunctionsTargetAdapter,
    classify_aws_error,
    dedup_id,
    execution_name,
)
from punctual.delivery.targets.base import Outcome
from punctual.models import (
    EventBridgeTarget,
    LambdaTarget,
    SnsTarget,
    SqsTarget,
    StepFunctionsTarget,
)
from punctual.runtime.settings import Settings

# --------------------------------------------------------------------------- Lambda


@pytest.fixture
def function_arn(clients: Clients) -> str:
    role = clients("iam").create_role(RoleName="fn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("index.py", "def handler(event, context):\n    return event\n")
    created = clients("lambda").create_function(
        FunctionName="echo",
        Runtime="python3.12",
        Role=role,
        Handler="index.handler",
        Code={"ZipFile": code.getvalue()},
    )
    return str(created["FunctionArn"])


def test_lambda_request_response_waits_for_the_result_and_passes_the_key(
    clients: Clients, function_arn: str
) -> None:
    sent = clients.capture("lambda", "Invoke")
    result = LambdaTargetAdapter(clients).invoke(LambdaTarget(function_arn=function_arn), {"rows": 3}, ctx())

    assert result.outcome is Outcome.SUCCEEDED, result.summary
    assert json.loads(result.detail["response"]) == {"rows": 3}  # moto echoes the event
    [params] = sent
    assert params["InvocationType"] == "RequestResponse"
    custom = json.loads(base64.b64decode(params["ClientContext"]))["custom"]
    assert custom == {
        "idempotency_key": "nightly-export:2026-11-30T10:00:00Z",
        "fencing_token": "nightly-export:2026-11-30T10:00:00Z:1",
        "job_id": "nightly-export",
        "tenant": "acme",
        "slot": "2026-11-30T10:00:00Z",
        "attempt": "1",
    }


def test_lambda_event_invocation_is_fire_and_forget(clients: Clients, function_arn: str) -> None:
    target = LambdaTarget(function_arn=function_arn, invocation_type="Event")
    result = LambdaTargetAdapter(clients).invoke(target, {"rows": 3}, ctx())
    assert result.outcome is Outcome.SUCCEEDED
    assert (result.summary, result.detail["status_code"]) == ("queued", 202)


def _stream(data: bytes) -> StreamingBody:
    return StreamingBody(io.BytesIO(data), len(data))


LAMBDA = LambdaTarget(function_arn=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:worker")


# (QA28: what the function wrote went into the error as it was: ESC reached a terminal listing it)
@pytest.mark.parametrize("message", ["'customer_id'", "\x1b[2J'customer_id'\x00"])
def test_lambda_function_error_is_retryable_with_its_message(message: str) -> None:
    # Stubber: moto without Docker never runs the code, so it cannot raise in it.
    _, stub, factory = stubbed("lambda")
    error = json.dumps({"errorType": "KeyError", "errorMessage": message}).encode()
    stub.add_response(
        "invoke",
        {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": _stream(error)},
        {
            "FunctionName": LAMBDA.function_arn,
            "InvocationType": "RequestResponse",
            "Payload": ANY,
            "ClientContext": ANY,
        },
    )
    with stub:
        result = LambdaTargetAdapter(factory).invoke(LAMBDA, {}, ctx())
    stub.assert_no_pending_responses()
    assert result.outcome is Outcome.RETRYABLE
    assert "KeyError" in result.summary and "customer_id" in result.summary
    assert result.summary.isprintable()
    assert result.timed_out is False


def test_lambda_timeout_inside_the_function_is_marked_timed_out() -> None:
    # Stubber: moto cannot run a function long enough to time out.
    _, stub, factory = stubbed("lambda")
    error = json.dumps({"errorMessage": "2026-11-30T10:00:03Z Task timed out after 3.00 seconds"}).encode()
    stub.add_response("invoke", {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": _stream(error)})
    with stub:
        result = LambdaTargetAdapter(factory).invoke(LAMBDA, {}, ctx())
    assert (result.outcome, result.timed_out) == (Outcome.RETRYABLE, True)


@pytest.mark.parametrize(
    ("error_type", "message", "timed_out"),
    [
        # Lambda's own timeout, as newer runtimes report it
        ("Sandbox.Timedout", "RequestId: 1f2e Error: Task timed out after 3.00 seconds", True),
        # The function's own error whose text says "timed out": it failed, it was not cut off
        ("ReadTimeout", "HTTPSConnectionPool(host='db', port=443): Read timed out. (read timeout=5)", False),
        ("TimeoutError", "the upstream call timed out", False),
    ],
)
def test_only_lambdas_own_timeout_marks_a_function_error_timed_out(
    error_type: str, message: str, timed_out: bool
) -> None:
    # Stubber: moto without Docker never runs the code. QA28: any function error whose message
    # held "timed out" was recorded TIMED_OUT (dead letter ERROR_CODE TargetTimedOut), though the
    # function answered with its own error well within the job's timeout.
    _, stub, factory = stubbed("lambda")
    error = json.dumps({"errorType": error_type, "errorMessage": message}).encode()
    stub.add_response("invoke", {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": _stream(error)})
    with stub:
        result = LambdaTargetAdapter(factory).invoke(LAMBDA, {}, ctx())
    assert (result.outcome, result.timed_out) == (Outcome.RETRYABLE, timed_out)


def test_lambda_missing_function_is_permanent() -> None:
    # Stubber: moto without Docker answers 200 "{}" for a function that does not exist.
    _, stub, factory = stubbed("lambda")
    stub.add_client_error("invoke", "ResourceNotFoundException", "Function not found", http_status_code=404)
    with stub:
        result = LambdaTargetAdapter(factory).invoke(LAMBDA, {}, ctx())
    assert result.outcome is Outcome.PERMANENT
    assert "ResourceNotFoundException" in result.summary


def test_lambda_throttling_is_retryable() -> None:
    # Stubber: moto does not throttle.
    _, stub, factory = stubbed("lambda")
    stub.add_client_error("invoke", "TooManyRequestsException", "Rate exceeded", http_status_code=429)
    with stub:
        result = LambdaTargetAdapter(factory).invoke(LAMBDA, {}, ctx())
    assert result.outcome is Outcome.RETRYABLE
    assert "TooManyRequestsException" in result.summary


# --------------------------------------------------------------------------- SQS


def _queue(clients: Clients, name: str, region: str = REGION) -> tuple[str, str]:
    sqs = clients("sqs", region)
    attributes = {"FifoQueue": "true"} if name.endswith(".fifo") else {}
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn


def _drain(clients: Clients, url: str, region: str = REGION) -> list[dict[str, Any]]:
    sqs = clients("sqs", region)
    messages: list[dict[str, Any]] = []
    while batch := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], AttributeNames=["All"]
    ).get("Messages"):
        messages.extend(batch)
        for message in batch:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return messages


def test_sqs_sends_the_payload_with_the_slot_attributes(clients: Clients) -> None:
    url, arn = _queue(clients, "work")
    result = SqsTargetAdapter(clients).invoke(SqsTarget(queue_arn=arn), {"rows": 3}, ctx(attempt=2))
    assert result.outcome is Outcome.SUCCEEDED
    [message] = _drain(clients, url)
    assert json.loads(message["Body"]) == {"rows": 3}
    attributes = {name: value["StringValue"] for name, value in message["MessageAttributes"].items()}
    assert attributes == {
        "punctual-idempotency-key": "nightly-export:2026-11-30T10:00:00Z",
        "punctual-fencing-token": "nightly-export:2026-11-30T10:00:00Z:2",
        "punctual-job-id": "nightly-export",
        "punctual-tenant": "acme",
        "punctual-slot": "2026-11-30T10:00:00Z",
        "punctual-attempt": "2",
    }
    assert message["MessageId"] == result.detail["message_id"]


def test_sqs_string_payloads_are_sent_verbatim(clients: Clients) -> None:
    url, arn = _queue(clients, "text")
    SqsTargetAdapter(clients).invoke(SqsTarget(queue_arn=arn), "refresh-cache", ctx())
    assert [m["Body"] for m in _drain(clients, url)] == ["refresh-cache"]


def test_sqs_fifo_dedupes_a_re_run_of_the_same_slot(clients: Clients) -> None:
    # Given a FIFO queue and the same slot sent by attempt 1 and (after a crash) attempt 2
    url, arn = _queue(clients, "work.fifo")
    adapter = SqsTargetAdapter(clients)
    first = adapter.invoke(SqsTarget(queue_arn=arn), {"n": 1}, ctx(attempt=1))
    second = adapter.invoke(SqsTarget(queue_arn=arn), {"n": 1}, ctx(attempt=2))
    other = adapter.invoke(SqsTarget(queue_arn=arn), {"n": 1}, ctx(slot="2026-11-30T10:05:00Z"))
    # And another tenant's job of the same id sends the same slot
    theirs = adapter.invoke(SqsTarget(queue_arn=arn), {"n": 1}, ctx(tenant="globex"))
    # Then SQS keeps one message per slot and tenant, grouped by job and tenant
    assert {first.outcome, second.outcome, other.outcome, theirs.outcome} == {Outcome.SUCCEEDED}
    messages = _drain(clients, url)
    assert len(messages) == 3
    ours, other_tenant = ctx().message_group, ctx(tenant="globex").message_group
    assert ours.startswith("nightly-export.") and ours != other_tenant
    groups = {m["MessageAttributes"]["punctual-tenant"]["StringValue"]: set() for m in messages}
    for m in messages:
        groups[m["MessageAttributes"]["punctual-tenant"]["StringValue"]].add(
            m["Attributes"]["MessageGroupId"]
        )
    assert groups == {"acme": {ours}, "globex": {other_tenant}}
    assert {m["Attributes"]["MessageDeduplicationId"] for m in messages} == {
        dedup_id(ctx()),
        dedup_id(ctx(slot="2026-11-30T10:05:00Z")),
        dedup_id(ctx(tenant="globex")),
    }


def test_sqs_fifo_uses_the_configured_message_group(clients: Clients) -> None:
    url, arn = _queue(clients, "grouped.fifo")
    SqsTargetAdapter(clients).invoke(SqsTarget(queue_arn=arn, message_group_id="tenant-7"), {}, ctx())
    [message] = _drain(clients, url)
    assert message["Attributes"]["MessageGroupId"] == "tenant-7"


def test_sqs_missing_queue_is_permanent(clients: Clients) -> None:
    target = SqsTarget(queue_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:absent")
    result = SqsTargetAdapter(clients).invoke(target, {}, ctx())
    assert result.outcome is Outcome.PERMANENT


def test_sqs_needs_only_send_message(clients: Clients) -> None:
    # The workers' role grants sqs:SendMessage alone: the queue URL is built from the ARN.
    url, arn = _queue(clients, "least-privilege")
    looked_up = clients.capture("sqs", "GetQueueUrl")
    sent = clients.capture("sqs", "SendMessage")
    SqsTargetAdapter(clients).invoke(SqsTarget(queue_arn=arn), {"n": 1}, ctx())
    assert looked_up == []
    assert [p["QueueUrl"] for p in sent] == [url]


def test_a_target_in_another_region_gets_a_client_for_that_region(clients: Clients) -> None:
    url, arn = _queue(clients, "far-away", region="eu-west-1")
    clients.calls.clear()
    result = SqsTargetAdapter(clients).invoke(SqsTarget(queue_arn=arn), {"n": 1}, ctx())
    assert result.outcome is Outcome.SUCCEEDED, result.summary
    assert clients.calls == [("sqs", None), ("sqs", "eu-west-1")]
    assert len(_drain(clients, url, region="eu-west-1")) == 1


# --------------------------------------------------------------------------- SNS


def test_sns_publishes_with_the_slot_attributes(clients: Clients) -> None:
    topic = clients("sns").create_topic(Name="jobs")["TopicArn"]
    url, queue_arn = _queue(clients, "sns-sink")
    clients("sns").subscribe(
        TopicArn=topic, Protocol="sqs", Endpoint=queue_arn, Attributes={"RawMessageDelivery": "true"}
    )
    result = SnsTargetAdapter(clients).invoke(SnsTarget(topic_arn=topic), {"rows": 3}, ctx())
    assert result.outcome is Outcome.SUCCEEDED
    [message] = _drain(clients, url)
    assert json.loads(message["Body"]) == {"rows": 3}
    key = message["MessageAttributes"]["punctual-idempotency-key"]["StringValue"]
    assert key == "nightly-export:2026-11-30T10:00:00Z"
    token = message["MessageAttributes"]["punctual-fencing-token"]["StringValue"]
    assert token == "nightly-export:2026-11-30T10:00:00Z:1"


def test_sns_fifo_topics_get_a_group_and_the_slot_dedup_id(clients: Clients) -> None:
    topic = clients("sns").create_topic(Name="jobs.fifo", Attributes={"FifoTopic": "true"})["TopicArn"]
    sent = clients.capture("sns", "Publish")
    result = SnsTargetAdapter(clients).invoke(SnsTarget(topic_arn=topic), {"rows": 3}, ctx())
    assert result.outcome is Outcome.SUCCEEDED, result.summary
    [params] = sent
    assert (params["MessageGroupId"], params["MessageDeduplicationId"]) == (
        ctx().message_group,
        dedup_id(ctx()),
    )


def test_sns_missing_topic_is_permanent(clients: Clients) -> None:
    result = SnsTargetAdapter(clients).invoke(
        SnsTarget(topic_arn=f"arn:aws:sns:{REGION}:{ACCOUNT}:none"), {}, ctx()
    )
    assert result.outcome is Outcome.PERMANENT


# --------------------------------------------------------------------------- EventBridge


def test_eventbridge_puts_the_payload_as_detail_at_the_scheduled_time(clients: Clients) -> None:
    # Given a bus whose rule forwards the jobs' events (their default source) to a queue
    events = clients("events")
    bus = events.create_event_bus(Name="jobs")["EventBusArn"]
    url, queue_arn = _queue(clients, "bus-sink")
    events.put_rule(Name="all", EventBusName="jobs", EventPattern=json.dumps({"source": ["scheduled-job"]}))
    events.put_targets(Rule="all", EventBusName="jobs", Targets=[{"Id": "q", "Arn": queue_arn}])
    # When the target fires
    result = EventBridgeTargetAdapter(clients).invoke(
        EventBridgeTarget(event_bus_arn=bus, detail_type="Export Due"), {"rows": 3}, ctx()
    )
    # Then the event carries the payload, the type and the slot's instant
    assert result.outcome is Outcome.SUCCEEDED, result.summary
    [message] = _drain(clients, url)
    event = json.loads(message["Body"])
    assert event["detail"] == {"rows": 3}
    assert (event["source"], event["detail-type"]) == ("scheduled-job", "Export Due")
    assert event["time"] == "2026-11-30T10:00:00Z"


def test_eventbridge_needs_an_object_payload(clients: Clients) -> None:
    bus = clients("events").create_event_bus(Name="jobs")["EventBusArn"]
    sent = clients.capture("events", "PutEvents")
    result = EventBridgeTargetAdapter(clients).invoke(
        EventBridgeTarget(event_bus_arn=bus), ["a", "list"], ctx()
    )
    assert result.outcome is Outcome.PERMANENT
    assert sent == []


BUS = EventBridgeTarget(event_bus_arn=f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/jobs")


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        ("ThrottlingException", Outcome.RETRYABLE),
        ("InternalFailure", Outcome.RETRYABLE),
        ("AccessDeniedException", Outcome.PERMANENT),
    ],
)
def test_eventbridge_a_failed_entry_is_a_failure(code: str, outcome: Outcome) -> None:
    # Stubber: moto fails entries only for missing fields, which the adapter always sets.
    _, stub, factory = stubbed("events")
    stub.add_response(
        "put_events",
        {"FailedEntryCount": 1, "Entries": [{"ErrorCode": code, "ErrorMessage": "no"}]},
        {
            "Entries": [
                {
                    "Time": T0,
                    "Source": "scheduled-job",
                    "DetailType": ANY,
                    "Detail": '{"n":1}',
                    "EventBusName": BUS.event_bus_arn,
                }
            ]
        },
    )
    with stub:
        result = EventBridgeTargetAdapter(factory).invoke(BUS, {"n": 1}, ctx())
    assert result.outcome is outcome
    assert code in result.summary


# --------------------------------------------------------------------------- Step Functions


@pytest.fixture
def state_machine(clients: Clients) -> str:
    role = clients("iam").create_role(RoleName="sfn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    definition = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}})
    created = clients("stepfunctions").create_state_machine(
        name="export", definition=definition, roleArn=role
    )
    return str(created["stateMachineArn"])


def test_step_functions_starts_one_execution_per_slot(clients: Clients, state_machine: str) -> None:
    adapter = StepFunctionsTargetAdapter(clients)
    target = StepFunctionsTarget(state_machine_arn=state_machine)
    # Attempt 1 starts; attempt 2 of the same slot (different input) is refused by the
    # service as ExecutionAlreadyExists, which means the slot's execution exists.
    first = adapter.invoke(target, {"attempt": 1}, ctx(attempt=1))
    again = adapter.invoke(target, {"attempt": 2}, ctx(attempt=2))
    later = adapter.invoke(target, {"attempt": 1}, ctx(slot="2026-11-30T10:05:00Z"))

    assert (first.outcome, again.outcome, later.outcome) == (Outcome.SUCCEEDED,) * 3
    assert again.summary == "already started for this slot"
    executions = clients("stepfunctions").list_executions(stateMachineArn=state_machine)["executions"]
    assert sorted(e["name"] for e in executions) == sorted(
        [execution_name(ctx()), execution_name(ctx(slot="2026-11-30T10:05:00Z"))]
    )
    described = clients("stepfunctions").describe_execution(executionArn=first.detail["execution_arn"])
    assert json.loads(described["input"]) == {"attempt": 1}


def test_step_functions_missing_state_machine_is_permanent(clients: Clients) -> None:
    target = StepFunctionsTarget(state_machine_arn=f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:none")
    result = StepFunctionsTargetAdapter(clients).invoke(target, {}, ctx())
    assert result.outcome is Outcome.PERMANENT


def test_execution_names_fit_the_allowed_charset_and_length() -> None:
    name = execution_name(ctx(job_id="nightly-export", slot="2026-11-30T10:00:00Z"))
    assert name.startswith("nightly-export-2026-11-30T10-00-00Z-")
    long_a = execution_name(ctx(job_id="j" * 64, slot="2026-11-30T10:00:00Z"))
    long_b = execution_name(ctx(job_id="j" * 64, slot="2026-11-30T10:05:00Z"))
    manual = execution_name(ctx(slot="2026-11-30T10:00:00Z~01HZX3 é/{}"))
    for candidate in (name, long_a, long_b, manual):
        assert len(candidate) <= 80
        assert all(ch.isascii() and (ch.isalnum() or ch in "-_") for ch in candidate)
    assert long_a != long_b  # cut to the same readable prefix, kept apart by the digest
    assert execution_name(ctx(tenant="a")) != execution_name(ctx(tenant="b"))
    assert execution_name(ctx(attempt=1)) == execution_name(ctx(attempt=2))


# --------------------------------------------------------------------------- errors and the invoker


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op"
    )


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (_client_error("ThrottlingException", 400), Outcome.RETRYABLE),
        (_client_error("TooManyRequestsException", 429), Outcome.RETRYABLE),
        (_client_error("ServiceUnavailable", 503), Outcome.RETRYABLE),
        (_client_error("SomethingNew", 500), Outcome.RETRYABLE),
        (_client_error("ResourceConflictException", 409), Outcome.RETRYABLE),  # function being updated
        (_client_error("AccessDeniedException", 400), Outcome.PERMANENT),
        (_client_error("ResourceNotFoundException", 404), Outcome.PERMANENT),
        (_client_error("InvalidParameterValueException", 400), Outcome.PERMANENT),
        (EndpointConnectionError(endpoint_url="https://sqs.example"), Outcome.RETRYABLE),
        (ParamValidationError(report="bad"), Outcome.PERMANENT),
    ],
)
def test_aws_errors_are_classified(error: Exception, outcome: Outcome) -> None:
    assert classify_aws_error(error, "svc Op").outcome is outcome


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("KMSThrottling", 400),  # SNS Publish to an encrypted topic (its error code, not the shape's name)
        ("KmsThrottlingException", 400),  # Step Functions StartExecution of an encrypted state machine
        ("ExecutionLimitExceeded", 400),  # Step Functions: too many open executions, until some end
        ("SnapStartNotReadyException", 409),  # Lambda: a SnapStart function still initialising
        ("SnapStartTimeoutException", 408),  # Lambda: the snapshot was not restored in time
        ("EFSMountTimeoutException", 408),  # Lambda: its file system was not mounted in time
    ],
)
def test_the_services_transient_errors_are_retried_not_final(code: str, status: int) -> None:
    # Codes and statuses as botocore's models of SNS, Step Functions and Lambda give them: each
    # says "not now", and ended the slot FAILED without a retry (QA22)
    assert classify_aws_error(_client_error(code, status), "svc Op").outcome is Outcome.RETRYABLE


def test_a_client_side_read_timeout_is_marked_timed_out() -> None:
    result = classify_aws_error(ReadTimeoutError(endpoint_url="https://lambda.example"), "lambda Invoke")
    assert (result.outcome, result.timed_out) == (Outcome.RETRYABLE, True)


def test_every_aws_call_asks_for_a_client_bounded_by_the_job_timeout(
    clients: Clients, function_arn: str, state_machine: str
) -> None:
    # Given one target of each kind (ECS: its calls are covered by the same helper)
    _, queue = _queue(clients, "bounded")
    topic = clients("sns").create_topic(Name="bounded")["TopicArn"]
    bus = clients("events").create_event_bus(Name="bounded")["EventBusArn"]
    calls = [
        (LambdaTargetAdapter(clients), LambdaTarget(function_arn=function_arn), lambda_wait_timeouts),
        (
            LambdaTargetAdapter(clients),
            LambdaTarget(function_arn=function_arn, invocation_type="Event"),
            lambda t: api_call_timeouts(t, sdk_retries=False),
        ),
        (SqsTargetAdapter(clients), SqsTarget(queue_arn=queue), api_call_timeouts),
        (SnsTargetAdapter(clients), SnsTarget(topic_arn=topic), api_call_timeouts),
        (EventBridgeTargetAdapter(clients), EventBridgeTarget(event_bus_arn=bus), api_call_timeouts),
        (
            StepFunctionsTargetAdapter(clients),
            StepFunctionsTarget(state_machine_arn=state_machine),
            api_call_timeouts,
        ),
    ]
    for adapter, target, rule in calls:
        # When it runs for a job of 7 seconds
        clients.timeouts.clear()
        result = adapter.invoke(target, {"n": 1}, ctx(timeout_s=7))
        # Then its client was asked for the timeouts the rule derives from those 7 seconds
        assert result.outcome is Outcome.SUCCEEDED, (target.type, result.summary)
        assert clients.timeouts == [rule(7)], target.type


def test_the_invoker_renders_placeholders_for_aws_targets(clients: Clients) -> None:
    url, arn = _queue(clients, "rendered")
    invoker = DefaultTargetInvoker(clients, Settings())
    result = invoker.invoke(
        SqsTarget(queue_arn=arn), {"key": "<job_id>:<slot>", "try": "<attempt>"}, ctx(attempt=4)
    )
    assert result.outcome is Outcome.SUCCEEDED
    [message] = _drain(clients, url)
    assert json.loads(message["Body"]) == {"key": "nightly-export:2026-11-30T10:00:00Z", "try": "4"}


@pytest.mark.parametrize(
    ("code", "status", "deferred"),
    [
        ("Throttling", 400, True),
        ("RequestLimitExceeded", 400, True),
        ("ServiceUnavailable", 503, True),
        ("AccessDenied", 403, False),  # the job's role does not trust the scheduler: its configuration
        ("RegionDisabledException", 403, False),
    ],
)
def test_sts_failing_to_assume_the_jobs_role_for_a_moment_defers_the_slot(
    code: str, status: int, deferred: bool
) -> None:
    # QA24: a throttled AssumeRole (the job's role, assumed as its call starts) used up the job's
    # attempts as if its target had failed: STS's trouble is the scheduler's, and only delays the slot
    error = ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "AssumeRole",
    )
    result = classify_aws_error(error, "sqs SendMessage")
    assert result.deferred is deferred
    assert result.outcome is (Outcome.RETRYABLE if deferred else Outcome.PERMANENT)
    assert not classify_aws_error(_client_error(code, status), "sqs SendMessage").deferred  # the target's
