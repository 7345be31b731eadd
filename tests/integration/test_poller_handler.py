"""The poller Lambda handler with the Map item shape Step Functions sends, against moto."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from factories import load_handler, spec
from punctual.dispatch.queues import SqsQueues
from punctual.runtime import aws
from punctual.runtime.clock import ManualClock
from punctual.runtime.settings import Settings
from punctual.store.dynamo import DynamoStore, table_definition
from punctual.usecases.jobs import JobService, QueueRouting


@dataclass
class FakeContext:
    function_name: str = "poller"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:poller"
    aws_request_id: str = "req-1"
    remaining_ms: int = 120_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@pytest.fixture
def deployment(aws_env, monkeypatch):  # type: ignore[no-untyped-def]
    ddb = boto3.client("dynamodb")
    ddb.create_table(**table_definition("punctual"))
    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName="short.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    for name, value in {
        "PUNCTUAL_TABLE_NAME": "punctual",
        "PUNCTUAL_SHORT_QUEUE_URLS": url,
        "PUNCTUAL_SHARD_COUNT": "4",
        "PUNCTUAL_NEAR_SHARD_COUNT": "2",
        "PUNCTUAL_POLLER_GRACE_S": "1",
        "PUNCTUAL_UNCLAIMED_RESEND_S": "0",  # no workers here: nothing would ever be claimed
    }.items():
        monkeypatch.setenv(name, value)
    return ddb, sqs, url


@pytest.fixture
def aws_env():  # type: ignore[no-untyped-def]
    from moto import mock_aws

    aws.reset()
    with mock_aws():
        yield
    aws.reset()


def test_handler_releases_a_past_minute_and_reports(deployment) -> None:  # type: ignore[no-untyped-def]
    ddb, sqs, url = deployment
    settings = Settings.from_env()
    # Given a one-time job whose slot was 30 seconds into a minute that is already over
    minute = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
    slot = minute + timedelta(seconds=30)
    clock = ManualClock(minute - timedelta(minutes=5))
    jobs = JobService(
        DynamoStore(ddb, "punctual"), SqsQueues(sqs), clock, settings.layout(), QueueRouting((url,))
    )
    job, _ = jobs.register("default", spec(f"at({slot.strftime('%Y-%m-%dT%H:%M:%S')})"))
    # When the handler gets that minute's Map item (the shape the tick's state machine sends)
    handler = load_handler("poller").handler

    item = {
        "minute": minute.strftime("%Y-%m-%dT%H:%M:00Z"),
        "group": 0,
        "group_count": 1,
        "shard_count": 4,
        "near_shard_count": 2,
    }
    result = handler(item, FakeContext())
    # Then it drains the minute and releases the slot once, marked as the end of its job's chain
    # (the worker that takes it completes the job: the poller writes no job on its release path)
    assert result["released"] == 1 and result["completed"] == 0
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    bodies = [json.loads(m["Body"]) for m in messages]
    assert [(b["slot"], b["last"]) for b in bodies] == [(slot.strftime("%Y-%m-%dT%H:%M:%SZ"), True)]
    assert jobs.get("default", job.id).state.value == "ENABLED"


def test_handler_refuses_a_malformed_item(deployment) -> None:  # type: ignore[no-untyped-def]
    from pydantic import ValidationError

    handler = load_handler("poller").handler

    with pytest.raises(ValidationError):
        handler({"minute": "not a time", "group": -1, "group_count": 0}, FakeContext())
