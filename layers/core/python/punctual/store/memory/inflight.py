"""A tenant's runs in flight in memory (the twin of :mod:`punctual.store.dynamo.inflight`)."""

from __future__ import annotations

from collections.abc import Sequence

from punctual.store.inflight import RunsInFlightRepository
from punctual.store.memory.base import MemoryBase


class MemoryRunsInFlight(MemoryBase, RunsInFlightRepository):
    """Per (scope, window, shard), one counter; per window, the scopes near their cap."""

    def add_runs_in_flight(self, scope: str, window: int, shard: int, delta: int, expires_at: int) -> int:
        with self._lock:
            counts = self._runs_in_flight
            key = (scope, window, shard)
            counts[key] = counts.get(key, 0) + delta
            return counts[key]

    def runs_in_flight(self, scope: str, windows: Sequence[int]) -> dict[int, int]:
        with self._lock:
            counts = self._runs_in_flight
            found = dict.fromkeys(windows, 0)
            for (of, window, _), count in counts.items():
                if of == scope and window in found:
                    found[window] += count
            return {window: max(0, count) for window, count in found.items()}

    def mark_hot_in_flight(self, scope: str, window: int, expires_at: int) -> None:
        with self._lock:
            self._hot_in_flight.setdefault(window, set()).add(scope)

    def hot_in_flight(self, windows: Sequence[int]) -> set[str]:
        with self._lock:
            return set().union(*(self._hot_in_flight.get(window, set()) for window in windows))
