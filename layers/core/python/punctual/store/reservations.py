"""The rate budgets' reservations port: which slot owns each instant of a budget's grid.

Every poller of the deployment places a budgeted slot by reserving an instant of its budget's grid
(:mod:`punctual.dispatch.budget_reservations`): one item per (tenant, target key, instant), owned by one
slot. The pollers coordinate only through these conditional writes, so two slots never share an
instant whichever poller placed them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime


class BudgetReservationRepository(ABC):
    @abstractmethod
    def reserve_budget_instant(
        self, tenant: str, key: str, instant: datetime, owner: str, expires_at: int
    ) -> bool:
        """Take ``instant`` of the budget of (``tenant``, ``key``) for ``owner`` (a slot): a
        conditional write that succeeds when the instant is free or already ``owner``'s (a repeat
        is harmless) and returns False when another owner holds it. The item expires at
        ``expires_at`` (epoch seconds)."""

    @abstractmethod
    def budget_reservations(
        self, tenant: str, key: str, low: datetime, high: datetime
    ) -> dict[datetime, str]:
        """The reserved instants of (``tenant``, ``key``) from ``low`` to ``high`` (both included)
        and their owners: a strongly consistent read (a placement must see every reservation
        made before it)."""
