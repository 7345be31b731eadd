"""`punctual next`: slots on stdout one per line; invalid input is exit 2 with exactly one
line on stderr and nothing on stdout."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from punctual_cli import cli


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def test_done_check_first_monday_0900_berlin(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "next",
        "cron(0 9 ? * 2#1 *)",
        "--tz",
        "Europe/Berlin",
        "--count",
        "3",
        "--after",
        "2026-01-01T00:00:00Z",
    )
    assert (code, err) == (0, "")
    # 09:00 CET = 08:00Z in winter, 09:00 CEST = 07:00Z from April
    assert out == ["2026-01-05T08:00:00Z", "2026-02-02T08:00:00Z", "2026-03-02T08:00:00Z"]


def test_default_count_is_five_and_after_defaults_to_now(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class FixedClock:
        def now(self) -> datetime:
            return datetime(2026, 5, 1, 12, 7, 30, 123_000, tzinfo=UTC)

    monkeypatch.setattr(cli, "SystemClock", FixedClock)
    code, out, _ = run(capsys, "next", "*/15 * * * *")
    assert code == 0
    assert out == [
        "2026-05-01T12:15:00Z",
        "2026-05-01T12:30:00Z",
        "2026-05-01T12:45:00Z",
        "2026-05-01T13:00:00Z",
        "2026-05-01T13:15:00Z",
    ]
    # rate: anchored on now when neither --after nor --start is given
    code, out, _ = run(capsys, "next", "rate(1 hour)", "--count", "2")
    assert out == ["2026-05-01T13:07:31Z", "2026-05-01T14:07:31Z"]


def test_unix_expression_and_zone(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "next",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--after",
        "2026-03-28T12:00:00Z",
        "--count",
        "2",
    )
    assert code == 0
    assert out == ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]  # the DST gap fires at its end


def test_rate_with_start_anchor(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "next",
        "rate(90 seconds)",
        "--after",
        "2026-01-01T00:10:00Z",
        "--start",
        "2026-01-01T00:00:00+00:00",
        "--count",
        "3",
    )
    assert code == 0
    assert out == ["2026-01-01T00:10:30Z", "2026-01-01T00:12:00Z", "2026-01-01T00:13:30Z"]


def test_delay_prints_only_the_first_slot(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "next",
        "delay(10 minutes)",
        "--after",
        "2026-01-01T00:00:00Z",
        "--start",
        "2026-01-01T00:00:00Z",
    )
    assert (code, out) == (0, ["2026-01-01T00:10:00Z"])


def test_at_prints_its_slot_or_says_it_has_none(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "next", "at(2030-01-01T09:00:00)", "--tz", "Asia/Tokyo", "--after", "2026-01-01"
    )
    assert (code, out) == (0, ["2030-01-01T00:00:00Z"])
    code, out, err = run(capsys, "next", "at(2020-01-01T09:00:00)", "--after", "2026-01-01T00:00:00Z")
    assert (code, out) == (2, []) and "has no slot after 2026-01-01T00:00:00Z" in err  # as a job would be
    # QA26: in another zone its UTC instant is named, the one compared (its local time reads later)
    code, out, err = run(
        capsys, "next", "at(2026-01-01T15:00:00)", "--tz", "Asia/Tokyo", "--after", "2026-01-01T10:00:00Z"
    )
    assert (code, out) == (
        2,
        [],
    ) and "at(2026-01-01T15:00:00) in Asia/Tokyo (2026-01-01T06:00:00Z) has no slot" in err


def test_an_expression_a_job_refuses_for_a_tab_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """QA26: slots were printed for an expression holding a tab, which a job's schedule refuses."""
    code, out, err = run(capsys, "next", "cron(0\t9 * * ? *)", "--after", "2026-01-01T00:00:00Z")
    assert (code, out) == (2, []) and "must not contain control characters" in err


def test_fewer_slots_when_the_schedule_ends(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "next", "cron(0 0 1 1 ? 2027-2028)", "--after", "2026-01-01T00:00:00Z", "--count", "5"
    )
    assert (code, out) == (0, ["2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"])


def test_count_upper_bound(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "next", "* * * * *", "--after", "2026-01-01T00:00:00Z", "--count", "1000")
    assert code == 0 and len(out) == 1000 and out[-1] == "2026-01-01T16:40:00Z"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["next", "cron(0 9 32 * ? *)"], "cron: day-of-month '32' out of range 1-31"),
        (["next", "cron(0 0 31 2 ? *)"], "never fires"),
        (["next", "0 9 * * *", "--tz", "Mars/Base"], "unknown time zone 'Mars/Base'"),
        (["next", "0 9 * * *", "--after", "yesterday"], "argument --after: invalid instant 'yesterday'"),
        (["next", "rate(5 minutes)", "--start", "soon"], "argument --start: invalid instant 'soon'"),
        (["next", "0 9 * * *", "--count", "0"], "argument --count: must be between 1 and 1000, got 0"),
        (["next", "0 9 * * *", "--count", "1001"], "must be between 1 and 1000"),
        (["next", "0 9 * * *", "--count", "many"], "argument --count: 'many' is not a whole number"),
        (["next", "after(extract)"], "after(...) jobs fire when their parents succeed"),
        (["next", "x" * 300], "too long"),
        (["next"], "the following arguments are required: EXPRESSION"),
        ([], "the following arguments are required: COMMAND"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["next", "0 9 * * *", "--bogus"], "unrecognized arguments: --bogus"),
        (["next", "0 9 * * *", "--after"], "argument --after: expected one argument"),
        (
            ["next", "cron(0 0 1 1 ? 2000-2001)", "--after", "2026-01-01T00:00:00Z"],
            "never fires again: year range ends in 2001",
        ),
    ],
)
def test_invalid_input_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == []
    assert err.startswith("punctual: error: ")
    assert err.endswith("\n") and err.count("\n") == 1
    assert message in err
    assert "Traceback" not in err


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "next", "--help")
    assert code == 0
    assert any("--count" in line for line in out)


def test_installed_console_script() -> None:
    script = Path(sys.executable).with_name("punctual")
    if not script.exists():
        pytest.skip("console script not installed in this environment")
    done = subprocess.run(
        [
            str(script),
            "next",
            "cron(0 9 ? * 2#1 *)",
            "--tz",
            "Europe/Berlin",
            "--count",
            "3",
            "--after",
            "2026-03-03",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "2026-04-06T07:00:00Z",
        "2026-05-04T07:00:00Z",
        "2026-06-01T07:00:00Z",
    ]
    bad = subprocess.run(
        [str(script), "next", "cron(0 9 ? * 2#9 *)"], capture_output=True, text=True, check=False, timeout=60
    )
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr.count("\n") == 1 and "occurrence" in bad.stderr
