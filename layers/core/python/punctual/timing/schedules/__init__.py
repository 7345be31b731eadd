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

The package, one module per job: :mod:`~punctual.timing.schedules.parser` (the entry point),
:mod:`~punctual.timing.schedules.cron_parser` and :mod:`~punctual.timing.schedules.cron` (cron
parsing and evaluation), :mod:`~punctual.timing.schedules.periods` (``rate``, ``delay``),
:mod:`~punctual.timing.schedules.at`, :mod:`~punctual.timing.schedules.after`,
:mod:`~punctual.timing.schedules.zones` (zones as constant-offset segments),
:mod:`~punctual.timing.schedules.dst` (the daylight-saving policy),
:mod:`~punctual.timing.schedules.jitter` and :mod:`~punctual.timing.schedules.base` (the
:class:`Schedule` interface). This module's names are the package's interface.
"""

from punctual.timing.instants import format_instant
from punctual.timing.schedules.after import AfterSchedule
from punctual.timing.schedules.at import AtSchedule
from punctual.timing.schedules.base import MAX_YEAR, MIN_YEAR, Schedule
from punctual.timing.schedules.cron import CronSchedule
from punctual.timing.schedules.dst import AT_FIRES_ONCE, DstOptions
from punctual.timing.schedules.errors import ScheduleError
from punctual.timing.schedules.jitter import jitter_offset_s
from punctual.timing.schedules.parser import (
    MAX_EXPRESSION_LENGTH,
    cached_schedule,
    check_new_expression,
    parse_instant,
    parse_schedule,
)
from punctual.timing.schedules.periods import DelaySchedule, PeriodSchedule, RateSchedule
from punctual.timing.schedules.zones import check_place, validate_timezone

__all__ = [
    "AT_FIRES_ONCE",
    "MAX_EXPRESSION_LENGTH",
    "MAX_YEAR",
    "MIN_YEAR",
    "AfterSchedule",
    "AtSchedule",
    "CronSchedule",
    "DelaySchedule",
    "DstOptions",
    "PeriodSchedule",
    "RateSchedule",
    "Schedule",
    "ScheduleError",
    "cached_schedule",
    "check_new_expression",
    "check_place",
    "format_instant",
    "jitter_offset_s",
    "parse_instant",
    "parse_schedule",
    "validate_timezone",
]
