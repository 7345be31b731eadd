"""A job spec is strict and bounded: what it cannot carry faithfully is refused, never changed.

Issue 17, finding 3 (NaN stored as null, ``true`` taken as 1, reserved headers stored then
dropped) and finding 1 (a payload deep enough to break every later read of the job).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from punctual.delivery.targets.webhooks import adapter, signing
from punctual.models import (
    MAX_PAYLOAD_DEPTH,
    MAX_PAYLOAD_MEMBERS,
    RESERVED_HEADERS,
    JobSpec,
)

SQS = {"type": "sqs", "queue_arn": "arn:aws:sqs:us-east-1:123456789012:reports"}
HTTP = {"type": "http", "url": "https://hooks.example.com/run"}


def spec(**overrides: Any) -> dict[str, Any]:
    return {"schedule": "rate(1 hour)", "target": SQS, **overrides}


def refused(data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate(data)
    return str(caught.value)


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_in_a_payload_are_refused_not_stored_as_null(text: str) -> None:
    # Python's json module reads these non-JSON literals as floats; so does the API's body parser.
    payload = json.loads(f'{{"ratio": [1, {text}]}}')
    assert "NaN and Infinity are not JSON numbers" in refused(spec(payload=payload))


@pytest.mark.parametrize(
    "override",
    [
        {"timeout_seconds": True},
        {"jitter_seconds": False},
        {"retry": {"max_attempts": True}},
        {"retry": {"base_seconds": True}},
        {"retry": {"max_age_seconds": True}},
        {"catchup": {"window_seconds": True}},
        {"timeout_seconds": 2.5},
    ],
)
def test_booleans_and_fractions_are_not_whole_numbers(override: dict[str, Any]) -> None:
    assert "valid integer" in refused(spec(**override)) or "valid number" in refused(spec(**override))


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_retry_seconds_must_be_finite(value: float) -> None:
    assert "finite number" in refused(spec(retry={"base_seconds": value}))


def test_booleans_are_only_true_or_false() -> None:
    assert "valid boolean" in refused(spec(target={**HTTP, "follow_redirects": "yes"}))


def test_payload_depth_is_bounded_below_what_json_parsers_take() -> None:
    JobSpec.model_validate(spec(payload=nested(MAX_PAYLOAD_DEPTH)))
    for depth in (MAX_PAYLOAD_DEPTH + 1, 200, 254, 5000):
        assert f"nested more than {MAX_PAYLOAD_DEPTH} levels" in refused(spec(payload=nested(depth)))


def test_payload_member_count_and_key_length_are_bounded() -> None:
    JobSpec.model_validate(spec(payload=list(range(MAX_PAYLOAD_MEMBERS))))
    assert "more than 10000" in refused(spec(payload=[list(range(100))] * 101))
    assert "longer than 1024" in refused(spec(payload={"k" * 1025: 1}))


@pytest.mark.parametrize(
    "name",
    [
        "Host",
        "webhook-signature",
        "Webhook-Id",
        "Idempotency-Key",
        "Content-Length",
        "Punctual-Fencing-Token",
    ],
)
def test_reserved_headers_are_refused_naming_the_header(name: str) -> None:
    message = refused(spec(target={**HTTP, "headers": {name: "x"}}))
    assert f"header {name!r} is reserved" in message


def test_the_worker_drops_exactly_the_headers_registration_refuses() -> None:
    # The model refuses these; registration (JobService) also refuses the tenant's header, which
    # the model keeps accepting so that a job stored with it stays readable.
    assert RESERVED_HEADERS | {signing.TENANT_HEADER.lower()} == adapter._RESERVED_HEADERS
    assert signing.FENCING_TOKEN_HEADER.lower() in RESERVED_HEADERS
    assert signing.FENCING_SIGNATURE_HEADER.lower() in RESERVED_HEADERS


def test_headers_differing_only_in_case_and_control_characters_are_refused() -> None:
    assert "given twice" in refused(spec(target={**HTTP, "headers": {"X-Team": "a", "x-team": "b"}}))
    assert "control characters" in refused(spec(target={**HTTP, "headers": {"X-Team": "a\x00b"}}))


def test_a_non_json_content_type_needs_a_string_payload() -> None:
    text = {**HTTP, "headers": {"Content-Type": "text/plain; charset=utf-8"}}
    assert JobSpec.model_validate(spec(target=text, payload="hello <slot>")).payload == "hello <slot>"
    assert "payload must be a string" in refused(spec(target=text, payload={"a": 1}))
    as_json = {**HTTP, "headers": {"Content-Type": "application/cloudevents+json"}}
    JobSpec.model_validate(spec(target=as_json, payload={"a": 1}))


def test_a_text_payload_must_read_as_itself_in_the_charset_its_content_type_names() -> None:
    # The body is sent as UTF-8 (Standard Webhooks libraries verify it as such), so "café" under
    # charset=ISO-8859-1 reached the receiver as "cafÃ©", on every slot (QA22): refused, naming it
    latin1 = {**HTTP, "headers": {"Content-Type": "text/plain; charset=ISO-8859-1"}}
    JobSpec.model_validate(spec(target=latin1, payload="plain ASCII <slot>"))
    assert "'ISO-8859-1'" in refused(spec(target=latin1, payload="café"))
    utf16 = {**HTTP, "headers": {"Content-Type": 'text/csv; charset="utf-16"'}}
    assert "'utf-16'" in refused(spec(target=utf16, payload="a,b"))
    unknown = {**HTTP, "headers": {"Content-Type": "text/csv; charset=klingon-8"}}
    assert "charset 'klingon-8'" in refused(spec(target=unknown, payload="a,b"))
    utf8 = {**HTTP, "headers": {"Content-Type": "text/plain; Charset=UTF-8"}}
    assert JobSpec.model_validate(spec(target=utf8, payload="café €")).payload == "café €"


def test_string_fields_are_bounded() -> None:
    assert "at most 64 characters" in refused(spec(timezone="X" * 65))
    ecs = {
        "type": "ecs",
        "cluster_arn": "arn:aws:ecs:us-east-1:123456789012:cluster/jobs",
        "task_definition_arn": "arn:aws:ecs:us-east-1:123456789012:task-definition/t:1",
        "subnets": ["subnet-" + "a" * 100],
    }
    assert "at most 64 characters" in refused(spec(target=ecs))


@pytest.mark.parametrize("payload", [{"a": "\ud800"}, {"\udc00": 1}, ["ok", ["\ud83d"]]])
def test_lone_surrogates_in_a_payload_are_refused(payload: Any) -> None:
    assert "lone surrogate" in refused(spec(payload=payload))
