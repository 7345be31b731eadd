"""Issue 16, point 1: the scheduler's own resources are never targets (registration and run)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from factories import spec
from punctual.delivery.targets import DefaultTargetInvoker, SlotContext
from punctual.delivery.targets.base import Outcome
from punctual.dispatch.queues import MemoryQueues
from punctual.runtime.clock import ManualClock
from punctual.runtime.settings import Settings
from punctual.security.ownership import OwnResources, own_resources, parse_arn_list, resource_key
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerLayout
from punctual.usecases.job_errors import InvalidJobError
from punctual.usecases.jobs import JobService, QueueRouting

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
ACCOUNT = "123456789012"
WORK_QUEUE = f"arn:aws:sqs:eu-west-1:{ACCOUNT}:Punctual-QueuesShort0-AbC123.fifo"
DLQ = f"arn:aws:sqs:eu-west-1:{ACCOUNT}:Punctual-QueuesShort0Dlq-XyZ789.fifo"
FAILED = f"arn:aws:sqs:eu-west-1:{ACCOUNT}:Punctual-QueuesFailed-Qq1"
API_FUNCTION = f"arn:aws:lambda:eu-west-1:{ACCOUNT}:function:Punctual-ApiHandler-F00"
MACHINE = f"arn:aws:states:eu-west-1:{ACCOUNT}:stateMachine:MinuteStateMachine-1a2b"
TOPIC = f"arn:aws:sns:eu-west-1:{ACCOUNT}:Punctual-AlarmTopic-9z"
CLUSTER = f"arn:aws:ecs:eu-west-1:{ACCOUNT}:cluster/Punctual-Cluster-77"
TASK = f"arn:aws:ecs:eu-west-1:{ACCOUNT}:task-definition/PunctualWorkersWorkerTask:4"
OWN = OwnResources.of([WORK_QUEUE, DLQ, FAILED, API_FUNCTION, MACHINE, TOPIC, CLUSTER, TASK])

# Each own resource as a tenant might name it, and the target that does.
OWN_TARGETS: dict[str, dict[str, Any]] = {
    "a work queue (the forged-dispatch-message attack)": {"type": "sqs", "queue_arn": WORK_QUEUE},
    "a dead-letter queue": {"type": "sqs", "queue_arn": DLQ},
    "the failed queue": {"type": "sqs", "queue_arn": FAILED},
    "the API function": {"type": "lambda", "function_arn": API_FUNCTION},
    "the API function, by alias": {"type": "lambda", "function_arn": API_FUNCTION + ":live"},
    "the API function, by version": {"type": "lambda", "function_arn": API_FUNCTION + ":7"},
    "the minute state machine": {"type": "stepfunctions", "state_machine_arn": MACHINE},
    "the alarm topic": {"type": "sns", "topic_arn": TOPIC},
    "the worker task definition, another revision": {
        "type": "ecs",
        "cluster_arn": f"arn:aws:ecs:eu-west-1:{ACCOUNT}:cluster/tenant-cluster",
        "task_definition_arn": TASK.replace(":4", ":9"),
        "subnets": ["subnet-1"],
    },
    "the worker cluster": {
        "type": "ecs",
        "cluster_arn": CLUSTER,
        "task_definition_arn": f"arn:aws:ecs:eu-west-1:{ACCOUNT}:task-definition/tenant-task:1",
        "subnets": ["subnet-1"],
    },
}
TENANT_TARGETS: dict[str, dict[str, Any]] = {
    "a tenant's queue": {"type": "sqs", "queue_arn": f"arn:aws:sqs:eu-west-1:{ACCOUNT}:orders.fifo"},
    "same name, other account": {"type": "sqs", "queue_arn": WORK_QUEUE.replace(ACCOUNT, "210987654321")},
    "same name, other region": {"type": "sqs", "queue_arn": WORK_QUEUE.replace("eu-west-1", "eu-central-1")},
    "a function whose name starts like ours": {
        "type": "lambda",
        "function_arn": API_FUNCTION.replace("ApiHandler-F00", "ApiHandler-F001"),
    },
}


@pytest.fixture
def service() -> JobService:
    clock = ManualClock(T0)
    return JobService(
        MemoryStore(),
        MemoryQueues(now=clock.now),
        clock,
        TimerLayout(4, 2, 180),
        QueueRouting(("short",), ("long",)),
        own_resources=lambda: OWN,
    )


@pytest.mark.parametrize("name", sorted(OWN_TARGETS))
def test_registration_refuses_every_own_resource_and_says_why(service: JobService, name: str) -> None:
    with pytest.raises(InvalidJobError) as refused:
        service.register("tenant-a", spec(target=OWN_TARGETS[name], payload={"forged": True}))

    assert refused.value.field == "target"
    assert "this scheduler's own resources" in str(refused.value)
    assert service.store.list_jobs("tenant-a", 10).items == []  # nothing stored


@pytest.mark.parametrize("name", sorted(OWN_TARGETS))
def test_a_replacement_cannot_point_a_job_at_an_own_resource(service: JobService, name: str) -> None:
    job, _ = service.register("tenant-a", spec(target=TENANT_TARGETS["a tenant's queue"]))
    with pytest.raises(InvalidJobError):
        service.replace("tenant-a", job.id, spec(target=OWN_TARGETS[name]))
    assert service.get("tenant-a", job.id).target == job.target


@pytest.mark.parametrize("name", sorted(TENANT_TARGETS))
def test_the_tenants_own_resources_are_accepted(service: JobService, name: str) -> None:
    job, _ = service.register("tenant-a", spec(target=TENANT_TARGETS[name]))
    assert job.target.type == TENANT_TARGETS[name]["type"]


def test_resource_keys_drop_qualifiers_and_revisions_only() -> None:
    assert resource_key(API_FUNCTION + ":live") == API_FUNCTION
    assert resource_key(MACHINE + ":v2") == MACHINE
    assert resource_key(TASK) == TASK.rsplit(":", 1)[0]
    table = f"arn:aws:dynamodb:eu-west-1:{ACCOUNT}:table/punctual"
    assert resource_key(table + "/stream/2026") == table
    assert resource_key(WORK_QUEUE) == WORK_QUEUE
    assert parse_arn_list(f" {WORK_QUEUE},{DLQ}\n{FAILED}, ") == [WORK_QUEUE, DLQ, FAILED]


def test_the_list_is_read_once_from_the_stacks_parameter() -> None:
    reads: list[str] = []

    class Ssm:
        def get_parameter(self, Name: str) -> dict[str, Any]:
            reads.append(Name)
            return {"Parameter": {"Value": f"{WORK_QUEUE},{API_FUNCTION}"}}

    settings = Settings(own_arns=[TOPIC], own_arns_parameter="/punctual/Test/own-arns")
    first = own_resources(settings, ssm=Ssm)
    again = own_resources(settings, ssm=Ssm)

    assert reads == ["/punctual/Test/own-arns"]
    assert first is again
    assert first.keys == {WORK_QUEUE, API_FUNCTION, TOPIC}


class _Recording:
    def __init__(self) -> None:
        self.calls: list[Any] = []

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> Any:
        from punctual.delivery.targets.base import TargetResult

        self.calls.append(target)
        return TargetResult.ok()


def _ctx() -> SlotContext:
    return SlotContext("job-1", "tenant-a", "2026-11-30T10:00:00Z", T0, 1, 30.0)


def test_the_worker_refuses_to_call_an_own_resource_stored_before_the_check() -> None:
    # A job registered before this version (or before a resource joined the list) stops at the worker.
    sqs = _Recording()
    invoker = DefaultTargetInvoker(None, Settings(), adapters={"sqs": sqs}, own=lambda: OWN)

    result = invoker.invoke({"type": "sqs", "queue_arn": WORK_QUEUE}, {"forged": True}, _ctx())

    assert result.outcome is Outcome.PERMANENT
    assert "own resources" in result.summary
    assert sqs.calls == []
    ok = invoker.invoke(TENANT_TARGETS["a tenant's queue"], {}, _ctx())
    assert ok.outcome is Outcome.SUCCEEDED and len(sqs.calls) == 1


def test_a_deployment_that_requires_execution_roles_refuses_aws_targets_without_one() -> None:
    clock = ManualClock(T0)
    service = JobService(
        MemoryStore(),
        MemoryQueues(now=clock.now),
        clock,
        TimerLayout(4, 2, 180),
        QueueRouting(("short",), ()),
        require_target_role=True,
    )
    target = dict(TENANT_TARGETS["a tenant's queue"])
    with pytest.raises(InvalidJobError) as refused:
        service.register("tenant-a", spec(target=target))
    assert refused.value.field == "target.role_arn"
    role = f"arn:aws:iam::{ACCOUNT}:role/punctual-orders"
    job, _ = service.register("tenant-a", spec(target={**target, "role_arn": role}))
    assert job.target.role_arn == role  # type: ignore[union-attr]
    service.register("tenant-a", spec())  # webhooks need no role

    sqs = _Recording()
    invoker = DefaultTargetInvoker(
        None, Settings(require_target_role=True), adapters={"sqs": sqs}, own=OwnResources
    )
    assert invoker.invoke(target, {}, _ctx()).outcome is Outcome.PERMANENT
    assert invoker.invoke({**target, "role_arn": role}, {}, _ctx()).outcome is Outcome.SUCCEEDED


@pytest.mark.parametrize(
    "role_arn",
    [
        "arn:aws:iam::123:role/x",
        "arn:aws:sts::123456789012:assumed-role/x/y",
        "role/x",
        "arn:aws:iam::123456789012:user/x",
    ],
)
def test_role_arn_must_be_an_iam_role(role_arn: str) -> None:
    with pytest.raises(ValueError, match="role_arn"):
        spec(target={**TENANT_TARGETS["a tenant's queue"], "role_arn": role_arn})
