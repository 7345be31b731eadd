"""The console (CloudWatch widget and local page): what it reads from either store and shows.

Every test that takes ``store`` runs against the in-memory store and against DynamoDB under moto.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from html import escape
from types import SimpleNamespace
from typing import Any

import pytest
from console_html import action_params, has_control, parse

import factories
from factories import load_handler
from punctual.console import service
from punctual.console.render import LocalLinks, WidgetLinks, render_console
from punctual.console.view import ConsoleQuery, ConsoleQueryError, build_view
from punctual.console.widget import ConsoleSettings, merged_params, query_from
from punctual.models import AttemptRecord, Execution, ExecutionStatus
from punctual.store.base import JobStore
from punctual.store.memory import MemoryStore

ARN = "arn:aws:lambda:us-east-1:123456789012:function:punctual-console"
S = ExecutionStatus


def job(job_id: str = "job-1", schedule: str = "rate(1 minute)", **overrides: Any) -> Any:
    """A job created a month before the runs the tests record for it (runs before a job's creation
    are a deleted job's at its id, which the console leaves out, as the API marks them)."""
    overrides.setdefault("now", datetime(2026, 10, 31, 10, 0, tzinfo=UTC))
    return factories.job(job_id, schedule, **overrides)


def slot_key(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def run(
    store: JobStore,
    job_id: str,
    scheduled: datetime,
    status: ExecutionStatus,
    *,
    delay_ms: int = 50,
    error: str | None = None,
    tenant: str = "default",
    attempt: int = 1,
) -> None:
    started = scheduled + timedelta(milliseconds=delay_ms) if status is not S.MISSED else None
    ended = status.terminal and status is not S.MISSED
    store.save_execution(
        Execution(
            job_id=job_id,
            tenant=tenant,
            slot=slot_key(scheduled),
            scheduled_at=scheduled,
            attempt=attempt,
            status=status,
            started_at=started,
            finished_at=scheduled + timedelta(seconds=1) if ended else None,
            error=error,
        ),
        None,
        2_000_000_000,  # the record's TTL: long after the test (the console leaves expired ones out)
    )


def render(store: JobStore, now: datetime, **query: Any) -> str:
    view = build_view(
        store, ConsoleQuery(**{"tenant": "default", **query}), now, history_limit=30, strip_cells=20
    )
    return render_console(view, WidgetLinks(ARN))


# --------------------------------------------------------------------------- what is shown


def test_jobs_table_shows_each_jobs_schedule_state_next_fire_last_status_delay_and_failures(
    store: JobStore, t0: datetime
) -> None:
    # Given a job that succeeds, one that fails, and one that never ran
    store.create_job(
        job("nightly", "cron(0 2 * * ? *)", name="nightly report"),
        None,
        100,
    )
    store.create_job(job("pinger", "rate(1 minute)", name="pinger"), None, 100)
    store.create_job(job("fresh", "rate(5 minutes)", name="fresh"), None, 100)
    for minute in range(5):
        run(store, "nightly", t0 - timedelta(minutes=10 - minute), S.SUCCEEDED, delay_ms=120 + minute)
        run(
            store,
            "pinger",
            t0 - timedelta(minutes=10 - minute),
            S.FAILED if minute % 2 else S.SUCCEEDED,
            delay_ms=2500,
            error="HTTP 503",
        )

    # When the console renders
    tables = parse(render(store, t0)).tables

    # Then each job is a row, in id order, with every column filled from the store
    jobs = tables["pc-jobs"]
    assert jobs.head[:7] == [
        "Job",
        "Schedule",
        "State",
        "Next fire (UTC)",
        "Last status",
        "Fire delay",
        "Failures 24 h",
    ]
    assert jobs.column("Job") == ["fresh fresh", "nightly report nightly", "pinger pinger"]
    assert jobs.column("Schedule") == ["rate(5 minutes)", "cron(0 2 * * ? *)", "rate(1 minute)"]
    assert jobs.column("State") == ["ENABLED", "ENABLED", "ENABLED"]
    # next fire is derived from the schedule at render time, as the API does (never stored)
    assert jobs.column("Next fire (UTC)") == [
        "10:05:00 (in 5 min)",
        "2026-12-01 02:00:00 (in 16 h)",  # tomorrow's: dated (QA24)
        "10:01:00 (in 60 s)",
    ]
    assert jobs.column("Last status") == ["none", "SUCCEEDED", "SUCCEEDED"]
    assert jobs.column("Fire delay") == ["-", "124 ms", "2.5 s"]
    assert jobs.column("Failures 24 h") == ["0", "0", "2"]


def test_run_strip_is_one_labelled_cell_per_slot_oldest_first_and_bounded(
    store: JobStore, t0: datetime
) -> None:
    store.create_job(job("busy", "rate(1 minute)"), None, 100)
    statuses = [S.SUCCEEDED, S.FAILED, S.TIMED_OUT, S.MISSED, S.SKIPPED, S.RETRY_WAIT, S.RUNNING, S.QUEUED]
    for index in range(25):
        run(store, "busy", t0 - timedelta(minutes=25 - index), statuses[index % len(statuses)])

    cell = parse(render(store, t0)).tables["pc-jobs"].rows[0][-1]

    # The newest 20 of the 25 slots, oldest first, each labelled with its status as text
    expected = [statuses[i % len(statuses)] for i in range(5, 25)]
    assert [item["data-status"] for item in cell.items] == [s.value for s in expected]
    assert [item["aria-label"].split(" ", 1)[1] for item in cell.items] == [s.value for s in expected]
    assert all(item["text"] for item in cell.items)  # a label, not only a colour
    assert cell.items[0]["aria-label"].startswith(slot_key(t0 - timedelta(minutes=20))[11:19])
    assert cell.items[-1]["aria-label"].startswith(slot_key(t0 - timedelta(minutes=1))[11:19])
    assert {item["class"] for item in cell.items} == {
        f"run st-{s.value}" for s in statuses
    }  # coloured by status
    html = render(store, t0)
    for status in statuses:  # each status class has its own colours in the page's style sheet
        assert f".pc .st-{status.value}{{background:" in html


def test_recent_failures_show_error_excerpts_newest_first_within_24_hours(
    store: JobStore, t0: datetime
) -> None:
    store.create_job(job("flaky", name="flaky <script>"), None, 100)
    store.create_job(job("slow"), None, 100)
    run(store, "flaky", t0 - timedelta(hours=30), S.FAILED, error="too old to show")
    run(
        store,
        "flaky",
        t0 - timedelta(hours=2),
        S.FAILED,
        error="HTTP 500 from https://hooks.example.com:\n  <b>boom</b>",
    )
    run(store, "slow", t0 - timedelta(hours=1), S.TIMED_OUT, error="x" * 500, attempt=3)
    run(store, "slow", t0 - timedelta(minutes=5), S.SUCCEEDED)

    html = render(store, t0)
    failures = parse(html).tables["pc-failures"]

    assert failures.column("Job") == ["slow", "flaky <script>"]
    assert failures.column("Status") == ["TIMED_OUT", "FAILED"]
    assert failures.column("Attempts") == ["3", "1"]
    errors = failures.column("Error")
    assert errors[1] == "HTTP 500 from https://hooks.example.com: <b>boom</b>"  # folded, shown as text
    assert len(errors[0]) == 200 and errors[0].endswith("…")
    assert not any("too old" in error for error in errors)  # older than 24 h: in the strip only
    assert "<script>" not in html and "<b>boom" not in html  # user text is escaped
    assert parse(html).tables["pc-jobs"].column("Failures 24 h") == ["1", "1"]


def test_failure_count_says_when_it_is_a_floor(store: JobStore, t0: datetime) -> None:
    store.create_job(job("every-second", "rate(1 second)"), None, 100)
    for second in range(40):
        run(store, "every-second", t0 - timedelta(seconds=40 - second), S.FAILED, error="down")

    row = parse(render(store, t0)).tables["pc-jobs"].rows[0]

    # 30 slots read (the history bound), all failed, all inside 24 h: at least 30, not exactly
    assert row[6].text == "30+"
    assert "at least 30" in row[6].attrs["title"]


def test_fire_delay_histogram_counts_the_first_start_of_every_run_read(store: JobStore, t0: datetime) -> None:
    store.create_job(job("a"), None, 100)
    for index, delay in enumerate([10, 90, 150, 400, 700, 1500, 3000, 7000, 12000, 30000]):
        run(store, "a", t0 - timedelta(minutes=20 - index), S.SUCCEEDED, delay_ms=delay)
    run(store, "a", t0 - timedelta(minutes=5), S.MISSED)  # never started: no delay
    # A retried slot counts its first attempt's start, not the retry's
    scheduled = t0 - timedelta(minutes=3)
    store.save_execution(
        Execution(
            job_id="a",
            slot=slot_key(scheduled),
            scheduled_at=scheduled,
            attempt=2,
            status=S.SUCCEEDED,
            started_at=scheduled + timedelta(seconds=30),
            finished_at=scheduled + timedelta(seconds=31),
            attempts=[
                AttemptRecord(attempt=1, status=S.FAILED, started_at=scheduled + timedelta(milliseconds=20))
            ],
        ),
        None,
        2_000_000_000,  # the record's TTL: long after the test (the console leaves expired ones out)
    )

    histogram = parse(render(store, t0)).tables["pc-delays"]

    assert histogram.column("Delay") == [
        "< 100 ms",
        "100-250 ms",
        "250-500 ms",
        "0.5-1 s",
        "1-2 s",
        "2-5 s",
        "5-10 s",
        "≥ 10 s",
    ]
    assert histogram.column("Runs") == ["3", "1", "1", "1", "1", "1", "1", "2"]
    assert histogram.caption.startswith("Fire delay of the 11 runs read")


def test_tenant_and_tag_filter_what_is_shown(store: JobStore, t0: datetime) -> None:
    store.create_job(job("a1", tags={"team": "data"}), None, 100)
    store.create_job(job("a2", tags={"team": "web"}), None, 100)
    store.create_job(job("a3"), None, 100)
    store.create_job(job("b1", tenant="other", tags={"team": "data"}), None, 100)

    def ids(**query: Any) -> list[str]:
        rows = parse(render(store, t0, **query)).tables["pc-jobs"].row_attrs
        return [row["data-job-id"] for row in rows if "data-job-id" in row]

    assert ids() == ["a1", "a2", "a3"]
    assert ids(tag="team") == ["a1", "a2"]
    assert ids(tag="team=data") == ["a1"]
    assert ids(tenant="other") == ["b1"]
    assert ids(tenant="nobody") == []


# --------------------------------------------------------------------------- the widget contract


def test_widget_parameters_come_from_the_widget_then_the_action_then_the_form() -> None:
    settings = ConsoleSettings(tenant="fallback", page_size=25)
    context = {
        "params": {"tenant": "ops", "tag": "team=data"},
        "forms": {"all": {"tenant": "web", "tag": ""}},
    }

    assert query_from(merged_params({"widgetContext": {}}), settings) == ConsoleQuery(
        "fallback", page_size=25
    )
    assert query_from(merged_params({"widgetContext": context}), settings) == ConsoleQuery(
        "ops", "team=data", page_size=25
    )
    next_page = {"widgetContext": context, "tenant": "ops", "tag": "team=data", "cursor": "job-9", "page": 2}
    assert query_from(merged_params(next_page), settings) == ConsoleQuery("ops", "team=data", "job-9", 2, 25)
    applied = {"widgetContext": context, "apply_form": True, "cursor": "job-9", "page": 4}
    assert query_from(merged_params(applied), settings) == ConsoleQuery("web", None, None, 1, 25)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"tenant": "a#b"}, "tenant"),
        ({"tag": "=x"}, "tag"),
        ({"cursor": "../etc"}, "cursor"),
        ({"page_size": "1000"}, "page_size"),
        ({"page": "two"}, "page"),
    ],
)
def test_an_unusable_parameter_is_refused_by_name(params: dict[str, str], message: str) -> None:
    with pytest.raises(ConsoleQueryError, match=message):
        query_from(params, ConsoleSettings())


def test_handler_returns_the_widget_html_with_actions_calling_itself() -> None:
    # Given the console function wired to a store holding a failing job (the handler reads the clock)
    t0 = datetime.now(UTC)
    store = MemoryStore()
    store.create_job(job("broken", name="broken"), None, 100)
    run(store, "broken", t0 - timedelta(minutes=1), S.FAILED, error="connection refused")
    service.use_services(service.ConsoleServices(store, ConsoleSettings(page_size=1)))
    store.create_job(job("second"), None, 100)
    handler = load_handler("console")
    try:
        # When CloudWatch invokes it as a custom widget does
        event = {
            "widgetContext": {"dashboardName": "Punctual", "params": {"tenant": "default"}, "theme": "light"}
        }
        html = handler.handler(
            event,
            SimpleNamespace(
                invoked_function_arn=ARN,
                function_name="console",
                memory_limit_in_mb=256,
                aws_request_id="r-1",
            ),
        )
    finally:
        service.use_services(None)

    # Then it returns HTML (a string) with the job, its status and its error
    assert isinstance(html, str)
    parsed = parse(html)
    assert parsed.tables["pc-jobs"].column("Last status") == ["FAILED"]
    assert parsed.tables["pc-failures"].column("Error") == ["connection refused"]
    # and its controls call this same function again for the next page
    assert all(attrs["endpoint"] == ARN and attrs["action"] == "call" for _, attrs, _ in parsed.actions)
    assert action_params(html, "Next page") == {"tenant": "default", "cursor": "broken", "page": 2}


def test_a_bad_parameter_is_shown_in_the_widget_not_raised() -> None:
    service.use_services(service.ConsoleServices(MemoryStore(), ConsoleSettings()))
    try:
        html = service.widget_html({"widgetContext": {"params": {"tenant": "no spaces allowed"}}}, ARN)
    finally:
        service.use_services(None)
    assert 'role="alert"' in html and "tenant must be" in html


def test_a_bad_filter_is_shown_with_the_filter_form_to_choose_again(t0: datetime) -> None:
    """QA26: a tenant typed with a space (or a bad tag) left only the error: the widget had no
    control at all (only reloading the dashboard brought the jobs back), the local page no form."""
    store = MemoryStore()
    store.create_job(job("nightly"), None, 100)
    service.use_services(service.ConsoleServices(store, ConsoleSettings(tenant="default")))
    try:
        # Given the widget's form applied with a tenant that has a space
        typed = {"widgetContext": {"forms": {"all": {"tenant": "my team", "tag": ""}}}, "apply_form": True}
        refused = service.widget_html(typed, ARN, now=t0)
        # Then the widget says so, and offers its form again, whose Apply calls the function
        assert 'role="alert"' in refused and "tenant must be" in refused
        assert '<input name="tenant"' in refused and action_params(refused, "Apply") == {"apply_form": True}
        # ... which, applied with a usable tenant, shows the jobs again
        again = {"widgetContext": {"forms": {"all": {"tenant": "default", "tag": ""}}}, "apply_form": True}
        assert parse(service.widget_html(again, ARN, now=t0)).tables["pc-jobs"].column("Job")
        # And local mode's page (400) has the GET form to the page
        status, page = service.local_page({"tag": "=x"}, now=t0)
        assert status == 400 and "tag must be key or key=value" in page
        assert '<form method="get" action="/console"' in page and '<input name="tag"' in page
        # And a console configured with an unusable tenant says so, form or not, never raises
        service.use_services(service.ConsoleServices(store, ConsoleSettings(tenant="my team")))
        assert "tenant must be" in service.widget_html({}, ARN, now=t0)
    finally:
        service.use_services(None)


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"widgetContext": {"params": "team=data"}}, "the widget's params must be a JSON object"),
        ({"widgetContext": {"params": ["x"]}}, "the widget's params must be a JSON object"),
        ({"widgetContext": {"forms": "x"}, "apply_form": True}, "the widget's forms must be a JSON object"),
        ({"widgetContext": "x"}, "widgetContext must be a JSON object"),
    ],
)
def test_widget_params_that_are_not_an_object_are_shown_not_raised(
    event: dict[str, Any], message: str
) -> None:
    """QA: a dashboard author's ``"params": "team=data"`` raised (the widget showed a Lambda error)."""
    service.use_services(service.ConsoleServices(MemoryStore(), ConsoleSettings()))
    try:
        html = service.widget_html(event, ARN)
    finally:
        service.use_services(None)
    assert 'role="alert"' in html and escape(message) in html


def test_local_page_reloads_itself_and_links_with_query_strings(t0: datetime) -> None:
    store = MemoryStore()
    for index in range(3):
        store.create_job(job(f"j{index}", tags={"team": "data"}), None, 100)
    service.use_services(service.ConsoleServices(store, ConsoleSettings(page_size=2, refresh_s=7)))
    try:
        status, page = service.local_page({"tenant": "default", "tag": "team"}, now=t0)
        bad_status, bad = service.local_page({"tenant": "a b"}, now=t0)
    finally:
        service.use_services(None)
    assert status == 200 and page.startswith("<!doctype html>")
    assert '<meta http-equiv="refresh" content="7">' in page
    assert ("Next page", "/console?tenant=default&tag=team&cursor=j1&page=2") in parse(page).links
    assert "<cwdb-action" not in page  # local mode has no CloudWatch actions
    assert bad_status == 400 and "tenant must be" in bad


# --------------------------------------------------------------------------- paging


def walk(store: JobStore, first: dict[str, Any], settings: ConsoleSettings) -> list[list[str]]:
    """Follow the widget's *Next page* action from page one to the last; the ids of each page."""
    service.use_services(service.ConsoleServices(store, settings))
    pages: list[list[str]] = []
    event: dict[str, Any] = {"widgetContext": {"params": first}}
    try:
        while True:
            html = service.widget_html(event, ARN)
            rows = parse(html).tables["pc-jobs"].row_attrs
            pages.append([row["data-job-id"] for row in rows if "data-job-id" in row])
            if not has_control(html, "Next page"):
                return pages
            event = {"widgetContext": {"params": first}, **action_params(html, "Next page")}
            assert event["page"] == len(pages) + 1
            assert len(pages) < 2000, "paging does not end"
    finally:
        service.use_services(None)


def test_paging_holds_at_ten_thousand_jobs() -> None:
    # Given 10,000 jobs of one tenant (every 7th tagged) and a few of another tenant
    store = MemoryStore()
    base = job("template")
    ids = [f"job-{index:05d}" for index in range(10_000)]
    for index, job_id in enumerate(ids):
        tags = {"team": "data"} if index % 7 == 0 else {}
        store.create_job(base.model_copy(update={"id": job_id, "tags": tags}), None, 20_000)
    store.create_job(job("job-00000", tenant="other"), None, 10)

    # When the widget is paged through with its own Next page controls
    pages = walk(store, {"tenant": "default"}, ConsoleSettings(page_size=100))
    tagged = walk(store, {"tenant": "default", "tag": "team=data"}, ConsoleSettings(page_size=100))

    # Then every job is shown exactly once, in id order, on full pages but the last
    assert len(pages) == 100 and all(len(page) == 100 for page in pages)
    assert [job_id for page in pages for job_id in page] == ids
    assert [job_id for page in tagged for job_id in page] == ids[::7]
    assert len(tagged) == 15 and len(tagged[-1]) == 1429 - 14 * 100


def test_paging_through_the_dynamodb_store_ends_with_every_job_once(dynamo_client: Any) -> None:
    from punctual.store.dynamo import DynamoStore

    # (the fixture's table: "from conftest import" would find whichever conftest loaded first)
    (table,) = dynamo_client.list_tables()["TableNames"]
    store = DynamoStore(dynamo_client, table)
    base = job("template")
    ids = [f"job-{index:03d}" for index in range(150)]
    for index, job_id in enumerate(ids):
        store.create_job(
            base.model_copy(update={"id": job_id, "tags": {"even": "1"} if index % 2 == 0 else {}}),
            None,
            1000,
        )
    pages = walk(store, {"tenant": "default"}, ConsoleSettings(page_size=60))
    even = walk(store, {"tenant": "default", "tag": "even"}, ConsoleSettings(page_size=25))
    assert [len(page) for page in pages] == [60, 60, 30]
    assert [len(page) for page in even] == [25, 25, 25]  # a full last page offers no empty next one
    assert [job_id for page in pages for job_id in page] == ids
    assert [job_id for page in even for job_id in page] == ids[::2]


def test_local_links_page_the_same_way() -> None:
    store = MemoryStore()
    for index in range(5):
        store.create_job(job(f"j{index}"), None, 100)
    query = ConsoleQuery("default", page_size=2)
    seen: list[str] = []
    while True:
        html = render_console(build_view(store, query, job("x").created_at), LocalLinks())
        seen += [row["data-job-id"] for row in parse(html).tables["pc-jobs"].row_attrs]
        nxt = dict(parse(html).links).get("Next page")
        if nxt is None:
            break
        from urllib.parse import parse_qsl, urlsplit

        params = dict(parse_qsl(urlsplit(nxt).query))
        query = query_from(params, ConsoleSettings(page_size=2))
    assert seen == ["j0", "j1", "j2", "j3", "j4"]


def test_local_mode_serves_the_console_beside_the_api(t0: datetime) -> None:
    from local.console import with_console

    calls: list[str] = []

    def api(event: dict[str, Any], context: Any) -> dict[str, Any]:
        calls.append(event["path"])
        return {"statusCode": 200, "body": "{}"}

    store = MemoryStore()
    store.create_job(job("seen", tenant="demo"), None, 100)
    served = with_console(api)
    service.use_services(service.ConsoleServices(store, ConsoleSettings()))
    try:
        page = served(
            {"path": "/console", "httpMethod": "GET", "queryStringParameters": {"tenant": "demo"}}, None
        )
        posted = served({"path": "/console", "httpMethod": "POST"}, None)
        passed = served({"path": "/v1/jobs", "httpMethod": "GET"}, None)
    finally:
        service.use_services(None)
    assert page["statusCode"] == 200 and page["headers"]["Content-Type"].startswith("text/html")
    assert [row["data-job-id"] for row in parse(page["body"]).tables["pc-jobs"].row_attrs] == ["seen"]
    assert posted["statusCode"] == 405 and posted["headers"]["Allow"] == "GET, HEAD"
    assert passed == {"statusCode": 200, "body": "{}"} and calls == ["/v1/jobs"]


def test_the_empty_page_describes_a_tenant_as_the_principals_unique_id(store: JobStore, t0: datetime) -> None:
    """Issue 31: the tenant is the principal's unique id since issue 16, not its role ARN."""
    text = " ".join(render(store, t0, tenant="nobody").split())

    assert "arn:aws:iam" not in text and "role/NAME" not in text
    assert "unique id" in text and "AROA" in text


def test_local_mode_with_the_demo_opens_the_bare_console_on_the_demo_tenant(tmp_path: Any) -> None:
    """Issue 31: ``make run``'s bare /console showed the empty ``default`` tenant, the demo ran as ``demo``."""
    from local.cli import with_demo_console
    from local.config import LocalConfig
    from local.demo import DEMO_TENANT

    config = LocalConfig(state_dir=tmp_path)
    settings = ConsoleSettings.from_env(with_demo_console(config, demo=True).extra)

    assert settings.tenant == DEMO_TENANT
    assert ConsoleSettings.from_env(with_demo_console(config, demo=False).extra).tenant == "default"
    chosen = LocalConfig(state_dir=tmp_path, extra={"PUNCTUAL_CONSOLE_TENANT": "ops"})
    assert with_demo_console(chosen, demo=True).extra["PUNCTUAL_CONSOLE_TENANT"] == "ops"


def test_no_failure_among_the_runs_read_says_how_many_were_read(t0: datetime) -> None:
    store = MemoryStore()
    store.create_job(job("steady", "rate(1 second)"), None, 100)
    for second in range(40):
        run(store, "steady", t0 - timedelta(seconds=40 - second), S.SUCCEEDED)
    assert parse(render(store, t0)).tables["pc-jobs"].rows[0][6].text == "0 (last 30)"


def test_a_tag_filter_cut_short_by_the_scan_budget_still_offers_the_next_page(
    store: JobStore, t0: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store examines LIST_SCAN_BUDGET jobs a page: a filter few match gets a short page, and the
    console must follow the store's cursor, else the matching jobs after it were never shown."""
    import punctual.store.dynamo.jobs as dynamo_jobs
    import punctual.store.memory.jobs as memory_jobs

    for module in (dynamo_jobs, memory_jobs):
        monkeypatch.setattr(module, "LIST_SCAN_BUDGET", 3)
    for i in range(7):
        store.create_job(job(f"j{i}", tags={"team": "data" if i in (0, 6) else "web"}), None, 100)
    first = build_view(store, ConsoleQuery(tenant="default", tag="team=data"), t0)
    assert [row.job.id for row in first.rows] == ["j0"] and first.next_cursor is not None
    shown, cursor = ["j0"], first.next_cursor
    while cursor is not None:
        page = build_view(store, ConsoleQuery(tenant="default", tag="team=data", cursor=cursor), t0)
        shown += [row.job.id for row in page.rows]
        cursor = page.next_cursor
    assert shown == ["j0", "j6"]


# --------------------------------------------------------------------------- QA: what it showed wrong


def test_next_fire_passes_over_the_days_of_the_calendars_a_job_excludes(
    store: JobStore, t0: datetime
) -> None:
    """QA: the API's next_fire_at passed over an excluded day, the console showed the slot on it."""
    from punctual.usecases.calendars import Calendar

    # Given a calendar holding today (UTC), and a daily job excluding it beside one that does not
    store.put_calendar(
        Calendar(
            name="today",
            tenant="default",
            version=1,
            timezone="UTC",
            dates=["2026-11-30"],
            created_at=t0,
            updated_at=t0,
        ),
        None,
    )
    store.create_job(job("excluding", "cron(0 12 * * ? *)", exclude_calendars=["today"]), None, 100)
    store.create_job(job("plain", "cron(0 12 * * ? *)"), None, 100)

    # When the console renders at 10:00 that day
    jobs = parse(render(store, t0)).tables["pc-jobs"]

    # Then the excluding job's next fire is tomorrow's slot, the other's today's
    assert jobs.column("Next fire (UTC)") == ["2026-12-01 12:00:00 (in 26 h)", "12:00:00 (in 2 h)"]
    assert [row["data-job-id"] for row in jobs.row_attrs] == ["excluding", "plain"]


def test_a_backfilled_run_is_left_out_of_the_fire_delay(store: JobStore, t0: datetime) -> None:
    """QA: a slot backfilled days after its instant showed a fire delay of days (58469 min) and
    filled the histogram's last bucket, as if the scheduler were that late."""
    store.create_job(job("late", "rate(1 minute)", now=t0 - timedelta(days=3)), None, 100)
    run(store, "late", t0 - timedelta(minutes=2), S.SUCCEEDED, delay_ms=80)
    backfilled = t0 - timedelta(days=2)
    store.save_execution(
        Execution(
            job_id="late",
            tenant="default",
            slot=slot_key(backfilled),
            scheduled_at=backfilled,
            attempt=1,
            status=S.SUCCEEDED,
            started_at=t0 - timedelta(minutes=1),
            finished_at=t0 - timedelta(minutes=1),
            backfill="bf-1",
        ),
        None,
        2_000_000_000,  # the record's TTL: long after the test (the console leaves expired ones out)
    )

    view = build_view(store, ConsoleQuery("default"), t0)

    assert view.rows[0].fire_delay_ms == 80  # the newest slot is the backfilled one: passed over
    assert view.delays_counted == 1 and dict(view.histogram)["< 100 ms"] == 1


def test_paging_links_keep_the_page_size_asked_for(t0: datetime) -> None:
    """QA: /console?page_size=3 linked its next page without page_size: it showed 20 jobs,
    numbered from 21."""
    store = MemoryStore()
    for index in range(7):
        store.create_job(job(f"j{index}"), None, 100)
    service.use_services(service.ConsoleServices(store, ConsoleSettings(page_size=20)))
    try:
        _, first = service.local_page({"tenant": "default", "page_size": "3"}, now=t0)
        _, second = service.local_page(
            {"tenant": "default", "page_size": "3", "cursor": "j2", "page": "2"}, now=t0
        )
        _, default = service.local_page({"tenant": "default", "page_size": "20"}, now=t0)
        widget = service.widget_html({"tenant": "default", "page_size": 3}, ARN, now=t0)
    finally:
        service.use_services(None)
    assert ("Next page", "/console?tenant=default&cursor=j2&page=2&page_size=3") in parse(first).links
    assert "jobs 4-6" in second
    assert ("First page", "/console?tenant=default&page=1&page_size=3") in parse(second).links
    assert '<input type="hidden" name="page_size" value="3">' in first  # the filter form keeps it
    assert "page_size" not in default  # the page size it has anyway is not repeated
    assert action_params(widget, "Next page") == {
        "tenant": "default",
        "cursor": "j2",
        "page": 2,
        "page_size": 3,
    }


def test_a_render_on_dynamodb_only_queries_the_table(dynamo_client: Any, t0: datetime) -> None:
    """The console's function may only Query (its role, tests/infra/test_infra_console.py): the
    calendars read for the next fire are Queries too."""
    from punctual.store.dynamo import DynamoStore
    from punctual.usecases.calendars import Calendar

    (table,) = dynamo_client.list_tables()["TableNames"]
    store = DynamoStore(dynamo_client, table)
    store.put_calendar(
        Calendar(
            name="today",
            tenant="default",
            version=1,
            timezone="UTC",
            dates=["2026-11-30"],
            created_at=t0,
            updated_at=t0,
        ),
        None,
    )
    store.create_job(job("excluding", "cron(0 12 * * ? *)", exclude_calendars=["today", "gone"]), None, 100)
    run(store, "excluding", t0 - timedelta(days=1), S.SUCCEEDED)
    calls: list[str] = []
    dynamo_client.meta.events.register("before-call.dynamodb.*", lambda model, **_: calls.append(model.name))

    view = build_view(store, ConsoleQuery("default"), t0)

    assert view.rows[0].next_fire_at == datetime(2026, 12, 1, 12, tzinfo=UTC)
    assert set(calls) == {"Query"} and len(calls) == 4  # jobs, history, two calendars (one missing)


def test_a_long_name_without_spaces_wraps_instead_of_widening_the_page(t0: datetime) -> None:
    """QA: a 128-character name with no space (the longest the API takes) kept its row header on
    one line (white-space: nowrap), so the jobs table, and the page, grew past the window."""
    store = MemoryStore()
    store.create_job(job("long", name="x" * 128), None, 100)
    html = render(store, t0)
    rules = {
        selector.strip(): body
        for block in html.split("<style>", 1)[1].split("</style>", 1)[0].split("}")
        if "{" in block
        for selector in block.split("{", 1)[0].split(",")
        for body in [block.split("{", 1)[1]]
    }
    assert "overflow-wrap:anywhere" in rules[".pc #pc-jobs th[scope=row]"]
    assert "white-space:normal" in rules[".pc #pc-jobs th[scope=row]"]
    assert "overflow-wrap:anywhere" in rules[".pc #pc-failures th[scope=row]"]
    assert "white-space:nowrap" in rules[".pc #pc-jobs th[scope=row] .muted"]  # the id stays whole


def test_a_stored_job_this_version_cannot_read_is_shown_with_its_reason(
    dynamo_client: Any, t0: datetime
) -> None:
    """QA: the API lists such a job (``unreadable: true``, its reason), the console left it out
    silently: the page said "jobs 1-2" of three, and nothing told the operator to fix it."""
    from punctual.store.dynamo import DynamoStore

    (table,) = dynamo_client.list_tables()["TableNames"]
    store = DynamoStore(dynamo_client, table)
    for job_id in ("a", "b", "c"):
        store.create_job(job(job_id, name=f"job {job_id}"), None, 100)
    factories.make_unreadable(dynamo_client, table, "default", "b")

    html = render(store, t0)

    jobs = parse(html).tables["pc-jobs"]
    assert [row["data-job-id"] for row in jobs.row_attrs] == ["a", "c", "b"]
    assert "jobs 1-3" in html
    unreadable = [cell.text for cell in jobs.rows[2]]
    assert unreadable[0] == "b" and unreadable[2] == "ENABLED"
    assert (
        "cannot be read by this version: timeout_seconds" in unreadable[3] and "If-Match 1" in unreadable[3]
    )


def test_a_page_number_without_a_cursor_is_the_first_page() -> None:
    """QA24: ``?page=3`` with no cursor showed the first jobs, labelled "jobs 41-60 · page 3"."""
    assert ConsoleQuery("default", page=3).page == 1
    assert ConsoleQuery("default", cursor="job-9", page=3).page == 3
