"""The console as HTML: one fragment for the CloudWatch widget and for local mode's page.

No script (CloudWatch custom widgets run none): real tables with captions and header cells,
every status written as text as well as coloured, a run strip of one labelled cell per slot,
and a fire-delay histogram as a table with bars. Everything that came from a user (names,
tags, errors) is escaped.

Navigation differs between the two places, so it is a :class:`Links` object: local mode uses
links and a GET form (:class:`LocalLinks`); the widget uses ``<cwdb-action>`` elements that
call the widget's own function again with the next page's parameters (:class:`WidgetLinks`).
"""

from __future__ import annotations

import json
from datetime import datetime
from html import escape
from typing import Protocol
from urllib.parse import urlencode

from punctual.console.view import DEFAULT_PAGE_SIZE, ConsoleQuery, ConsoleView, FailureRow, JobRow
from punctual.models import ExecutionStatus
from punctual.store.base import UnreadableJob

# Short label, background, text colour: every pair has a contrast of at least 4.5:1.
STATUS_STYLE: dict[ExecutionStatus, tuple[str, str, str]] = {
    ExecutionStatus.SUCCEEDED: ("OK", "#1d7a05", "#ffffff"),
    ExecutionStatus.FAILED: ("FAIL", "#c42d10", "#ffffff"),
    ExecutionStatus.TIMED_OUT: ("TIME", "#8a1a0c", "#ffffff"),
    ExecutionStatus.RUNNING: ("RUN", "#0b64c0", "#ffffff"),
    ExecutionStatus.RETRY_WAIT: ("RETRY", "#f5c542", "#000000"),
    ExecutionStatus.QUEUED: ("QUEUE", "#5f6b7a", "#ffffff"),
    ExecutionStatus.SKIPPED: ("SKIP", "#d5dbdb", "#000000"),
    ExecutionStatus.MISSED: ("MISS", "#ff9900", "#000000"),
    ExecutionStatus.EXCLUDED: ("EXCL", "#d5dbdb", "#000000"),
    ExecutionStatus.SUPERSEDED: ("SUPER", "#d5dbdb", "#000000"),
}

_CSS = """
.pc{font-family:Amazon Ember,Helvetica Neue,Roboto,Arial,sans-serif;font-size:13px;color:inherit}
.pc table{border-collapse:collapse;margin:4px 0 12px 0}
.pc caption{text-align:left;font-weight:bold;padding:4px 0}
.pc th,.pc td{border-bottom:1px solid #d5dbdb;padding:3px 8px;text-align:left;vertical-align:top}
.pc td.num{text-align:right;font-variant-numeric:tabular-nums}
.pc .st{display:inline-block;padding:0 6px;border-radius:3px;font-weight:bold}
.pc ol.strip{list-style:none;margin:0;padding:0;display:flex;gap:2px;flex-wrap:wrap}
.pc ol.strip li{min-width:34px;text-align:center;font-size:10px;font-weight:bold;border-radius:2px;
padding:1px 2px}
.pc .bar{display:inline-block;height:10px;background:#0b64c0;vertical-align:middle}
.pc .muted{color:#5f6b7a}
.pc form{display:inline-block;margin:0 8px 0 0}
.pc nav{margin:4px 0}
.pc .err{font-family:monospace;white-space:pre-wrap;word-break:break-word}
.pc th[scope=row],.pc time,.pc td.num{white-space:nowrap}
.pc #pc-jobs th[scope=row],.pc #pc-failures th[scope=row]{white-space:normal;overflow-wrap:anywhere;
min-width:12em}
.pc #pc-jobs th[scope=row] .muted{white-space:nowrap;overflow-wrap:normal}
.pc td code{white-space:normal}
.pc code{overflow-wrap:anywhere}
.pc h2{font-size:15px;margin:0 0 4px 0}
.pc .scroll{overflow-x:auto;max-width:100%}
.pc #pc-jobs ol.strip{min-width:190px}
.pc td.err{min-width:16em}
.pc #pc-jobs ol.strip:focus-visible{flex-direction:column;outline:2px solid #0b64c0;outline-offset:2px}
.pc #pc-jobs ol.strip:focus-visible li{text-align:left;overflow-wrap:anywhere}
.pc #pc-jobs ol.strip:focus-visible li::after{content:" " attr(title);font-weight:normal}
"""


_CSS += "".join(
    f".pc .st-{status.value}{{background:{background};color:{colour}}}"
    for status, (_, background, colour) in STATUS_STYLE.items()
)


class Links(Protocol):
    """How the page moves: to another page of jobs, or with another tenant or tag."""

    def to_page(self, query: ConsoleQuery, label: str) -> str:
        """A control that shows ``query``'s page."""
        ...

    def filter_form(self, query: ConsoleQuery) -> str:
        """A form to choose the tenant and the tag filter."""
        ...


def _page_params(query: ConsoleQuery, page_size: int) -> dict[str, object]:
    """A page's parameters; ``page_size`` only when it is not the one the page gets without it (QA:
    it was dropped, so the next page of ``page_size=3`` had 20 jobs, numbered from 21)."""
    params: dict[str, object] = {"tenant": query.tenant, "tag": query.tag, "cursor": query.cursor}
    params["page"] = query.page
    if query.page_size != page_size:
        params["page_size"] = query.page_size
    return params


class LocalLinks:
    """Plain links and a GET form to ``path`` (local mode's ``/console``); ``page_size`` is the
    page size a query without one gets; ``stopped``: the page does not reload, and neither does the
    page its links and form lead to (QA28: they dropped ``refresh=0``, so paging or *Apply* started
    the reloading again, which wipes what is typed into the form)."""

    def __init__(
        self, path: str = "/console", page_size: int = DEFAULT_PAGE_SIZE, stopped: bool = False
    ) -> None:
        self.path = path
        self.page_size = page_size
        self.stopped = stopped

    def href(self, query: ConsoleQuery) -> str:
        params = _page_params(query, self.page_size)
        if self.stopped:
            params["refresh"] = 0
        return self.path + "?" + urlencode({k: v for k, v in params.items() if v not in (None, "")})

    def to_page(self, query: ConsoleQuery, label: str) -> str:
        return f'<a href="{escape(self.href(query))}">{escape(label)}</a>'

    def filter_form(self, query: ConsoleQuery) -> str:
        return (
            f'<form method="get" action="{escape(self.path)}" aria-label="Filter">'
            f'<label>Tenant <input name="tenant" value="{escape(query.tenant)}" size="16"></label> '
            f'<label>Tag <input name="tag" value="{escape(query.tag or "")}" size="16"'
            ' placeholder="key or key=value"></label> '
            f'{self._kept_page_size(query)}<button type="submit">Apply</button></form>'
        )

    def _kept_page_size(self, query: ConsoleQuery) -> str:
        kept = '<input type="hidden" name="refresh" value="0">' if self.stopped else ""
        if query.page_size == self.page_size:
            return kept
        return kept + f'<input type="hidden" name="page_size" value="{query.page_size}">'


class WidgetLinks:
    """``<cwdb-action>`` controls that call the widget's function (``endpoint``) again; ``page_size``
    is the page size an invocation without one gets."""

    def __init__(self, endpoint: str, page_size: int = DEFAULT_PAGE_SIZE) -> None:
        self.endpoint = endpoint
        self.page_size = page_size

    def _action(self, params: dict[str, object]) -> str:
        body = escape(json.dumps(params, separators=(",", ":")), quote=False)
        endpoint = escape(self.endpoint)
        return f'<cwdb-action action="call" display="widget" endpoint="{endpoint}">{body}</cwdb-action>'

    def to_page(self, query: ConsoleQuery, label: str) -> str:
        params = _page_params(query, self.page_size)
        return f'<a class="btn">{escape(label)}</a>' + self._action(
            {k: v for k, v in params.items() if v is not None}
        )

    def filter_form(self, query: ConsoleQuery) -> str:
        return (
            '<form aria-label="Filter">'
            f'<label>Tenant <input name="tenant" value="{escape(query.tenant)}" size="16"></label> '
            f'<label>Tag <input name="tag" value="{escape(query.tag or "")}" size="16"></label></form>'
            '<a class="btn btn-primary">Apply</a>' + self._action({"apply_form": True})
        )


# --------------------------------------------------------------------------- formatting


def _hms(instant: datetime) -> str:
    return instant.strftime("%H:%M:%S")


def _time(instant: datetime, today: datetime | None = None) -> str:
    """``instant`` as its UTC time of day; with its date too when it is not on ``today``'s."""
    iso = instant.isoformat().replace("+00:00", "Z")
    shown = (
        _hms(instant) if today is None or instant.date() == today.date() else f"{instant:%Y-%m-%d %H:%M:%S}"
    )
    return f'<time datetime="{iso}" title="{iso}">{shown}</time>'


def _relative(seconds: float) -> str:
    """``in 45 s``, ``in 12 min``, ``in 16 h``, ``in 9 d``; ``due 3 s ago``."""
    if seconds < 0:
        return f"due {-seconds:.0f} s ago"
    for unit, size, below in (("s", 1, 120), ("min", 60, 7_200), ("h", 3_600, 172_800)):
        if seconds < below:
            return f"in {seconds / size:.0f} {unit}"
    return f"in {seconds / 86_400:.0f} d"


def duration(ms: float | None) -> str:
    """``60 ms``, ``1.2 s``, ``3 min``; ``-`` for none."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.0f} min"


def status_badge(status: ExecutionStatus) -> str:
    """The status as text, coloured (the colour is never the only signal)."""
    return f'<span class="st st-{status.value}">{status.value}</span>'


def _strip(row: JobRow) -> str:
    if not row.runs:
        return '<span class="muted">no runs yet</span>'
    cells = []
    for cell in row.runs:
        label = STATUS_STYLE[cell.status][0]
        title = f"{cell.slot} {cell.status.value}, attempt {cell.attempt}"
        spoken = f"{_hms(cell.scheduled_at)} {cell.status.value}"
        if cell.slot_count > 1:  # a MISSED range record: say how many slots (QA24: read as one)
            label += f" \u00d7{cell.slot_count}"
            title = f"{cell.slot}..{cell.last_slot} {cell.status.value}, {cell.slot_count} slots"
            spoken += f", {cell.slot_count} slots to {cell.last_slot}"
        if cell.fire_delay_ms is not None:
            title += f", fire delay {duration(cell.fire_delay_ms)}"
        if cell.error:
            title += f": {cell.error}"
        cells.append(
            f'<li class="run st-{cell.status.value}"'
            f' title="{escape(title)}" aria-label="{escape(spoken)}"'
            f' data-status="{cell.status.value}">{label}</li>'
        )
    name = escape(row.job.name or row.job.id)
    label = f"Last {len(row.runs)} runs of {name}, oldest first"
    # one tab stop a strip: focused from the keyboard, it lists each cell's tooltip (QA26: the
    # slot, delay and error of a run were shown to a mouse only)
    return f'<ol class="strip" tabindex="0" aria-label="{label}">{"".join(cells)}</ol>'


def _next_fire(row: JobRow, now: datetime) -> str:
    when = row.next_fire_at
    if when is None:
        return '<span class="muted">-</span>'
    # dated when not today, in hours or days when far (QA24: tomorrow's slot read as today's,
    # a monthly job's as "in 21120 min")
    relative = _relative((when - now).total_seconds())
    return f'{_time(when, today=now)} <span class="muted">({relative})</span>'


def _zone(timezone: str) -> str:
    """The time zone a schedule is read in, unless UTC (QA24: a Berlin job's cron(0 2 * * ? *)
    firing at 01:00 UTC read as wrong, its zone shown nowhere)."""
    return "" if timezone == "UTC" else f'<br><span class="muted">{escape(timezone)}</span>'


def _job_row(row: JobRow, now: datetime) -> str:
    job = row.job
    failures = str(row.failures_24h)
    if row.failures_capped:  # a floor: the runs read did not reach back 24 h
        failures += "+" if row.failures_24h else f" (last {row.runs_read})"
    failures_title = (
        f"at least {row.failures_24h}: counted over the newest {row.runs_read} runs, all inside the last 24 h"
        if row.failures_capped
        else "slots that ended FAILED or TIMED_OUT in the last 24 h"
    )
    last = status_badge(row.last.status) if row.last else '<span class="muted">none</span>'
    return (
        f'<tr data-job-id="{escape(job.id)}">'
        f'<th scope="row">{escape(job.name or job.id)}<br><span class="muted">{escape(job.id)}</span></th>'
        f"<td><code>{escape(job.schedule)}</code>{_zone(job.timezone)}</td>"
        f"<td>{escape(job.state.value)}</td>"
        f"<td>{_next_fire(row, now)}</td>"
        f'<td class="last-status">{last}</td>'
        f'<td class="num">{duration(row.fire_delay_ms)}</td>'
        f'<td class="num" title="{escape(failures_title)}">{failures}</td>'
        f"<td>{_strip(row)}</td></tr>"
    )


def _unreadable_row(found: UnreadableJob, columns: int) -> str:
    """A stored job this version cannot read: its id, state and why (fix it with PUT or DELETE)."""
    return (
        f'<tr data-job-id="{escape(found.id)}" class="unreadable">'
        f'<th scope="row">{escape(found.id)}</th><td class="muted">-</td><td>{escape(found.state)}</td>'
        f'<td colspan="{columns - 3}" class="err">cannot be read by this version: {escape(found.reason)}'
        f" (replace it with PUT, If-Match {found.version}, or delete it)</td></tr>"
    )


def _table(table_id: str, caption: str, columns: tuple[str, ...], rows: list[str], empty: str) -> str:
    """A table with a caption and column headers; ``empty`` (text) when there are no rows."""
    head = "".join(f'<th scope="col">{escape(name)}</th>' for name in columns)
    body = "".join(rows) or f'<tr><td colspan="{len(columns)}" class="muted">{escape(empty)}</td></tr>'
    # in a box of its own that scrolls sideways in a window narrower than the table (a phone's),
    # so the page around it keeps the window's width
    return (
        f'<div class="scroll"><table id="{table_id}"><caption>{escape(caption)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def _jobs_table(view: ConsoleView) -> str:
    columns = (
        "Job",
        "Schedule",
        "State",
        "Next fire (UTC)",
        "Last status",
        "Fire delay",
        "Failures 24 h",
        f"Runs, oldest → newest (last {view.strip_cells})",
    )
    empty = (
        "No jobs for this tenant and tag. A tenant is the unique id of the IAM principal that"
        " registered the jobs: a role's id (AROA..., aws iam get-role --query Role.RoleId), a user's"
        " (AIDA...) or the account id for the root; in local mode the X-Punctual-Tenant header."
        " Enter it above."
    )
    rows = [_job_row(row, view.now) for row in view.rows]
    rows += [_unreadable_row(found, len(columns)) for found in view.unreadable]
    return _table("pc-jobs", "Jobs", columns, rows, empty)


def _failure_row(failure: FailureRow, now: datetime) -> str:
    # dated when not today, as the next fire is (QA26: one that ended at 23:50 yesterday read as
    # later today at 00:10)
    ended = _time(failure.ended_at, today=now) if failure.ended_at else "-"
    return (
        f'<tr data-job-id="{escape(failure.job_id)}">'
        f'<th scope="row">{escape(failure.job_name)}</th>'
        f"<td>{escape(failure.slot)}</td><td>{status_badge(failure.status)}</td>"
        f'<td class="num">{failure.attempt}</td><td>{ended}</td>'
        f'<td class="err">{escape(failure.error)}</td></tr>'
    )


def _failures_table(view: ConsoleView) -> str:
    shown = len(view.failures)
    cut = f"; the newest {shown} of {view.failures_found}" if view.failures_found > shown else ""
    return _table(
        "pc-failures",
        f"Recent failures (last 24 h, jobs on this page{cut})",
        ("Job", "Slot", "Status", "Attempts", "Ended (UTC)", "Error"),
        [_failure_row(failure, view.now) for failure in view.failures],
        "No failures in the last 24 h among these jobs.",
    )


def _histogram(view: ConsoleView) -> str:
    most = max((count for _, count in view.histogram), default=0) or 1
    rows = "".join(
        f'<tr><th scope="row">{escape(label)}</th><td class="num">{count}</td>'
        f'<td><span class="bar" style="width:{round(160 * count / most)}px"></span></td></tr>'
        for label, count in view.histogram
    )
    return (
        '<table class="histogram" id="pc-delays">'
        f"<caption>Fire delay of the {view.delays_counted} runs read (each job's newest"
        f" {view.history_limit}; release instant → first start)</caption>"
        '<thead><tr><th scope="col">Delay</th><th scope="col">Runs</th><th scope="col">'
        '<span class="muted">share</span></th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )


def _legend() -> str:
    items = "".join(
        f'<li class="run st-{status.value}">{label}</li>'
        f'<li class="muted" style="margin-right:8px">{status.value}</li>'
        for status, (label, _, _) in STATUS_STYLE.items()
    )
    return f'<ol class="strip" aria-label="Run strip legend" style="flex-wrap:wrap">{items}</ol>'


def render_console(view: ConsoleView, links: Links) -> str:
    """The console as an HTML fragment (what a custom widget returns)."""
    query = view.query
    where = f"tenant <code>{escape(query.tenant)}</code>"
    if query.tag:
        where += f", tag <code>{escape(query.tag)}</code>"
    count = len(view.rows) + len(view.unreadable)
    first = count and (query.page - 1) * query.page_size + 1
    shown = f"jobs {first}-{first + count - 1}" if count else "no jobs"
    nav = [shown, f"page {query.page}"]
    if query.cursor is not None:
        nav.append(
            links.to_page(ConsoleQuery(query.tenant, query.tag, None, 1, query.page_size), "First page")
        )
    if view.next_cursor is not None:
        following = ConsoleQuery(query.tenant, query.tag, view.next_cursor, query.page + 1, query.page_size)
        nav.append(links.to_page(following, "Next page"))
    return (
        f'<div class="pc"><style>{_CSS}</style>'
        f"<h2>Punctual jobs · {where}</h2>"
        f"<div>updated {_time(view.now)} UTC · {links.filter_form(query)}</div>"
        f'<nav aria-label="Pages">{" · ".join(nav)}</nav>'
        f"{_jobs_table(view)}{_legend()}{_failures_table(view)}{_histogram(view)}</div>"
    )


def render_error(message: str, form: str = "") -> str:
    """A fragment that says what is wrong with the widget's parameters; ``form``: the filter form to
    choose them again (QA26: a tenant typed with a space left the widget with the error and no
    control, so only reloading the dashboard brought the jobs back)."""
    alert = f'<div role="alert"><p><strong>Punctual console:</strong> {escape(message)}</p></div>'
    return f'<div class="pc">{alert}{form}</div>'


# The headers the whole page (local mode) is served with: it runs no script, loads nothing, and
# submits its one form to itself, so the policy allows only its inline styles and the blank icon;
# an escaping slip can then run nothing, and no other site can frame it (QA24: served with none).
DOCUMENT_HEADERS: dict[str, str] = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self';"
        " frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


def render_document(
    fragment: str,
    refresh_s: int | None = None,
    title: str = "Punctual console",
    toggle: tuple[str, str] | None = None,
) -> str:
    """A whole HTML page around ``fragment`` (local mode), reloading every ``refresh_s`` seconds;
    ``toggle``: the link (its label, its URL) that stops the reloading, or starts it again."""
    refresh = f'<meta http-equiv="refresh" content="{int(refresh_s)}">' if refresh_s else ""
    line = ""
    if toggle is not None:
        state = f"Reloads every {int(refresh_s)} s" if refresh_s else "Reloading is stopped"
        label, url = toggle
        line = f'<p class="muted">{state} · <a href="{escape(url)}">{escape(label)}</a></p>'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'{refresh}<meta name="viewport" content="width=device-width">'
        f'<link rel="icon" href="data:,"><title>{escape(title)}</title></head>'
        f"<body>{line}{fragment}</body></html>"
    )
