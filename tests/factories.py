"""Builders for the objects tests need, with sensible defaults."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from punctual.models import Job, JobSpec


def spec(schedule: str = "rate(1 minute)", **overrides: Any) -> JobSpec:
    data: dict[str, Any] = {
        "schedule": schedule,
        "target": {"type": "http", "url": "https://example.com/hook"},
    }
    data.update(overrides)
    return JobSpec.model_validate(data)


def job(
    job_id: str = "job-1",
    schedule: str = "rate(1 minute)",
    now: datetime | None = None,
    tenant: str = "default",
    **overrides: Any,
) -> Job:
    from datetime import UTC

    now = now or datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    base = spec(schedule, **{k: v for k, v in overrides.items() if k in JobSpec.model_fields})
    extra = {k: v for k, v in overrides.items() if k not in JobSpec.model_fields}
    return Job(
        **base.model_dump(),
        id=job_id,
        tenant=tenant,
        created_at=now,
        updated_at=now,
        anchor=extra.pop("anchor", now),
        **extra,
    )


def load_handler(function: str) -> Any:
    """Import ``functions/<function>/handler.py`` by path, as Lambda does (each is its own asset)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "functions" / function / "handler.py"
    module_spec = importlib.util.spec_from_file_location(f"{function}_handler_under_test", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def make_unreadable(client: Any, table: str, tenant: str, job_id: str) -> None:
    """Give a job stored in DynamoDB (its item and its listing) a document no version reads."""
    import json

    from punctual.store.dynamo import schema

    for key in (schema.job_key(tenant, job_id), schema.listing_key(tenant, job_id)):
        doc = json.loads(client.get_item(TableName=table, Key=key)["Item"]["doc"]["S"])
        doc["timeout_seconds"] = -5  # as no version accepts: unreadable
        client.update_item(
            TableName=table,
            Key=key,
            UpdateExpression="SET doc = :d",
            ExpressionAttributeValues={":d": {"S": json.dumps(doc)}},
        )


def save_run(store: Any, job_id: str, at: datetime, status: Any, error: str | None = None) -> None:
    """Record ``job_id``'s slot at ``at`` as ``status``, started on time (and ended then when the
    status is terminal), kept long after the test (the console leaves expired records out)."""
    from punctual.models import Execution

    store.save_execution(
        Execution(
            job_id=job_id,
            slot=at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            scheduled_at=at,
            status=status,
            started_at=at,
            finished_at=at if status.terminal else None,
            error=error,
        ),
        None,
        2_000_000_000,
    )


def lambda_sqs_event(messages: list[dict[str, Any]], arn: str, region: str = "us-east-1") -> dict[str, Any]:
    """Lambda's SQS event for messages received from SQS (``ReceiveMessage`` with every attribute),
    as the event source mapping shapes it."""
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m["Attributes"],
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": region,
            }
            for m in messages
        ]
    }


def delete_succeeded(sqs: Any, queue_url: str, event: dict[str, Any], response: dict[str, Any]) -> set[str]:
    """What the event source mapping does with a partial batch response: delete the event's records
    it does not name; the ids it names."""
    failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
    for record in event["Records"]:
        if record["messageId"] not in failed:
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=record["receiptHandle"])
    return failed
