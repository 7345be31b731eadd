"""The minute-load ledger in DynamoDB: per minute, ``LOAD_SHARDS`` counter items (``load#<minute>``),
added to with ``ADD`` (no read, no condition) and read together with one BatchGetItem."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from punctual.store.dynamo import schema
from punctual.store.dynamo.base import DynamoBase
from punctual.store.loads import MinuteLoad, MinuteLoadRepository

LOAD_SHARDS = 8  # items per minute: 8 x 1,000 writes a second per partition
LOAD_TTL_S = 24 * 3600  # a minute's counters are kept a day after it


class DynamoLoads(DynamoBase, MinuteLoadRepository):
    def add_minute_loads(self, loads: Mapping[datetime, MinuteLoad], shard: int = 0) -> None:
        for minute, load in loads.items():
            if load.empty:
                continue
            expires = int(minute.timestamp()) + LOAD_TTL_S
            self.client.update_item(
                TableName=self.table,
                Key=schema.minute_load_key(minute, shard % LOAD_SHARDS),
                **schema.add_minute_load(load.total, load.head, expires, load.ecs).fields(),
            )

    def get_minute_load(self, minute: datetime) -> MinuteLoad:
        # Eventually consistent: a forecast, read a minute or two ahead of its minute.
        keys = [schema.minute_load_key(minute, shard) for shard in range(LOAD_SHARDS)]
        total = head = ecs = 0
        for item in self._batch_get(keys, consistent=False):
            total += int(item["t"]["N"]) if "t" in item else 0
            head += int(item["h"]["N"]) if "h" in item else 0
            ecs += int(item["e"]["N"]) if "e" in item else 0
        return MinuteLoad(max(0, total), max(0, head), max(0, ecs))
