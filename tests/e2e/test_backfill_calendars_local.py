"""Backfill and exclusion calendars in local mode, through the ``punctual`` CLI and HTTP.

Runs on the shared local mode (sorted before test_local_mode.py, which stops it). The two
parts overlap their waits: the backfill is started first and checked last.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from local.harness import LocalMode

pytestmark = pytest.mark.e2e

PAYLOAD = {"job": "<job_id>", "slot": "<slot>", "attempt": "<attempt>"}


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _register(local: LocalMode, hook: str, schedule: str, **extra: Any) -> dict[str, Any]:
    spec = {
        "schedule": schedule,
        "target": {"type": "http", "url": local.hook(hook)},
        "payload": PAYLOAD,
        **extra,
    }
    status, body = local.api("POST", "/v1/jobs", spec)
    assert status == 201, body
    return dict(body)


def _requests(local: LocalMode, job_id: str) -> list[dict[str, Any]]:
    return [r for r in local.records() if r.get("job") == job_id]


def _history(local: LocalMode, job_id: str) -> dict[str, dict[str, Any]]:
    status, body = local.api("GET", f"/v1/jobs/{job_id}/executions?limit=100")
    assert status == 200, body
    return {item["slot"]: item for item in body["items"]}


def test_a_backfill_runs_each_past_slot_once_and_a_calendar_excludes_days(
    local_mode: LocalMode, tmp_path: Path
) -> None:
    local = local_mode
    # Given a job every minute, backfilled with the CLI over three minutes before it existed,
    # the same request twice
    job = _register(local, "backfilled", "* * * * *")
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    start = end - timedelta(minutes=3)
    asked = ("jobs", "backfill", job["id"], "--from", _iso(start), "--to", _iso(end), "--max-parallel", "2")
    code, first, err = local.cli(*asked)
    assert code == 0 and first["slots"] == 3 and first["state"] == "RUNNING", err
    code, again, err = local.cli(*asked)
    assert code == 0 and again["id"] == first["id"] and again["slots"] == 3, err

    # Given a calendar that excludes today (UTC), imported from an iCalendar file, and a job using it
    today = datetime.now(UTC).date()
    ics = tmp_path / "today.ics"
    ics.write_text(
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nBEGIN:VEVENT\r\nSUMMARY:e2e\r\n"
        f"DTSTART;VALUE=DATE:{today:%Y%m%d}\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    )
    code, calendar, err = local.cli("calendars", "put", "e2e-today", "--ics", str(ics), "--tz", "UTC")
    assert code == 0 and calendar["version"] == 1 and calendar["dates"] == [today.isoformat()], err
    if datetime.now(UTC).date() != today:
        pytest.skip("the UTC day changed during the test")
    excluded = _register(local, "excluded", "rate(3 seconds)", exclude_calendars=["e2e-today"])
    assert excluded["next_fire_at"] is None or excluded["next_fire_at"] >= f"{today + timedelta(days=1)}"

    # Then its slots are recorded EXCLUDED, naming the calendar's version, and never sent
    def excluded_slots() -> list[dict[str, Any]] | None:
        records = [r for r in _history(local, excluded["id"]).values() if r["status"] == "EXCLUDED"]
        return records if len(records) >= 2 else None

    records = local.wait(excluded_slots, 60, "two EXCLUDED slots")
    assert all(r["error"] == "excluded by calendar 'e2e-today' (version 1)" for r in records)
    assert _requests(local, excluded["id"]) == []
    status, problem = local.api("DELETE", "/v1/calendars/e2e-today")
    assert status == 409 and excluded["id"] in problem["detail"]

    # When the calendar no longer excludes today, Then the job fires from its next slot on
    status, changed = local.api("PUT", "/v1/calendars/e2e-today", {"timezone": "UTC", "dates": []})
    assert status == 200 and changed["version"] == 2
    changed_at = time.time()
    local.wait(lambda: _requests(local, excluded["id"]), 60, "a run after the calendar changed")
    assert all(r["arrived"] >= changed_at - 5 for r in _requests(local, excluded["id"]))
    assert local.api("DELETE", f"/v1/jobs/{excluded['id']}")[0] == 204
    assert local.api("DELETE", "/v1/calendars/e2e-today")[0] == 204

    # And the backfill ends DONE: each past slot ran once, marked in the history as backfilled
    def done() -> dict[str, Any] | None:
        code, shown, err = local.cli("backfills", "get", job["id"], first["id"])
        assert code == 0, err
        return shown if shown["state"] == "DONE" else None

    finished = local.wait(done, 90, "the backfill to finish")
    assert finished["progress"] == {"SUCCEEDED": 3}
    wanted = [_iso(start + timedelta(minutes=m)) for m in range(3)]
    arrivals = Counter((r["slot"], r["attempt"]) for r in _requests(local, job["id"]) if r["slot"] in wanted)
    assert sorted(slot for slot, _ in arrivals) == wanted and set(arrivals.values()) == {1}
    history = _history(local, job["id"])
    assert all(
        history[slot]["backfill"] == first["id"] and history[slot]["status"] == "SUCCEEDED" for slot in wanted
    )
    assert local.api("DELETE", f"/v1/jobs/{job['id']}")[0] == 204
