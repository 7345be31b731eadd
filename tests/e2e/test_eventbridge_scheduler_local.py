"""EventBridge Scheduler's API in local mode, with an unmodified boto3 ``scheduler`` client.

The client signs with SigV4 and sends no tenant header: local mode takes the access key id of
its signature as the tenant (``e2e-scheduler`` here, apart from the shared session's ``e2e``).
One-time ``at()`` schedules a few seconds ahead, so the whole file waits for a few slots only:
an SQS target receives the Input with the context attributes filled and the schedule, with
ActionAfterCompletion DELETE, is gone afterwards; a target that fails sends its event to the
schedule's dead-letter queue with the service's attributes. Its queues are deleted at the end
(``test_local_mode`` counts the deployment's own).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from local.harness import LocalMode

TENANT = "e2e-scheduler"
ACCOUNT = "123456789012"  # moto's
REGION = "us-east-1"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/e2e-scheduler"
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def aws(local_mode: LocalMode) -> Iterator[dict[str, Any]]:
    """The scheduler client (tenant by access key) and this file's queues on local mode's moto."""
    session = boto3.session.Session(aws_access_key_id=TENANT, aws_secret_access_key="x", region_name=REGION)
    sqs = session.client("sqs", endpoint_url=local_mode.aws_url)
    queues = {
        name: sqs.create_queue(QueueName=f"e2e-scheduler-{name}")["QueueUrl"] for name in ("target", "dlq")
    }
    try:
        yield {
            "scheduler": session.client("scheduler", endpoint_url=local_mode.api_url),
            "sqs": sqs,
            "queues": queues,
        }
    finally:
        for url in queues.values():
            sqs.delete_queue(QueueUrl=url)


def _at(seconds: int) -> str:
    instant = datetime.now(UTC) + timedelta(seconds=seconds)
    return f"at({instant.strftime('%Y-%m-%dT%H:%M:%S')})"


def _received(sqs: Any, url: str) -> dict[str, Any] | None:
    got = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"], WaitTimeSeconds=1)
    messages = got.get("Messages") or []
    return messages[0] if messages else None


def test_schedules_fire_substitute_delete_and_dead_letter(local_mode: LocalMode, aws: dict[str, Any]) -> None:
    client, sqs, queues = aws["scheduler"], aws["sqs"], aws["queues"]
    # Given a one-time schedule on an SQS queue, deleted after completion, with every attribute in its Input
    arn = client.create_schedule(
        Name="once",
        ScheduleExpression=_at(6),
        FlexibleTimeWindow={"Mode": "OFF"},
        ActionAfterCompletion="DELETE",
        Target={
            "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:e2e-scheduler-target",
            "RoleArn": ROLE,
            "Input": json.dumps(
                {
                    "arn": "<aws.scheduler.schedule-arn>",
                    "at": "<aws.scheduler.scheduled-time>",
                    "id": "<aws.scheduler.execution-id>",
                    "n": "<aws.scheduler.attempt-number>",
                }
            ),
        },
    )["ScheduleArn"]
    # And a group whose schedule calls a queue that does not exist, with a dead-letter queue
    client.create_schedule_group(Name="failing")
    failing_arn = client.create_schedule(
        Name="broken",
        GroupName="failing",
        ScheduleExpression=_at(6),
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={
            "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:e2e-scheduler-missing",
            "RoleArn": ROLE,
            "Input": "broken <aws.scheduler.attempt-number>",
            "RetryPolicy": {"MaximumRetryAttempts": 0},
            "DeadLetterConfig": {"Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:e2e-scheduler-dlq"},
        },
    )["ScheduleArn"]
    assert [s["Name"] for s in client.list_schedules(GroupName="failing")["Schedules"]] == ["broken"]
    try:
        # Then the target queue receives the Input with the attributes filled in
        message = local_mode.wait(
            lambda: _received(sqs, queues["target"]), DEADLINE_S, "the schedule's message", 0.3
        )
        body = json.loads(message["Body"])
        assert body["arn"] == arn and body["n"] == "1"
        assert body["at"].endswith("Z") and len(body["id"]) == 36

        # And the completed one-time schedule is deleted
        def gone() -> bool:
            try:
                client.get_schedule(Name="once")
            except ClientError as exc:
                return exc.response["Error"]["Code"] == "ResourceNotFoundException"
            return False

        local_mode.wait(gone, DEADLINE_S, "the completed schedule's deletion", 0.3)
        # And the failing schedule's event is in its dead-letter queue with the service's attributes
        dead = local_mode.wait(
            lambda: _received(sqs, queues["dlq"]), DEADLINE_S, "the dead-letter event", 0.3
        )
        assert dead["Body"] == "broken 1"
        attributes = {name: value["StringValue"] for name, value in dead["MessageAttributes"].items()}
        assert attributes["SCHEDULE_ARN"] == failing_arn
        assert attributes["TARGET_ARN"].endswith(":e2e-scheduler-missing")
        assert attributes["RETRY_ATTEMPTS"] == "0"
        assert attributes["ERROR_CODE"] and attributes["ERROR_MESSAGE"]
        assert attributes["EXHAUSTED_RETRY_CONDITION"] in ("MaximumRetryAttempts", "NonRetryableError")
        # And the history of both is readable through /v1 under the same tenant
        status, jobs = local_mode.api("GET", "/v1/jobs", tenant=TENANT)
        assert status == 200 and [j["name"] for j in jobs["items"]] == ["broken"]
    finally:
        client.delete_schedule_group(Name="failing")


def _aws_cli(local_mode: LocalMode, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=TENANT, AWS_SECRET_ACCESS_KEY="x", AWS_DEFAULT_REGION=REGION)
    command = ["aws", "scheduler", *args, "--endpoint-url", local_mode.api_url, "--output", "json"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.skipif(shutil.which("aws") is None, reason="the AWS CLI is not installed")
def test_the_aws_cli_works_with_the_endpoint(local_mode: LocalMode, aws: dict[str, Any]) -> None:
    aws["scheduler"].create_schedule_group(Name="from-cli")
    try:
        listed = _aws_cli(local_mode, "list-schedule-groups", "--name-prefix", "from-")
        assert listed.returncode == 0, listed.stderr
        assert [g["Name"] for g in json.loads(listed.stdout)["ScheduleGroups"]] == ["from-cli"]
        missing = _aws_cli(local_mode, "get-schedule", "--name", "nope", "--group-name", "from-cli")
        assert missing.returncode != 0 and "ResourceNotFoundException" in missing.stderr, missing.stderr
    finally:
        aws["scheduler"].delete_schedule_group(Name="from-cli")
