"""Target ARNs are checked at registration: service, partition and region, account, resource name."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from punctual.models import (
    EcsTarget,
    EventBridgeTarget,
    LambdaTarget,
    SnsTarget,
    SqsTarget,
    StepFunctionsTarget,
)

A = "123456789012"


def _ecs(cluster: str, task_definition: str) -> EcsTarget:
    return EcsTarget(cluster_arn=cluster, task_definition_arn=task_definition, subnets=["subnet-1"])


VALID: list[tuple[Any, str]] = [
    (lambda v: LambdaTarget(function_arn=v), f"arn:aws:lambda:eu-west-1:{A}:function:report-builder"),
    (lambda v: LambdaTarget(function_arn=v), f"arn:aws:lambda:eu-west-1:{A}:function:report:$LATEST"),
    (lambda v: LambdaTarget(function_arn=v), f"arn:aws:lambda:eu-west-1:{A}:function:report:42"),
    (lambda v: LambdaTarget(function_arn=v), f"arn:aws:lambda:eu-west-1:{A}:function:report:live"),
    (lambda v: SqsTarget(queue_arn=v), f"arn:aws:sqs:us-east-1:{A}:orders"),
    (lambda v: SqsTarget(queue_arn=v), f"arn:aws:sqs:us-east-1:{A}:orders.fifo"),
    (lambda v: SqsTarget(queue_arn=v), f"arn:aws-cn:sqs:cn-north-1:{A}:orders"),
    (lambda v: SqsTarget(queue_arn=v), f"arn:aws-us-gov:sqs:us-gov-west-1:{A}:orders"),
    (lambda v: SnsTarget(topic_arn=v), f"arn:aws:sns:us-east-1:{A}:alerts.fifo"),
    (lambda v: EventBridgeTarget(event_bus_arn=v), f"arn:aws:events:us-east-1:{A}:event-bus/default"),
    (
        lambda v: EventBridgeTarget(event_bus_arn=v),
        f"arn:aws:events:us-east-1:{A}:event-bus/aws.partner/example.com/1/jobs",
    ),
    (lambda v: StepFunctionsTarget(state_machine_arn=v), f"arn:aws:states:us-east-1:{A}:stateMachine:etl.v2"),
    (
        lambda v: StepFunctionsTarget(state_machine_arn=v),
        f"arn:aws:states:us-east-1:{A}:stateMachine:etl:prod",
    ),
    (
        lambda v: _ecs(v, f"arn:aws:ecs:us-east-1:{A}:task-definition/export:3"),
        f"arn:aws:ecs:us-east-1:{A}:cluster/jobs",
    ),
    (
        lambda v: _ecs(f"arn:aws:ecs:us-east-1:{A}:cluster/jobs", v),
        f"arn:aws:ecs:us-east-1:{A}:task-definition/export",
    ),
]

INVALID: list[tuple[Any, str]] = [
    (lambda v: LambdaTarget(function_arn=v), f"arn:aws:lambda:eu-west-1:{A}:layer:report"),
    (lambda v: LambdaTarget(function_arn=v), f"arn:aws:lambda:eu-west-1:{A}:function:bad name"),
    (lambda v: LambdaTarget(function_arn=v), f"arn:aws:sqs:eu-west-1:{A}:function:report"),  # service
    (lambda v: LambdaTarget(function_arn=v), "arn:aws:lambda:eu-west-1:12345:function:report"),  # account
    (lambda v: LambdaTarget(function_arn=v), f"arn:aws:lambda:europe:{A}:function:report"),  # region
    (lambda v: SqsTarget(queue_arn=v), f"arn:aws:sqs:us-east-1:{A}:a/../other"),  # would reshape the URL
    (lambda v: SqsTarget(queue_arn=v), f"arn:aws:sqs:us-east-1:{A}:" + "q" * 81),
    (lambda v: SqsTarget(queue_arn=v), f"arn:aws:sqs:us-east-1:{A}:orders?x=1"),
    (lambda v: SqsTarget(queue_arn=v), f"arn:aws-cn:sqs:us-east-1:{A}:orders"),  # partition vs region
    (lambda v: SqsTarget(queue_arn=v), f"arn:aws:sqs:cn-north-1:{A}:orders"),
    (lambda v: SnsTarget(topic_arn=v), f"arn:aws:sns:us-east-1:{A}:alerts:subscription-id"),
    (lambda v: EventBridgeTarget(event_bus_arn=v), f"arn:aws:events:us-east-1:{A}:rule/nightly"),
    (lambda v: StepFunctionsTarget(state_machine_arn=v), f"arn:aws:states:us-east-1:{A}:execution:etl:run-1"),
    (
        lambda v: StepFunctionsTarget(state_machine_arn=v),
        f"arn:aws:states:us-east-1:{A}:stateMachine:etl machine",
    ),
    (
        lambda v: _ecs(v, f"arn:aws:ecs:us-east-1:{A}:task-definition/export:3"),
        f"arn:aws:ecs:us-east-1:{A}:service/jobs",
    ),
    (
        lambda v: _ecs(f"arn:aws:ecs:us-east-1:{A}:cluster/jobs", v),
        f"arn:aws:ecs:us-east-1:{A}:task-definition/export:latest",
    ),
]


@pytest.mark.parametrize(("build", "arn"), VALID)
def test_valid_target_arns_are_accepted(build: Any, arn: str) -> None:
    build(arn)


@pytest.mark.parametrize(("build", "arn"), INVALID)
def test_invalid_target_arns_are_refused_at_registration(build: Any, arn: str) -> None:
    with pytest.raises(ValidationError):
        build(arn)
