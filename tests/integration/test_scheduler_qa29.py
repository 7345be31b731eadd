"""EventBridge Scheduler API gaps QA29 found, driven as clients send them:

* a JSON ``null`` member (an SDK or a hand-written client that writes unset members as ``null``)
  is an omitted member, as the service's JSON protocol takes it: a null
  ``RetryPolicy.MaximumRetryAttempts`` was an InternalServerException (500), a null
  ``MaximumEventAgeInSeconds`` or ``EcsParameters.LaunchType`` / ``TaskCount`` refused with
  Punctual's own field names, where the omitted member takes its default;
* an update that gives a one-time schedule that has run (its job COMPLETED) a new time and
  disables it enabled it first and paused it in a second write: a pause that failed (throttled)
  left it enabled with the new time, to run, though its caller disabled it;
* a refusal of the job's admission checks named Punctual's field (``payload: ...``,
  ``target.source refused: ...``), not the member the caller sent.
"""

from __future__ import annotations

import json
from contextlib import suppress
from typing import Any

import pytest
from api_harness import ACCOUNT, ALICE_ID, REGION, ApiClient
from api_harness import api as api  # the fixture
from botocore.exceptions import ClientError
from test_scheduler_api import ROLE
from test_scheduler_api import client as client  # the fixture

from punctual.api import wiring
from punctual.api.scheduler.mapping import job_id_of
from punctual.models import JobState

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


def _ran(api: ApiClient, name: str) -> None:
    """The one-time schedule ``name`` ran: its job is COMPLETED, as a worker leaves it."""
    stored = api.store.get_job(ALICE_ID, job_id_of("default", name))
    done = stored.model_copy(update={"state": JobState.COMPLETED, "version": stored.version + 1})
    api.store.replace_job(done, stored.version)


def test_disabling_a_completed_schedule_with_a_new_time_never_leaves_it_enabled(
    client: Any, api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = {"Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:reports", "RoleArn": ROLE}
    client.create_schedule(
        Name="once",
        ScheduleExpression="at(2030-01-01T00:00:00)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target=queue,
    )
    _ran(api, "once")
    jobs = wiring.services().jobs
    throttled = ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "UpdateItem")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise throttled

    update = {
        "Name": "once",
        "ScheduleExpression": "at(2031-01-01T00:00:00)",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "Target": queue,
        "State": "DISABLED",
    }
    # When an update gives it a new time and disables it, and a pause would be throttled
    with monkeypatch.context() as slow:
        slow.setattr(jobs, "pause", refuse)
        slow.setattr(jobs, "resume", refuse)
        with suppress(ClientError):  # (refused whole is as good: never the new time enabled)
            client.update_schedule(**update)
    # Then it does not run the new time: it is disabled, or as it was
    shown = client.get_schedule(Name="once")
    assert (shown["ScheduleExpression"], shown["State"]) != ("at(2031-01-01T00:00:00)", "ENABLED")
    job = api.store.get_job(ALICE_ID, job_id_of("default", "once"))
    assert job.state is not JobState.ENABLED
    # And the caller's retry (or the update, unthrottled) applies it whole; enabled, it runs at the new time
    client.update_schedule(**update)
    shown = client.get_schedule(Name="once")
    assert (shown["ScheduleExpression"], shown["State"]) == ("at(2031-01-01T00:00:00)", "DISABLED")
    client.update_schedule(**{**update, "State": "ENABLED"})
    job = api.store.get_job(ALICE_ID, job_id_of("default", "once"))
    assert job.state is JobState.ENABLED and job.schedule == "at(2031-01-01T00:00:00)"


BUS = f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/default"


@pytest.mark.parametrize(
    ("target", "member"),
    [
        ({"Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:reports", "Input": "a\\u0000b"}, "Target.Input: "),
        (
            {"Arn": BUS, "EventBridgeParameters": {"DetailType": "d", "Source": "punctual.jobs"}},
            "Target.EventBridgeParameters.Source ",
        ),
    ],
)
def test_a_refusal_names_the_member_the_caller_sent(
    api: ApiClient, target: dict[str, Any], member: str
) -> None:
    body = {
        "ScheduleExpression": "rate(5 minutes)",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "Target": {"RoleArn": ROLE, **target},
    }
    reply = api.call("POST", "/schedules/named", raw=json.dumps(body).replace("\\\\u0000", "\\u0000"))
    assert reply.status == 400, reply.body
    message = reply.body["Message"]
    assert message.startswith(member), message
    assert not any(ours in message for ours in ("payload", "dead_letter", "target.", "target ")), message
