"""Payload placeholders (EventBridge Scheduler style) and the invoker that applies them."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from punctual.delivery.targets import DefaultTargetInvoker, render_payload
from punctual.delivery.targets.base import Outcome, SlotContext, TargetResult
from punctual.models import SqsTarget
from punctual.runtime.settings import Settings
from punctual.timing.instants import format_instant_adaptive


def _ctx(**overrides: Any) -> SlotContext:
    values: dict[str, Any] = {
        "job_id": "nightly-report",
        "tenant": "acme",
        "slot": "2026-11-30T09:32:00Z",
        "scheduled_at": datetime(2026, 11, 30, 9, 32, tzinfo=UTC),
        "attempt": 3,
        "timeout_s": 60,
    }
    values.update(overrides)
    return SlotContext(**values)


def test_every_placeholder_is_filled_at_any_depth() -> None:
    payload = {
        "job": "<job_id>",
        "nested": {"list": ["<slot>", {"deep": "attempt <attempt> of 5"}], "at": "<scheduled_at>"},
        "key": "<job_id>:<slot>",
    }
    assert render_payload(payload, _ctx()) == {
        "job": "nightly-report",
        "nested": {
            "list": ["2026-11-30T09:32:00Z", {"deep": "attempt 3 of 5"}],
            "at": "2026-11-30T09:32:00Z",
        },
        "key": "nightly-report:2026-11-30T09:32:00Z",
    }


def test_object_keys_are_strings_too() -> None:
    assert render_payload({"run-<attempt>": "<job_id>"}, _ctx()) == {"run-3": "nightly-report"}


def test_a_bare_string_payload_is_rendered() -> None:
    assert render_payload("slot <slot>, try <attempt>", _ctx()) == "slot 2026-11-30T09:32:00Z, try 3"


@pytest.mark.parametrize("value", [None, 0, 1.5, True, False, [], {}, "", "no placeholders", [1, None, 2.0]])
def test_values_without_placeholders_are_unchanged(value: Any) -> None:
    assert render_payload(value, _ctx()) == value


@pytest.mark.parametrize(
    "text",
    [
        "<JOB_ID>",
        "<job_id",
        "job_id>",
        "< job_id >",
        "<tenant_id>",
        "<aws.scheduler.unknown>",
        "<aws.scheduler.schedule-arn>",
        "<<>>",
    ],
)
def test_unknown_or_malformed_placeholders_are_left_alone(text: str) -> None:
    assert render_payload({"x": text}, _ctx()) == {"x": text}


def test_filled_values_are_not_expanded_again() -> None:
    # A slot key that itself contains placeholder text must appear verbatim.
    ctx = _ctx(slot="manual~<attempt>")
    assert render_payload("<slot>|<attempt>", ctx) == "manual~<attempt>|3"


def test_the_input_is_not_modified() -> None:
    payload = {"a": ["<job_id>", {"b": "<slot>"}]}
    before = copy.deepcopy(payload)
    render_payload(payload, _ctx())
    assert payload == before


def test_tuples_become_lists_so_the_result_stays_json() -> None:
    assert render_payload({"t": ("<attempt>", 1)}, _ctx()) == {"t": ["3", 1]}


@pytest.mark.parametrize(
    ("instant", "expected"),
    [
        (datetime(2026, 3, 29, 1, 30, tzinfo=UTC), "2026-03-29T01:30:00Z"),
        (datetime(2026, 3, 29, 3, 30, tzinfo=timezone(timedelta(hours=2))), "2026-03-29T01:30:00Z"),
        (datetime(2026, 3, 29, 1, 30, 0, 250_000, tzinfo=UTC), "2026-03-29T01:30:00.250Z"),
        (datetime(2026, 3, 29, 1, 30), "2026-03-29T01:30:00Z"),  # naive means UTC
    ],
)
def test_scheduled_at_is_utc_iso_8601_with_z(instant: datetime, expected: str) -> None:
    assert format_instant_adaptive(instant) == expected
    # a context whose slot key does not name an instant falls back to its scheduled_at
    assert render_payload("<scheduled_at>", _ctx(slot="bad", scheduled_at=instant)) == expected


@pytest.mark.parametrize("placeholder", ["<scheduled_at>", "<aws.scheduler.scheduled-time>"])
def test_scheduled_time_is_the_slots_instant_not_its_jittered_release(placeholder: str) -> None:
    # QA: a FLEXIBLE schedule's scheduled-time was the delayed delivery instant (04:54:50 for 04:54)
    released = datetime(2026, 11, 30, 9, 32, 50, tzinfo=UTC)
    assert render_payload(placeholder, _ctx(scheduled_at=released)) == "2026-11-30T09:32:00Z"
    manual = _ctx(slot="2026-11-30T09:32:07Z~m3f2a9c0e5b7d", scheduled_at=released)
    assert render_payload(placeholder, manual) == "2026-11-30T09:32:07Z"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet="ab<>_:", max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@given(_json)
def test_rendering_keeps_the_shape_and_leaves_no_known_placeholder(payload: Any) -> None:
    ctx = _ctx(job_id="j", slot="s")
    rendered = render_payload(payload, ctx)
    text = json.dumps(rendered)
    for placeholder in ("<job_id>", "<slot>", "<attempt>", "<scheduled_at>"):
        assert placeholder not in text
    assert type(rendered) is type(payload)


# --------------------------------------------------------------------------- the invoker


class _Recorder:
    def __init__(self, result: TargetResult | None = None, error: Exception | None = None) -> None:
        self.calls: list[tuple[Any, Any, SlotContext]] = []
        self.result = result or TargetResult.ok()
        self.error = error

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        self.calls.append((target, payload, ctx))
        if self.error is not None:
            raise self.error
        return self.result


def _invoker(**adapters: Any) -> DefaultTargetInvoker:
    def no_clients(service: str, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no AWS client may be built in this test")

    return DefaultTargetInvoker(no_clients, Settings(), adapters=adapters)


SQS = SqsTarget(queue_arn="arn:aws:sqs:us-east-1:123456789012:work")


def test_the_invoker_renders_then_dispatches_on_the_target_type() -> None:
    sqs = _Recorder()
    result = _invoker(sqs=sqs).invoke(SQS, {"key": "<job_id>:<slot>"}, _ctx())
    assert result.outcome is Outcome.SUCCEEDED
    [(target, payload, _)] = sqs.calls
    assert target is SQS
    assert payload == {"key": "nightly-report:2026-11-30T09:32:00Z"}


def test_a_mapping_target_is_validated_into_its_model() -> None:
    sqs = _Recorder()
    _invoker(sqs=sqs).invoke({"type": "sqs", "queue_arn": SQS.queue_arn}, None, _ctx())
    [(target, _, _)] = sqs.calls
    assert isinstance(target, SqsTarget)


def test_an_invalid_mapping_target_is_a_permanent_failure() -> None:
    sqs = _Recorder()
    result = _invoker(sqs=sqs).invoke({"type": "sqs", "queue_arn": "not-an-arn"}, None, _ctx())
    assert result.outcome is Outcome.PERMANENT
    assert sqs.calls == []


def test_an_unknown_target_type_is_a_permanent_failure() -> None:
    result = _invoker().invoke({"type": "carrier-pigeon"}, None, _ctx())
    assert result.outcome is Outcome.PERMANENT
    assert "carrier-pigeon" in result.summary


def test_an_adapter_that_raises_becomes_a_retryable_failure() -> None:
    broken = _Recorder(error=RuntimeError("bug"))
    result = _invoker(sqs=broken).invoke(SQS, None, _ctx())
    assert result.outcome is Outcome.RETRYABLE
    assert "RuntimeError" in result.summary


def test_a_bad_allow_list_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="allow-list"):
        DefaultTargetInvoker(None, Settings(target_allow_cidrs=["localhost"]))
