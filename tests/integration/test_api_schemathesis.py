"""Schemathesis against the committed openapi.json, calling the API handler in-process.

A small WSGI adapter turns each generated request into the API Gateway REST proxy event
the handler receives in the cloud (IAM caller Alice) and the reply back into HTTP. Every
operation gets a bounded number of examples (valid and invalid), and every response must
be no 5xx and conform to the document: status code, content type, headers and body.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import pytest
import schemathesis
from api_harness import ALICE, ROOT, ApiClient, LambdaContext, rest_event
from api_harness import api as api  # the fixture
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

schema = schemathesis.openapi.from_path(ROOT / "openapi.json")
# SigV4 is checked by API Gateway before the function runs; in-process there is nothing to sign.
schema.config.generation.update(with_security_parameters=False)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class ProxyWsgi:
    """WSGI in, API Gateway REST proxy event to the Lambda handler, WSGI out."""

    def __init__(self) -> None:
        self.handler: Callable[[dict[str, Any], Any], dict[str, Any]] | None = None
        self.job_id = ""
        self.statuses: list[int] = []

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        # The path as sent (still URL-encoded), and the query string WSGI keeps apart.
        raw_uri = environ.get("RAW_URI") or environ.get("REQUEST_URI")
        if raw_uri:
            path = raw_uri.split("?", 1)[0]
        else:
            raw = environ.get("PATH_INFO", "/").encode("latin-1").decode("utf-8", "replace")
            path = quote(raw, safe="/:@!$&'()*+,;=-._~")
        if environ.get("QUERY_STRING"):
            path += "?" + environ["QUERY_STRING"]
        headers = {
            key[5:].replace("_", "-").title(): value
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        if environ.get("CONTENT_TYPE"):
            headers["Content-Type"] = environ["CONTENT_TYPE"]
        text = body.decode("utf-8", "replace") if body else None
        event = rest_event(environ["REQUEST_METHOD"], path, text, headers, user_arn=ALICE)
        if text is None:
            event["headers"].pop("Content-Type", None)
            event["multiValueHeaders"].pop("Content-Type", None)
        assert self.handler is not None, "the wsgi fixture installs the handler"
        reply = self.handler(event, LambdaContext())
        self.statuses.append(reply["statusCode"])
        merged = {k: v[-1] for k, v in (reply.get("multiValueHeaders") or {}).items()}
        merged.update(reply.get("headers") or {})
        status = reply["statusCode"]
        start_response(f"{status} {HTTPStatus(status).phrase}", list(merged.items()))
        return [(reply.get("body") or "").encode()]


PROXY = ProxyWsgi()
schema.app = PROXY  # also used by schemathesis' own probes (e.g. malformed Content-Type)


@pytest.fixture
def proxy(api: ApiClient) -> Iterator[ProxyWsgi]:
    """The adapter bound to this test's handler, with one real job so job routes get past 404."""
    job = api.create()
    api.call("POST", f"/v1/jobs/{job['id']}/trigger")
    PROXY.handler, PROXY.job_id, PROXY.statuses = api.handler.handler, job["id"], []
    yield PROXY
    PROXY.handler = None


@schema.parametrize()
@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_api_conforms_to_its_openapi_document(case: Any, proxy: ProxyWsgi) -> None:
    # Every other example aims at the real job; the rest keep their generated ids (404s).
    if case.path_parameters and "job_id" in case.path_parameters and len(proxy.statuses) % 2 == 0:
        case.path_parameters["job_id"] = proxy.job_id
    response = case.call()
    case.validate_response(response, checks=CHECKS)
    assert response.status_code < 500, response.text


def test_the_document_is_the_one_the_api_serves(api: ApiClient) -> None:
    served = api.call("GET", "/v1/openapi.json").body
    assert {**served, "servers": []} == {**json.loads((ROOT / "openapi.json").read_text()), "servers": []}
    assert len(schema.raw_schema["paths"]) == 10
