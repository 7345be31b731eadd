"""The tenant keyring in DynamoDB: one item per tenant and key epoch (``tkey#<tenant>``)."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

from punctual.store.dynamo import schema
from punctual.store.dynamo.base import DynamoBase
from punctual.store.dynamo.keys import _s
from punctual.store.keyring import TenantKeyRecord, TenantKeyRepository
from punctual.timing.instants import format_instant


class DynamoKeyring(DynamoBase, TenantKeyRepository):
    """Tenant data keys, wrapped by KMS, written once (a conditional put) and read strongly."""

    def get_tenant_key(self, tenant: str, epoch: int) -> TenantKeyRecord | None:
        item = self.client.get_item(
            TableName=self.table, Key=schema.tenant_key_key(tenant, epoch), ConsistentRead=True
        ).get("Item")
        return None if item is None else self._record(tenant, epoch, item)

    def put_tenant_key(self, record: TenantKeyRecord) -> TenantKeyRecord:
        item = {
            **schema.tenant_key_key(record.tenant, record.epoch),
            "wrapped": _s(base64.b64encode(record.wrapped).decode("ascii")),
            "created_at": _s(format_instant(record.created_at)),
        }
        if self._write_if("put_item", Item=item, **schema.CREATE.fields()):
            return record
        stored = self.get_tenant_key(record.tenant, record.epoch)
        if stored is None:  # cannot be: the put found an item there
            raise RuntimeError(f"tenant key {record.tenant!r}/{record.epoch} vanished after a conflict")
        return stored

    @staticmethod
    def _record(tenant: str, epoch: int, item: dict[str, Any]) -> TenantKeyRecord:
        return TenantKeyRecord(
            tenant=tenant,
            epoch=epoch,
            wrapped=base64.b64decode(item["wrapped"]["S"]),
            created_at=datetime.fromisoformat(item["created_at"]["S"].replace("Z", "+00:00")),
        )
