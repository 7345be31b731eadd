"""The entry point: one expression (any kind) to a :class:`~punctual.timing.schedules.base.Schedule`.

:func:`parse_schedule` checks what every kind shares (length, characters, zone, DST
options) and hands the body to the parser of its kind; :func:`cached_schedule` is the
memoized form every reader of stored jobs uses. :func:`parse_instant` reads the
instants given beside a schedule (``start_at``, a preview's ``after``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from functools import lru_cache
from typing import Final

from punctual.timing.instants import InstantError, format_instant, parse_rfc3339
from punctual.timing.schedules.after import parse_after
from punctual.timing.schedules.at import parse_at
from punctual.timing.schedules.base import Schedule, shorten
from punctual.timing.schedules.cron import CronSchedule
from punctual.timing.schedules.cron_parser import parse_aws_cron, parse_unix_cron
from punctual.timing.schedules.dst import DstOptions
from punctual.timing.schedules.errors import ScheduleError
from punctual.timing.schedules.periods import DelaySchedule, RateSchedule, parse_period
from punctual.timing.schedules.zones import validate_timezone

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "cached_schedule",
    "check_new_expression",
    "parse_instant",
    "parse_schedule",
]

MAX_EXPRESSION_LENGTH: Final = 256
# after() of its 20 parents, each a job id of up to 64 characters: 1,325 (QA: at 256 a declared CDK
# job, whose parents' ids are 44 characters, could wait on five)
MAX_AFTER_EXPRESSION_LENGTH: Final = 1400


def parse_instant(text: str) -> datetime:
    """An RFC 3339 instant as an aware UTC datetime: :func:`punctual.timing.instants.parse_rfc3339`.

    Raises
    ------
    ScheduleError
        When the text is not an instant, as for the rest of a schedule's input.
    """
    try:
        return parse_rfc3339(text)
    except InstantError as exc:
        raise ScheduleError(str(exc)) from None


def check_new_expression(text: str) -> None:
    """What a new expression meets beyond :func:`parse_schedule`, which still reads a stored one's
    tab: no control character at all (stored as sent, a newline or tab would stay). A job's
    schedule, the preview and ``punctual next`` refuse the same (QA26: the preview answered slots
    for an expression holding a tab, that a job of it refused).

    Raises
    ------
    ScheduleError
        Naming the rule.
    """
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise ScheduleError("schedule must not contain control characters (a newline, a tab, ...)")


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
    limit = MAX_AFTER_EXPRESSION_LENGTH if text[:6].lower() == "after(" else MAX_EXPRESSION_LENGTH
    if len(text) > limit:
        raise ScheduleError(f"schedule expression too long ({len(text)} characters, at most {limit})")
    if not text.isascii() or not text.replace("\t", " ").isprintable():
        raise ScheduleError("schedule expression has non-ASCII or control characters")
    if dst is not None and not isinstance(dst, DstOptions):
        raise ScheduleError(f"dst must be DstOptions, got {type(dst).__name__}")
    validate_timezone(timezone)

    parsers: dict[str, Callable[[str, str, str, DstOptions | None], Schedule]] = {
        "cron": parse_aws_cron,
        "at": parse_at,
        "after": parse_after,
        "rate": lambda e, b, tz, d: RateSchedule(e, tz, d, parse_period("rate", b)),
        "delay": lambda e, b, tz, d: DelaySchedule(e, tz, d, parse_period("delay", b)),
    }
    wrapped = _WRAPPED.fullmatch(text)
    schedule: Schedule
    if wrapped is not None:
        kind = wrapped.group(1).lower()
        parse = parsers.get(kind)
        if parse is None:
            raise ScheduleError(
                f"unknown schedule kind '{shorten(wrapped.group(1))}(...)': use cron, rate, at, delay, after"
            )
        body = wrapped.group(2).strip()
        if "(" in body or ")" in body:
            raise ScheduleError(f"{kind}: unbalanced or nested parentheses in '{shorten(text)}'")
        schedule = parse(text, body, timezone, dst)
    elif "(" in text or ")" in text:
        raise ScheduleError(
            f"malformed expression '{shorten(text)}': expected kind(...) such as cron(...) or rate(...)"
        )
    else:
        schedule = parse_unix_cron(text, text, timezone, dst)

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
        raise ScheduleError(f"{prefix}: never fires: no date has {schedule.date_fields}")
    if now is not None and schedule.next_after(now) is None:
        last_year = schedule.last_year
        if last_year < now.astimezone(UTC).year:
            raise ScheduleError(
                f"{prefix}: never fires again: year range ends in {last_year}, before {format_instant(now)}"
            )
        message = f"{prefix}: never fires after {format_instant(now)}"
        if schedule.has_wall_after(now):
            # Its local times come, each in a gap (QA17: "never fires after" named no cause, for a
            # fixed time under gap 'skip'; QA30: nor for a wildcard minute, which follows real time)
            skipper = (
                "which dst.gap 'skip' skips"
                if schedule.fixed_time
                else "where an expression with a wildcard minute or hour never fires (it follows real time)"
            )
            message += f": its remaining local times fall in daylight-saving gaps, {skipper}"
        raise ScheduleError(message)
