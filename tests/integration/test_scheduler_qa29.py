"""EventBridge Scheduler API gaps QA29 found, driven as clients send them:

* a JSON ``null`` member (an SDK or a hand-written client that writes unset members as ``null``)
  is an omitted member, as the service's JSON protocol takes it: a null
  ``RetryPolicy.MaximumRetryAttempts`` was an InternalServerException (500), a null
  ``MaximumEventAgeInSeconds`` or ``EcsParameters.LaunchType`` / ``TaskCount`` refused with
  Punctual's own field names, where the omitted member takes its default.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_harness import ACCOUNT, REGION, ApiClient
from api_harness import api as api  # the fixture
from test_scheduler_api import ROLE
from test_scheduler_api import client as client  # the fixture

ECS_TARGET = {
    "Arn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/jobs",
    "RoleArn": ROLE,
    "RetryPolicy": {"MaximumRetryAttempts": None, "MaximumEventAgeInSeconds": None},
    "DeadLetterConfig": None,
    "Input": None,
    "EcsParameters": {
        "TaskDefinitionArn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:task-definition/report:3",
        "TaskCount": None,
        "LaunchType": None,
        "NetworkConfiguration": {
            "awsvpcConfiguration": {"Subnets": ["subnet-0abc1234"], "SecurityGroups": None}
        },
    },
}


def _body(**members: Any) -> str:
    body = {
        "ScheduleExpression": "rate(5 minutes)",
        "FlexibleTimeWindow": {"Mode": "OFF", "MaximumWindowInMinutes": None},
        "Target": ECS_TARGET,
        "GroupName": None,
        "Description": None,
        "StartDate": None,
        "EndDate": None,
        "ScheduleExpressionTimezone": None,
        "State": None,
        "ActionAfterCompletion": None,
        "ClientToken": None,
        **members,
    }
    return json.dumps(body)


@pytest.mark.parametrize("method", ["POST", "PUT"])
def test_null_members_are_omitted_members(client: Any, api: ApiClient, method: str) -> None:
    if method == "PUT":  # an update of a schedule that has every member set
        api.call(
            "POST",
            "/schedules/nulls",
            raw=_body(Target={**ECS_TARGET, "RetryPolicy": {"MaximumRetryAttempts": 2}}),
        )
    # When a create or an update sends every optional member as null
    reply = api.call(method, "/schedules/nulls", raw=_body())
    # Then it is taken, each null member as if it were left out: the service's defaults
    assert reply.status == 200, reply.body
    got = client.get_schedule(Name="nulls")
    assert got["Target"]["RetryPolicy"] == {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400}
    assert got["Target"]["EcsParameters"]["LaunchType"] == "FARGATE"
    assert got["Target"]["EcsParameters"]["TaskCount"] == 1
    assert got["State"] == "ENABLED" and got["ActionAfterCompletion"] == "NONE" and "Description" not in got


def test_a_null_required_member_is_named_as_missing(api: ApiClient) -> None:
    target = {**ECS_TARGET, "RoleArn": None}
    reply = api.call("POST", "/schedules/nulls", raw=_body(Target=target))
    assert (reply.status, reply.body) == (400, {"Message": "Target.RoleArn is required"})
    items = {
        **ECS_TARGET,
        "EcsParameters": {
            **ECS_TARGET["EcsParameters"],
            "NetworkConfiguration": {"awsvpcConfiguration": {"Subnets": [None]}},
        },
    }
    reply = api.call("POST", "/schedules/nulls", raw=_body(Target=items))
    assert reply.status == 400 and "Subnets[0] must be a string" in reply.body["Message"]


def test_a_body_nested_too_deeply_is_a_validation_exception(api: ApiClient) -> None:
    for depth in (100, 900, 5000):
        reply = api.call("POST", "/schedules/deep", raw='{"Description": ' + "[" * depth + "]" * depth + "}")
        assert reply.status == 400 and reply.headers["x-amzn-ErrorType"] == "ValidationException", reply
