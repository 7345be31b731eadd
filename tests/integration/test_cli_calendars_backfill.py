"""``punctual calendars``, ``punctual jobs backfill`` and ``punctual backfills`` against the API
handler served on loopback (the fixtures of test_cli_api.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from api_harness import api as api  # the fixture
from test_cli_api import Served, create, run
from test_cli_api import served as served  # the fixture

ICS = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nX-WR-TIMEZONE:Europe/Berlin\r\n"
    "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20261225\r\nDTEND;VALUE=DATE:20261227\r\nEND:VEVENT\r\n"
    "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20270101\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
)


def test_calendars_from_an_ics_file_used_by_a_job(
    served: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ics = tmp_path / "holidays.ics"
    ics.write_text(ICS)
    code, out, err = run(
        capsys, "calendars", "put", "de", "--ics", str(ics), "--date", "2026-12-31", "-o", "json"
    )
    assert code == 0, err
    calendar = json.loads(out)
    assert calendar["timezone"] == "Europe/Berlin" and calendar["version"] == 1
    assert calendar["dates"] == ["2027-01-01", "2026-12-31"]
    assert calendar["ranges"] == [{"start": "2026-12-25", "end": "2026-12-26"}]
    code, out, _ = run(capsys, "calendars", "list")
    assert code == 0 and "de" in out and "Europe/Berlin" in out
    job = create(capsys, "--exclude-calendar", "de")
    assert job["exclude_calendars"] == ["de"]
    code, _, err = run(capsys, "calendars", "delete", "de")
    assert code == 1 and job["id"] in err  # 409: in use, naming the job
    code, _, err = run(capsys, "calendars", "put", "bad", "--range", "2026-12-05..2026-12-01")
    assert code == 2 and "before its start" in err
    code, _, err = run(capsys, "calendars", "put", "bad", "--range", "tomorrow")
    assert code == 2 and err.count("\n") == 1
    code, _, err = run(capsys, "jobs", "create", "--schedule", "rate(1 hour)", "--http-url",
                       "https://hooks.example.com/x", "--exclude-calendar", "nope")  # fmt: skip
    assert code == 2 and "'nope' does not exist" in err


def test_backfill_get_and_cancel(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    job = create(capsys, "--schedule", "cron(0 * * * ? *)")
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    start = end - timedelta(hours=5)
    asked = ("jobs", "backfill", job["id"], "--from", start.isoformat(), "--to", end.isoformat())
    code, out, err = run(capsys, *asked)
    assert code == 0 and "5 to run" in out and "PENDING 5" in out, err
    code, out, err = run(capsys, *asked, "-o", "json")
    backfill = json.loads(out)
    assert code == 0 and backfill["slots"] == 5, err
    code, out, err = run(capsys, "backfills", "get", job["id"], backfill["id"], "-o", "json")
    assert code == 0 and json.loads(out)["id"] == backfill["id"], err
    code, out, err = run(capsys, "backfills", "cancel", job["id"], backfill["id"])
    assert code == 0 and "CANCELLED" in out, err
    code, _, err = run(
        capsys, "jobs", "backfill", job["id"], "--from", end.isoformat(), "--to", start.isoformat()
    )
    assert code == 2 and "end must be after start" in err
    code, _, err = run(capsys, "jobs", "backfill", job["id"], "--from", "yesterday", "--to", end.isoformat())
    assert code == 2 and err.startswith("punctual: error:")
