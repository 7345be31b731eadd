"""A tenant's burst quotas in DynamoDB: its peak profile, running backfills, backfilled slots a minute."""

from __future__ import annotations

from punctual.store.dynamo import schema
from punctual.store.dynamo.base import DynamoBase
from punctual.store.quotas import TenantQuotaRepository


class DynamoTenantQuotas(DynamoBase, TenantQuotaRepository):
    """See :class:`~punctual.store.quotas.TenantQuotaRepository`; keys and expressions in :mod:`.schema`."""

    def get_peaks(self, tenant: str) -> tuple[str | None, int]:
        item = self.client.get_item(
            TableName=self.table, Key=schema.peaks_key(tenant), ConsistentRead=True
        ).get("Item")
        if not item:
            return None, 0
        return item["doc"]["S"], int(item["version"]["N"])

    def put_peaks(self, tenant: str, doc: str, expected_version: int) -> bool:
        return self._write_if(
            "update_item", Key=schema.peaks_key(tenant), **schema.put_peaks(doc, expected_version).fields()
        )

    def join_backfills(self, tenant: str, member: str, limit: int) -> bool:
        return self._write_if(
            "update_item",
            Key=schema.running_backfills_key(tenant),
            **schema.join_backfills(member, limit).fields(),
        )

    def leave_backfills(self, tenant: str, member: str) -> None:
        self.client.update_item(
            TableName=self.table,
            Key=schema.running_backfills_key(tenant),
            **schema.leave_backfills(member).fields(),
        )

    def running_backfills(self, tenant: str) -> list[str]:
        item = self.client.get_item(
            TableName=self.table, Key=schema.running_backfills_key(tenant), ConsistentRead=True
        ).get("Item")
        return sorted((item or {}).get("running", {}).get("SS", []))

    def take_backfill_slots(self, tenant: str, window: str, want: int, limit: int, ttl_epoch_s: int) -> int:
        key = schema.backfill_slots_key(tenant, window)
        if want <= 0 or limit <= 0:
            return 0
        if self._write_if(
            "update_item", Key=key, **schema.take_slots(min(want, limit), limit, ttl_epoch_s).fields()
        ):
            return min(want, limit)
        item = self.client.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item") or {}
        left = limit - int(item.get("n", {}).get("N", "0"))
        if left <= 0:
            return 0
        written = self._write_if(
            "update_item", Key=key, **schema.take_slots(left, limit, ttl_epoch_s).fields()
        )
        return left if written else 0
