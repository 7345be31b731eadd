"""The ECS lane's readiness against moto: the DynamoDB ledger's ECS counter, and the tick raising
and lowering the ECS worker service's minimum through Application Auto Scaling, built by the
composition root from the settings the stack gives the tick (punctual.dispatch.ecs_lane)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from punctual.dispatch.ecs_lane import DIMENSION, NAMESPACE, AwsScalableTarget
from punctual.runtime.composition import Container
from punctual.runtime.settings import Settings
from punctual.store.dynamo import DynamoStore, table_definition
from punctual.store.loads import MinuteLoad

M = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TABLE = "punctual-ecs-lane"
REGION = "us-east-1"
RESOURCE_ID = "service/punctual-cluster/punctual-ecs-workers"


@pytest.fixture
def deployment(aws: None) -> dict[str, Any]:
    """The table, and the ECS worker service registered with Application Auto Scaling from 0 to
    10 tasks, as the stack registers it."""
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    dynamodb.create_table(**table_definition(TABLE))
    ecs = boto3.client("ecs", region_name=REGION)
    ecs.create_cluster(clusterName="punctual-cluster")
    ecs.register_task_definition(
        family="punctual-ecs-worker", containerDefinitions=[{"name": "worker", "image": "w", "memory": 512}]
    )
    ecs.create_service(
        cluster="punctual-cluster",
        serviceName="punctual-ecs-workers",
        taskDefinition="punctual-ecs-worker",
        desiredCount=0,
    )
    scaling = boto3.client("application-autoscaling", region_name=REGION)
    scaling.register_scalable_target(
        ServiceNamespace=NAMESPACE,
        ResourceId=RESOURCE_ID,
        ScalableDimension=DIMENSION,
        MinCapacity=0,
        MaxCapacity=10,
    )
    return {"store": DynamoStore(dynamodb, TABLE), "scaling": scaling}


def _target(scaling: Any) -> dict[str, Any]:
    reply = scaling.describe_scalable_targets(
        ServiceNamespace=NAMESPACE, ResourceIds=[RESOURCE_ID], ScalableDimension=DIMENSION
    )
    return dict(reply["ScalableTargets"][0])


def test_the_ledger_keeps_the_ecs_lanes_slots_apart_from_the_minutes_load(deployment: dict[str, Any]) -> None:
    store: DynamoStore = deployment["store"]
    store.add_minute_loads({M: MinuteLoad(total=5, head=2)}, shard=1)
    store.add_minute_loads({M: MinuteLoad(ecs=2)}, shard=3)
    store.add_minute_loads({M: MinuteLoad(ecs=-1)}, shard=4)  # a replace took one back
    assert store.get_minute_load(M) == MinuteLoad(total=5, head=2, ecs=1)
    assert store.get_minute_load(M + timedelta(minutes=1)) == MinuteLoad()


def test_the_tick_raises_the_services_minimum_for_an_ecs_slot_in_sight_and_lowers_it_after(
    deployment: dict[str, Any],
) -> None:
    store: DynamoStore = deployment["store"]
    settings = Settings(
        table_name=TABLE,
        state_machine_arn="arn:aws:states:us-east-1:123456789012:stateMachine:minutes",
        ecs_service_resource_id=RESOURCE_ID,
        ecs_min_tasks=0,
        ecs_ready_tasks=2,
        ecs_lane_sight_s=150,
    )
    readiness = Container(settings).ecs_lane()
    assert readiness is not None and isinstance(readiness.target, AwsScalableTarget)
    store.add_minute_loads({M: MinuteLoad(ecs=1)})
    # Out of sight: the minimum stays as the stack registered it (read, not written)
    assert readiness.apply(M - timedelta(minutes=3)).changed is False
    assert _target(deployment["scaling"])["MinCapacity"] == 0
    # In sight: raised to two tasks; the maximum untouched
    decision = readiness.apply(M - timedelta(minutes=2))
    assert (decision.in_sight, decision.minimum, decision.changed) == (1, 2, True)
    target = _target(deployment["scaling"])
    assert (target["MinCapacity"], target["MaxCapacity"]) == (2, 10)
    # After it: back to the stack's minimum
    assert readiness.apply(M + timedelta(minutes=2)).minimum == 0
    assert _target(deployment["scaling"])["MinCapacity"] == 0


def test_without_a_service_to_ready_the_tick_leaves_ecs_alone(aws: None) -> None:
    assert Container(Settings(ecs_service_resource_id="")).ecs_lane() is None
    assert Container(Settings(ecs_service_resource_id=RESOURCE_ID, ecs_ready_tasks=0)).ecs_lane() is None
