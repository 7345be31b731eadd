"""The CLI keeps its contract under careless input (issue 17, findings 5, 6 and 8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from api_harness import api as api  # the fixture served needs
from test_cli_api import Served, create, run
from test_cli_api import served as served  # the fixture


def test_invalid_json_in_payload_is_refused_with_the_parsers_message(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "jobs", "create", "--schedule", "rate(1 hour)", "--http-url", "https://hooks.example.com/x",
        "--payload", '{"a": 1,}',
    )  # fmt: skip
    assert code == 2 and out == ""
    assert err.startswith("punctual: error: --payload is not valid JSON (Expecting property name")
    assert "--payload-text" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "jobs", "list", "--output", "json")
    assert json.loads(_)["items"] == []


def test_nan_in_payload_is_not_json(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(
        capsys, "jobs", "create", "--schedule", "rate(1 hour)", "--http-url", "https://hooks.example.com/x",
        "--payload", '{"a": NaN}',
    )  # fmt: skip
    assert code == 2 and "NaN is not a JSON number" in err


def test_payload_text_is_a_string_sent_as_text_plain(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    job = create(capsys, "--payload-text", "run <slot>")
    assert job["payload"] == "run <slot>"
    assert job["target"]["headers"] == {"Content-Type": "text/plain; charset=utf-8"}
    code, _, err = run(capsys, "jobs", "create", "--payload", "1", "--payload-text", "x")
    assert code == 2 and "not allowed with argument" in err


@pytest.mark.parametrize("argv", [("jobs", "get", ""), ("jobs", "delete", "a/b"), ("runs", "list", "")])
def test_an_empty_or_malformed_job_id_is_a_usage_error(
    served: Served, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert "a job id is 1-64 letters" in err and "internal error" not in err


def test_a_422_shows_every_error(served: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = {
        "name": "x" * 200, "description": "d" * 2000, "schedule": "rate(1 hour)", "timezone": "Mars/Olympus",
        "target": {"type": "http", "url": "ftp://x", "headers": {"Host": "h"}}, "timeout_seconds": True,
        "jitter_seconds": -1, "retry": {"max_attempts": 0}, "tags": {"": "v"},
    }  # fmt: skip
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(spec))
    code, _, err = run(capsys, "jobs", "create", "--file", str(path))
    assert code == 2
    for field in ("name", "description", "timezone", "target.url", "target.headers", "timeout_seconds",
                  "jitter_seconds", "retry.max_attempts", "tags"):  # fmt: skip
        assert f"{field}:" in err, field


def test_state_deleted_is_refused(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "jobs", "list", "--state", "DELETED")
    assert code == 2 and "invalid choice: 'DELETED'" in err


def test_a_duplicate_name_is_warned_about(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    first = create(capsys)
    code, _, err = run(
        capsys, "jobs", "create", "--name", "hourly ping", "--schedule", "rate(1 hour)",
        "--http-url", "https://hooks.example.com/ping",
    )  # fmt: skip
    assert code == 0
    assert f"warning: 1 other job(s) are also named 'hourly ping': {first['id']}" in err


def test_a_script_skips_the_name_check(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    """QA17: the check lists up to 10 pages, each a request of the tenant's quota."""
    create(capsys)
    for extra in (("-o", "json"), ("--no-name-check",)):
        before = len(served.events)
        code, _, err = run(
            capsys, "jobs", "create", "--name", "hourly ping", "--schedule", "rate(1 hour)",
            "--http-url", "https://hooks.example.com/ping", *extra,
        )  # fmt: skip
        assert code == 0 and "also named" not in err
        assert [e["httpMethod"] for e in served.events[before:]] == ["POST"]


def test_get_output_can_be_sent_back_with_update_and_create(
    served: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    job = create(capsys)
    code, out, _ = run(capsys, "jobs", "get", job["id"], "-o", "json")
    got = json.loads(out)
    got["name"] = "renamed"
    path = tmp_path / "job.json"
    path.write_text(json.dumps(got))
    code, out, err = run(capsys, "jobs", "update", job["id"], "--file", str(path), "--replace", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["name"] == "renamed"
    code, out, err = run(capsys, "jobs", "create", "--file", str(path), "-o", "json")
    assert code == 0, err
    assert json.loads(out)["id"] != job["id"]
