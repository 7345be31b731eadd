"""Issue 19: execution events reach an EventBridge bus (moto), and the documented rule
(docs/alerts.md, *Execution events*) routes them."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import boto3

from factories import job
from punctual.delivery.notifications import EventBridgeSink, EventPublisher
from punctual.delivery.notifications.events import execution_event
from punctual.models import Execution, ExecutionStatus

ALERTS_PAGE = (Path(__file__).resolve().parents[2] / "docs" / "alerts.md").read_text(encoding="utf-8")
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def _readme_rule() -> str:
    section = ALERTS_PAGE[ALERTS_PAGE.index("## Execution events") :]
    block = re.search(r"```json\n(.*?)```", section, re.S)
    assert block is not None
    return block.group(1)


def test_the_readme_rule_routes_final_failures_of_one_teams_jobs(aws: None) -> None:
    # Given the documented rule on the default bus, sending to a queue
    sqs = boto3.client("sqs", region_name="us-east-1")
    events = boto3.client("events", region_name="us-east-1")
    queue = sqs.create_queue(QueueName="data-failures")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="punctual-data-failures", EventPattern=_readme_rule())
    events.put_targets(Rule="punctual-data-failures", Targets=[{"Id": "q", "Arn": arn}])
    # When three slots end: data's fails, data's succeeds, web's fails
    record = Execution(
        job_id="j", slot="2026-11-30T10:00:00Z", scheduled_at=T0, status=ExecutionStatus.FAILED
    )
    data = job("nightly", tags={"team": "data"})
    web = job("frontend", tags={"team": "web"})
    succeeded = record.model_copy(update={"status": ExecutionStatus.SUCCEEDED})
    EventPublisher(EventBridgeSink(events, "default")).publish(
        [
            execution_event(data, record, T0),
            execution_event(data, succeeded, T0),
            execution_event(web, record, T0),
        ]
    )
    # Then only data's failure reached the queue, with the documented detail
    messages = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
    bodies = [json.loads(m["Body"]) for m in messages]
    assert [
        (b["source"], b["detail-type"], b["detail"]["job_id"], b["detail"]["status"]) for b in bodies
    ] == [("punctual", "Execution Status Change", "nightly", "FAILED")]
    assert bodies[0]["detail"]["execution_path"] == "/v1/jobs/nightly/executions/2026-11-30T10%3A00%3A00Z"
