"""The console as an operator reads it (QA26): times that are not today's say their date."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from console_html import parse

from factories import job, save_run
from punctual.console.render import LocalLinks, render_console
from punctual.console.view import ConsoleQuery, build_view
from punctual.models import ExecutionStatus
from punctual.store.memory import MemoryStore

T0 = datetime(2026, 12, 1, 0, 10, tzinfo=UTC)  # ten minutes past midnight


def test_a_failure_that_ended_yesterday_says_its_date() -> None:
    """QA26: the Ended column was a time of day only, so a failure that ended at 23:50 yesterday
    read, at 00:10, as one that would end later today (the next fire was dated already)."""
    store = MemoryStore()
    store.create_job(job("nightly", now=T0 - timedelta(days=2)), None, 100)
    for ended in (T0 - timedelta(minutes=20), T0 - timedelta(minutes=5)):
        save_run(store, "nightly", ended, ExecutionStatus.FAILED, "HTTP 500")

    failures = parse(render_console(build_view(store, ConsoleQuery("default"), T0), LocalLinks())).tables[
        "pc-failures"
    ]

    assert failures.column("Ended (UTC)") == ["00:05:00", "2026-11-30 23:50:00"]
