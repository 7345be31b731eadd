"""A tenant's runs in flight in DynamoDB: per lane, tenant and window, ``IN_FLIGHT_SHARDS`` counter
items (``flight#<lane>/<tenant>#<window>#<shard>``), added to with ``ADD`` and read together with
one BatchGetItem; per window, one item listing the scopes near their cap (``flight#hot#<window>``,
a string set), which every worker reads before any scope's counters."""

from __future__ import annotations

from collections.abc import Sequence

from punctual.store.dynamo import inflight_schema as schema
from punctual.store.dynamo.base import DynamoBase
from punctual.store.inflight import IN_FLIGHT_SHARDS, RunsInFlightRepository


class DynamoRunsInFlight(DynamoBase, RunsInFlightRepository):
    def add_runs_in_flight(self, scope: str, window: int, shard: int, delta: int, expires_at: int) -> int:
        reply = self.client.update_item(
            TableName=self.table,
            Key=schema.in_flight_key(scope, window, shard % IN_FLIGHT_SHARDS),
            ReturnValues="UPDATED_NEW",
            **schema.add_in_flight(delta, expires_at).fields(),
        )
        return int(reply.get("Attributes", {}).get("n", {}).get("N", "0"))

    def runs_in_flight(self, scope: str, windows: Sequence[int]) -> dict[int, int]:
        keys = [schema.in_flight_key(scope, w, shard) for w in windows for shard in range(IN_FLIGHT_SHARDS)]
        counts = dict.fromkeys(windows, 0)
        for item in self._batch_get(keys, consistent=False):
            if "n" in item:
                window = int(item["pk"]["S"].rsplit("#", 2)[1])
                counts[window] = counts.get(window, 0) + int(item["n"]["N"])
        return {window: max(0, count) for window, count in counts.items()}

    def mark_hot_in_flight(self, scope: str, window: int, expires_at: int) -> None:
        self.client.update_item(
            TableName=self.table,
            Key=schema.hot_in_flight_key(window),
            **schema.mark_hot_in_flight(scope, expires_at).fields(),
        )

    def hot_in_flight(self, windows: Sequence[int]) -> set[str]:
        keys = [schema.hot_in_flight_key(window) for window in windows]
        found: set[str] = set()
        for item in self._batch_get(keys, consistent=False):
            found.update(item.get("s", {}).get("SS", []))
        return found
