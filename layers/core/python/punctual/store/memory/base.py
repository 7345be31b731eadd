"""The in-memory store's shared state: every aggregate's dicts behind one lock (every operation
is atomic, the way a conditional write is atomic in DynamoDB)."""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from datetime import datetime
from typing import TypeVar

from punctual.backfills import Backfill
from punctual.calendars import Calendar
from punctual.models import Alert, Execution, Job
from punctual.store.base import (
    ExecutionKey,
    JobKey,
    ScheduleGroup,
    Turn,
)
from punctual.store.base import tag_matches as tag_matches  # re-exported: the in-memory twins filter with it
from punctual.store.keyring import TenantKeyRecord
from punctual.store.loads import MinuteLoad
from punctual.timers import Lane, Timer, minute_key

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

    def __init__(self, *, copy_items: bool = True) -> None:
        self._copy_items = copy_items
        self._lock = threading.RLock()
        self._jobs: dict[JobKey, Job] = {}
        self._job_counts: dict[str, int] = {}  # per tenant: the limit check is not a scan
        self._trigger_rates: dict[str, int] = {}  # per tenant: micro-triggers per minute
        self._requests: dict[tuple[str, str], int] = {}  # (tenant, window) -> API requests
        self._buckets: dict[tuple[Lane, str, int], list[tuple[str, Timer]]] = defaultdict(list)
        self._watermarks: dict[tuple[Lane, int], datetime] = {}
        self._progress: dict[tuple[str, int, int], int] = {}
        self._turns: dict[tuple[str, str], Turn] = {}
        self._executions: dict[ExecutionKey, Execution] = {}
        self._parents_ok: dict[ExecutionKey, set[str]] = defaultdict(set)
        self._child_dispatched: set[ExecutionKey] = set()
        self._dependents: dict[JobKey, set[str]] = defaultdict(set)
        self._groups: dict[tuple[str, str], ScheduleGroup] = {}  # (tenant, name) -> schedule group
        self._alert_items: dict[tuple[str, str, str, str], Alert] = {}  # (tenant, job, key slot, condition)
        self._streaks: dict[JobKey, str] = {}  # a failing job's first failed slot
        self._throttles: dict[tuple[str, str, int], tuple[datetime, int]] = {}  # (last sent, held back)
        self._calendars: dict[tuple[str, str], Calendar] = {}
        self._calendar_users: dict[tuple[str, str], set[str]] = {}
        self._backfills: dict[tuple[str, str, str], Backfill] = {}
        self._tenant_keys: dict[tuple[str, int], TenantKeyRecord] = {}  # (tenant, epoch)
        self._minute_loads: dict[str, MinuteLoad] = {}  # minute key -> the load ledger's counters
        self.timer_writes = 0  # counted for tests and benchmarks

    def _put_timer(self, timer: Timer) -> None:
        bucket = self._buckets[(timer.lane, minute_key(timer.due), timer.shard)]
        entry = (timer.sk, timer)
        index = bisect.bisect_left(bucket, entry[0], key=lambda item: item[0])
        self.timer_writes += 1
        if index < len(bucket) and bucket[index][0] == timer.sk:
            return  # immutable row already there: a repeat is a no-op
        bucket.insert(index, entry)

    def _copy(self, item: Item) -> Item:
        return item.model_copy(deep=True) if self._copy_items else item
