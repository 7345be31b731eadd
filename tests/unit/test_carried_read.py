"""A carried job is read by its types alone (:func:`punctual.models.jobs.read_carried`): the same job
the full validation reads from what the scheduler sends, and what is not typed data is refused. A
stored one is read without the validators that do nothing for it (:func:`~punctual.models.jobs.read_accepted`):
the same job, or the same error, as the full validation."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from punctual.dispatch.queues import job_from_spec, spec_of
from punctual.models import ACCEPTED, CARRIED, Job
from punctual.models.base import _built_from_tree, validator_without
from punctual.models.jobs import read_accepted, read_carried

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
ROLE = "arn:aws:iam::123456789012:role/r"
TARGETS: list[dict[str, Any]] = [
    {"type": "http", "url": "https://example.com/hook"},
    {
        "type": "http",
        "url": "http://example.com/h?x=1",
        "method": "PUT",
        "follow_redirects": True,
        "headers": {"Content-Type": "text/plain", "X-Key": "v\u00e9"},
        "rate_budget_per_second": 2.5,
    },
    {
        "type": "lambda",
        "function_arn": "arn:aws:lambda:eu-west-1:123456789012:function:f:live",
        "invocation_type": "Event",
        "role_arn": ROLE,
    },
    {"type": "sqs", "queue_arn": "arn:aws:sqs:eu-west-1:123456789012:q.fifo", "message_group_id": "g"},
    {"type": "sns", "topic_arn": "arn:aws-us-gov:sns:us-gov-west-1:123456789012:t"},
    {
        "type": "eventbridge",
        "event_bus_arn": "arn:aws:events:eu-west-1:123456789012:event-bus/b",
        "source": "mine",
        "detail_type": "D",
    },
    {"type": "stepfunctions", "state_machine_arn": "arn:aws:states:eu-west-1:123456789012:stateMachine:m"},
    {
        "type": "ecs",
        "cluster_arn": "arn:aws:ecs:eu-west-1:123456789012:cluster/c",
        "task_definition_arn": "arn:aws:ecs:eu-west-1:123456789012:task-definition/t:3",
        "subnets": ["subnet-1"],
        "security_groups": ["sg-1"],
        "container_name": "app",
    },
]
OPTIONAL: dict[str, Any] = {
    "name": "nightly \u00e9",
    "description": "d",
    "timezone": "Europe/Berlin",
    "start_at": "2026-12-01T00:00:00+01:00",
    "end_at": "2027-12-01T00:00:00Z",
    "retry": {
        "max_attempts": 5,
        "backoff": "linear",
        "base_seconds": 1.5,
        "max_seconds": 60,
        "jitter": False,
    },
    "timeout_seconds": 60,
    "overlap": "queue",
    "catchup": {"policy": "latest", "window_seconds": 0},
    "jitter_seconds": 30,
    "max_lateness_seconds": 0,
    "dst": {"gap": "skip", "repeat": "first"},
    "tags": {"team": "data", "k": ""},
    "dead_letter": {"queue_arn": "arn:aws:sqs:eu-west-1:123456789012:dlq", "role_arn": ROLE},
    "events_bus": {"event_bus_arn": "arn:aws:events:eu-west-1:123456789012:event-bus/b"},
    "delete_after_completion": True,
    "exclude_calendars": ["holidays", "x.y"],
    "state": "PAUSED",
    "paused_at": "2026-11-30T10:05:00.123456Z",
    "state_reason": "r",
    "owed_from": "2026-11-30T10:01:00Z",
    "restarts": [{"until_version": 2, "at": "2026-11-30T10:00:00Z", "timing": {"schedule": "rate(1 hour)"}}],
    "next_fire_at": None,
    "skipped_slots": 4,
    "dependents": 2,
    "trigger_rate": 7,
    "signing_secret_enc": "sealed",
}
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
    | st.sampled_from([0, "", [], {}, False]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


def _job(target: dict[str, Any], payload: Any, optional: dict[str, Any]) -> Job:
    return Job.model_validate(
        {
            "id": "job-1",
            "schedule": "rate(5 minutes)",
            "target": target,
            "payload": payload,
            "created_at": T0,
            "updated_at": T0,
            "anchor": T0,
            "version": 3,
            **optional,
        }
    )


@st.composite
def jobs(draw: st.DrawFn) -> Job:
    """Jobs of every target type, with any of the optional fields set, and any payload."""
    target = draw(st.sampled_from(TARGETS))
    payload = draw(_json)
    if target["type"] == "http" and target.get("method") == "PUT" and payload is not None:
        payload = str(payload)  # a text/plain target's payload is a string
    keys = draw(st.lists(st.sampled_from(sorted(OPTIONAL)), unique=True))
    return _job(target, payload, {key: OPTIONAL[key] for key in keys})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs())
def test_a_carried_job_reads_as_the_full_validation_reads_it(job: Job) -> None:
    spec = spec_of(job)
    read = job_from_spec(spec)
    full = Job.model_validate_json(spec, context={CARRIED: True})
    assert read == full == job
    assert read.model_fields_set == full.model_fields_set
    assert type(read.target) is type(full.target)
    document = job.model_dump_json()
    stored = read_accepted(document)
    assert stored == Job.model_validate_json(document, context=ACCEPTED)
    assert stored.model_fields_set == Job.model_validate_json(document, context=ACCEPTED).model_fields_set


def test_an_old_document_whose_target_has_no_type_reads_as_before() -> None:
    spec = spec_of(_job(TARGETS[0], {"n": 1}, {})).replace('"type":"http",', "")
    assert read_carried(spec) == Job.model_validate_json(spec, context={CARRIED: True})
    assert read_carried(spec).target.type == "http"
    assert read_accepted(spec) == Job.model_validate_json(spec, context=ACCEPTED)


def _error(read: Any, document: str) -> str | None:
    try:
        read(document)
    except ValueError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(version="three"),
        lambda d: d["target"].update(url="ftp://example.com"),  # a rule a stored job is held to
        lambda d: d["target"].update(headers={"Host": "x"}),
        lambda d: d.update(exclude_calendars=["a", "a"]),
        lambda d: d.update(payload={"a": float("nan")}),
        lambda d: d.update(schedule="rate(0 minutes)"),
        lambda d: d.update(start_at=1_000_000),  # a number is no date-time
        lambda d: d.update(end_at="2020-01-01T00:00:00Z", start_at="2021-01-01T00:00:00Z"),
        lambda d: d.update(schedule="bad\nschedule"),
    ],
)
def test_a_stored_document_read_faster_is_refused_with_the_same_error(edit: Any) -> None:
    data = json.loads(_job(TARGETS[0], {"n": 1}, {}).model_dump_json())
    edit(data)
    document = json.dumps(data)
    full = _error(lambda text: Job.model_validate_json(text, context=ACCEPTED), document)
    assert _error(read_accepted, document) == full


def test_a_validator_named_that_is_not_there_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"JobSpec\._renamed"):
        validator_without(Job, {"JobSpec._name", "JobSpec._renamed"})


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(version="three"),
        lambda d: d.update(timeout_seconds=True),  # strict: not 1
        lambda d: d.update(timeout_seconds=10**9),  # out of range
        lambda d: d["retry"].update(max_attempts=0),
        lambda d: d["target"].update(method="BREW"),
        lambda d: d["target"].update(unknown=1),  # a target's fields are closed
        lambda d: d["target"].update(type="ftp"),
        lambda d: d["target"].pop("url"),
        lambda d: d.update(name="n" * 129),
        lambda d: d.update(created_at="yesterday"),
        lambda d: d.update(anchor="2026-11-30T10:00:00"),  # no offset: not an instant
        lambda d: d.pop("schedule"),
        lambda d: d.update(tags={"k": 1}),
        lambda d: d.update(state="RUNNING"),
    ],
)
def test_a_carried_document_that_is_not_typed_data_is_refused(edit: Any) -> None:
    data = json.loads(spec_of(_job(TARGETS[0], {"n": 1}, {})))
    edit(data)
    with pytest.raises(ValueError):
        job_from_spec(json.dumps(data))
    with pytest.raises(ValueError):
        job_from_spec("{not json")


def _checking_validator(context: dict[str, Any]) -> Any:
    """Job's full validator, each of its Python validators wrapped to fail the test when it returns
    anything but what it was given (a rule that changes a value: the types-only read would not)."""
    changed: list[str] = []

    def wrap(function: Any) -> Any:
        def checked(value: Any, *rest: Any) -> Any:
            out = function(value, *rest)
            # The one rule that changes its input, an old target without its type, is met only by a
            # document the types refuse (read_carried then validates it in full).
            repairs = function.__qualname__ == "JobSpec._target_type" and "type" not in value
            if out is not value and not repairs:
                changed.append(function.__qualname__)
            return out

        return checked

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            node = {key: walk(value) for key, value in node.items()}
            kind = node.get("type")
            if isinstance(kind, str) and kind.startswith("function-"):
                node["function"] = {**node["function"], "function": wrap(node["function"]["function"])}
            return node
        if isinstance(node, list):
            return [walk(value) for value in node]
        return node

    # Built as the reads' validators are (nested classes' own validators not reused in its place)
    validator = _built_from_tree(walk(Job.__pydantic_core_schema__))
    return lambda document: (validator.validate_json(document, context=context), changed)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs())
def test_no_rule_changes_a_value_so_the_types_alone_read_the_same_job(job: Job) -> None:
    # read_carried (types alone) and read_accepted (some rules left out) are the full validation
    # only while every rule left out checks, and changes nothing: a rule that normalises (strips,
    # lowercases, fills in) must be kept in those reads, or the worker runs another job.
    for context in ({CARRIED: True}, ACCEPTED):
        for document in (spec_of(job), job.model_dump_json()):
            read, changed = _checking_validator(context)(document)
            assert changed == [] and read == Job.model_validate_json(document, context=context)
