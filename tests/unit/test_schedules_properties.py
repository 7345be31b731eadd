"""Property tests for schedules (hypothesis).

The strongest one compares the evaluator with a brute-force reference written from the
rules alone: walk UTC minute by minute, read each instant's local wall time with
zoneinfo, and decide from the fields, the fold flag and the offset change whether it
is a slot. Instants are drawn near real DST transitions of zones with 1-hour,
30-minute and 45-minute shifts and with midnight transitions.
"""

from __future__ import annotations

import calendar
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from punctual.timing.schedules import CronSchedule, DstOptions, format_instant, parse_schedule

PROPS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",  # 30-minute shift
    "Pacific/Chatham",  # +12:45 / +13:45
    "America/Santiago",  # transitions at local midnight
    "Asia/Kolkata",  # no DST, half-hour offset
]


def offset_s(zone: ZoneInfo, instant: int) -> int:
    off = datetime.fromtimestamp(instant, zone).utcoffset()
    assert off is not None
    return int(off.total_seconds())


@cache
def transitions(name: str) -> tuple[int, ...]:
    """Offset changes in 2025-2028, found by an hourly scan and bisection."""
    if name == "UTC":
        return ()
    zone = ZoneInfo(name)
    out: list[int] = []
    u = calendar.timegm((2025, 1, 1, 0, 0, 0))
    end = calendar.timegm((2029, 1, 1, 0, 0, 0))
    current = offset_s(zone, u)
    while u < end:
        nxt = u + 3600
        off = offset_s(zone, nxt)
        if off != current:
            lo, hi = u, nxt
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if offset_s(zone, mid) == current:
                    lo = mid
                else:
                    hi = mid
            out.append(hi)
            current = off
        u = nxt
    return tuple(out)


# -- expression fields ----------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    text: str
    values: frozenset[int]

    @property
    def star(self) -> bool:  # Vixie: "restricted" unless it starts with '*'
        return self.text.startswith("*")


@st.composite
def fields(draw: st.DrawFn, lo: int, hi: int, steps: bool = True, near: int | None = None) -> Field:
    """A field over [lo, hi]; with ``near`` its numbers are drawn from [lo, near] only."""
    forms = ["value", "range", "list"] + (["range_step", "value_step"] if steps else [])
    if near is None:
        forms += ["star", "star_step"] if steps else ["star"]
    form = draw(st.sampled_from(forms))
    top = hi if near is None else near
    if form == "star":
        return Field("*", frozenset(range(lo, hi + 1)))
    if form == "star_step":
        k = draw(st.integers(1, hi - lo + 1))
        return Field(f"*/{k}", frozenset(range(lo, hi + 1, k)))
    if form == "value":
        v = draw(st.integers(lo, top))
        return Field(str(v), frozenset({v}))
    if form == "value_step":
        v = draw(st.integers(lo, top))
        k = draw(st.integers(1, hi - lo + 1))
        return Field(f"{v}/{k}", frozenset(range(v, hi + 1, k)))
    a = draw(st.integers(lo, top))
    b = draw(st.integers(a, top))
    if form == "range":
        return Field(f"{a}-{b}", frozenset(range(a, b + 1)))
    if form == "range_step":
        k = draw(st.integers(1, hi - lo + 1))
        return Field(f"{a}-{b}/{k}", frozenset(range(a, b + 1, k)))
    values = draw(st.lists(st.integers(lo, top), min_size=1, max_size=4, unique=True))
    return Field(",".join(map(str, values)), frozenset(values))


@dataclass(frozen=True)
class Unix:
    minute: Field
    hour: Field
    dom: Field
    month: Field
    dow: Field  # values 0-6, 0 = Sunday

    @property
    def text(self) -> str:
        return " ".join(f.text for f in (self.minute, self.hour, self.dom, self.month, self.dow))

    @property
    def fixed_time(self) -> bool:
        return not self.minute.star and not self.hour.star

    def matches(self, wall: datetime) -> bool:
        """Vixie semantics, read straight from the rules."""
        if wall.minute not in self.minute.values or wall.hour not in self.hour.values:
            return False
        if wall.month not in self.month.values:
            return False
        dom_ok = wall.day in self.dom.values
        dow_ok = wall.isoweekday() % 7 in self.dow.values
        if not self.dom.star and not self.dow.star:
            return dom_ok or dow_ok
        return dom_ok and dow_ok

    def aws(self) -> str | None:
        """The AWS equivalent, when one exists (AWS has no OR of the two day fields)."""
        if not self.dom.star and not self.dow.star:
            return None
        if self.dow.text == "*":
            dom, dow = self.dom.text, "?"
        elif self.dom.text == "*":
            dom, dow = "?", ",".join(str(v + 1) for v in sorted(self.dow.values))
        else:
            return None  # e.g. '*/2' in both: an AND that AWS cannot write
        return f"cron({self.minute.text} {self.hour.text} {dom} {self.month.text} {dow} *)"


@st.composite
def unix_exprs(draw: st.DrawFn, frequent: bool = False) -> Unix:
    """Unix expressions; ``frequent`` keeps them firing at least every few days."""
    minute = draw(fields(0, 59))
    # Bias hours towards the local hours in which DST transitions happen (0-3).
    hour = draw(fields(0, 23) | fields(0, 23, near=3))
    every = Field("*", frozenset(range(7)))
    if frequent:
        # Fires often: any month; a weekday field only with '*' or a restricted
        # day-of-month (the OR rule), never with '*/k' (an AND that can be months apart).
        month = Field("*", frozenset(range(1, 13)))
        dom = draw(fields(1, 31) | st.just(Field("*", frozenset(range(1, 32)))))
        dow = every if dom.star and dom.text != "*" else draw(fields(0, 6, steps=False) | st.just(every))
    else:
        dom = draw(fields(1, 31))
        dow = draw(fields(0, 6, steps=False))
        month = draw(fields(1, 12))
    return Unix(minute, hour, dom, month, dow)


@st.composite
def afters(draw: st.DrawFn, zone: str) -> datetime:
    """Instants near a DST transition of the zone (or anywhere in 2025-2028)."""
    trans = transitions(zone)
    near_transition = draw(st.booleans())
    if near_transition and len(trans) > 0:
        base = draw(st.sampled_from(trans))
        delta = draw(st.integers(-2 * 86400, 2 * 86400))
    else:
        base = calendar.timegm((2025, 1, 1, 0, 0, 0))
        delta = draw(st.integers(0, 4 * 365 * 86400))
    micro = draw(st.sampled_from([0, 0, 1, 500_000, 999_999]))
    return datetime.fromtimestamp(base + delta, UTC).replace(microsecond=micro)


dst_options = st.builds(
    DstOptions,
    gap=st.sampled_from([None, "shift", "skip"]),
    repeat=st.sampled_from([None, "first", "both"]),
)


# -- the brute-force reference --------------------------------------------------------


def reference_slots(
    matches: Callable[[datetime], bool],
    zone_name: str,
    after: datetime,
    horizon_s: int,
    fixed_time: bool,
    dst: DstOptions,
) -> list[int]:
    """Every slot in (after, floor(after) + horizon), minute by minute in UTC."""
    zone = ZoneInfo(zone_name)
    shift = fixed_time and dst.gap != "skip"
    first_only = fixed_time and dst.repeat != "both"
    start = int(after.timestamp()) // 60 * 60 + 60
    out: list[int] = []
    for u in range(start, int(after.timestamp()) + horizon_s, 60):
        local = datetime.fromtimestamp(u, zone)
        hit = matches(local.replace(tzinfo=None)) and not (first_only and local.fold == 1)
        if not hit and shift:
            before, now = offset_s(zone, u - 1), offset_s(zone, u)
            if now > before:  # u ends a spring-forward gap: walls [u+before, u+now) were skipped
                hit = any(
                    matches(datetime(1970, 1, 1) + timedelta(seconds=w))
                    for w in range(u + before, u + now, 60)
                )
        if hit:
            out.append(u)
    return out


def epoch(slots: list[datetime]) -> list[int]:
    return [int(s.timestamp()) for s in slots]


# -- properties -----------------------------------------------------------------------


@PROPS
@given(data=st.data(), expr=unix_exprs(frequent=True), zone=st.sampled_from(ZONES), dst=dst_options)
def test_matches_brute_force_reference(data: st.DataObject, expr: Unix, zone: str, dst: DstOptions) -> None:
    after = data.draw(afters(zone))
    horizon = 3 * 86400
    expected = reference_slots(expr.matches, zone, after, horizon, expr.fixed_time, dst)[:4]
    schedule = parse_schedule(expr.text, zone, dst)
    got = [s for s in epoch(schedule.slots(after, count=4)) if s < int(after.timestamp()) + horizon]
    assert got == expected, (expr.text, zone, dst, format_instant(after))


@PROPS
@given(data=st.data(), expr=unix_exprs(), zone=st.sampled_from(ZONES), dst=dst_options)
def test_slots_are_after_increasing_whole_seconds_and_local_times_match(
    data: st.DataObject, expr: Unix, zone: str, dst: DstOptions
) -> None:
    after = data.draw(afters(zone))
    try:
        schedule = parse_schedule(expr.text, zone, dst)
    except ValueError as error:
        assert "never fires" in str(error)  # e.g. day 31 in months without one
        return
    slots = schedule.slots(after, count=6)
    assert slots, expr.text  # a valid Unix expression fires within the search range
    assert slots[0] > after
    for a, b in itertools.pairwise(slots):
        assert a < b
        assert schedule.next_after(a) == b  # slots() is next_after() repeated
    tz = ZoneInfo(zone)
    for s in slots:
        assert s.tzinfo is UTC and s.microsecond == 0
        wall = s.astimezone(tz).replace(tzinfo=None)
        if expr.matches(wall):
            continue
        # otherwise: only the documented DST shift of a fixed-time slot from a gap
        u = int(s.timestamp())
        before, now = offset_s(tz, u - 1), offset_s(tz, u)
        assert expr.fixed_time and dst.gap != "skip" and now > before, (expr.text, zone, format_instant(s))
        gap_walls = [datetime(1970, 1, 1) + timedelta(seconds=w) for w in range(u + before, u + now, 60)]
        assert any(expr.matches(w) for w in gap_walls)


@PROPS
@given(data=st.data(), expr=unix_exprs(), zone=st.sampled_from(ZONES), dst=dst_options)
def test_aws_expression_and_its_unix_equivalent_agree(
    data: st.DataObject, expr: Unix, zone: str, dst: DstOptions
) -> None:
    aws = expr.aws()
    if aws is None:
        return
    after = data.draw(afters(zone))
    try:
        unix_schedule = parse_schedule(expr.text, zone, dst)
    except ValueError as error:
        assert "never fires" in str(error)
        return
    aws_schedule = parse_schedule(aws, zone, dst)
    assert aws_schedule.slots(after, count=8) == unix_schedule.slots(after, count=8), (aws, expr.text)


# -- AWS day specials against a calendar reference -------------------------------------


@st.composite
def aws_day_specials(draw: st.DrawFn) -> tuple[str, str, Callable[[int, int, int], bool]]:
    """(dom, dow, predicate(year, month, day)) for one AWS special."""
    kind = draw(st.sampled_from(["L", "LW", "W", "#", "nL", "Ldow"]))

    def weekday(y: int, m: int, d: int) -> int:  # AWS numbering: 1 = Sunday
        return datetime(y, m, d).isoweekday() % 7 + 1

    def last(y: int, m: int) -> int:
        return calendar.monthrange(y, m)[1]

    if kind == "L":
        return "L", "?", lambda y, m, d: d == last(y, m)
    if kind == "LW":

        def lw(y: int, m: int, d: int) -> bool:
            day = last(y, m)
            while weekday(y, m, day) in (1, 7):
                day -= 1
            return d == day

        return "LW", "?", lw
    if kind == "W":
        n = draw(st.integers(1, 31))

        def nearest(y: int, m: int, d: int) -> bool:
            if n > last(y, m):
                return False
            # the weekday closest to n inside the month; ties cannot happen
            candidates = [c for c in range(1, last(y, m) + 1) if weekday(y, m, c) not in (1, 7)]
            best = min(candidates, key=lambda c: (abs(c - n), c))
            return d == best

        return f"{n}W", "?", nearest
    if kind == "#":
        wd, k = draw(st.integers(1, 7)), draw(st.integers(1, 5))
        return "?", f"{wd}#{k}", lambda y, m, d: weekday(y, m, d) == wd and (d - 1) // 7 + 1 == k
    if kind == "nL":
        wd = draw(st.integers(1, 7))
        return "?", f"{wd}L", lambda y, m, d: weekday(y, m, d) == wd and d + 7 > last(y, m)
    return "?", "L", lambda y, m, d: weekday(y, m, d) == 7


@settings(max_examples=60, deadline=None)
@given(special=aws_day_specials(), start_year=st.integers(2024, 2030))
def test_aws_day_specials_match_a_calendar_reference(
    special: tuple[str, str, Callable[[int, int, int], bool]], start_year: int
) -> None:
    dom, dow, predicate = special
    schedule = parse_schedule(f"cron(0 12 {dom} * {dow} *)")
    assert isinstance(schedule, CronSchedule)
    after = datetime(start_year, 1, 1, tzinfo=UTC)
    got = [s.date() for s in schedule.slots(after, count=40) if s.year == start_year]
    expected = [
        datetime(start_year, m, d).date()
        for m in range(1, 13)
        for d in range(1, calendar.monthrange(start_year, m)[1] + 1)
        if predicate(start_year, m, d)
    ]
    assert got == expected[: len(got)] and len(got) == min(len(expected), 40), (dom, dow)


# -- rate ---------------------------------------------------------------------------------


@PROPS
@given(
    n=st.integers(1, 10_000),
    unit=st.sampled_from([("seconds", 1), ("minutes", 60), ("hours", 3600), ("days", 86400)]),
    anchor_s=st.integers(0, 10**9),
    gap_s=st.integers(-(10**7), 10**7),
    micro=st.integers(0, 999_999),
)
def test_rate_slots_lie_on_the_anchor_grid(
    n: int, unit: tuple[str, int], anchor_s: int, gap_s: int, micro: int
) -> None:
    schedule = parse_schedule(f"rate({n} {unit[0]})", "Europe/Berlin")
    period = n * unit[1]
    base = calendar.timegm((2026, 1, 1, 0, 0, 0))
    anchor = datetime.fromtimestamp(base + anchor_s % 10**8, UTC)
    after = datetime.fromtimestamp(base + anchor_s % 10**8 + gap_s, UTC).replace(microsecond=micro)
    slots = schedule.slots(after, anchor, count=3)
    assert slots[0] > after
    assert slots[0] - timedelta(seconds=period) <= after or slots[0] == anchor
    for s in slots:
        assert (s - anchor).total_seconds() % period == 0 and s >= anchor
    assert [b - a for a, b in itertools.pairwise(slots)] == [timedelta(seconds=period)] * 2
