"""Metrics as the core reports them; handlers forward them to Powertools (EMF).

The core never imports Powertools: it records into a :class:`MetricsSink`, so logic tests
can read the figures back and local mode can print them.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol


class MetricsSink(Protocol):
    def add(self, name: str, value: float, unit: str = "Count") -> None: ...


def add_all(sink: MetricsSink, name: str, values: Sequence[float], unit: str = "Count") -> None:
    """``sink.add(name, value, unit)`` for each of ``values``, in one call when the sink takes
    them together (an ``add_all`` of its own: the Lambda's EMF buffer)."""
    together = getattr(sink, "add_all", None)
    if together is not None:
        together(name, values, unit)
        return
    for value in values:
        sink.add(name, value, unit)


class NullMetrics:
    def add(self, name: str, value: float, unit: str = "Count") -> None:
        return None


class RecordingMetrics:
    """Keeps every value (tests, local mode summaries, benchmarks)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.values: dict[str, list[float]] = defaultdict(list)

    def add(self, name: str, value: float, unit: str = "Count") -> None:
        with self._lock:
            self.values[name].append(value)

    def total(self, name: str) -> float:
        with self._lock:
            return sum(self.values.get(name, []))
