"""The ``Calendar`` construct at synth: what it sends, how a job names it (and depends on it), and
what it refuses, by name."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from test_job_construct import HOOK, REF, _logical, _spec, _stack

from punctual_cdk import Calendar, CalendarSpecError, HttpTarget, Job, JobSpecError


def _properties(stack: cdk.Stack, calendar: Calendar) -> dict[str, Any]:
    found = Template.from_stack(stack).find_resources("Custom::PunctualCalendar")
    properties: dict[str, Any] = found[_logical(stack, calendar.resource)]["Properties"]
    return properties


def test_a_calendar_sends_its_days_and_name_and_a_job_excluding_it_depends_on_it() -> None:
    stack = _stack()
    holidays = Calendar(
        stack,
        "Holidays",
        scheduler=REF,
        timezone="Europe/Berlin",
        dates=[date(2026, 12, 25), "2027-01-01"],
        ranges=[(date(2026, 12, 27), date(2026, 12, 30)), {"start": "2027-04-03", "end": "2027-04-06"}],
    )
    job = Job(
        stack,
        "Nightly",
        scheduler=REF,
        schedule="rate(1 day)",
        target=HttpTarget(HOOK),
        exclude_calendars=[holidays],
    )
    properties = _properties(stack, holidays)
    assert properties["Name"] == holidays.name and holidays.name.startswith("Jobs-Holidays")
    assert json.loads(properties["Spec"]) == {
        "timezone": "Europe/Berlin",
        "dates": ["2026-12-25", "2027-01-01"],
        "ranges": [
            {"start": "2026-12-27", "end": "2026-12-30"},
            {"start": "2027-04-03", "end": "2027-04-06"},
        ],
    }
    assert _spec(stack, job)["exclude_calendars"] == [holidays.name]
    # CloudFormation creates the calendar before the job and deletes it after
    template = Template.from_stack(stack).to_json()["Resources"]
    assert _logical(stack, holidays.resource) in template[_logical(stack, job.resource)]["DependsOn"]
    # One provider for both, allowed the calendar paths
    assert len(Template.from_stack(stack).find_resources("AWS::Lambda::Function")) == 1
    assert "/v1/calendars/*" in json.dumps(Template.from_stack(stack).find_resources("AWS::IAM::Policy"))


def test_a_job_may_name_a_calendar_of_its_stack_by_its_name() -> None:
    stack = _stack()
    named = Calendar(stack, "Holidays", scheduler=REF, dates=["2026-12-25"], name="holidays")
    job = Job(
        stack,
        "J",
        scheduler=REF,
        schedule="rate(1 day)",
        target=HttpTarget(HOOK),
        exclude_calendars=["holidays"],
    )
    assert _spec(stack, job)["exclude_calendars"] == ["holidays"]
    template = Template.from_stack(stack).to_json()["Resources"]
    assert _logical(stack, named.resource) in template[_logical(stack, job.resource)]["DependsOn"]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"dates": ["2026-13-01"]}, r"dates\[0\]: '2026-13-01' is not a valid date"),
        ({"dates": [3]}, r"dates\[0\]: a date or 'YYYY-MM-DD', not int"),
        ({"ranges": [(date(2026, 1, 2),)]}, r"ranges\[0\]: a \(start, end\) pair"),
        # QA22: one spelling of a range's field (the job construct's), whichever check refuses it
        (
            {"ranges": [("2026-12-31", "2026-12-01")]},
            r"ranges\[0\]: range end 2026-12-01 is before its start",
        ),
        ({"ranges": [{"start": "2026-12-01"}]}, r"ranges\[0\]\.end: Field required"),
        ({"ranges": [("2026-12-01", "x")]}, r"ranges\[0\]\.end: 'x' is not a date \(YYYY-MM-DD\)"),
        (
            {"ranges": [{"start": "2026-12-01", "end": 5}]},
            r"ranges\[0\]\.end: a date or 'YYYY-MM-DD', not int",
        ),
        # QA22: a datetime was cut to its UTC day, whatever the calendar's zone
        (
            {"dates": [datetime(2026, 12, 25, 23, tzinfo=UTC)], "timezone": "Europe/Berlin"},
            r"dates\[0\]: a date or 'YYYY-MM-DD', not a datetime",
        ),
        (
            {"ranges": [(date(2026, 12, 1), datetime(2026, 12, 2, tzinfo=UTC))]},
            r"ranges\[0\]\.end: .*not a datetime",
        ),
        # QA22: None read "a list, not NoneType", saying nothing of what the list holds
        ({"ranges": None}, r"ranges: a list of \(start, end\) pairs of days .*, not NoneType"),
        ({"dates": None}, r"dates: a list of days \(date or 'YYYY-MM-DD'\); \(\) for none, not NoneType"),
        ({"timezone": "Mars/Olympus"}, r"timezone: "),
        ({"name": "a b"}, r"name: 1-64 characters"),
        ({"name": "..."}, r"name: 1-64 characters"),
        # QA30: the provider ends it with its mark: 966 characters failed at deploy, not at synth
        ({"description": "x" * 966}, r"description: at most 965 characters"),
    ],
)
def test_every_calendar_refusal_names_the_field(given: dict[str, Any], message: str) -> None:
    with pytest.raises(CalendarSpecError, match=rf"^Calendar Jobs/C: {message}"):
        Calendar(_stack(), "C", scheduler=REF, **given)


def test_two_calendars_of_a_stack_cannot_share_a_name() -> None:
    stack = _stack()
    Calendar(stack, "A", scheduler=REF, name="holidays")
    with pytest.raises(
        CalendarSpecError, match=r"^Calendar Jobs/B: name: 'holidays' is the name of Jobs/A too"
    ):
        Calendar(stack, "B", scheduler=REF, name="holidays")


def test_a_job_cannot_exclude_a_calendar_it_could_never_have() -> None:
    app = cdk.App()
    stack, other = _stack("Jobs", app), _stack("Other", app)
    elsewhere = Calendar(other, "Holidays", scheduler=REF)
    declared = {"schedule": "rate(1 day)", "target": HttpTarget(HOOK)}
    cases = [
        ([elsewhere], r"exclude_calendars\[0\]: calendar Other/Holidays is declared in another stack"),
        (["holidays"], r"exclude_calendars\[0\]: no punctual_cdk.Calendar of this stack is named 'holidays'"),
        ([7], r"exclude_calendars\[0\]: a punctual_cdk.Calendar or its name, not int"),
        ("holidays", r"exclude_calendars: a list"),
    ]
    for index, (given, message) in enumerate(cases):
        with pytest.raises(JobSpecError, match=rf"^Job Jobs/J{index}: {message}"):
            Job(stack, f"J{index}", scheduler=REF, exclude_calendars=given, **declared)


def test_wrong_kinds_of_input_are_named() -> None:
    # QA: a string of dates was read letter by letter ("dates[0]: '2' is not a date"), a date was a
    # TypeError, and scheduler=None an AttributeError from deep inside
    stack = _stack()
    with pytest.raises(CalendarSpecError, match=r"dates: a list of days .*, not str"):
        Calendar(stack, "Text", scheduler=REF, dates="2026-12-25")  # type: ignore[arg-type]
    with pytest.raises(CalendarSpecError, match=r"dates: a list of days .*, not date"):
        Calendar(stack, "Day", scheduler=REF, dates=date(2026, 12, 25))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="scheduler: a Punctual construct or a SchedulerRef, not NoneType"):
        Job(stack, "Nothing", scheduler=None, schedule="rate(1 hour)", target=HttpTarget(HOOK))  # type: ignore[arg-type]


def test_a_calendar_takes_a_description_as_the_api_does() -> None:
    # QA23: the API takes a calendar's description; the construct had no way to give one
    stack = _stack()
    holidays = Calendar(stack, "Holidays", scheduler=REF, dates=["2026-12-25"], description="Berlin office")
    plain = Calendar(stack, "Plain", scheduler=REF, dates=["2026-12-25"])
    assert json.loads(_properties(stack, holidays)["Spec"])["description"] == "Berlin office"
    assert "description" not in json.loads(_properties(stack, plain)["Spec"])  # as before
    with pytest.raises(CalendarSpecError, match="description"):
        Calendar(_stack(), "Long", scheduler=REF, dates=["2026-12-25"], description="x" * 2000)


def test_a_time_zone_from_a_parameter_passes_to_the_api_and_a_day_from_one_is_refused_saying_why() -> None:
    # QA28: a parameter's time zone (which a Job takes) was refused as "unknown time zone
    # '${Token[TOKEN.1204]}'", and a parameter's day as "'${Token[...]}' is not a date"
    stack = _stack()
    zone = cdk.CfnParameter(stack, "Zone", default="Europe/Berlin")
    holidays = Calendar(stack, "Holidays", scheduler=REF, timezone=zone.value_as_string, dates=["2026-12-25"])
    spec = _properties(stack, holidays)["Spec"]
    assert {"Ref": "Zone"} in spec["Fn::Join"][1]  # resolved at deploy, checked there by the API
    with pytest.raises(CalendarSpecError, match="unknown time zone 'Mars/Olympus'"):
        Calendar(_stack(), "Bad", scheduler=REF, timezone="Mars/Olympus", dates=["2026-12-25"])
    day = cdk.CfnParameter(stack, "Day", default="2026-12-26")
    with pytest.raises(CalendarSpecError, match=r"dates\[0\]: a day known at synth, not a token"):
        Calendar(stack, "Days", scheduler=REF, dates=[day.value_as_string])
