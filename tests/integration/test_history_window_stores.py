"""A job's history between two instants reads the same pages from either store (QA32 review).

:func:`punctual.api.history.window_page` reads the key range through ``JobStore.list_executions``;
the API's tests run it over DynamoDB only. Here both stores, every page size, with and without a
status: a store whose last full page says more follows (DynamoDB) and one that knows it read to
the end (in memory) give the same records, each once, the range reaching into the window last,
and, for a window from since with no status, no page after the one that read it to its end."""

from __future__ import annotations

from datetime import datetime

import pytest

from punctual.api.history import Window, window_page
from punctual.models import Execution, ExecutionStatus
from punctual.store.base import JobStore

SLOTS = {  # slot: status; a run-now slot in 00:00:05's second, one in the second before since
    "2026-11-30T00:00:01Z": ExecutionStatus.SUCCEEDED,
    "2026-11-30T00:00:03Z": ExecutionStatus.FAILED,
    "2026-11-30T00:00:03Z~m0123456789ab": ExecutionStatus.SUCCEEDED,
    "2026-11-30T00:00:04Z": ExecutionStatus.SUCCEEDED,
    "2026-11-30T00:00:05Z": ExecutionStatus.FAILED,
    "2026-11-30T00:00:05Z~m0123456789ab": ExecutionStatus.FAILED,
    "2026-11-30T00:00:07Z": ExecutionStatus.SUCCEEDED,
}
RANGE = ("2026-11-30T00:00:00Z", "2026-11-30T00:00:04Z")  # MISSED, its own slots those not above
WINDOWS = [
    Window(None, None),
    Window("2026-11-30T00:00:04Z", None),  # a record at since, the range reaching it
    Window("2026-11-30T00:00:04Z", "2026-11-30T00:00:07Z"),
    Window("2026-11-30T00:00:02Z", "2026-11-30T00:00:05Z"),  # until: its run-now slot left out
    Window("2026-11-30T00:00:05Z", None),  # past the range
    Window(None, "2026-11-30T00:00:01Z"),
]


def _follow(store: JobStore, window: Window, status: ExecutionStatus | None, limit: int) -> list[str]:
    slots: list[str] = []
    cursor = None
    for _ in range(50):
        page = window_page(store, "t", "j", limit, cursor, status, window, 0)
        # (a window from since, unfiltered, knows where it ends: the page before said it was the last)
        ended = window.since is None or status is not None
        assert page.items or cursor is None or ended, f"an empty page after {slots}"
        slots += [record.slot for record in page.items]
        if page.cursor is None:
            return slots
        cursor = page.cursor
    raise AssertionError(f"pages without end: {slots}")


def _expected(window: Window, status: ExecutionStatus | None) -> list[str]:
    every = {**SLOTS, RANGE[0]: ExecutionStatus.MISSED}
    low, high = window.since or "", window.until or "~"
    inside = [s for s, st in sorted(every.items(), reverse=True) if low <= s < high and status in (None, st)]
    reaching = window.since is not None and RANGE[0] < low <= RANGE[1]
    return inside + ([RANGE[0]] if reaching and status in (None, ExecutionStatus.MISSED) else [])


@pytest.mark.parametrize("status", [None, ExecutionStatus.MISSED, ExecutionStatus.FAILED])
def test_both_stores_page_a_window_alike(store: JobStore, status: ExecutionStatus | None) -> None:
    for slot, state in [*SLOTS.items(), (RANGE[0], ExecutionStatus.MISSED)]:
        at = datetime.fromisoformat(slot.split("~")[0])
        last = RANGE[1] if slot == RANGE[0] else None
        record = Execution(
            job_id="j", tenant="t", slot=slot, scheduled_at=at, status=state, finished_at=at, last_slot=last,
            slot_count=5 if last else 1,
        )  # fmt: skip
        store.save_execution(record, None, ttl_epoch_s=2_000_000_000)

    for window in WINDOWS:
        expected = _expected(window, status)
        for limit in range(1, 9):
            assert _follow(store, window, status, limit) == expected, (window, limit)
