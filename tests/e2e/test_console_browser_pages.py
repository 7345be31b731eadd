"""The local console's page in Chromium, served in-process (local mode's ``/console`` handler on a
free port over a store the test controls): what the browser does with the page when storage fails,
and the headers it is served with."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from botocore.exceptions import ClientError
from browser import BrowserError, Chromium, chromium_binary

from factories import job
from local.api_gateway import LocalApiServer
from local.console import with_console
from punctual.console import service
from punctual.console.widget import ConsoleSettings
from punctual.store.memory import MemoryStore

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

T = TypeVar("T")
DEADLINE_S = 120.0  # a busy two-core machine: Chromium and the page both wait on it

READ_PAGE = """
(() => ({
  alert: document.querySelector('[role=alert]')?.textContent ?? null,
  jobs: [...document.querySelectorAll('#pc-jobs tbody tr[data-job-id]')].map((tr) => tr.dataset.jobId),
}))()
"""


class FlakyStore(MemoryStore):
    """A store whose reads DynamoDB throttles while ``throttled`` is set."""

    throttled = False

    def list_jobs(self, *args: Any, **kwargs: Any) -> Any:
        if self.throttled:
            error = {"Code": "ProvisionedThroughputExceededException", "Message": "Rate exceeded"}
            raise ClientError({"Error": error}, "Query")
        return super().list_jobs(*args, **kwargs)


def not_the_api(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"statusCode": 404, "headers": {"Content-Type": "application/json"}, "body": "{}"}


@pytest.fixture
def served() -> Iterator[tuple[FlakyStore, str]]:
    """A store with one job, and the URL of the console page over it (reloading every second)."""
    store = FlakyStore()
    store.create_job(job("nightly", now=datetime.now(UTC) - timedelta(hours=1)), None, 100)
    service.use_services(service.ConsoleServices(store, ConsoleSettings(refresh_s=1)))
    try:
        with LocalApiServer(with_console(not_the_api)) as server:
            yield store, server.url + "/console"
    finally:
        service.use_services(None)


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Chromium]:
    assert chromium_binary() is not None, "chromium is not installed: `make browser` installs it"
    with Chromium(tmp_path / "chromium-profile") as browser:
        yield browser


def until(found: Callable[[], T | None], what: str) -> T:
    """``found()``'s first value that is not None, asked again until :data:`DEADLINE_S`."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            value = found()
        except BrowserError:  # the page was reloading as it was read
            value = None
        if value is not None:
            return value
        time.sleep(0.5)
    raise AssertionError(f"no {what} within {DEADLINE_S:.0f} s")


def test_a_throttled_table_shows_an_error_and_the_page_goes_on_reloading_until_it_is_read(
    served: tuple[FlakyStore, str], chromium: Chromium
) -> None:
    store, url = served
    # Given a table that throttles the console's reads
    store.throttled = True

    # When Chromium opens the console
    chromium.load(url)

    # Then the page says why it shows no jobs, by name
    page: dict[str, Any] = until(lambda: chromium.evaluate(READ_PAGE) or None, "page")
    assert page["jobs"] == [] and page["alert"] is not None, page
    assert "could not be read" in page["alert"] and "ProvisionedThroughputExceededException" in page["alert"]

    # ... and once the table answers again, the same page shows the jobs without anyone reloading it
    store.throttled = False
    shown = until(lambda: chromium.evaluate(READ_PAGE)["jobs"] or None, "jobs once the table answered")
    assert shown == ["nightly"]
