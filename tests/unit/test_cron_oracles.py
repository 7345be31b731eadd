"""Punctual's Unix cron against two independent implementations: croniter and cronsim.

Hypothesis draws 5-field expressions from the grammar all three read (``*``, numbers,
month and day names, ranges, steps, lists; day-of-week 0-7) and instants from 2020 to 2035
in zones with and without daylight saving; the next slots must be the same instants.

The known differences are listed here, each one a test that pins what every engine does,
and the property tests leave out exactly those cases, nothing else:

1. **Day fields with a ``*``-prefixed step (croniter).** Vixie cron ORs day-of-month and
   day-of-week only when neither field starts with ``*``: ``0 0 */2 * 1`` is "odd days that
   are Mondays". Punctual and cronsim follow Vixie; croniter ORs (any odd day, or a Monday).
2. **A fixed-time job on a fall-back night (croniter).** A repeated local time fires once
   (Debian cron): ``30 2 * * *`` in Europe/Berlin runs once on 2026-10-25. croniter runs it
   on both passes.
3. **A non-fixed expression in a spring-forward gap (croniter).** ``*/30 2 * * *`` follows
   real time: the skipped 02:00-02:59 has no slot. croniter fires once at the end of the gap.
4. **Extensions beyond Vixie cron (both).** ``L``, ``#``, ``W`` and ``?`` are AWS cron in
   Punctual (``cron(...)``); the Unix form refuses them. croniter and cronsim accept some in
   5-field expressions.
5. **A one-value range (croniter, cronsim).** ``5-5`` is minute 5 and ``5-5/2`` too, as in
   Vixie cron. croniter reads ``a-a`` as ``*`` (every minute, every day of the week);
   cronsim reads ``a-a/s`` as ``a/s`` (5, 7, 9, ... 59).
6. **``v/s`` in day-of-week (croniter).** It runs to the field's top, 7 (Sunday again), as
   the range 0-7 does: ``1/2`` is Monday, Wednesday, Friday and Sunday. croniter stops at 6.
7. **Expressions that never fire.** ``0 0 30 2 *``: Punctual refuses them when the job is
   registered; croniter and cronsim raise when asked for a slot (not compared).

Not a difference: a fixed time inside a spring-forward gap fires once at the end of the
gap in all three (``30 2 * * *``, Berlin, 2026-03-29: 03:00 local).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import croniter
import cronsim
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from punctual.timing.schedules import ScheduleError, parse_schedule

ORACLE = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOTS = 6  # compared per example
ZONES = ["UTC", "Asia/Kolkata", "Europe/Berlin", "America/New_York", "Australia/Sydney"]
MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]

Engine = Callable[[str, str, datetime, int], list[datetime]]


def punctual_slots(expression: str, zone: str, start: datetime, count: int) -> list[datetime]:
    schedule = parse_schedule(expression, zone)
    slots: list[datetime] = []
    after = start
    while len(slots) < count:
        slot = schedule.next_after(after)
        assert slot is not None
        slots.append(slot)
        after = slot
    return slots


def croniter_slots(expression: str, zone: str, start: datetime, count: int) -> list[datetime]:
    it = croniter.croniter(expression, start.astimezone(ZoneInfo(zone)))
    return [it.get_next(datetime).astimezone(UTC) for _ in range(count)]


def cronsim_slots(expression: str, zone: str, start: datetime, count: int) -> list[datetime]:
    it = cronsim.CronSim(expression, start.astimezone(ZoneInfo(zone)))
    return [next(it).astimezone(UTC) for _ in range(count)]


# ---------------------------------------------------------------- expressions all three read


def field(lo: int, hi: int, names: list[str] | None = None) -> st.SearchStrategy[str]:
    """One cron field: ``*``, ``*/s``, ``v``, ``a-b``, ``a-b/s``, ``v/s`` or a list of items."""

    def value(number: int, named: bool) -> str:
        return names[number - lo] if named and names is not None and number - lo < len(names) else str(number)

    numbers = st.integers(lo, hi)
    named = st.booleans() if names else st.just(False)
    single = st.builds(value, numbers, named)
    span = st.tuples(numbers, numbers, named).map(
        lambda t: f"{value(min(t[0], t[1]), t[2])}-{value(max(t[0], t[1]), t[2])}"
    )
    step = st.integers(1, max(1, (hi - lo) // 2))
    stepped = st.one_of(
        step.map(lambda s: f"*/{s}"),
        st.tuples(span, step).map(lambda t: f"{t[0]}/{t[1]}"),
        st.tuples(numbers, step).map(lambda t: f"{t[0]}/{t[1]}"),
    )
    item = st.one_of(single, span, stepped)
    return st.one_of(
        st.just("*"),
        item,
        st.lists(st.one_of(single, span), min_size=2, max_size=3).map(",".join),
    )


EXPRESSIONS = st.tuples(
    field(0, 59),
    field(0, 23),
    field(1, 31),
    field(1, 12, MONTHS),
    field(0, 7, [*DAYS, "SUN"]),
).map(" ".join)
STARTS = st.datetimes(datetime(2020, 1, 1), datetime(2035, 1, 1)).map(lambda d: d.replace(tzinfo=UTC))


def fires(expression: str, zone: str = "UTC") -> bool:
    """Whether Punctual accepts the expression (one that never fires is refused)."""
    try:
        parse_schedule(expression, zone).next_after(datetime(2020, 1, 1, tzinfo=UTC))
    except ScheduleError:
        return False
    return True


_NAMES = {name: i + 1 for i, name in enumerate(MONTHS)} | {name: i for i, name in enumerate(DAYS)}


def one_value_ranges(expression: str) -> list[str]:
    """Difference 5: the items ``a-a`` and ``a-a/s`` of an expression (names read as numbers)."""
    found = []
    for item in expression.replace(",", " ").split():
        span, _, _ = item.partition("/")
        low, dash, high = span.partition("-")
        if dash and _NAMES.get(low, low) == _NAMES.get(high, high):
            found.append(item)
    return found


def open_step_in_day_of_week(expression: str) -> bool:
    """Difference 6: a ``v/s`` item in day-of-week that reaches 7 (Sunday) and not 0."""
    for item in expression.split()[4].split(","):
        start, slash, step = item.partition("/")
        if slash and "-" not in start and start != "*":
            first = _NAMES.get(start, start)
            if int(first) != 0 and (7 - int(first)) % int(step) == 0:
                return True
    return False


def star_step_day_field(expression: str) -> bool:
    """Difference 1: both day fields restricted, and one of them a ``*``-prefixed step."""
    dom, dow = expression.split()[2], expression.split()[4]
    return dom != "*" and dow != "*" and (dom.startswith("*") or dow.startswith("*"))


def crosses_dst(zone: str, start: datetime, end: datetime) -> bool:
    """Whether the zone's UTC offset changes between two instants (differences 2 and 3)."""
    tz = ZoneInfo(zone)
    hour = timedelta(hours=1)
    at = start
    while at < end + hour:
        if at.astimezone(tz).utcoffset() != start.astimezone(tz).utcoffset():
            return True
        at += hour
    return False


# ---------------------------------------------------------------- the differential properties


@ORACLE
@given(EXPRESSIONS, STARTS, st.sampled_from(ZONES))
def test_cronsim_agrees_on_every_generated_expression(expression: str, start: datetime, zone: str) -> None:
    assume(fires(expression, zone) and not any("/" in item for item in one_value_ranges(expression)))
    assert punctual_slots(expression, zone, start, SLOTS) == cronsim_slots(expression, zone, start, SLOTS)


@ORACLE
@given(EXPRESSIONS, STARTS, st.sampled_from(ZONES))
def test_croniter_agrees_outside_its_known_differences(expression: str, start: datetime, zone: str) -> None:
    assume(fires(expression, zone) and not star_step_day_field(expression))
    assume(not one_value_ranges(expression) and not open_step_in_day_of_week(expression))
    ours = punctual_slots(expression, zone, start, SLOTS)
    assume(not crosses_dst(zone, start, ours[-1]))
    assert ours == croniter_slots(expression, zone, start, SLOTS)


# ---------------------------------------------------------------- the known differences, pinned


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_difference_1_a_star_step_day_field_is_and_in_vixie_and_or_in_croniter() -> None:
    start = utc("2026-01-01T00:00")
    odd_mondays = [utc("2026-01-05T00:00"), utc("2026-01-19T00:00"), utc("2026-02-09T00:00")]
    assert punctual_slots("0 0 */2 * 1", "UTC", start, 3) == odd_mondays
    assert cronsim_slots("0 0 */2 * 1", "UTC", start, 3) == odd_mondays
    odd_days_or_mondays = [utc("2026-01-03T00:00"), utc("2026-01-05T00:00"), utc("2026-01-07T00:00")]
    assert croniter_slots("0 0 */2 * 1", "UTC", start, 3) == odd_days_or_mondays
    # The same days written without the leading * are restricted: OR, in all three
    for engine in (punctual_slots, cronsim_slots, croniter_slots):
        assert engine("0 0 1-31/2 * 1", "UTC", start, 3) == odd_days_or_mondays


def test_difference_2_a_repeated_local_time_fires_once_except_in_croniter() -> None:
    start = utc("2026-10-24T12:00")  # Europe/Berlin falls back at 03:00 CEST on 2026-10-25
    once = [utc("2026-10-25T00:30"), utc("2026-10-26T01:30")]  # 02:30 CEST, then 02:30 CET the next day
    assert punctual_slots("30 2 * * *", "Europe/Berlin", start, 2) == once
    assert cronsim_slots("30 2 * * *", "Europe/Berlin", start, 2) == once
    twice = [utc("2026-10-25T00:30"), utc("2026-10-25T01:30")]
    assert croniter_slots("30 2 * * *", "Europe/Berlin", start, 2) == twice


def test_difference_3_a_non_fixed_expression_has_no_slot_in_a_gap_except_in_croniter() -> None:
    start = utc("2026-03-28T12:00")  # Europe/Berlin skips 02:00-02:59 on 2026-03-29
    next_night = [utc("2026-03-30T00:00"), utc("2026-03-30T00:30")]
    assert punctual_slots("*/30 2 * * *", "Europe/Berlin", start, 2) == next_night
    assert cronsim_slots("*/30 2 * * *", "Europe/Berlin", start, 2) == next_night
    assert croniter_slots("*/30 2 * * *", "Europe/Berlin", start, 2) == [
        utc("2026-03-29T01:00"),
        next_night[0],
    ]


def test_a_fixed_time_in_a_gap_fires_once_at_its_end_in_all_three() -> None:
    start = utc("2026-03-28T12:00")
    end_of_gap = [utc("2026-03-29T01:00"), utc("2026-03-30T00:30")]  # 03:00 CEST, then 02:30 CEST
    for engine in (punctual_slots, cronsim_slots, croniter_slots):
        assert engine("30 2 * * *", "Europe/Berlin", start, 2) == end_of_gap


@pytest.mark.parametrize("expression", ["0 12 L * *", "0 9 * * 1#1", "0 9 ? * 1", "0 9 15W * *"])
def test_difference_4_extensions_are_aws_cron_in_punctual(expression: str) -> None:
    with pytest.raises(ScheduleError, match="unix cron"):
        parse_schedule(expression)
    accepted_by = []
    for name, engine in (("croniter", croniter_slots), ("cronsim", cronsim_slots)):
        try:
            engine(expression, "UTC", utc("2026-01-01T00:00"), 1)
        except Exception:  # each library has its own error types
            continue
        accepted_by.append(name)
    assert accepted_by, f"{expression}: neither oracle reads it, so it is no difference"


def test_difference_5_a_one_value_range_is_that_value_except_in_croniter_and_with_a_step_in_cronsim() -> None:
    start = utc("2026-01-01T00:00")
    minute_5 = [utc("2026-01-01T00:05"), utc("2026-01-01T01:05")]
    for expression in ("5-5 * * * *", "5-5/2 * * * *"):
        assert punctual_slots(expression, "UTC", start, 2) == minute_5
    assert cronsim_slots("5-5 * * * *", "UTC", start, 2) == minute_5
    assert cronsim_slots("5-5/2 * * * *", "UTC", start, 2) == [
        utc("2026-01-01T00:05"),
        utc("2026-01-01T00:07"),
    ]
    assert croniter_slots("5-5 * * * *", "UTC", start, 2) == [
        utc("2026-01-01T00:01"),
        utc("2026-01-01T00:02"),
    ]
    sundays = punctual_slots("* * * * SUN-SUN", "UTC", start, 1)
    assert sundays == cronsim_slots("* * * * 0-0", "UTC", start, 1) == [utc("2026-01-04T00:00")]
    assert croniter_slots("* * * * 0-0", "UTC", start, 1) == [utc("2026-01-01T00:01")]


def test_difference_6_an_open_step_in_day_of_week_reaches_sunday_as_7_except_in_croniter() -> None:
    start = utc("2026-01-01T00:00")  # a Thursday
    mon_wed_fri_sun = [utc(f"2026-01-{day:02}T00:00") for day in (2, 4, 5, 7)]
    assert punctual_slots("0 0 * * 1/2", "UTC", start, 4) == mon_wed_fri_sun
    assert cronsim_slots("0 0 * * 1/2", "UTC", start, 4) == mon_wed_fri_sun
    assert croniter_slots("0 0 * * 1/2", "UTC", start, 4) == [
        utc(f"2026-01-{day:02}T00:00") for day in (2, 5, 7, 9)
    ]


def test_difference_7_an_expression_that_never_fires_is_refused_up_front() -> None:
    with pytest.raises(ScheduleError):
        parse_schedule("0 0 30 2 *").next_after(utc("2026-01-01T00:00"))
    with pytest.raises(croniter.CroniterBadDateError):
        croniter_slots("0 0 30 2 *", "UTC", utc("2026-01-01T00:00"), 1)
    with pytest.raises(cronsim.CronSimError):
        cronsim_slots("0 0 30 2 *", "UTC", utc("2026-01-01T00:00"), 1)
