"""The iCalendar import of the CLI (all-day events) and ``punctual next`` with excluded days."""

from __future__ import annotations

import io
from datetime import date, timedelta
from pathlib import Path

import pytest

from punctual_cli.cli import main
from punctual_cli.ics import IcsError, parse_ics

HOLIDAYS = """BEGIN:VCALENDAR\r
VERSION:2.0\r
PRODID:-//test//EN\r
X-WR-TIMEZONE:Europe/Berlin\r
BEGIN:VEVENT\r
SUMMARY:Christmas\r
DTSTART;VALUE=DATE:20261225\r
DTEND;VALUE=DATE:20261227\r
END:VEVENT\r
BEGIN:VEVENT\r
SUMMARY:New Year's\r
  Day\r
DTSTART;VALUE=DATE:20270101\r
END:VEVENT\r
BEGIN:VEVENT\r
SUMMARY:Carnival week\r
DTSTART:20270208\r
DURATION:P1W\r
END:VEVENT\r
BEGIN:VEVENT\r
SUMMARY:A meeting\r
DTSTART:20261224T100000Z\r
DTEND:20261224T110000Z\r
END:VEVENT\r
END:VCALENDAR\r
"""


def test_all_day_events_become_dates_and_inclusive_ranges() -> None:
    found = parse_ics(HOLIDAYS)
    assert found.timezone == "Europe/Berlin" and found.skipped_timed == 1
    assert found.spec() == {
        "timezone": "Europe/Berlin",
        "dates": ["2027-01-01"],
        "ranges": [
            {"start": "2026-12-25", "end": "2026-12-26"},  # DTEND is exclusive
            {"start": "2027-02-08", "end": "2027-02-14"},
        ],
    }
    assert found.spec("UTC")["timezone"] == "UTC"


def test_names_are_read_in_any_case_and_values_kept() -> None:
    # QA28: a file starting "begin:vcalendar" was refused as not an iCalendar file; RFC 5545: names
    # of properties, parameters and components, and enumerated values, are case-insensitive
    def lower(line: str) -> str:  # (a folded line's continuation, or the end, as it is)
        if not line or line[0] == " ":
            return line
        head, _, value = line.partition(":")
        if head.upper() in ("BEGIN", "END", "DURATION"):
            value = value.lower()
        return f"{head.lower()}:{value}"

    found = parse_ics("\r\n".join(lower(line) for line in HOLIDAYS.split("\r\n")))
    assert found.spec() == parse_ics(HOLIDAYS).spec() and found.timezone == "Europe/Berlin"
    assert found.skipped_timed == 1


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("BEGIN:VEVENT\nEND:VEVENT\n", "BEGIN:VCALENDAR"),
        ("BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20261301\nEND:VEVENT\nEND:VCALENDAR\n", "line 3"),
        (
            "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20261225\nRRULE:FREQ=YEARLY\nEND:VEVENT\n",
            "line 4: recurring events (RRULE)",
        ),
        (
            "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20261225\nDTEND;VALUE=DATE:20261224\nEND:VEVENT\n",
            "ends (2026-12-24) before it starts",
        ),
        ("BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20261225\n", "no END:VEVENT"),
        ("BEGIN:VCALENDAR\nBEGIN:VEVENT\nSUMMARY:x\nEND:VEVENT\n", "no DTSTART"),
        ("BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:20261225\nDURATION:PT5H\nEND:VEVENT\n", "whole days"),
    ],
)
def test_what_cannot_be_read_is_named_with_its_line(text: str, words: str) -> None:
    with pytest.raises(IcsError) as refused:
        parse_ics(text)
    assert words in str(refused.value)


ALARMED = """BEGIN:VCALENDAR\r
VERSION:2.0\r
BEGIN:VEVENT\r
SUMMARY:Christmas\r
DTSTART;VALUE=DATE:20271225\r
BEGIN:VALARM\r
ACTION:DISPLAY\r
DESCRIPTION:Reminder\r
TRIGGER:-PT15M\r
DURATION:P2D\r
REPEAT:2\r
END:VALARM\r
END:VEVENT\r
BEGIN:VEVENT\r
SUMMARY:Boxing Day\r
DTSTART;VALUE=DATE:20271226\r
BEGIN:VALARM\r
ACTION:DISPLAY\r
TRIGGER:-PT15M\r
DURATION:PT5M\r
REPEAT:1\r
END:VALARM\r
END:VEVENT\r
END:VCALENDAR\r
"""


def test_an_alarm_inside_an_event_is_not_the_event() -> None:
    # QA28: a VALARM's DURATION (the interval its reminder repeats at) was read as the event's:
    # a valid file was refused ("DURATION 'PT5M' is not whole days"), or a day's event got longer
    found = parse_ics(ALARMED)
    assert found.spec() == {
        "timezone": "UTC",
        "dates": [],
        "ranges": [{"start": "2027-12-25", "end": "2027-12-26"}],
    }


def test_a_cancelled_event_excludes_no_day() -> None:
    # QA28: an event with STATUS:CANCELLED (a holiday called off, an iTIP cancellation, which no
    # calendar application shows) was imported as a day the jobs did not fire on
    text = HOLIDAYS.replace(
        "DTSTART;VALUE=DATE:20270101\r\n", "DTSTART;VALUE=DATE:20270101\r\nSTATUS:CANCELLED\r\n"
    )
    found = parse_ics(text)
    assert found.skipped_cancelled == 1
    assert "2027-01-01" not in found.spec()["dates"]
    assert parse_ics(text.replace("STATUS:CANCELLED", "STATUS:CONFIRMED")).spec()["dates"] == ["2027-01-01"]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    import sys

    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = main(list(argv))
    finally:
        sys.stdout, sys.stderr = saved
    return code, out.getvalue(), err.getvalue()


def test_next_skips_excluded_days_and_can_show_them(tmp_path: Path) -> None:
    ics = tmp_path / "holidays.ics"
    ics.write_text(HOLIDAYS, encoding="utf-8")
    base = ("next", "cron(0 9 * * ? *)", "--tz", "Europe/Berlin", "--after", "2026-12-24T12:00:00Z")
    code, out, err = run(*base, "--count", "3", "--exclude-ics", str(ics))
    assert (code, err) == (0, "")
    assert out.split() == ["2026-12-27T08:00:00Z", "2026-12-28T08:00:00Z", "2026-12-29T08:00:00Z"]
    code, out, _ = run(*base, "--count", "2", "--exclude-date", "2026-12-25", "--show-excluded")
    assert out.splitlines() == [
        "2026-12-25T08:00:00Z  excluded",
        "2026-12-26T08:00:00Z",
        "2026-12-27T08:00:00Z",
    ]
    # the day is a day of the exclusion's zone: 23:30Z on the 24th is already the 25th in Berlin
    late = ("next", "cron(30 23 * * ? *)", "--after", "2026-12-24T12:00:00Z", "--count", "1")
    assert run(*late, "--exclude-date", "2026-12-25")[1].split() == ["2026-12-24T23:30:00Z"]
    in_berlin = run(*late, "--exclude-date", "2026-12-25", "--exclude-tz", "Europe/Berlin")
    assert in_berlin[1].split() == ["2026-12-25T23:30:00Z"]


@pytest.mark.parametrize(("expression", "count"), [("rate(1 hour)", 2), ("delay(1 hour)", 1)])
def test_next_keeps_a_period_on_its_grid_past_excluded_days(expression: str, count: int) -> None:
    # QA28: a run of excluded days passed over at once restarted the grid where the walk resumed
    # (00:00, 01:00), not where a job registered at --after fires (00:30, 01:30; a delay() chain goes
    # on N after each excluded slot), nor what --show-excluded listed; a delay() listed five slots
    base = ("next", expression, "--after", "2027-01-10T23:30:00Z", "--exclude-date", "2027-01-11")
    expected = ["2027-01-12T00:30:00Z", "2027-01-12T01:30:00Z"][:count]
    assert run(*base, "--count", "2")[1].split() == expected
    shown = run(*base, "--count", "2", "--show-excluded")[1].splitlines()
    assert [line for line in shown if "excluded" not in line] == expected
    assert len(shown) == 24 + count  # the holiday's 24 slots, each an hour after the one before


def test_next_refuses_bad_exclusions_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ics"
    bad.write_text(
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20261225\nRRULE:FREQ=YEARLY\nEND:VEVENT\n"
    )
    for extra in (
        ("--exclude-date", "2026-02-30"),
        ("--exclude-ics", str(bad)),
        ("--exclude-ics", str(tmp_path / "missing.ics")),
        ("--exclude-date", "2026-12-25", "--exclude-tz", "Mars/Olympus"),
    ):
        code, out, err = run("next", "rate(1 day)", *extra)
        assert code == 2 and out == "" and err.startswith("punctual: error: ") and err.count("\n") == 1, (
            extra,
            err,
        )


def test_touching_days_and_ranges_are_merged_so_a_long_run_of_days_fits_the_limits() -> None:
    # QA: 6,000 consecutive one-day events were 6,000 dates, refused past the calendar's 5,000
    events = "".join(
        f"BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:{day:%Y%m%d}\r\nEND:VEVENT\r\n"
        for day in (date(2030, 1, 1) + timedelta(days=n) for n in range(6000))
    )
    extra = (
        "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20500101\r\nEND:VEVENT\r\n"  # alone: a date
        "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20500103\r\nDTEND;VALUE=DATE:20500106\r\nEND:VEVENT\r\n"
        "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20500105\r\nDTEND;VALUE=DATE:20500109\r\nEND:VEVENT\r\n"
        "BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20500109\r\nEND:VEVENT\r\n"  # touches the range before
    )
    found = parse_ics(f"BEGIN:VCALENDAR\r\n{events}{extra}END:VCALENDAR\r\n")
    last = date(2030, 1, 1) + timedelta(days=5999)
    assert found.spec() == {
        "timezone": "UTC",
        "dates": ["2050-01-01"],
        "ranges": [
            {"start": "2030-01-01", "end": last.isoformat()},
            {"start": "2050-01-03", "end": "2050-01-09"},
        ],
    }
