"""Cron parsing: AWS 6-field ``cron(...)`` and Unix 5-field expressions (and ``@daily`` macros).

Each field becomes a sorted tuple of values; the AWS day specials (``L``, ``LW``,
``nW``, ``n#k``, ``nL``) become :class:`~punctual.timing.schedules.cron.DomSpec` and
:class:`~punctual.timing.schedules.cron.DowSpec` rules. Messages name the field and value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from punctual.timing.schedules.base import MAX_YEAR, MIN_YEAR, shorten
from punctual.timing.schedules.cron import CronSchedule, DomSpec, DowSpec
from punctual.timing.schedules.dst import DstOptions
from punctual.timing.schedules.errors import ScheduleError

__all__ = ["parse_aws_cron", "parse_unix_cron"]

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
            if token.isdigit():  # digits, too many of them: say so, not "not a number"
                raise self.fail(f"{fd.name} '{shorten(token)}' has too many digits: {fd.lo}-{fd.hi}")
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
                if step_text.isdigit():
                    raise self.fail(f"{fd.name} step '{step_text}' in '{token}' is too large")
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


_ALL_DOM = DomSpec(frozenset(range(1, 32)))
_ALL_DOW = DowSpec(frozenset(range(7)))


def _aws_weekday(value: int) -> int:
    return (value + 5) % 7  # AWS 1=SUN .. 7=SAT -> Python 0=MON .. 6=SUN


def _unix_weekday(value: int) -> int:
    return (value + 6) % 7  # Unix 0/7=SUN .. 6=SAT -> Python 0=MON .. 6=SUN


def _refuse_special_in_range(parser: _FieldParser, token: str, specials: str, forms: str) -> None:
    """A day special (``L``, ``W``, ``#``) inside a range or step, which AWS does not take: named
    as such (QA26: ``6L-2`` was "day-of-week '6L' is not a number or day name", of a valid 6L)."""
    if ("-" in token or "/" in token) and any(mark in token.upper() for mark in specials):
        raise parser.fail(
            f"{parser.fd.name} '{shorten(token)}' is not supported: {forms} stand alone as a list item,"
            " not in a range or step"
        )


def _parse_aws_dom(prefix: str, text: str) -> DomSpec:
    parser = _FieldParser(prefix, _DOM)
    days: set[int] = set()
    last = last_weekday = False
    nearest: list[int] = []
    for token in parser.tokens(text):
        upper = token.upper()
        if not upper.startswith("L"):  # (L-3, LW/2 and such: the L branch below names them)
            _refuse_special_in_range(parser, token, "LW", "L, LW or nW")
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
    return DomSpec(frozenset(days), last, last_weekday, tuple(sorted(nearest)))


def _parse_aws_dow(prefix: str, text: str) -> DowSpec:
    parser = _FieldParser(prefix, _AWS_DOW)
    weekdays: set[int] = set()
    nth: list[tuple[int, int]] = []
    last_of: list[int] = []
    for token in parser.tokens(text):
        upper = token.upper()
        _refuse_special_in_range(parser, token, "L#", "L, nL or n#k")
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
    return DowSpec(frozenset(weekdays), tuple(sorted(set(nth))), tuple(sorted(set(last_of))))


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


_UNIX_MACROS: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def parse_aws_cron(expression: str, body: str, timezone: str, dst: DstOptions | None) -> CronSchedule:
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
        # The hint keeps the days asked for: `cron(0 9 * * MON-FRI *)` was told cron(0 9 * * ? *),
        # every day, where it wants cron(0 9 ? * MON-FRI *)
        by_dom = f"cron({minute} {hour} {dom} {month} ? {year})"
        by_dow = f"cron({minute} {hour} ? {month} {dow} {year})"
        hint = by_dom if dow == "*" else by_dow if dom == "*" else f"{by_dom} or {by_dow}"
        raise ScheduleError(f"cron: one of day-of-month and day-of-week must be '?' (AWS rule), e.g. {hint}")
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


def parse_unix_cron(expression: str, text: str, timezone: str, dst: DstOptions | None) -> CronSchedule:
    prefix = "unix cron"
    body = _UNIX_MACROS.get(text.lower(), text) if text.startswith("@") else text
    if body.startswith("@"):
        known = ", ".join(_UNIX_MACROS)
        raise ScheduleError(f"unix cron: unknown macro '{shorten(text)}' (known: {known})")
    fields = body.split()
    _refuse_zone_prefix(fields[0] if fields else "")
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
        dom=DomSpec(frozenset(dom_days)),
        dow=DowSpec(frozenset(_unix_weekday(v) for v in dow_values)),
        # Vixie: a field "is restricted" unless it starts with '*'; OR only when both are.
        either_day=not dom.startswith("*") and not dow.startswith("*"),
        fixed_time=not minute.startswith("*") and not hour.startswith("*"),
        date_fields=_describe((("day-of-month", dom), ("day-of-week", dow), ("month", month))),
    )


def _refuse_zone_prefix(first: str) -> None:
    """A crontab's ``CRON_TZ=Zone`` (or ``TZ=Zone``) before the fields, as cronie and Kubernetes
    users write it, named as such (QA28: it was "expected 5 fields, got 6; wrap AWS expressions as
    cron(...)", or with four fields "minute step 'Berlin' in 'CRON_TZ=Europe/Berlin' is not a
    number"). Kubernetes refuses it too: the zone is the CronJob's ``timeZone``, here the job's."""
    name, equals, zone = first.partition("=")
    if equals and name.upper() in ("CRON_TZ", "TZ"):
        raise ScheduleError(
            f"unix cron: '{shorten(first)}' is not a cron field: give the time zone apart, as the"
            f" job's timezone ('{shorten(zone)}'), and the expression without it"
        )


def _describe(fields: tuple[tuple[str, str], ...]) -> str:
    """The restricted date fields, for a "never fires" message."""
    return ", ".join(f"{name} '{text}'" for name, text in fields if text not in ("*", "?"))
