"""Issue 16, point 3: per-job execution roles, assumed through STS (moto) as EventBridge Scheduler does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from punctual.delivery.targets import DefaultTargetInvoker, SlotContext
from punctual.delivery.targets.aws_clients import AssumedRole, Boto3ClientFactory
from punctual.delivery.targets.aws_services import SqsTargetAdapter
from punctual.delivery.targets.base import Outcome
from punctual.models import SqsTarget
from punctual.runtime.settings import Settings

REGION = "us-east-1"
ACCOUNT = "123456789012"
TENANT = "AROATENANTEXAMPLE0001"
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def _trust_policy(external_id: str) -> str:
    """What the README tells a tenant to write (here with any AWS principal of the account)."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                    "Action": ["sts:AssumeRole", "sts:TagSession"],
                    "Condition": {"StringEquals": {"sts:ExternalId": external_id}},
                }
            ],
        }
    )


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        iam = boto3.client("iam", region_name=REGION)
        role = iam.create_role(RoleName="orders-scheduler", AssumeRolePolicyDocument=_trust_policy(TENANT))
        target_role = iam.create_role(
            RoleName="punctual-targets", AssumeRolePolicyDocument=_trust_policy("-")
        )
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="orders")["QueueUrl"]
        factory = Boto3ClientFactory(region_name=REGION, default_role_arn=target_role["Role"]["Arn"])
        assumed: list[dict[str, Any]] = []

        def record(params: dict[str, Any], **_: Any) -> None:
            assumed.append(dict(params))

        factory._session.events.register("provide-client-params.sts.AssumeRole", record)
        yield {
            "role_arn": role["Role"]["Arn"],
            "target_role_arn": target_role["Role"]["Arn"],
            "queue_url": url,
            "sqs": sqs,
            "factory": factory,
            "assumed": assumed,
        }


def _ctx(attempt: int = 1) -> SlotContext:
    return SlotContext("job-1", TENANT, "2026-11-30T10:00:00Z", T0, attempt, 30.0)


def _received(world: dict[str, Any]) -> list[str]:
    got = world["sqs"].receive_message(QueueUrl=world["queue_url"], MaxNumberOfMessages=10)
    return [m["Body"] for m in got.get("Messages", [])]


def test_a_target_with_a_role_is_called_with_that_roles_credentials(world: dict[str, Any]) -> None:
    target = SqsTarget(queue_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders", role_arn=world["role_arn"])
    adapter = SqsTargetAdapter(world["factory"])

    first = adapter.invoke(target, {"n": 1}, _ctx())
    second = adapter.invoke(target, {"n": 2}, _ctx(2))

    assert (first.outcome, second.outcome) == (Outcome.SUCCEEDED, Outcome.SUCCEEDED)
    assert sorted(_received(world)) == ['{"n":1}', '{"n":2}']
    # Assumed once (credentials are kept until shortly before they expire), as EventBridge
    # Scheduler does: the tenant's id as external id, the tenant tagged on the session.
    (request,) = world["assumed"]
    assert request["RoleArn"] == world["role_arn"]
    assert request["ExternalId"] == TENANT
    assert request["Tags"] == [{"Key": "punctual-tenant", "Value": TENANT}]
    assert request["RoleSessionName"].startswith("punctual-")


def test_the_calls_identity_is_the_assumed_role(world: dict[str, Any]) -> None:
    role = AssumedRole(world["role_arn"], external_id=TENANT, tenant=TENANT)
    identity = world["factory"]("sts", role=role).get_caller_identity()

    assert identity["Arn"].startswith(f"arn:aws:sts::{ACCOUNT}:assumed-role/orders-scheduler/punctual-")
    assert world["factory"]("sts").get_caller_identity()["Arn"] != identity["Arn"]  # no role: our own


def test_credentials_are_assumed_again_when_they_near_expiry(world: dict[str, Any]) -> None:
    role = AssumedRole(world["role_arn"], external_id=TENANT, tenant=TENANT)
    factory: Boto3ClientFactory = world["factory"]
    factory("sqs", role=role).list_queues()
    credentials = factory._role_sessions[role].get_credentials()
    assert len(world["assumed"]) == 1

    # When the kept credentials are five minutes from expiring (inside botocore's refresh window)
    credentials._expiry_time = datetime.now(UTC) + timedelta(minutes=5)
    factory("sqs", role=role).list_queues()

    # Then the role is assumed again before the call
    assert len(world["assumed"]) == 2


def test_a_target_without_a_role_is_called_as_the_deployments_target_role(world: dict[str, Any]) -> None:
    invoker = DefaultTargetInvoker(world["factory"], Settings())
    target = {"type": "sqs", "queue_arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders"}

    result = invoker.invoke(target, {"n": 3}, _ctx())

    assert result.outcome is Outcome.SUCCEEDED, result.summary
    (request,) = world["assumed"]
    assert request["RoleArn"] == world["target_role_arn"]
    assert "ExternalId" not in request  # our own role: no tenant's external id
    assert request["Tags"] == [{"Key": "punctual-tenant", "Value": TENANT}]


def test_a_role_whose_trust_refuses_us_is_a_permanent_failure_and_nothing_is_sent(
    world: dict[str, Any],
) -> None:
    # moto does not evaluate trust policies: refuse the assumption as AWS does for a role whose
    # trust policy names another principal or another external id.
    from botocore.exceptions import ClientError

    def refuse(**_: Any) -> None:
        raise ClientError(
            {"Error": {"Code": "AccessDenied", "Message": "not authorized to perform sts:AssumeRole"}},
            "AssumeRole",
        )

    world["factory"]._session.events.register("before-call.sts.AssumeRole", refuse)
    target = SqsTarget(queue_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders", role_arn=world["role_arn"])

    result = DefaultTargetInvoker(world["factory"], Settings()).invoke(target.model_dump(), {"n": 4}, _ctx())

    assert result.outcome is Outcome.PERMANENT
    assert "AccessDenied" in result.summary
    assert _received(world) == []
