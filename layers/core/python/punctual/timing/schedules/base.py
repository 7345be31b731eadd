"""What every schedule kind shares: the :class:`Schedule` interface, year bounds and epoch seconds.

Evaluators work in whole seconds since the epoch (``int``); these helpers convert at
the edges. No slot is ever at or past :data:`END_S`.
"""

from __future__ import annotations

import calendar
from datetime import UTC, date, datetime, timedelta
from typing import Final

from punctual.timing.schedules.dst import DstOptions

__all__ = [
    "END_S",
    "EPOCH_ORDINAL",
    "LOW_S",
    "MAX_YEAR",
    "MIN_YEAR",
    "Schedule",
    "ceil_s",
    "floor_s",
    "from_epoch",
    "shorten",
    "to_epoch",
]

MIN_YEAR: Final = 1970
MAX_YEAR: Final = 2199

EPOCH_ORDINAL: Final = date(1970, 1, 1).toordinal()
# No slot at or past this instant: UTC 2200-01-01 plus a day, so a local time late on
# 2199-12-31 in a zone west of Greenwich still counts.
END_S: Final = calendar.timegm((2200, 1, 2, 0, 0, 0))
LOW_S: Final = calendar.timegm((1969, 1, 1, 0, 0, 0))


def to_epoch(dt: datetime, what: str) -> tuple[int, bool]:
    """Whole seconds since the epoch (floored) and whether a sub-second part was dropped."""
    if dt.tzinfo is not UTC and dt.utcoffset() is None:  # (a UTC instant, the usual one, has one)
        raise ValueError(f"{what} must be a timezone-aware datetime, got {dt!r}")
    # timestamp() is a float; removing the microseconds first leaves a whole number to
    # within far less than 0.5 s at any datetime, so round() makes it exact (and fast).
    return round(dt.timestamp() - dt.microsecond / 1_000_000), dt.microsecond != 0


def floor_s(dt: datetime, what: str) -> int:
    return to_epoch(dt, what)[0]


def ceil_s(dt: datetime, what: str) -> int:
    seconds, fraction = to_epoch(dt, what)
    return seconds + 1 if fraction else seconds


def from_epoch(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def shorten(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Schedule:
    """A parsed schedule expression; one subclass per kind.

    Attributes
    ----------
    kind
        ``"cron"`` (AWS 6-field), ``"unix"`` (5-field), ``"rate"``, ``"at"``,
        ``"delay"`` or ``"after"``.
    expression
        The expression as given, without surrounding whitespace.
    timezone
        The IANA zone local times are read in.
    dst
        The daylight-saving overrides given at parse time (``None`` for the defaults).
    parents
        The parent job ids of an ``after(...)`` schedule, else ``()``.
    period
        The period of ``rate`` and ``delay``, else ``None``.
    """

    kind: str = ""
    parents: tuple[str, ...] = ()
    period: timedelta | None = None

    def __init__(self, expression: str, timezone: str, dst: DstOptions | None) -> None:
        self.expression = expression
        self.timezone = timezone
        self.dst = dst

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime | None:
        """The first slot strictly after ``after``.

        Parameters
        ----------
        after
            An aware datetime (converted to UTC); it may have a sub-second part.
        anchor
            The origin of ``rate`` and ``delay`` schedules (see the subclass); ignored
            by the other kinds.

        Returns
        -------
        datetime or None
            A whole-second aware UTC datetime, or ``None`` when no slot ever comes
            (before the end of local year 2199).
        """
        raise NotImplementedError

    def compared(self) -> str:
        """The expression as a refusal that compares it with a UTC instant names it (``at()`` adds
        its own instant when its zone's local time reads otherwise)."""
        return self.expression

    def slots(self, after: datetime, anchor: datetime | None = None, count: int = 5) -> list[datetime]:
        """Up to ``count`` consecutive slots strictly after ``after``.

        Parameters
        ----------
        after
            An aware datetime.
        anchor
            As for :meth:`next_after`.
        count
            How many slots at most; fewer are returned when the schedule ends.

        Returns
        -------
        list of datetime
            Strictly increasing whole-second aware UTC datetimes.
        """
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        out: list[datetime] = []
        current = after
        while len(out) < count:
            slot = self.next_after(current, anchor)
            if slot is None:
                break
            out.append(slot)
            current = slot
        return out

    def _key(self) -> tuple[object, ...]:
        return (self.kind, self.expression, self.timezone, self.dst)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schedule) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.expression!r}, timezone={self.timezone!r})"
