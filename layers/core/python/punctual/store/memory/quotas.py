"""A tenant's burst quotas in memory (the twin of :mod:`punctual.store.dynamo.quotas`)."""

from __future__ import annotations

from punctual.store.memory.base import MemoryBase
from punctual.store.quotas import TenantQuotaRepository


class MemoryTenantQuotas(MemoryBase, TenantQuotaRepository):
    """See :class:`~punctual.store.quotas.TenantQuotaRepository`."""

    def _quota_state(
        self,
    ) -> tuple[dict[str, tuple[str, int]], dict[str, set[str]], dict[tuple[str, str], int]]:
        if not hasattr(self, "_peaks"):
            self._peaks: dict[str, tuple[str, int]] = {}
            self._running_backfills: dict[str, set[str]] = {}
            self._backfill_slots: dict[tuple[str, str], int] = {}
        return self._peaks, self._running_backfills, self._backfill_slots

    def get_peaks(self, tenant: str) -> tuple[str | None, int]:
        with self._lock:
            found = self._peaks.get(tenant)
            return (found[0], found[1]) if found else (None, 0)

    def put_peaks(self, tenant: str, doc: str, expected_version: int) -> bool:
        with self._lock:
            peaks = self._peaks
            current = peaks.get(tenant, ("", 0))[1]
            if current != expected_version:
                return False
            peaks[tenant] = (doc, expected_version + 1)
            return True

    def join_backfills(self, tenant: str, member: str, limit: int) -> bool:
        with self._lock:
            running = self._running_backfills.setdefault(tenant, set())
            if member not in running and len(running) >= limit:
                return False
            running.add(member)
            return True

    def leave_backfills(self, tenant: str, member: str) -> None:
        with self._lock:
            self._running_backfills.get(tenant, set()).discard(member)

    def running_backfills(self, tenant: str) -> list[str]:
        with self._lock:
            return sorted(self._running_backfills.get(tenant, set()))

    def take_backfill_slots(self, tenant: str, window: str, want: int, limit: int, ttl_epoch_s: int) -> int:
        with self._lock:
            slots = self._backfill_slots
            used = slots.get((tenant, window), 0)
            taken = max(0, min(want, limit - used))
            slots[(tenant, window)] = used + taken
            return taken
