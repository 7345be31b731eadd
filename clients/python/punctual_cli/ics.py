"""A small reader of iCalendar files (RFC 5545) for exclusion calendars: all-day events only.

What it reads: every ``VEVENT`` whose ``DTSTART`` is a date (``DTSTART;VALUE=DATE:20261225``, or
an 8-digit value), ending at ``DTEND`` (exclusive, as RFC 5545 says; absent: one day) or after a
``DURATION`` of whole days (``P3D``, ``P1W``). Folded lines are unfolded. The calendar's time zone
is ``X-WR-TIMEZONE`` when the file names one. Names (of properties, parameters, components) and
enumerated values are read in any case, as RFC 5545 says (QA28: ``begin:vcalendar`` was refused);
other values are kept as they are.

What it refuses, with the line: an all-day event with ``RRULE`` or ``RDATE`` (recurring events are
out of scope: expand them first, or list the dates), an end that is not after the start (RFC 5545:
an all-day event's DTEND, exclusive, is a later day; a DURATION at least a day), an end past
9999-12-31, a malformed date.
Timed events (``DTSTART`` with a time) are not whole days: they are skipped and counted, and so are
cancelled ones (``STATUS:CANCELLED``, as a calendar application shows none: a holiday called off,
an iTIP cancellation). Days
that touch or overlap are merged into ranges (the calendar's limits count dates and ranges).
``EXDATE`` (an exception to a recurrence) has nothing to apply to: recurring events are refused.
A component inside an event (a ``VALARM``, whose ``DURATION`` is its repeat interval) is not the
event: its properties are passed over.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

_DATE = re.compile(r"^(\d{4})(\d{2})(\d{2})\Z")
_DURATION = re.compile(r"^P(?:(\d+)W|(\d+)D)\Z", re.IGNORECASE)  # (RFC 5545's ABNF: any case)


class IcsError(ValueError):
    """The file cannot be read as a calendar of all-day events (the message names the line)."""


@dataclass
class IcsCalendar:
    """What a file holds: its zone (if named), the single days and the inclusive ranges."""

    timezone: str | None = None
    dates: list[str] = field(default_factory=list)
    ranges: list[dict[str, str]] = field(default_factory=list)
    skipped_timed: int = 0
    skipped_cancelled: int = 0

    def spec(self, timezone: str | None = None) -> dict[str, Any]:
        """A calendar body for ``PUT /v1/calendars/{name}`` (``timezone`` overrides the file's).

        The same days, merged: days and ranges that touch or overlap are one range (QA: a file of
        6,000 consecutive one-day events was refused past the calendar's 5,000 dates), a day
        alone stays a date."""
        spans = sorted(
            [(date.fromisoformat(d), date.fromisoformat(d)) for d in self.dates]
            + [(date.fromisoformat(r["start"]), date.fromisoformat(r["end"])) for r in self.ranges]
        )
        merged: list[list[date]] = []
        for first, last in spans:
            if merged and first <= merged[-1][1] + timedelta(days=1):
                merged[-1][1] = max(merged[-1][1], last)
            else:
                merged.append([first, last])
        return {
            "timezone": timezone or self.timezone or "UTC",
            "dates": [first.isoformat() for first, last in merged if first == last],
            "ranges": [
                {"start": first.isoformat(), "end": last.isoformat()}
                for first, last in merged
                if first != last
            ],
        }


def _unfold(text: str) -> list[tuple[int, str]]:
    """Content lines with their first line number; a line starting with space or tab continues."""
    lines: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw[:1] in (" ", "\t") and lines:
            first, previous = lines[-1]
            lines[-1] = (first, previous + raw[1:])
        elif raw.strip():
            lines.append((number, raw))
    return lines


def _split(line: str) -> tuple[str, dict[str, str], str]:
    """``NAME;P=V;Q=W:value`` -> (NAME, {P: V, Q: W}, value)."""
    head, _, value = line.partition(":")
    name, *params = head.split(";")
    parsed = {}
    for param in params:
        key, _, val = param.partition("=")
        parsed[key.upper()] = val.strip('"')
    return name.upper(), parsed, value.strip()


def _day(value: str, number: int, what: str) -> date:
    match = _DATE.match(value)
    if not match:
        raise IcsError(f"line {number}: {what} {value[:40]!r} is not a date (YYYYMMDD)")
    try:
        return date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError as exc:
        raise IcsError(f"line {number}: {what} {value!r} is not a valid date ({exc})") from None


def parse_ics(text: str) -> IcsCalendar:
    """Read the all-day events of an iCalendar document (see the module docstring)."""
    lines = _unfold(text.lstrip("\ufeff"))
    if not lines or tuple(part.upper() for part in _split(lines[0][1])[::2]) != ("BEGIN", "VCALENDAR"):
        raise IcsError("not an iCalendar file: it does not begin with BEGIN:VCALENDAR")
    found = IcsCalendar()
    event: dict[str, tuple[int, dict[str, str], str]] | None = None
    event_line = 0
    nested = 0  # components inside the event (a VALARM): their properties are not the event's
    for number, line in lines:
        name, params, value = _split(line)
        if name == "X-WR-TIMEZONE" and event is None:
            found.timezone = value or None
        elif name == "BEGIN" and value.upper() == "VEVENT":
            event, event_line, nested = {}, number, 0
        elif name == "END" and value.upper() == "VEVENT":
            if event is None:
                raise IcsError(f"line {number}: END:VEVENT without BEGIN:VEVENT")
            _add_event(found, event, event_line)
            event = None
        elif event is not None and name in ("BEGIN", "END"):
            nested = max(0, nested + (1 if name == "BEGIN" else -1))
        elif event is not None and not nested and name not in event:
            event[name] = (number, params, value)
    if event is not None:
        raise IcsError(f"line {event_line}: VEVENT has no END:VEVENT")
    return found


def _add_event(found: IcsCalendar, event: dict[str, tuple[int, dict[str, str], str]], line: int) -> None:
    if "DTSTART" not in event:
        raise IcsError(f"line {line}: VEVENT has no DTSTART")
    number, params, value = event["DTSTART"]
    if params.get("VALUE", "").upper() != "DATE" and not _DATE.match(value):
        found.skipped_timed += 1  # a timed event is not a whole day
        return
    if "STATUS" in event and event["STATUS"][2].upper() == "CANCELLED":
        found.skipped_cancelled += 1  # an event that does not take place excludes no day
        return
    for recurring in ("RRULE", "RDATE"):
        if recurring in event:
            raise IcsError(
                f"line {event[recurring][0]}: recurring events ({recurring}) are not supported;"
                " list each day (or expand the file) instead"
            )
    first = _day(value, number, "DTSTART")
    last = first  # the last day, included: absent DTEND and DURATION, one day (RFC 5545)
    if "DTEND" in event:
        end_number, _, end_value = event["DTEND"]
        end = _day(end_value, end_number, "DTEND")
        if end < first:
            raise IcsError(f"line {end_number}: the event ends ({end}) before it starts ({first})")
        if end == first:  # RFC 5545: DTEND is exclusive and MUST be later than DTSTART
            raise IcsError(
                f"line {end_number}: the event does not end after it starts ({first}): DTEND"
                f" {end_value!r} is exclusive, the day after the event's last day"
            )
        last = end - timedelta(days=1)
    elif "DURATION" in event:
        duration_number, _, duration = event["DURATION"]
        last = _duration_last(first, duration_number, duration)
    if last == first:
        found.dates.append(first.isoformat())
    else:
        found.ranges.append({"start": first.isoformat(), "end": last.isoformat()})


def _duration_last(first: date, number: int, value: str) -> date:
    """The last day (included) of an all-day event from ``first`` lasting DURATION ``value``."""
    match = _DURATION.match(value)
    if not match:
        raise IcsError(f"line {number}: DURATION {value[:40]!r} is not whole days or weeks")
    digits, unit_days = (match[1], 7) if match[1] else (match[2], 1)
    try:
        days = int(digits.lstrip("0") or "0") * unit_days
    except ValueError:  # more digits than int() reads: far past any date
        days = timedelta.max.days + 1
    if days < 1:
        raise IcsError(
            f"line {number}: the event does not end after it starts ({first}): DURATION {value[:40]!r}"
            " is less than a day"
        )
    try:  # (the exclusive end is never made: an event may end on 9999-12-31, the last date)
        return first + timedelta(days=days - 1)
    except OverflowError:
        raise IcsError(
            f"line {number}: DURATION {value[:40]!r} from {first} ends after {date.max},"
            " the last day a date can name"
        ) from None
