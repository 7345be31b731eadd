"""Two tenants' alike-named schedules in local mode (issue 28, finding 2).

Two unmodified boto3 ``scheduler`` clients, each signing with its own access key (local mode's
tenant), both create ``default/nightly`` with the same expression; their targets are their own
SQS queues. Before the tenant was in the timer's key, one tenant's schedule showed ENABLED and
ran nothing, and stayed dead after the other tenant deleted theirs. Here both fire, every slot
once, and deleting one leaves the other firing. The queues are deleted at the end
(``test_local_mode`` counts the deployment's own).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from local.harness import LocalMode

TENANTS = ("e2e-tenant-a", "e2e-tenant-b")
ACCOUNT = "123456789012"  # moto's
REGION = "us-east-1"
DEADLINE_S = 150.0
EVERY_S = 5


@pytest.fixture(scope="module")
def tenants(local_mode: LocalMode) -> Iterator[dict[str, dict[str, Any]]]:
    """Per tenant: its scheduler client (tenant by access key), its SQS client and its queue."""
    out: dict[str, dict[str, Any]] = {}
    for tenant in TENANTS:
        session = boto3.session.Session(
            aws_access_key_id=tenant, aws_secret_access_key="x", region_name=REGION
        )
        sqs = session.client("sqs", endpoint_url=local_mode.aws_url)
        out[tenant] = {
            "scheduler": session.client("scheduler", endpoint_url=local_mode.api_url),
            "sqs": sqs,
            "queue": sqs.create_queue(QueueName=f"{tenant}-target")["QueueUrl"],
        }
    try:
        yield out
    finally:
        for parts in out.values():
            with contextlib.suppress(Exception):  # deleted by the test already
                parts["scheduler"].delete_schedule(Name="nightly")
            parts["sqs"].delete_queue(QueueUrl=parts["queue"])


def _drain(parts: dict[str, Any], into: list[dict[str, Any]]) -> None:
    got = parts["sqs"].receive_message(
        QueueUrl=parts["queue"], MaxNumberOfMessages=10, MessageAttributeNames=["All"], WaitTimeSeconds=1
    )
    for message in got.get("Messages") or []:
        body = json.loads(message["Body"])
        body["tenant_attribute"] = message["MessageAttributes"]["punctual-tenant"]["StringValue"]
        into.append(body)
        parts["sqs"].delete_message(QueueUrl=parts["queue"], ReceiptHandle=message["ReceiptHandle"])


def test_two_tenants_alike_schedules_both_fire_and_deleting_one_leaves_the_other(
    local_mode: LocalMode, tenants: dict[str, dict[str, Any]]
) -> None:
    a, b = TENANTS
    # Given both tenants create default/nightly with the same expression and start (so their
    # slots fall on the same instants: the same timer key, before the tenant was in it)
    now = datetime.now(UTC)
    start = now.replace(microsecond=0) + timedelta(seconds=EVERY_S - now.second % EVERY_S + EVERY_S)
    arns = {
        tenant: parts["scheduler"].create_schedule(
            Name="nightly",
            ScheduleExpression=f"rate({EVERY_S} seconds)",
            StartDate=start,
            FlexibleTimeWindow={"Mode": "OFF"},
            Target={
                "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{tenant}-target",
                "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/{tenant}",
                "Input": json.dumps(
                    {"at": "<aws.scheduler.scheduled-time>", "id": "<aws.scheduler.execution-id>"}
                ),
            },
        )["ScheduleArn"]
        for tenant, parts in tenants.items()
    }
    assert arns[a] == arns[b]  # the service's ARN format has no room for a tenant
    seen: dict[str, list[dict[str, Any]]] = {tenant: [] for tenant in TENANTS}

    def each_has(count: int) -> bool:
        for tenant in TENANTS:
            _drain(tenants[tenant], seen[tenant])
        return all(len(seen[t]) >= count for t in TENANTS)

    # Then both fire, each slot once, each message naming its own tenant
    local_mode.wait(lambda: each_has(3), DEADLINE_S, "three slots of each tenant's schedule", 0.5)
    for tenant in TENANTS:
        instants = [m["at"] for m in seen[tenant]]
        assert len(instants) == len(set(instants)), instants
        assert {m["tenant_attribute"] for m in seen[tenant]} == {tenant}
    assert not {m["id"] for m in seen[a]} & {m["id"] for m in seen[b]}  # execution ids differ by tenant

    # When tenant b deletes its schedule
    tenants[b]["scheduler"].delete_schedule(Name="nightly")
    deleted = datetime.now(UTC)
    count_a = len(seen[a])

    # Then tenant a's schedule fires on (three more slots after the deletion), b's does not
    local_mode.wait(
        lambda: (each_has(0) and len(seen[a]) >= count_a + 3) or None,
        DEADLINE_S,
        "tenant a's schedule to fire on after tenant b deleted theirs",
        0.5,
    )
    late_b = [m for m in seen[b] if datetime.fromisoformat(m["at"].replace("Z", "+00:00")) > deleted]
    assert late_b == []
    instants = [m["at"] for m in seen[a]]
    assert len(instants) == len(set(instants)), instants
    status, job = local_mode.api("GET", "/v1/jobs?limit=10", tenant=a)
    assert status == 200 and [j["state"] for j in job["items"] if j["name"] == "nightly"] == ["ENABLED"]
