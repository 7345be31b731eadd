"""The rate budgets' reservations in memory (the twin of :mod:`punctual.store.dynamo.reservations`)."""

from __future__ import annotations

from datetime import datetime

from punctual.store.memory.base import MemoryBase
from punctual.store.reservations import BudgetReservationRepository


class MemoryBudgetReservations(MemoryBase, BudgetReservationRepository):
    """Per (tenant, key), instant -> owner; the lock makes each reservation a conditional write."""

    def _reservations(self) -> dict[tuple[str, str], dict[datetime, str]]:
        if not hasattr(self, "_budget_instants"):
            self._budget_instants: dict[tuple[str, str], dict[datetime, str]] = {}
        return self._budget_instants

    def reserve_budget_instant(
        self, tenant: str, key: str, instant: datetime, owner: str, expires_at: int
    ) -> bool:
        with self._lock:
            instants = self._reservations().setdefault((tenant, key), {})
            holder = instants.setdefault(instant, owner)
            return holder == owner

    def budget_reservations(
        self, tenant: str, key: str, low: datetime, high: datetime
    ) -> dict[datetime, str]:
        with self._lock:
            instants = self._reservations().get((tenant, key), {})
            return {at: owner for at, owner in instants.items() if low <= at <= high}
