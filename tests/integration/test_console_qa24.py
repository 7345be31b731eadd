"""The console as an operator reads it (QA24): a table that cannot be read is said so in the widget
as on the local page, never the function's error."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from punctual.console import service
from punctual.console.widget import ConsoleSettings
from punctual.store.memory import MemoryStore

ARN = "arn:aws:lambda:us-east-1:123456789012:function:punctual-console"


class Unreadable(MemoryStore):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def list_jobs(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error


@pytest.mark.parametrize(
    ("error", "named"),
    [
        (
            ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "Query"),
            "Throttling",
        ),
        (
            EndpointConnectionError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com"),
            "EndpointConnection",
        ),
    ],
)
def test_a_table_that_cannot_be_read_is_said_so_in_the_widget_and_the_local_page(
    error: Exception, named: str
) -> None:
    service.use_services(service.ConsoleServices(Unreadable(error), ConsoleSettings(refresh_s=7)))
    try:
        widget = service.widget_html({"widgetContext": {}}, ARN)
        status, page = service.local_page({})
    finally:
        service.use_services(None)
    assert 'role="alert"' in widget and "could not be read" in widget and named in widget
    assert status == 503 and 'role="alert"' in page and named in page
    assert '<meta http-equiv="refresh" content="7">' in page  # it goes on reloading
