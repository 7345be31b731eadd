"""The minute-load ledger in memory (:class:`punctual.store.loads.MinuteLoadRepository`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from punctual.store.loads import MinuteLoad, MinuteLoadRepository
from punctual.store.memory.base import MemoryBase
from punctual.timing.timers import minute_key


class MemoryLoads(MemoryBase, MinuteLoadRepository):
    """Per minute, one counter pair (the shards of the DynamoDB ledger are one here)."""

    def add_minute_loads(self, loads: Mapping[datetime, MinuteLoad], shard: int = 0) -> None:
        with self._lock:
            for minute, load in loads.items():
                key = minute_key(minute)
                self._minute_loads[key] = self._minute_loads.get(key, MinuteLoad()) + load

    def get_minute_load(self, minute: datetime) -> MinuteLoad:
        with self._lock:
            load = self._minute_loads.get(minute_key(minute), MinuteLoad())
            return MinuteLoad(max(0, load.total), max(0, load.head), max(0, load.ecs))
