"""One-off schedules: ``at(YYYY-MM-DDTHH:MM:SS)`` in the job's zone, under the DST policy."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from punctual.timing.instants import format_instant
from punctual.timing.schedules.base import (
    MAX_YEAR,
    MIN_YEAR,
    Schedule,
    floor_s,
    from_epoch,
    shorten,
)
from punctual.timing.schedules.dst import DstOptions
from punctual.timing.schedules.errors import ScheduleError
from punctual.timing.schedules.zones import validate_timezone, zone_of

__all__ = ["AtSchedule", "parse_at"]

_AT = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})")


class AtSchedule(Schedule):
    """``at(YYYY-MM-DDTHH:MM:SS)``: one run at that local time in the zone.

    A fixed-time expression for daylight saving: a time in a spring-forward gap fires at
    the gap's end (``gap="skip"``: the expression is rejected, it would never fire), a
    repeated time fires on its first pass, whatever ``repeat`` says: a one-time job fires once
    (a job refuses ``repeat="both"`` with ``at()``; one stored before that fired twice).
    """

    kind = "at"

    def __init__(
        self, expression: str, timezone: str, dst: DstOptions | None, instants: tuple[int, ...]
    ) -> None:
        super().__init__(expression, timezone, dst)
        self._instants = instants

    @property
    def instants(self) -> tuple[datetime, ...]:
        """The instant this schedule fires at (a tuple of one)."""
        return tuple(from_epoch(i) for i in self._instants)

    def compared(self) -> str:
        """The expression as a refusal compares it with UTC instants: with its instant, in UTC, when
        its zone's local time reads otherwise (QA26: "at(2026-11-30T15:00:00) is not after
        2026-11-30T10:00:00Z" of a job in Asia/Tokyo, whose instant is 06:00Z)."""
        instant = from_epoch(self._instants[0])
        if not instant.astimezone(validate_timezone(self.timezone)).utcoffset():
            return self.expression
        return f"{self.expression} in {self.timezone} ({format_instant(instant)})"

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime | None:
        """The instant if it is strictly after ``after``, else ``None``."""
        a = floor_s(after, "after")
        return next((from_epoch(i) for i in self._instants if i > a), None)


def parse_at(expression: str, body: str, timezone: str, dst: DstOptions | None) -> AtSchedule:
    match = _AT.fullmatch(body)
    if match is None:
        raise ScheduleError(
            f"at: expected at(YYYY-MM-DDTHH:MM:SS) in local time of the job's zone, got '{shorten(body)}'"
        )
    year, month, day, hour, minute, sec = (int(g) for g in match.groups())
    try:
        local = datetime(year, month, day, hour, minute, sec)
    except ValueError:
        raise ScheduleError(f"at: '{body}' is not a valid date and time") from None
    if not MIN_YEAR <= local.year <= MAX_YEAR:
        raise ScheduleError(f"at: year {local.year} out of range {MIN_YEAR}-{MAX_YEAR}")
    tz = validate_timezone(timezone)
    options = dst or DstOptions()
    off0 = local.replace(tzinfo=tz, fold=0).utcoffset()
    off1 = local.replace(tzinfo=tz, fold=1).utcoffset()
    wall = floor_s(local.replace(tzinfo=UTC), "at")
    assert off0 is not None and off1 is not None
    o0, o1 = int(off0.total_seconds()), int(off1.total_seconds())
    if o0 == o1:
        instants: tuple[int, ...] = (wall - o0,)
    elif o0 > o1:  # repeated by fall-back: fold=0 is the first pass (the only one: it fires once)
        instants = (wall - o0,)
    else:  # in a spring-forward gap: fold=1 reads it with the later offset, landing before the gap
        if options.gap == "skip":
            raise ScheduleError(f"at: {body} does not exist in {timezone} (DST gap) and dst.gap is 'skip'")
        zone = zone_of(timezone)
        assert zone is not None  # UTC has no gaps
        instants = (zone.segment(wall - o1)[3],)  # the end of the gap
    return AtSchedule(expression, timezone, dst, instants)
