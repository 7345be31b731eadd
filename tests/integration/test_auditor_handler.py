"""The auditor Lambda handler with the event EventBridge's scheduled rule sends, against moto: it
audits its minute's share of the segments and repairs what it finds; and the enrolment event."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from factories import load_handler, spec
from local.auditor import scheduled_event
from punctual.auditing import segments_for
from punctual.dispatch.queues import SqsQueues
from punctual.runtime import aws, composition
from punctual.runtime.clock import ManualClock
from punctual.runtime.settings import Settings
from punctual.store.dynamo import DynamoStore, table_definition
from punctual.timing.timers import CHAIN_KINDS, Lane
from punctual.usecases.jobs import JobService, QueueRouting


@dataclass
class FakeContext:
    function_name: str = "auditor"
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:auditor"
    aws_request_id: str = "req-1"
    remaining_ms: int = 900_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@pytest.fixture
def deployment(monkeypatch):  # type: ignore[no-untyped-def]
    from moto import mock_aws

    aws.reset()
    composition.reset()
    with mock_aws():
        ddb = boto3.client("dynamodb")
        ddb.create_table(**table_definition("punctual"))
        sqs = boto3.client("sqs")
        url = sqs.create_queue(QueueName="short.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        for name, value in {
            "PUNCTUAL_TABLE_NAME": "punctual",
            "PUNCTUAL_SHORT_QUEUE_URLS": url,
            "PUNCTUAL_SHARD_COUNT": "4",
            "PUNCTUAL_NEAR_SHARD_COUNT": "2",
            "PUNCTUAL_AUDIT_PERIOD_MINUTES": "2",
            "PUNCTUAL_EVENTS_ENABLED": "false",
            "PUNCTUAL_DISPATCH_KEY": "k" * 32,
        }.items():
            monkeypatch.setenv(name, value)
        yield ddb, sqs, url
    composition.reset()
    aws.reset()


def test_the_handler_audits_its_minutes_segments_and_repairs_a_broken_chain(deployment) -> None:  # type: ignore[no-untyped-def]
    ddb, sqs, url = deployment
    settings = Settings.from_env()
    layout = settings.layout()
    now = datetime.now(UTC)
    # Given jobs registered an hour ago whose chains were never written (every head lost)
    clock = ManualClock(now - timedelta(hours=1))
    store = DynamoStore(ddb, "punctual", layout)
    jobs = JobService(store, SqsQueues(sqs), clock, layout, QueueRouting((url,)))
    made = [jobs.register("default", spec("rate(10 minutes)"), job_id=f"job-{i}")[0] for i in range(8)]
    for item in ddb.scan(TableName="punctual")["Items"]:
        if item["pk"]["S"].startswith(("timer#", "near#")):
            ddb.delete_item(TableName="punctual", Key={"pk": item["pk"], "sk": item["sk"]})
    store.advance_watermarks(Lane.FAR, list(range(4)), now + timedelta(minutes=1))  # the pollers are current
    store.advance_watermarks(Lane.NEAR, list(range(2)), now + timedelta(minutes=1))
    # When the handler gets this minute's scheduled event (the period is 2 minutes: half the segments)
    event = scheduled_event(now)
    report = load_handler("auditor").handler(event, FakeContext())
    # Then it audited the jobs of its minute's segments, and repaired each one's chain
    minute = datetime.fromisoformat(event["time"].replace("Z", "+00:00"))
    mine = segments_for(minute, 4, 2)
    expected = [j for j in made if layout.shard_for(Lane.FAR, j.tenant, j.id) in mine]
    assert report["segments"] == mine and report["jobs"] == len(expected) > 0
    assert report["broken"] == report["repaired"] == len(expected) and report["complete"]
    heads = {t.job_id for t in _timers(store) if t.kind in CHAIN_KINDS}
    assert heads == {j.id for j in expected}


def test_the_enrolment_event_enrols_jobs_stored_before_the_index(deployment) -> None:  # type: ignore[no-untyped-def]
    ddb, sqs, url = deployment
    settings = Settings.from_env()
    old = DynamoStore(ddb, "punctual")  # no layout: no audit segment, as before the index
    jobs = JobService(
        old, SqsQueues(sqs), ManualClock(datetime.now(UTC)), settings.layout(), QueueRouting((url,))
    )
    for i in range(5):
        jobs.register("default", spec("rate(1 hour)"), job_id=f"old-{i}")
    handler = load_handler("auditor").handler
    replies = [handler({"enrol_segment": s, "enrol_segments": 2}, FakeContext()) for s in range(2)]
    assert sum(r["enrolled"] for r in replies) == 5
    assert handler({"enrol_segment": 0, "enrol_segments": 1}, FakeContext())["enrolled"] == 0


@pytest.mark.parametrize(
    ("event", "named"),
    [
        ({"enrol_segment": 4, "enrol_segments": 4}, "enrol_segment: must be below enrol_segments (4)"),
        ({"enrol_segment": 1}, "enrol_segment: must be below enrol_segments (1)"),
        (
            {"enrol_segment": -1, "enrol_segments": 4},
            "enrol_segment: Input should be greater than or equal to 0",
        ),
        (
            {"enrol_segment": 0, "enrol_segments": 0},
            "enrol_segments: Input should be greater than or equal to 1",
        ),
        ({"enrol_segment": "two", "enrol_segments": 4}, "enrol_segment: Input should be a valid integer"),
    ],
)
def test_a_bad_enrolment_event_fails_with_one_line_naming_the_field(deployment, event, named) -> None:  # type: ignore[no-untyped-def]
    # A segment out of range reached DynamoDB's Scan as a ValidationException (a traceback)
    with pytest.raises(ValueError) as raised:
        load_handler("auditor").handler(event, FakeContext())
    message = str(raised.value)
    assert message.startswith(f"bad auditor event: {named}") and "\n" not in message


def _timers(store: DynamoStore) -> list:  # type: ignore[type-arg]
    from audit_harness import all_timers

    return all_timers(store)
