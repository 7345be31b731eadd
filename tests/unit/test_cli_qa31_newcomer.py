"""QA31, the newcomer's path: what ``punctual`` says when a job it is given lacks a field, and what
``jobs update --help`` says its flags do."""

from __future__ import annotations

from pathlib import Path

import pytest

from punctual_cli import cli


@pytest.fixture(autouse=True)
def _nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUNCTUAL_ENDPOINT", "http://127.0.0.1:9")  # never reached: the input is refused first
    monkeypatch.setenv("PUNCTUAL_TENANT", "t")


HOOK = 'target: {type: http, url: "https://hooks.example.com/x"}\n'


@pytest.mark.parametrize(
    ("content", "says"),
    [
        # a typo in a key: the job has no schedule, and the key it has instead is named
        ("schedul: rate(5 minutes)\n" + HOOK, "no schedule: 'schedul' in"),
        ("schedule: rate(5 minutes)\ntarget_: {type: http}\n", "no target: 'target_' in"),
        ("name: x\n" + HOOK, "a job needs a schedule (--schedule, or schedule: in the file)"),
        ("name: x\nschedule: rate(5 minutes)\n", "a job needs a target (--http-url, --lambda-arn"),
    ],
)
def test_a_file_without_schedule_or_target_names_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, says: str
) -> None:
    """QA31: ``schedul:`` in a job file was "a job needs a schedule and a target: --file, or
    --schedule with --http-url/...", as if no file had been given, naming neither the missing field
    nor the key that was meant to be it."""
    path = tmp_path / "job.yaml"
    path.write_text(content)
    code = cli.main(["jobs", "create", "--file", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and says in err and err.count("\n") == 1, err


def test_flags_without_a_target_name_the_target_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["jobs", "create", "--schedule", "rate(5 minutes)"])
    err = capsys.readouterr().err
    assert code == 2 and "a job needs a target (--http-url, --lambda-arn, --sqs-arn" in err, err
    assert "schedule" not in err.split("target")[0], err  # the schedule was given: not asked for


def test_update_help_promises_no_default_method(capsys: pytest.CaptureFixture[str]) -> None:
    """QA31: ``jobs update --help`` said ``--http-method`` was "(default POST)", but an update keeps
    the webhook's method (a PUT webhook given a new ``--http-url`` stays PUT)."""
    assert cli.main(["jobs", "update", "--help"]) == 0
    update_help = " ".join(capsys.readouterr().out.split())
    assert "--http-method {GET,POST,PUT,PATCH,DELETE}" in update_help
    assert "default POST" not in update_help, update_help
    options = update_help.split("options:")[1]
    assert "keeps" in options.split("--http-method")[1].split("--lambda-arn")[0], options
    assert cli.main(["jobs", "create", "--help"]) == 0
    assert "default POST" in " ".join(capsys.readouterr().out.split())
