"""What the chain auditor reads, in memory: a segment's jobs and running backfills, a job's turn."""

from __future__ import annotations

from punctual.models import Job
from punctual.store.base import AuditRepository, Page, Turn
from punctual.store.memory.base import MemoryBase
from punctual.timing.timers import Lane, TimerLayout
from punctual.usecases.backfills import Backfill, BackfillState


class MemoryAudit(MemoryBase, AuditRepository):
    """The audit index in memory: every job and running backfill, by segment (its far shard)."""

    def audit_page(
        self, segment: int, segments: int, limit: int, cursor: str | None = None
    ) -> Page[Job | Backfill]:
        layout = TimerLayout(shard_count=segments, near_shard_count=1)

        def mine(tenant: str, job_id: str) -> bool:
            return layout.shard_for(Lane.FAR, tenant, job_id) == segment

        with self._lock:
            entries: list[tuple[str, Job | Backfill]] = [
                (f"{tenant}\x1f{job_id}\x1f", self._copy(job))
                for (tenant, job_id), job in self._jobs.items()
                if mine(tenant, job_id)
            ]
            entries += [
                (f"{tenant}\x1f{job_id}\x1f{bid}", backfill.model_copy(deep=True))
                for (tenant, job_id, bid), backfill in self._backfills.items()
                if backfill.state is BackfillState.RUNNING and mine(tenant, job_id)
            ]
        entries.sort(key=lambda entry: entry[0])
        if cursor is not None:
            entries = [entry for entry in entries if entry[0] > cursor]
        page = entries[: max(1, limit)]
        more = len(entries) > len(page)
        return Page([item for _, item in page], page[-1][0] if more else None)

    def get_turn(self, tenant: str, job_id: str) -> Turn | None:
        with self._lock:
            return self._turns.get((tenant, job_id))
