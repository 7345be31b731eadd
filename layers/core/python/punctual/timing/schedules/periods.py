"""Elapsed-time schedules: ``rate(N unit)`` and ``delay(N unit)``; daylight saving plays no part."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Final

from punctual.timing.schedules.base import (
    END_S,
    Schedule,
    ceil_s,
    floor_s,
    from_epoch,
    shorten,
    to_epoch,
)
from punctual.timing.schedules.dst import DstOptions
from punctual.timing.schedules.errors import ScheduleError

__all__ = ["DelaySchedule", "PeriodSchedule", "RateSchedule", "parse_period"]

_UNITS: Final = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
_PERIOD = re.compile(r"([0-9]{1,9})\s+([A-Za-z]+)")


def parse_period(kind: str, body: str) -> int:
    match = _PERIOD.fullmatch(body)
    if match is None:
        too_long = re.fullmatch(r"([0-9]{10,})\s+[A-Za-z]+", body)
        if too_long:
            raise ScheduleError(f"{kind}: N '{shorten(too_long.group(1))}' is too large (at most 9 digits)")
        raise ScheduleError(
            f"{kind}: expected '{kind}(N unit)' such as {kind}(5 minutes), got '{shorten(body)}'"
        )
    count, unit = int(match.group(1)), match.group(2).lower()
    # AWS wants the singular only for N=1; accept either form, it cannot be misread.
    seconds = _UNITS.get(unit[:-1] if unit.endswith("s") else unit)
    if seconds is None:
        raise ScheduleError(
            f"{kind}: unknown unit '{match.group(2)}'; use second(s), minute(s), hour(s) or day(s)"
        )
    if count < 1:
        raise ScheduleError(f"{kind}: N must be at least 1, got {count}")
    return count * seconds


class PeriodSchedule(Schedule):
    """A schedule with a period of N elapsed seconds (``rate`` and ``delay``)."""

    def __init__(self, expression: str, timezone: str, dst: DstOptions | None, seconds: int) -> None:
        super().__init__(expression, timezone, dst)
        self._seconds = seconds
        self.period = timedelta(seconds=seconds)

    def on_grid(self, after: datetime, origin: datetime) -> datetime | None:
        """``origin + k*N`` (``origin`` rounded up to the whole second) for the smallest k >= 0
        that is strictly after ``after``: a ``rate(...)`` job's slots from its anchor, and the
        slots a ``delay(...)`` chain passes over one after the other when none of them runs (its
        calendar excludes their days: each is N after the one before)."""
        start, fraction = to_epoch(origin, "anchor")  # ceil_s and floor_s, a call less each (named as before)
        if fraction:
            start += 1
        a = to_epoch(after, "after")[0]
        k = 0 if start > a else (a - start) // self._seconds + 1
        slot = start + k * self._seconds
        return from_epoch(slot) if slot < END_S else None


class RateSchedule(PeriodSchedule):
    """``rate(N unit)``: slots at ``anchor + k*N`` (k >= 0) in elapsed time.

    The anchor (a job's ``start_at`` or its registration instant) is rounded up to the
    whole second; without one, ``after`` is the anchor, so the first slot is ``after + N``.
    Daylight saving plays no part.
    """

    kind = "rate"

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime | None:
        """``anchor + k*N`` for the smallest k >= 0 that is strictly after ``after``."""
        if anchor is None:  # the grid starts at `after` itself, which is not after itself
            slot = ceil_s(after, "after") + self._seconds
            return from_epoch(slot) if slot < END_S else None
        return self.on_grid(after, anchor)

    def slots(self, after: datetime, anchor: datetime | None = None, count: int = 5) -> list[datetime]:
        """As :meth:`Schedule.slots`; without an anchor the grid starts at ``after``."""
        if anchor is None:
            first = self.next_after(after)
            if first is None:
                return []
            anchor = first  # the grid is after + k*N: anchor it on its first slot
        return super().slots(after, anchor, count)


class DelaySchedule(PeriodSchedule):
    """``delay(N unit)``: each run starts N after the previous run finished.

    The worker calls ``next_after(finish_instant)`` for the next run; the first run is at
    ``anchor + N``. :meth:`slots` gives only that first slot, since the later ones
    depend on when runs finish.
    """

    kind = "delay"

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime | None:
        """``anchor + N`` if that is after ``after``, else ``ceil(after) + N``."""
        a = floor_s(after, "after")
        if anchor is not None:
            first = ceil_s(anchor, "anchor") + self._seconds
            if first > a:
                return from_epoch(first) if first < END_S else None
        slot = ceil_s(after, "after") + self._seconds
        return from_epoch(slot) if slot < END_S else None

    def slots(self, after: datetime, anchor: datetime | None = None, count: int = 5) -> list[datetime]:
        """The first slot only (or none when ``count`` is 0)."""
        return super().slots(after, anchor, min(count, 1))
