"""The minute-load ledger's port: slots due in each coming minute that the tick cannot count from
far timers in time (near-lane registrations and rate chains), kept by whoever makes them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class MinuteLoad:
    """Slots due in one minute: all of them, and those due in its first seconds (its head)."""

    total: int = 0
    head: int = 0

    def __add__(self, other: MinuteLoad) -> MinuteLoad:
        return MinuteLoad(self.total + other.total, self.head + other.head)


class MinuteLoadRepository(ABC):
    @abstractmethod
    def add_minute_loads(self, loads: Mapping[datetime, MinuteLoad], shard: int = 0) -> None:
        """Add ``loads`` (negative to take back) to the ledger's counters of each minute, on the
        writer's ``shard`` of them (spread: many writers of one minute do not share one item)."""

    @abstractmethod
    def get_minute_load(self, minute: datetime) -> MinuteLoad:
        """What the ledger holds for ``minute`` (never negative)."""
