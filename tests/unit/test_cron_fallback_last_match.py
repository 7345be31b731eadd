"""The second pass of a fall-back hour fires also when nothing matches after it (QA21 BUG 1).

A cron expression whose last matching local times fall in the hour a fall-back repeats (its year
field ends there, or its last matching day of the range) lost the second pass: after the first
pass the next slot was ``None``, as if the schedule had ended. Wildcard minute or hour
expressions fire in both passes by default, fixed-time ones with ``dst.repeat: both``
(docs/schedules.md, docs/eventbridge-scheduler.md).

Transitions used (checked in tests/unit/test_schedules_dst.py::test_transition_facts):
- Europe/Berlin 2026-10-25 01:00Z: 03:00 CEST -> 02:00 CET (02:00-02:59 occurs twice)
- America/New_York 2026-11-01 06:00Z: 02:00 EDT -> 01:00 EST (01:00-01:59 occurs twice)
- Australia/Lord_Howe 2026-04-04 15:00Z: 02:00 +11 -> 01:30 +10:30 (01:30-01:59 occurs twice)
- Europe/Berlin 2199-10-27 01:00Z, the last fall-back before schedules end (year 2199)
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from factories import job as make_job
from factories import spec as make_spec
from punctual.timing.schedules import DstOptions, format_instant, parse_instant, parse_schedule
from punctual.timing.slots import first_slot, next_slot

BERLIN = "Europe/Berlin"
BERLIN_2026 = ["2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z"]


def run(
    expr: str, tz: str, after: str, count: int = 10, repeat: str | None = None, gap: str | None = None
) -> list[str]:
    dst = DstOptions(gap=gap, repeat=repeat) if (gap or repeat) else None  # type: ignore[arg-type]
    schedule = parse_schedule(expr, tz, dst)
    return [format_instant(s) for s in schedule.slots(parse_instant(after), count=count)]


# -- wildcard minute or hour: both passes by default, also on the last night -------------------


@pytest.mark.parametrize(
    ("expr", "tz", "after", "expected"),
    [
        ("cron(*/30 2 25 10 ? 2026)", BERLIN, "2026-10-24T00:00:00Z", BERLIN_2026),
        # the last day of a day range, not of the year field
        ("cron(*/30 2 20-25 10 ? 2026)", BERLIN, "2026-10-24T12:00:00Z", BERLIN_2026),
        (
            "cron(*/30 1 1 11 ? 2026)",
            "America/New_York",
            "2026-10-31T00:00:00Z",
            ["2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-01T06:00:00Z", "2026-11-01T06:30:00Z"],
        ),
        # a 30-minute shift: 01:00 and 01:15 occur once, 01:30 and 01:45 twice
        (
            "cron(*/15 1 5 4 ? 2026)",
            "Australia/Lord_Howe",
            "2026-04-04T00:00:00Z",
            [
                "2026-04-04T14:00:00Z",
                "2026-04-04T14:15:00Z",
                "2026-04-04T14:30:00Z",
                "2026-04-04T14:45:00Z",
                "2026-04-04T15:00:00Z",
                "2026-04-04T15:15:00Z",
            ],
        ),
        # the last fall-back before schedules end (last Sunday of October 2199)
        (
            "cron(*/30 2 ? 10 1L 2199)",
            BERLIN,
            "2199-10-26T00:00:00Z",
            ["2199-10-27T00:00:00Z", "2199-10-27T00:30:00Z", "2199-10-27T01:00:00Z", "2199-10-27T01:30:00Z"],
        ),
    ],
)
def test_wildcard_expression_fires_both_passes_of_its_last_fallback_hour(
    expr: str, tz: str, after: str, expected: list[str]
) -> None:
    assert run(expr, tz, after) == expected


def test_from_between_the_passes_the_second_pass_is_next() -> None:
    assert run("cron(*/30 2 25 10 ? 2026)", BERLIN, "2026-10-25T00:30:00Z") == BERLIN_2026[2:]
    assert run("cron(*/30 2 25 10 ? 2026)", BERLIN, "2026-10-25T01:30:00Z") == []
    assert run("cron(*/15 1 5 4 ? 2026)", "Australia/Lord_Howe", "2026-04-04T14:45:00Z") == [
        "2026-04-04T15:00:00Z",
        "2026-04-04T15:15:00Z",
    ]


def test_parse_with_now_between_the_passes_accepts_the_schedule() -> None:
    now = datetime(2026, 10, 25, 0, 45, tzinfo=UTC)
    schedule = parse_schedule("cron(*/30 2 25 10 ? 2026)", BERLIN, now=now)  # was "never fires after"
    assert schedule.next_after(now) == datetime(2026, 10, 25, 1, 0, tzinfo=UTC)


def test_control_a_later_year_changes_nothing_on_the_fallback_night() -> None:
    assert run("cron(*/30 2 25 10 ? 2026-2027)", BERLIN, "2026-10-24T00:00:00Z", count=6) == [
        *BERLIN_2026,
        "2027-10-25T00:00:00Z",  # a Monday in 2027, still summer time (CEST), no DST change that day
        "2027-10-25T00:30:00Z",
    ]


# -- fixed time: dst.repeat at a final match ---------------------------------------------------


@pytest.mark.parametrize(
    ("repeat", "gap", "expected"),
    [
        (None, None, ["2026-10-25T00:30:00Z"]),  # default: first pass only
        ("first", None, ["2026-10-25T00:30:00Z"]),
        ("first", "skip", ["2026-10-25T00:30:00Z"]),
        ("both", None, ["2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"]),
        ("both", "skip", ["2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"]),
    ],
)
def test_fixed_time_repeat_options_at_a_final_match(
    repeat: str | None, gap: str | None, expected: list[str]
) -> None:
    assert run("cron(30 2 25 10 ? 2026)", BERLIN, "2026-10-24T00:00:00Z", repeat=repeat, gap=gap) == expected
    # from between the passes: only 'both' has a slot left
    assert (
        run("cron(30 2 25 10 ? 2026)", BERLIN, "2026-10-25T00:30:00Z", repeat=repeat, gap=gap) == expected[1:]
    )


@pytest.mark.parametrize(
    ("repeat", "expected"),
    [
        (None, ["2026-04-04T14:45:00Z"]),
        ("first", ["2026-04-04T14:45:00Z"]),
        ("both", ["2026-04-04T14:45:00Z", "2026-04-04T15:15:00Z"]),
    ],
)
def test_fixed_time_repeat_options_with_a_30_minute_shift(repeat: str | None, expected: list[str]) -> None:
    assert (
        run("cron(45 1 5 4 ? 2026)", "Australia/Lord_Howe", "2026-04-04T00:00:00Z", repeat=repeat) == expected
    )


def test_fixed_time_new_york_repeat_both_at_a_final_match() -> None:
    assert run("cron(30 1 1 11 ? 2026)", "America/New_York", "2026-10-31T00:00:00Z", repeat="both") == [
        "2026-11-01T05:30:00Z",
        "2026-11-01T06:30:00Z",
    ]


def test_control_fixed_time_with_a_later_year() -> None:
    assert run("cron(30 2 25 10 ? 2026-2027)", BERLIN, "2026-10-24T00:00:00Z", count=3, repeat="both") == [
        "2026-10-25T00:30:00Z",
        "2026-10-25T01:30:00Z",
        "2027-10-25T00:30:00Z",
    ]
    assert run("cron(30 2 25 10 ? 2026-2027)", BERLIN, "2026-10-24T00:00:00Z", count=2) == [
        "2026-10-25T00:30:00Z",
        "2027-10-25T00:30:00Z",
    ]


# -- job level: the release chain's next_slot and a window on the second pass only --------------


def test_job_next_slot_steps_through_both_passes() -> None:
    now = datetime(2026, 10, 24, tzinfo=UTC)
    job = make_job("j", "cron(*/30 2 25 10 ? 2026)", now=now, timezone=BERLIN)
    seen: list[str] = []
    slot = first_slot(job, now)
    while slot is not None:
        seen.append(format_instant(slot))
        slot = next_slot(job, slot)
    assert seen == BERLIN_2026


@pytest.mark.parametrize(
    ("expr", "dst", "expected"),
    [
        ("cron(*/30 2 25 10 ? 2026)", None, BERLIN_2026[2:]),
        ("cron(30 2 25 10 ? 2026)", {"repeat": "both"}, BERLIN_2026[3:]),
    ],
)
def test_job_window_covering_only_the_second_pass(
    expr: str, dst: dict[str, str] | None, expected: list[str]
) -> None:
    window = {"start_at": "2026-10-25T00:45:00Z", "end_at": "2026-10-25T02:00:00Z"}
    make_spec(expr, timezone=BERLIN, dst=dst, **window)  # was refused: "no slot between start_at and end_at"
    now = datetime(2026, 10, 24, tzinfo=UTC)
    job = make_job("j", expr, now=now, timezone=BERLIN, dst=dst, **window)
    seen: list[str] = []
    slot = first_slot(job, now)
    while slot is not None:
        seen.append(format_instant(slot))
        slot = next_slot(job, slot)
    assert seen == expected
