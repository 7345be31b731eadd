"""The minute-load ledger's port: slots due in each coming minute that the tick cannot count from
far timers in time (near-lane registrations and rate chains), kept by whoever makes them; and the
ECS lane's slots, near and far, so that the tick has ECS worker tasks running before they are due
(:mod:`punctual.dispatch.ecs_lane`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class MinuteLoad:
    """Slots due in one minute: all of them, and those due in its first seconds (its head); and
    the ECS lane's (``runtime: ecs``), counted apart from the two (every one, near or far)."""

    total: int = 0
    head: int = 0
    ecs: int = 0

    def __add__(self, other: MinuteLoad) -> MinuteLoad:
        return MinuteLoad(self.total + other.total, self.head + other.head, self.ecs + other.ecs)

    @property
    def empty(self) -> bool:
        """Nothing to add (or to read): every counter 0."""
        return not (self.total or self.head or self.ecs)


class MinuteLoadRepository(ABC):
    @abstractmethod
    def add_minute_loads(self, loads: Mapping[datetime, MinuteLoad], shard: int = 0) -> None:
        """Add ``loads`` (negative to take back) to the ledger's counters of each minute, on the
        writer's ``shard`` of them (spread: many writers of one minute do not share one item)."""

    @abstractmethod
    def get_minute_load(self, minute: datetime) -> MinuteLoad:
        """What the ledger holds for ``minute`` (never negative)."""
