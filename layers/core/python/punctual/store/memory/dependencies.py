"""Dependencies in memory."""

from __future__ import annotations

from collections.abc import Sequence

from punctual.store.base import (
    DependencyRepository,
)
from punctual.store.memory.base import MemoryBase


class MemoryDependencies(MemoryBase, DependencyRepository):
    """Dependencies in memory."""

    # ---------------------------------------------------------------- dependencies

    def record_parent_success(
        self, tenant: str, child_id: str, slot: str, parent_id: str, ttl_epoch_s: int
    ) -> frozenset[str]:
        with self._lock:
            parents = self._parents_ok[(tenant, child_id, slot)]
            parents.add(parent_id)
            return frozenset(parents)

    def dependency_graph(self, tenant: str) -> int:
        with self._lock:
            return self._graphs.get(tenant, 0)

    def claim_child_dispatch(self, tenant: str, child_id: str, slot: str) -> bool:
        with self._lock:
            key = (tenant, child_id, slot)
            if key in self._child_dispatched:
                return False
            self._child_dispatched.add(key)
            return True

    def waiting_child_slots(self, tenant: str, child_id: str, limit: int) -> list[tuple[str, frozenset[str]]]:
        with self._lock:
            slots = sorted((k[2] for k in self._parents_ok if k[:2] == (tenant, child_id)), reverse=True)
            return [
                (slot, frozenset(self._parents_ok[(tenant, child_id, slot)]))
                for slot in slots[:limit]
                if (tenant, child_id, slot) not in self._child_dispatched
            ]

    def set_dependents(self, tenant: str, child_id: str, parents: Sequence[str], present: bool) -> None:
        with self._lock:
            self._link(tenant, child_id, parents, present)

    def list_dependents(self, tenant: str, parent_id: str) -> list[str]:
        with self._lock:
            return sorted(self._dependents.get((tenant, parent_id), set()))
