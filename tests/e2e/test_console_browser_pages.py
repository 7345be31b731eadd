"""The local console's page in Chromium, served in-process (local mode's ``/console`` handler on a
free port over a store the test controls): what the browser does with the page when storage fails,
and the headers it is served with."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from botocore.exceptions import ClientError
from browser import BrowserError, Chromium, chromium_binary

from factories import job, save_run
from local.api_gateway import LocalApiServer
from local.console import with_console
from punctual.console import service
from punctual.console.widget import ConsoleSettings
from punctual.models import Execution, ExecutionStatus
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


WATCH_VIOLATIONS = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(
  `${e.violatedDirective} ${e.blockedURI} ${e.sample}`));
"""

READ_STYLED = """
(() => ({
  violations: window.__violations,
  badge: getComputedStyle(document.querySelector('#pc-jobs .st')).backgroundColor,
  bar: document.querySelector('#pc-delays .bar').getBoundingClientRect().width,
  url: location.href,
}))()
"""


def test_the_page_is_served_with_a_policy_that_runs_no_script_and_still_shows_and_filters(
    served: tuple[FlakyStore, str], chromium: Chromium
) -> None:
    store, url = served
    # Given a job with a run, so that the page has a status badge and a histogram bar (inline styles)
    record = next(iter(store.list_jobs("default", limit=1).items))
    now = datetime.now(UTC)
    store.save_execution(
        Execution(
            job_id=record.id,
            slot=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            scheduled_at=now,
            status=ExecutionStatus.SUCCEEDED,
            started_at=now,
            finished_at=now,
        ),
        None,
        2_000_000_000,
    )

    # When the page is fetched
    with urllib.request.urlopen(url, timeout=60) as reply:
        headers = reply.headers
    # Then a policy allows no script, no other origin and no framing, and the type is not sniffed
    policy = {part.split()[0]: part.split()[1:] for part in headers["Content-Security-Policy"].split(";")}
    assert policy["default-src"] == ["'none'"] and "script-src" not in policy
    assert policy["frame-ancestors"] == ["'none'"] and policy["form-action"] == ["'self'"]
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["X-Frame-Options"] == "DENY"

    # ... and Chromium shows the page under it as before: its styles applied, no violation reported
    chromium.call("Page.addScriptToEvaluateOnNewDocument", source=WATCH_VIOLATIONS)
    chromium.load(url)
    shown = until(lambda: chromium.evaluate(READ_STYLED), "styled page")
    assert shown["violations"] == [] and chromium.errors == [], (shown, chromium.errors)
    assert shown["badge"] not in ("rgba(0, 0, 0, 0)", "transparent") and shown["bar"] > 0
    # ... and its filter form still submits to the page
    chromium.evaluate("document.querySelector('input[name=tag]').value = 'team'")
    chromium.evaluate("document.querySelector('form[aria-label=Filter]').requestSubmit()")
    filtered = until(lambda: chromium.evaluate("location.href").endswith("tag=team") or None, "filtered page")
    assert filtered and chromium.evaluate("window.__violations") == []


READ_WIDTHS = """
(() => ({
  page: document.documentElement.scrollWidth,
  window: window.innerWidth,
  right: Object.fromEntries([...document.querySelectorAll('#pc-jobs tbody tr[data-job-id]')].map(
    (tr) => [tr.dataset.jobId, Math.round(tr.lastElementChild.getBoundingClientRect().right)])),
}))()
"""


def test_long_schedules_tenants_and_tags_wrap_instead_of_pushing_the_runs_off_the_window(
    served: tuple[FlakyStore, str], tmp_path: Path
) -> None:
    store, url = served
    # Given schedules with no space to break at: after() of eight long parents, and a cron listing
    # every minute (neither is refused; both are the longest kind of expression users write)
    created = datetime.now(UTC) - timedelta(hours=1)
    parents = [f"parent-{index}-" + "x" * 40 for index in range(8)]
    for parent in parents:
        store.create_job(job(parent, now=created), None, 100)
    store.create_job(job("after-many", f"after({','.join(parents)})", now=created), None, 100)
    minutes = ",".join(str(minute) for minute in range(60))
    store.create_job(job("every-minute", f"cron({minutes} * * * ? *)", now=created), None, 100)
    tenant = "AROA" + "X" * 200  # a long tenant (the API takes 256 characters) and tag, in the title
    store.create_job(job("theirs", tenant=tenant, tags={"k" * 100: "v" * 200}, now=created), None, 100)
    # ... and a full run strip (QA26: its 20 cells on one line pushed the page to 1445 pixels, so
    # the newest runs were off even a 1400-pixel window), the newest a FAILED one with a long error
    for index in range(20):
        status = ExecutionStatus.FAILED if index % 2 else ExecutionStatus.RETRY_WAIT
        save_run(store, "every-minute", created + timedelta(minutes=index), status, "HTTP 500: " + "x" * 150)

    # When Chromium shows them in a 1000-pixel window (a dashboard widget is often narrower)
    with Chromium(tmp_path / "narrow-profile", width=1000) as narrow:
        narrow.load(url + "?page_size=100")
        ours = until(lambda: narrow.evaluate(READ_WIDTHS), "jobs page")
        # ... and in a phone's 360 pixels (the tables scroll sideways in their own box)
        narrow.call(
            "Emulation.setDeviceMetricsOverride", width=360, height=800, deviceScaleFactor=1, mobile=False
        )
        phone = until(lambda: narrow.evaluate(READ_WIDTHS), "jobs page, 360 pixels wide")
        narrow.call("Emulation.clearDeviceMetricsOverride")
        narrow.load(url + f"?tenant={tenant}&tag={'k' * 100}={'v' * 200}")
        theirs = until(lambda: narrow.evaluate(READ_WIDTHS), "tenant's page")

    # Then the page is no wider than the window, and every row's run strip is inside it
    assert ours["page"] <= ours["window"] and theirs["page"] <= theirs["window"], (ours, theirs)
    assert {"after-many", "every-minute"} <= set(ours["right"]) and set(theirs["right"]) == {"theirs"}
    assert all(0 < right <= ours["window"] for right in [*ours["right"].values(), *theirs["right"].values()])
    assert phone["window"] == 360 and phone["page"] <= phone["window"], phone


READ_FOCUSED_STRIP = """
(() => {
  const strip = document.activeElement;
  if (!strip.matches('#pc-jobs ol.strip')) return null;
  return [...strip.children].map((li) => getComputedStyle(li, '::after').content);
})()
"""


def test_a_run_strip_is_reached_with_the_tab_key_and_then_says_what_each_run_s_tooltip_says(
    served: tuple[FlakyStore, str], chromium: Chromium
) -> None:
    """QA26: a run's slot, delay and error were in its cell's tooltip only, which a mouse shows:
    a keyboard could not reach a strip at all."""
    store, url = served
    # Given a job whose newest run FAILED with an error
    slot = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    key = slot.strftime("%Y-%m-%dT%H:%M:%SZ")
    save_run(store, "nightly", slot, ExecutionStatus.FAILED, "HTTP 503: the warehouse is closed")
    chromium.load(url + "?refresh=0")
    until(lambda: chromium.evaluate("document.querySelector('#pc-jobs ol.strip') && true"), "run strip")

    # When the page is walked with the Tab key (the filter's controls come first)
    def tab_to_strip() -> list[str] | None:
        for event in ("rawKeyDown", "keyUp"):
            chromium.call(
                "Input.dispatchKeyEvent", type=event, key="Tab", code="Tab", windowsVirtualKeyCode=9
            )
        shown: list[str] | None = chromium.evaluate(READ_FOCUSED_STRIP)
        return shown

    shown = next((found for _ in range(10) if (found := tab_to_strip()) is not None), None)

    # Then the strip takes the focus, and its cell says the run's slot, status and error as text
    assert shown is not None, "the Tab key never reached the run strip"
    assert len(shown) == 1 and key in shown[0] and "FAILED" in shown[0], shown
    assert "the warehouse is closed" in shown[0], shown


READ_STOPPED = """
(() => ({
  url: location.href,
  refresh: document.querySelector('meta[http-equiv=refresh]')?.content ?? null,
  jobs: [...document.querySelectorAll('#pc-jobs tbody tr[data-job-id]')].map((tr) => tr.dataset.jobId),
  marked: window.__marked ?? null,
}))()
"""


def test_a_stopped_page_stays_stopped_through_its_page_links_and_its_apply_button(
    served: tuple[FlakyStore, str], chromium: Chromium
) -> None:
    """QA28: *Next page*, *First page* and *Apply* led to the page without ``refresh=0``, so it
    reloaded again (here every second), wiping a filter as it was typed."""
    store, url = served
    created = datetime.now(UTC) - timedelta(hours=1)
    for name in ("weekly", "zzz-last"):
        store.create_job(job(name, now=created, tags={"team": "data"}), None, 100)
    # Given the page stopped, two jobs a page
    chromium.load(url + "?page_size=2&refresh=0")
    until(lambda: chromium.evaluate(READ_STOPPED)["jobs"] or None, "first page")

    def follow(action: str, what: str, jobs: list[str]) -> dict[str, Any]:
        chromium.evaluate("window.__marked = null")
        before = chromium.evaluate("location.href")
        chromium.evaluate(action)

        def arrived() -> dict[str, Any] | None:
            page: dict[str, Any] = chromium.evaluate(READ_STOPPED)
            return page if page["url"] != before and page["jobs"] else None

        shown = until(arrived, what)
        # ... leads to a page that is stopped too: no reload wipes a mark left on it
        chromium.evaluate("window.__marked = 1")
        time.sleep(3)  # three reloads, were it reloading every second
        kept = chromium.evaluate(READ_STOPPED)
        assert shown["jobs"] == jobs and "refresh=0" in shown["url"], shown
        assert shown["refresh"] is None and kept["marked"] == 1, (what, shown, kept)
        return shown

    # When the page is walked forward, back to the first, and filtered with the Apply button
    follow(
        "[...document.links].find((a) => a.textContent === 'Next page').click()", "next page", ["zzz-last"]
    )
    follow(
        "[...document.links].find((a) => a.textContent === 'First page').click()",
        "first page",
        ["nightly", "weekly"],
    )
    follow(
        "document.querySelector('input[name=tag]').value = 'team=data';"
        " [...document.querySelectorAll('button')].find((b) => b.textContent === 'Apply').click()",
        "filtered page",
        ["weekly", "zzz-last"],
    )
