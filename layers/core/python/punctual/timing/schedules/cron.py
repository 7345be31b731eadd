"""Cron evaluation: the next slot of an AWS or Unix cron expression, daylight saving exact.

:class:`CronSchedule` finds the first matching local wall time with a few bisections
over precomputed field values, then maps it to UTC segment by segment
(:meth:`~punctual.timing.schedules.zones.Zone.segment`), applying the DST policy
(:mod:`~punctual.timing.schedules.dst`) where a segment ends. Parsing is in
:mod:`~punctual.timing.schedules.cron_parser`.
"""

from __future__ import annotations

import bisect
import calendar
from dataclasses import dataclass
from datetime import date, datetime

from punctual.timing.schedules.base import (
    END_S,
    EPOCH_ORDINAL,
    LOW_S,
    MIN_YEAR,
    Schedule,
    floor_s,
    from_epoch,
)
from punctual.timing.schedules.dst import DstOptions
from punctual.timing.schedules.zones import zone_of

__all__ = ["CronSchedule", "DomSpec", "DowSpec"]


@dataclass(frozen=True)
class DomSpec:
    """Day-of-month rule: plain days, ``L`` (last), ``LW``, and ``nW`` items."""

    days: frozenset[int]
    last: bool = False
    last_weekday: bool = False
    nearest_weekday: tuple[int, ...] = ()

    def matches(self, ndays: int, first_wd: int) -> set[int]:
        out = {d for d in self.days if d <= ndays}
        if self.last:
            out.add(ndays)
        if self.last_weekday:
            wd = (first_wd + ndays - 1) % 7
            out.add(ndays - max(0, wd - 4))  # Sat -> Fri (-1), Sun -> Fri (-2)
        for n in self.nearest_weekday:
            if n > ndays:
                continue  # 31W in a 30-day month: no day that month (as Quartz)
            wd = (first_wd + n - 1) % 7
            if wd == 5:  # Saturday: the Friday before, or Monday the 3rd on the 1st
                out.add(n - 1 if n > 1 else n + 2)
            elif wd == 6:  # Sunday: the Monday after, or the Friday before on the last day
                out.add(n + 1 if n < ndays else n - 2)
            else:
                out.add(n)
        return out


@dataclass(frozen=True)
class DowSpec:
    """Day-of-week rule; weekdays use Python's numbering (Monday=0 .. Sunday=6)."""

    weekdays: frozenset[int]
    nth: tuple[tuple[int, int], ...] = ()  # (weekday, k): the k-th such weekday
    last_of: tuple[int, ...] = ()  # the last such weekday of the month

    def matches(self, ndays: int, first_wd: int) -> set[int]:
        out: set[int] = set()
        if self.weekdays:
            out.update(d for d in range(1, ndays + 1) if (first_wd + d - 1) % 7 in self.weekdays)
        for wd, k in self.nth:
            day = 1 + (wd - first_wd) % 7 + 7 * (k - 1)
            if day <= ndays:
                out.add(day)
        for wd in self.last_of:
            last_wd = (first_wd + ndays - 1) % 7
            out.add(ndays - (last_wd - wd) % 7)
        return out


class CronSchedule(Schedule):
    """An AWS (``kind="cron"``) or Unix (``kind="unix"``) cron expression.

    Evaluation uses precomputed sorted value tuples for minute, hour, month and year and
    a per-month cache of matching days, so finding the next slot is a few bisections.
    """

    def __init__(
        self,
        expression: str,
        timezone: str,
        dst: DstOptions | None,
        *,
        kind: str,
        minutes: tuple[int, ...],
        hours: tuple[int, ...],
        months: tuple[int, ...],
        years: tuple[int, ...],
        dom: DomSpec,
        dow: DowSpec,
        either_day: bool,
        fixed_time: bool,
        date_fields: str,
    ) -> None:
        super().__init__(expression, timezone, dst)
        self.kind = kind
        self._minutes = minutes
        self._hours = hours
        self._months = months
        self._years = years
        self._dom = dom
        self._dow = dow
        self._either_day = either_day  # Vixie's OR rule
        self.fixed_time = fixed_time
        self.date_fields = date_fields  # for error messages, e.g. "day-of-month '31', month '2'"
        options = dst or DstOptions()
        # DST overrides only mean something for fixed-time expressions.
        self._shift_gap = fixed_time and options.gap != "skip"
        self._first_pass_only = fixed_time and options.repeat != "both"
        self._zone = zone_of(timezone)
        self._days: dict[int, tuple[int, ...]] = {}

    # -- wall-clock search --------------------------------------------------------------

    def _days_of(self, year: int, month: int) -> tuple[int, ...]:
        key = year * 12 + month
        days = self._days.get(key)
        if days is None:
            first_wd, ndays = calendar.monthrange(year, month)
            by_dom = self._dom.matches(ndays, first_wd)
            by_dow = self._dow.matches(ndays, first_wd)
            days = tuple(sorted(by_dom | by_dow if self._either_day else by_dom & by_dow))
            self._days[key] = days  # bounded: at most 230 years x 12 months
        return days

    def _next_wall(self, wall: int) -> int | None:
        """The first matching local wall time (seconds, naive epoch) at or after ``wall``."""
        wall = -(-wall // 60) * 60  # slots sit on whole minutes: round up
        days_since, rest = divmod(wall, 86400)
        d0 = date.fromordinal(days_since + EPOCH_ORDINAL)
        y, mo, d = d0.year, d0.month, d0.day
        h, mi = rest // 3600, rest % 3600 // 60
        found = self._next_fields(y, mo, d, h, mi)
        if found is None:
            return None
        fy, fmo, fd, fh, fmi = found
        ordinal = d0.toordinal() if (fy, fmo, fd) == (y, mo, d) else date(fy, fmo, fd).toordinal()
        return (ordinal - EPOCH_ORDINAL) * 86400 + fh * 3600 + fmi * 60

    def _next_fields(self, y: int, mo: int, d: int, h: int, mi: int) -> tuple[int, int, int, int, int] | None:
        """The smallest matching (year, month, day, hour, minute) >= the given one."""
        years, months, hours, minutes = self._years, self._months, self._hours, self._minutes
        bl = bisect.bisect_left
        for yi in range(bl(years, y), len(years)):
            year = years[yi]
            same_y = year == y
            for mj in range(bl(months, mo) if same_y else 0, len(months)):
                month = months[mj]
                same_m = same_y and month == mo
                days = self._days_of(year, month)
                for dk in range(bl(days, d) if same_m else 0, len(days)):
                    day = days[dk]
                    same_d = same_m and day == d
                    for hk in range(bl(hours, h) if same_d else 0, len(hours)):
                        hour = hours[hk]
                        if same_d and hour == h:
                            k = bl(minutes, mi)
                            if k < len(minutes):
                                return year, month, day, hour, minutes[k]
                        else:
                            return year, month, day, hour, minutes[0]
        return None

    @property
    def slots_per_firing_day(self) -> int:
        """Slots on a day the expression fires at all: every matching hour times minute."""
        return len(self._hours) * len(self._minutes)

    @property
    def last_year(self) -> int:
        """The last local year the year field allows."""
        return self._years[-1]

    def first_wall_year(self) -> int | None:
        """The local year of the first slot from 1970 on, or ``None`` if it never fires."""
        found = self._next_fields(MIN_YEAR, 1, 1, 0, 0)
        return None if found is None else found[0]

    def has_wall_after(self, after: datetime) -> bool:
        """Whether a local time the expression names comes after ``after``'s local time. With no
        slot after ``after``, every such time falls in a daylight-saving gap (one a wildcard
        minute or hour never fires in, nor a fixed time under ``dst.gap`` ``skip``)."""
        a = max(floor_s(after, "after"), LOW_S)
        offset = 0 if self._zone is None else self._zone.segment(a)[2]
        return self._next_wall(a + offset + 1) is not None

    # -- instants -----------------------------------------------------------------------

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime | None:
        """The first slot strictly after ``after``; ``anchor`` is ignored.

        See :meth:`Schedule.next_after` and the policy in :mod:`punctual.timing.schedules.dst`.
        """
        a = floor_s(after, "after")  # an integer slot is > after iff it is > floor(after)
        found = self._next_instant(a)
        return None if found is None else from_epoch(found)

    def _next_instant(self, a: int) -> int | None:
        if a >= END_S:
            return None
        a = max(a, LOW_S)  # nothing fires before 1970; keeps the calendar maths in range
        zone = self._zone
        if zone is None:
            wall = self._next_wall(a + 1)
            return None if wall is None else wall
        # Walk the zone's constant-offset segments from the one holding `a`. Inside a
        # segment wall time and UTC map one to one, so the first matching wall time in
        # range is the answer; crossing a boundary is where DST rules apply.
        start, before, offset, end, after_end = zone.segment(a)
        lo = a + offset + 1  # walls strictly after a's wall time
        while True:
            if self._first_pass_only and before > offset:
                # Just after a fall-back: walls below start+before were seen on the first pass.
                lo = max(lo, start + before)
            wall = self._next_wall(lo)
            if wall is not None:
                if wall - offset < end:
                    return wall - offset
                if after_end > offset and self._shift_gap and wall < end + after_end:
                    return end  # the wall time fell in the spring-forward gap: fire at its end
            elif after_end >= offset or end >= END_S:
                return None  # no wall matches from lo on, and later segments' walls start past lo
            # On to the next segment; also when no wall matched from lo on, if a fall-back ends
            # this one: the wall clock starts over below lo, and the second pass may match.
            boundary = end
            start, before, offset, end, after_end = zone.segment(boundary)
            # From the boundary on, not from `start`: a pseudo-segment (cut at a year
            # start) can begin before the boundary we came from.
            lo = boundary + offset
