"""An in-memory JobStore with the same semantics as the DynamoDB one.

Used by logic tests and the CPU benchmark. One lock makes every operation atomic, the
way a conditional write is atomic in DynamoDB.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TypeVar

from punctual.models import Execution, ExecutionStatus, Job, JobState
from punctual.store.base import (
    ExecutionConflictError,
    ExecutionKey,
    Expect,
    JobExistsError,
    JobKey,
    JobStore,
    Page,
    ProgressMark,
    TenantLimitError,
    TriggerRateLimitError,
    Turn,
    VersionConflictError,
)
from punctual.timers import Lane, Timer, minute_key, sort_key

Item = TypeVar("Item", Job, Execution)


def tag_matches(job: Job, tag: str | None) -> bool:
    """``key`` matches any value of that tag; ``key=value`` matches exactly."""
    if tag is None:
        return True
    key, sep, value = tag.partition("=")
    if key not in job.tags:
        return False
    return not sep or job.tags[key] == value


class MemoryStore(JobStore):
    """The JobStore in dictionaries, behind one lock.

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
        self.timer_writes = 0  # counted for tests and benchmarks

    def _copy(self, item: Item) -> Item:
        return item.model_copy(deep=True) if self._copy_items else item

    # ---------------------------------------------------------------- jobs

    def create_job(
        self, job: Job, timer: Timer | None, max_jobs: int, max_trigger_rate: int | None = None
    ) -> None:
        with self._lock:
            key = (job.tenant, job.id)
            if key in self._jobs:
                raise JobExistsError(f"job {job.id!r} already exists")
            if self._job_counts.get(job.tenant, 0) >= max_jobs:
                raise TenantLimitError(f"tenant already has {max_jobs} jobs, the most it may have", max_jobs)
            self._add_rate(job.tenant, job.trigger_rate, max_trigger_rate)
            self._jobs[key] = self._copy(job)
            self._job_counts[job.tenant] = self._job_counts.get(job.tenant, 0) + 1
            if timer is not None:
                self._put_timer(timer)

    def get_job(self, tenant: str, job_id: str, consistent: bool = True) -> Job | None:
        with self._lock:
            job = self._jobs.get((tenant, job_id))
            return self._copy(job) if job else None

    def batch_get_jobs(self, keys: Iterable[JobKey], consistent: bool = True) -> dict[JobKey, Job]:
        with self._lock:
            return {key: self._copy(self._jobs[key]) for key in set(keys) if key in self._jobs}

    def list_jobs(
        self,
        tenant: str,
        limit: int,
        cursor: str | None = None,
        state: JobState | None = None,
        tag: str | None = None,
    ) -> Page[Job]:
        with self._lock:
            ids = sorted(job_id for t, job_id in self._jobs if t == tenant)
            start = bisect.bisect_right(ids, cursor) if cursor else 0
            items: list[Job] = []
            last: str | None = None
            for job_id in ids[start:]:
                job = self._jobs[(tenant, job_id)]
                last = job_id
                if (state is None or job.state == state) and tag_matches(job, tag):
                    items.append(self._copy(job))
                if len(items) == limit:
                    break
            more = last is not None and bisect.bisect_right(ids, last) < len(ids)
            return Page(items, last if more and len(items) == limit else None)

    def _add_rate(self, tenant: str, delta: int, limit: int | None) -> None:
        current = self._trigger_rates.get(tenant, 0)
        if delta > 0 and limit is not None and current + delta > limit:
            raise TriggerRateLimitError(limit, current, delta)
        self._trigger_rates[tenant] = current + delta

    def tenant_trigger_rate(self, tenant: str) -> int:
        with self._lock:
            return self._trigger_rates.get(tenant, 0)

    def count_request(self, tenant: str, window: str, limit: int, ttl_epoch_s: int) -> bool:
        with self._lock:
            key = (tenant, window)
            if self._requests.get(key, 0) >= limit:
                return False
            self._requests[key] = self._requests.get(key, 0) + 1
            return True

    def replace_job(
        self,
        job: Job,
        expected_version: int,
        timers: Sequence[Timer] = (),
        *,
        previous_trigger_rate: int | None = None,
        max_trigger_rate: int | None = None,
    ) -> None:
        with self._lock:
            current = self._jobs.get((job.tenant, job.id))
            if current is None or current.version != expected_version:
                raise VersionConflictError(
                    f"job {job.id!r} is not at version {expected_version}",
                    current.version if current else None,
                )
            if previous_trigger_rate is not None:
                self._add_rate(job.tenant, job.trigger_rate - previous_trigger_rate, max_trigger_rate)
            # ``dependents`` and ``skipped_slots`` are kept by the store, not by the writer.
            kept = {"dependents": current.dependents, "skipped_slots": current.skipped_slots}
            self._jobs[(job.tenant, job.id)] = job.model_copy(deep=self._copy_items, update=kept)
            for timer in timers:
                self._put_timer(timer)

    def delete_job(
        self, tenant: str, job_id: str, expected_version: int | None = None, trigger_rate: int = 0
    ) -> None:
        with self._lock:
            current = self._jobs.get((tenant, job_id))
            if current is None or (expected_version is not None and current.version != expected_version):
                raise VersionConflictError(
                    f"job {job_id!r} is not at version {expected_version}",
                    current.version if current else None,
                )
            del self._jobs[(tenant, job_id)]
            self._job_counts[tenant] -= 1
            self._trigger_rates[tenant] = self._trigger_rates.get(tenant, 0) - trigger_rate

    def add_skipped(self, tenant: str, job_id: str, count: int) -> None:
        with self._lock:
            job = self._jobs.get((tenant, job_id))
            if job is not None:
                job.skipped_slots += count

    # ---------------------------------------------------------------- timers

    def _put_timer(self, timer: Timer) -> None:
        bucket = self._buckets[(timer.lane, minute_key(timer.due), timer.shard)]
        entry = (timer.sk, timer)
        index = bisect.bisect_left(bucket, entry[0], key=lambda item: item[0])
        self.timer_writes += 1
        if index < len(bucket) and bucket[index][0] == timer.sk:
            return  # immutable row already there: a repeat is a no-op
        bucket.insert(index, entry)

    def put_timers(self, timers: Sequence[Timer]) -> None:
        with self._lock:
            for timer in timers:
                self._put_timer(timer)

    def query_timers(
        self,
        lane: Lane,
        minute: datetime,
        shard: int,
        from_ms: int | None = None,
        to_ms: int | None = None,
    ) -> list[Timer]:
        with self._lock:
            bucket = self._buckets.get((lane, minute_key(minute), shard), [])
            low = sort_key(from_ms, "", "", 0)[:13] if from_ms is not None else ""
            start = bisect.bisect_left(bucket, low, key=lambda item: item[0]) if low else 0
            out = []
            for _, timer in bucket[start:]:
                if to_ms is not None and timer.due_ms > to_ms:
                    break
                out.append(timer)
            return out

    def count_timers(self, lane: Lane, minute: datetime, shard: int) -> int:
        with self._lock:
            return len(self._buckets.get((lane, minute_key(minute), shard), []))

    def get_watermarks(self, lane: Lane, shards: Sequence[int]) -> dict[int, datetime]:
        with self._lock:
            return {s: self._watermarks[(lane, s)] for s in shards if (lane, s) in self._watermarks}

    def advance_watermarks(self, lane: Lane, shards: Sequence[int], minute: datetime) -> None:
        with self._lock:
            for shard in shards:
                current = self._watermarks.get((lane, shard))
                if current is None or current < minute:
                    self._watermarks[(lane, shard)] = minute

    def put_progress(self, minute: datetime, group: int, group_count: int, through_ms: int) -> None:
        with self._lock:
            key = (minute_key(minute), group, group_count)
            self._progress[key] = max(self._progress.get(key, through_ms), through_ms)

    def get_progress(self, minute: datetime) -> list[ProgressMark]:
        wanted = minute_key(minute)
        with self._lock:
            return [
                ProgressMark(group, count, through)
                for (key, group, count), through in self._progress.items()
                if key == wanted
            ]

    # ---------------------------------------------------------------- turns

    def take_turn(
        self, tenant: str, job_id: str, slot: str, now: datetime, replacing: str | None = None
    ) -> Turn:
        with self._lock:
            turn = self._turns.get((tenant, job_id), Turn())
            if turn.holder in (None, slot) or (replacing is not None and turn.holder == replacing):
                since = turn.since if turn.holder == slot and replacing is None else now
                turn = Turn(slot, since, tuple(w for w in turn.waiting if w != slot))
                self._turns[(tenant, job_id)] = turn
            return turn

    def wait_for_turn(self, tenant: str, job_id: str, slot: str) -> None:
        with self._lock:
            turn = self._turns.get((tenant, job_id), Turn())
            self._turns[(tenant, job_id)] = Turn(
                turn.holder, turn.since, tuple(sorted({*turn.waiting, slot}))
            )

    def pass_turn(self, tenant: str, job_id: str, slot: str, now: datetime) -> str | None:
        with self._lock:
            turn = self._turns.get((tenant, job_id), Turn())
            if turn.holder != slot:
                return None
            if not turn.waiting:
                self._turns[(tenant, job_id)] = Turn()
                return None
            following, *rest = turn.waiting
            self._turns[(tenant, job_id)] = Turn(following, now, tuple(rest))
            return following

    # ---------------------------------------------------------------- executions

    def save_execution(self, execution: Execution, expect: Expect | None, ttl_epoch_s: int) -> None:
        with self._lock:
            key = (execution.tenant, execution.job_id, execution.slot)
            current = self._executions.get(key)
            if expect is None:
                if current is not None:
                    raise ExecutionConflictError("execution already exists", self._copy(current))
            elif not expect.matches(current):
                raise ExecutionConflictError(
                    "execution is not in the expected state",
                    self._copy(current) if current else None,
                )
            self._executions[key] = self._copy(execution)

    def get_execution(self, tenant: str, job_id: str, slot: str) -> Execution | None:
        with self._lock:
            execution = self._executions.get((tenant, job_id, slot))
            return self._copy(execution) if execution else None

    def batch_get_executions(self, keys: Iterable[ExecutionKey]) -> dict[ExecutionKey, Execution]:
        with self._lock:
            return {key: self._copy(self._executions[key]) for key in set(keys) if key in self._executions}

    def list_executions(
        self,
        tenant: str,
        job_id: str,
        limit: int,
        cursor: str | None = None,
        status: ExecutionStatus | None = None,
        newest_first: bool = True,
    ) -> Page[Execution]:
        with self._lock:
            slots = sorted(
                (s for t, j, s in self._executions if t == tenant and j == job_id), reverse=newest_first
            )
            if cursor is not None:
                slots = [s for s in slots if (s < cursor if newest_first else s > cursor)]
            items: list[Execution] = []
            last: str | None = None
            for slot in slots:
                execution = self._executions[(tenant, job_id, slot)]
                last = slot
                if status is None or execution.status == status:
                    items.append(self._copy(execution))
                if len(items) == limit:
                    break
            more = last is not None and last != slots[-1]
            return Page(items, last if more and len(items) == limit else None)

    # ---------------------------------------------------------------- dependencies

    def record_parent_success(
        self, tenant: str, child_id: str, slot: str, parent_id: str, ttl_epoch_s: int
    ) -> frozenset[str]:
        with self._lock:
            parents = self._parents_ok[(tenant, child_id, slot)]
            parents.add(parent_id)
            return frozenset(parents)

    def claim_child_dispatch(self, tenant: str, child_id: str, slot: str) -> bool:
        with self._lock:
            key = (tenant, child_id, slot)
            if key in self._child_dispatched:
                return False
            self._child_dispatched.add(key)
            return True

    def set_dependents(self, tenant: str, child_id: str, parents: Sequence[str], present: bool) -> None:
        with self._lock:
            for parent in parents:
                children = self._dependents[(tenant, parent)]
                had = child_id in children
                if present:
                    children.add(child_id)
                else:
                    children.discard(child_id)
                job = self._jobs.get((tenant, parent))
                if job is not None and had != present:
                    job.dependents += 1 if present else -1

    def list_dependents(self, tenant: str, parent_id: str) -> list[str]:
        with self._lock:
            return sorted(self._dependents.get((tenant, parent_id), set()))
