"""Schedule expressions: parse, validate, and compute the slots at which a job fires.

Six kinds of expression are understood:

``cron(min hour dom month dow year)``
    The AWS (EventBridge) dialect: day-of-week 1-7 = SUN-SAT, ``?`` in exactly one of
    the two day fields, ``L``, ``nL``, ``W``, ``LW``, ``n#k``, year 1970-2199.
``min hour dom month dow`` (and ``@daily`` and friends)
    Unix cron with Vixie semantics: day-of-week 0-7 (0 and 7 = Sunday) and, when both
    day fields are restricted (neither starts with ``*``), a day matches if either does.
``rate(N unit)``
    Every N seconds/minutes/hours/days of elapsed time from an anchor; DST plays no part.
``at(YYYY-MM-DDTHH:MM:SS)``
    One run at that local time in the schedule's time zone.
``delay(N unit)``
    Fixed delay: each run starts N after the previous one finished.
``after(job[, job...])``
    Runs for slot S once every parent has succeeded for slot S; it has no time slots.

Slots are whole-second, timezone-aware UTC datetimes, always computed strictly after a
given instant and never from the clock. Cron slots are found in local wall-clock time
and mapped to UTC through the zone's offset *segments* (the intervals between two
offset transitions), which makes daylight-saving behaviour exact:

* An expression whose minute and hour fields are both fixed (neither starts with
  ``*``; a list or range counts as fixed, as in Debian cron) is a *fixed-time*
  expression. By default a local time skipped by spring-forward fires once, at the
  first instant after the gap (the transition itself), and a local time repeated by
  fall-back fires once, on its first pass. :class:`DstOptions` overrides both.
* Any other expression follows real time: nothing fires in a gap, and a repeated
  local time fires on both passes.

The search never goes past local year 2199 (the top of AWS's year range); a schedule
with no slot before that answers ``None``.
"""

from __future__ import annotations

import bisect
import calendar
import hashlib
import re
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Final, Literal

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "MAX_YEAR",
    "MIN_YEAR",
    "AfterSchedule",
    "AtSchedule",
    "CronSchedule",
    "DelaySchedule",
    "DstOptions",
    "RateSchedule",
    "Schedule",
    "ScheduleError",
    "cached_schedule",
    "format_instant",
    "jitter_offset_s",
    "parse_instant",
    "parse_schedule",
    "validate_timezone",
]

MAX_EXPRESSION_LENGTH: Final = 256
MIN_YEAR: Final = 1970
MAX_YEAR: Final = 2199

_EPOCH_ORDINAL: Final = date(1970, 1, 1).toordinal()
# No slot at or past this instant: UTC 2200-01-01 plus a day, so a local time late on
# 2199-12-31 in a zone west of Greenwich still counts.
_END_S: Final = calendar.timegm((2200, 1, 2, 0, 0, 0))
_LOW_S: Final = calendar.timegm((1969, 1, 1, 0, 0, 0))


class ScheduleError(ValueError):
    """A schedule, time zone or instant that cannot be accepted.

    The message is one line and names the problem, for example
    ``cron: day-of-month '32' out of range 1-31``.
    """


@dataclass(frozen=True)
class DstOptions:
    """Daylight-saving overrides for fixed-time expressions.

    Parameters
    ----------
    gap
        What a local time skipped by spring-forward does: ``"shift"`` (default) fires
        once at the first instant after the gap, ``"skip"`` does not fire.
    repeat
        What a local time repeated by fall-back does: ``"first"`` (default) fires on the
        first pass only, ``"both"`` fires on both passes.

    Expressions with a wildcard minute or hour always follow real time; these options
    do not apply to them (nor to ``rate``, ``delay`` and ``after``).
    """

    gap: Literal["shift", "skip"] | None = None
    repeat: Literal["first", "both"] | None = None

    def __post_init__(self) -> None:
        # Values can come from untyped JSON, so check them here rather than trust the hints.
        if self.gap not in (None, "shift", "skip"):
            raise ScheduleError(f"dst: gap must be 'shift' or 'skip', got {self.gap!r}")
        if self.repeat not in (None, "first", "both"):
            raise ScheduleError(f"dst: repeat must be 'first' or 'both', got {self.repeat!r}")


# --------------------------------------------------------------------------------------
# Instants
# --------------------------------------------------------------------------------------


def format_instant(dt: datetime) -> str:
    """Format an instant as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC, whole seconds).

    Parameters
    ----------
    dt
        An aware datetime (any zone); a naive one is taken to be UTC. Sub-second parts
        are dropped.

    Returns
    -------
    str
        For example ``2026-03-29T01:00:00Z``.
    """
    u = dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"


def parse_instant(text: str) -> datetime:
    """Parse an RFC 3339 / ISO 8601 instant into an aware UTC datetime.

    Parameters
    ----------
    text
        ``2026-01-01T09:00:00Z``, ``2026-01-01T10:00:00+01:00``; a value without an
        offset (``2026-01-01T09:00:00``) is taken to be UTC.

    Returns
    -------
    datetime
        Aware, in UTC; sub-second parts are kept.

    Raises
    ------
    ScheduleError
        When the text is not an instant.
    """
    if not isinstance(text, str):
        raise ScheduleError(f"invalid instant {text!r}: expected a string")
    stripped = text.strip()
    shown = _shorten(stripped)
    if not stripped or len(stripped) > 64:
        raise ScheduleError(f"invalid instant '{shown}': expected RFC 3339 such as 2026-01-01T09:00:00Z")
    try:
        # 3.11's fromisoformat takes a trailing Z and most ISO 8601 forms.
        parsed = datetime.fromisoformat(stripped)
    except ValueError:
        raise ScheduleError(
            f"invalid instant '{shown}': expected RFC 3339 such as 2026-01-01T09:00:00Z"
        ) from None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise ScheduleError(f"invalid instant '{shown}': out of range") from None


def _to_epoch(dt: datetime, what: str) -> tuple[int, bool]:
    """Whole seconds since the epoch (floored) and whether a sub-second part was dropped."""
    if dt.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got {dt!r}")
    # timestamp() is a float; removing the microseconds first leaves a whole number to
    # within far less than 0.5 s at any datetime, so round() makes it exact (and fast).
    return round(dt.timestamp() - dt.microsecond / 1_000_000), dt.microsecond != 0


def _floor_s(dt: datetime, what: str) -> int:
    return _to_epoch(dt, what)[0]


def _ceil_s(dt: datetime, what: str) -> int:
    seconds, fraction = _to_epoch(dt, what)
    return seconds + 1 if fraction else seconds


def _from_epoch(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _shorten(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------------------
# Time zones
# --------------------------------------------------------------------------------------


def validate_timezone(name: str) -> zoneinfo.ZoneInfo:
    """Resolve an IANA time-zone name.

    Parameters
    ----------
    name
        For example ``Europe/Berlin`` or ``UTC``.

    Returns
    -------
    zoneinfo.ZoneInfo

    Raises
    ------
    ScheduleError
        When the name is empty, absurd, or not a known zone.
    """
    if not isinstance(name, str) or not name:
        raise ScheduleError("timezone: empty time zone name")
    if len(name) > 64 or not name.isascii() or not name.isprintable() or name != name.strip():
        raise ScheduleError(f"timezone: invalid time zone name '{_shorten(name)}'")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        # ValueError for malformed keys ("../x"), OSError for directories ("Europe").
        raise ScheduleError(f"timezone: unknown time zone '{name}'") from None


_UTC_NAMES: Final = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Zulu", "Zulu", "Universal"})

_YEAR_STARTS: dict[int, int] = {}


def _year_start(year: int) -> int:
    start = _YEAR_STARTS.get(year)
    if start is None:
        start = (date(year, 1, 1).toordinal() - _EPOCH_ORDINAL) * 86400
        _YEAR_STARTS[year] = start
    return start


class _YearTransitions:
    """Offset transitions whose instant falls in one UTC year."""

    __slots__ = ("instants", "offset_before", "offsets")

    def __init__(self, offset_before: int, instants: list[int], offsets: list[int]) -> None:
        self.offset_before = offset_before  # offset in force just before the year starts
        self.instants = instants  # first instant with the new offset
        self.offsets = offsets  # the new offset, seconds east of UTC


class _Zone:
    """A time zone seen as segments of constant UTC offset.

    zoneinfo does not expose its transitions, so they are found once per zone and UTC
    year by probing the offset daily and bisecting each change to the second, then
    cached. (Two transitions less than a day apart would be missed; tzdata has none
    since 1970.)
    """

    __slots__ = ("_last", "_years", "tz")

    def __init__(self, tz: zoneinfo.ZoneInfo) -> None:
        self.tz = tz
        self._years: dict[int, _YearTransitions] = {}
        # The last segment answered: consecutive calls mostly land in the same one.
        self._last: tuple[int, int, int, int, int, int] = (0, 0, 0, 0, 0, 0)

    def offset_at(self, instant: int) -> int:
        off = _from_epoch(instant).astimezone(self.tz).utcoffset()
        assert off is not None  # a ZoneInfo always answers
        return off.days * 86400 + off.seconds

    def _year(self, year: int) -> _YearTransitions:
        info = self._years.get(year)
        if info is not None:
            return info
        start, end = _year_start(year), _year_start(year + 1)
        probe = start - 1
        before = self.offset_at(probe)
        current = before
        instants: list[int] = []
        offsets: list[int] = []
        while probe < end - 1:
            nxt = min(probe + 86400, end - 1)
            off = self.offset_at(nxt)
            if off != current:
                lo, hi = probe, nxt  # offset(lo) == current, offset(hi) != current
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if self.offset_at(mid) == current:
                        lo = mid
                    else:
                        hi = mid
                instants.append(hi)
                offsets.append(off)
                current = off
            probe = nxt
        info = _YearTransitions(before, instants, offsets)
        self._years[year] = info
        return info

    def segment(self, instant: int) -> tuple[int, int, int, int, int]:
        """The constant-offset segment holding ``instant``.

        Returns ``(start, offset_before_start, offset, end, offset_from_end)``: the
        offset is ``offset`` on ``[start, end)``. A stretch of more than a year without
        transitions is cut into pseudo-segments whose neighbouring offsets are equal.
        """
        last = self._last
        if last[0] <= instant < last[3] and last[5]:
            return last[0], last[1], last[2], last[3], last[4]
        year = _from_epoch(instant).year
        info = self._year(year)
        i = bisect.bisect_right(info.instants, instant)
        if i > 0:
            start, offset = info.instants[i - 1], info.offsets[i - 1]
            before = info.offsets[i - 2] if i > 1 else info.offset_before
        else:
            offset = info.offset_before
            prev = self._year(year - 1)
            if prev.instants:
                start = prev.instants[-1]
                before = prev.offsets[-2] if len(prev.instants) > 1 else prev.offset_before
            else:
                start, before = _year_start(year - 1), offset
        if i < len(info.instants):
            end, after = info.instants[i], info.offsets[i]
        else:
            nxt = self._year(year + 1)
            if nxt.instants:
                end, after = nxt.instants[0], nxt.offsets[0]
            else:
                end, after = _year_start(year + 2), offset
        self._last = (start, before, offset, end, after, 1)
        return start, before, offset, end, after


@lru_cache(maxsize=1024)
def _zone(name: str) -> _Zone | None:
    """The segment view of a zone; ``None`` for UTC (no offsets to apply)."""
    if name in _UTC_NAMES:
        return None
    return _Zone(validate_timezone(name))


# --------------------------------------------------------------------------------------
# Cron fields
# --------------------------------------------------------------------------------------

_MONTH_NAMES: Final = {
    name: i + 1
    for i, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
    )
}
_DAY_NAMES: Final = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_AWS_DOW_NAMES: Final = {name: i + 1 for i, name in enumerate(_DAY_NAMES)}  # SUN=1 .. SAT=7
_UNIX_DOW_NAMES: Final = {name: i for i, name in enumerate(_DAY_NAMES)}  # SUN=0 .. SAT=6
_NUMBER = re.compile(r"[0-9]{1,4}")


@dataclass(frozen=True)
class _FieldDef:
    name: str
    lo: int
    hi: int
    names: dict[str, int] | None = None


_MINUTE = _FieldDef("minute", 0, 59)
_HOUR = _FieldDef("hour", 0, 23)
_DOM = _FieldDef("day-of-month", 1, 31)
_MONTH = _FieldDef("month", 1, 12, _MONTH_NAMES)
_AWS_DOW = _FieldDef("day-of-week", 1, 7, _AWS_DOW_NAMES)
_UNIX_DOW = _FieldDef("day-of-week", 0, 7, _UNIX_DOW_NAMES)
_YEAR = _FieldDef("year", MIN_YEAR, MAX_YEAR)


class _FieldParser:
    """Parses one cron field into a set of values (plus the AWS day specials)."""

    def __init__(self, prefix: str, fd: _FieldDef) -> None:
        self.prefix = prefix
        self.fd = fd

    def fail(self, message: str) -> ScheduleError:
        return ScheduleError(f"{self.prefix}: {message}")

    def value(self, token: str, whole: str) -> int:
        """One number or name; ``whole`` is the list item it came from, for messages."""
        fd = self.fd
        if not token:
            raise self.fail(f"{fd.name} '{whole}' is missing a value")
        if fd.names is not None and token.upper() in fd.names:
            return fd.names[token.upper()]
        if not _NUMBER.fullmatch(token):
            if fd.names is not None:
                kind = "month" if fd is _MONTH else "day"
                raise self.fail(f"{fd.name} '{token}' is not a number or {kind} name")
            raise self.fail(f"{fd.name} '{token}' is not a number")
        number = int(token)
        if not fd.lo <= number <= fd.hi:
            raise self.fail(f"{fd.name} '{token}' out of range {fd.lo}-{fd.hi}")
        return number

    def item(self, token: str) -> set[int]:
        """``*``, ``v``, ``a-b``, each optionally ``/step``; ``v/step`` runs to the top."""
        fd = self.fd
        base, slash, step_text = token.partition("/")
        step = 1
        if slash:
            if not _NUMBER.fullmatch(step_text):
                raise self.fail(f"{fd.name} step '{step_text}' in '{token}' is not a number")
            step = int(step_text)
            if step < 1:
                raise self.fail(f"{fd.name} step in '{token}' must be at least 1")
        if base == "*":
            lo, hi = fd.lo, fd.hi
        elif "-" in base:
            first, _, last = base.partition("-")
            lo, hi = self.value(first, token), self.value(last, token)
            if lo > hi:
                raise self.fail(f"{fd.name} range '{base}' is reversed (start after end)")
        else:
            lo = self.value(base, token)
            hi = fd.hi if slash else lo
        return set(range(lo, hi + 1, step))

    def field(self, text: str) -> tuple[int, ...]:
        values: set[int] = set()
        for token in self.tokens(text):
            values |= self.item(token)
        return tuple(sorted(values))

    def tokens(self, text: str) -> list[str]:
        tokens = text.split(",")
        if any(not t for t in tokens):
            raise self.fail(f"{self.fd.name} '{text}' has an empty list item")
        return tokens


@dataclass(frozen=True)
class _DomSpec:
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
class _DowSpec:
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


_ALL_DOM = _DomSpec(frozenset(range(1, 32)))
_ALL_DOW = _DowSpec(frozenset(range(7)))


def _aws_weekday(value: int) -> int:
    return (value + 5) % 7  # AWS 1=SUN .. 7=SAT -> Python 0=MON .. 6=SUN


def _unix_weekday(value: int) -> int:
    return (value + 6) % 7  # Unix 0/7=SUN .. 6=SAT -> Python 0=MON .. 6=SUN


def _parse_aws_dom(prefix: str, text: str) -> _DomSpec:
    parser = _FieldParser(prefix, _DOM)
    days: set[int] = set()
    last = last_weekday = False
    nearest: list[int] = []
    for token in parser.tokens(text):
        upper = token.upper()
        if upper == "L":
            last = True
        elif upper == "LW":
            last_weekday = True
        elif upper.endswith("W"):
            nearest.append(parser.value(token[:-1], token))
        elif "#" in token:
            raise parser.fail(f"'#' is only allowed in day-of-week, got day-of-month '{token}'")
        elif upper.startswith("L"):
            raise parser.fail(f"day-of-month '{token}' is not supported (use L, LW or nW)")
        else:
            days |= parser.item(token)
    return _DomSpec(frozenset(days), last, last_weekday, tuple(sorted(nearest)))


def _parse_aws_dow(prefix: str, text: str) -> _DowSpec:
    parser = _FieldParser(prefix, _AWS_DOW)
    weekdays: set[int] = set()
    nth: list[tuple[int, int]] = []
    last_of: list[int] = []
    for token in parser.tokens(text):
        upper = token.upper()
        if "#" in token:
            day, _, occurrence = token.partition("#")
            wd = _aws_weekday(parser.value(day, token))
            if not _NUMBER.fullmatch(occurrence) or not 1 <= int(occurrence) <= 5:
                raise parser.fail(f"day-of-week '{token}': the occurrence after '#' must be 1-5")
            nth.append((wd, int(occurrence)))
        elif upper == "L":
            weekdays.add(_aws_weekday(7))  # 'L' alone is the last day of the week: Saturday
        elif upper.endswith("L"):
            last_of.append(_aws_weekday(parser.value(token[:-1], token)))
        elif upper.endswith("W"):
            raise parser.fail(f"'W' is only allowed in day-of-month, got day-of-week '{token}'")
        else:
            weekdays.update(_aws_weekday(v) for v in parser.item(token))
    return _DowSpec(frozenset(weekdays), tuple(sorted(set(nth))), tuple(sorted(set(last_of))))


def _reject_aws_only(prefix: str, fd: _FieldDef, text: str) -> None:
    """Name AWS-only syntax in a 5-field expression instead of calling it a bad number."""
    upper = text.upper()
    marker = next((m for m in ("?", "#") if m in upper), None)
    if marker is None:
        for part in re.split(r"[,\-/]", upper):
            if part and part not in (fd.names or {}) and (part[0] == "L" or part[-1] in "LW"):
                marker = "L" if "L" in part else "W"
                break
    if marker is not None:
        raise ScheduleError(
            f"{prefix}: {fd.name} '{text}': '{marker}' is AWS-only; write cron(...) with 6 fields"
        )


# --------------------------------------------------------------------------------------
# Schedules
# --------------------------------------------------------------------------------------


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
        dom: _DomSpec,
        dow: _DowSpec,
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
        self._date_fields = date_fields  # for error messages, e.g. "day-of-month '31', month '2'"
        options = dst or DstOptions()
        # DST overrides only mean something for fixed-time expressions.
        self._shift_gap = fixed_time and options.gap != "skip"
        self._first_pass_only = fixed_time and options.repeat != "both"
        self._zone = _zone(timezone)
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
        d0 = date.fromordinal(days_since + _EPOCH_ORDINAL)
        y, mo, d = d0.year, d0.month, d0.day
        h, mi = rest // 3600, rest % 3600 // 60
        found = self._next_fields(y, mo, d, h, mi)
        if found is None:
            return None
        fy, fmo, fd, fh, fmi = found
        ordinal = d0.toordinal() if (fy, fmo, fd) == (y, mo, d) else date(fy, fmo, fd).toordinal()
        return (ordinal - _EPOCH_ORDINAL) * 86400 + fh * 3600 + fmi * 60

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

    def first_wall_year(self) -> int | None:
        """The local year of the first slot from 1970 on, or ``None`` if it never fires."""
        found = self._next_fields(MIN_YEAR, 1, 1, 0, 0)
        return None if found is None else found[0]

    # -- instants -----------------------------------------------------------------------

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime | None:
        """The first slot strictly after ``after``; ``anchor`` is ignored.

        See :meth:`Schedule.next_after` and the module notes on daylight saving.
        """
        a = _floor_s(after, "after")  # an integer slot is > after iff it is > floor(after)
        found = self._next_instant(a)
        return None if found is None else _from_epoch(found)

    def _next_instant(self, a: int) -> int | None:
        if a >= _END_S:
            return None
        a = max(a, _LOW_S)  # nothing fires before 1970; keeps the calendar maths in range
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
            if wall is None:
                return None
            if wall - offset < end:
                return wall - offset
            if after_end > offset and self._shift_gap and wall < end + after_end:
                return end  # the wall time fell in the spring-forward gap: fire at its end
            boundary = end
            start, before, offset, end, after_end = zone.segment(boundary)
            # From the boundary on, not from `start`: a pseudo-segment (cut at a year
            # start) can begin before the boundary we came from.
            lo = boundary + offset


# -- cron parsing ----------------------------------------------------------------------

_UNIX_MACROS: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _parse_aws_cron(expression: str, body: str, timezone: str, dst: DstOptions | None) -> CronSchedule:
    prefix = "cron"
    fields = body.split()
    if len(fields) != 6:
        raise ScheduleError(
            f"cron: expected 6 fields (minute hour day-of-month month day-of-week year), got {len(fields)}"
        )
    minute, hour, dom, month, dow, year = fields
    for fd, text in ((_MINUTE, minute), (_HOUR, hour), (_MONTH, month), (_YEAR, year)):
        if "?" in text:
            raise ScheduleError(
                f"cron: '?' is only allowed in day-of-month or day-of-week, got {fd.name} '{text}'"
            )
    for fd, text in ((_DOM, dom), (_AWS_DOW, dow)):
        if "?" in text and text != "?":
            raise ScheduleError(f"cron: '?' must stand alone in {fd.name}, got '{text}'")
    if dom == "?" and dow == "?":
        raise ScheduleError("cron: '?' may be used in only one of day-of-month and day-of-week")
    if dom != "?" and dow != "?":
        raise ScheduleError(
            "cron: one of day-of-month and day-of-week must be '?' (AWS rule), e.g. cron(0 9 * * ? *)"
        )
    minutes = _FieldParser(prefix, _MINUTE).field(minute)
    hours = _FieldParser(prefix, _HOUR).field(hour)
    months = _FieldParser(prefix, _MONTH).field(month)
    years = _FieldParser(prefix, _YEAR).field(year)
    dom_spec = _ALL_DOM if dom in ("?", "*") else _parse_aws_dom(prefix, dom)
    dow_spec = _ALL_DOW if dow in ("?", "*") else _parse_aws_dow(prefix, dow)
    return CronSchedule(
        expression,
        timezone,
        dst,
        kind="cron",
        minutes=minutes,
        hours=hours,
        months=months,
        years=years,
        dom=dom_spec,
        dow=dow_spec,
        either_day=False,
        fixed_time=not minute.startswith("*") and not hour.startswith("*"),
        date_fields=_describe(
            (("day-of-month", dom), ("day-of-week", dow), ("month", month), ("year", year))
        ),
    )


def _parse_unix_cron(expression: str, text: str, timezone: str, dst: DstOptions | None) -> CronSchedule:
    prefix = "unix cron"
    body = _UNIX_MACROS.get(text.lower(), text) if text.startswith("@") else text
    if body.startswith("@"):
        known = ", ".join(_UNIX_MACROS)
        raise ScheduleError(f"unix cron: unknown macro '{_shorten(text)}' (known: {known})")
    fields = body.split()
    if len(fields) == 6:
        raise ScheduleError(
            "unix cron: expected 5 fields, got 6; wrap AWS expressions as cron(min hour dom month dow year)"
        )
    if len(fields) != 5:
        raise ScheduleError(
            f"unix cron: expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}"
        )
    minute, hour, dom, month, dow = fields
    for fd, text_ in ((_MINUTE, minute), (_HOUR, hour), (_DOM, dom), (_MONTH, month), (_UNIX_DOW, dow)):
        _reject_aws_only(prefix, fd, text_)
    dom_days = _FieldParser(prefix, _DOM).field(dom)
    dow_values = _FieldParser(prefix, _UNIX_DOW).field(dow)
    return CronSchedule(
        expression,
        timezone,
        dst,
        kind="unix",
        minutes=_FieldParser(prefix, _MINUTE).field(minute),
        hours=_FieldParser(prefix, _HOUR).field(hour),
        months=_FieldParser(prefix, _MONTH).field(month),
        years=tuple(range(MIN_YEAR, MAX_YEAR + 1)),
        dom=_DomSpec(frozenset(dom_days)),
        dow=_DowSpec(frozenset(_unix_weekday(v) for v in dow_values)),
        # Vixie: a field "is restricted" unless it starts with '*'; OR only when both are.
        either_day=not dom.startswith("*") and not dow.startswith("*"),
        fixed_time=not minute.startswith("*") and not hour.startswith("*"),
        date_fields=_describe((("day-of-month", dom), ("day-of-week", dow), ("month", month))),
    )


def _describe(fields: tuple[tuple[str, str], ...]) -> str:
    """The restricted date fields, for a "never fires" message."""
    return ", ".join(f"{name} '{text}'" for name, text in fields if text not in ("*", "?"))


# -- the other kinds ---------------------------------------------------------------------

_UNITS: Final = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
_PERIOD = re.compile(r"([0-9]{1,9})\s+([A-Za-z]+)")


def _parse_period(kind: str, body: str) -> int:
    match = _PERIOD.fullmatch(body)
    if match is None:
        raise ScheduleError(
            f"{kind}: expected '{kind}(N unit)' such as {kind}(5 minutes), got '{_shorten(body)}'"
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


class RateSchedule(Schedule):
    """``rate(N unit)``: slots at ``anchor + k*N`` (k >= 0) in elapsed time.

    The anchor (a job's ``start_at`` or its registration instant) is rounded up to the
    whole second; without one, ``after`` is the anchor, so the first slot is ``after + N``.
    Daylight saving plays no part.
    """

    kind = "rate"

    def __init__(self, expression: str, timezone: str, dst: DstOptions | None, seconds: int) -> None:
        super().__init__(expression, timezone, dst)
        self._seconds = seconds
        self.period = timedelta(seconds=seconds)

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime | None:
        """``anchor + k*N`` for the smallest k >= 0 that is strictly after ``after``."""
        if anchor is None:  # the grid starts at `after` itself, which is not after itself
            slot = _ceil_s(after, "after") + self._seconds
            return _from_epoch(slot) if slot < _END_S else None
        origin = _ceil_s(anchor, "anchor")
        a = _floor_s(after, "after")
        k = 0 if origin > a else (a - origin) // self._seconds + 1
        slot = origin + k * self._seconds
        return _from_epoch(slot) if slot < _END_S else None

    def slots(self, after: datetime, anchor: datetime | None = None, count: int = 5) -> list[datetime]:
        """As :meth:`Schedule.slots`; without an anchor the grid starts at ``after``."""
        if anchor is None:
            first = self.next_after(after)
            if first is None:
                return []
            anchor = first  # the grid is after + k*N: anchor it on its first slot
        return super().slots(after, anchor, count)


class DelaySchedule(Schedule):
    """``delay(N unit)``: each run starts N after the previous run finished.

    The worker calls ``next_after(finish_instant)`` for the next run; the first run is at
    ``anchor + N``. :meth:`slots` gives only that first slot, since the later ones
    depend on when runs finish.
    """

    kind = "delay"

    def __init__(self, expression: str, timezone: str, dst: DstOptions | None, seconds: int) -> None:
        super().__init__(expression, timezone, dst)
        self._seconds = seconds
        self.period = timedelta(seconds=seconds)

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime | None:
        """``anchor + N`` if that is after ``after``, else ``ceil(after) + N``."""
        a = _floor_s(after, "after")
        if anchor is not None:
            first = _ceil_s(anchor, "anchor") + self._seconds
            if first > a:
                return _from_epoch(first) if first < _END_S else None
        slot = _ceil_s(after, "after") + self._seconds
        return _from_epoch(slot) if slot < _END_S else None

    def slots(self, after: datetime, anchor: datetime | None = None, count: int = 5) -> list[datetime]:
        """The first slot only (or none when ``count`` is 0)."""
        return super().slots(after, anchor, min(count, 1))


class AtSchedule(Schedule):
    """``at(YYYY-MM-DDTHH:MM:SS)``: one run at that local time in the zone.

    A fixed-time expression for daylight saving: a time in a spring-forward gap fires at
    the gap's end (``gap="skip"``: the expression is rejected, it would never fire), a
    repeated time fires on its first pass (``repeat="both"``: on both).
    """

    kind = "at"

    def __init__(
        self, expression: str, timezone: str, dst: DstOptions | None, instants: tuple[int, ...]
    ) -> None:
        super().__init__(expression, timezone, dst)
        self._instants = instants

    @property
    def instants(self) -> tuple[datetime, ...]:
        """The instant(s) this schedule fires at (two only with ``repeat="both"``)."""
        return tuple(_from_epoch(i) for i in self._instants)

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime | None:
        """The instant if it is strictly after ``after``, else ``None``."""
        a = _floor_s(after, "after")
        return next((_from_epoch(i) for i in self._instants if i > a), None)


class AfterSchedule(Schedule):
    """``after(job[, job...])``: fires for slot S when every parent succeeded for S.

    It has no time slots of its own: :meth:`next_after` and :meth:`slots` raise
    :class:`ScheduleError` (rather than return ``None``, which would read as "this job
    is finished").
    """

    kind = "after"

    def __init__(
        self, expression: str, timezone: str, dst: DstOptions | None, parents: tuple[str, ...]
    ) -> None:
        super().__init__(expression, timezone, dst)
        self.parents = parents

    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime | None:
        """Always raises: ``after(...)`` jobs fire when their parents succeed."""
        raise ScheduleError("after(...) jobs fire when their parents succeed")

    def slots(self, after: datetime, anchor: datetime | None = None, count: int = 5) -> list[datetime]:
        """Always raises, as :meth:`next_after`."""
        raise ScheduleError("after(...) jobs fire when their parents succeed")


_AT = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})")
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _parse_at(expression: str, body: str, timezone: str, dst: DstOptions | None) -> AtSchedule:
    match = _AT.fullmatch(body)
    if match is None:
        raise ScheduleError(
            f"at: expected at(YYYY-MM-DDTHH:MM:SS) in local time of the job's zone, got '{_shorten(body)}'"
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
    wall = _floor_s(local.replace(tzinfo=UTC), "at")
    assert off0 is not None and off1 is not None
    o0, o1 = int(off0.total_seconds()), int(off1.total_seconds())
    if o0 == o1:
        instants: tuple[int, ...] = (wall - o0,)
    elif o0 > o1:  # repeated by fall-back: fold=0 is the first pass
        instants = (wall - o0, wall - o1) if options.repeat == "both" else (wall - o0,)
    else:  # in a spring-forward gap: fold=1 reads it with the later offset, landing before the gap
        if options.gap == "skip":
            raise ScheduleError(f"at: {body} does not exist in {timezone} (DST gap) and dst.gap is 'skip'")
        zone = _zone(timezone)
        assert zone is not None  # UTC has no gaps
        instants = (zone.segment(wall - o1)[3],)  # the end of the gap
    return AtSchedule(expression, timezone, dst, instants)


def _parse_after(expression: str, body: str, timezone: str, dst: DstOptions | None) -> AfterSchedule:
    parents = tuple(p.strip() for p in body.split(","))
    if parents == ("",):
        raise ScheduleError("after: expected at least one parent job id, e.g. after(extract)")
    seen: set[str] = set()
    for parent in parents:
        if not _JOB_ID.fullmatch(parent):
            raise ScheduleError(f"after: invalid job id '{_shorten(parent)}' (use 1-64 of A-Z a-z 0-9 _ -)")
        if parent in seen:
            raise ScheduleError(f"after: job id '{parent}' is listed twice")
        seen.add(parent)
    return AfterSchedule(expression, timezone, dst, parents)


# --------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------

_WRAPPED = re.compile(r"([A-Za-z]+)\((.*)\)", re.DOTALL)


def parse_schedule(
    expression: str,
    timezone: str = "UTC",
    dst: DstOptions | None = None,
    *,
    now: datetime | None = None,
) -> Schedule:
    """Parse and validate a schedule expression.

    Parameters
    ----------
    expression
        ``cron(...)``, a 5-field Unix expression or ``@daily``-style macro,
        ``rate(N unit)``, ``at(YYYY-MM-DDTHH:MM:SS)``, ``delay(N unit)`` or
        ``after(job[, job...])``; at most 256 characters.
    timezone
        IANA zone in which cron and ``at`` local times are read.
    dst
        Daylight-saving overrides for fixed-time expressions.
    now
        When given, a cron expression with no slot after ``now`` (a year range wholly
        past) is rejected too. Parsing itself never reads the clock.

    Returns
    -------
    Schedule
        A :class:`CronSchedule`, :class:`RateSchedule`, :class:`AtSchedule`,
        :class:`DelaySchedule` or :class:`AfterSchedule`.

    Raises
    ------
    ScheduleError
        For malformed or absurd input, an unknown zone, or an expression that can
        never fire; the one-line message names the problem.
    """
    if not isinstance(expression, str):
        raise ScheduleError(f"schedule must be a string, got {type(expression).__name__}")
    text = expression.strip()
    if not text:
        raise ScheduleError("empty schedule expression")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ScheduleError(
            f"schedule expression too long ({len(text)} characters, at most {MAX_EXPRESSION_LENGTH})"
        )
    if not text.isascii() or not text.replace("\t", " ").isprintable():
        raise ScheduleError("schedule expression has non-ASCII or control characters")
    if dst is not None and not isinstance(dst, DstOptions):
        raise ScheduleError(f"dst must be DstOptions, got {type(dst).__name__}")
    validate_timezone(timezone)

    parsers: dict[str, Callable[[str, str, str, DstOptions | None], Schedule]] = {
        "cron": _parse_aws_cron,
        "at": _parse_at,
        "after": _parse_after,
        "rate": lambda e, b, tz, d: RateSchedule(e, tz, d, _parse_period("rate", b)),
        "delay": lambda e, b, tz, d: DelaySchedule(e, tz, d, _parse_period("delay", b)),
    }
    wrapped = _WRAPPED.fullmatch(text)
    schedule: Schedule
    if wrapped is not None:
        kind = wrapped.group(1).lower()
        parse = parsers.get(kind)
        if parse is None:
            raise ScheduleError(
                f"unknown schedule kind '{_shorten(wrapped.group(1))}(...)': use cron, rate, at, delay, after"
            )
        body = wrapped.group(2).strip()
        if "(" in body or ")" in body:
            raise ScheduleError(f"{kind}: unbalanced or nested parentheses in '{_shorten(text)}'")
        schedule = parse(text, body, timezone, dst)
    elif "(" in text or ")" in text:
        raise ScheduleError(
            f"malformed expression '{_shorten(text)}': expected kind(...) such as cron(...) or rate(...)"
        )
    else:
        schedule = _parse_unix_cron(text, text, timezone, dst)

    if isinstance(schedule, CronSchedule):
        _check_fires(schedule, now)
    return schedule


@lru_cache(maxsize=4096)
def cached_schedule(expression: str, timezone: str = "UTC", dst: DstOptions | None = None) -> Schedule:
    """:func:`parse_schedule` (without ``now``), memoized.

    Every stored job is validated again when it is read, and a poller and a worker read
    the same few expressions over and over. A schedule is not changed once parsed (its
    caches only speed up ``next_after``), so one object serves every caller; errors are
    raised on every call, not cached.
    """
    return parse_schedule(expression, timezone, dst)


def _check_fires(schedule: CronSchedule, now: datetime | None) -> None:
    prefix = "cron" if schedule.kind == "cron" else "unix cron"
    if schedule.first_wall_year() is None:
        raise ScheduleError(f"{prefix}: never fires: no date has {schedule._date_fields}")
    if now is not None and schedule.next_after(now) is None:
        last_year = schedule._years[-1]
        if last_year < now.astimezone(UTC).year:
            raise ScheduleError(
                f"{prefix}: never fires again: year range ends in {last_year}, before {format_instant(now)}"
            )
        raise ScheduleError(f"{prefix}: never fires after {format_instant(now)}")


def jitter_offset_s(job_id: str, slot: datetime, jitter_seconds: int) -> int:
    """A deterministic dispatch delay for one (job, slot).

    Parameters
    ----------
    job_id
        The job's id.
    slot
        The slot's nominal instant (its identity, which jitter does not change).
    jitter_seconds
        The job's jitter bound; 0 disables jitter.

    Returns
    -------
    int
        Seconds in ``[0, jitter_seconds]``, the same on every node and every replay
        (SHA-256, not Python's per-process salted ``hash``).
    """
    if jitter_seconds < 0:
        raise ValueError(f"jitter_seconds must be >= 0, got {jitter_seconds}")
    if jitter_seconds == 0:
        return 0
    digest = hashlib.sha256(f"{job_id}\x00{format_instant(slot)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (jitter_seconds + 1)
