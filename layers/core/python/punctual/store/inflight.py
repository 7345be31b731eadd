"""The port of a tenant's runs in flight: per lane, tenant and time window, sharded counters of the
runs that outlived their first lease, and each window's list of the scopes near their cap
(:mod:`punctual.execution.inflight` marks and reads them)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

# Items per lane, tenant and window. A run adds to one once a window (20 s): one partition (DynamoDB
# takes 1,000 writes a second per partition) would take 20,000 runs in flight of one tenant, but a
# wave of runs started together beats together; four spread that.
IN_FLIGHT_SHARDS = 4


class RunsInFlightRepository(ABC):
    @abstractmethod
    def add_runs_in_flight(self, scope: str, window: int, shard: int, delta: int, expires_at: int) -> int:
        """Add ``delta`` (negative: take back) to the counter of ``scope`` (a lane and a tenant) of
        ``window`` on ``shard`` (no read, no condition); the item expires at ``expires_at`` (epoch s).
        Returns the shard's count after the write."""

    @abstractmethod
    def runs_in_flight(self, scope: str, windows: Sequence[int]) -> dict[int, int]:
        """The count of ``scope`` in each of ``windows``, summed over its shards (never negative; an
        eventually consistent read)."""

    @abstractmethod
    def mark_hot_in_flight(self, scope: str, window: int, expires_at: int) -> None:
        """List ``scope`` in ``window``'s scopes near their cap (a set: a repeat adds nothing)."""

    @abstractmethod
    def hot_in_flight(self, windows: Sequence[int]) -> set[str]:
        """The scopes listed near their cap in any of ``windows`` (an eventually consistent read)."""
