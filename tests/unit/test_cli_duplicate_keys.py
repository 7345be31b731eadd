"""A key given twice in one mapping of a file or ``--payload`` is refused, naming the key (exit 2,
one line), not read as its last value (QA30: ``schedule`` twice in a job file, a merge or a paste
gone wrong, created the job with the second schedule and no word). YAML 1.2 requires a mapping's
keys to be unique; kubectl refuses a manifest with a key set twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from punctual_cli import cli

TARGET = '"target": {"type": "http", "url": "https://hooks.example.com/x"}'


@pytest.fixture(autouse=True)
def _nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUNCTUAL_ENDPOINT", "http://127.0.0.1:9")  # never reached: refused first
    monkeypatch.setenv("PUNCTUAL_TENANT", "t")


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, ""), (code, captured.err)
    assert captured.err.count("\n") == 1 and "internal error" not in captured.err, captured.err
    assert "cannot reach" not in captured.err, captured.err
    return captured.err


@pytest.mark.parametrize(
    ("name", "text", "key"),
    [
        (
            "job.json",
            '{"schedule": "rate(1 hour)", "schedule": "rate(1 minute)", ' + TARGET + "}",
            "schedule",
        ),
        (
            "deep.json",
            '{"schedule": "rate(1 hour)", "target": {"type": "http", "url": "a", "url": "b"}}',
            "url",
        ),
        (
            "job.yaml",
            "schedule: rate(1 hour)\nschedule: rate(1 minute)\ntarget: {type: http, url: x}\n",
            "schedule",
        ),
        ("deep.yaml", "schedule: rate(1 hour)\ntarget:\n  type: http\n  url: a\n  url: b\n", "url"),
    ],
)
def test_a_job_file_with_a_key_twice_is_refused_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str, key: str
) -> None:
    spec = tmp_path / name
    spec.write_text(text)
    err = _refused(capsys, "jobs", "create", "--file", str(spec))
    assert f"'{key}'" in err and "twice" in err, err


def test_a_payload_or_calendar_with_a_key_twice_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    err = _refused(
        capsys,
        "jobs",
        "create",
        "--schedule",
        "rate(1 hour)",
        "--http-url",
        "https://h.example.com/x",
        "--payload",
        '{"report": "daily", "report": "weekly"}',
    )
    assert "'report'" in err and "twice" in err, err
    calendar = tmp_path / "cal.json"
    calendar.write_text('{"timezone": "UTC", "dates": ["2026-12-24"], "dates": ["2026-12-25"]}')
    err = _refused(capsys, "calendars", "put", "freeze", "--file", str(calendar))
    assert "'dates'" in err and "twice" in err, err


def test_a_yaml_merge_key_is_not_a_key_given_twice(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``<<: *base`` then a key of its own overrides the merged one, as YAML means: not refused."""
    spec = tmp_path / "merge.yaml"
    spec.write_text(
        "base: &base {type: http, url: 'https://a.example.com/x'}\n"
        "schedule: rate(1 hour)\ntarget:\n  <<: *base\n  url: https://b.example.com/x\n"
    )
    code = cli.main(["jobs", "create", "--file", str(spec)])
    err = capsys.readouterr().err
    assert "twice" not in err and code == 1 and "cannot reach" in err, err  # it got as far as sending


@pytest.mark.parametrize("key", ["[a, b]", "{a: 1}"])
def test_a_yaml_key_that_is_not_a_scalar_is_an_input_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, key: str
) -> None:
    """QA30 (review of ee4b44b4): the key check ran before PyYAML's own and raised ``unhashable
    type`` on ``? [a, b]``: 'internal error', exit 1. It is PyYAML's refusal again, exit 2."""
    spec = tmp_path / "job.yaml"
    spec.write_text(f"? {key}\n: 1\nschedule: rate(1 hour)\ntarget: {{type: http, url: x}}\n")
    err = _refused(capsys, "jobs", "create", "--file", str(spec))
    assert "unhashable key" in err, err


def test_a_yaml_number_key_and_its_text_are_one_key_given_twice(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``1`` and ``"1"`` are two YAML keys but one JSON key: sent, the API would get it twice."""
    spec = tmp_path / "job.yaml"
    spec.write_text("schedule: rate(1 hour)\ntarget: {type: http, url: x}\npayload: {1: a, '1': b}\n")
    err = _refused(capsys, "jobs", "create", "--file", str(spec))
    assert "'1'" in err and "twice" in err, err
