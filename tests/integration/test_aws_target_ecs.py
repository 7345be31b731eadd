"""The ECS target against moto, and the botocore Stubber where moto cannot answer (tasks that stop
with a non-zero exit code, fail to start, or cannot be placed; calls without a permission).
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_targets_harness import ACCOUNT, REGION, T0, Clients, ctx, stubbed
from aws_targets_harness import clients as clients  # the fixture
from botocore.stub import ANY, Stubber
from moto.moto_api import state_manager

from punctual.delivery.targets.base import Outcome
from punctual.delivery.targets.ecs import EcsTargetAdapter
from punctual.models import (
    EcsTarget,
)
from punctual.runtime.clock import ManualClock

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


@pytest.mark.parametrize("ending", ["attempts used up", "spec superseded"])
def test_ecs_a_crashed_runs_task_is_stopped_when_its_slot_ends_without_it(
    clients: Clients, ecs_setup: dict[str, Any], ending: str
) -> None:
    """Before: the task a crashed run started went on untracked (never stopped at the timeout)
    when the next attempt, which would have adopted it, was refused: the record said the slot
    had ended TIMED_OUT (or SUPERSEDED) while the task ran on."""
    from execution_harness import Rig
    from punctual.dispatch.queues import MessageKind
    from punctual.models import ExecutionStatus, RetryPolicy
    from punctual.store.memory import MemoryStore

    state_manager.set_transition(
        model_name="ecs::task", transition={"progression": "manual", "times": 10_000}
    )
    try:
        # Given an ECS worker whose run of an ECS-target job started the slot's task, then died
        clock = ManualClock(T0)
        rig = Rig(MemoryStore(), clock)
        adapter = EcsTargetAdapter(clients, clock=clock, poll_interval_s=10)
        worker = rig.worker(lease_timers=True, lease_s=8, target=adapter)  # type: ignore[arg-type]
        job = rig.add_job(
            "export",
            runtime="ecs",
            timeout_seconds=3600,
            target=_ecs_target(ecs_setup, container_name="main"),
            retry=RetryPolicy(max_attempts=1),
        )
        claim = worker.claim(rig.message(job, T0))
        assert claim.claimed
        claim.cancel.set()  # (the run stops tracking at its first poll: the task runs on)
        assert "left running" in worker.run(claim).summary
        ecs = clients("ecs")
        [task] = ecs.list_tasks(cluster=ecs_setup["cluster"], desiredStatus="RUNNING")["taskArns"]
        if ending == "spec superseded":
            job = job.model_copy(update={"version": 2, "spec_since": 2, "timeout_seconds": 1800})
            rig.store.replace_job(job, expected_version=1)
        # When its lease lapses and its takeover comes, with no attempt left (or for an old spec)
        clock.advance(30)
        ended = worker.claim(rig.message(job, T0, attempt=2, kind=MessageKind.TAKEOVER))
        # Then the slot ends, and so does the task
        assert ended.execution is not None
        assert ended.execution.status in (ExecutionStatus.TIMED_OUT, ExecutionStatus.SUPERSEDED)
        [stopped] = ecs.describe_tasks(cluster=ecs_setup["cluster"], tasks=[task])["tasks"]
        assert stopped["lastStatus"] == "STOPPED"
        assert "slot ended" in stopped["stoppedReason"]
    finally:
        state_manager.unset_transition(model_name="ecs::task")
