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


_PAGE = (
    b'<!DOCTYPE HTML>\n<html lang="en"><head><title>Error response</title>'
    b"<style>body { color: red }</style><script>var x = '<b>';</script></head>\n"
    b"<body><h1>Error response</h1><p>Message: File not found &amp; gone.</p></body></html>"
)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 407, 413])
def test_a_page_answered_to_a_request_says_the_endpoint_is_not_the_api(
    monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    """Regression (QA, thirty-second session): the endpoint set to a web server (a typo'd port, a
    proxy's page) printed ``404 File not found: <!DOCTYPE HTML> <html lang="en"> <head> ...`` whole;
    the API's errors and API Gateway's are JSON objects, so a page is another service's."""
    _answering(monkeypatch, status, _PAGE)
    with pytest.raises(ApiError) as raised:
        PunctualClient("http://127.0.0.1:9", tenant="t").list_jobs()
    said = str(raised.value)
    assert raised.value.status == 0 and "\n" not in said, said
    assert said.startswith(f"http://127.0.0.1:9 is not Punctual's API: it answered {status} with"), said
    assert "Error response" in said and "<" not in said and "color" not in said, said


@pytest.mark.parametrize("status", [429, 502, 503])
def test_a_page_with_a_retried_status_keeps_its_status_without_markup(
    monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    """A load balancer's 502 or 503 page is still the status it is (retried as one), its text shown
    without the markup."""
    _answering(monkeypatch, status, _PAGE)
    api = PunctualClient("http://127.0.0.1:9", tenant="t", retry=RetryPolicy(max_attempts=1))
    with pytest.raises(ApiError) as raised:
        api.get_job("j")
    said = str(raised.value)
    assert raised.value.status == status and "<" not in said and "\n" not in said, said
    assert "File not found & gone." in said, said


def test_plain_text_and_a_json_list_are_not_the_api_either(monkeypatch: pytest.MonkeyPatch) -> None:
    for body, shown in ((b"404 page not found\n", "404 page not found"), (b"[1, 2]", "[1, 2]")):
        _answering(monkeypatch, 404, body)
        with pytest.raises(ApiError) as raised:
            PunctualClient("http://127.0.0.1:9", tenant="t").get_job("j")
        assert raised.value.status == 0 and str(raised.value).endswith(f"never answers: {shown}")
