"""QA30 (review of 9b824e73): the CloudFormation provider's ``Spec`` (JSON text) with a key given
twice was taken with the last value and sent on re-serialised, so the API's own check never saw
it: a job (or calendar) of the second value, without a word. The provider refuses it, naming the
key, before any request is sent."""

from __future__ import annotations

from typing import Any

import pytest

from punctual_cdk.provider import handler

URL = "https://abc123.execute-api.us-east-1.amazonaws.com/v1"


class NoRequest:
    def request(self, method: str, path: str, body: Any = None, headers: Any = None) -> tuple[int, Any]:
        raise AssertionError(f"{method} {path} sent for a Spec with a key given twice")


def _create(resource_type: str, spec: str) -> dict[str, Any]:
    return {
        "RequestType": "Create",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/s/1",
        "RequestId": "req-1",
        "LogicalResourceId": "Twice",
        "ResourceType": resource_type,
        "ResourceProperties": {"ServiceToken": "x", "ApiUrl": URL, "Spec": spec},
    }


@pytest.mark.parametrize(
    ("resource_type", "spec", "key"),
    [
        (
            handler.RESOURCE_TYPE,
            '{"schedule": "rate(1 hour)", "schedule": "rate(1 minute)", "target": {}}',
            "schedule",
        ),
        (
            handler.RESOURCE_TYPE,
            '{"schedule": "rate(1 hour)", "target": {"type": "sqs", "type": "lambda"}}',
            "type",
        ),
        (handler.CALENDAR_RESOURCE_TYPE, '{"dates": ["2026-12-25"], "dates": []}', "dates"),
    ],
)
def test_a_spec_with_a_key_given_twice_is_refused_naming_it(resource_type: str, spec: str, key: str) -> None:
    with pytest.raises(handler.ProviderError) as refused:
        handler.on_event(_create(resource_type, spec), lambda url: NoRequest())
    assert str(refused.value) == f"Spec: the key {key!r} is given twice"


def test_a_spec_with_each_key_once_is_taken() -> None:
    spec = '{"schedule": "rate(1 hour)", "target": {"type": "sqs"}, "payload": {"schedule": 1}}'
    assert handler._spec({"Spec": spec})["target"] == {"type": "sqs"}
