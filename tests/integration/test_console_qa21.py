"""The console's figures as the API tells them (QA21): a job created again at a deleted job's id
does not show that job's runs as its own (the API marks them ``job_deleted``); a failure is recent
by when it ended, not by its slot's instant (a backfill of a slot days old failing now); and a
target's answer cannot make a failure read as other text (bidirectional overrides in its error)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from console_html import parse

from factories import job, make_unreadable
from punctual.console.render import LocalLinks, render_console
from punctual.console.view import ConsoleQuery, build_view
from punctual.execution.records import summary
from punctual.models import Execution, ExecutionStatus
from punctual.store.memory import MemoryStore

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
TTL = 2_000_000_000  # a record's TTL long after the test (the console leaves expired ones out)
SPOOF = "HTTP 500: \u202e0 edoc tixe ,DEEDECCUS"  # displayed as "...: SUCCEEDED, exit code 0"


def failed(job_id: str, slot: datetime, ended: datetime, error: str, backfill: str = "") -> Execution:
    return Execution(
        job_id=job_id,
        tenant="default",
        slot=slot.strftime("%Y-%m-%dT%H:%M:%SZ"),
        scheduled_at=slot,
        attempt=1,
        status=ExecutionStatus.FAILED,
        started_at=ended - timedelta(seconds=1),
        finished_at=ended,
        error=error,
        backfill=backfill,
    )


def page(store: MemoryStore, now: datetime = T0) -> object:
    return parse(render_console(build_view(store, ConsoleQuery("default"), now), LocalLinks()))


def test_a_job_created_again_does_not_show_the_deleted_jobs_runs() -> None:
    store = MemoryStore()
    # the run of the job deleted at this id, 10 minutes before the new job was created
    store.save_execution(
        failed("report", T0 - timedelta(minutes=10), T0 - timedelta(minutes=10), "old"), None, TTL
    )
    store.create_job(job("report", now=T0 - timedelta(minutes=1)), None, 100)
    shown = page(store)
    jobs = shown.tables["pc-jobs"]  # type: ignore[attr-defined]
    assert jobs.column("Last status") == ["none"] and jobs.column("Failures 24 h") == ["0"]
    assert shown.tables["pc-failures"].rows[0][0].text.startswith("No failures")  # type: ignore[attr-defined]


def test_a_backfilled_slot_failing_now_is_a_recent_failure() -> None:
    store = MemoryStore()
    store.create_job(job("etl", "cron(0 2 * * ? *)", now=T0 - timedelta(days=10)), None, 100)
    slot = datetime(2026, 11, 27, 2, 0, tzinfo=UTC)  # three days old, backfilled today
    store.save_execution(
        failed("etl", slot, T0 - timedelta(minutes=4), "backfill of 27 Nov", "bf-1"), None, TTL
    )
    shown = page(store)
    assert shown.tables["pc-jobs"].column("Failures 24 h") == ["1"]  # type: ignore[attr-defined]
    errors = [row[-1].text for row in shown.tables["pc-failures"].rows]  # type: ignore[attr-defined]
    assert any("backfill of 27 Nov" in error for error in errors), errors


def test_a_targets_answer_cannot_make_a_failure_read_as_other_text() -> None:
    kept = summary(SPOOF)
    assert "\u202e" not in kept and kept.startswith("HTTP 500: \ufffd")
    assert summary("HTTP 200 OK") == "HTTP 200 OK" and summary("caf\u00e9 \u200f") == "caf\u00e9 \u200f"
    store = MemoryStore()
    store.create_job(job("hook", now=T0 - timedelta(days=1)), None, 100)
    store.save_execution(
        failed("hook", T0 - timedelta(minutes=2), T0 - timedelta(minutes=2), kept), None, TTL
    )
    cells = [row[-1].text for row in page(store).tables["pc-failures"].rows]  # type: ignore[attr-defined]
    assert cells and not any("\u202e" in cell for cell in cells), cells


def test_next_fire_is_now_while_a_resume_owes_a_slot_as_the_api_says() -> None:
    from punctual.models import JobState
    from punctual.usecases.next_fire import NextFire

    now = T0 + timedelta(seconds=20)
    store = MemoryStore()
    hourly = job("hourly", "cron(0 * * * ? *)", now=T0 - timedelta(hours=2))
    resumed = hourly.model_copy(  # paused at 09:10, resumed at 10:00:10: the 10:00 slot is owed
        update={
            "state": JobState.ENABLED,
            "paused_at": T0 - timedelta(minutes=50),
            "updated_at": T0 + timedelta(seconds=10),
            "version": 3,
            "spec_version": 1,
        }
    )
    store.create_job(resumed, None, 100)
    api_next = NextFire(store, lambda: now).of(resumed).next_fire_at
    assert api_next == now
    assert build_view(store, ConsoleQuery("default"), now).rows[0].next_fire_at == api_next


def test_an_unreadable_job_takes_its_place_in_the_pages(dynamo_client: Any) -> None:
    """QA21: one in the look-ahead place (the fourth of a page of 3) was shown on page 1 (4 rows),
    and the next page offered was empty."""
    from punctual.store.dynamo import DynamoStore

    (table,) = dynamo_client.list_tables()["TableNames"]
    store = DynamoStore(dynamo_client, table)
    for job_id in "abcd":
        store.create_job(job(job_id, now=T0 - timedelta(days=1)), None, 100)
    make_unreadable(dynamo_client, table, "default", "d")
    first = build_view(store, ConsoleQuery("default", page_size=3), T0)
    assert [row.job.id for row in first.rows] == ["a", "b", "c"] and first.unreadable == ()
    assert first.next_cursor == "c"
    second = build_view(store, ConsoleQuery("default", cursor=first.next_cursor, page=2, page_size=3), T0)
    assert not second.rows and [u.id for u in second.unreadable] == ["d"] and second.next_cursor is None
