"""Catch-up: drain the past minutes a shard group's watermarks say were not finished.

A poller that died (and was not restarted in its window), or an outage of every poller,
leaves buckets behind its shards' watermarks. The next poller of those shards drains them
oldest minute first, **a bounded slice at a time** between its own minute's steps, so that
no backlog can stall the minute it owns or outlast its deadline without progress:

* each past minute is read from its progress marks on (what an earlier poller released is not
  read again, but for its last seconds: :mod:`.rewatch`) and released as an uncertain drain
  (slots already started are not sent);
* after each slice the minute's progress mark moves; when the minute is empty the
  watermarks of its shards move past it, so the next poller resumes where this one stopped;
* the per-timer slot count of a long outage is bounded by the planner
  (:data:`punctual.timing.slots.MAX_RELEASE_PER_TIMER`), the rest chains on through near timers.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from punctual.dispatch.polling.config import PollerConfig
from punctual.dispatch.polling.drain import MinuteDrain
from punctual.dispatch.polling.release import ReleaseReport, SlotReleaser
from punctual.dispatch.polling.sent_bound import SentBound
from punctual.store.base import JobStore, progress_of
from punctual.timing.timers import Lane, to_ms

log = logging.getLogger("punctual.dispatch.polling")

_MINUTE = timedelta(minutes=1)
# At most this many timers held by the owed minutes read ahead for their fate lines (with the open one)
AHEAD_TIMERS = 20_000


@dataclass
class _Open:
    """The past minute being drained, and which shards of each lane it covers."""

    minute: datetime
    shards: dict[Lane, list[int]]
    drain: MinuteDrain
    sent: SentBound  # what this poller may have sent of it: the whole minute, once (.sent_bound)

    def may_send(self) -> bool:
        return self.sent.cover(to_ms(self.minute + _MINUTE) - 1)


class CatchUp:
    """The past minutes of one shard group that still hold unreleased timers.

    Parameters
    ----------
    store, releaser, config
        Where timers, watermarks and progress marks are; how slots are released.
    group, group_count
        The shard group whose marks this writes.
    shards
        The group's shards, per lane.
    """

    def __init__(
        self,
        store: JobStore,
        releaser: SlotReleaser,
        config: PollerConfig,
        group: int,
        group_count: int,
        shards: dict[Lane, list[int]],
    ) -> None:
        self.store = store
        self.releaser = releaser
        self.config = config
        self.group = group
        self.group_count = group_count
        self.shards = shards
        self.starts: dict[Lane, dict[int, datetime]] = {lane: {} for lane in shards}
        self.cursor: datetime | None = None  # the next minute to open
        self.before: datetime | None = None  # minutes up to (not including) this are owed
        self.open: _Open | None = None
        # Owed minutes after the open one, read ahead for their fate lines (release_urgent), oldest
        # first: each becomes the open one in turn
        self.ahead: deque[_Open] = deque()

    @property
    def pending(self) -> bool:
        return (
            self.open is not None
            or bool(self.ahead)
            or (self.cursor is not None and self.before is not None and self.cursor < self.before)
        )

    def plan(self, before: datetime) -> None:
        """Owe every bucket from each shard's watermark up to (not including) ``before``.

        A shard with no watermark yet starts at the minute before ``before``.
        """
        oldest_allowed = before - timedelta(minutes=self.config.max_catchup_minutes)
        for lane, shards in self.shards.items():
            marks = self.store.get_watermarks(lane, shards)
            for shard in shards:
                start = max(marks.get(shard, before - _MINUTE), oldest_allowed)
                self.starts[lane][shard] = max(start, self.starts[lane].get(shard, start))
        first = min((s for starts in self.starts.values() for s in starts.values()), default=before)
        # Minutes before the cursor were opened already (drained, or being drained).
        self.cursor = first if self.cursor is None else max(first, self.cursor)
        self.before = before if self.before is None else max(self.before, before)

    def slice(self, now: datetime, limit: int | None = None) -> ReleaseReport:
        """Release at most one slice (``limit`` timers, or the configured slice) of the oldest
        owed minute; move its marks."""
        if self.open is None and not self._open_next(now):
            return ReleaseReport()
        current = self.open
        assert current is not None
        if len(current.drain) and not current.may_send():  # (the caller's next slice tries again)
            raise RuntimeError(f"the send bound of minute {current.minute:%H:%M} could not be moved on")
        report = current.drain.release_due(
            to_ms(now), limit=limit or self.config.catchup_timers_per_slice, everything=True
        )
        # What was sent is returned (counted) even when the marks after it fail: a mark not
        # moved only makes a restart read more of the minute (its release checks the records),
        # and a minute whose watermarks did not move stays open, to move them at the next slice.
        try:
            if len(current.drain):
                self._put_progress(current)
                return report
            for lane, shards in current.shards.items():
                if shards:
                    self.store.advance_watermarks(lane, shards, current.minute + _MINUTE)
            self.open = None
        except Exception:
            log.exception("marking catch-up of minute %s failed; will retry", f"{current.minute:%H:%M}")
        return report

    def release_urgent(
        self, now: datetime, by_ms: int, limit: int, busy: Callable[[], bool] = lambda: False
    ) -> tuple[ReleaseReport, int]:
        """Release at most ``limit`` timers of the owed minutes whose fate line is at or before
        ``by_ms``, out of their turn, oldest minute first (:mod:`.fate_lines`; and how many were
        taken).

        The minutes after the open one are read ahead (up to :data:`AHEAD_TIMERS` held in all):
        held open by the pace, a minute kept the next one unread, whose lines passed unseen (QA:
        two dead pollers' minutes, the first of 2,000 ``all`` slots, the second of 300 ``none``
        slots 35 s late when owed, workers claiming 20 a second: all 300 MISSED). Their marks and
        watermarks move only in turn, as each becomes the open one (a restart reads them again;
        their releases were uncertain, and the drains share what they saw: an older minute's timer
        of a chain whose newer timer went out is not sent again). The open minute, emptied, is
        closed now, so that the next one opens at the next turn.

        A minute is read ahead only while ``busy`` says False (the poller's own minute has nothing
        due): each is a read of every bucket of the group (544 reads of one group, some 1.6 s in
        DynamoDB), and the reads of 30 owed minutes in one turn held the minute's on-time slots
        back 47 s (QA). The next turn reads on."""
        if limit <= 0 or not self.pending:
            return ReleaseReport(), 0
        try:
            self._read_ahead(now, busy)
        except Exception:  # (what is open already goes on: the next turn reads again)
            log.exception("reading owed minutes ahead failed; will retry")
        report, taken = ReleaseReport(), 0
        for opened in [self.open, *self.ahead]:
            if opened is not None and taken < limit and len(opened.drain) and opened.may_send():
                done, count = opened.drain.release_urgent(by_ms, limit - taken)
                report.merge(done)
                taken += count
                if count:
                    try:
                        self._put_progress(opened)
                    except Exception:  # (a restart only reads more of the minute)
                        log.exception("marking catch-up of minute %s failed", f"{opened.minute:%H:%M}")
        if self.open is not None and not len(self.open.drain):
            report.merge(self.slice(now))  # (nothing left to release: it only closes the minute)
        return report, taken

    def _put_progress(self, opened: _Open) -> None:
        through = opened.drain.released_through_ms
        if through is not None:
            self.store.put_progress(opened.minute, self.group, self.group_count, through)

    def _read_ahead(self, now: datetime, busy: Callable[[], bool]) -> None:
        # The open minute is always the oldest owed: one read now would be opened before those
        # read ahead, and its watermarks, moved as it closes, would pass minutes still holding
        # timers (QA: three owed minutes, the second read ahead when the first closed; the third
        # was opened, drained, and moved the watermarks past the second: a poller ending there
        # left the second minute's timers to none)
        if self.open is None and self.ahead:
            self.open = self.ahead.popleft()
        held = sum(len(opened.drain) for opened in [self.open, *self.ahead] if opened is not None)
        while held < AHEAD_TIMERS and (self.open is None or not busy()):
            opened = self._read_next(now)
            if opened is None:
                return
            if self.open is None:
                self.open = opened
            else:
                self.ahead.append(opened)
            held += len(opened.drain)

    def _open_next(self, now: datetime) -> bool:
        """Open the next owed minute: the one read ahead, else read its buckets."""
        self.open = self.ahead.popleft() if self.ahead else self._read_next(now)
        return self.open is not None

    def _read_next(self, now: datetime) -> _Open | None:
        """Read the next owed minute's buckets (from their progress marks on)."""
        while self.cursor is not None and self.before is not None and self.cursor < self.before:
            minute = self.cursor
            owed = {
                lane: [s for s, start in starts.items() if start <= minute]
                for lane, starts in self.starts.items()
            }
            if not any(owed.values()):
                self.cursor = minute + _MINUTE
                continue
            marks = self.store.get_progress(minute)
            drain = MinuteDrain(self.releaser, uncertain_through_ms=to_ms(now))
            drain.resume(marks, self.config.unmarked_ms)  # (what the pollers before may have sent: .redrain)
            opened = self.ahead[-1] if self.ahead else self.open
            if opened is not None:  # (read ahead: a chain's timers in two minutes are one chain)
                drain.newest_seen, drain.newest_released = (
                    opened.drain.newest_seen,
                    opened.drain.newest_released,
                )
            near_back, far_back = self.config.near_lookback_ms, self.config.rewatch_lookback_ms
            for lane, shards in owed.items():
                for shard in shards:
                    mark = progress_of(marks, shard)
                    back = far_back - 1 if lane is Lane.FAR else near_back  # polling.rewatch
                    start = None if mark is None else mark - back
                    drain.hold(self.store.query_timers(lane, minute, shard, from_ms=start))
            drain.take_turns()  # released in slices: one tenant's burst does not fill them all
            self.cursor = minute + _MINUTE
            log.info("catching up minute %s: %d timers", f"{minute:%H:%M}", len(drain))
            return _Open(minute, owed, drain, SentBound(self.store, minute, self.group, self.group_count, 0))
        return None
