"""Predictive scaling in the stack: the tick is told what to scale and may change only that."""

from __future__ import annotations

from typing import Any

from cdk_helpers import Synth, actions_on, join_parts, role_statements

from punctual.runtime.settings import default_of
from punctual_cdk import constants as c


def _tick_environment(synth: Synth) -> dict[str, Any]:
    tick = synth.resources[synth.logical_id(synth.stack.dispatch.tick.function)]
    return tick["Properties"]["Environment"]["Variables"]


def _scaling_grants(synth: Synth) -> dict[str, set[str]]:
    granted = actions_on(role_statements(synth, synth.stack.dispatch.tick.role))
    return {a: r for a, r in granted.items() if a.startswith(("lambda:", "ecs:", "sqs:GetQueueAttributes"))}


def _worker_service(synth: Synth) -> str:
    return f"<{synth.logical_id(synth.stack.workers.service)}>"  # a service's Ref is its ARN


def test_the_tick_may_change_the_worker_event_sources_only(default_synth: Synth) -> None:
    synth = default_synth
    sources = synth.stack.workers.event_sources
    grants = _scaling_grants(synth)
    # Exactly the two event-source calls, on the worker's mappings' ARNs; the backlog read on the
    # short queues; on ECS only the worker service, whose minimum the tick registers for the ECS
    # lane (no burst service in this shape).
    assert set(grants) == {
        *c.TICK_EVENT_SOURCE_ACTIONS,
        *c.TICK_QUEUE_ACTIONS,
        *c.TICK_ECS_LANE_SERVICE_ACTIONS,
    }
    for action in c.TICK_ECS_LANE_SERVICE_ACTIONS:
        assert grants[action] == {_worker_service(synth)}, action
    for action in c.TICK_EVENT_SOURCE_ACTIONS:
        (resource,) = grants[action]
        assert (
            ":event-source-mapping:" in resource and "*" not in resource.replace("<", "").split("mapping:")[1]
        )
    queues = {f"<{synth.logical_id(q)}.Arn>" for q in synth.stack.queues.short}
    assert grants["sqs:GetQueueAttributes"] == queues
    environment = _tick_environment(synth)
    assert len(sources) == len(synth.stack.queues.short)
    assert "PUNCTUAL_WORKER_EVENT_SOURCE_MAPPINGS" in environment
    mapping_ids = join_parts(environment["PUNCTUAL_WORKER_EVENT_SOURCE_MAPPINGS"])
    (mapping,) = synth.of_type("AWS::Lambda::EventSourceMapping")
    assert mapping_ids == f"<{mapping}>"  # the mapping's Ref is its UUID
    assert environment["PUNCTUAL_WORKER_MAX_CONCURRENCY"] == "400"
    assert environment["PUNCTUAL_BURST_WORKERS_MAX"] == "0"
    assert "PUNCTUAL_BURST_SERVICE" not in environment
    # The capacity figures every function reads from the context (the deployed settings)
    assert environment["PUNCTUAL_BURST_START_LEAD_S"] == "75"
    assert environment["PUNCTUAL_BURST_LATENESS_TARGET_S"] == "10"


def test_with_burst_tasks_the_tick_may_scale_that_service_only(burst_synth: Synth) -> None:
    synth = burst_synth
    workers = synth.stack.workers
    grants = _scaling_grants(synth)
    service = f"<{synth.logical_id(workers.burst_service)}>"  # a service's Ref is its ARN
    for action in c.TICK_BURST_SERVICE_ACTIONS:  # and the worker service's, for the ECS lane
        assert grants[action] == {service, _worker_service(synth)}, action
    assert not {a for a in grants if a.startswith("ecs:")} - set(c.TICK_BURST_SERVICE_ACTIONS)
    environment = _tick_environment(synth)
    assert join_parts(environment["PUNCTUAL_BURST_SERVICE"]) == service
    assert join_parts(environment["PUNCTUAL_BURST_CLUSTER"]) == f"<{synth.logical_id(workers.cluster)}.Arn>"
    assert (environment["PUNCTUAL_BURST_WORKERS"], environment["PUNCTUAL_BURST_WORKERS_MAX"]) == (
        "214",
        "300",
    )
    assert environment["PUNCTUAL_BURST_WORKER_MESSAGES_PER_S"] == str(
        float(c.ECS_BURST_MESSAGES_PER_S_PER_VCPU)
    )
    # Its tasks keep the lease of every worker (the deployment's leaseS, none of their own); their
    # backstop LEASE timers are far timers all the same (punctual.execution.lease)
    task = synth.resources[synth.logical_id(workers.burst_task_definition)]["Properties"]
    (container,) = task["ContainerDefinitions"]
    leases = [e["Value"] for e in container["Environment"] if e["Name"] == "PUNCTUAL_LEASE_S"]
    assert leases == [str(default_of("lease_s"))]
    # The service stands at ecsBurstTasks: the tick moves it between that and ecsBurstTasksMax.
    properties = synth.resources[synth.logical_id(workers.burst_service)]["Properties"]
    assert properties["DesiredCount"] == 214


def test_the_dashboard_shows_the_scaling_decisions(any_synth: Synth) -> None:
    (dashboard,) = any_synth.of_type("AWS::CloudWatch::Dashboard").values()
    body = join_parts(dashboard["Properties"]["DashboardBody"])
    for metric in (
        c.METRIC_BURST_WORKERS_DESIRED,
        c.METRIC_WORKER_CONCURRENCY_DESIRED,
        c.METRIC_BURST_PLANNED_SLOTS,
        c.METRIC_BURST_SHORTFALL,
        c.METRIC_RATE_BUDGET_OVERRUNS,
        c.METRIC_RETRIES_DEFERRED,
    ):
        assert metric in body, metric
    assert ("RunningTaskCount" in body) == (any_synth.stack.workers.burst_service is not None)


def test_a_failed_minute_alarms_on_either_machine(burst_synth: Synth, default_synth: Synth) -> None:
    def alarm(synth: Synth) -> dict[str, Any]:
        construct = synth.stack.observability.node.find_child("MinuteExecutionFailed")
        return synth.resources[synth.logical_id(construct)]["Properties"]

    machines = {f"<{burst_synth.logical_id(m)}>" for m in burst_synth.stack.dispatch.state_machines}
    metrics = alarm(burst_synth)["Metrics"]
    watched = {
        join_parts(d["Value"])
        for m in metrics
        if "MetricStat" in m
        for d in m["MetricStat"]["Metric"]["Dimensions"]
        if d["Name"] == "StateMachineArn"
    }
    assert watched == machines and len(machines) == 2
    # one machine: its own failed and timed-out executions (test_infra_observability.py)
    assert {
        m["MetricStat"]["Metric"]["MetricName"] for m in alarm(default_synth)["Metrics"] if "MetricStat" in m
    } == {
        "ExecutionsFailed",
        "ExecutionsTimedOut",
    }


def test_the_tick_may_raise_the_ecs_worker_services_minimum_only(any_synth: Synth) -> None:
    """ECS tasks ahead of the ECS lane's slots (punctual.dispatch.ecs_lane): the tick is told the
    worker service's scalable target and the two minimums, and may register scalable targets of
    its own account and Region only (their ARNs end in ids the service assigns)."""
    synth, workers = any_synth, any_synth.stack.workers
    environment = _tick_environment(synth)
    resource_id = join_parts(environment["PUNCTUAL_ECS_SERVICE_RESOURCE_ID"])
    assert resource_id.startswith("service/") and resource_id.count("/") == 2
    assert f"<{synth.logical_id(workers.service)}.Name>" in resource_id
    assert (environment["PUNCTUAL_ECS_MIN_TASKS"], environment["PUNCTUAL_ECS_READY_TASKS"]) == ("0", "2")
    assert float(environment["PUNCTUAL_ECS_LANE_SIGHT_S"]) == c.ECS_LANE_SIGHT_S
    granted = actions_on(role_statements(synth, synth.stack.dispatch.tick.role))
    assert granted["application-autoscaling:DescribeScalableTargets"] == {"*"}  # no resource-level form
    (targets,) = granted["application-autoscaling:RegisterScalableTarget"]
    assert targets.endswith(":scalable-target/*") and "<AWS::AccountId>" in targets
    # And the scaling policies the service had stay as they were: Application Auto Scaling scales
    # out to a raised minimum at once, and in only by the service's own policy
    policies = synth.of_type("AWS::ApplicationAutoScaling::ScalingPolicy")
    assert len(policies) >= 2
