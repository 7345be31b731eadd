"""The tenant keyring's port: one wrapped data key per tenant and key epoch.

Webhook signing secrets are sealed with a data key of their tenant (envelope encryption,
:mod:`punctual.security.tenant_keys`); the data key itself is stored only wrapped by KMS. The first
process that needs a tenant's key for an epoch generates it and stores it here with a
conditional put, so every process of the deployment seals that tenant's secrets of that
epoch under the same key (and a worker unwraps it once per process).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class TenantKeyRecord:
    """A tenant's data key for one epoch, as KMS wrapped it (``GenerateDataKey``'s ciphertext)."""

    tenant: str
    epoch: int
    wrapped: bytes
    created_at: datetime


class TenantKeyRepository(ABC):
    @abstractmethod
    def get_tenant_key(self, tenant: str, epoch: int) -> TenantKeyRecord | None:
        """The tenant's key of ``epoch`` (a strongly consistent read), or None."""

    @abstractmethod
    def put_tenant_key(self, record: TenantKeyRecord) -> TenantKeyRecord:
        """Store ``record`` unless the tenant already has a key for its epoch (first writer
        wins); return the key that is stored."""
