"""One poller for one (minute, shard group): read ahead, release at each instant, resume after a crash.

It starts a little before its minute M, and:

1. reads its minute's progress marks: a restarted poller resumes from where the one before
   it got (far buckets from the mark on; near buckets from the mark minus the look-back),
   and treats what was due before it started as *uncertain* (see :mod:`.drain`);
2. reads the far bucket of M for each of its shards once and holds the timers;
3. until M + 60 s + grace, reads the near buckets of M every poll interval (with a
   look-back that covers clock skew), releases every held timer at its instant, and every
   ``progress_interval_s`` in which it released something records how far it got;
4. between those steps, in bounded slices at most every ``catchup_pause_s``: the rest of
   catch-ups that were cut short (CATCHUP timers), and the past minutes its shards'
   watermarks say are owed (:mod:`.catchup`) — the previous minute's only once that
   minute's own poller (and its retries) should have finished;
5. at the end, advances the watermark of each shard whose buckets were all released
   (never past a minute catch-up still owes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Protocol

from punctual.dispatch.polling.catchup import CatchUp
from punctual.dispatch.polling.catchup_pace import CatchUpPace, spend
from punctual.dispatch.polling.config import PollerConfig
from punctual.dispatch.polling.drain import MinuteDrain
from punctual.dispatch.polling.far_reads import FAR_READS_AT_ONCE as FAR_READS_AT_ONCE  # (re-exported)
from punctual.dispatch.polling.far_reads import read_far_buckets
from punctual.dispatch.polling.fate_lines import FATE_MARGIN_S
from punctual.dispatch.polling.release import ReleaseReport, SlotReleaser
from punctual.dispatch.polling.sent_bound import SentBound
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink
from punctual.store.base import JobStore, progress_of
from punctual.timing.slots import MAX_RELEASE_PER_TIMER
from punctual.timing.timers import Lane, from_ms, to_ms

log = logging.getLogger("punctual.dispatch.polling")


class MinutePoller(Protocol):
    """What a minute poll needs of its poller (:class:`punctual.dispatch.polling.poller.Poller` is
    one). Declared here, where it is used: the poller builds minute polls, so this module never
    imports it."""

    @property
    def store(self) -> JobStore: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def config(self) -> PollerConfig: ...

    @property
    def metrics(self) -> MetricsSink: ...

    @property
    def releaser(self) -> SlotReleaser: ...


class MinutePoll:
    """The state of one poller for one minute: its drain, near-lane cursor, catch-up, marks."""

    def __init__(self, poller: MinutePoller, minute: datetime, group: int, group_count: int) -> None:
        self.poller = poller
        self.store = poller.store
        self.clock = poller.clock
        self.config = poller.config
        layout = self.config.layout
        self.minute = minute
        self.group = group
        self.group_count = group_count
        self.far = layout.shards_of_group(Lane.FAR, group, group_count)
        self.near = layout.shards_of_group(Lane.NEAR, group, group_count)
        self.end = minute + timedelta(minutes=1)
        self.final = self.end + timedelta(seconds=self.config.grace_s)
        self.drain = MinuteDrain(poller.releaser, uncertain_through_ms=None, defer_catchup=True)
        self.catchup = CatchUp(
            self.store,
            poller.releaser,
            self.config,
            group,
            group_count,
            {Lane.FAR: self.far, Lane.NEAR: self.near},
        )
        self.pace = CatchUpPace.of(poller.releaser.queues, self.config.short_queue_urls)
        self._past_turn = False  # paced: whether a past minute's slice goes next (else the lagging)
        self.report = ReleaseReport()
        self.failed_shards: set[tuple[Lane, int]] = set()
        self.previous_checked = False
        self.unread: set[int] = set()
        self.far_from: dict[int, int] = {}  # far shard -> first due to read (resuming after a mark)
        self.next_poll = minute
        self.last_near_ms: int | None = None
        self.next_catchup = minute
        self.marked_ms: int | None = None  # the progress mark last written
        self.marked_work = 0  # timers handled when that mark was written (see _mark)
        self.seen_work = 0  # timers handled when _mark last looked
        self.work_ms: int | None = None  # when _mark last saw the count of timers handled change
        self.next_mark = minute
        # What it may have sent, bounded in its progress item ahead of the sends (.sent_bound)
        self.sent = SentBound(self.store, minute, group, group_count, self.config.send_bound_ahead_ms)

    # ------------------------------------------------------------------ the loop

    def run(self, stop: Callable[[], bool]) -> ReleaseReport:
        """Start, step until the minute and its grace are over, finish."""
        self.start()
        while not stop():
            wake = self.step()
            if wake is None:
                break
            self.clock.sleep(max(0.0, (wake - self.clock.now()).total_seconds()))
        if stop():
            self._mark(force=True)  # cut short (the Lambda is out of time): the next poller resumes
            return self.report
        return self.finish(stop)

    def start(self) -> None:
        """Resume from the minute's progress marks, owe the past, read the far buckets ahead."""
        now = self.clock.now()
        self._resume_from_marks(now)
        self._guarded(lambda: self.catchup.plan(self.minute - timedelta(minutes=1)))
        self.unread = self._read_far_buckets(self.far)
        self.next_poll = now
        self.next_catchup = now

    def step(self) -> datetime | None:
        """One turn of the loop: poll if it is time, release what is due, a slice of catch-up.

        Returns when to wake next, or None when the minute and its grace are over.
        """
        cfg = self.config
        now = self.clock.now()
        if now >= self.final:
            return None
        if not self.previous_checked and now >= self.minute + timedelta(seconds=2 * cfg.grace_s):
            # The previous minute's poller ran until minute + grace, and is retried at once if
            # it died: past that, owe what it left (if anything). One more grace avoids racing it.
            self.previous_checked = True
            self._guarded(lambda: self.catchup.plan(self.minute))
        if now >= self.next_poll:
            self._poll(now)
        self._release_due()
        self._mark()
        self._bound_ahead()
        self._check_unclaimed()
        if self._catching_up() and self.clock.now() >= self.next_catchup:
            self._catch_up_slice()
        wake = self._own_next()
        if self._catching_up():
            wake = min(wake, self.next_catchup)
        check = self.poller.releaser.watch.next_check()
        if check is not None:
            wake = min(wake, check)
        return min(wake, self.final)

    def finish(self, stop: Callable[[], bool] = lambda: False) -> ReleaseReport:
        """Final read of the near buckets, release what is left, advance the watermarks, the last
        re-send checks (until ``stop``: the invocation nearly out of time)."""
        for shard in self.near:
            if not self._read(Lane.NEAR, shard):
                self.failed_shards.add((Lane.NEAR, shard))
        self.failed_shards.update((Lane.FAR, shard) for shard in self.unread)
        try:  # (a minute handed on holds no hole behind its mark: drain.release_holes)
            if not self.drain.lagging or self.sent.cover(to_ms(self.clock.now())):
                self.report.merge(self.drain.release_holes())
        except Exception:
            log.exception("releasing the lagging timers before those sent out of turn failed")
        for _ in range(5):
            if not len(self.drain):
                break
            self._release_due(everything=True)
        self.failed_shards.update((t.lane, t.shard) for *_, t in self.drain.heap)
        # Catch-up still waiting its turn is not dropped: those shards' watermarks stay, and the
        # next poller drains this minute from its progress mark.
        self.failed_shards.update((t.lane, t.shard) for t in self.drain.lagging)
        self._mark(force=True)
        self._advance()
        self._finish_checks(stop)
        return self.report

    def backlog(self, now: datetime) -> int:
        """Held timers already due and not yet released (releases failing, or catch-up waiting)."""
        return self.drain.backlog(to_ms(now)) + len(self.drain.lagging)

    # ------------------------------------------------------------------ parts

    def _resume_from_marks(self, now: datetime) -> None:
        """A poller (re)started after its minute began: what was due may have been released."""
        if now > self.minute:
            self.drain.uncertain_through_ms = to_ms(now)
        try:
            marks = self.store.get_progress(self.minute)
        except Exception:
            log.exception("reading the progress of %s failed: reading it whole", self.minute)
            return
        if not marks:
            return
        # What the pollers before it may have sent: their send bound, else (a poller from before
        # the bound) their furthest release mark and a little past (.redrain)
        self.drain.resume(marks, self.config.unmarked_ms)
        own = (m.sent_to_ms for m in marks if (m.group, m.group_count) == (self.group, self.group_count))
        self.sent.resumed(max((b for b in own if b is not None), default=None))
        for shard in self.far:
            mark = progress_of(marks, shard)
            if mark is not None:  # and the last seconds before it again (polling.rewatch)
                self.far_from[shard] = mark + 1 - self.config.rewatch_lookback_ms
        near_marks = [progress_of(marks, shard) for shard in self.near]
        if near_marks and all(m is not None for m in near_marks):
            self.last_near_ms = min(m for m in near_marks if m is not None)
        log.info(
            "minute %s group %d/%d resumes from its progress mark",
            f"{self.minute:%H:%M}",
            self.group,
            self.group_count,
        )

    def _poll(self, now: datetime) -> None:
        """Retry far reads that failed, read the near buckets' due range (with the look-back)."""
        cfg = self.config
        self.unread = {shard for shard in self.unread if not self._read_far(shard)}
        now_ms = to_ms(now)
        horizon = now_ms + int(cfg.poll_interval_s * 1000)
        base = self.last_near_ms if self.last_near_ms is not None else to_ms(self.minute)
        start = base - cfg.near_lookback_ms
        ok = [self._read(Lane.NEAR, shard, start, horizon) for shard in self.near]
        if all(ok):  # on a failed read, look back again from the same place next time
            self.last_near_ms = now_ms
        self.next_poll = now + timedelta(seconds=cfg.poll_interval_s)
        self.poller.metrics.add("Backlog", self.backlog(now))

    def _read_far(self, shard: int) -> bool:
        return self._read(Lane.FAR, shard, self.far_from.get(shard))

    def _read_far_buckets(self, shards: list[int]) -> set[int]:
        """Read the far buckets side by side, hold their timers (:func:`.far_reads.read_far_buckets`);
        return the shards whose read failed (retried at each poll)."""
        if len(shards) <= 1:
            return {shard for shard in shards if not self._read_far(shard)}
        return read_far_buckets(self.store, self.minute, shards, self.far_from, self.drain.hold)

    def _read(self, lane: Lane, shard: int, from_ms: int | None = None, to_ms: int | None = None) -> bool:
        """Hold the timers of one bucket (or a due range of it); False if the read failed."""
        try:
            timers = self.store.query_timers(lane, self.minute, shard, from_ms, to_ms)
            self.drain.hold(timers)
            if lane is Lane.FAR and log.isEnabledFor(logging.DEBUG):  # not formatted when off
                log.debug(
                    "minute %s: far bucket %d read, %d timers", f"{self.minute:%H:%M}", shard, len(timers)
                )
            return True
        except Exception:
            log.exception("reading %s bucket %s/%s failed; will retry", lane.value, self.minute, shard)
            return False

    def _release_due(self, everything: bool = False) -> None:
        now_ms = to_ms(self.clock.now())
        due = self.drain.next_due_ms()
        try:
            bound = max(now_ms, to_ms(self.end)) if everything else now_ms
            if due is not None and due <= bound and not self.sent.cover(bound):  # (bounded before sent)
                raise RuntimeError("the send bound could not be moved on")
            self.report.merge(self.drain.release_due(now_ms, everything=everything))
        except Exception:
            log.exception("releasing due timers failed; will retry")
            self.clock.sleep(0.2)

    def _check_unclaimed(self, ends_at: datetime | None = None) -> None:
        """Re-send what the Lambda lane was sent and no worker claimed (:mod:`.resend`; ``ends_at``:
        the watch's end, in its last checks)."""
        watch = self.poller.releaser.watch
        check = watch.next_check()
        if check is None or check > self.clock.now():
            return
        try:
            watch.check(self.clock.now(), ends_at)
        except Exception:
            log.exception("checking for unclaimed messages failed; will retry")

    def _finish_checks(self, stop: Callable[[], bool]) -> None:
        """The first check of what was sent in the minute's last seconds (at most ``resend_after_s``
        more, ended early by ``stop``): a worker that died before its handler ran is not left to
        the queue's timeout (:meth:`.resend.ResendWatch.last_checks`)."""
        deadline = self.clock.now() + timedelta(seconds=self.config.resend_after_s + 1)
        self.poller.releaser.watch.last_checks(self.clock, deadline, self._check_unclaimed, stop)

    def _catching_up(self) -> bool:
        return bool(self.drain.lagging) or self.catchup.pending

    def _catch_up_slice(self) -> None:
        """One bounded turn of catch-up work: chains cut short in this minute, then past minutes;
        at the pace the workers take the short lane (:mod:`.catchup_pace`)."""
        now = self.clock.now()
        allowed = self.pace.allowance(now, self.report.released)
        if allowed is not None and self._release_urgent(now):
            return  # (more whose fate line comes: the next turn at once)
        if allowed == 0:  # the queues hold a second of work: on-time slots go first
            self.next_catchup = max(
                self.pace.next_look(now), now + timedelta(seconds=self.config.catchup_pause_s)
            )
            return
        limit = self.config.catchup_timers_per_slice
        lagging, past = bool(self.drain.lagging) and self.sent.cover(to_ms(now)), self.catchup.pending
        if not (lagging or past):  # (the send bound could not be moved on: tried again soon)
            self.next_catchup = now + timedelta(seconds=self.config.poll_interval_s)
            return
        if allowed is not None and lagging and past:  # paced, the two take turns (a past
            self._past_turn = not self._past_turn  # minute holds other tenants' slots too)
            lagging, past = not self._past_turn, self._past_turn
        try:
            if allowed is not None:  # paced: as many timers as the allowance's slots fill
                self._spend(lagging, allowed, limit)
            else:
                if lagging:
                    self.report.merge(self.drain.release_lagging(limit))
                if past:
                    self.report.merge(self.catchup.slice(self.clock.now(), limit))
            self.pace.released(now)
            self.next_catchup = self.clock.now() + timedelta(seconds=self.config.catchup_pause_s)
        except Exception:
            log.exception("catch-up slice failed; will retry")
            self.next_catchup = self.clock.now() + timedelta(seconds=self.config.poll_interval_s)

    def _own_next(self) -> datetime:
        """When the minute's own work is next due: its next poll, or its next timer's release."""
        due = self.drain.next_due_ms()
        return self.next_poll if due is None else min(self.next_poll, from_ms(due))

    def _release_urgent(self, now: datetime) -> bool:
        """Paced: release the held timers (lagging, then the owed past minutes') whose fate line
        comes within :data:`.fate_lines.FATE_MARGIN_S`, at most a slice's worth of slots' timers,
        whatever the pace allows (held longer, a slot that would have run could be MISSED). True
        when that many went: the next turn comes soon, the allowance waits. One that fails (a
        store throttled) leaves the turn to the allowance: catch-up never waits on it."""
        by_ms = to_ms(now) + int(FATE_MARGIN_S * 1000)
        limit = self.config.catchup_timers_per_slice * MAX_RELEASE_PER_TIMER
        try:
            report, taken = ReleaseReport(), 0
            if self.drain.lagging and self.sent.cover(to_ms(now)):  # (its own minute's urgent ones: lagging)
                report, taken = self.drain.release_urgent(by_ms, limit)
            self.report.merge(report)
            # (the owed minutes are read ahead only until the minute's own next poll or release)
            ready = self._own_next()
            busy = lambda: self.clock.now() >= ready  # noqa: E731
            report, count = self.catchup.release_urgent(now, by_ms, limit - taken, busy)
            self.report.merge(report)
            taken += count
        except Exception:
            log.exception("releasing catch-up held to its fate line failed; will retry")
            return False
        if taken:
            self.pace.released(now)
        if taken < limit:
            return False
        self.next_catchup = self.clock.now() + timedelta(seconds=self.config.catchup_pause_s)
        return True

    def _spend(self, lagging: bool, slots: int, timers: int) -> None:
        """A paced turn of the lagging timers (else of the oldest past minute, until it closes),
        into the minute's report batch by batch."""
        if lagging:
            spend(self.drain.release_lagging, lambda: bool(self.drain.lagging), slots, timers, self.report)
            return
        catchup = self.catchup
        spend(
            lambda n: catchup.slice(self.clock.now(), n),
            lambda: catchup.open is not None,
            slots,
            timers,
            self.report,
        )

    def _handled(self) -> int:
        r = self.report
        return r.released + r.stale + r.skipped + r.excluded + r.completed

    def _mark(self, force: bool = False) -> None:
        """Record how far this minute is released, every ``progress_interval_s`` while there is
        progress to keep (or now, when ``force``).

        There is progress to keep when a timer was handled since the last mark, or the last
        mark is not yet a look-back past the last timer handled (a restart reads the near
        buckets from its mark less the look-back: marks go on until that re-reads nothing
        handled). A minute with nothing due writes no mark while it polls: idle, the marks
        were most of a poller's writes (36 a minute, $0.99 of the idle month).
        """
        now = self.clock.now()
        handled = self._handled()
        if handled != self.seen_work:
            self.seen_work, self.work_ms = handled, to_ms(now)
        if not force and (now < self.next_mark or not self._progress_to_keep(handled)):
            return
        through = self.drain.released_through_ms
        if through is None or self.unread:
            return  # a far bucket not read yet: a restart must read it whole
        if self.last_near_ms is not None:
            through = min(through, self.last_near_ms)
        if self.marked_ms is not None and through <= self.marked_ms:
            return
        try:
            self.store.put_progress(self.minute, self.group, self.group_count, through)
            self.marked_ms = through
            self.marked_work = handled
        except Exception:
            log.exception("writing the progress mark of %s failed", self.minute)
        self.next_mark = now + timedelta(seconds=self.config.progress_interval_s)

    def _bound_ahead(self) -> None:
        """Move the send bound on a step before a release needs it: when the next timer due (or a
        lagging one, due already) comes within a poll interval past it."""
        now_ms = to_ms(self.clock.now())
        due = now_ms if self.drain.lagging else self.drain.next_due_ms()
        if due is not None and due <= now_ms + int(self.config.poll_interval_s * 1000):
            self.sent.cover(due)

    def _progress_to_keep(self, handled: int) -> bool:
        if handled != self.marked_work:
            return True
        if self.work_ms is None:
            return False
        return self.marked_ms is None or self.marked_ms < self.work_ms + self.config.near_lookback_ms

    def _guarded(self, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception:
            log.exception("poller step failed (minute %s)", self.minute)
            self.failed_shards.update((Lane.FAR, s) for s in self.far)
            self.failed_shards.update((Lane.NEAR, s) for s in self.near)

    def _advance(self) -> None:
        if self.catchup.pending:
            return  # never past a minute catch-up still owes: the next poller drains from there
        for lane, shards in ((Lane.FAR, self.far), (Lane.NEAR, self.near)):
            done = [s for s in shards if (lane, s) not in self.failed_shards]
            if not done:
                continue
            try:
                self.store.advance_watermarks(lane, done, self.end)
            except Exception:
                log.exception("advancing the %s watermarks failed: the next poller drains again", lane.value)
