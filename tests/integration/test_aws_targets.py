"""Each AWS target against moto, and the botocore Stubber where moto cannot answer.

Stubber is used (and says so in the test) only for answers moto never gives: a Lambda
function error or throttle, a failed PutEvents entry, and ECS tasks that stop with a
non-zero exit code, fail to start, or cannot be placed.
"""

from __future__ import annotations

import base64
import io
import json
import zipfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ParamValidationError, ReadTimeoutError
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber
from moto import mock_aws
from moto.moto_api import state_manager

from punctual.clock import ManualClock
from punctual.models import (
    EcsTarget,
    EventBridgeTarget,
    LambdaTarget,
    SnsTarget,
    SqsTarget,
    StepFunctionsTarget,
)
from punctual.settings import Settings
from punctual.targets import DefaultTargetInvoker
from punctual.targets.aws_services import (
    CallTimeouts,
    EcsTargetAdapter,
    EventBridgeTargetAdapter,
    LambdaTargetAdapter,
    SnsTargetAdapter,
    SqsTargetAdapter,
    StepFunctionsTargetAdapter,
    api_call_timeouts,
    classify_aws_error,
    dedup_id,
    execution_name,
    lambda_wait_timeouts,
)
from punctual.targets.base import Outcome, SlotContext

REGION = "us-east-1"
ACCOUNT = "123456789012"
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


class Clients:
    """A client factory like the one local mode passes: cached clients, calls recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []
        self.timeouts: list[CallTimeouts | None] = []  # what each call asked for (moto ignores them)
        self._cache: dict[tuple[str, str], Any] = {}

    def __call__(
        self, service: str, region: str | None = None, *, timeouts: CallTimeouts | None = None
    ) -> Any:
        self.calls.append((service, region))
        self.timeouts.append(timeouts)
        key = (service, region or REGION)
        if key not in self._cache:
            self._cache[key] = boto3.client(service, region_name=key[1])
        return self._cache[key]

    def capture(self, service: str, operation: str) -> list[dict[str, Any]]:
        """Record the parameters of every ``operation`` call made through this factory's client."""
        seen: list[dict[str, Any]] = []
        self(service).meta.events.register(
            f"provide-client-params.{self(service).meta.service_model.endpoint_prefix}.{operation}",
            lambda params, **_: seen.append(dict(params)),
        )
        self.calls.clear()
        return seen


@pytest.fixture
def clients() -> Iterator[Clients]:
    with mock_aws(config={"lambda": {"use_docker": False}}):
        yield Clients()


def ctx(
    *,
    job_id: str = "nightly-export",
    slot: str = "2026-11-30T10:00:00Z",
    attempt: int = 1,
    tenant: str = "acme",
    timeout_s: float = 300,
    heartbeat: Callable[[], bool] = lambda: True,
) -> SlotContext:
    return SlotContext(
        job_id=job_id,
        tenant=tenant,
        slot=slot,
        scheduled_at=T0,
        attempt=attempt,
        timeout_s=timeout_s,
        heartbeat=heartbeat,
    )


def stubbed(service: str) -> tuple[Any, Stubber, Callable[..., Any]]:
    """A real client with a Stubber on it, and a factory that always returns it."""
    client = boto3.client(service, region_name=REGION)
    return client, Stubber(client), lambda *_args, **_kwargs: client


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


def test_lambda_function_error_is_retryable_with_its_message() -> None:
    # Stubber: moto without Docker never runs the code, so it cannot raise in it.
    _, stub, factory = stubbed("lambda")
    error = json.dumps({"errorType": "KeyError", "errorMessage": "'customer_id'"}).encode()
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
    assert result.timed_out is False


def test_lambda_timeout_inside_the_function_is_marked_timed_out() -> None:
    # Stubber: moto cannot run a function long enough to time out.
    _, stub, factory = stubbed("lambda")
    error = json.dumps({"errorMessage": "2026-11-30T10:00:03Z Task timed out after 3.00 seconds"}).encode()
    stub.add_response("invoke", {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": _stream(error)})
    with stub:
        result = LambdaTargetAdapter(factory).invoke(LAMBDA, {}, ctx())
    assert (result.outcome, result.timed_out) == (Outcome.RETRYABLE, True)


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


# --------------------------------------------------------------------------- ECS


@pytest.fixture
def ecs_setup(clients: Clients) -> dict[str, Any]:
    ecs = clients("ecs")
    cluster = ecs.create_cluster(clusterName="jobs")["cluster"]["clusterArn"]
    # moto 5.2.5 fails to create the ENI of an awsvpc (Fargate-compatible) task
    # ('NetworkInterface' has no 'private_dns_name'), so the definition is registered in
    # bridge mode; the adapter's RunTask call (awsvpc configuration, FARGATE) is unchanged.
    # moto also models only the first container of a task. Bridge-mode tasks never look
    # at the subnet or security group, so they need no EC2 set-up.
    definition = ecs.register_task_definition(
        family="export",
        networkMode="bridge",
        containerDefinitions=[
            {"name": "main", "image": "busybox", "essential": True, "memory": 256},
            {"name": "log-router", "image": "fluent-bit", "essential": False, "memory": 64},
        ],
    )["taskDefinition"]["taskDefinitionArn"]
    return {
        "cluster": cluster,
        "definition": definition,
        "subnet": "subnet-0123456789abcdef0",
        "group": "sg-0123456789abcdef0",
    }


def _ecs_target(setup: dict[str, Any], **extra: Any) -> EcsTarget:
    return EcsTarget(
        cluster_arn=setup["cluster"],
        task_definition_arn=setup["definition"],
        subnets=[setup["subnet"]],
        security_groups=[setup["group"]],
        **extra,
    )


class Beats:
    def __init__(self, answers: list[bool] | None = None) -> None:
        self.count = 0
        self.answers = answers or []

    def __call__(self) -> bool:
        self.count += 1
        return self.answers.pop(0) if self.answers else True


def test_ecs_runs_the_task_heartbeats_while_it_runs_and_succeeds_on_exit_0(
    clients: Clients, ecs_setup: dict[str, Any]
) -> None:
    # Given moto's default task life cycle (one state further per DescribeTasks)
    beats = Beats()
    clock = ManualClock(T0)
    adapter = EcsTargetAdapter(clients, clock=clock, poll_interval_s=10)
    # When the target runs
    result = adapter.invoke(_ecs_target(ecs_setup), {"rows": 3}, ctx(heartbeat=beats))
    # Then it waited for STOPPED, heartbeating between polls, and the exit code decided
    assert result.outcome is Outcome.SUCCEEDED, result.summary
    assert beats.count == 3  # RUNNING -> DEACTIVATING -> STOPPING -> DEPROVISIONING -> STOPPED
    assert clock.now() == T0.replace(second=30)
    assert result.detail["exit_codes"] == {"main": 0}
    assert result.detail["adopted"] is False
    task = clients("ecs").describe_tasks(cluster=ecs_setup["cluster"], tasks=[result.detail["task_arn"]])[
        "tasks"
    ][0]
    [override] = task["overrides"]["containerOverrides"]
    assert override["name"] == "main"
    environment = {e["name"]: e["value"] for e in override["environment"]}
    assert environment == {
        "PUNCTUAL_JOB_ID": "nightly-export",
        "PUNCTUAL_TENANT": "acme",
        "PUNCTUAL_SLOT": "2026-11-30T10:00:00Z",
        "PUNCTUAL_ATTEMPT": "1",
        "PUNCTUAL_SCHEDULED_AT": "2026-11-30T10:00:00Z",
        "PUNCTUAL_IDEMPOTENCY_KEY": "nightly-export:2026-11-30T10:00:00Z",
        "PUNCTUAL_FENCING_TOKEN": "nightly-export:2026-11-30T10:00:00Z:1",
        "PUNCTUAL_PAYLOAD": '{"rows":3}',
    }
    assert task["startedBy"].startswith("punctual-") and len(task["startedBy"]) <= 36


def test_ecs_a_new_owner_adopts_the_running_task_instead_of_starting_another(
    clients: Clients, ecs_setup: dict[str, Any]
) -> None:
    # Given a worker that started the slot's task and then lost its lease
    adapter = EcsTargetAdapter(clients, clock=ManualClock(T0), poll_interval_s=10)
    target = _ecs_target(ecs_setup, container_name="main")
    lost = adapter.invoke(target, {}, ctx(attempt=1, heartbeat=Beats([False])))
    assert lost.outcome is Outcome.RETRYABLE and "lease lost" in lost.summary
    # When the worker that took over runs attempt 2 of the same slot
    taken_over = adapter.invoke(target, {}, ctx(attempt=2))
    # Then it tracked the same task to its end; no second task was started
    assert taken_over.outcome is Outcome.SUCCEEDED, taken_over.summary
    assert taken_over.detail["adopted"] is True
    assert taken_over.detail["task_arn"] == lost.detail["task_arn"]
    assert len(clients("ecs").list_tasks(cluster=ecs_setup["cluster"])["taskArns"]) == 1


def test_ecs_a_task_past_the_timeout_is_stopped(clients: Clients, ecs_setup: dict[str, Any]) -> None:
    state_manager.set_transition(
        model_name="ecs::task", transition={"progression": "manual", "times": 10_000}
    )
    try:
        adapter = EcsTargetAdapter(clients, clock=ManualClock(T0), poll_interval_s=10)
        result = adapter.invoke(_ecs_target(ecs_setup), {}, ctx(timeout_s=45))
    finally:
        state_manager.unset_transition(model_name="ecs::task")
    assert (result.outcome, result.timed_out) == (Outcome.RETRYABLE, True)
    task = clients("ecs").describe_tasks(cluster=ecs_setup["cluster"], tasks=[result.detail["task_arn"]])[
        "tasks"
    ][0]
    assert task["lastStatus"] == "STOPPED"
    assert "timeout" in task["stoppedReason"]


def test_ecs_no_poll_sleeps_past_the_job_timeout(clients: Clients, ecs_setup: dict[str, Any]) -> None:
    # Before: the last sleep was a whole poll interval, so a 15 s job was stopped at 20 s.
    state_manager.set_transition(
        model_name="ecs::task", transition={"progression": "manual", "times": 10_000}
    )
    clock = ManualClock(T0)
    try:
        adapter = EcsTargetAdapter(clients, clock=clock, poll_interval_s=10)
        result = adapter.invoke(_ecs_target(ecs_setup), {}, ctx(timeout_s=15))
    finally:
        state_manager.unset_transition(model_name="ecs::task")
    assert (result.outcome, result.timed_out) == (Outcome.RETRYABLE, True)
    assert clock.now() == T0.replace(second=15)


def test_ecs_payload_too_large_for_overrides_is_permanent_and_starts_nothing(
    clients: Clients, ecs_setup: dict[str, Any]
) -> None:
    result = EcsTargetAdapter(clients, clock=ManualClock(T0)).invoke(
        _ecs_target(ecs_setup), {"blob": "x" * 9000}, ctx()
    )
    assert result.outcome is Outcome.PERMANENT and "too large" in result.summary
    assert clients("ecs").list_tasks(cluster=ecs_setup["cluster"])["taskArns"] == []


ECS = EcsTarget(
    cluster_arn=f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/jobs",
    task_definition_arn=f"arn:aws:ecs:{REGION}:{ACCOUNT}:task-definition/export:1",
    subnets=["subnet-0123456789abcdef0"],
    container_name="main",
)
TASK_ARN = f"arn:aws:ecs:{REGION}:{ACCOUNT}:task/jobs/0123456789abcdef"


def _stub_start(stub: Stubber) -> None:
    stub.add_response("list_tasks", {"taskArns": []})
    stub.add_response(
        "run_task",
        {"tasks": [{"taskArn": TASK_ARN, "lastStatus": "PROVISIONING"}], "failures": []},
        {
            "cluster": ECS.cluster_arn,
            "taskDefinition": ECS.task_definition_arn,
            "count": 1,
            "launchType": "FARGATE",
            "networkConfiguration": {
                "awsvpcConfiguration": {"subnets": ECS.subnets, "assignPublicIp": "DISABLED"}
            },
            "overrides": ANY,
            "startedBy": ANY,
            "clientToken": ANY,
        },
    )


def test_ecs_a_non_zero_exit_code_is_a_retryable_failure() -> None:
    # Stubber: moto's containers always report exit code 0.
    _, stub, factory = stubbed("ecs")
    _stub_start(stub)
    stub.add_response("describe_tasks", {"tasks": [{"taskArn": TASK_ARN, "lastStatus": "RUNNING"}]})
    stub.add_response(
        "describe_tasks",
        {
            "tasks": [
                {
                    "taskArn": TASK_ARN,
                    "lastStatus": "STOPPED",
                    "stopCode": "EssentialContainerExited",
                    "stoppedReason": "Essential container in task exited",
                    "containers": [
                        {"name": "log-router", "exitCode": 0},
                        {"name": "main", "exitCode": 3, "reason": "OutOfMemoryError: Container killed"},
                    ],
                }
            ]
        },
    )
    with stub:
        result = EcsTargetAdapter(factory, clock=ManualClock(T0), poll_interval_s=5).invoke(ECS, {}, ctx())
    stub.assert_no_pending_responses()
    assert result.outcome is Outcome.RETRYABLE
    assert "container main exited with code 3" in result.summary
    assert "OutOfMemoryError" in result.summary
    assert result.detail["exit_codes"] == {"main": 3}


def test_ecs_without_a_container_name_the_essential_containers_get_the_slot_and_decide() -> None:
    # Stubber: moto models only a task's first container.
    _, stub, factory = stubbed("ecs")
    stub.add_response(
        "describe_task_definition",
        {
            "taskDefinition": {
                "containerDefinitions": [
                    {"name": "log-router", "essential": False},
                    {"name": "main", "essential": True},
                ]
            }
        },
        {"taskDefinition": ECS.task_definition_arn},
    )
    stub.add_response("list_tasks", {"taskArns": []})
    stub.add_response("run_task", {"tasks": [{"taskArn": TASK_ARN}]})
    stub.add_response(
        "describe_tasks",
        {
            "tasks": [
                {
                    "taskArn": TASK_ARN,
                    "lastStatus": "STOPPED",
                    "stopCode": "EssentialContainerExited",
                    "containers": [{"name": "log-router", "exitCode": 137}, {"name": "main", "exitCode": 0}],
                }
            ]
        },
    )
    sent: list[dict[str, Any]] = []
    factory().meta.events.register(
        "provide-client-params.ecs.RunTask", lambda params, **_: sent.append(params)
    )
    target = ECS.model_copy(update={"container_name": None})
    with stub:
        result = EcsTargetAdapter(factory, clock=ManualClock(T0)).invoke(target, {}, ctx())
    stub.assert_no_pending_responses()
    # The sidecar killed on the way out (137) does not fail the job; main's 0 decides.
    assert result.outcome is Outcome.SUCCEEDED, result.summary
    assert result.detail["exit_codes"] == {"main": 0}
    assert [o["name"] for o in sent[0]["overrides"]["containerOverrides"]] == ["main"]


def test_ecs_a_task_that_failed_to_start_is_retryable_with_the_reason() -> None:
    # Stubber: moto never fails to pull an image.
    _, stub, factory = stubbed("ecs")
    _stub_start(stub)
    stub.add_response(
        "describe_tasks",
        {
            "tasks": [
                {
                    "taskArn": TASK_ARN,
                    "lastStatus": "STOPPED",
                    "stopCode": "TaskFailedToStart",
                    "stoppedReason": "CannotPullContainerError: pull access denied",
                    "containers": [{"name": "main"}],
                }
            ]
        },
    )
    with stub:
        result = EcsTargetAdapter(factory, clock=ManualClock(T0)).invoke(ECS, {}, ctx())
    assert result.outcome is Outcome.RETRYABLE
    assert "failed to start" in result.summary and "CannotPullContainerError" in result.summary


def test_ecs_a_task_that_cannot_be_placed_is_retryable() -> None:
    # Stubber: moto places every Fargate task.
    _, stub, factory = stubbed("ecs")
    stub.add_response("list_tasks", {"taskArns": []})
    stub.add_response("run_task", {"tasks": [], "failures": [{"reason": "RESOURCE:ENI", "detail": "no ENI"}]})
    with stub:
        result = EcsTargetAdapter(factory, clock=ManualClock(T0)).invoke(ECS, {}, ctx())
    assert result.outcome is Outcome.RETRYABLE
    assert "RESOURCE:ENI" in result.summary


def _stopped(exit_code: int, name: str = "main") -> dict[str, Any]:
    return {
        "tasks": [
            {
                "taskArn": TASK_ARN,
                "lastStatus": "STOPPED",
                "containers": [{"name": name, "exitCode": exit_code}],
            }
        ]
    }


def test_ecs_without_list_tasks_permission_it_still_runs_the_task() -> None:
    # Stubber: moto does not evaluate IAM by default.
    _, stub, factory = stubbed("ecs")
    stub.add_client_error("list_tasks", "AccessDeniedException", "not authorized", http_status_code=400)
    stub.add_response("run_task", {"tasks": [{"taskArn": TASK_ARN}]})
    stub.add_response("describe_tasks", _stopped(0))
    with stub:
        result = EcsTargetAdapter(factory, clock=ManualClock(T0)).invoke(ECS, {}, ctx())
    stub.assert_no_pending_responses()
    assert result.outcome is Outcome.SUCCEEDED, result.summary
    assert result.detail["adopted"] is False


def test_ecs_without_describe_task_definition_permission_it_runs_without_overrides() -> None:
    # Stubber: moto does not evaluate IAM by default.
    _, stub, factory = stubbed("ecs")
    stub.add_client_error("describe_task_definition", "AccessDeniedException", "no", http_status_code=400)
    stub.add_response("list_tasks", {"taskArns": []})
    stub.add_response("run_task", {"tasks": [{"taskArn": TASK_ARN}]})
    stub.add_response("describe_tasks", _stopped(1, name="sidecar"))
    sent: list[dict[str, Any]] = []
    factory().meta.events.register(
        "provide-client-params.ecs.RunTask", lambda params, **_: sent.append(params)
    )
    with stub:
        result = EcsTargetAdapter(factory, clock=ManualClock(T0)).invoke(
            ECS.model_copy(update={"container_name": None}), {}, ctx()
        )
    assert "overrides" not in sent[0]
    assert result.outcome is Outcome.RETRYABLE  # every container's exit code decides
    assert "sidecar exited with code 1" in result.summary


def test_ecs_access_denied_is_permanent() -> None:
    # Stubber: moto does not evaluate IAM by default.
    _, stub, factory = stubbed("ecs")
    stub.add_response("list_tasks", {"taskArns": []})
    stub.add_client_error("run_task", "AccessDeniedException", "not authorized", http_status_code=400)
    with stub:
        result = EcsTargetAdapter(factory, clock=ManualClock(T0)).invoke(ECS, {}, ctx())
    assert result.outcome is Outcome.PERMANENT


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
