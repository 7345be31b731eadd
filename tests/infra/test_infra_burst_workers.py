"""The standing ECS burst workers (``ecsBurstTasks``): a second Fargate service on the short queues."""

from __future__ import annotations

from typing import Any

from cdk_helpers import Synth, actions_on, join_parts, role_statements

from punctual_cdk.constants import WORKER_CONSUME_ACTIONS as CONSUME_ACTIONS


def _environment(synth: Synth, task_definition: Any) -> dict[str, Any]:
    task = synth.resources[synth.logical_id(task_definition)]
    (container,) = task["Properties"]["ContainerDefinitions"]
    return {e["Name"]: e["Value"] for e in container["Environment"]} | {"_container": container}


def test_no_burst_service_by_default(default_synth: Synth, custom_synth: Synth) -> None:
    for synth in (default_synth, custom_synth):
        assert synth.stack.workers.burst_service is None
        assert len(synth.of_type("AWS::ECS::Service")) == 1
        assert len(synth.of_type("AWS::ECS::TaskDefinition")) == 1
        assert not any("BurstWorkers" in key for key in synth.of_type("AWS::CloudWatch::Alarm"))


def test_burst_service_is_a_standing_fargate_service_of_the_asked_size(burst_synth: Synth) -> None:
    workers = burst_synth.stack.workers
    service = burst_synth.resources[burst_synth.logical_id(workers.burst_service)]["Properties"]
    task = burst_synth.resources[burst_synth.logical_id(workers.burst_task_definition)]["Properties"]

    assert service["DesiredCount"] == 214
    assert service["LaunchType"] == "FARGATE"
    assert service["Cluster"] == {"Ref": burst_synth.logical_id(workers.cluster)}
    network = service["NetworkConfiguration"]["AwsvpcConfiguration"]
    assert network["AssignPublicIp"] == "DISABLED"
    assert network["SecurityGroups"] == [
        {"Fn::GetAtt": [burst_synth.logical_id(workers.security_group), "GroupId"]}
    ]
    assert (task["Cpu"], task["Memory"]) == ("1024", "2048")
    assert task["RuntimePlatform"]["CpuArchitecture"] == "ARM64"
    # Standing: nothing scales it (the only scalable target is the long-lane service's).
    (target,) = burst_synth.of_type("AWS::ApplicationAutoScaling::ScalableTarget").values()
    assert burst_synth.logical_id(workers.service) in join_parts(target["Properties"]["ResourceId"])


def test_burst_container_polls_the_short_queues_with_its_threads(burst_synth: Synth) -> None:
    workers = burst_synth.stack.workers
    burst = _environment(burst_synth, workers.burst_task_definition)
    long_lane = _environment(burst_synth, workers.task_definition)

    assert burst["PUNCTUAL_WORKER_LANE"] == "short"
    assert burst["PUNCTUAL_WORKER_CONCURRENCY"] == "32"
    assert "PUNCTUAL_WORKER_LANE" not in long_lane  # the long-lane service keeps its default
    # The same image and the same runtime settings as the long-lane worker; every queue URL stays.
    container, long_container = burst.pop("_container"), long_lane.pop("_container")
    assert container["Image"] == long_container["Image"]
    assert container["StopTimeout"] == long_container["StopTimeout"]
    assert container["ReadonlyRootFilesystem"] is True
    for name in ("PUNCTUAL_SHORT_QUEUE_URLS", "PUNCTUAL_LONG_QUEUE_URLS", "PUNCTUAL_TABLE_NAME"):
        assert burst[name] == long_lane[name]
    drain_s = int(burst["PUNCTUAL_WORKER_GRACE_S"]) + int(burst["PUNCTUAL_WORKER_STOP_S"])
    assert drain_s < container["StopTimeout"]
    logs = container["LogConfiguration"]["Options"]["awslogs-group"]
    assert logs == {"Ref": burst_synth.logical_id(workers.burst_container_logs)}
    assert workers.burst_container_logs is not workers.container_logs


def test_burst_workers_consume_the_short_queues_and_not_the_long_ones(burst_synth: Synth) -> None:
    workers = burst_synth.stack.workers
    granted = actions_on(role_statements(burst_synth, workers.burst_task_definition.task_role))
    short = {f"<{burst_synth.logical_id(q)}.Arn>" for q in burst_synth.stack.queues.short}
    long = {f"<{burst_synth.logical_id(q)}.Arn>" for q in burst_synth.stack.queues.long}

    for action in CONSUME_ACTIONS:
        assert granted[action] == short, action
    assert granted["sqs:SendMessage"] >= short | long  # takeovers and dependent runs, either lane
    assert "kms:Decrypt" in granted  # webhook secrets, as the long-lane worker
    # The long-lane service's rights did not change.
    long_granted = actions_on(role_statements(burst_synth, workers.task_definition.task_role))
    assert long_granted["sqs:ReceiveMessage"] == long


def test_short_queues_use_sqs_managed_encryption_so_no_queue_key_is_needed(burst_synth: Synth) -> None:
    for queue in burst_synth.stack.queues.short:
        props = burst_synth.resources[burst_synth.logical_id(queue)]["Properties"]
        assert props["SqsManagedSseEnabled"] is True
        assert "KmsMasterKeyId" not in props


def test_an_alarm_fires_when_fewer_burst_workers_run_than_asked(burst_synth: Synth) -> None:
    workers = burst_synth.stack.workers
    alarm = burst_synth.resources[
        burst_synth.logical_id(burst_synth.stack.observability.node.find_child("BurstWorkersShort"))
    ]["Properties"]

    assert alarm["Namespace"] == "ECS/ContainerInsights"
    assert alarm["MetricName"] == "RunningTaskCount"
    dimensions = {d["Name"]: join_parts(d["Value"]) for d in alarm["Dimensions"]}
    assert dimensions["ServiceName"] == f"<{burst_synth.logical_id(workers.burst_service)}.Name>"
    assert alarm["ComparisonOperator"] == "LessThanThreshold"
    assert alarm["Threshold"] == 214
    assert alarm["TreatMissingData"] == "breaching"
    topic = burst_synth.logical_id(burst_synth.stack.observability.topic)
    assert alarm["AlarmActions"] == [{"Ref": topic}]
