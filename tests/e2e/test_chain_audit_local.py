"""Local mode runs the chain auditor too (issue 28): a chain broken on purpose in the table is
found and repaired, and the job fires again; the repair is reported as a ``Chain Repaired`` event."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema

from local.harness import LocalMode, request

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "events.schema.json").read_text())
# The auditor judges a chain once nothing of it happened for local mode's grace (60 s) and runs
# every 20 s; this deadline leaves room for a loaded machine.
REPAIR_DEADLINE_S = 300


def _table(local: LocalMode) -> tuple[Any, str]:
    import boto3

    deployment = json.loads((local.state / "run" / "deployment.json").read_text())
    session = boto3.session.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
    return session.client("dynamodb", endpoint_url=local.aws_url), deployment["table_name"]


def _delete_timers(local: LocalMode, job_id: str) -> int:
    """Delete every timer row of ``job_id`` (registration writes its first timer as a lone row)."""
    client, table = _table(local)
    deleted, request_args = 0, {"TableName": table}
    while True:
        reply = client.scan(**request_args)
        for item in reply["Items"]:
            if item["pk"]["S"].startswith(("timer#", "near#")) and item.get("job_id", {}).get("S") == job_id:
                client.delete_item(TableName=table, Key={"pk": item["pk"], "sk": item["sk"]})
                deleted += 1
        if "LastEvaluatedKey" not in reply:
            return deleted
        request_args["ExclusiveStartKey"] = reply["LastEvaluatedKey"]


def _repairs(local: LocalMode, job_id: str) -> list[dict[str, Any]]:
    status, body = request(f"{local.receiver_url}/events")
    assert status == 200 and isinstance(body, dict), body
    return [
        e
        for e in body["events"]
        if e.get("detail-type") == "Chain Repaired" and (e.get("detail") or {}).get("job_id") == job_id
    ]


def test_the_auditor_repairs_a_chain_whose_timer_was_deleted(local_mode: LocalMode) -> None:
    local = local_mode
    # Given a job every two minutes from two minutes on (no slot of it is released before its
    # first timer is deleted: a release writes the next timer in a pack this test does not touch;
    # the auditor, after its grace, repairs the chain before that slot on a machine that is not
    # overloaded, and after it, recording it missed, on one that is), its chain's timers deleted
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=2)
    status, job = local.api(
        "POST",
        "/v1/jobs",
        {
            "name": "e2e: chain audit",
            "schedule": "rate(2 minutes)",
            "start_at": start.isoformat(),
            "target": {"type": "http", "url": local.hook("chain-audit-e2e")},
            "payload": {"slot": "<slot>"},
        },
    )
    assert status == 201, job
    assert _delete_timers(local, job["id"]) >= 1
    # When the auditor runs (it leaves a just registered job alone for its grace)
    events = local.wait(lambda: _repairs(local, job["id"]), REPAIR_DEADLINE_S, "the chain's repair")
    # Then it repaired the chain, once, and said so with an event the schema describes
    (event,) = events
    jsonschema.validate(event["detail"], SCHEMA)
    assert event["detail"]["repair"] == "clock" and event["detail"]["status"] == "REPAIRED"
    # And the job fires again, from the slot the repair named
    next_slot = event["detail"]["next_slot"]

    def fired() -> list[dict[str, Any]]:
        return [
            r for r in local.records() if r.get("name") == "chain-audit-e2e" and r.get("slot") == next_slot
        ]

    local.wait(fired, 180 + REPAIR_DEADLINE_S, "the repaired job to fire its next slot")
    assert len(_repairs(local, job["id"])) == 1  # repaired once: the chain is live again
    if event["detail"]["missed_count"]:  # the repair came after the first slot's instant: recorded
        status, history = local.api("GET", f"/v1/jobs/{job['id']}/executions?status=MISSED")
        assert status == 200
        assert [e["slot"] for e in history["items"]] == [event["detail"]["missed_from"]]
    assert local.api("DELETE", f"/v1/jobs/{job['id']}")[0] == 204
