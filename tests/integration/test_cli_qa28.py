"""QA28 fixes of the ``punctual`` command against the API handler served on loopback (the fixtures
of test_cli_api.py): what it prints of text it did not write."""

from __future__ import annotations

import io
import json
import urllib.error
from datetime import UTC, datetime
from email.message import Message
from typing import Any

import pytest
from api_harness import api as api  # the fixture served needs
from test_cli_api import Served, create, run
from test_cli_api import served as served  # the fixture

from punctual.models import Alert, AlertCondition, AlertStatus, AttemptRecord, Execution, ExecutionStatus
from punctual_cli import client as client_module
from punctual_cli.client import PunctualClient

# What a webhook's receiver answered, kept in the slot's error as its excerpt: a right-to-left
# override, an ANSI sequence that clears the screen, one that sets the terminal's title, a carriage
# return, a line break (a Lambda's error)
HOOK = {"type": "http", "url": "https://hooks.example.com/ping"}
HOSTILE = "HTTP 500: \u202etxt.exe \x1b[2J\x1b]0;owned\x07gone\rover\nstack"


def test_a_receivers_control_characters_are_written_out_not_sent_to_the_terminal(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA28: a slot's error holds what the receiver's body said (control characters kept: only
    whitespace runs are folded), and the table printed it as it came, so a webhook's answer could
    clear the operator's terminal, retitle it, or overwrite the table's rows; a line break in a
    Lambda's error split its row in two."""
    job = create(capsys)
    slot, started = "2026-11-30T09:00:00Z", datetime(2026, 11, 30, 9, 0, 1, tzinfo=UTC)
    served.api.store.save_execution(
        Execution(
            job_id=job["id"], tenant="default", slot=slot, scheduled_at=datetime(2026, 11, 30, 9, tzinfo=UTC),
            attempt=1, status=ExecutionStatus.FAILED, started_at=started, finished_at=started, error=HOSTILE,
            attempts=[AttemptRecord(attempt=1, status=ExecutionStatus.FAILED, error=HOSTILE, started_at=started)],
        ),
        None,
        ttl_epoch_s=2_000_000_000,
    )  # fmt: skip

    for argv in (("runs", "list", job["id"]), ("runs", "get", job["id"], slot)):
        code, out, err = run(capsys, *argv)
        assert code == 0 and err == "", err
        # nothing the terminal acts on: every control character is written out, visibly
        assert not any(char in out for char in "\x1b\x07\r\u202e"), repr(out)
        assert "\\x1b[2J" in out and "\\u202e" in out, out
    # the listing is its header and one row: the error's line break did not split it
    code, out, _ = run(capsys, *("runs", "list", job["id"]))
    assert len(out.splitlines()) == 2 and out.splitlines()[1].startswith(slot), out
    # and -o json keeps the text as it is (JSON escapes it)
    code, out, _ = run(capsys, "runs", "get", job["id"], slot, "-o", "json")
    assert code == 0 and json.loads(out)["error"] == HOSTILE


def test_a_foreign_servers_control_characters_are_written_out_in_the_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The error that quotes an endpoint that is not the API (its body's first 80 characters)."""

    def answering(request: Any, timeout: float) -> Any:
        raise urllib.error.HTTPError(
            request.full_url, 500, "Oops", Message(), io.BytesIO(b"\x1b[2J\x1b]0;x\x07<html>")
        )

    monkeypatch.setattr(client_module._OPENER, "open", answering)
    code, out, err = run(capsys, "jobs", "list", "--endpoint", "http://127.0.0.1:9")
    assert code == 1 and out == "" and err.count("\n") == 1, err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b[2J" in err, repr(err)


@pytest.mark.parametrize("tag", ["=data", "=", "team=\x01"])
def test_a_tag_filter_no_job_can_match_is_refused_naming_it(
    served: Served, capsys: pytest.CaptureFixture[str], tag: str
) -> None:
    """QA28: ``--tag =data`` (a tag with no key, a typo of ``team=data``) listed no job, exit 0, as
    if the tenant had none (no job's tag key is empty, or holds a control character), where the
    console refuses it ("tag must be key or key=value")."""
    create(capsys)
    code, out, err = run(capsys, "jobs", "list", "--tag", tag)
    assert code == 2 and out == "" and "tag" in err, err
    assert run(capsys, "jobs", "list", "--tag", "team=ops")[1].count("hourly ping") == 1


def test_a_deleted_jobs_records_are_marked_in_the_history_of_the_job_created_again_at_its_id(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA28: the API marks a deleted job's executions and alerts ``job_deleted`` (docs/api.md), and
    the tables left the mark out: the history of a job created again at the id (an EventBridge
    schedule created again under its name) showed the deleted job's failures as the new job's."""
    PunctualClient(served.url).create_job_at("etl", {"schedule": "rate(1 hour)", "target": HOOK})
    old, ran = "2026-11-30T09:00:00Z", datetime(2026, 11, 30, 9, 0, 1, tzinfo=UTC)  # before its creation
    served.api.store.save_execution(
        Execution(
            job_id="etl", tenant="default", slot=old, scheduled_at=datetime(2026, 11, 30, 9, tzinfo=UTC),
            attempt=1, status=ExecutionStatus.FAILED, started_at=ran, finished_at=ran, error="HTTP 500",
        ),
        None,
        ttl_epoch_s=2_000_000_000,
    )  # fmt: skip
    alert = Alert(
        tenant="default", job_id="etl", key_slot=old, condition=AlertCondition.FAILED, status=AlertStatus.SENT,
        created_at=ran, claimed_at=ran, owner="w1", body={"slot": old, "summary": "slot FAILED"},
    )  # fmt: skip
    assert served.api.store.create_alert(alert, 2_000_000_000)

    for argv in (("runs", "list", "etl"), ("runs", "get", "etl", old), ("jobs", "alerts", "etl")):
        code, out, err = run(capsys, *argv)
        assert code == 0 and err == "", err
        assert "FAILED (deleted job)" in out or "SENT (deleted job)" in out, out


class _Ok:
    """A 200 answer with a JSON body, as ``urllib`` gives it."""

    status = 200

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.headers = Message()

    def __enter__(self) -> _Ok:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def read(self) -> bytes:
        return self.body


@pytest.mark.parametrize(
    "argv",
    [
        ("jobs", "list"),
        ("jobs", "list", "-o", "json"),
        ("jobs", "get", "j"),
        ("runs", "list", "j", "-o", "json"),
        ("jobs", "alerts", "j"),
        ("jobs", "trigger", "j"),
        ("jobs", "create", "--schedule", "rate(1 hour)", "--http-url", "https://x.example.com", "-o", "json"),
        ("calendars", "list"),
    ],
)
def test_a_success_that_is_not_the_apis_says_the_endpoint_is_not_the_api(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    """QA28: an endpoint that answers 200 with JSON of its own (another service, a health check)
    was an internal error of the command (KeyError 'items'), and with -o json its JSON was
    printed as the API's answer, exit 0."""
    monkeypatch.setattr(client_module._OPENER, "open", lambda request, timeout: _Ok(b'{"ok": true}'))
    code, out, err = run(capsys, *argv, "--endpoint", "http://127.0.0.1:9")
    assert code == 1 and out == "" and err.count("\n") == 1, (out, err)
    assert "is not Punctual's API" in err and "internal error" not in err, err
