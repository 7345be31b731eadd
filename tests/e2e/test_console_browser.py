"""The local console in a real browser: headless Chromium loads /console while jobs fire."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from browser import BrowserError, Chromium, chromium_binary

from local import harness
from local.harness import LocalMode

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

TENANT = "e2e-console"
STATUSES = {"QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "RETRY_WAIT", "SKIPPED", "MISSED"}

# What the test reads from the page: the DOM as the browser built it.
READ_DOM = """
(() => {
  const text = (el) => el ? el.textContent.replace(/\\s+/g, ' ').trim() : null;
  const rows = (sel) => [...document.querySelectorAll(sel)];
  return {
    title: document.title,
    refresh: document.querySelector('meta[http-equiv=refresh]')?.content ?? null,
    captions: rows('table caption').map(text),
    headers: rows('#pc-jobs thead th[scope=col]').map(text),
    jobs: rows('#pc-jobs tbody tr[data-job-id]').map((tr) => ({
      id: tr.dataset.jobId,
      name: text(tr.querySelector('th[scope=row]')),
      last: text(tr.querySelector('td.last-status')),
      strip: [...tr.querySelectorAll('ol.strip li')].map((li) => ({
        status: li.dataset.status, label: text(li), background: getComputedStyle(li).backgroundColor,
      })),
    })),
    failures: rows('#pc-failures tbody tr[data-job-id]').map((tr) => ({
      id: tr.dataset.jobId, cells: [...tr.children].map(text),
    })),
  };
})()
"""


@pytest.fixture
def running(local_mode: LocalMode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMode]:
    """The session's local mode, or a fresh one if an earlier test stopped it (its last test does)."""
    if local_mode.process.poll() is None:
        yield local_mode
        return
    with harness.running(tmp_path_factory.mktemp("console-local-mode"), tenant=TENANT) as own:
        yield own


def register(local: LocalMode, key: str, hook: str, **extra: Any) -> str:
    spec = {
        "name": f"console {key}",
        "schedule": "rate(5 seconds)",
        "target": {"type": "http", "url": local.hook(hook)},
        "timeout_seconds": 10,
        **extra,
    }
    status, body = local.api("POST", "/v1/jobs", spec, tenant=TENANT)
    assert status == 201, body
    return str(body["id"])


def statuses(local: LocalMode, job_id: str) -> set[str]:
    status, body = local.api("GET", f"/v1/jobs/{job_id}/executions?limit=20", tenant=TENANT)
    return {item["status"] for item in body["items"]} if status == 200 else set()


def test_the_console_shows_jobs_their_runs_and_a_failing_jobs_error_in_chromium(
    running: LocalMode, tmp_path: Path
) -> None:
    local_mode = running
    assert chromium_binary() is not None, "chromium is not installed: `make browser` installs it"
    # Given a job that succeeds and one whose target always answers 500 (no retry)
    ok = register(local_mode, "ok", "console-ok")
    broken = register(local_mode, "broken", "console-broken?fail=1000000", retry={"max_attempts": 1})
    try:
        # ... that have both fired at least once
        local_mode.wait(
            lambda: "SUCCEEDED" in statuses(local_mode, ok) and "FAILED" in statuses(local_mode, broken),
            240,
            "a succeeded run of the ok job and a failed run of the broken job",
            interval_s=2.0,
        )

        # When Chromium loads the console while they go on firing
        url = f"{local_mode.api_url}/console?tenant={quote(TENANT)}"
        with Chromium(tmp_path / "chromium-profile") as browser:

            def shown() -> dict[str, Any] | None:
                browser.errors.clear()  # what counts is the page as last loaded
                try:
                    browser.load(url)
                    dom: dict[str, Any] = browser.evaluate(READ_DOM)
                except BrowserError:  # a busy machine: try again until the deadline
                    return None
                ids = {job["id"] for job in dom["jobs"]}
                failing = [f for f in dom["failures"] if f["id"] == broken]
                return dom if {ok, broken} <= ids and failing else None

            dom = local_mode.wait(shown, 120, "the console to show both jobs and the failure", interval_s=2.0)
            screenshot = browser.screenshot(tmp_path / "console.png")
            time.sleep(0.5)  # anything the page logs late still reaches the error list
            browser.call("Runtime.evaluate", expression="1")
            errors = list(browser.errors)

        # Then the DOM shows both jobs by name, as rows of a real table
        assert dom["title"] == "Punctual console" and dom["refresh"] == "5"
        assert dom["headers"][:7] == [
            "Job",
            "Schedule",
            "State",
            "Next fire (UTC)",
            "Last status",
            "Fire delay",
            "Failures 24 h",
        ]
        assert dom["captions"][0] == "Jobs" and dom["captions"][1].startswith("Recent failures")
        jobs = {job["id"]: job for job in dom["jobs"]}
        assert jobs[ok]["name"].startswith("console ok") and jobs[broken]["name"].startswith("console broken")
        # ... each with its status written out, the last status agreeing with the newest cell
        for job in jobs.values():
            assert job["last"] in STATUSES
            assert job["strip"] and job["last"] == job["strip"][-1]["status"]
            assert all(cell["label"] and cell["status"] in STATUSES for cell in job["strip"])
        assert "SUCCEEDED" in {cell["status"] for cell in jobs[ok]["strip"]}
        assert "FAILED" in {cell["status"] for cell in jobs[broken]["strip"]}
        colours = {cell["status"]: cell["background"] for job in jobs.values() for cell in job["strip"]}
        assert colours["SUCCEEDED"] != colours["FAILED"]  # and coloured apart
        # ... the failing job's error, in the recent failures
        failure = next(f for f in dom["failures"] if f["id"] == broken)
        assert failure["cells"][2] == "FAILED" and "500" in failure["cells"][-1], failure
        # ... with no console errors, and a screenshot kept with the test's output
        assert errors == []
        assert screenshot.stat().st_size > 10_000 and screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        for job_id in (ok, broken):
            local_mode.api("DELETE", f"/v1/jobs/{job_id}", tenant=TENANT)
