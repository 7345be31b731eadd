"""Schedule grammar and semantics: every rule of issue 2 except DST and invalid input
(see test_schedules_dst.py and test_schedules_invalid.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from punctual.timing.schedules import (
    AfterSchedule,
    AtSchedule,
    CronSchedule,
    DelaySchedule,
    DstOptions,
    RateSchedule,
    ScheduleError,
    format_instant,
    jitter_offset_s,
    parse_instant,
    parse_schedule,
    validate_timezone,
)


def utc(text: str) -> datetime:
    return parse_instant(text)


def fmt(slots: list[datetime]) -> list[str]:
    return [format_instant(s) for s in slots]


def slots(expr: str, after: str, count: int = 5, tz: str = "UTC", anchor: str | None = None) -> list[str]:
    schedule = parse_schedule(expr, tz)
    return fmt(schedule.slots(utc(after), utc(anchor) if anchor else None, count))


# -- kinds and attributes -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "kind", "cls"),
    [
        ("cron(0 9 ? * MON-FRI *)", "cron", CronSchedule),
        ("0 9 * * 1-5", "unix", CronSchedule),
        ("@daily", "unix", CronSchedule),
        ("rate(5 minutes)", "rate", RateSchedule),
        ("at(2030-01-01T00:00:00)", "at", AtSchedule),
        ("delay(10 seconds)", "delay", DelaySchedule),
        ("after(extract, load_2)", "after", AfterSchedule),
    ],
)
def test_kind_of_each_expression(expr: str, kind: str, cls: type) -> None:
    schedule = parse_schedule(f"  {expr}  ", "Europe/Berlin")
    assert isinstance(schedule, cls)
    assert schedule.kind == kind
    assert schedule.expression == expr
    assert schedule.timezone == "Europe/Berlin"


def test_parents_and_period() -> None:
    assert parse_schedule("after(a, b-2,c_3)").parents == ("a", "b-2", "c_3")
    assert parse_schedule("rate(5 minutes)").period == timedelta(minutes=5)
    assert parse_schedule("delay(2 hours)").period == timedelta(hours=2)
    assert parse_schedule("cron(0 9 * * ? *)").period is None
    assert parse_schedule("cron(0 9 * * ? *)").parents == ()


def test_schedules_compare_by_expression_zone_and_dst() -> None:
    assert parse_schedule("0 9 * * *", "UTC") == parse_schedule("0 9 * * *", "UTC")
    assert parse_schedule("0 9 * * *", "UTC") != parse_schedule("0 9 * * *", "Europe/Berlin")
    assert len({parse_schedule("rate(1 day)"), parse_schedule("rate(1 day)")}) == 1


# -- slot shape ---------------------------------------------------------------------------


def test_slots_are_strictly_after_whole_second_aware_utc() -> None:
    schedule = parse_schedule("* * * * *")
    after = datetime(2026, 1, 1, 10, 0, 0, 500_000, tzinfo=UTC)
    first = schedule.next_after(after)
    assert first == datetime(2026, 1, 1, 10, 1, tzinfo=UTC)
    assert first.tzinfo is UTC and first.microsecond == 0
    # an instant exactly on a slot is not "after" it
    assert schedule.next_after(datetime(2026, 1, 1, 10, 1, tzinfo=UTC)) == datetime(
        2026, 1, 1, 10, 2, tzinfo=UTC
    )
    # just before the slot
    assert schedule.next_after(datetime(2026, 1, 1, 10, 0, 59, 999_999, tzinfo=UTC)) == first


def test_after_in_another_zone_is_the_same_instant() -> None:
    schedule = parse_schedule("0 12 * * *")
    berlin = datetime(2026, 6, 1, 13, 30, tzinfo=validate_timezone("Europe/Berlin"))  # 11:30Z
    assert format_instant(schedule.next_after(berlin) or berlin) == "2026-06-01T12:00:00Z"


def test_naive_after_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_schedule("* * * * *").next_after(datetime(2026, 1, 1))


def test_slots_count() -> None:
    schedule = parse_schedule("*/15 * * * *")
    assert schedule.slots(utc("2026-01-01T00:00:00Z"), count=0) == []
    assert len(schedule.slots(utc("2026-01-01T00:00:00Z"), count=7)) == 7
    with pytest.raises(ValueError):
        schedule.slots(utc("2026-01-01T00:00:00Z"), count=-1)


# -- AWS cron -----------------------------------------------------------------------------


def test_aws_weekdays_are_one_based_from_sunday() -> None:
    # 2026-01-04 is a Sunday
    assert slots("cron(0 9 ? * 1 *)", "2026-01-01T00:00:00Z", 2) == [
        "2026-01-04T09:00:00Z",
        "2026-01-11T09:00:00Z",
    ]
    assert slots("cron(0 9 ? * 7 *)", "2026-01-01T00:00:00Z", 1) == ["2026-01-03T09:00:00Z"]
    assert slots("cron(0 9 ? * 2-6 *)", "2026-01-02T10:00:00Z", 3) == [
        "2026-01-05T09:00:00Z",
        "2026-01-06T09:00:00Z",
        "2026-01-07T09:00:00Z",
    ]


def test_names_are_case_insensitive() -> None:
    a = slots("cron(0 9 ? jan-mar Mon-FRI *)", "2026-01-01T00:00:00Z", 10)
    b = slots("cron(0 9 ? 1-3 2-6 *)", "2026-01-01T00:00:00Z", 10)
    assert a == b
    assert slots("cron(0 0 1 DEC ? *)", "2026-01-01T00:00:00Z", 1) == ["2026-12-01T00:00:00Z"]


def test_steps_lists_and_ranges() -> None:
    assert slots("cron(0/15 * * * ? *)", "2026-01-01T00:00:00Z", 4) == [
        "2026-01-01T00:15:00Z",
        "2026-01-01T00:30:00Z",
        "2026-01-01T00:45:00Z",
        "2026-01-01T01:00:00Z",
    ]
    assert slots("cron(5/20 * * * ? *)", "2026-01-01T00:00:00Z", 4) == [
        "2026-01-01T00:05:00Z",
        "2026-01-01T00:25:00Z",
        "2026-01-01T00:45:00Z",
        "2026-01-01T01:05:00Z",
    ]
    assert slots("cron(*/30 8-9,17 * * ? *)", "2026-01-01T00:00:00Z", 6) == [
        "2026-01-01T08:00:00Z",
        "2026-01-01T08:30:00Z",
        "2026-01-01T09:00:00Z",
        "2026-01-01T09:30:00Z",
        "2026-01-01T17:00:00Z",
        "2026-01-01T17:30:00Z",
    ]
    assert slots("cron(0 0 1-10/3 * ? *)", "2026-01-01T00:00:00Z", 3) == [
        "2026-01-04T00:00:00Z",
        "2026-01-07T00:00:00Z",
        "2026-01-10T00:00:00Z",
    ]


def test_last_day_of_month() -> None:
    assert slots("cron(0 12 L * ? *)", "2024-01-15T00:00:00Z", 3) == [
        "2024-01-31T12:00:00Z",
        "2024-02-29T12:00:00Z",  # leap year
        "2024-03-31T12:00:00Z",
    ]
    assert slots("cron(0 12 L 2 ? *)", "2026-01-01T00:00:00Z", 1) == ["2026-02-28T12:00:00Z"]


def test_last_weekday_of_month() -> None:
    # Jan 2026 ends on a Saturday, May 2026 on a Sunday, Mar 2026 on a Tuesday.
    assert slots("cron(0 9 LW 1 ? 2026)", "2026-01-01T00:00:00Z", 1) == ["2026-01-30T09:00:00Z"]
    assert slots("cron(0 9 LW 5 ? 2026)", "2026-01-01T00:00:00Z", 1) == ["2026-05-29T09:00:00Z"]
    assert slots("cron(0 9 LW 3 ? 2026)", "2026-01-01T00:00:00Z", 1) == ["2026-03-31T09:00:00Z"]


@pytest.mark.parametrize(
    ("dom", "month", "expected"),
    [
        ("15W", 2, "2026-02-16"),  # Sunday -> Monday after
        ("15W", 8, "2026-08-14"),  # Saturday -> Friday before
        ("15W", 4, "2026-04-15"),  # Wednesday: itself
        ("1W", 8, "2026-08-03"),  # Saturday the 1st -> Monday the 3rd, never July
        ("1W", 2, "2026-02-02"),  # Sunday the 1st -> Monday the 2nd
        ("31W", 1, "2026-01-30"),  # Saturday the 31st -> Friday the 30th
        ("31W", 5, "2026-05-29"),  # Sunday the last day -> Friday the 29th, never June
        ("30W", 11, "2026-11-30"),  # Monday
    ],
)
def test_nearest_weekday(dom: str, month: int, expected: str) -> None:
    assert slots(f"cron(0 0 {dom} {month} ? 2026)", "2026-01-01T00:00:00Z", 1) == [f"{expected}T00:00:00Z"]


def test_nearest_weekday_skips_months_without_that_day() -> None:
    # 31W: no day in 30-day months (nor February)
    got = slots("cron(0 0 31W * ? 2026)", "2026-01-01T00:00:00Z", 7)
    assert [g[:7] for g in got] == [
        "2026-01",
        "2026-03",
        "2026-05",
        "2026-07",
        "2026-08",
        "2026-10",
        "2026-12",
    ]


def test_nth_weekday() -> None:
    # first Monday; 2#1 from the done check
    assert slots("cron(0 9 ? * 2#1 *)", "2026-01-01T00:00:00Z", 3) == [
        "2026-01-05T09:00:00Z",
        "2026-02-02T09:00:00Z",
        "2026-03-02T09:00:00Z",
    ]
    # fifth Friday: only months that have one
    got = slots("cron(0 0 ? * 6#5 2026)", "2026-01-01T00:00:00Z", 4)
    assert got == [
        "2026-01-30T00:00:00Z",
        "2026-05-29T00:00:00Z",
        "2026-07-31T00:00:00Z",
        "2026-10-30T00:00:00Z",
    ]
    assert slots("cron(0 0 ? * FRI#3 *)", "2026-01-01T00:00:00Z", 1) == ["2026-01-16T00:00:00Z"]


def test_last_weekday_n_of_month() -> None:
    # 6L = last Friday; L alone in day-of-week = Saturday (last day of the week)
    assert slots("cron(0 0 ? * 6L 2026)", "2026-01-01T00:00:00Z", 2) == [
        "2026-01-30T00:00:00Z",
        "2026-02-27T00:00:00Z",
    ]
    assert slots("cron(0 0 ? * L *)", "2026-01-01T00:00:00Z", 2) == [
        "2026-01-03T00:00:00Z",
        "2026-01-10T00:00:00Z",
    ]


def test_year_field_and_end_of_search() -> None:
    assert slots("cron(0 0 1 1 ? 2027-2029)", "2026-06-01T00:00:00Z", 5) == [
        "2027-01-01T00:00:00Z",
        "2028-01-01T00:00:00Z",
        "2029-01-01T00:00:00Z",
    ]
    assert slots("cron(0 0 1 1 ? 2030/10)", "2026-06-01T00:00:00Z", 2) == [
        "2030-01-01T00:00:00Z",
        "2040-01-01T00:00:00Z",
    ]
    last = parse_schedule("cron(0 0 1 1 ? *)")
    assert last.next_after(utc("2199-01-01T00:00:00Z")) is None
    assert last.next_after(utc("2198-06-01T00:00:00Z")) == utc("2199-01-01T00:00:00Z")
    assert parse_schedule("0 0 * * *").next_after(utc("2250-01-01T00:00:00Z")) is None


def test_year_range_wholly_past_is_rejected_only_relative_to_now() -> None:
    parse_schedule("cron(0 0 1 1 ? 2000-2001)")  # fires in 2000: valid as such
    with pytest.raises(ScheduleError, match=r"year range ends in 2001"):
        parse_schedule("cron(0 0 1 1 ? 2000-2001)", now=utc("2026-01-01T00:00:00Z"))
    parse_schedule("cron(0 0 1 1 ? 2000-2030)", now=utc("2026-01-01T00:00:00Z"))


def test_before_1970_starts_in_1970() -> None:
    assert slots("cron(0 0 1 1 ? *)", "1900-01-01T00:00:00Z", 1) == ["1970-01-01T00:00:00Z"]


def test_second_day_of_week_field_rule_aws() -> None:
    # dom given, dow '?': day of month rules; '*' in either with '?' in the other is every day
    assert slots("cron(0 0 * * ? *)", "2026-01-01T00:00:00Z", 2) == [
        "2026-01-02T00:00:00Z",
        "2026-01-03T00:00:00Z",
    ]
    assert slots("cron(0 0 ? * * *)", "2026-01-01T00:00:00Z", 2) == [
        "2026-01-02T00:00:00Z",
        "2026-01-03T00:00:00Z",
    ]


# -- Unix cron ----------------------------------------------------------------------------


def test_unix_or_rule_when_both_day_fields_restricted() -> None:
    # the 13th or any Friday (Vixie); Jan 2026: Fri 2, Fri 9, Tue 13, Fri 16
    assert slots("0 0 13 * 5", "2026-01-01T00:00:00Z", 4) == [
        "2026-01-02T00:00:00Z",
        "2026-01-09T00:00:00Z",
        "2026-01-13T00:00:00Z",
        "2026-01-16T00:00:00Z",
    ]


def test_unix_and_rule_when_a_day_field_starts_with_star() -> None:
    # '*/10' starts with '*': both must match (days 1, 11, 21, 31 that are Fridays)
    assert slots("0 0 */10 * 5", "2026-01-01T00:00:00Z", 3) == [
        "2026-05-01T00:00:00Z",
        "2026-07-31T00:00:00Z",
        "2026-08-21T00:00:00Z",
    ]
    # dom restricted, dow '*': day of month only
    assert slots("0 0 13 * *", "2026-01-01T00:00:00Z", 1) == ["2026-01-13T00:00:00Z"]


def test_unix_sunday_is_zero_and_seven() -> None:
    zero = slots("0 0 * * 0", "2026-01-01T00:00:00Z", 5)
    assert (
        zero
        == slots("0 0 * * 7", "2026-01-01T00:00:00Z", 5)
        == slots("0 0 * * SUN", "2026-01-01T00:00:00Z", 5)
    )
    assert zero[0] == "2026-01-04T00:00:00Z"
    # 5-7: Friday, Saturday, Sunday
    assert slots("0 0 * * 5-7", "2026-01-01T00:00:00Z", 3) == [
        "2026-01-02T00:00:00Z",
        "2026-01-03T00:00:00Z",
        "2026-01-04T00:00:00Z",
    ]


def test_unix_macros() -> None:
    assert slots("@hourly", "2026-01-01T00:30:00Z", 1) == ["2026-01-01T01:00:00Z"]
    assert slots("@daily", "2026-01-01T00:30:00Z", 1) == ["2026-01-02T00:00:00Z"]
    assert slots("@weekly", "2026-01-01T00:30:00Z", 1) == ["2026-01-04T00:00:00Z"]
    assert slots("@monthly", "2026-01-01T00:30:00Z", 1) == ["2026-02-01T00:00:00Z"]
    assert slots("@yearly", "2026-01-01T00:30:00Z", 1) == ["2027-01-01T00:00:00Z"]


def test_unix_single_value_with_step_runs_to_the_top() -> None:
    assert slots("50/5 * * * *", "2026-01-01T00:00:00Z", 3) == [
        "2026-01-01T00:50:00Z",
        "2026-01-01T00:55:00Z",
        "2026-01-01T01:50:00Z",
    ]


def test_aws_and_unix_agree_with_zone() -> None:
    aws = slots("cron(15 8 ? * MON-FRI *)", "2026-03-01T00:00:00Z", 20, tz="America/New_York")
    unix = slots("15 8 * * 1-5", "2026-03-01T00:00:00Z", 20, tz="America/New_York")
    assert aws == unix


# -- rate ---------------------------------------------------------------------------------


def test_rate_from_anchor_is_a_fixed_grid() -> None:
    expr = "rate(90 seconds)"
    assert slots(expr, "2026-01-01T00:00:00Z", 3) == [
        "2026-01-01T00:01:30Z",
        "2026-01-01T00:03:00Z",
        "2026-01-01T00:04:30Z",
    ]
    # anchored: the grid anchor + k*N regardless of `after`
    assert slots(expr, "2026-01-01T00:10:00Z", 2, anchor="2026-01-01T00:00:00Z") == [
        "2026-01-01T00:10:30Z",
        "2026-01-01T00:12:00Z",
    ]
    # an anchor in the future is the first slot (k = 0)
    assert slots(expr, "2026-01-01T00:00:00Z", 1, anchor="2026-01-01T05:00:00Z") == ["2026-01-01T05:00:00Z"]
    # an instant on the grid is not "after" itself
    schedule = parse_schedule(expr)
    anchor = utc("2026-01-01T00:00:00Z")
    assert schedule.next_after(utc("2026-01-01T00:03:00Z"), anchor) == utc("2026-01-01T00:04:30Z")


def test_rate_units_and_plurals_are_lenient() -> None:
    for expr, seconds in [
        ("rate(1 second)", 1),
        ("rate(1 seconds)", 1),
        ("rate(2 second)", 2),
        ("rate(1 minute)", 60),
        ("rate(3 hours)", 3 * 3600),
        ("rate(1 day)", 86400),
        ("rate(7 days)", 7 * 86400),
        ("RATE(5 MINUTES)", 300),
    ]:
        assert parse_schedule(expr).period == timedelta(seconds=seconds), expr


def test_rate_ignores_dst() -> None:
    # across the Berlin spring-forward night: still every 3600 s of elapsed time
    got = slots("rate(1 hour)", "2026-03-28T23:00:00Z", 4, tz="Europe/Berlin")
    assert got == [
        "2026-03-29T00:00:00Z",
        "2026-03-29T01:00:00Z",
        "2026-03-29T02:00:00Z",
        "2026-03-29T03:00:00Z",
    ]


def test_rate_sub_second_anchor_is_rounded_up() -> None:
    schedule = parse_schedule("rate(10 seconds)")
    after = datetime(2026, 1, 1, 0, 0, 0, 250_000, tzinfo=UTC)
    assert schedule.next_after(after) == utc("2026-01-01T00:00:11Z")


def test_rate_stops_at_the_search_bound() -> None:
    schedule = parse_schedule("rate(365 days)")
    assert schedule.next_after(utc("2199-12-30T00:00:00Z")) is None


# -- at -----------------------------------------------------------------------------------


def test_at_fires_once_in_local_time() -> None:
    schedule = parse_schedule("at(2030-06-01T09:30:00)", "Europe/Berlin")
    assert fmt(schedule.slots(utc("2026-01-01T00:00:00Z"))) == ["2030-06-01T07:30:00Z"]
    assert schedule.next_after(utc("2030-06-01T07:30:00Z")) is None
    assert schedule.next_after(utc("2030-06-01T07:29:59Z")) == utc("2030-06-01T07:30:00Z")
    assert parse_schedule("at(2030-06-01T09:30:15)").next_after(utc("2026-01-01T00:00:00Z")) == utc(
        "2030-06-01T09:30:15Z"
    )


# -- delay --------------------------------------------------------------------------------


def test_delay_first_from_anchor_then_from_finish() -> None:
    schedule = parse_schedule("delay(10 minutes)")
    anchor = utc("2026-01-01T00:00:00Z")
    assert schedule.next_after(anchor, anchor) == utc("2026-01-01T00:10:00Z")
    # a run finished at 00:13:20.4: next at ceil(finish) + 10 min
    finish = datetime(2026, 1, 1, 0, 13, 20, 400_000, tzinfo=UTC)
    assert schedule.next_after(finish, anchor) == utc("2026-01-01T00:23:21Z")
    assert schedule.next_after(finish) == utc("2026-01-01T00:23:21Z")
    # slots: only the first, later ones depend on when runs finish
    assert fmt(schedule.slots(anchor, anchor, count=5)) == ["2026-01-01T00:10:00Z"]


# -- after --------------------------------------------------------------------------------


def test_after_has_no_time_slots() -> None:
    schedule = parse_schedule("after(extract)")
    with pytest.raises(ScheduleError, match="fire when their parents succeed"):
        schedule.next_after(utc("2026-01-01T00:00:00Z"))
    with pytest.raises(ScheduleError, match="fire when their parents succeed"):
        schedule.slots(utc("2026-01-01T00:00:00Z"))


# -- instants, zones and jitter -----------------------------------------------------------


def test_format_and_parse_instant() -> None:
    assert format_instant(datetime(2026, 3, 1, 8, 5, 9, 999_999, tzinfo=UTC)) == "2026-03-01T08:05:09Z"
    assert format_instant(datetime(2026, 3, 1, 8, 5, 9)) == "2026-03-01T08:05:09Z"
    assert parse_instant("2026-03-01T09:05:09+01:00") == datetime(2026, 3, 1, 8, 5, 9, tzinfo=UTC)
    assert parse_instant("2026-03-01T08:05:09Z") == datetime(2026, 3, 1, 8, 5, 9, tzinfo=UTC)
    assert parse_instant("2026-03-01T08:05:09") == datetime(2026, 3, 1, 8, 5, 9, tzinfo=UTC)
    assert parse_instant("2026-03-01T08:05:09.25Z").microsecond == 250_000
    assert parse_instant(" 2026-03-01T08:05:09Z ").tzinfo is UTC


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z", "2026-01-01T25:00:00Z", "1" * 100])
def test_parse_instant_rejects_garbage(text: str) -> None:
    with pytest.raises(ScheduleError, match="invalid instant"):
        parse_instant(text)


def test_validate_timezone() -> None:
    assert validate_timezone("Australia/Lord_Howe").key == "Australia/Lord_Howe"
    for bad in ["", "Mars/Olympus", "Europe", "../../etc/passwd", "x" * 100, "Europe/Berlin\n"]:
        with pytest.raises(ScheduleError, match="timezone"):
            validate_timezone(bad)


def test_jitter_is_deterministic_and_bounded() -> None:
    slot = utc("2026-01-01T09:00:00Z")
    values = [jitter_offset_s(f"job-{i}", slot, 30) for i in range(500)]
    assert all(0 <= v <= 30 for v in values)
    assert len(set(values)) > 20  # spread, not constant
    assert values == [jitter_offset_s(f"job-{i}", slot, 30) for i in range(500)]
    # pinned values: changing the hash or its input layout would move replayed dispatches
    assert jitter_offset_s("job-1", slot, 1_000_000) == 805174
    assert jitter_offset_s("job-1", slot, 30) == 3
    assert jitter_offset_s("job-1", slot, 0) == 0
    # per slot, not per job only
    assert len({jitter_offset_s("job-1", slot + timedelta(minutes=i), 1_000_000) for i in range(10)}) > 1
    with pytest.raises(ValueError):
        jitter_offset_s("job-1", slot, -1)


def test_dst_options_validate_values() -> None:
    DstOptions(gap="skip", repeat="both")
    with pytest.raises(ScheduleError, match="gap"):
        DstOptions(gap="later")  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match="repeat"):
        DstOptions(repeat="twice")  # type: ignore[arg-type]


def test_rate_slots_without_anchor_keep_one_grid_from_a_sub_second_after() -> None:
    schedule = parse_schedule("rate(10 seconds)")
    after = datetime(2026, 1, 1, 0, 0, 0, 250_000, tzinfo=UTC)
    assert fmt(schedule.slots(after, count=3)) == [
        "2026-01-01T00:00:11Z",
        "2026-01-01T00:00:21Z",
        "2026-01-01T00:00:31Z",
    ]
