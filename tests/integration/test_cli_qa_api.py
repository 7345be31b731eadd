"""QA fixes of the ``punctual`` command against the API handler served on loopback (the fixtures
of test_cli_api.py): what the API stores and answers, shown and sent as the CLI says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from api_harness import ACCOUNT, REGION
from api_harness import api as api  # the fixture served needs
from test_cli_api import Served, create, run
from test_cli_api import served as served  # the fixture


def test_an_sqs_job_shows_its_queue_not_its_null_role(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = f"arn:aws:sqs:{REGION}:{ACCOUNT}:reports"
    code, out, err = run(
        capsys, "jobs", "create", "-o", "json", "--schedule", "rate(1 hour)", "--sqs-arn", queue
    )
    assert code == 0, err
    job = json.loads(out)
    assert job["target"]["role_arn"] is None  # the first *_arn key the API answers: what was shown
    code, out, err = run(capsys, "jobs", "get", job["id"])
    assert code == 0, err
    assert f"target     sqs {queue}\n" in out and "None" not in out


def test_the_last_day_there_is_goes_to_the_api(
    served: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ics = tmp_path / "y9999.ics"
    ics.write_text("BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:99991231\nEND:VEVENT\nEND:VCALENDAR\n")
    code, out, err = run(capsys, "calendars", "put", "end", "--ics", str(ics), "-o", "json")
    assert code == 0, err
    assert json.loads(out)["dates"] == ["9999-12-31"]
    # and a job may exclude it
    assert create(capsys, "--exclude-calendar", "end")["exclude_calendars"] == ["end"]


def test_if_match_of_a_calendar_is_sent_and_checked(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "calendars", "put", "c", "--date", "2026-12-25")[0] == 0
    code, _, err = run(capsys, "calendars", "put", "c", "--date", "2026-12-26", "--if-match", '"7"')
    assert code == 1 and err.startswith("punctual: error: 412 ") and err.count("\n") == 1
    code, out, err = run(capsys, "calendars", "put", "c", "--date", "2026-12-26", "--if-match", "1")
    assert code == 0 and "version 2" in out, err
