"""The tenant keyring in memory (:class:`punctual.store.keyring.TenantKeyRepository`)."""

from __future__ import annotations

from punctual.store.keyring import TenantKeyRecord, TenantKeyRepository
from punctual.store.memory.base import MemoryBase


class MemoryKeyring(MemoryBase, TenantKeyRepository):
    """Tenant data keys in a dictionary: the first put of a (tenant, epoch) stays."""

    def get_tenant_key(self, tenant: str, epoch: int) -> TenantKeyRecord | None:
        with self._lock:
            return self._tenant_keys.get((tenant, epoch))

    def put_tenant_key(self, record: TenantKeyRecord) -> TenantKeyRecord:
        with self._lock:
            return self._tenant_keys.setdefault((record.tenant, record.epoch), record)
