"""Every kind of invalid schedule input is a ScheduleError with a one-line message that
names the problem."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from punctual.timing.schedules import DstOptions, ScheduleError, parse_instant, parse_schedule


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        # shape
        ("", "empty schedule expression"),
        ("   ", "empty schedule expression"),
        ("cron(" + "0," * 200 + "0 * * * ? *)", "too long (4"),
        ("0 9 * * 1\x00", "control characters"),
        ("0 9 * * lundi\u00e9", "non-ASCII"),
        ("foo(1 2 3)", "unknown schedule kind 'foo(...)'"),
        ("cron(0 9 * * ? *", "malformed expression"),
        ("cron(0 9 (* * ? *))", "nested parentheses"),
        ("cron(0 9 * * ? *) extra", "malformed expression"),
        # AWS cron
        ("cron(0 9 * * ?)", "cron: expected 6 fields"),
        ("cron(0 0 9 * * ? *)", "cron: expected 6 fields"),
        ("cron(0 9 * * * *)", "one of day-of-month and day-of-week must be '?'"),
        ("cron(0 9 ? * ? *)", "only one of day-of-month and day-of-week"),
        ("cron(0 9 1,? * ? *)", "'?' must stand alone in day-of-month"),
        ("cron(? 9 * * ? *)", "'?' is only allowed in day-of-month or day-of-week, got minute"),
        ("cron(60 9 * * ? *)", "cron: minute '60' out of range 0-59"),
        ("cron(0 24 * * ? *)", "cron: hour '24' out of range 0-23"),
        ("cron(0 9 32 * ? *)", "cron: day-of-month '32' out of range 1-31"),
        ("cron(0 9 0 * ? *)", "cron: day-of-month '0' out of range 1-31"),
        ("cron(0 9 1 13 ? *)", "cron: month '13' out of range 1-12"),
        ("cron(0 9 ? * 0 *)", "cron: day-of-week '0' out of range 1-7"),
        ("cron(0 9 ? * 8 *)", "cron: day-of-week '8' out of range 1-7"),
        ("cron(0 9 * * ? 1969)", "cron: year '1969' out of range 1970-2199"),
        ("cron(0 9 * * ? 2200)", "cron: year '2200' out of range 1970-2199"),
        ("cron(0 9 ? * FUN *)", "day-of-week 'FUN' is not a number or day name"),
        ("cron(0 9 1 JANUARY ? *)", "month 'JANUARY' is not a number or month name"),
        ("cron(x 9 * * ? *)", "minute 'x' is not a number"),
        ("cron(0 9-5 * * ? *)", "hour range '9-5' is reversed"),
        ("cron(*/0 9 * * ? *)", "minute step in '*/0' must be at least 1"),
        ("cron(*/x 9 * * ? *)", "minute step 'x' in '*/x' is not a number"),
        ("cron(0,,5 9 * * ? *)", "minute '0,,5' has an empty list item"),
        ("cron(0 9 ? * 2#6 *)", "the occurrence after '#' must be 1-5"),
        ("cron(0 9 ? * 2#0 *)", "the occurrence after '#' must be 1-5"),
        ("cron(0 9 ? * 9#1 *)", "day-of-week '9' out of range 1-7"),
        ("cron(0 9 1#2 * ? *)", "'#' is only allowed in day-of-week"),
        ("cron(0 9 ? * 2W *)", "'W' is only allowed in day-of-month"),
        ("cron(0 9 32W * ? *)", "day-of-month '32' out of range 1-31"),
        ("cron(0 9 L-3 * ? *)", "day-of-month 'L-3' is not supported"),
        ("cron(0 9 ? * 8L *)", "day-of-week '8' out of range 1-7"),
        ("cron(0 9 W * ? *)", "day-of-month 'W' is missing a value"),
        ("cron(0 9 ? * #2 *)", "day-of-week '#2' is missing a value"),
        ("cron(0 9-,5 * * ? *)", "hour '9-' is missing a value"),
        ("cron(0 9 ? * 1-7-2 *)", "day-of-week '7-2' is not a number or day name"),
        # a day special in a range or step is named as such, not its valid part as "not a number"
        ("cron(0 9 ? * 6L-2 *)", "day-of-week '6L-2' is not supported: L, nL or n#k stand alone"),
        ("cron(0 9 ? * 6L/2 *)", "day-of-week '6L/2' is not supported"),
        ("cron(0 9 ? * 2-3#1 *)", "day-of-week '2-3#1' is not supported"),
        ("cron(0 9 15W-20 * ? *)", "day-of-month '15W-20' is not supported: L, LW or nW stand alone"),
        ("cron(0 9 1-5W * ? *)", "day-of-month '1-5W' is not supported"),
        # never fires
        ("cron(0 0 31 2 ? *)", "never fires: no date has day-of-month '31', month '2'"),
        ("cron(0 0 30 2 ? *)", "never fires"),
        ("cron(0 0 31 4,6,9,11 ? *)", "never fires"),
        ("cron(0 0 ? 2 6#5 2026)", "never fires: no date has day-of-week '6#5', month '2', year '2026'"),
        ("cron(0 0 31W 2 ? *)", "never fires"),
        ("0 0 31 2 *", "unix cron: never fires"),
        ("0 0 30 2 *", "unix cron: never fires"),
        # Unix cron
        ("0 9 * *", "unix cron: expected 5 fields"),
        ("0 9 * * 1 2 3", "unix cron: expected 5 fields"),
        ("0 9 * * 1 *", "wrap AWS expressions as cron("),
        ("60 * * * *", "unix cron: minute '60' out of range 0-59"),
        ("0 9 * * 8", "unix cron: day-of-week '8' out of range 0-7"),
        ("0 9 ? * 1", "'?' is AWS-only"),
        ("0 9 L * *", "'L' is AWS-only"),
        ("0 9 15W * *", "'W' is AWS-only"),
        ("0 9 * * 1#2", "'#' is AWS-only"),
        # a crontab's zone prefix (cronie, Kubernetes): the zone is the job's timezone
        (
            "CRON_TZ=Europe/Berlin 0 9 * * *",
            "'CRON_TZ=Europe/Berlin' is not a cron field: give the time zone",
        ),
        ("CRON_TZ=Europe/Berlin 0 9 * *", "'CRON_TZ=Europe/Berlin' is not a cron field"),
        ("TZ=UTC 0 9 * * 1-5", "as the job's timezone ('UTC')"),
        ("@reboot", "unknown macro '@reboot'"),
        ("@every 5m", "unknown macro"),
        # rate / delay
        ("rate(0 minutes)", "rate: N must be at least 1, got 0"),
        ("rate(5 weeks)", "rate: unknown unit 'weeks'"),
        ("rate(-5 minutes)", "rate: expected 'rate(N unit)'"),
        ("rate(1.5 hours)", "rate: expected 'rate(N unit)'"),
        ("rate(minutes)", "rate: expected 'rate(N unit)'"),
        ("rate(5)", "rate: expected 'rate(N unit)'"),
        ("rate(9999999999 days)", "rate: N '9999999999' is too large (at most 9 digits)"),
        ("delay(0 seconds)", "delay: N must be at least 1"),
        ("delay(5 fortnights)", "delay: unknown unit 'fortnights'"),
        # at
        ("at(2026-02-30T00:00:00)", "at: '2026-02-30T00:00:00' is not a valid date and time"),
        ("at(2026-01-01T24:00:00)", "not a valid date and time"),
        ("at(2026-01-01 09:00:00)", "at: expected at(YYYY-MM-DDTHH:MM:SS)"),
        ("at(2026-01-01T09:00:00Z)", "at: expected at(YYYY-MM-DDTHH:MM:SS)"),
        ("at(tomorrow)", "at: expected at(YYYY-MM-DDTHH:MM:SS)"),
        ("at(1969-12-31T23:00:00)", "at: year 1969 out of range 1970-2199"),
        ("at(2200-01-01T00:00:00)", "at: year 2200 out of range 1970-2199"),
        # after
        ("after()", "after: expected at least one parent job id"),
        ("after(a b)", "after: invalid job id 'a b'"),
        ("after(a,,b)", "after: invalid job id ''"),
        ("after(a/b)", "after: invalid job id 'a/b'"),
        ("after(" + "x" * 65 + ")", "after: invalid job id"),
        ("after(a, a)", "after: job id 'a' is listed twice"),
    ],
)
def test_invalid_expression(expr: str, message: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(expr)
    text = str(caught.value)
    assert message in text
    assert "\n" not in text


@pytest.mark.parametrize(
    ("expr", "suggested"),
    [
        # A Unix habit in AWS form: the fix keeps the days asked for (the hint said
        # cron(0 9 * * ? *) for every one of these: every day, MON-FRI or the 1st dropped)
        ("cron(0 9 * * MON-FRI *)", "cron(0 9 ? * MON-FRI *)"),
        ("cron(30 2 1 * * *)", "cron(30 2 1 * ? *)"),
        ("cron(0 9 * * * *)", "cron(0 9 * * ? *)"),
        ("cron(0 9 1 * MON *)", "cron(0 9 1 * ? *) or cron(0 9 ? * MON *)"),
    ],
)
def test_a_cron_without_a_question_mark_is_told_the_one_with_its_days(expr: str, suggested: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(expr)
    assert str(caught.value).endswith(f"e.g. {suggested}"), str(caught.value)
    if " or " not in suggested:
        parse_schedule(suggested)  # the hint is itself a schedule


def test_long_input_is_refused_before_parsing() -> None:
    with pytest.raises(ScheduleError, match=r"too long \(300 characters, at most 256\)"):
        parse_schedule("x" * 300)
    parse_schedule("cron(" + "0," * 119 + "0 * * * ? *)")  # 255 characters is fine


def test_not_a_string() -> None:
    with pytest.raises(ScheduleError, match="must be a string"):
        parse_schedule(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tz", "message"),
    [
        ("Mars/Olympus_Mons", "timezone: unknown time zone 'Mars/Olympus_Mons'"),
        ("", "timezone: empty time zone name"),
        ("Europe", "unknown time zone"),
        ("../etc/passwd", "unknown time zone"),
        ("Europe/Berlin ", "invalid time zone name"),
        ("A" * 200, "invalid time zone name"),
    ],
)
def test_invalid_timezone(tz: str, message: str) -> None:
    with pytest.raises(ScheduleError, match="timezone") as caught:
        parse_schedule("0 9 * * *", tz)
    assert message in str(caught.value)


def test_at_in_gap_with_skip_never_fires() -> None:
    with pytest.raises(ScheduleError, match=r"does not exist in Europe/Berlin \(DST gap\)"):
        parse_schedule("at(2026-03-29T02:30:00)", "Europe/Berlin", DstOptions(gap="skip"))


def test_wholly_past_year_range() -> None:
    now = parse_instant("2026-06-01T00:00:00Z")
    with pytest.raises(ScheduleError, match="never fires again: year range ends in 2025"):
        parse_schedule("cron(0 0 * * ? 2020-2025)", now=now)
    with pytest.raises(ScheduleError, match="never fires after 2026-06-01T00:00:00Z"):
        parse_schedule("cron(0 0 1 1 ? 2026)", now=now)


def test_dst_must_be_options() -> None:
    with pytest.raises(ScheduleError, match="dst must be DstOptions"):
        parse_schedule("0 9 * * *", "UTC", {"gap": "skip"})  # type: ignore[arg-type]


def test_every_node_reads_the_pinned_zone_database_not_the_hosts() -> None:
    """A Lambda image, the ECS image and a laptop each have their own zone database (or none): the
    schedules read only the tzdata package that requirements.txt pins, so two nodes never compute
    different slots of one job."""
    import zoneinfo

    import tzdata

    from punctual.timing.schedules.zones import ZONE_DATABASE

    assert zoneinfo.TZPATH == ()  # the host's directories are not searched
    assert ZONE_DATABASE == tzdata.IANA_VERSION
    pinned = Path(__file__).resolve().parents[2].joinpath("requirements.txt").read_text()
    assert f"tzdata=={tzdata.__version__}" in pinned
    assert parse_schedule("0 9 * * *", "America/New_York").next_after(
        datetime(2026, 7, 1, tzinfo=UTC)
    ) == datetime(2026, 7, 1, 13, 0, tzinfo=UTC)


@pytest.mark.parametrize("zone", ["localtime", "Factory", "posixrules", "posix/Europe/Berlin", "right/UTC"])
def test_a_new_job_names_a_place_but_a_stored_one_keeps_resolving(zone: str) -> None:
    """Names a host's zone database has that are not places (the host's own zone, build artefacts)
    are refused to a new job; a job stored before the rule still reads and computes its slots (the
    pinned database has no localtime: it resolves as Lambda's, UTC), never becoming unreadable."""
    from punctual.models import STORED, JobSpec

    fields = {"schedule": "cron(0 9 * * ? *)", "timezone": zone, "target": {"url": "https://e.example/x"}}
    with pytest.raises(ValueError, match="is not an IANA time zone"):
        JobSpec.model_validate(fields)
    stored = JobSpec.model_validate(fields, context={STORED: True})
    assert stored.parsed_schedule().next_after(datetime(2026, 7, 1, tzinfo=UTC)) is not None
