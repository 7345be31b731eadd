"""The rate budgets' reservations in DynamoDB: one item per reserved instant, partitioned by
(tenant, target key, minute) so that a placement reads a range of them with one query."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from punctual.store.dynamo import schema
from punctual.store.dynamo.base import DynamoBase
from punctual.store.reservations import BudgetReservationRepository
from punctual.timing.instants import from_epoch_us, to_epoch_us
from punctual.timing.timers import minute_of

_MINUTE = timedelta(minutes=1)


class DynamoBudgetReservations(DynamoBase, BudgetReservationRepository):
    """See :class:`~punctual.store.reservations.BudgetReservationRepository`; keys in :mod:`.schema`."""

    def reserve_budget_instant(
        self, tenant: str, key: str, instant: datetime, owner: str, expires_at: int
    ) -> bool:
        item_key = schema.budget_instant_key(tenant, key, minute_of(instant), to_epoch_us(instant))
        return self._write_if(
            "update_item", Key=item_key, **schema.reserve_budget_instant(owner, expires_at).fields()
        )

    def budget_reservations(
        self, tenant: str, key: str, low: datetime, high: datetime
    ) -> dict[datetime, str]:
        found: dict[datetime, str] = {}
        minute = minute_of(low)
        while minute <= high:  # one query per minute partition the range touches (one or two)
            pk = schema.budget_pk(tenant, key, minute)
            expression = schema.budget_range(pk, to_epoch_us(max(low, minute)), to_epoch_us(high))
            last: dict[str, Any] | None = None
            while True:
                request: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True}
                if last:
                    request["ExclusiveStartKey"] = last
                reply = self.client.query(**request, **expression.fields())
                for item in reply.get("Items", []):
                    at = from_epoch_us(int(item["sk"]["S"]))
                    found[at] = item["owner"]["S"]
                last = reply.get("LastEvaluatedKey")
                if not last:
                    break
            minute += _MINUTE
        return found
