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


class _CutShort(io.BytesIO):
    def read(self, *args: Any) -> bytes:
        raise TimeoutError("timed out")


def test_an_error_whose_body_times_out_is_an_api_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(request: Any, timeout: float) -> Any:
        raise urllib.error.HTTPError(request.full_url, 503, "Service Unavailable", Message(), _CutShort())

    monkeypatch.setattr(client_module._OPENER, "open", failing)
    api = PunctualClient("http://127.0.0.1:9", tenant="t")
    with pytest.raises(ApiError) as raised:
        api.get_job("j")
    assert raised.value.status == 503
