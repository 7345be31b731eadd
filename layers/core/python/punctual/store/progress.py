"""The pollers' progress marks, one item per (minute, shard group): how far a poller released
its minute, and how far it may have sent.

Two figures, two uses:

* ``through_ms``, a *lower* bound: every timer of the group's shards due by then that the poller
  had read was released and its next timer written. A poller that resumes the minute (a restart,
  or the next minute's poller draining a dead one's) reads the buckets from there on.
* ``sent_to_ms``, an *upper* bound: the poller sends no timer due after it without first moving it
  on (:class:`punctual.dispatch.polling.sent_bound.SentBound`). A poller that resumes the minute
  knows, whatever failed or died, which of the timers it releases again an earlier poller may
  have sent in time (:mod:`punctual.dispatch.polling.redrain`): a slot sent on time is never
  judged late again and recorded MISSED over its message (QA33: progress marks failing from :30
  while releases went on, the poller dead at :50, 199 of 300 slots sent at :45 were).

Both only move forward (conditional writes), and several pollers of one group (the replicas of a
minute, a restart) share one item.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class ProgressMark:
    """A poller's durable progress inside one minute (see the module docstring): released through
    ``through_ms`` (None: no mark yet), and sends of timers due no later than ``sent_to_ms`` (None:
    no bound written, by a poller from before the bound: see :func:`sent_bound_of`).

    The poller of (minute, ``group`` of ``group_count``) owns the shards with
    ``shard % group_count == group``; marks of one minute written under other groupings
    (a re-planned minute, a catch-up by another minute's poller) cover their own shards.
    """

    group: int
    group_count: int
    through_ms: int | None
    sent_to_ms: int | None = None

    def covers(self, shard: int) -> bool:
        return shard % self.group_count == self.group


def progress_of(marks: Iterable[ProgressMark], shard: int) -> int | None:
    """How far ``shard``'s timers of a minute are known released (the furthest covering mark)."""
    return max((m.through_ms for m in marks if m.covers(shard) and m.through_ms is not None), default=None)


def sent_bounds(marks: Iterable[ProgressMark], shards: Iterable[int]) -> tuple[int | None, set[int]]:
    """Of the marks covering any of ``shards``: the furthest send bound, and the release marks of
    those with none (written by a poller from before the bound, whose sends only its release mark
    and the time between marks can bound: :func:`punctual.dispatch.polling.redrain.sent_by_ms`)."""
    wanted = set(shards)
    bound: int | None = None
    unbounded: set[int] = set()
    for mark in marks:
        if not any(mark.covers(shard) for shard in wanted):
            continue
        if mark.sent_to_ms is not None:
            bound = mark.sent_to_ms if bound is None else max(bound, mark.sent_to_ms)
        elif mark.through_ms is not None:
            unbounded.add(mark.through_ms)
    return bound, unbounded


class ProgressRepository(ABC):
    """The progress items of the minutes (see the module docstring)."""

    @abstractmethod
    def put_progress(self, minute: datetime, group: int, group_count: int, through_ms: int) -> None:
        """Record that (``minute``, ``group`` of ``group_count``) released through ``through_ms``;
        never moves a mark backward. Cheap (one small conditional write): called every few seconds."""

    @abstractmethod
    def put_sent_bound(self, minute: datetime, group: int, group_count: int, sent_to_ms: int) -> None:
        """Record that (``minute``, ``group`` of ``group_count``) may send timers due up to
        ``sent_to_ms``; never moves the bound backward. Written before the sends it allows: a
        failure raises, and the poller sends nothing past the bound it had."""

    @abstractmethod
    def get_progress(self, minute: datetime) -> list[ProgressMark]:
        """Every progress mark written for ``minute`` (strongly consistent)."""


__all__ = ["ProgressMark", "ProgressRepository", "progress_of", "sent_bounds"]
