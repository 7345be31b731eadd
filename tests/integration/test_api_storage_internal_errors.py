"""DynamoDB's own failure (``InternalServerError``, HTTP 500, which the SDK retries) through the
SDK's retries: storage failing, not the API. A read changed nothing (503 with Retry-After, as a
throttle); a write may or may not have been applied (504: read before repeating it). QA29: every
route answered 500 "internal error", which no client retries nor reads as "maybe done"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import botocore.client
import pytest
from api_harness import ApiClient, LambdaContext, http_spec, rest_event
from api_harness import api as api  # the fixture
from botocore.exceptions import ClientError

_SEND = botocore.client.BaseClient._make_api_call


@pytest.fixture
def failing(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    """The DynamoDB operations (added by the test) that answer InternalServerError."""
    operations: set[str] = set()

    def send(client: Any, operation: str, params: dict[str, Any]) -> Any:
        if client.meta.service_model.service_name == "dynamodb" and operation in operations:
            error = {"Code": "InternalServerError", "Message": "Internal server error"}
            raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 500}}, operation)
        return _SEND(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", send)
    yield operations


def _call(api: ApiClient, method: str, path: str, body: Any = None) -> dict[str, Any]:
    event = rest_event(method, path, json.dumps(body) if body is not None else None)
    out: dict[str, Any] = api.handler.handler(event, LambdaContext())
    return out


def test_a_read_storage_failed_is_a_503_to_retry(api: ApiClient, failing: set[str]) -> None:
    job = api.create(http_spec())["id"]
    failing.update({"GetItem", "Query", "BatchGetItem"})
    for path in (f"/v1/jobs/{job}", "/v1/jobs", f"/v1/jobs/{job}/executions", "/v1/calendars"):
        out = _call(api, "GET", path)
        assert out["statusCode"] == 503, (path, out)
        assert out["multiValueHeaders"]["Retry-After"] == ["1"]
        assert "nothing was changed" in json.loads(out["body"])["detail"]


def test_a_write_storage_failed_is_a_504_that_says_it_may_be_done(api: ApiClient, failing: set[str]) -> None:
    job = api.create(http_spec())["id"]
    failing.add("TransactWriteItems")
    for method, path, body in (
        ("POST", "/v1/jobs", http_spec()),
        ("PUT", f"/v1/jobs/{job}", http_spec(name="renamed")),
        ("DELETE", f"/v1/jobs/{job}", None),
    ):
        out = _call(api, method, path, body)
        assert out["statusCode"] == 504, (method, path, out)
        assert "may have been done" in json.loads(out["body"])["detail"]
    # in a batch, the job whose write failed so answers it alone
    out = _call(api, "POST", "/v1/job-batches", {"jobs": [{"id": "b-1", "job": http_spec()}]})
    assert out["statusCode"] == 200, out
    assert [r["code"] for r in json.loads(out["body"])["results"]] == [504]
    failing.clear()
    assert api.call("GET", f"/v1/jobs/{job}").status == 200  # the job is still there
