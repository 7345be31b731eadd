"""Conformance of Punctual's EventBridge Scheduler API, with an unmodified boto3 ``scheduler`` client.

Every operation of botocore's model is served; every member of every input shape is supported,
accepted or refused by name (:mod:`punctual.api.scheduler.fields`); every error code reaches the
SDK as ``ClientError.response["Error"]["Code"]``; paging and filters; a schedule is a job in
``/v1`` and a ``/v1`` job is a schedule.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from api_harness import ACCOUNT, ALICE_ID, BOB, REGION, ApiClient, job_spec
from api_harness import api as api  # the fixture
from botocore.exceptions import ClientError
from scheduler_harness import scheduler_client

from punctual.api import wiring
from punctual.api.scheduler import fields, model
from punctual.api.scheduler.mapping import job_id_of
from punctual.api.scheduler.operations import OPERATIONS
from punctual.models import JobState

ROLE = f"arn:aws:iam::{ACCOUNT}:role/scheduler-role"
QUEUE = f"arn:aws:sqs:{REGION}:{ACCOUNT}:reports"
PREFIX = f"arn:aws:scheduler:{REGION}:{ACCOUNT}"


def _target(**extra: Any) -> dict[str, Any]:
    return {"Arn": QUEUE, "RoleArn": ROLE, **extra}


def _create(client: Any, name: str, **extra: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "Name": name,
        "ScheduleExpression": "rate(5 minutes)",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "Target": _target(),
        **extra,
    }
    reply: dict[str, Any] = client.create_schedule(**request)
    return reply


def _request(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "Name": name,
        "ScheduleExpression": "rate(5 minutes)",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "Target": _target(),
        **extra,
    }


def _code(call: Any, **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as caught:
        call(**kwargs)
    error = caught.value.response["Error"]
    return error["Code"], error["Message"]


@pytest.fixture
def client(api: ApiClient) -> Any:
    return scheduler_client(api)


# --------------------------------------------------------------------------- the model


def test_every_operation_of_the_service_is_served() -> None:
    operations = model.service_model()["operations"]
    assert set(operations) == set(OPERATIONS)
    for name, operation in operations.items():
        uri = operation["http"]["requestUri"].replace("{Name}", "n1").replace("{ResourceArn}", "arn%3Ax")
        assert model.route(operation["http"]["method"], uri) is not None, name
        assert model.route(operation["http"]["method"], uri)[0] == name  # type: ignore[index]


def _members(shape_name: str, path: str = "") -> list[str]:
    shape = model.shapes()[shape_name]
    found: list[str] = []
    if shape["type"] == "list":
        return _members(shape["member"]["shape"], path)
    if shape["type"] != "structure":
        return found
    for member, spec in shape["members"].items():
        where = f"{path}.{member}" if path else member
        found.append(where)
        found.extend(_members(spec["shape"], where))
    return found


def test_every_input_member_is_supported_accepted_or_refused() -> None:
    for name, operation in model.service_model()["operations"].items():
        members = set(_members(operation["input"]["shape"]))
        listed = set(fields.INPUT_FIELDS[name])
        assert members == listed, (name, members ^ listed)
        assert {status for status, _ in fields.INPUT_FIELDS[name].values()} <= {
            fields.SUPPORTED,
            fields.ACCEPTED,
            fields.REFUSED,
        }


_ECS = {
    "Arn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/jobs",
    "RoleArn": ROLE,
    "EcsParameters": {
        "TaskDefinitionArn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:task-definition/report:3",
        "NetworkConfiguration": {"awsvpcConfiguration": {"Subnets": ["subnet-0abc1234"]}},
    },
}
# A valid value for each refused member whose parent is supported (the top of each refused branch).
_REFUSED_EXAMPLES: dict[str, tuple[str, Any]] = {
    "KmsKeyArn": ("top", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/abc"),
    "Target.EventBridgePutEventsV2Parameters": ("target", {"DetailType": "d", "Source": "s"}),
    "Target.EventBridgePutRawEventsParameters": ("target", {"Metadata": {}}),
    "Target.KinesisParameters": ("target", {"PartitionKey": "k"}),
    "Target.SageMakerPipelineParameters": ("target", {"PipelineParameterList": []}),
    "Target.EcsParameters.PlatformVersion": ("ecs", "1.4.0"),
    "Target.EcsParameters.Group": ("ecs", "g"),
    "Target.EcsParameters.CapacityProviderStrategy": ("ecs", [{"capacityProvider": "FARGATE_SPOT"}]),
    "Target.EcsParameters.EnableECSManagedTags": ("ecs", True),
    "Target.EcsParameters.EnableExecuteCommand": ("ecs", True),
    "Target.EcsParameters.PlacementConstraints": ("ecs", [{"type": "distinctInstance"}]),
    "Target.EcsParameters.PlacementStrategy": ("ecs", [{"type": "random"}]),
    "Target.EcsParameters.PropagateTags": ("ecs", "TASK_DEFINITION"),
    "Target.EcsParameters.ReferenceId": ("ecs", "ref"),
    "Target.EcsParameters.Tags": ("ecs", [{"team": "data"}]),
}


def test_each_refused_member_gets_a_validation_exception_naming_it(client: Any) -> None:
    refused = {
        path for path, (status, _) in fields.INPUT_FIELDS["CreateSchedule"].items() if status == "refused"
    }
    tops = {path for path in refused if "." not in path or path.rsplit(".", 1)[0] not in refused}
    assert tops == set(_REFUSED_EXAMPLES)
    for path, (where, value) in _REFUSED_EXAMPLES.items():
        member = path.rsplit(".", 1)[-1]
        request: dict[str, Any] = {"Target": _target()}
        if where == "top":
            request[member] = value
        elif where == "target":
            request["Target"] = _target(**{member: value})
        else:
            ecs = {**_ECS, "EcsParameters": {**_ECS["EcsParameters"], member: value}}
            request["Target"] = ecs
        code, message = _code(_create, client=client, name="refused", **request)
        assert code == "ValidationException" and member in message, (path, message)
    assert client.list_schedules()["Schedules"] == []


# --------------------------------------------------------------------------- schedules


def test_create_get_update_delete_round_trip(client: Any, api: ApiClient) -> None:
    # Given a schedule with every supported member
    start = datetime(2030, 1, 1, tzinfo=UTC)
    arn = _create(
        client,
        "nightly.report-1",
        ScheduleExpression="cron(0 2 * * ? *)",
        ScheduleExpressionTimezone="Europe/Berlin",
        StartDate=start,
        EndDate=start + timedelta(days=30),
        Description="the nightly report",
        State="ENABLED",
        FlexibleTimeWindow={"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 90},
        ActionAfterCompletion="DELETE",
        Target=_target(
            Input='{"arn": "<aws.scheduler.schedule-arn>", "at": "<aws.scheduler.scheduled-time>"}',
            RetryPolicy={"MaximumRetryAttempts": 4, "MaximumEventAgeInSeconds": 600},
            DeadLetterConfig={"Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:reports-dlq"},
        ),
    )["ScheduleArn"]
    assert arn == f"{PREFIX}:schedule/default/nightly.report-1"
    # Then GetSchedule answers it as given
    got = client.get_schedule(Name="nightly.report-1")
    assert got["Arn"] == arn and got["GroupName"] == "default" and got["State"] == "ENABLED"
    assert got["ScheduleExpression"] == "cron(0 2 * * ? *)"
    assert got["ScheduleExpressionTimezone"] == "Europe/Berlin"
    assert got["StartDate"] == start and got["EndDate"] == start + timedelta(days=30)
    assert got["FlexibleTimeWindow"] == {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 90}
    assert got["ActionAfterCompletion"] == "DELETE"
    assert got["Target"]["Input"].startswith('{"arn": "<aws.scheduler.schedule-arn>"')
    assert got["Target"]["RetryPolicy"] == {"MaximumRetryAttempts": 4, "MaximumEventAgeInSeconds": 600}
    assert got["Target"]["DeadLetterConfig"]["Arn"].endswith(":reports-dlq")
    assert got["Description"] == "the nightly report"
    # And /v1 shows the same job: the schedule ARN filled in, the rest per run
    job = api.call("GET", f"/v1/jobs/{job_id_of('default', 'nightly.report-1')}").body
    # (an SQS target's Input is its message body, kept as text)
    assert job["payload"] == f'{{"arn": "{arn}", "at": "<aws.scheduler.scheduled-time>"}}'
    assert job["retry"]["max_attempts"] == 5 and job["retry"]["max_age_seconds"] == 600
    assert job["jitter_seconds"] == 5400 and job["delete_after_completion"] is True
    assert job["catchup"]["window_seconds"] == 5400 + 3600
    assert job["target"]["type"] == "sqs" and job["target"]["role_arn"] == ROLE
    # When it is updated to DISABLED with another expression
    client.update_schedule(
        Name="nightly.report-1",
        ScheduleExpression="rate(1 hour)",
        FlexibleTimeWindow={"Mode": "OFF"},
        State="DISABLED",
        Target=_target(),
    )
    got = client.get_schedule(Name="nightly.report-1")
    assert got["State"] == "DISABLED" and got["ScheduleExpression"] == "rate(1 hour)"
    assert got["ActionAfterCompletion"] == "NONE" and "DeadLetterConfig" not in got["Target"]
    assert got["Target"]["RetryPolicy"] == {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400}
    assert api.call("GET", f"/v1/jobs/{job_id_of('default', 'nightly.report-1')}").body["state"] == "PAUSED"
    # And enabled again
    client.update_schedule(
        Name="nightly.report-1",
        ScheduleExpression="rate(1 hour)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target=_target(),
    )
    assert client.get_schedule(Name="nightly.report-1")["State"] == "ENABLED"
    # Then deleting it removes it; a second delete is ResourceNotFoundException
    client.delete_schedule(Name="nightly.report-1")
    assert _code(client.get_schedule, Name="nightly.report-1")[0] == "ResourceNotFoundException"
    assert _code(client.delete_schedule, Name="nightly.report-1")[0] == "ResourceNotFoundException"
    assert (
        _code(
            client.update_schedule,
            Name="nightly.report-1",
            ScheduleExpression="rate(1 hour)",
            FlexibleTimeWindow={"Mode": "OFF"},
            Target=_target(),
        )[0]
        == "ResourceNotFoundException"
    )


def test_a_rate_schedule_without_a_start_date_starts_at_once_as_the_service_does(
    client: Any, api: ApiClient
) -> None:
    """Schedule types, rate-based: "If you don't provide a StartDate for a rate-based schedule, your
    schedule starts invoking the target immediately". GetSchedule shows no StartDate all the same, so
    that a read-modify-write of the schedule later is not refused for a StartDate in the past."""
    before = datetime.now(UTC)
    _create(client, "at-once", ScheduleExpression="rate(1 hour)")
    job = api.call("GET", f"/v1/jobs/{job_id_of('default', 'at-once')}").body
    first = datetime.fromisoformat(job["next_fire_at"])
    assert before <= first <= datetime.now(UTC) + timedelta(seconds=2)  # now, not an hour on
    got = client.get_schedule(Name="at-once")
    assert "StartDate" not in got
    mutable = ("ScheduleExpression", "ScheduleExpressionTimezone", "FlexibleTimeWindow", "Target", "State")
    client.update_schedule(Name="at-once", **{k: got[k] for k in mutable})
    assert "StartDate" not in client.get_schedule(Name="at-once")
    # a StartDate given is kept and shown; a /v1 rate job's first slot is N after its registration
    start = datetime(2030, 1, 1, tzinfo=UTC)
    _create(client, "later", ScheduleExpression="rate(1 hour)", StartDate=start)
    assert client.get_schedule(Name="later")["StartDate"] == start
    created = api.create(job_spec(schedule="rate(1 hour)"))
    assert datetime.fromisoformat(created["next_fire_at"]) >= before + timedelta(hours=1)


def test_a_cron_schedule_skips_a_time_spring_forward_skips_as_the_service_does(
    client: Any, api: ApiClient
) -> None:
    """Schedule types, daylight saving time: a cron time that does not exist on the spring-forward day
    is skipped, and a repeated one runs once; a /v1 job keeps its own default (fire after the gap)."""
    _create(
        client, "berlin", ScheduleExpression="cron(30 2 * * ? *)", ScheduleExpressionTimezone="Europe/Berlin"
    )
    job = api.call("GET", f"/v1/jobs/{job_id_of('default', 'berlin')}").body
    assert job["dst"] == {"gap": "skip", "repeat": "first"}
    assert "dst" not in client.get_schedule(Name="berlin")  # no such member in the service's model


def test_created_disabled_is_paused_from_the_start(client: Any, api: ApiClient) -> None:
    _create(client, "off", State="DISABLED")
    job = api.call("GET", f"/v1/jobs/{job_id_of('default', 'off')}").body
    assert job["state"] == "PAUSED" and job["version"] == 1  # one write, never enabled


def test_a_v1_job_is_a_schedule_of_the_default_group(client: Any, api: ApiClient) -> None:
    created = api.create(job_spec())
    got = client.get_schedule(Name=created["id"])
    assert got["GroupName"] == "default" and got["Target"]["Arn"] == QUEUE
    assert got["Target"]["Input"] == '{"report":"daily"}'
    api.call("POST", f"/v1/jobs/{created['id']}/pause")
    assert client.get_schedule(Name=created["id"])["State"] == "DISABLED"
    names = [s["Name"] for s in client.list_schedules(GroupName="default")["Schedules"]]
    assert names == [created["id"]]
    client.delete_schedule(Name=created["id"])
    assert api.call("GET", f"/v1/jobs/{created['id']}").status == 404


def test_client_token_makes_a_retried_create_safe(client: Any) -> None:
    first = _create(client, "once", ClientToken="token-1")["ScheduleArn"]
    assert _create(client, "once", ClientToken="token-1")["ScheduleArn"] == first
    assert _code(_create, client=client, name="once", ClientToken="token-2")[0] == "ConflictException"


_TARGET_CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (
        {"Arn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:report", "Input": '{"a": 1}'},
        {"type": "lambda", "invocation_type": "Event"},
    ),
    ({"Arn": f"arn:aws:sns:{REGION}:{ACCOUNT}:topic"}, {"type": "sns"}),
    (
        {
            "Arn": f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/default",
            "Input": '{"k": "v"}',
            "EventBridgeParameters": {"DetailType": "Report Due", "Source": "reports.app"},
        },
        {"type": "eventbridge", "detail_type": "Report Due", "source": "reports.app"},
    ),
    ({"Arn": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:report"}, {"type": "stepfunctions"}),
    (
        {
            "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders.fifo",
            "SqsParameters": {"MessageGroupId": "group-7"},
        },
        {"type": "sqs", "message_group_id": "group-7"},
    ),
    (
        {
            k: v
            for k, v in {
                **_ECS,
                "EcsParameters": {
                    **_ECS["EcsParameters"],
                    "LaunchType": "EC2",
                    "TaskCount": 1,
                    "NetworkConfiguration": {
                        "awsvpcConfiguration": {
                            "Subnets": ["subnet-0abc1234"],
                            "SecurityGroups": ["sg-0abc1234"],
                            "AssignPublicIp": "ENABLED",
                        }
                    },
                },
            }.items()
            if k != "RoleArn"
        },
        {"type": "ecs", "launch_type": "EC2", "assign_public_ip": True, "security_groups": ["sg-0abc1234"]},
    ),
]  # lambda, sns, eventbridge, stepfunctions, sqs-fifo, ecs


def test_each_target_type_maps_both_ways(client: Any, api: ApiClient) -> None:
    for index, (target, shown) in enumerate(_TARGET_CASES):
        name = f"t{index}"
        _create(client, name, Target={**target, "RoleArn": ROLE})
        job = api.call("GET", f"/v1/jobs/{job_id_of('default', name)}").body
        assert shown.items() <= job["target"].items(), shown
        got = client.get_schedule(Name=name)["Target"]
        for key in ("Arn", "Input", "SqsParameters", "EventBridgeParameters"):
            assert got.get(key) == target.get(key), (shown, key)
        if "EcsParameters" in target:
            assert (
                got["EcsParameters"]["NetworkConfiguration"]
                == target["EcsParameters"]["NetworkConfiguration"]
            )


_INVALID_CASES: list[tuple[dict[str, Any], str]] = [
    # The service's pattern lets this through; Punctual's own check (partition vs region) does not
    (
        {"Target": _target(DeadLetterConfig={"Arn": f"arn:aws:sqs:cn-north-1:{ACCOUNT}:dlq"})},
        "DeadLetterConfig.Arn",
    ),
    ({"Target": {"Arn": f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/s", "RoleArn": ROLE}}, "kinesis"),
    ({"Target": {"Arn": "arn:aws:scheduler:::aws-sdk:sqs:sendMessage", "RoleArn": ROLE}}, "universal"),
    (
        {
            "Target": _target(SqsParameters={"MessageGroupId": "g"})
            | {"Arn": f"arn:aws:sns:{REGION}:{ACCOUNT}:t"}
        },
        "SqsParameters",
    ),
    ({"Target": {"Arn": _ECS["Arn"], "RoleArn": ROLE}}, "EcsParameters"),
    ({"Target": {**_ECS, "EcsParameters": {**_ECS["EcsParameters"], "TaskCount": 2}}}, "TaskCount"),
    ({"Target": {**_ECS, "EcsParameters": {**_ECS["EcsParameters"], "LaunchType": "EXTERNAL"}}}, "EXTERNAL"),
    ({"Name": "bad name!"}, "Name"),
    ({"ScheduleExpression": "rate(5 fortnights)"}, "ScheduleExpression"),
    ({"ScheduleExpression": "at(2001-01-01T00:00:00)"}, "no future slot"),
    ({"ScheduleExpressionTimezone": "Mars/Olympus"}, "ScheduleExpressionTimezone"),
    ({"FlexibleTimeWindow": {"Mode": "FLEXIBLE"}}, "MaximumWindowInMinutes"),
    ({"FlexibleTimeWindow": {"Mode": "OFF", "MaximumWindowInMinutes": 5}}, "MaximumWindowInMinutes"),
    ({"FlexibleTimeWindow": {"Mode": "SOMETIMES"}}, "FlexibleTimeWindow.Mode"),
    ({"Target": _target(RetryPolicy={"MaximumRetryAttempts": 186})}, "MaximumRetryAttempts"),
    ({"Target": _target(RetryPolicy={"MaximumEventAgeInSeconds": 86401})}, "MaximumEventAgeInSeconds"),
    ({"Target": _target(RoleArn="not-a-role-arn-at-all")}, "RoleArn"),
    (
        {"Target": _target(DeadLetterConfig={"Arn": f"arn:aws:sns:{REGION}:{ACCOUNT}:t"})},
        "DeadLetterConfig.Arn",
    ),
    (
        {
            "Target": {
                "Arn": f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/default",
                "RoleArn": ROLE,
                "Input": "[1]",
            }
        },
        "JSON object",
    ),
    ({"StartDate": datetime(2031, 1, 1, tzinfo=UTC), "EndDate": datetime(2030, 1, 1, tzinfo=UTC)}, "EndDate"),
    ({"Description": "x" * 513}, "Description"),
    ({"ActionAfterCompletion": "ARCHIVE"}, "ActionAfterCompletion"),
]


def test_invalid_schedules_are_validation_exceptions_naming_the_member(client: Any) -> None:
    for change, named in _INVALID_CASES:
        request = {"name": "s", **{k: v for k, v in change.items() if k != "Name"}}
        if "Name" in change:
            request["name"] = change["Name"]
        code, message = _code(_create, client=client, **request)
        assert code == "ValidationException", (change, code)
        assert named.lower() in message.lower(), (named, message)
    assert client.list_schedules()["Schedules"] == []


def test_schedules_in_a_missing_group_are_not_found(client: Any) -> None:
    assert _code(_create, client=client, name="s", GroupName="nope")[0] == "ResourceNotFoundException"
    assert _code(client.get_schedule, Name="s", GroupName="nope")[0] == "ResourceNotFoundException"
    assert _code(client.list_schedules, GroupName="nope")[0] == "ResourceNotFoundException"


def test_tenants_never_see_each_other(client: Any, api: ApiClient) -> None:
    client.create_schedule_group(Name="mine")
    _create(client, "s", GroupName="mine")
    bob = scheduler_client(api, user=BOB)
    assert bob.list_schedules()["Schedules"] == []
    assert [g["Name"] for g in bob.list_schedule_groups()["ScheduleGroups"]] == ["default"]
    assert _code(bob.get_schedule, Name="s", GroupName="mine")[0] == "ResourceNotFoundException"
    assert api.call("GET", f"/v1/jobs/{job_id_of('mine', 's')}").body["tags"] == {
        "punctual:schedule-group": "mine"
    }


# --------------------------------------------------------------------------- paging and filters


def test_list_schedules_pages_and_filters(client: Any) -> None:
    # Given seven schedules in two groups, two of them disabled
    client.create_schedule_group(Name="billing")
    for name in ("alpha-1", "alpha-2", "alpha-3", "beta-1"):
        _create(client, name)
    _create(client, "alpha-4", State="DISABLED")
    _create(client, "alpha-1", GroupName="billing")
    _create(client, "gamma", GroupName="billing", State="DISABLED")
    # Then the paginator walks every one, two per page
    pages = list(client.get_paginator("list_schedules").paginate(PaginationConfig={"PageSize": 2}))
    assert all(len(page["Schedules"]) <= 2 for page in pages) and len(pages) >= 4
    everything = sorted((s["GroupName"], s["Name"]) for page in pages for s in page["Schedules"])
    assert everything == [
        ("billing", "alpha-1"),
        ("billing", "gamma"),
        ("default", "alpha-1"),
        ("default", "alpha-2"),
        ("default", "alpha-3"),
        ("default", "alpha-4"),
        ("default", "beta-1"),
    ]

    def names(**filters: Any) -> list[tuple[str, str]]:
        found = client.get_paginator("list_schedules").paginate(**filters, PaginationConfig={"PageSize": 2})
        return sorted((s["GroupName"], s["Name"]) for page in found for s in page["Schedules"])

    assert names(NamePrefix="alpha", GroupName="default") == [("default", f"alpha-{i}") for i in range(1, 5)]
    assert names(State="DISABLED") == [("billing", "gamma"), ("default", "alpha-4")]
    assert names(GroupName="billing", State="ENABLED") == [("billing", "alpha-1")]
    summary = client.list_schedules(GroupName="billing", NamePrefix="gamma")["Schedules"][0]
    assert summary["Arn"] == f"{PREFIX}:schedule/billing/gamma" and summary["Target"] == {"Arn": QUEUE}
    # And a token is bound to its filters, and only this API's tokens are taken
    token = client.list_schedules(MaxResults=1)["NextToken"]
    assert (
        _code(client.list_schedules, MaxResults=1, NextToken=token, State="ENABLED")[0]
        == "ValidationException"
    )
    assert _code(client.list_schedules, NextToken="forged.token")[0] == "ValidationException"
    assert _code(client.list_schedules, MaxResults=101)[0] == "ValidationException"
    assert _code(client.list_schedules, State="PAUSED")[0] == "ValidationException"


def test_list_schedule_groups_pages_with_the_default_group_in_name_order(client: Any) -> None:
    for name in ("alpha", "beta", "delta", "epsilon", "zeta"):
        client.create_schedule_group(Name=name)
    pages = list(client.get_paginator("list_schedule_groups").paginate(PaginationConfig={"PageSize": 2}))
    listed = [g["Name"] for page in pages for g in page["ScheduleGroups"]]
    assert listed == ["alpha", "beta", "default", "delta", "epsilon", "zeta"]
    assert all(len(page["ScheduleGroups"]) <= 2 for page in pages)
    assert [g["Name"] for g in client.list_schedule_groups(NamePrefix="de")["ScheduleGroups"]] == [
        "default",
        "delta",
    ]
    assert [g["Name"] for g in client.list_schedule_groups(NamePrefix="e")["ScheduleGroups"]] == ["epsilon"]


# --------------------------------------------------------------------------- groups and tags


def test_schedule_groups_and_their_tags(client: Any) -> None:
    arn = client.create_schedule_group(Name="reports", Tags=[{"Key": "team", "Value": "data"}])[
        "ScheduleGroupArn"
    ]
    assert arn == f"{PREFIX}:schedule-group/reports"
    got = client.get_schedule_group(Name="reports")
    assert (
        got["State"] == "ACTIVE" and got["Arn"] == arn and got["CreationDate"] <= got["LastModificationDate"]
    )
    assert client.get_schedule_group(Name="default")["Arn"] == f"{PREFIX}:schedule-group/default"
    assert _code(client.create_schedule_group, Name="reports")[0] == "ConflictException"
    # A retried request (the same ClientToken) gets the same answer
    client.create_schedule_group(Name="retried", ClientToken="token-7")
    assert client.create_schedule_group(Name="retried", ClientToken="token-7")["ScheduleGroupArn"].endswith(
        "/retried"
    )
    assert (
        _code(client.create_schedule_group, Name="retried", ClientToken="token-8")[0] == "ConflictException"
    )
    assert _code(client.create_schedule_group, Name="default")[0] == "ConflictException"
    assert _code(client.get_schedule_group, Name="nope")[0] == "ResourceNotFoundException"
    # Tags: added, replaced, removed
    client.tag_resource(
        ResourceArn=arn, Tags=[{"Key": "team", "Value": "ops"}, {"Key": "cost", "Value": "42"}]
    )
    assert client.list_tags_for_resource(ResourceArn=arn)["Tags"] == [
        {"Key": "cost", "Value": "42"},
        {"Key": "team", "Value": "ops"},
    ]
    client.untag_resource(ResourceArn=arn, TagKeys=["team"])
    assert client.list_tags_for_resource(ResourceArn=arn)["Tags"] == [{"Key": "cost", "Value": "42"}]
    missing = f"{PREFIX}:schedule-group/nope"
    assert _code(client.list_tags_for_resource, ResourceArn=missing)[0] == "ResourceNotFoundException"
    assert _code(client.tag_resource, ResourceArn=missing, Tags=[])[0] == "ResourceNotFoundException"
    other_account = f"arn:aws:scheduler:{REGION}:999999999999:schedule-group/reports"
    assert (
        _code(client.untag_resource, ResourceArn=other_account, TagKeys=["a"])[0]
        == "ResourceNotFoundException"
    )
    schedule_arn = f"{PREFIX}:schedule/reports/x"
    assert _code(client.list_tags_for_resource, ResourceArn=schedule_arn)[0] == "ValidationException"
    default_arn = f"{PREFIX}:schedule-group/default"
    assert client.list_tags_for_resource(ResourceArn=default_arn)["Tags"] == []
    assert _code(client.tag_resource, ResourceArn=default_arn, Tags=[{"Key": "a", "Value": "b"}])[0] == (
        "ValidationException"
    )
    too_many = [{"Key": f"k{i}", "Value": "v"} for i in range(201)]
    assert _code(client.tag_resource, ResourceArn=arn, Tags=too_many)[0] == "ValidationException"


def test_a_multi_region_deployments_arns_are_the_same_from_every_regions_api(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the multi-Region profile: one table, an API in each Region, ARNs in the home Region's
    monkeypatch.setenv("PUNCTUAL_ARN_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    wiring.use_services(None)
    client = scheduler_client(api)
    arn = client.create_schedule_group(Name="reports", Tags=[{"Key": "team", "Value": "data"}])[
        "ScheduleGroupArn"
    ]
    created = _create(client, "nightly", GroupName="reports")["ScheduleArn"]
    # When the client fails over to another Region's API (docs/multi-region.md, section 8)
    monkeypatch.setenv("AWS_REGION", "us-east-2")
    # Then the ARNs it holds are the ones that API gives too, and they name what they named (QA27:
    # us-east-2's API named everything in us-east-2 and answered ResourceNotFoundException for
    # the group's ARN as us-east-1's API had given it)
    assert client.get_schedule_group(Name="reports")["Arn"] == arn
    assert client.get_schedule(Name="nightly", GroupName="reports")["Arn"] == created
    client.tag_resource(ResourceArn=arn, Tags=[{"Key": "cost", "Value": "42"}])
    assert client.list_tags_for_resource(ResourceArn=arn)["Tags"] == [
        {"Key": "cost", "Value": "42"},
        {"Key": "team", "Value": "data"},
    ]
    # And an ARN naming the Region of the API it is sent to still names the group
    here = arn.replace(f":{REGION}:", ":us-east-2:")
    assert len(client.list_tags_for_resource(ResourceArn=here)["Tags"]) == 2
    elsewhere = arn.replace(f":{REGION}:", ":us-west-2:")
    assert _code(client.list_tags_for_resource, ResourceArn=elsewhere)[0] == "ResourceNotFoundException"


def test_deleting_a_group_deletes_its_schedules(client: Any, api: ApiClient) -> None:
    client.create_schedule_group(Name="doomed")
    for name in ("a", "b", "c"):
        _create(client, name, GroupName="doomed")
    _create(client, "a")  # the same name in the default group stays
    client.delete_schedule_group(Name="doomed")
    assert _code(client.get_schedule_group, Name="doomed")[0] == "ResourceNotFoundException"
    assert [(s["GroupName"], s["Name"]) for s in client.list_schedules()["Schedules"]] == [("default", "a")]
    assert api.call("GET", f"/v1/jobs/{job_id_of('doomed', 'a')}").status == 404
    assert _code(client.delete_schedule_group, Name="doomed")[0] == "ResourceNotFoundException"
    assert _code(client.delete_schedule_group, Name="default")[0] == "ValidationException"
    # A group of the same name starts empty
    client.create_schedule_group(Name="doomed")
    assert client.list_schedules(GroupName="doomed")["Schedules"] == []


def test_a_group_whose_schedules_depend_on_each_other_is_deleted_children_first(client: Any) -> None:
    """A parent of after() jobs is not deleted while they name it (they would never fire again): the
    group's children go first, whatever order the listing gives; a child outside the group keeps
    its parent, and the delete says why."""
    client.create_schedule_group(Name="chain")
    _create(client, "a-parent", GroupName="chain")
    parent = job_id_of("chain", "a-parent")
    for name in ("b-child", "c-child"):
        _create(client, name, GroupName="chain", ScheduleExpression=f"after({parent})")
    client.delete_schedule_group(Name="chain")
    assert _code(client.get_schedule_group, Name="chain")[0] == "ResourceNotFoundException"
    client.create_schedule_group(Name="held")
    _create(client, "p", GroupName="held")
    _create(client, "outside", ScheduleExpression=f"after({job_id_of('held', 'p')})")
    code, message = _code(client.delete_schedule_group, Name="held")
    assert code == "ConflictException" and "default/outside" in message, message
    assert _code(client.delete_schedule, Name="p", GroupName="held")[0] == "ConflictException"
    client.delete_schedule(Name="outside")
    client.delete_schedule_group(Name="held")
    assert _code(client.get_schedule_group, Name="held")[0] == "ResourceNotFoundException"


def test_a_v1_jobs_id_is_a_taken_name_in_the_default_group(client: Any, api: ApiClient) -> None:
    """A /v1 job is the default group's schedule named by its id: a schedule of that name would
    share its ARN, and a second delete removed the /v1 job."""
    created = api.create(job_spec())
    code, message = _code(client.create_schedule, **_request(created["id"]))
    assert code == "ConflictException" and "already exists" in message
    assert [s["Name"] for s in client.list_schedules()["Schedules"]] == [created["id"]]
    assert api.call("GET", f"/v1/jobs/{created['id']}").status == 200


def test_a_schedules_name_in_the_default_group_is_a_taken_v1_job_id(client: Any, api: ApiClient) -> None:
    """The other way round (QA): a /v1 job created at an id the default group's schedule is named
    by was a second schedule default/<id>, of the same ARN, in ListSchedules; it is 409 naming it,
    by PUT with If-None-Match: * and by a batch item, and other tenants are not concerned."""
    _create(client, "nightly")
    reply = api.call("PUT", "/v1/jobs/nightly", job_spec(), headers={"If-None-Match": "*"})
    assert reply.status == 409 and "schedule default/nightly" in reply.body["detail"], reply
    reply = api.call("POST", "/v1/job-batches", {"jobs": [{"id": "nightly", "job": job_spec()}]})
    assert reply.status == 200 and reply.body["failed"] == 1, reply
    assert reply.body["results"][0]["code"] == 409, reply
    assert [s["Name"] for s in client.list_schedules()["Schedules"]] == ["nightly"]
    reply = api.call("PUT", "/v1/jobs/nightly", job_spec(), headers={"If-None-Match": "*"}, user=BOB)
    assert reply.status == 201, reply
    client.delete_schedule(Name="nightly")
    reply = api.call("PUT", "/v1/jobs/nightly", job_spec(), headers={"If-None-Match": "*"})
    assert reply.status == 201, reply
    assert [s["Name"] for s in client.list_schedules()["Schedules"]] == ["nightly"]


def test_a_v1_put_on_a_schedules_job_keeps_it_that_schedule(client: Any, api: ApiClient) -> None:
    client.create_schedule_group(Name="g1")
    _create(client, "s", GroupName="g1")
    job_id = job_id_of("g1", "s")
    assert api.call("PUT", f"/v1/jobs/{job_id}", job_spec(name="renamed")).status == 200
    got = client.get_schedule(Name="s", GroupName="g1")
    assert (got["GroupName"], got["Name"]) == ("g1", "s")
    assert [x["Name"] for x in client.list_schedules(GroupName="g1")["Schedules"]] == ["s"]
    client.delete_schedule_group(Name="g1")
    assert api.call("GET", f"/v1/jobs/{job_id}").status == 404  # the group's delete took it


def test_what_a_create_refuses_an_update_of_a_disabled_schedule_refuses_too(client: Any) -> None:
    _create(client, "p", State="DISABLED")
    past = datetime(2020, 1, 1, tzinfo=UTC)
    for changed, says in (
        ({"ScheduleExpression": "at(2001-01-01T00:00:00)"}, "no future slot"),
        ({"ScheduleExpression": "cron(0 9 * * ? *)", "EndDate": past}, "no slot before"),
        ({"EndDate": past}, "EndDate is not in the future"),
    ):
        code, message = _code(client.update_schedule, **_request("p", State="DISABLED", **changed))
        assert code == "ValidationException" and says in message, message
    assert client.get_schedule(Name="p")["ScheduleExpression"] == "rate(5 minutes)"  # unchanged


def test_start_and_end_dates_are_ignored_for_a_one_time_schedule_as_the_service_does(client: Any) -> None:
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(days=30)
    _create(
        client,
        "once",
        ScheduleExpression=f"at({at.strftime('%Y-%m-%dT%H:%M:%S')})",
        StartDate=at + timedelta(days=1),
        EndDate=at - timedelta(days=1),
    )
    assert client.get_schedule(Name="once")["ScheduleExpression"].startswith("at(")


def test_a_completed_one_time_schedules_description_can_be_updated(client: Any, api: ApiClient) -> None:
    """QA23: an UpdateSchedule of a one-time schedule whose invocation is done (ActionAfterCompletion
    NONE) that changed only its Description was refused, "no future slot"; it is taken, and the
    schedule stays done (nothing runs again), as a /v1 edit of its name or tags."""
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    expression = f"at({at.strftime('%Y-%m-%dT%H:%M:%S')})"
    _create(client, "once", ScheduleExpression=expression)
    job_id = job_id_of("default", "once")
    stored = api.store.get_job(ALICE_ID, job_id)
    # Done: its instant passed (the schedule's at() is written back in the past) and it ran
    done = stored.model_copy(
        update={"schedule": "at(2026-01-01T00:00:00)", "state": JobState.COMPLETED, "next_fire_at": None}
    )
    api.store.replace_job(done, stored.version)

    client.update_schedule(
        **_request("once", ScheduleExpression="at(2026-01-01T00:00:00)", Description="ran")
    )
    renamed = api.call(
        "PUT", f"/v1/jobs/{job_id}", {**api.call("GET", f"/v1/jobs/{job_id}").body, "name": "n"}
    )

    assert client.get_schedule(Name="once")["Description"] == "ran"
    assert renamed.status == 200, renamed.body
    assert api.store.get_job(ALICE_ID, job_id).state is JobState.COMPLETED


def test_lambda_and_step_functions_inputs_must_be_json_and_errors_name_the_member(client: Any) -> None:
    for arn in (
        f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:f",
        f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:m",
    ):
        code, message = _code(client.create_schedule, **_request("t", Target=_target(Arn=arn, Input="hello")))
        assert code == "ValidationException" and "Target.Input must be well-formed JSON" in message
    code, message = _code(
        client.create_schedule, **_request("t", Target=_target(Arn=f"arn:aws:sqs:{REGION}:123:q"))
    )
    assert code == "ValidationException" and message.startswith("Target.Arn"), message


# --------------------------------------------------------------------------- errors


def test_a_dead_letter_event_reaches_a_real_queue_as_the_target_role(aws: None, t0: datetime) -> None:
    import boto3

    from factories import job as make_job
    from punctual.delivery.targets.aws_clients import Boto3ClientFactory
    from punctual.execution.dead_letters import SqsDeadLetters
    from punctual.models import DeadLetterQueue, Execution, ExecutionStatus, RetryPolicy
    from punctual.security.boundary import Boundary

    # Given a DLQ, a role the workers may assume, and a finally failed slot
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="reports-dlq")["QueueUrl"]
    iam = boto3.client("iam", region_name=REGION)
    iam.create_role(RoleName="scheduler-role", AssumeRolePolicyDocument="{}")
    job = make_job(
        "job-1",
        target={"type": "sqs", "queue_arn": QUEUE, "role_arn": ROLE},
        payload="attempt <aws.scheduler.attempt-number>",
        retry=RetryPolicy(max_attempts=3),
        dead_letter=DeadLetterQueue(queue_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:reports-dlq"),
    )
    failed = Execution(
        job_id="job-1",
        tenant="default",
        slot="2026-11-30T10:00:00Z",
        scheduled_at=t0,
        status=ExecutionStatus.FAILED,
        attempt=3,
        error="sqs SendMessage: AWS.SimpleQueueService.NonExistentQueue: gone",
    )
    # When it is dead-lettered
    SqsDeadLetters(Boto3ClientFactory(), Boundary()).send(job, failed, t0 + timedelta(minutes=5))
    # Then the queue holds the event with the service's attributes
    got = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"][0]
    assert got["Body"] == "attempt 3"
    attributes = {name: value["StringValue"] for name, value in got["MessageAttributes"].items()}
    assert attributes["ERROR_CODE"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert attributes["EXHAUSTED_RETRY_CONDITION"] == "MaximumRetryAttempts"
    assert attributes["RETRY_ATTEMPTS"] == "2" and attributes["TARGET_ARN"] == QUEUE


def test_a_lone_surrogate_in_any_string_member_is_a_validation_exception(client: Any) -> None:
    """QA: a tag with a lone surrogate (no UTF-8 form) was an InternalServerException."""
    for tags in ([{"Key": "k", "Value": "\udc00"}], [{"Key": "\udc00", "Value": "v"}]):
        code, message = _code(client.create_schedule_group, Name="g", Tags=tags)
        assert code == "ValidationException" and "lone surrogate" in message, message
    code, message = _code(client.get_schedule_group, Name="g")
    assert code == "ResourceNotFoundException", message  # nothing was created


def test_a_dead_letter_that_cannot_be_sent_is_counted(aws: None, t0: datetime) -> None:
    """QA23: a dead-letter queue that is gone (or refuses the role) lost the event with a log line
    only; EventBridge Scheduler users watch a metric for it (InvocationsFailedToBeSentToDeadLetterCount)."""
    from factories import job as make_job
    from punctual.delivery.targets.aws_clients import Boto3ClientFactory
    from punctual.execution.dead_letters import SqsDeadLetters
    from punctual.models import DeadLetterQueue, Execution, ExecutionStatus
    from punctual.runtime.observability import RecordingMetrics
    from punctual.security.boundary import Boundary

    # Given a finally failed slot of a job whose dead-letter queue does not exist
    job = make_job("job-1", dead_letter=DeadLetterQueue(queue_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:gone-dlq"))
    failed = Execution(job_id="job-1", slot="s", scheduled_at=t0, status=ExecutionStatus.FAILED, error="boom")
    # When it is dead-lettered, then the failed send is counted (and nothing raises)
    metrics = RecordingMetrics()
    SqsDeadLetters(Boto3ClientFactory(), Boundary(), metrics).send(job, failed, t0)
    assert metrics.total("DeadLettersFailed") == 1
