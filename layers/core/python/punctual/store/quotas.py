"""The tenant burst quotas' port (issue 31): a tenant's peak profile, its running backfills, and
the backfilled slots it sent per minute (:mod:`punctual.security.tenant_quotas` keeps them)."""

from __future__ import annotations

from abc import ABC, abstractmethod


class TenantQuotaRepository(ABC):
    """A tenant's burst quotas (issue 31): its peak profile, its running backfills, and the
    backfilled slots it sent per minute."""

    @abstractmethod
    def get_peaks(self, tenant: str) -> tuple[str | None, int]:
        """The tenant's peak profile document (:mod:`punctual.security.peaks`) and its version (0: none)."""

    @abstractmethod
    def put_peaks(self, tenant: str, doc: str, expected_version: int) -> bool:
        """Write the profile if it is still at ``expected_version`` (0: none yet); False if not."""

    @abstractmethod
    def join_backfills(self, tenant: str, member: str, limit: int) -> bool:
        """Count ``member`` among the tenant's running backfills unless ``limit`` already run
        (a member already counted is accepted again: a repeated request)."""

    @abstractmethod
    def leave_backfills(self, tenant: str, member: str) -> None:
        """``member`` runs no more (idempotent)."""

    @abstractmethod
    def running_backfills(self, tenant: str) -> list[str]:
        """The members counted as running."""

    @abstractmethod
    def take_backfill_slots(self, tenant: str, window: str, want: int, limit: int, ttl_epoch_s: int) -> int:
        """Take up to ``want`` of the ``limit`` backfilled slots the tenant may send in ``window``
        (one conditional write, a second when fewer are left); returns how many were taken."""
