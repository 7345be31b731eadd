"""Daylight saving: fixed-time expressions behave as Debian cron (gap -> fire once at the
end of the gap, repeat -> first pass only) unless DstOptions says otherwise; expressions
with a wildcard minute or hour follow real time.

Transitions used (all verified against tzdata in test_transition_facts):
- Europe/Berlin 2026: 03-29 01:00Z (02:00 CET -> 03:00 CEST), 10-25 01:00Z (03:00 CEST -> 02:00 CET)
- America/New_York 2026: 03-08 07:00Z (02:00 EST -> 03:00 EDT), 11-01 06:00Z (02:00 EDT -> 01:00 EST)
- Australia/Lord_Howe 2026: 04-04 15:00Z (02:00 +11 -> 01:30 +10:30),
  10-03 15:30Z (02:00 +10:30 -> 02:30 +11): a 30-minute shift.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from punctual.timing.schedules import (
    DstOptions,
    format_instant,
    parse_instant,
    parse_schedule,
    validate_timezone,
)


def run(
    expr: str,
    tz: str,
    after: str,
    count: int,
    gap: str | None = None,
    repeat: str | None = None,
) -> list[str]:
    dst = DstOptions(gap=gap, repeat=repeat)  # type: ignore[arg-type]
    schedule = parse_schedule(expr, tz, dst)
    return [format_instant(s) for s in schedule.slots(parse_instant(after), count=count)]


@pytest.mark.parametrize(
    ("tz", "before", "at", "offset_before", "offset_after"),
    [
        ("Europe/Berlin", "2026-03-29T00:59:59Z", "2026-03-29T01:00:00Z", 60, 120),
        ("Europe/Berlin", "2026-10-25T00:59:59Z", "2026-10-25T01:00:00Z", 120, 60),
        ("America/New_York", "2026-03-08T06:59:59Z", "2026-03-08T07:00:00Z", -300, -240),
        ("America/New_York", "2026-11-01T05:59:59Z", "2026-11-01T06:00:00Z", -240, -300),
        ("Australia/Lord_Howe", "2026-04-04T14:59:59Z", "2026-04-04T15:00:00Z", 660, 630),
        ("Australia/Lord_Howe", "2026-10-03T15:29:59Z", "2026-10-03T15:30:00Z", 630, 660),
    ],
)
def test_transition_facts(tz: str, before: str, at: str, offset_before: int, offset_after: int) -> None:
    zone = validate_timezone(tz)
    assert parse_instant(before).astimezone(zone).utcoffset() == timedelta(minutes=offset_before)
    assert parse_instant(at).astimezone(zone).utcoffset() == timedelta(minutes=offset_after)


# -- spring forward: the gap ----------------------------------------------------------


def test_berlin_gap_fixed_time_fires_once_at_end_of_gap() -> None:
    got = run("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", 2)
    assert got == ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]  # 03:00 CEST, then 02:30 CEST


def test_berlin_gap_fixed_time_skip() -> None:
    got = run("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", 2, gap="skip")
    assert got == ["2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"]


def test_berlin_gap_several_times_in_gap_fire_once() -> None:
    # 02:00, 02:15, 02:30, 02:45 are all skipped: one run at 03:00 CEST, then 03:15 CEST
    got = run("0,15,30,45 2,3 * * *", "Europe/Berlin", "2026-03-29T00:00:00Z", 4)
    assert got == [
        "2026-03-29T01:00:00Z",
        "2026-03-29T01:15:00Z",
        "2026-03-29T01:30:00Z",
        "2026-03-29T01:45:00Z",
    ]


def test_berlin_gap_shifted_slot_and_a_real_slot_at_the_same_instant_are_one() -> None:
    got = run("0 2-3 * * *", "Europe/Berlin", "2026-03-29T00:00:00Z", 3)
    assert got == ["2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z", "2026-03-30T01:00:00Z"]


def test_berlin_gap_wildcard_follows_real_time() -> None:
    got = run("30 * * * *", "Europe/Berlin", "2026-03-28T23:45:00Z", 3)
    assert got == [
        "2026-03-29T00:30:00Z",
        "2026-03-29T01:30:00Z",
        "2026-03-29T02:30:00Z",
    ]  # 01:30, 03:30, 04:30
    # wildcard minute, fixed hour: nothing in the gap, DstOptions ignored
    got = run("*/30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", 2, gap="shift")
    assert got == ["2026-03-30T00:00:00Z", "2026-03-30T00:30:00Z"]


def test_new_york_gap() -> None:
    assert run("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", 2) == [
        "2026-03-08T07:00:00Z",  # 03:00 EDT
        "2026-03-09T06:30:00Z",  # 02:30 EDT
    ]
    assert run("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", 1, gap="skip") == [
        "2026-03-09T06:30:00Z"
    ]


def test_lord_howe_half_hour_gap() -> None:
    # 02:00-02:29 do not exist on 2026-10-04 (local); 02:15 shifts to 02:30 +11 = 15:30Z
    assert run("15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z", 2) == [
        "2026-10-03T15:30:00Z",
        "2026-10-04T15:15:00Z",
    ]
    # 02:30 exists: no shift, no duplicate
    assert run("30 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z", 2) == [
        "2026-10-03T15:30:00Z",
        "2026-10-04T15:30:00Z",
    ]
    # wildcard hour: 02:00 is skipped; 01:00 is 14:30Z, 03:00 is 16:00Z
    assert run("0 * * * *", "Australia/Lord_Howe", "2026-10-03T14:00:00Z", 3) == [
        "2026-10-03T14:30:00Z",
        "2026-10-03T16:00:00Z",
        "2026-10-03T17:00:00Z",
    ]


# -- fall back: the repeated hour ---------------------------------------------------------


def test_berlin_repeat_fixed_time_first_pass_only() -> None:
    got = run("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 2)
    assert got == ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]  # 02:30 CEST; next day 02:30 CET


def test_berlin_repeat_fixed_time_both() -> None:
    got = run("0,30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 5, repeat="both")
    assert got == [
        "2026-10-25T00:00:00Z",
        "2026-10-25T00:30:00Z",
        "2026-10-25T01:00:00Z",
        "2026-10-25T01:30:00Z",
        "2026-10-26T01:00:00Z",
    ]


def test_berlin_repeat_from_inside_the_second_pass() -> None:
    # after = 02:10 CET (second pass): 02:30 already ran on the first pass
    assert run("30 2 * * *", "Europe/Berlin", "2026-10-25T01:10:00Z", 1) == ["2026-10-26T01:30:00Z"]
    assert run("30 2 * * *", "Europe/Berlin", "2026-10-25T01:10:00Z", 1, repeat="both") == [
        "2026-10-25T01:30:00Z"
    ]
    # wildcard: 02:05 on the second pass is still to come when after = 02:10 CEST (first pass)
    assert run("5 * * * *", "Europe/Berlin", "2026-10-25T00:10:00Z", 2) == [
        "2026-10-25T01:05:00Z",
        "2026-10-25T02:05:00Z",
    ]


def test_berlin_repeat_wildcard_both_passes() -> None:
    got = run("30 * * * *", "Europe/Berlin", "2026-10-24T23:00:00Z", 4)
    # 01:30 CEST, 02:30 CEST, 02:30 CET, 03:30 CET
    assert got == [
        "2026-10-24T23:30:00Z",
        "2026-10-25T00:30:00Z",
        "2026-10-25T01:30:00Z",
        "2026-10-25T02:30:00Z",
    ]
    got = run("*/30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 5, repeat="first")
    assert got == [
        "2026-10-25T00:00:00Z",
        "2026-10-25T00:30:00Z",
        "2026-10-25T01:00:00Z",
        "2026-10-25T01:30:00Z",
        "2026-10-26T01:00:00Z",
    ]


def test_new_york_repeat() -> None:
    assert run("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", 2) == [
        "2026-11-01T05:30:00Z",  # 01:30 EDT
        "2026-11-02T06:30:00Z",  # 01:30 EST
    ]
    assert run("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", 2, repeat="both") == [
        "2026-11-01T05:30:00Z",
        "2026-11-01T06:30:00Z",
    ]


def test_lord_howe_half_hour_repeat() -> None:
    # 01:30-01:59 happen twice on 2026-04-05 (local)
    assert run("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z", 2) == [
        "2026-04-04T14:45:00Z",  # 01:45 +11
        "2026-04-05T15:15:00Z",  # next day, 01:45 +10:30
    ]
    assert run("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z", 2, repeat="both") == [
        "2026-04-04T14:45:00Z",
        "2026-04-04T15:15:00Z",
    ]
    # 01:15 is not repeated: once
    assert run("15 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z", 2, repeat="both") == [
        "2026-04-04T14:15:00Z",
        "2026-04-05T14:45:00Z",
    ]
    # every 15 minutes follows real time: a steady 15-minute beat in UTC
    got = run("*/15 * * * *", "Australia/Lord_Howe", "2026-04-04T14:30:00Z", 5)
    assert got == [
        "2026-04-04T14:45:00Z",
        "2026-04-04T15:00:00Z",
        "2026-04-04T15:15:00Z",
        "2026-04-04T15:30:00Z",
        "2026-04-04T15:45:00Z",
    ]


def test_aws_dialect_follows_the_same_dst_rules() -> None:
    assert run("cron(30 2 * * ? *)", "Europe/Berlin", "2026-03-28T12:00:00Z", 1) == ["2026-03-29T01:00:00Z"]
    assert run("cron(30 2 * * ? *)", "Europe/Berlin", "2026-10-24T12:00:00Z", 2) == [
        "2026-10-25T00:30:00Z",
        "2026-10-26T01:30:00Z",
    ]


# -- at -----------------------------------------------------------------------------------


def test_at_in_gap_and_repeat() -> None:
    gap = parse_schedule("at(2026-03-29T02:30:00)", "Europe/Berlin")
    assert [format_instant(s) for s in gap.slots(parse_instant("2026-01-01T00:00:00Z"))] == [
        "2026-03-29T01:00:00Z"
    ]
    repeat = parse_schedule("at(2026-10-25T02:30:00)", "Europe/Berlin")
    assert [format_instant(s) for s in repeat.slots(parse_instant("2026-01-01T00:00:00Z"))] == [
        "2026-10-25T00:30:00Z"
    ]
    # A one-time job fires once: repeat 'both' (refused for a new at() job; one stored before
    # that rule fired twice) is the first pass too
    both = parse_schedule("at(2026-10-25T02:30:00)", "Europe/Berlin", DstOptions(repeat="both"))
    assert [format_instant(s) for s in both.slots(parse_instant("2026-01-01T00:00:00Z"))] == [
        "2026-10-25T00:30:00Z"
    ]


# -- far from a transition, the zone is just an offset -------------------------------------


def test_zone_offset_applies_across_many_transitions() -> None:
    got = run("cron(0 9 1 1,7 ? *)", "America/New_York", "2026-01-01T00:00:00Z", 4)
    assert got == [
        "2026-01-01T14:00:00Z",
        "2026-07-01T13:00:00Z",
        "2027-01-01T14:00:00Z",
        "2027-07-01T13:00:00Z",
    ]
    # first-of-year far ahead, many segments away
    schedule = parse_schedule("cron(0 0 1 1 ? 2150)", "Europe/Berlin")
    assert schedule.next_after(datetime.fromisoformat("2026-01-01T00:00:00+00:00")) == parse_instant(
        "2149-12-31T23:00:00Z"
    )


def test_zone_without_transitions_over_many_years() -> None:
    # Asia/Kolkata has had no transition since 1945: its offset segments are cut at year
    # starts; crossing those cuts must neither repeat nor skip a slot.
    got = run("0 0 1 1 *", "Asia/Kolkata", "2025-01-01T00:00:00Z", 10)
    assert got == [f"{year}-12-31T18:30:00Z" for year in range(2025, 2035)]
    got = run("30 5 29 2 *", "Asia/Kolkata", "2025-01-01T00:00:00Z", 3)
    assert got == ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z", "2036-02-29T00:00:00Z"]
