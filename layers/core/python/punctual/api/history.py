"""A job's history between two instants (``GET /v1/jobs/{id}/executions?since=&until=``).

The window is of slots: a record is in it when its slot's instant (a run-now slot's second) is at
or after ``since`` and before ``until``, as Temporal's ``StartTime >= ... AND StartTime < ...``.
Records are kept by slot key, newest first, so the window costs no filter: its page starts
below ``until``'s key and ends at ``since``'s. A MISSED range record (a long run of dropped
slots, kept under its first) that begins before ``since`` and reaches into the window is listed
after the window's own records, with the page that reaches ``since``: its slots are the window's.
QA32: the history could only be read from its newest record down, a page at a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from punctual.api import problems
from punctual.execution.records import covering_range
from punctual.models import Execution, ExecutionStatus
from punctual.store.base import JobStore, Page
from punctual.timing.instants import InstantError, parse_rfc3339

SINCE = (
    "Only slots at or after this instant (RFC 3339, any offset; without one, UTC), and a MISSED range"
    " record that begins before it and reaches it."
)
UNTIL = "Only slots before this instant (RFC 3339, any offset; without one, UTC); after since."


@dataclass(frozen=True)
class Window:
    """The slot keys of a window: from ``since`` (included) to ``until`` (left out); None: open."""

    since: str | None = None
    until: str | None = None

    def scope(self) -> dict[str, str | None]:
        """What a page token of this window is bound to."""
        return {"since": self.since, "until": self.until}


# An offset's '+' left unencoded in a query string, which the query's decoding made a space
# (2026-11-30T04:00:00 01:00): after a time of day, a space can be nothing else
_UNENCODED_PLUS = re.compile(r"(\d{2}:\d{2}:\d{2}(?:\.\d+)?) (\d{2}:\d{2})\s*\Z")


def _key_from(field: str, text: str | None) -> tuple[datetime, str] | None:
    """The first whole second at or after the instant ``text`` and its key, as a slot's sorts
    (None: not given). Its year is always four digits: a slot key's text of a year before 1000 is
    not padded ('999-...', :func:`slot_key`), which sorts after every slot (review: since=0999-01-01
    listed nothing, until=0999-01-01 everything)."""
    if text is None:
        return None
    try:
        instant = parse_rfc3339(_UNENCODED_PLUS.sub(r"\1+\2", text))
    except InstantError as exc:
        raise problems.invalid(f"query.{field}", f"{field}: {exc}") from None
    try:  # (a fraction of a second after 9999-12-31T23:59:59 has no next second)
        second = instant
        if instant.microsecond:
            second = instant.replace(microsecond=0) + timedelta(seconds=1)  # (exact: no float)
        return second, second.isoformat().replace("+00:00", "Z")  # (in UTC, a whole second)
    except (ValueError, OverflowError):
        raise problems.invalid(f"query.{field}", f"{field}: {text[:40]!r} is out of range") from None


def window_of(since: str | None, until: str | None) -> Window:
    """The window asked for; 422 naming the field for an instant that is none, or an ``until``
    not after ``since``."""
    low, high = _key_from("since", since), _key_from("until", until)
    if low is not None and high is not None and high[0] <= low[0]:
        raise problems.invalid(
            "query.until", f"until ({until}) must be after since ({since}): the window holds no slot"
        )
    return Window(low[1] if low else None, high[1] if high else None)


def window_page(
    store: JobStore,
    tenant: str,
    job_id: str,
    limit: int,
    cursor: str | None,
    status: ExecutionStatus | None,
    window: Window,
    live_at: int,
) -> Page[Execution]:
    """A page of the job's records in ``window``, newest slot first, from ``cursor`` (the page
    before's) or from ``until``."""
    start = cursor if cursor is not None else window.until
    page = store.list_executions(tenant, job_id, limit, start, status, live_at=live_at)
    since = window.since
    if since is None:
        return page
    items = [record for record in page.items if record.slot >= since]
    # (no key below since's own is in the window: a page whose cursor is since's read it to its end)
    reached = len(items) < len(page.items) or page.cursor is None or page.cursor <= since
    if not reached:
        return Page(items, page.cursor)
    if status not in (None, ExecutionStatus.MISSED):
        return Page(items, None)
    missed = covering_range(store, tenant, job_id, since, live_at)
    if missed is None:
        return Page(items, None)
    if len(items) == limit:
        return Page(items, since)  # the range on a page of its own (its cursor: since, read below it)
    return Page([*items, missed], None)
