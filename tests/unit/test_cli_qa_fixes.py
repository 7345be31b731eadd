"""Fixes of a QA pass of the ``punctual`` command: iCalendar dates at the end of the calendar, time
zones checked as the core checks a job's, a job's target shown by the ARN it calls, ``--if-match``
named for what it matches, and errors as the module docstring and docs/cli.md say."""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import Any

import pytest

from punctual_cli import cli
from punctual_cli.api_verbs import _alert_rule, _job_detail
from punctual_cli.client import ApiError
from punctual_cli.ics import IcsError, parse_ics
from punctual_cli.verb_kit import INPUT_STATUSES, guarded

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _nowhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUNCTUAL_ENDPOINT", "http://127.0.0.1:9")  # never reached: the input is refused first
    monkeypatch.setenv("PUNCTUAL_TENANT", "t")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def event(*lines: str) -> str:
    return (
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\n"
        + "".join(f"{line}\n" for line in lines)
        + "END:VEVENT\nEND:VCALENDAR\n"
    )


# -- 1. an all-day event at the end of the calendar: no OverflowError -----------------------------


def test_the_last_day_there_is_can_be_excluded() -> None:
    """9999-12-31 is a date a calendar takes (``--date 9999-12-31``): its exclusive DTEND,
    10000-01-01, cannot be made, and need not be."""
    assert parse_ics(event("DTSTART;VALUE=DATE:99991231")).dates == ["9999-12-31"]
    week = parse_ics(event("DTSTART;VALUE=DATE:99991225", "DURATION:P1W"))
    assert week.ranges == [{"start": "9999-12-25", "end": "9999-12-31"}]


@pytest.mark.parametrize(
    ("duration", "says"),
    [
        ("P99999999W", "line 4: DURATION 'P99999999W' from 2026-12-25 ends after 9999-12-31"),
        ("P9999999999W", "line 4: DURATION 'P9999999999W' from 2026-12-25 ends after 9999-12-31"),
        ("P" + "9" * 5000 + "D", "line 4: DURATION 'P99999"),  # more digits than int() reads
        ("P8D", "line 4: DURATION 'P8D' from 9999-12-25 ends after 9999-12-31"),
        ("P" + "0" * 5000 + "1D", None),  # one day, however many zeros come first
    ],
)
def test_a_duration_past_the_last_date_is_named_with_its_line(duration: str, says: str | None) -> None:
    start = "99991225" if duration == "P8D" else "20261225"
    text = event(f"DTSTART;VALUE=DATE:{start}", f"DURATION:{duration}")
    if says is None:
        assert parse_ics(text).dates == ["2026-12-25"]
        return
    with pytest.raises(IcsError) as refused:
        parse_ics(text)
    assert str(refused.value).startswith(says) and "\n" not in str(refused.value)


@pytest.mark.parametrize("verb", ["next", "calendars"])
@pytest.mark.parametrize("duration", ["P99999999W", "P" + "9" * 5000 + "D"])
def test_a_huge_duration_is_exit_2_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, verb: str, duration: str
) -> None:
    ics = tmp_path / "hugedur.ics"
    ics.write_text(event("DTSTART;VALUE=DATE:20261225", f"DURATION:{duration}"))
    argv = (
        ("next", "cron(0 9 * * ? *)", "--exclude-ics", str(ics))
        if verb == "next"
        else ("calendars", "put", "c", "--ics", str(ics))
    )
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "line 4: DURATION" in err and "ends after 9999-12-31" in err


def test_next_excluding_the_last_day_there_is(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    ics = tmp_path / "y9999.ics"
    ics.write_text(event("DTSTART;VALUE=DATE:99991231"))
    code, out, err = run(
        capsys, "next", "cron(0 9 * * ? *)", "--after", "2026-01-01T00:00:00Z", "--count", "1",
        "--exclude-ics", str(ics),
    )  # fmt: skip
    assert (code, out, err) == (0, "2026-01-01T09:00:00Z\n", "")


# -- 2. time zones: as the core checks a job's --------------------------------------------------


@pytest.mark.parametrize("zone", ["localtime", "posix/Europe/Berlin", "right/UTC", "posixrules", "Mars/Base"])
@pytest.mark.parametrize(
    "argv",
    [
        ("next", "cron(0 9 * * ? *)", "--tz"),
        ("next", "cron(0 9 * * ? *)", "--exclude-date", "2026-12-25", "--exclude-tz"),
        ("jobs", "create", "--schedule", "rate(1 hour)", "--http-url", "https://x.example.com", "--tz"),
        ("jobs", "update", "j1", "--tz"),
        ("calendars", "put", "c", "--tz"),
    ],
)
def test_a_zone_that_is_not_a_place_is_exit_2_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], zone: str
) -> None:
    code, out, err = run(capsys, *argv, zone)
    assert (code, out) == (2, "")
    flag = argv[-1]
    assert err.startswith(f"punctual: error: argument {flag}: ") and err.count("\n") == 1
    assert f"'{zone}'" in err and "internal error" not in err


def test_the_zone_an_ics_file_names_is_checked_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ics = tmp_path / "posixtz.ics"
    ics.write_text(
        event("DTSTART;VALUE=DATE:20261225").replace("BEGIN:VEVENT", "X-WR-TIMEZONE:localtime\nBEGIN:VEVENT")
    )
    base = ("next", "cron(0 9 * * ? *)", "--after", "2026-12-24T10:00:00Z", "--count", "1", "--exclude-ics")
    code, out, err = run(capsys, *base, str(ics))
    assert (code, out) == (2, "")
    assert (
        err
        == f"punctual: error: {ics}: X-WR-TIMEZONE: 'localtime' is not an IANA time zone (a place, such as Europe/Berlin)\n"
    )
    # --exclude-tz overrides the file's zone: then it is not used, nor refused
    code, out, err = run(capsys, *base, str(ics), "--exclude-tz", "Europe/Berlin")
    assert (code, out, err) == (0, "2026-12-26T09:00:00Z\n", "")


def test_places_are_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "next", "cron(0 9 * * ? *)", "--tz", "Europe/Berlin", "--after", "2026-12-24T00:00:00Z",
        "--count", "1", "--exclude-date", "2026-12-24", "--exclude-tz", "America/New_York",
    )  # fmt: skip
    assert (code, out) == (0, "2026-12-25T08:00:00Z\n")


# -- 3. a target is shown by the ARN it calls, never role_arn -----------------------------------

JOB: dict[str, Any] = {
    "id": "j1",
    "state": "ENABLED",
    "schedule": "rate(1 hour)",
    "version": 1,
    "runtime": "lambda",
    "timeout_seconds": 60,
    "alerts": [],
}
QUEUE = "arn:aws:sqs:eu-west-1:123456789012:jobs"


@pytest.mark.parametrize(
    ("target", "shown"),
    [
        ({"type": "sqs", "role_arn": None, "queue_arn": QUEUE, "message_group_id": None}, f"sqs {QUEUE}"),
        (
            {"type": "lambda", "role_arn": None, "function_arn": "arn:aws:lambda:eu-west-1:1:function:f"},
            "lambda arn:aws:lambda:eu-west-1:1:function:f",
        ),
        (
            {"type": "sns", "role_arn": "arn:aws:iam::1:role/r", "topic_arn": "arn:aws:sns:eu-west-1:1:t"},
            "sns arn:aws:sns:eu-west-1:1:t",
        ),
        (
            {
                "type": "ecs",
                "role_arn": None,
                "cluster_arn": "arn:aws:ecs:eu-west-1:1:cluster/c",
                "task_definition_arn": "arn:aws:ecs:eu-west-1:1:task-definition/t:1",
            },
            "ecs arn:aws:ecs:eu-west-1:1:cluster/c",
        ),
        (
            {"type": "http", "url": "https://hooks.example.com/x", "method": "POST"},
            "http https://hooks.example.com/x",
        ),
    ],
)
def test_a_job_and_its_alerts_show_the_target_it_calls(target: dict[str, Any], shown: str) -> None:
    detail = _job_detail({**JOB, "target": target})
    assert f"target     {shown}\n" in detail and "None" not in detail
    assert _alert_rule({"on": ["failed"], "target": target}) == f"failed -> {shown}"


# -- 4. --if-match names what it matches -------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (("calendars", "put", "X"), "calendar"),
        (("calendars", "delete", "X"), "calendar"),
        (("jobs", "delete", "j1"), "job"),
        (("jobs", "pause", "j1"), "job"),
        (("jobs", "update", "j1"), "job"),
    ],
)
@pytest.mark.parametrize("version", ["x", "²", "-1"])
def test_if_match_is_a_version_of_what_it_names(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], kind: str, version: str
) -> None:
    code, out, err = run(capsys, *argv, "--if-match", version)
    assert (code, out) == (2, "")
    assert (
        err == f"punctual: error: argument --if-match: a {kind} version is a whole number, got {version!r}\n"
    )


# -- 5. DTEND equal to DTSTART ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        (
            ("DTSTART;VALUE=DATE:20261225", "DTEND;VALUE=DATE:20261225"),
            "line 4: the event does not end after it starts (2026-12-25): DTEND '20261225' is exclusive",
        ),
        (
            ("DTSTART;VALUE=DATE:20261225", "DURATION:P0D"),
            "line 4: the event does not end after it starts (2026-12-25): DURATION 'P0D' is less than a day",
        ),
        (
            ("DTSTART;VALUE=DATE:20261225", "DURATION:P0W"),
            "line 4: the event does not end after it starts (2026-12-25): DURATION 'P0W'",
        ),
        (
            ("DTSTART;VALUE=DATE:20261225", "DTEND;VALUE=DATE:20261220"),
            "line 4: the event ends (2026-12-20) before",
        ),
    ],
)
def test_an_event_that_does_not_end_after_it_starts(lines: tuple[str, str], says: str) -> None:
    with pytest.raises(IcsError) as refused:
        parse_ics(event(*lines))
    assert str(refused.value).startswith(says)


# -- 6. errors as documented ------------------------------------------------------------------


def _answered(capsys: pytest.CaptureFixture[str], status: int, problem: dict[str, Any]) -> tuple[int, str]:
    def fails(args: argparse.Namespace, out: Any) -> int:
        raise ApiError(status, problem)

    code = guarded(fails)(argparse.Namespace(), io.StringIO())
    captured = capsys.readouterr()
    assert captured.out == ""
    return code, captured.err


def test_an_api_error_is_one_line_and_its_fields_a_second(capsys: pytest.CaptureFixture[str]) -> None:
    html = "<html>\n<body>\n<h1>502 Bad Gateway</h1>\n</body>\n</html>\n"
    assert _answered(capsys, 502, {"title": "Bad Gateway", "detail": html}) == (
        1,
        "punctual: error: 502 Bad Gateway: <html> <body> <h1>502 Bad Gateway</h1> </body> </html>\n",
    )
    assert _answered(capsys, 404, {"title": "Not found", "detail": "job 'x' not found"}) == (
        1,
        "punctual: error: 404 Not found: job 'x' not found\n",
    )
    fields = [{"field": "a", "message": "no\nway"}, {"field": "b", "message": "c"}]
    assert _answered(capsys, 422, {"title": "Invalid request", "errors": fields}) == (
        2,
        "punctual: error: 422 Invalid request\n  a: no way; b: c\n",
    )
    assert _answered(capsys, 0, {"title": "cannot reach http://h", "detail": "refused"})[0] == 1


def test_the_docs_say_which_answers_are_exit_2() -> None:
    """The module docstring and docs/cli.md name the statuses the code exits 2 for, and no more;
    neither says every error is exit 2."""
    codes = [str(status) for status in sorted(INPUT_STATUSES)]
    docs = (ROOT / "docs" / "cli.md").read_text()
    assert f"the API answered {', '.join(codes[:-1])} or {codes[-1]} (invalid input)" in docs
    assert cli.__doc__ is not None
    assert f"Exit 2 for invalid input ({', '.join(codes)})" in " ".join(cli.__doc__.split())
    assert "with exit status 2" not in cli.__doc__


# -- calendars put: a file's days that are not a list, --empty with days (QA) -------------------------


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('{"timezone": "UTC", "dates": null}', "dates is a list, each item a YYYY-MM-DD day"),
        ('{"dates": 5}', "dates is a list, each item a YYYY-MM-DD day"),
        ('{"dates": "2026-12-24"}', "dates is a list"),  # it was sent as ["2", "0", "2", ...]
        ('{"ranges": {"start": "2026-12-24", "end": "2026-12-25"}}', "ranges is a list"),
    ],
)
def test_a_calendar_files_days_that_are_not_a_list_are_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, says: str
) -> None:
    """QA: ``"dates": null`` was ``internal error: TypeError`` (exit 1), a string was split into
    its characters and the API named ``'2'``."""
    path = tmp_path / "cal.json"
    path.write_text(content)
    code, out, err = run(capsys, "calendars", "put", "c", "--file", str(path), "--date", "2026-12-25")
    assert (code, out) == (2, "") and says in err and len(err.splitlines()) == 1
    assert "internal error" not in err


@pytest.mark.parametrize("days", [("--date", "2026-12-01"), ("--range", "2026-12-01..2026-12-02")])
def test_empty_with_days_is_refused(capsys: pytest.CaptureFixture[str], days: tuple[str, str]) -> None:
    """QA: ``--empty --date D`` put the calendar with D."""
    code, out, err = run(capsys, "calendars", "put", "c", "--empty", *days)
    assert (code, out) == (2, "") and "--empty puts it with no days" in err
