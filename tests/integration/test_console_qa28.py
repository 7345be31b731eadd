"""The console's run strip as the records say it (QA28): an error only an earlier attempt's record
holds is named as that attempt's, never read as the error of the slot's success or current run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from console_html import parse

from factories import job
from punctual.console.render import LocalLinks, render_console
from punctual.console.view import ConsoleQuery, build_view
from punctual.models import AttemptRecord, Execution, ExecutionStatus
from punctual.store.memory import MemoryStore

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
TTL = 2_000_000_000  # a record's TTL long after the test (the console leaves expired ones out)


def retried(slot: datetime, status: ExecutionStatus, attempt: int) -> Execution:
    """A slot whose first attempt failed with HTTP 503, now at ``attempt`` as ``status``."""
    failed = AttemptRecord(
        attempt=1, status=ExecutionStatus.FAILED, started_at=slot, finished_at=slot, error="HTTP 503: down"
    )
    start = slot + timedelta(seconds=20)
    done = status.terminal
    return Execution(
        job_id="report",
        slot=slot.strftime("%Y-%m-%dT%H:%M:%SZ"),
        scheduled_at=slot,
        attempt=attempt,
        status=status,
        started_at=start,
        finished_at=start if done else None,
        attempts=[
            failed,
            *(
                [AttemptRecord(attempt=attempt, status=status, started_at=start, finished_at=start)]
                if done
                else []
            ),
        ],
    )


def test_an_earlier_attempts_error_is_named_as_that_attempts_in_the_run_strip() -> None:
    store = MemoryStore()
    store.create_job(job("report", now=T0 - timedelta(hours=1)), None, 100)
    # Given a slot that succeeded at its second attempt, and one running its second attempt
    store.save_execution(retried(T0 - timedelta(minutes=2), ExecutionStatus.SUCCEEDED, 2), None, TTL)
    store.save_execution(retried(T0 - timedelta(minutes=1), ExecutionStatus.RUNNING, 2), None, TTL)

    # When the console shows them
    html = render_console(build_view(store, ConsoleQuery("default"), T0), LocalLinks())
    strip = parse(html).tables["pc-jobs"].rows[0][-1].items
    titles = {cell["data-status"]: cell["title"] for cell in strip}

    # Then each tooltip names the failed attempt the error was of, not the slot's success or run
    for status in ("SUCCEEDED", "RUNNING"):
        assert titles[status].endswith(": attempt 1 FAILED: HTTP 503: down"), titles
        assert f" {status}, attempt 2," in titles[status], titles
