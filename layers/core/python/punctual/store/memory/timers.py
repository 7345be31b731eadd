"""Timers, watermarks and progress marks in memory."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from datetime import datetime

from punctual.store.base import (
    ProgressMark,
    TimerRepository,
)
from punctual.store.memory.base import MemoryBase
from punctual.timing.timers import LOAD_KINDS, Lane, Timer, due_bound, minute_key


class MemoryTimers(MemoryBase, TimerRepository):
    """Timers, watermarks and progress marks in memory."""

    # ---------------------------------------------------------------- timers

    def put_timers(self, timers: Sequence[Timer]) -> None:
        with self._lock:
            for timer in timers:
                self._put_timer(timer)

    def query_timers(
        self,
        lane: Lane,
        minute: datetime,
        shard: int,
        from_ms: int | None = None,
        to_ms: int | None = None,
    ) -> list[Timer]:
        with self._lock:
            bucket = self._buckets.get((lane, minute_key(minute), shard), [])
            low = due_bound(from_ms) if from_ms is not None else ""
            start = bisect.bisect_left(bucket, low, key=lambda item: item[0]) if low else 0
            out = []
            for _, timer in bucket[start:]:
                if to_ms is not None and timer.due_ms > to_ms:
                    break
                out.append(timer)
            return out

    def count_timers(self, lane: Lane, minute: datetime, shard: int) -> int:
        with self._lock:
            bucket = self._buckets.get((lane, minute_key(minute), shard), [])
            return sum(1 for _, timer in bucket if timer.kind in LOAD_KINDS)

    def get_watermarks(self, lane: Lane, shards: Sequence[int]) -> dict[int, datetime]:
        scope = self.marks_scope
        with self._lock:
            marks = self._watermarks
            return {s: marks[(scope, lane, s)] for s in shards if (scope, lane, s) in marks}

    def advance_watermarks(self, lane: Lane, shards: Sequence[int], minute: datetime) -> None:
        with self._lock:
            for shard in shards:
                key = (self.marks_scope, lane, shard)
                current = self._watermarks.get(key)
                if current is None or current < minute:
                    self._watermarks[key] = minute

    def put_progress(self, minute: datetime, group: int, group_count: int, through_ms: int) -> None:
        self._advance(minute, group, group_count, 0, through_ms)

    def put_sent_bound(self, minute: datetime, group: int, group_count: int, sent_to_ms: int) -> None:
        self._advance(minute, group, group_count, 1, sent_to_ms)

    def _advance(self, minute: datetime, group: int, group_count: int, figure: int, value: int) -> None:
        """Move one figure of a progress item forward (0: the release mark, 1: the send bound)."""
        with self._lock:
            key = (self.marks_scope, minute_key(minute), group, group_count)
            figures = list(self._progress.get(key, (None, None)))
            current = figures[figure]
            figures[figure] = value if current is None else max(current, value)
            self._progress[key] = (figures[0], figures[1])

    def get_progress(self, minute: datetime) -> list[ProgressMark]:
        wanted = (self.marks_scope, minute_key(minute))
        with self._lock:
            return [
                ProgressMark(group, count, through, sent_to)
                for (scope, key, group, count), (through, sent_to) in self._progress.items()
                if (scope, key) == wanted
            ]
