"""Issue 19 in local mode: a job that fails and recovers alerts once per failed slot, then once
``recovered``; its alerts are in the API and the CLI; its execution events reach the receiver.

Runs on the shared ``local_mode`` (sorts before test_local_mode.py, which stops it).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema

from local.harness import LocalMode, request

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "events.schema.json").read_text())
FAIL_FOR_S = 7


def _kept(local: LocalMode, kind: str, job_id: str) -> list[dict[str, Any]]:
    status, body = request(f"{local.receiver_url}/{kind}")
    assert status == 200 and isinstance(body, dict), body
    if kind == "alerts":
        return [a for a in body["alerts"] if (a.get("body") or {}).get("job_id") == job_id]
    return [e for e in body["events"] if (e.get("detail") or {}).get("job_id") == job_id]


def test_a_failing_job_alerts_once_per_failed_slot_then_once_recovered(local_mode: LocalMode) -> None:
    local = local_mode
    # Given a job whose receiver fails every request for its first seconds, with a rule on both
    spec = {
        "name": "e2e: alerts",
        "schedule": "rate(2 seconds)",
        "target": {"type": "http", "url": local.hook(f"alerts-e2e?failfor={FAIL_FOR_S}")},
        "payload": {"job": "<job_id>", "slot": "<slot>", "attempt": "<attempt>"},
        "retry": {"max_attempts": 1},
        "timeout_seconds": 5,
        "alerts": [
            {
                "on": ["failed", "recovered"],
                "target": {"type": "http", "url": f"{local.receiver_url}/alert/e2e"},
            }
        ],
    }
    status, job = local.api("POST", "/v1/jobs", spec)
    assert status == 201, job
    job_id = job["id"]
    assert job["alerts"][0]["on"] == ["failed", "recovered"]
    try:
        # When it has failed for a while and then succeeded
        local.wait(
            lambda: any(a["body"]["condition"] == "recovered" for a in _kept(local, "alerts", job_id)),
            90,
            "the recovered alert",
        )

        def failed_slots() -> set[str]:
            _, page = local.api("GET", f"/v1/jobs/{job_id}/executions?status=FAILED&limit=100")
            return {item["slot"] for item in page["items"]}

        def settled() -> list[dict[str, Any]] | None:
            alerts = _kept(local, "alerts", job_id)
            failed = {a["body"]["slot"] for a in alerts if a["body"]["condition"] == "failed"}
            return alerts if failed and failed == failed_slots() else None

        alerts = local.wait(settled, 30, "one failed alert per FAILED slot")
    finally:
        local.api("POST", f"/v1/jobs/{job_id}/pause")
    # Then each failed slot alerted once, and the streak recovered once, every alert signed
    per_slot = Counter((a["body"]["slot"], a["body"]["condition"]) for a in alerts)
    assert max(per_slot.values()) == 1, per_slot
    conditions = Counter(a["body"]["condition"] for a in alerts)
    assert conditions["recovered"] == 1 and conditions["failed"] >= 1
    assert all(a["signed"] and a["key"] for a in alerts)
    recovered = next(a["body"] for a in alerts if a["body"]["condition"] == "recovered")
    assert recovered["status"] == "SUCCEEDED" and recovered["failing_since"] == min(failed_slots())
    # And the API and the CLI list the same alerts
    status, listed = local.api("GET", f"/v1/jobs/{job_id}/alerts")
    assert status == 200
    api_alerts = Counter((a["slot"], a["condition"], a["status"]) for a in listed["items"])
    assert api_alerts == Counter((slot, condition, "SENT") for slot, condition in per_slot)
    code, cli_listed, err = local.cli("jobs", "alerts", job_id)
    assert code == 0, err
    assert len(cli_listed["items"]) == len(listed["items"])
    # And its execution events reached the receiver, each valid against the documented schema
    events = _kept(local, "events", job_id)
    statuses = {(e["detail-type"], e["detail"]["status"]) for e in events}
    assert {("Execution Status Change", s) for s in ("RUNNING", "FAILED", "SUCCEEDED")} <= statuses
    for event in events:
        assert event["source"] == "punctual"
        jsonschema.validate(event["detail"], SCHEMA)
