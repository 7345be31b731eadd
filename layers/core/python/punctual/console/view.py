"""What the console shows, read from the store: a page of jobs and each job's recent runs.

Reads are bounded whatever the tenant's size: one ``list_jobs`` page (``page_size`` jobs, in id
order, filtered by tag), per job on it one ``list_executions`` query of its newest
``history_limit`` slots, and one read per calendar those jobs exclude (at most 10 a job), so
that the next fire passes over their days as the API's does. Everything else (last status, fire
delay, failures in the last 24 h, recent failures, the fire-delay histogram) is computed from
those records, so a render costs the same at ten jobs or ten million. Where the bound hides
something it says so: a job whose newest ``history_limit`` slots all fall inside the last 24 h
shows its failure count as a floor (``capped``).

The caller passes ``now`` (time is an argument); nothing here writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache, partial

from punctual.models import Execution, ExecutionStatus, Job, JobState
from punctual.store.base import JobStore, UnreadableJob
from punctual.store.listing import tag_filter_refusal
from punctual.timing.slots import dispatch_instant, schedule_of
from punctual.usecases.calendars import Calendar
from punctual.usecases.next_fire import next_release, owes_now

FAILURE_WINDOW = timedelta(hours=24)
FAILED_STATUSES = frozenset({ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT})
DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
DEFAULT_HISTORY_LIMIT = 30  # slots read per job: the run strip and the 24 h failure count
DEFAULT_STRIP_CELLS = 20
RECENT_FAILURES_SHOWN = 10
ERROR_EXCERPT_CHARS = 200

# Upper bounds (ms, exclusive) of the fire-delay histogram's buckets; the last is open.
DELAY_BUCKETS_MS: tuple[tuple[str, float], ...] = (
    ("< 100 ms", 100),
    ("100-250 ms", 250),
    ("250-500 ms", 500),
    ("0.5-1 s", 1_000),
    ("1-2 s", 2_000),
    ("2-5 s", 5_000),
    ("5-10 s", 10_000),
    ("≥ 10 s", float("inf")),
)

_TENANT_RE = re.compile(r"^[A-Za-z0-9._:/@+=,\-]{1,256}\Z")  # as the API accepts a tenant
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")
_MAX_TAG_CHARS = 128 + 1 + 256


class ConsoleQueryError(ValueError):
    """A console parameter is not usable (named in the message)."""


@dataclass(frozen=True)
class ConsoleQuery:
    """Which page of whose jobs to show.

    ``cursor`` is the id of the last job of the previous page (None: the first page); ``page``
    only numbers the page for the reader, so without a cursor it is 1 (QA24: ``?page=3`` alone
    showed the first jobs numbered 41-60).
    """

    tenant: str
    tag: str | None = None
    cursor: str | None = None
    page: int = 1
    page_size: int = DEFAULT_PAGE_SIZE

    def __post_init__(self) -> None:
        if not _TENANT_RE.match(self.tenant):
            raise ConsoleQueryError("tenant must be 1-256 characters of letters, digits and ._:/@+=,-")
        if self.tag is not None and (not 0 < len(self.tag) <= _MAX_TAG_CHARS or self.tag.startswith("=")):
            raise ConsoleQueryError("tag must be key or key=value")
        if self.tag is not None and (refusal := tag_filter_refusal(self.tag)) is not None:
            raise ConsoleQueryError(f"tag {refusal}")  # no job's tag can match (QA: a NUL echoed)
        if self.cursor is not None and not _JOB_ID_RE.match(self.cursor):
            raise ConsoleQueryError("cursor must be a job id")
        if not 1 <= self.page_size <= MAX_PAGE_SIZE:
            raise ConsoleQueryError(f"page_size must be 1-{MAX_PAGE_SIZE}")
        if self.page < 1:
            raise ConsoleQueryError("page must be at least 1")
        if self.cursor is None:
            object.__setattr__(self, "page", 1)  # the first page, whatever it was called


@dataclass(frozen=True)
class RunCell:
    """One slot of a job's run strip."""

    slot: str
    status: ExecutionStatus
    scheduled_at: datetime
    attempt: int
    fire_delay_ms: float | None
    error: str | None
    # A MISSED range record: the last of the consecutive slots it stands for, and how many
    last_slot: str | None = None
    slot_count: int = 1


@dataclass(frozen=True)
class JobRow:
    """One job and what its newest slots say."""

    job: Job
    next_fire_at: datetime | None
    runs: tuple[RunCell, ...]  # oldest first, at most the strip's length
    last: RunCell | None
    failures_24h: int
    failures_capped: bool  # every slot read was inside the window: the count is a floor
    runs_read: int = 0

    @property
    def fire_delay_ms(self) -> float | None:
        """The newest slot that started: from its instant to its first attempt's start."""
        return next(
            (cell.fire_delay_ms for cell in reversed(self.runs) if cell.fire_delay_ms is not None), None
        )


@dataclass(frozen=True)
class FailureRow:
    """A slot that ended FAILED or TIMED_OUT, with what its last attempt said."""

    job_id: str
    job_name: str
    slot: str
    status: ExecutionStatus
    attempt: int
    ended_at: datetime | None
    error: str


@dataclass(frozen=True)
class ConsoleView:
    """Everything one render shows."""

    query: ConsoleQuery
    now: datetime
    rows: tuple[JobRow, ...]
    failures: tuple[FailureRow, ...]
    histogram: tuple[tuple[str, int], ...]
    delays_counted: int
    next_cursor: str | None
    history_limit: int
    strip_cells: int
    # Stored jobs of the page this version cannot read: shown with their reason, never dropped
    # silently (QA: they were left out, and the page said "jobs 1-2" of three)
    unreadable: tuple[UnreadableJob, ...] = ()
    # How many failures the runs read hold: ``failures`` shows the newest RECENT_FAILURES_SHOWN
    # (QA24: the table stopped at 10 and did not say so)
    failures_found: int = 0


def next_fire(
    job: Job, now: datetime, calendars: dict[str, Calendar] | None = None, store: JobStore | None = None
) -> datetime | None:
    """When the job's next slot is released (as the API derives it: never stored on each fire),
    passing over the days of the calendars it excludes (``calendars``, by name; one missing is
    left out, as the API does). With ``store``: ``now`` while a resume still owes a slot no worker
    has claimed, as the API says (QA21: the console showed the next regular slot).

    None for a job that is not enabled, and for ``after(...)`` and ``delay(...)`` jobs, whose next
    slot depends on other runs ending.
    """
    if job.state is not JobState.ENABLED or schedule_of(job).kind in ("after", "delay"):
        return None
    found = calendars or {}
    excluding = [found[name] for name in job.exclude_calendars if name in found]
    if store is not None and owes_now(store, job, now, excluding):
        return now
    return next_release(job, now, excluding)  # a jittered slot still pending first, as the API shows it


def excluded_calendars(store: JobStore, tenant: str, jobs: list[Job]) -> dict[str, Calendar]:
    """The calendars ``jobs`` exclude, by name: one read (a Query of its key) per distinct name."""
    names = sorted({name for job in jobs for name in job.exclude_calendars})
    found = {name: store.get_calendar(tenant, name, consistent=False) for name in names}
    return {name: calendar for name, calendar in found.items() if calendar is not None}


def fire_delay_ms(execution: Execution, job: Job | None = None) -> float | None:
    """From the slot's release instant (its instant plus the job's jitter) to its first attempt's
    start; None when it never started, and for a backfilled slot (late by design: run long after
    its instant, it says nothing of the scheduler's delay; ``StartDelayMs`` leaves it out too)."""
    if execution.backfill is not None:
        return None
    first_start = execution.attempts[0].started_at if execution.attempts else execution.started_at
    if first_start is None:
        return None
    released = dispatch_instant(job, execution.scheduled_at) if job is not None else execution.scheduled_at
    return max(0.0, (first_start - released).total_seconds() * 1000)


def error_excerpt(execution: Execution, limit: int = ERROR_EXCERPT_CHARS) -> str:
    """The slot's error (else its last attempt's), whitespace folded, cut to ``limit`` characters."""
    text = execution.error or next((a.error for a in reversed(execution.attempts) if a.error), None) or ""
    folded = " ".join(text.split())
    return folded if len(folded) <= limit else folded[: limit - 1] + "…"


def cell_error(execution: Execution) -> str | None:
    """A run cell's error: the slot's own, or one only an earlier attempt's record holds, named as
    that attempt's (QA28: a slot that succeeded at its third attempt, or runs its second, read
    "SUCCEEDED, attempt 3: HTTP 503", as if the success had failed)."""
    if execution.error:
        return error_excerpt(execution)
    earlier = next((a for a in reversed(execution.attempts) if a.error), None)
    return (
        None
        if earlier is None
        else f"attempt {earlier.attempt} {earlier.status.value}: {error_excerpt(execution)}"
    )


def _cell(execution: Execution, job: Job) -> RunCell:
    return RunCell(
        slot=execution.slot,
        status=execution.status,
        scheduled_at=execution.scheduled_at,
        attempt=execution.attempt,
        fire_delay_ms=fire_delay_ms(execution, job),
        error=cell_error(execution),
        last_slot=execution.last_slot,
        slot_count=execution.slot_count,
    )


def delay_histogram(delays_ms: list[float]) -> tuple[tuple[str, int], ...]:
    """Counts per bucket of :data:`DELAY_BUCKETS_MS`, every bucket present."""
    counts = dict.fromkeys((label for label, _ in DELAY_BUCKETS_MS), 0)
    for delay in delays_ms:
        label = next(label for label, upper in DELAY_BUCKETS_MS if delay < upper)
        counts[label] += 1
    return tuple(counts.items())


def build_view(
    store: JobStore,
    query: ConsoleQuery,
    now: datetime,
    *,
    history_limit: int = DEFAULT_HISTORY_LIMIT,
    strip_cells: int = DEFAULT_STRIP_CELLS,
) -> ConsoleView:
    """Read one page of ``query.tenant``'s jobs and their newest slots.

    Parameters
    ----------
    store
        Read only: ``list_jobs`` once (one job more than the page, to know whether another
        follows), ``list_executions`` once per job on the page, ``get_calendar`` once per
        calendar the page's jobs exclude (for their next fire).
    query
        Tenant, tag filter and page.
    now
        The instant the 24 h failure window ends at.
    history_limit
        Slots read per job (the bound of every per-job figure).
    strip_cells
        Slots shown per job in the run strip (at most ``history_limit``).
    """
    # One job more than the page shows: a next page is offered only when a job follows (a store's
    # own cursor may also follow a page that happened to end the listing).
    # A job this version cannot read counts as one of the page's jobs, in id order (QA21: one in the
    # look-ahead place made a page of 3 show 4 and offer a next page that was empty).
    listed = store.list_jobs(query.tenant, limit=query.page_size + 1, cursor=query.cursor, tag=query.tag)
    entries: list[Job | UnreadableJob] = sorted(
        [*listed.items, *listed.unreadable], key=lambda entry: entry.id
    )
    page = entries[: query.page_size]
    shown = [entry for entry in page if isinstance(entry, Job)]
    unreadable = tuple(entry for entry in page if isinstance(entry, UnreadableJob))
    next_cursor = page[-1].id if len(entries) > query.page_size else None
    if next_cursor is None:
        next_cursor = (
            listed.cursor
        )  # a tag filter's page cut short (LIST_SCAN_BUDGET jobs read): more may follow
    since = now - FAILURE_WINDOW
    calendars = excluded_calendars(store, query.tenant, shown)
    rows: list[JobRow] = []
    failures: list[tuple[Job, Execution]] = []
    delays: list[float] = []
    for job in shown:
        history = store.list_executions(
            query.tenant, job.id, limit=history_limit, newest_first=True, live_at=int(now.timestamp())
        )
        # Not a deleted job's at this id (the API marks them job_deleted: QA21, a job created again
        # showed its predecessor's failures as its own); recent by when they ended (a backfill's
        # failure of a slot days old is recent: QA21, it was left out of the last 24 h)
        first = cache(partial(store.first_version, job.tenant, job.id))  # (read only when asked)
        executions = [
            e for e in history.items if not e.shown_as_an_earlier_jobs(job.created_at, job.spec_since, first)
        ]
        recent = [e for e in executions if (e.finished_at or e.scheduled_at) >= since]
        failed = [e for e in recent if e.status in FAILED_STATUSES]
        failures.extend((job, e) for e in failed)
        for execution in executions:
            delay = fire_delay_ms(execution, job)
            if delay is not None:
                delays.append(delay)
        cells = tuple(_cell(e, job) for e in reversed(executions[:strip_cells]))
        rows.append(
            JobRow(
                job=job,
                next_fire_at=next_fire(job, now, calendars, store),
                runs=cells,
                last=cells[-1] if cells else None,
                failures_24h=len(failed),
                failures_capped=history.cursor is not None and len(recent) == len(executions),
                runs_read=len(executions),
            )
        )
    failures.sort(key=lambda pair: (pair[1].finished_at or pair[1].scheduled_at, pair[1].slot), reverse=True)
    return ConsoleView(
        query=query,
        now=now,
        rows=tuple(rows),
        failures=tuple(
            FailureRow(
                job_id=job.id,
                job_name=job.name or job.id,
                slot=e.slot,
                status=e.status,
                attempt=e.attempt,
                ended_at=e.finished_at,
                error=error_excerpt(e) or "(no error recorded)",
            )
            for job, e in failures[:RECENT_FAILURES_SHOWN]
        ),
        histogram=delay_histogram(delays),
        delays_counted=len(delays),
        next_cursor=next_cursor,
        history_limit=history_limit,
        strip_cells=strip_cells,
        unreadable=unreadable,
        failures_found=len(failures),
    )
