"""An error answer whose body is cut short (a timeout while it is read) is still one line and an
exit status, never a traceback (review)."""

from __future__ import annotations

import io
import urllib.error
from email.message import Message
from typing import Any

import pytest

from punctual_cli import client as client_module
from punctual_cli.client import ApiError, PunctualClient
from punctual_cli.retries import RetryPolicy


class _CutShort(io.BytesIO):
    def read(self, *args: Any) -> bytes:
        raise TimeoutError("timed out")


def test_an_error_whose_body_times_out_is_an_api_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(request: Any, timeout: float) -> Any:
        raise urllib.error.HTTPError(request.full_url, 503, "Service Unavailable", Message(), _CutShort())

    monkeypatch.setattr(client_module._OPENER, "open", failing)
    api = PunctualClient("http://127.0.0.1:9", tenant="t", retry=RetryPolicy(max_attempts=1))
    with pytest.raises(ApiError) as raised:
        api.get_job("j")
    assert raised.value.status == 503


def _answering(monkeypatch: pytest.MonkeyPatch, status: int, body: bytes) -> None:
    def failing(request: Any, timeout: float) -> Any:
        raise urllib.error.HTTPError(request.full_url, status, "Not Found", Message(), io.BytesIO(body))

    monkeypatch.setattr(client_module._OPENER, "open", failing)


def test_a_json_error_that_is_no_problem_says_the_endpoint_is_not_the_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression (QA22): the endpoint set to local mode's webhook receiver (8081 beside the API's
    8080) answered ``404 {"error": "not found"}`` and the command said ``404 error``."""
    _answering(monkeypatch, 404, b'{"error": "not found"}')
    with pytest.raises(ApiError) as raised:
        PunctualClient("http://127.0.0.1:9", tenant="t").list_jobs()
    assert raised.value.status == 0
    assert str(raised.value) == (
        "http://127.0.0.1:9 is not Punctual's API: it answered 404 with what the API never answers:"
        ' {"error": "not found"}'
    )


@pytest.mark.parametrize(
    ("body", "summary"),
    [
        (b'{"title": "Not found", "detail": "job \'j\' not found"}', "404 Not found: job 'j' not found"),
        (b'{"message": "Missing Authentication Token"}', "404 Missing Authentication Token"),  # API Gateway
    ],
)
def test_the_api_s_and_api_gateway_s_errors_are_theirs(
    monkeypatch: pytest.MonkeyPatch, body: bytes, summary: str
) -> None:
    _answering(monkeypatch, 404, body)
    with pytest.raises(ApiError) as raised:
        PunctualClient("http://127.0.0.1:9", tenant="t").get_job("j")
    assert raised.value.status == 404 and str(raised.value) == summary
