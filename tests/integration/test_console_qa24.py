"""The console as an operator reads it (QA24): a table that cannot be read is said so in the widget
as on the local page, never the function's error; a MISSED range record's cell says how many slots
it stands for, as the API and the CLI do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from console_html import parse

from factories import job
from punctual.console import service
from punctual.console.render import LocalLinks, render_console
from punctual.console.view import ConsoleQuery, build_view
from punctual.console.widget import ConsoleSettings
from punctual.models import Execution, ExecutionStatus
from punctual.store.base import JobStore
from punctual.store.memory import MemoryStore

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
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


def test_a_missed_range_records_cell_says_how_many_slots_it_stands_for(store: JobStore) -> None:
    # Given a rate(1 second) job whose two hours of dropped slots are one MISSED range record
    store.create_job(job("sec", "rate(1 second)", now=T0 - timedelta(days=1)), None, 100)
    first, last = T0 - timedelta(hours=2), T0 - timedelta(seconds=2)
    store.save_execution(
        Execution(
            job_id="sec",
            slot=first.strftime("%Y-%m-%dT%H:%M:%SZ"),
            scheduled_at=first,
            status=ExecutionStatus.MISSED,
            finished_at=T0 - timedelta(seconds=1),
            last_slot=last.strftime("%Y-%m-%dT%H:%M:%SZ"),
            slot_count=7199,
        ),
        None,
        2_000_000_000,
    )

    # When the console renders
    html = render_console(build_view(store, ConsoleQuery("default"), T0), LocalLinks())

    # Then its one cell says it stands for 7,199 slots, from the first to the last, as `punctual
    # runs list` prints it ("FIRST..LAST, N slots"), not one missed slot
    [cell] = parse(html).tables["pc-jobs"].rows[0][7].items
    assert cell["data-status"] == "MISSED" and cell["text"] == "MISS \u00d77199"
    assert cell["title"] == "2026-11-30T08:00:00Z..2026-11-30T09:59:58Z MISSED, 7199 slots"
    assert "7199 slots" in cell["aria-label"]


def test_the_schedule_says_its_time_zone_and_a_next_fire_not_today_its_date() -> None:
    # Given a Berlin job at 02:00 local, a mid-month job, and a UTC job firing later today
    store = MemoryStore()
    store.create_job(job("berlin", "cron(0 2 * * ? *)", timezone="Europe/Berlin"), None, 100)
    store.create_job(job("monthly", "cron(0 2 15 * ? *)"), None, 100)
    store.create_job(job("today", "cron(0 12 * * ? *)"), None, 100)

    # When the console renders at 10:00 UTC on 30 November
    jobs = parse(render_console(build_view(store, ConsoleQuery("default"), T0), LocalLinks())).tables[
        "pc-jobs"
    ]

    # Then the schedule names the zone it is read in (UTC is the default, left unsaid), and the
    # next fire is dated when not today, its distance in hours or days, never "in 21120 min"
    assert jobs.column("Schedule") == [
        "cron(0 2 * * ? *) Europe/Berlin",
        "cron(0 2 15 * ? *)",
        "cron(0 12 * * ? *)",
    ]
    assert jobs.column("Next fire (UTC)") == [
        "2026-12-01 01:00:00 (in 15 h)",
        "2026-12-15 02:00:00 (in 15 d)",
        "12:00:00 (in 2 h)",
    ]


def test_the_recent_failures_say_when_they_are_the_newest_of_more() -> None:
    # Given two jobs that failed 12 times between them in the last hour
    store = MemoryStore()
    for job_id in ("a", "b"):
        store.create_job(job(job_id, now=T0 - timedelta(days=1)), None, 100)
    for minute in range(12):
        slot = T0 - timedelta(minutes=60 - minute)
        store.save_execution(
            Execution(
                job_id="ab"[minute % 2],
                slot=slot.strftime("%Y-%m-%dT%H:%M:%SZ"),
                scheduled_at=slot,
                status=ExecutionStatus.FAILED,
                started_at=slot,
                finished_at=slot + timedelta(seconds=1),
                error=f"HTTP 500 #{minute}",
            ),
            None,
            2_000_000_000,
        )

    # When the console renders
    tables = parse(render_console(build_view(store, ConsoleQuery("default"), T0), LocalLinks())).tables

    # Then the table shows the newest ten and says that there were twelve (the jobs' counts add up
    # to 12, which a table of ten read as all of them contradicted)
    failures = tables["pc-failures"]
    assert failures.caption == "Recent failures (last 24 h, jobs on this page; the newest 10 of 12)"
    assert failures.column("Error") == [f"HTTP 500 #{minute}" for minute in range(11, 1, -1)]
    assert tables["pc-jobs"].column("Failures 24 h") == ["6", "6"]


def test_the_recent_failures_caption_is_plain_when_they_are_all_shown() -> None:
    store = MemoryStore()
    store.create_job(job("a", now=T0 - timedelta(days=1)), None, 100)
    tables = parse(render_console(build_view(store, ConsoleQuery("default"), T0), LocalLinks())).tables
    assert tables["pc-failures"].caption == "Recent failures (last 24 h, jobs on this page)"


def test_the_page_can_stop_reloading_so_a_filter_can_be_typed() -> None:
    """QA24: the page reloaded every few seconds, and each reload wiped what the operator was
    typing into the tenant and tag filters. A link stops the reloading (``refresh=0``), keeping
    the page's other parameters, and another starts it again."""
    store = MemoryStore()
    store.create_job(job("nightly", now=T0), None, max_jobs=10)
    service.use_services(service.ConsoleServices(store, ConsoleSettings(refresh_s=7)))
    try:
        status, live = service.local_page({"tenant": "default", "tag": "team=data"}, T0)
        _, stopped = service.local_page({"tenant": "default", "tag": "team=data", "refresh": "0"}, T0)
    finally:
        service.use_services(None)
    assert status == 200 and '<meta http-equiv="refresh" content="7">' in live
    assert "Reloads every 7 s" in live
    assert ("stop, to type a filter", "/console?tenant=default&tag=team%3Ddata&page=1&refresh=0") in parse(
        live
    ).links
    assert "http-equiv" not in stopped and "Reloading is stopped" in stopped
    assert ("start", "/console?tenant=default&tag=team%3Ddata&page=1") in parse(stopped).links
