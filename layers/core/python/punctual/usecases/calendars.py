"""Exclusion calendars: whole days, in a calendar's own zone, on which a job does not fire.

A calendar belongs to a tenant and has a name (``PUT /v1/calendars/{name}``); a job names
calendars in ``exclude_calendars``. A slot is *excluded* when its nominal instant, read in a
calendar's time zone, falls on one of that calendar's days (a listed date, or a day inside
an inclusive range). So ``Europe/Berlin`` holidays exclude a ``cron(0 23 * * ? *)`` UTC slot
on the evening before the holiday, which is already the holiday in Berlin.

Exclusion is checked where a slot is released (:mod:`punctual.dispatch.polling.release`) against the
calendar as it is then, never copied into the job: a calendar change (its ``version`` grows by
one per change) applies to every job that names it from the next released slot on. An
excluded slot is not sent; it gets an execution record ``EXCLUDED`` whose error names the
calendar and its version, so the history still shows the slot was considered.

This module is pure (no store, no clock): the model, day arithmetic, and the iteration of a
job's slots with excluded ones skipped (``next_fire_at``, previews, ``punctual next``,
backfill planning).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, date, datetime, time, timedelta
from functools import cached_property
from zoneinfo import ZoneInfo

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from punctual.models import (
    ACCEPTED,
    CALENDAR_NAME_RE,
    CALENDAR_NAME_RULE,
    MAX_TIMEZONE_CHARS,
    accepted_before,
)
from punctual.timing import schedules

MAX_DATES = 5000
MAX_RANGES = 1000
MAX_RANGE_DAYS = 3660  # ten years
# Looking for the next slot that is not excluded gives up after this many excluded slots in a
# row (a rate(1 minute) job in a calendar that excludes a whole week passes over 10,080).
MAX_SKIPPED_IN_A_ROW = 20_000
_BEFORE_MIDNIGHT = timedelta(hours=3)  # more than any zone's offset change
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")


def parse_day(text: str, what: str) -> date:
    """``YYYY-MM-DD`` as a date; anything else is a ``ValueError`` naming ``what``."""
    if not isinstance(text, str) or not _DATE_RE.fullmatch(text):
        raise ValueError(f"{what}: {str(text)[:40]!r} is not a date (YYYY-MM-DD)")
    try:
        return date.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"{what}: {text!r} is not a valid date ({exc})") from None


class DayRange(BaseModel):
    """Whole days from ``start`` to ``end``, both included, in the calendar's zone."""

    model_config = ConfigDict(extra="forbid")

    start: str = Field(description="First day excluded (YYYY-MM-DD).", examples=["2026-12-24"])
    end: str = Field(description="Last day excluded, included (YYYY-MM-DD).", examples=["2026-12-26"])

    @model_validator(mode="after")
    def _ordered(self) -> DayRange:
        first, last = parse_day(self.start, "start"), parse_day(self.end, "end")
        if last < first:
            raise ValueError(f"range end {self.end} is before its start {self.start}")
        if (last - first).days >= MAX_RANGE_DAYS:
            raise ValueError(f"range {self.start}..{self.end} is longer than {MAX_RANGE_DAYS} days")
        return self


class CalendarSpec(BaseModel):
    """What a user puts: the days a calendar excludes, in its time zone."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "timezone": "Europe/Berlin",
                    "dates": ["2026-12-25", "2027-01-01"],
                    "ranges": [{"start": "2026-12-24", "end": "2026-12-26"}],
                }
            ]
        },
    )

    timezone: str = Field(
        default="UTC",
        min_length=1,
        max_length=MAX_TIMEZONE_CHARS,
        description="IANA time zone whose days the dates and ranges name.",
        examples=["Europe/Berlin"],
    )
    dates: list[str] = Field(
        default_factory=list,
        max_length=MAX_DATES,
        description=f"Whole days excluded (YYYY-MM-DD), at most {MAX_DATES}.",
        examples=[["2026-12-25"]],
    )
    ranges: list[DayRange] = Field(
        default_factory=list,
        max_length=MAX_RANGES,
        description=f"Inclusive ranges of whole days excluded, at most {MAX_RANGES}.",
    )
    description: str = Field(default="", max_length=1024, description="Free text for people.")

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str, info: ValidationInfo) -> str:
        try:
            schedules.validate_timezone(value)
            if not accepted_before(info.context):  # a place, as a job's zone ('posix/...' broke its users)
                schedules.check_place(value)
        except schedules.ScheduleError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("dates")
    @classmethod
    def _dates(cls, value: list[str]) -> list[str]:
        for index, text in enumerate(value):
            parse_day(text, f"dates[{index}]")
        return value


class Calendar(CalendarSpec):
    """A stored calendar: the spec plus identity and its version (one more per change)."""

    model_config = ConfigDict(extra="ignore")

    name: str
    tenant: str = "default"
    version: int = 1
    created_at: AwareDatetime
    updated_at: AwareDatetime

    @field_validator("name")
    @classmethod
    def _name(cls, value: str, info: ValidationInfo) -> str:
        if not accepted_before(info.context):  # a stored calendar's name: checked when it was written
            check_calendar_name(value)
        return value

    @cached_property
    def _days(self) -> tuple[frozenset[int], tuple[tuple[int, int], ...]]:
        singles = frozenset(date.fromisoformat(d).toordinal() for d in self.dates)
        spans = tuple(
            sorted(
                (date.fromisoformat(r.start).toordinal(), date.fromisoformat(r.end).toordinal())
                for r in self.ranges
            )
        )
        return singles, spans

    @cached_property
    def _tz(self) -> ZoneInfo:
        # Resolved as a job's zone is (a legacy name a calendar stored before the place rule included)
        return schedules.validate_timezone(self.timezone)

    def excludes_day(self, day: date) -> bool:
        """Whether ``day`` (a day of this calendar's zone) is excluded."""
        singles, spans = self._days
        ordinal = day.toordinal()
        return ordinal in singles or any(first <= ordinal <= last for first, last in spans)

    def excludes(self, instant: datetime) -> bool:
        """Whether ``instant`` falls on an excluded day of this calendar's zone."""
        return self.excludes_day(instant.astimezone(self._tz).date())

    def next_included_day(self, instant: datetime) -> datetime:
        """The start (local midnight, as UTC) of the first day after ``instant``'s that this calendar
        does not exclude: where a run of excluded days that holds ``instant`` ends. Bounded: the
        calendar names at most ``MAX_DATES`` days and ``MAX_RANGES`` ranges of ``MAX_RANGE_DAYS``."""
        singles, spans = self._days
        ordinal = instant.astimezone(self._tz).date().toordinal() + 1
        while True:
            if ordinal in singles:
                ordinal += 1
                continue
            ends = [last for first, last in spans if first <= ordinal <= last]
            if not ends:
                break
            ordinal = max(ends) + 1  # past the range at once
        return datetime.combine(date.fromordinal(ordinal), time(0), tzinfo=self._tz).astimezone(UTC)

    def spec(self) -> CalendarSpec:
        return CalendarSpec.model_validate(
            self.model_dump(include=set(CalendarSpec.model_fields)), context=ACCEPTED
        )


def check_calendar_name(name: str) -> None:
    if not CALENDAR_NAME_RE.fullmatch(name):
        raise ValueError(f"calendar name {name[:80]!r}: {CALENDAR_NAME_RULE}")


def excluding(calendars: Iterable[Calendar], instant: datetime) -> Calendar | None:
    """The first of ``calendars`` that excludes ``instant``, or None."""
    for calendar in calendars:
        if calendar.excludes(instant):
            return calendar
    return None


def on_excluded_day(calendars: Sequence[Calendar]) -> Callable[[datetime], bool]:
    """Whether an instant falls on a day one of ``calendars`` excludes (a predicate for the pure
    release planning, :func:`punctual.timing.slots.calendar_before_catchup`)."""
    return lambda instant: excluding(calendars, instant) is not None


def exclusion_note(calendar: Calendar) -> str:
    """The error of an EXCLUDED record: which calendar, at which version."""
    return f"excluded by calendar {calendar.name!r} (version {calendar.version})"


CALENDAR_MISSING = "calendar missing"


def calendar_missing_note(names: Iterable[str]) -> str:
    """The error of a slot recorded MISSED because a calendar its job excludes is gone (a job
    write checks that each exists and a delete refuses one in use, so this is a fault to look
    into): the slot is not run, since it may fall on one of the calendar's days."""
    named = ", ".join(repr(name) for name in names)
    return f"{CALENDAR_MISSING}: {named} (excluded by the job, not found; the slot was not run)"


def present_calendars(
    read: Callable[[set[tuple[str, str]], bool], dict[tuple[str, str], Calendar]], keys: set[tuple[str, str]]
) -> dict[tuple[str, str], Calendar]:
    """The calendars of ``keys`` through ``read(keys, consistent)``: an eventually consistent read
    first, then a consistent one of those it missed (a read that is behind never makes a
    calendar missing)."""
    found = read(keys, False)
    absent = keys - set(found)
    if absent:
        found.update(read(absent, True))
    return found


def included_slots(
    next_after: Callable[[datetime], datetime | None],
    after: datetime,
    calendars: Sequence[Calendar],
    count: int,
    excluded: list[datetime] | None = None,
    until: datetime | None = None,
) -> list[datetime]:
    """Up to ``count`` slots after ``after`` that no calendar excludes, in order.

    ``next_after(t)`` gives the schedule's first slot strictly after ``t`` (None: no more).
    Excluded slots passed over are appended to ``excluded`` when given. Stops at ``until``
    (exclusive) when given, and after :data:`MAX_SKIPPED_IN_A_ROW` excluded slots in a row (then
    ``excluded`` ends with that many: the caller says the listing was cut short, as fewer than
    ``count`` slots would otherwise pass for the schedule's end).
    """
    found: list[datetime] = []
    skipped = 0
    slot = next_after(after)
    while slot is not None and (until is None or slot < until) and len(found) < count:
        calendar = excluding(calendars, slot)
        if calendar is None:
            found.append(slot)
            skipped = 0
            slot = next_after(slot)
            continue
        skipped += 1
        if excluded is not None:  # every slot passed over is listed: one at a time
            excluded.append(slot)  # the one that reaches the cap too: a full listing tells the caller
        if skipped >= MAX_SKIPPED_IN_A_ROW:
            break
        if excluded is not None:
            slot = next_after(slot)
            continue
        # Else over the whole run of excluded days at once (a rate(1 minute) job in a calendar that
        # excludes a fortnight passes over 20,160 slots). From a little before the next included
        # day's midnight: no slot of it is passed over, whatever the zone's DST does at midnight.
        resume = calendar.next_included_day(slot) - _BEFORE_MIDNIGHT
        slot = next_after(resume) if resume > slot else next_after(slot)
    return found


def preview_step(
    schedule: schedules.Schedule, after: datetime, anchor: datetime | None = None
) -> Callable[[datetime], datetime | None]:
    """The step :func:`included_slots` walks a preview of ``schedule`` from ``after`` with: its
    next slot after an instant; for ``rate(...)`` and ``delay(...)``, on the grid of its first
    slot (QA28: passed over at once, a run of excluded days restarted the grid where the walk
    resumed, so ``punctual next 'rate(1 hour)'`` and the preview showed 00:00 where the job fires
    at 00:30; a ``delay(...)`` chain goes on N after each excluded slot, the same grid)."""
    if not isinstance(schedule, schedules.PeriodSchedule):
        return lambda t: schedule.next_after(t, anchor)
    first = schedule.next_after(after, anchor)
    if first is None:
        return lambda t: None
    return lambda t: schedule.on_grid(t, first)


def stopped_by_cap(found: Sequence[datetime], excluded: Sequence[datetime]) -> bool:
    """Whether :func:`included_slots`, listing into ``excluded``, stopped at
    :data:`MAX_SKIPPED_IN_A_ROW` excluded slots in a row (after its last slot found), rather than
    at the schedule's end: a long listing made of shorter runs is no such stop."""
    last = found[-1] if found else None
    return sum(1 for slot in excluded if last is None or slot > last) >= MAX_SKIPPED_IN_A_ROW


def days_of(calendar: CalendarSpec) -> set[date]:
    """Every day ``calendar`` excludes (tests and the CLI's listing)."""
    days = {date.fromisoformat(d) for d in calendar.dates}
    for span in calendar.ranges:
        day, last = date.fromisoformat(span.start), date.fromisoformat(span.end)
        while day <= last:
            days.add(day)
            day += timedelta(days=1)
    return days
