"""Jobs in memory."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from punctual.models import Job, JobState
from punctual.store.base import (
    NO_CALENDAR_USES,
    CalendarNotFoundError,
    CalendarUses,
    GraphChangedError,
    GraphRead,
    JobExistsError,
    JobKey,
    JobRepository,
    Page,
    ParentNotFoundError,
    TenantLimitError,
    TriggerRateLimitError,
    VersionConflictError,
)
from punctual.store.dynamo.sizes import check_job_size
from punctual.store.job_groups import GROUP_MAX_ITEMS, JobGroupRepository
from punctual.store.listing import LIST_SCAN_BUDGET
from punctual.store.memory.base import MemoryBase, tag_matches
from punctual.timing.timers import Timer


class MemoryJobs(MemoryBase, JobRepository, JobGroupRepository):
    """Jobs in memory."""

    # ---------------------------------------------------------------- jobs

    def create_job_group(
        self, jobs: Sequence[tuple[Job, Timer | None]], max_jobs: int, max_trigger_rate: int | None = None
    ) -> tuple[str, ...]:
        for job, _ in jobs:
            check_job_size(job)
        items = 1 + sum(3 if timer is not None else 2 for _, timer in jobs)
        if items > GROUP_MAX_ITEMS:  # what DynamoDB refuses (ValidationException), refused here too
            raise ValueError(f"a job group of {items} items, more than {GROUP_MAX_ITEMS}")
        with self._lock:  # all or nothing, as DynamoDB's transaction
            taken = tuple(job.id for job, _ in jobs if (job.tenant, job.id) in self._jobs)
            if taken or not jobs:
                return taken
            tenant = jobs[0][0].tenant
            held = self._job_counts.get(tenant, 0)
            if held + len(jobs) > max_jobs:
                raise TenantLimitError(
                    f"tenant has {held} jobs; {len(jobs)} more would pass {max_jobs}, the most it may have",
                    max_jobs,
                )
            self._add_rate(tenant, sum(job.trigger_rate for job, _ in jobs), max_trigger_rate)
            for job, timer in jobs:
                self._jobs[(tenant, job.id)] = self._copy(job)
                if timer is not None:
                    self._put_timer(timer)
            self._job_counts[tenant] = held + len(jobs)
            return ()

    def create_job(
        self,
        job: Job,
        timer: Timer | None,
        max_jobs: int,
        max_trigger_rate: int | None = None,
        parents: Sequence[str] = (),
        *,
        calendars: CalendarUses = NO_CALENDAR_USES,
    ) -> None:
        check_job_size(job)  # what DynamoDB would refuse, refused here too
        with self._lock:
            key = (job.tenant, job.id)
            if key in self._jobs:
                raise JobExistsError(f"job {job.id!r} already exists")
            if self._job_counts.get(job.tenant, 0) >= max_jobs:
                raise TenantLimitError(f"tenant already has {max_jobs} jobs, the most it may have", max_jobs)
            self._check_parents(job.tenant, parents)
            self._add_rate(job.tenant, job.trigger_rate, max_trigger_rate)
            try:
                self._check_uses(job.tenant, calendars)
            except CalendarNotFoundError:
                self._trigger_rates[job.tenant] -= job.trigger_rate  # one transaction: nothing written
                raise
            self._apply_uses(job.tenant, job.id, calendars)
            self._jobs[key] = self._copy(job)
            self._job_counts[job.tenant] = self._job_counts.get(job.tenant, 0) + 1
            if timer is not None:
                self._put_timer(timer)
            self._link(job.tenant, job.id, parents, present=True)

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
            full, examined = False, 0
            for examined, job_id in enumerate(ids[start:], start=1):
                job = self._jobs[(tenant, job_id)]
                last = job_id
                if (state is None or job.state == state) and tag_matches(job, tag):
                    items.append(self._copy(job))
                full = len(items) == limit or examined >= LIST_SCAN_BUDGET
                if full:
                    break
            more = last is not None and bisect.bisect_right(ids, last) < len(ids)
            return Page(items, last if more and full else None, examined=examined)

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
        parents_added: Sequence[str] = (),
        parents_removed: Sequence[str] = (),
        calendars: CalendarUses = NO_CALENDAR_USES,
        graph: GraphRead | None = None,
    ) -> None:
        check_job_size(job)
        with self._lock:
            current = self._jobs.get((job.tenant, job.id))
            if current is None or current.version != expected_version:
                raise VersionConflictError(
                    f"job {job.id!r} is not at version {expected_version}",
                    current.version if current else None,
                )
            self._check_parents(job.tenant, parents_added)
            if graph is not None:
                self._check_graph(job.tenant, graph)
            delta = 0 if previous_trigger_rate is None else job.trigger_rate - previous_trigger_rate
            if previous_trigger_rate is not None:
                self._add_rate(job.tenant, delta, max_trigger_rate)
            try:
                self._check_uses(job.tenant, calendars)
            except CalendarNotFoundError:
                self._trigger_rates[job.tenant] = self._trigger_rates.get(job.tenant, 0) - delta
                raise
            self._apply_uses(job.tenant, job.id, calendars)
            # ``dependents`` and ``skipped_slots`` are kept by the store, not by the writer.
            kept = {"dependents": current.dependents, "skipped_slots": current.skipped_slots}
            self._jobs[(job.tenant, job.id)] = job.model_copy(deep=self._copy_items, update=kept)
            for timer in timers:
                self._put_timer(timer)
            self._link(job.tenant, job.id, parents_removed, present=False)
            self._link(job.tenant, job.id, parents_added, present=True)
            if graph is not None:
                self._graphs[job.tenant] = graph.version + 1

    def _check_graph(self, tenant: str, graph: GraphRead) -> None:
        """The tenant's graph and the parents a write gains, still as its cycle check read them."""
        if self._graphs.get(tenant, 0) != graph.version:
            raise GraphChangedError(f"tenant {tenant!r}: the job dependencies changed meanwhile")
        for parent, version in graph.parents.items():
            found = self._jobs.get((tenant, parent))
            if found is not None and found.version != version:
                raise GraphChangedError(f"after() parent {parent!r} changed meanwhile")

    def delete_job(
        self,
        tenant: str,
        job_id: str,
        expected_version: int | None = None,
        trigger_rate: int = 0,
        parents: Sequence[str] = (),
        *,
        calendars: CalendarUses = NO_CALENDAR_USES,
        tombstone_until: int | None = None,
        expected_dependents: int | None = None,
    ) -> None:
        with self._lock:
            current = self._jobs.get((tenant, job_id))
            if (
                current is None
                or (expected_version is not None and current.version != expected_version)
                or (expected_dependents is not None and current.dependents != expected_dependents)
            ):
                raise VersionConflictError(
                    f"job {job_id!r} is not at version {expected_version}",
                    current.version if current else None,
                )
            self._apply_uses(tenant, job_id, CalendarUses(drop=calendars.drop))
            del self._jobs[(tenant, job_id)]
            if tombstone_until is not None:
                self._tombstones[(tenant, job_id)] = current.version  # (kept: this store has no TTL)
            self._job_counts[tenant] -= 1
            self._trigger_rates[tenant] = self._trigger_rates.get(tenant, 0) - trigger_rate
            self._link(tenant, job_id, parents, present=False)

    def _check_parents(self, tenant: str, parents: Sequence[str]) -> None:
        """As the transaction's count on each parent: a parent to link that is gone fails it."""
        for parent in parents:
            if (tenant, parent) not in self._jobs:
                raise ParentNotFoundError(parent)

    def first_version(self, tenant: str, job_id: str) -> int:
        with self._lock:
            return self._tombstones.get((tenant, job_id), 0) + 1

    def add_skipped(self, tenant: str, job_id: str, count: int) -> None:
        with self._lock:
            job = self._jobs.get((tenant, job_id))
            if job is not None:
                job.skipped_slots += count
