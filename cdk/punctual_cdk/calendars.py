"""Exclusion calendars declared as infrastructure: :class:`Calendar`, registered by the
``Custom::PunctualCalendar`` resource, and named by the jobs of the same stack.

``holidays = Calendar(stack, "Holidays", scheduler=punctual, timezone="Europe/Berlin",
dates=[date(2026, 12, 25)], ranges=[(date(2026, 12, 24), date(2026, 12, 31))])`` and
``Job(..., exclude_calendars=[holidays])``.

* The days are checked at synth with the API's own model (``punctual.api.schemas.CalendarInput``):
  a calendar the API would refuse fails ``cdk synth``, naming the field.
* The stack's provider role is the tenant of its calendars as of its jobs, so a job may exclude
  only calendars declared in its own stack. Each job that excludes one depends on it:
  CloudFormation creates the calendar first and deletes it last.
* The calendar's name is ``name=`` or one made from its construct path, unique in the stack.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from typing import Any

import aws_cdk as cdk
from constructs import Construct
from pydantic import ValidationError

from punctual_cdk.provider_construct import JobProvider, SchedulerRef, after_its_api, other_deployments
from punctual_cdk.scheduler import Punctual

CALENDAR_RESOURCE_TYPE = "Custom::PunctualCalendar"
# The API's 1,024 characters less the mark the provider ends a calendar's description with (its
# resource's: provider/handler.py, _marked), and the line break before it
DESCRIPTION_ROOM = 965


class CalendarSpecError(ValueError):
    """A declared calendar the API would refuse, or a job's calendar it could never have (synth)."""


def _day(value: Any, field: str) -> Any:
    if isinstance(value, datetime):  # a date too, but which day an instant is depends on the zone
        raise CalendarSpecError(
            f"{field}: a date or 'YYYY-MM-DD', not a datetime (a calendar names whole days of its "
            "timezone: pass the day, e.g. instant.astimezone(zone).date())"
        )
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str) and cdk.Token.is_unresolved(value):  # (QA28: "'${Token[...]}' is not a date")
        raise CalendarSpecError(f"{field}: a day known at synth, not a token (a parameter, an attribute)")
    if isinstance(value, str):
        return value
    raise CalendarSpecError(f"{field}: a date or 'YYYY-MM-DD', not {type(value).__name__}")


# What each list of a calendar holds, as its refusals say.
_ITEMS = {
    "dates": "days (date or 'YYYY-MM-DD'); () for none",
    "ranges": "(start, end) pairs of days or {'start': ..., 'end': ...}; () for none",
}


def _range(value: Any, field: str) -> dict[str, Any]:
    if isinstance(value, dict):
        return {key: _day(item, f"{field}.{key}") for key, item in value.items()}
    if isinstance(value, tuple | list) and len(value) == 2:
        return {"start": _day(value[0], f"{field}.start"), "end": _day(value[1], f"{field}.end")}
    raise CalendarSpecError(f"{field}: a (start, end) pair of dates or {{'start': ..., 'end': ...}}")


class Calendar(Construct):
    """An exclusion calendar in Punctual, declared in the stack (``Custom::PunctualCalendar``).

    Parameters
    ----------
    scheduler
        The :class:`~punctual_cdk.Punctual` construct, or a :class:`SchedulerRef` to one.
    dates
        Whole days the jobs that exclude it do not fire on (``date`` or ``'YYYY-MM-DD'``).
    ranges
        Runs of days, ``(start, end)`` pairs (both included) or the API's ``{"start", "end"}``.
    timezone
        The IANA zone whose days these are.
    name
        The calendar's name (default: one made from the construct's path, unique in the stack).
    description
        Free text for people, as the API's ``description`` (QA23: the construct had no way to set it).

    Attributes
    ----------
    name
        The calendar's name, as jobs name it (a plain string, known at synth).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        scheduler: Punctual | SchedulerRef,
        dates: Sequence[date | str] = (),
        ranges: Sequence[Any] = (),
        timezone: str = "UTC",
        name: str | None = None,
        description: str = "",
    ) -> None:
        super().__init__(scope, construct_id)
        where = self.node.path
        try:
            for field, value in (("dates", dates), ("ranges", ranges)):
                if not isinstance(value, list | tuple):  # (QA: a string was read letter by letter)
                    raise CalendarSpecError(f"{field}: a list of {_ITEMS[field]}, not {type(value).__name__}")
            document = {
                "timezone": timezone,
                "dates": [_day(each, f"dates[{i}]") for i, each in enumerate(dates)],
                "ranges": [_range(each, f"ranges[{i}]") for i, each in enumerate(ranges)],
            }
            if description:  # (left out when empty: a calendar's template is as it was)
                document["description"] = description
            if isinstance(description, str) and len(description) > DESCRIPTION_ROOM:
                raise CalendarSpecError(
                    f"description: at most {DESCRIPTION_ROOM} characters (the provider marks it)"
                )
            # a time zone from a parameter is the API's to check at deploy (QA28), as a job's is
            _check({**document, "timezone": "UTC"} if cdk.Token.is_unresolved(timezone) else document)
            self.name = name if name is not None else _made_name(self)
            _check_name(self.name)
        except CalendarSpecError as exc:
            raise CalendarSpecError(f"Calendar {where}: {exc}") from None
        for other in _calendars_of(cdk.Stack.of(self)):
            if other is not self and other.name == self.name:
                raise CalendarSpecError(
                    f"Calendar {where}: name: {self.name!r} is the name of {other.node.path} too"
                )
        ref = SchedulerRef.of(scheduler)
        self.scheduler = scheduler
        self.provider = JobProvider.of(self, ref)
        self.resource = cdk.CustomResource(
            self,
            "Resource",
            service_token=self.provider.function.function_arn,
            resource_type=CALENDAR_RESOURCE_TYPE,
            properties={"ApiUrl": ref.api_url, "Name": self.name, "Spec": json.dumps(document)},
        )
        after_its_api(self.resource, scheduler)


def _made_name(calendar: Calendar) -> str:
    made: str = cdk.Names.unique_resource_name(
        calendar, max_length=64, separator="-", allowed_special_characters="-_."
    )
    return made


def _check_name(name: Any) -> None:
    from punctual.models import CALENDAR_NAME_RULE
    from punctual.models.base import CALENDAR_NAME_RE

    if not isinstance(name, str) or cdk.Token.is_unresolved(name) or not CALENDAR_NAME_RE.fullmatch(name):
        raise CalendarSpecError(f"name: {CALENDAR_NAME_RULE} (known at synth), not {name!r}")


def _check(document: dict[str, Any]) -> None:
    from punctual.api.schemas import CalendarInput

    try:
        CalendarInput.model_validate_json(json.dumps(document)).spec()
    except ValidationError as exc:
        raise CalendarSpecError(field_error(document, exc.errors()[0])) from None


def field_error(document: dict[str, Any], error: Any) -> str:
    """A validation error as ``<field as the user wrote it>: <message>``: the path walked through
    the document (``ranges[0].end``; a union's tag, which the user never wrote, left out). A
    message that names the field itself (a list's check: ``dates[0]: ...``) is kept as it is; one
    that begins with a key of the item it is about (``end: ...``) is that key's."""
    message = str(error.get("msg")).removeprefix("Value error, ")
    loc = list(error.get("loc", ()))
    path: list[str] = []
    node: Any = document
    for index, part in enumerate(loc):
        if isinstance(node, list) and isinstance(part, int) and part < len(node) and path:
            path[-1] += f"[{part}]"
            node = node[part]
        elif isinstance(node, dict) and part in node:
            path.append(str(part))
            node = node[part]
        elif index == len(loc) - 1:  # a field that is missing
            path.append(str(part))
    key, named, rest = message.partition(": ")
    if path and named and isinstance(node, dict) and key in node:
        path.append(key)
        message = rest
    field = ".".join(path)
    return f"{field}: {message}" if field and not message.startswith(field) else message


def _calendars_of(stack: cdk.Stack) -> Iterable[Calendar]:
    return (node for node in stack.node.find_all() if isinstance(node, Calendar))


def calendar_names(
    job: Construct, given: Any, scheduler: Punctual | SchedulerRef
) -> tuple[list[str], list[Calendar]]:
    """A declared job's ``exclude_calendars``: the names it sends, and the calendars of its stack it
    names (which it then depends on). Each item is a :class:`Calendar` of the job's stack and
    ``scheduler``, the name of one declared before the job, or a token (passed to the API, checked
    at deploy)."""
    if not isinstance(given, list | tuple):
        raise CalendarSpecError("exclude_calendars: a list of punctual_cdk.Calendar (or their names)")
    stack = cdk.Stack.of(job)
    names: list[str] = []
    declared: list[Calendar] = []
    for index, item in enumerate(given):
        field = f"exclude_calendars[{index}]"
        if isinstance(item, Calendar):
            if cdk.Stack.of(item) is not stack:
                raise CalendarSpecError(
                    f"{field}: calendar {item.node.path} is declared in another stack: a job excludes"
                    " calendars of its own stack (its provider role is the tenant of both)"
                )
            _same_scheduler(item, scheduler, field)
            names.append(item.name)
            declared.append(item)
        elif isinstance(item, str) and cdk.Token.is_unresolved(item):
            names.append(item)
        elif isinstance(item, str):
            found = [calendar for calendar in _calendars_of(stack) if calendar.name == item]
            if not found:
                raise CalendarSpecError(
                    f"{field}: no punctual_cdk.Calendar of this stack is named {item!r} (a declared job's"
                    " tenant is its stack's provider role: declare the calendar in the stack, before the job)"
                )
            _same_scheduler(found[0], scheduler, field)
            names.append(item)
            declared.append(found[0])
        else:
            kind = type(item).__name__
            raise CalendarSpecError(f"{field}: a punctual_cdk.Calendar or its name, not {kind}")
    return names, declared


def _same_scheduler(calendar: Calendar, scheduler: Punctual | SchedulerRef, field: str) -> None:
    """A job excludes only calendars of its own scheduler (QA23: one of another scheduler of the
    stack synthesised, and the job's API refused its unknown name at deploy)."""
    if other_deployments(calendar.scheduler, scheduler):
        raise CalendarSpecError(
            f"{field}: calendar {calendar.node.path} is declared for another scheduler than the job's:"
            " a job excludes calendars of its own scheduler (declare one there too)"
        )
