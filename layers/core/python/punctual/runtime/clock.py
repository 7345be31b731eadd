"""The one place time is read.

Everything else takes a :class:`Clock` (or an explicit ``now``) from its caller, so tests
say exactly which instant they mean and clock skew between nodes can be simulated per
poller or worker.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """A source of the current instant and a way to wait."""

    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""
        ...


class SystemClock:
    """The real clock, optionally offset (to simulate a node whose clock is skewed)."""

    def __init__(self, offset_s: float = 0.0) -> None:
        self.offset = timedelta(seconds=offset_s)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ManualClock:
    """A clock that moves only when told to; ``sleep`` advances it instantly.

    Thread-safe so a test can share one between a poller thread and its assertions.
    """

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        # One attribute read is atomic: it sees the instant before or after a concurrent
        # ``advance``/``set`` (which hold the lock to read-modify-write), never a torn one.
        return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(max(seconds, 0.0))

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, instant: datetime) -> None:
        with self._lock:
            self._now = instant.astimezone(UTC)


class OffsetClock:
    """Another clock seen through a fixed skew (two pollers whose clocks disagree)."""

    def __init__(self, base: Clock, offset_s: float) -> None:
        self.base = base
        self.offset = timedelta(seconds=offset_s)

    def now(self) -> datetime:
        return self.base.now() + self.offset

    def sleep(self, seconds: float) -> None:
        self.base.sleep(seconds)


def utc_now() -> datetime:
    """The real current instant, for the outermost layer (handlers, CLI) only."""
    return datetime.now(UTC)
