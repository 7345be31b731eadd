"""The in-memory store's shared state: every aggregate's dicts behind one lock (every operation
is atomic, the way a conditional write is atomic in DynamoDB)."""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import TypeVar

from punctual.models import Alert, Execution, Job
from punctual.store.base import (
    CalendarNotFoundError,
    CalendarUses,
    ExecutionKey,
    JobKey,
    ScheduleGroup,
    Streak,
    Turn,
)
from punctual.store.keyring import TenantKeyRecord
from punctual.store.listing import (
    tag_matches as tag_matches,  # re-exported: the in-memory twins filter with it
)
from punctual.store.loads import MinuteLoad
from punctual.timing.timers import Lane, Timer, minute_key
from punctual.usecases.backfills import Backfill
from punctual.usecases.calendars import Calendar

Item = TypeVar("Item", Job, Execution)


class MemoryBase:
    """What every aggregate's in-memory implementation shares: dictionaries behind one lock.

    Parameters
    ----------
    copy_items
        Keep and hand out deep copies of jobs and executions, as the DynamoDB store's
        marshalling does, so that a caller's change to an item it holds never reaches the
        store (the default). The CPU benchmark turns it off to measure the core's own work:
        the core never mutates an item it holds.
    """

    def __init__(self, *, copy_items: bool = True, marks_scope: str = "") -> None:
        self._copy_items = copy_items
        # Whose watermarks and progress marks these are (DynamoBase's ``marks_scope``); a copy
        # (copy.copy) in another scope shares everything else, as two Regions share one table.
        self.marks_scope = marks_scope
        self._lock = threading.RLock()
        self._jobs: dict[JobKey, Job] = {}
        self._tombstones: dict[JobKey, int] = {}  # the last version of a job deleted at each id
        self._job_counts: dict[str, int] = {}  # per tenant: the limit check is not a scan
        self._trigger_rates: dict[str, int] = {}  # per tenant: micro-triggers per minute
        self._requests: dict[tuple[str, str], int] = {}  # (tenant, window) -> API requests
        self._buckets: dict[tuple[Lane, str, int], list[tuple[str, Timer]]] = defaultdict(list)
        self._watermarks: dict[tuple[str, Lane, int], datetime] = {}  # (scope, lane, shard)
        # (scope, minute, group, count) -> (through_ms, sent_to_ms): a progress item's two figures
        self._progress: dict[tuple[str, str, int, int], tuple[int | None, int | None]] = {}
        self._turns: dict[tuple[str, str], Turn] = {}
        self._executions: dict[ExecutionKey, Execution] = {}
        self._expires_at: dict[tuple[str, ...], int] = {}  # an execution's or alert's key -> its TTL
        self._parents_ok: dict[ExecutionKey, set[str]] = defaultdict(set)
        self._child_dispatched: set[ExecutionKey] = set()
        self._dependents: dict[JobKey, set[str]] = defaultdict(set)
        self._graphs: dict[str, int] = {}  # tenant -> its dependency graph version
        self._groups: dict[tuple[str, str], ScheduleGroup] = {}  # (tenant, name) -> schedule group
        self._alert_items: dict[tuple[str, str, str, str], Alert] = {}  # (tenant, job, key slot, condition)
        self._streaks: dict[JobKey, Streak] = {}  # a failing job's streak
        # (last sent, held back, an alert sent since the last resolving one)
        self._throttles: dict[tuple[str, str, int], tuple[datetime, int, bool]] = {}
        self._calendars: dict[tuple[str, str], Calendar] = {}
        self._calendar_users: dict[tuple[str, str], set[str]] = {}
        self._backfills: dict[tuple[str, str, str], Backfill] = {}
        self._peaks: dict[str, tuple[str, int]] = {}  # tenant -> (profile document, version)
        self._running_backfills: dict[str, set[str]] = {}
        self._runs_in_flight: dict[tuple[str, int, int], int] = {}  # (scope, window, shard) -> count
        self._hot_in_flight: dict[int, set[str]] = {}  # window -> scopes near their cap
        self._backfill_slots: dict[tuple[str, str], int] = {}  # (tenant, window) -> slots sent
        self._tenant_keys: dict[tuple[str, int], TenantKeyRecord] = {}  # (tenant, epoch)
        self._minute_loads: dict[str, MinuteLoad] = {}  # minute key -> the load ledger's counters
        self.timer_writes = 0  # counted for tests and benchmarks

    def _put_timer(self, timer: Timer) -> None:
        bucket = self._buckets[(timer.lane, minute_key(timer.due), timer.shard)]
        entry = (timer.sk, timer)
        index = bisect.bisect_left(bucket, entry[0], key=lambda item: item[0])
        self.timer_writes += 1
        if index < len(bucket) and bucket[index][0] == timer.sk:
            # The same key again: the newer job version stands, as it does in DynamoDB (a row
            # put replaces the row, and a reader of a timer found in a row and in packs keeps
            # its newest version): a replace whose next slot is unchanged takes the old
            # version's timer's place, and a poller that read the job a moment behind cannot
            # put the old version back.
            if timer.job_version >= bucket[index][1].job_version:
                bucket[index] = entry
            return
        bucket.insert(index, entry)

    def _timer_row(self, lane: Lane, minute: str, shard: int, sk: str) -> Timer | None:
        """The timer row with sort key ``sk`` in one bucket (None: there is none)."""
        bucket = self._buckets.get((lane, minute, shard), [])
        index = bisect.bisect_left(bucket, sk, key=lambda item: item[0])
        return bucket[index][1] if index < len(bucket) and bucket[index][0] == sk else None

    def _link(self, tenant: str, child_id: str, parents: Sequence[str], present: bool) -> None:
        """Record or remove ``child_id`` as a dependent of each parent, as DynamoDB's transaction
        does: the link and the parent's count change together, only when the link changes and
        the parent job exists."""
        for parent in parents:
            job = self._jobs.get((tenant, parent))
            children = self._dependents[(tenant, parent)]
            if job is None or (child_id in children) == present:
                continue
            if present:
                children.add(child_id)
            else:
                children.discard(child_id)
            self._jobs[(tenant, parent)] = job.model_copy(
                update={"dependents": job.dependents + (1 if present else -1)}
            )

    def _check_uses(self, tenant: str, uses: CalendarUses) -> None:
        """A job write's calendar uses: each calendar to add must exist (as the transaction's check)."""
        for name in uses.add:
            if (tenant, name) not in self._calendars:
                raise CalendarNotFoundError(name)

    def _apply_uses(self, tenant: str, job_id: str, uses: CalendarUses) -> None:
        for name in uses.add:
            self._calendar_users.setdefault((tenant, name), set()).add(job_id)
        for name in uses.drop:
            self._calendar_users.get((tenant, name), set()).discard(job_id)

    def _expired(self, key: tuple[str, ...], live_at: int | None) -> bool:
        """Whether the item's TTL passed by ``live_at`` (DynamoDB's: expires before that second)."""
        expires = self._expires_at.get(key)
        return live_at is not None and expires is not None and expires < live_at

    def _copy(self, item: Item) -> Item:
        return item.model_copy(deep=True) if self._copy_items else item
