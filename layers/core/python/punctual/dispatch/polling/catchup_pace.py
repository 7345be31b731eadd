"""Catch-up at the pace the workers take it: what one job owes does not push another tenant's
on-time slots back.

A job's owed slots (catch-up policy ``all`` after an outage or a pause: CATCHUP timers of up to
30 slots each, and the past minutes a dead poller left) used to go out as fast as the poller could
send them, whatever the workers started. They entered the shared short-lane queues in front of
every slot due after them, and the workers take those queues first come first served: another
tenant's slot due meanwhile waited behind what was left of the catch-up (QA 2026-12-07, in-process:
one ``rate(1 second)`` job's 420 owed slots, workers claiming 20 a second, another tenant up to
6.2 s late; at 10 a second 26 s; at 5 a second 69 s).

So catch-up is sent only while the short lane's queues hold less than about a second of the
workers' work (:data:`TARGET_S`). The poller reads how many messages wait in those queues (SQS's
``ApproximateNumberOfMessages``, one ``GetQueueAttributes`` a queue, at most every
:data:`READ_EVERY_S`, only while it has catch-up to send) and works out how fast they drain: what
waited at the last read, plus what it sent since (its on-time slots too), less what waits now, over the last
:data:`DRAIN_WINDOW_S`. The window of owed slots it may keep waiting is that rate times
:data:`TARGET_S` (at least one CATCHUP timer's slots, :data:`MIN_WINDOW`), doubled at each read
that finds the queues empty (the workers take more than was offered), up to :data:`MAX_WINDOW`.
On-time slots are never held: only catch-up waits.

**Never a silent stop.** Holding catch-up leaves its timers where they are (the minute's lagging
CATCHUP timers, or the past minute's buckets behind its progress mark and watermarks), so a poller
that ends while it waits hands them to the next one, as before. And the pace only ever slows what
it can see drain:

* messages waiting and none taken for :data:`NO_DRAIN_S` (nothing takes the queues: workers all
  down, or a test without workers): nothing is held, since holding would share nothing. A count
  that stays put while the poller sends is such a case too (frozen behind, or messages no worker
  can take): what it sent not showing is no sign it was taken. A count that rose by more than the
  poller sent is not: others send there too (other shard groups), hiding what was taken;
* a level the count stood on, and not under, for :data:`STANDING_S` (messages no worker takes
  now) is not counted (:meth:`CatchUpPace.standing`);
* the count cannot be read (a throttle, a queue port that cannot count), or its read (off the
  poller's loop, :class:`BackgroundCount`: a throttled read never holds the minute's on-time
  releases) has not answered in :data:`READ_TIMEOUT_S`: nothing is held;
* while held, one CATCHUP timer still goes out every :data:`FLOOR_EVERY_S`, whatever the figures;
* a held timer whose fate line comes (held longer, a slot of it that would have run could be
  MISSED: the catch-up policy's 60 s, or the window) goes out whatever the figures
  (:mod:`.fate_lines`).

SQS's count is approximate and may lag the queues (stale low: more is sent than the window;
stale high: less drain is seen, and past :data:`NO_DRAIN_S` none): a count behind paces less well,
never stops the catch-up (``tests/unit/test_catchup_pace.py``, a count up to 30 s behind).

What it costs: one ``GetQueueAttributes`` a short queue each :data:`READ_EVERY_S` while the poller
has catch-up to send ($0.40 a million requests: a minute of catch-up over 8 queues is 960
requests, $0.0004), nothing otherwise; not an action FIFO's per-queue quota counts (that is
``SendMessage``, ``ReceiveMessage`` and ``DeleteMessage``).

What it does not do: order the owed slots of two tenants fairly against each other (each release
still takes them one tenant at a time, :mod:`.fairness`), or see the other shard groups' sends
(each group's poller counts only its own; what the others send makes the queues read fuller, so
each holds sooner, and sees less drain: a count that rose by more than it sent is not taken for
none drained, else several groups catching up at once each went unpaced after :data:`NO_DRAIN_S`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from punctual.dispatch.polling.queue_counts import (
    BackgroundCount,
    CountsWaiting,
    NotYet,
    counts_remotely,
    read_by,
)
from punctual.dispatch.polling.release import ReleaseReport
from punctual.timing.slots import MAX_RELEASE_PER_TIMER

log = logging.getLogger("punctual.dispatch.polling")

TARGET_S = 1.0  # the workers' time the owed slots waiting in the queues may hold
READ_EVERY_S = 0.5
DRAIN_WINDOW_S = 3.0  # how far back the drain rate is measured
MIN_WINDOW = MAX_RELEASE_PER_TIMER  # one CATCHUP timer's slots: less would send nothing
MAX_WINDOW = 10_000  # a second of the designed rate (10,000 triggers a second)
FLOOR_EVERY_S = 15.0  # while held, one timer still goes out this often
# Messages waiting and none taken this long: nothing drains the queues (workers down, or none);
# holding catch-up would share nothing, so it goes out unpaced. Longer than the pauses of workers
# that are all busy with runs of a few seconds, when holding it is what keeps the queues short.
NO_DRAIN_S = 10.0
# A backlog read off the loop (BackgroundCount) still unanswered this long: catch-up goes unpaced
# until it answers (never held on a read that hangs).
READ_TIMEOUT_S = 2.0
# A count that has not gone under a level for this long while a window's worth stood over it:
# that level is messages no worker takes (FIFO groups behind a running slot, a count behind), not
# a line in front of what is sent next, and it holds nothing (:meth:`CatchUpPace.standing`).
STANDING_S = 10.0


class CatchUpPace:
    """How many owed slots one poller may send now (:meth:`allowance`), from the queues' backlog.

    Parameters
    ----------
    count
        How many messages wait in the short lane's queues now (None: no gauge; nothing is held).
    """

    def __init__(self, count: Callable[[], int] | None) -> None:
        self.count = count
        self.window = 2 * MIN_WINDOW
        self.holds = 0  # times catch-up was found over its window (a hold began)
        self._read_at: datetime | None = None
        self._waiting: int | None = None  # at the last read (None: never read, or unreadable)
        self._sent_at_read = 0  # the poller's count of messages sent, at the last read
        self._sent = 0  # and now (sent_total of the last allowance)
        self._drains: deque[tuple[datetime, float, int]] = deque()  # (read at, seconds, drained)
        self._counts: deque[tuple[datetime, int]] = deque()  # (read at, waiting), 2 x STANDING_S
        self._drained_at: datetime | None = None  # the last read that found some taken (or the first read)
        self._last_release: datetime | None = None
        self._asked_at: datetime | None = None  # a read off the loop asked for, not answered yet
        self._held = False
        self._warned = False

    @classmethod
    def of(cls, queues: object, queue_urls: Sequence[str]) -> CatchUpPace:
        """The pace of a poller sending to ``queue_urls`` through ``queues`` (a port that cannot
        count, or no queues: nothing is held)."""
        if not queue_urls or not isinstance(queues, CountsWaiting):
            return cls(None)
        urls = tuple(queue_urls)
        return cls(read_by(lambda: queues.waiting(urls), counts_remotely(queues)))

    def allowance(self, now: datetime, sent_total: int) -> int | None:
        """Owed slots that may be sent now: None, any number (a slice's worth); 0, none yet.

        ``sent_total``: every message this poller sent so far (on-time slots too: they fill the
        same queues, and the drain is what was there and sent less what is there now)."""
        self._sent = max(self._sent, sent_total)
        self._rebase(now)
        self._read(now)
        if self._waiting is None:
            # Never read yet, its first read (off the loop) still running: wait for it, briefly
            asked = self._asked_at
            if (
                asked is not None
                and self._read_at is None
                and now - asked < timedelta(seconds=READ_TIMEOUT_S)
            ):
                return 0
            return None
        if self._drained_at is not None and now - self._drained_at >= timedelta(seconds=NO_DRAIN_S):
            return None  # nothing takes the queues: holding would share nothing
        room = self.window - (self._waiting - self.standing(now) + self._sent - self._sent_at_read)
        if room > 0:
            self._held = False
            return room
        if self._last_release is None:
            self._last_release = now  # (the floor counts from the first hold)
        if now - self._last_release >= timedelta(seconds=FLOOR_EVERY_S):
            return 1  # the floor: one timer, whatever the figures say
        if not self._held:
            self._held = True
            self.holds += 1
            rate = self.drain_rate(now)
            log.info(
                "catch-up waits: %d message(s) waiting in the short lane, the workers take %s a second",
                self._waiting + self._sent - self._sent_at_read,
                "?" if rate is None else f"{rate:.0f}",
            )
        return 0

    def released(self, now: datetime) -> None:
        """Owed slots were just sent (the floor's clock)."""
        self._last_release = now

    def next_look(self, now: datetime) -> datetime:
        """When :meth:`allowance` may say something else than 0: the next read, or the floor."""
        read = (self._read_at or now) + timedelta(seconds=READ_EVERY_S)
        if self._last_release is None:
            return read
        return min(read, self._last_release + timedelta(seconds=FLOOR_EVERY_S))

    def drain_rate(self, now: datetime) -> float | None:
        """Messages the workers took a second, over the last :data:`DRAIN_WINDOW_S` (None: not
        measured yet)."""
        while self._drains and now - self._drains[0][0] > timedelta(seconds=DRAIN_WINDOW_S):
            self._drains.popleft()
        seconds = sum(d[1] for d in self._drains)
        if seconds <= 0:
            return None
        return sum(d[2] for d in self._drains) / seconds

    def standing(self, now: datetime) -> int:
        """Messages the count stood on and not under for the last :data:`STANDING_S`, at least a
        window of them (0: none).

        A backlog the workers take goes down: the lowest count of the last ``STANDING_S`` is
        under the lowest of the ``STANDING_S`` before. One that does not, while the workers take
        what comes on top (the poller's sends run), is messages no worker takes now: a ``queue``
        job's slots in their FIFO group behind its running one, or a count behind. Those are no
        line in front of what is sent next; counted, they held another tenant's catch-up at one
        timer every 15 s for as long as they stood (QA 2026-12-07). Below a window the pace
        itself keeps the queues refilled, so no such level is taken for one.
        """
        older = [w for at, w in self._counts if now - at >= timedelta(seconds=STANDING_S)]
        recent = [w for at, w in self._counts if now - at < timedelta(seconds=STANDING_S)]
        if not older or not recent:
            return 0
        low = min(older)
        return low if min(recent) >= low >= self.window else 0

    def _rebase(self, now: datetime) -> None:
        """A clock set back (a time noted after ``now``): each wait counts from ``now`` and the next
        read is due, else the figures froze and the floor waited until the clock came back to
        where it was (a minute set back held a catch-up a minute more)."""
        noted = (self._read_at, self._drained_at, self._last_release, self._asked_at)
        if all(at is None or at <= now for at in noted):
            return
        if self._read_at is not None and self._read_at > now:
            self._read_at = now - timedelta(seconds=READ_EVERY_S)
        if self._drained_at is not None:
            self._drained_at = min(self._drained_at, now)
        if self._last_release is not None:
            self._last_release = min(self._last_release, now)
        if self._asked_at is not None:
            self._asked_at = min(self._asked_at, now)
        self._drains = deque(d for d in self._drains if d[0] <= now)
        self._counts = deque(c for c in self._counts if c[0] <= now)

    def _read(self, now: datetime) -> None:
        if self.count is None:
            return
        if self._read_at is not None and now - self._read_at < timedelta(seconds=READ_EVERY_S):
            return
        try:
            count = self.count
            if isinstance(count, BackgroundCount):  # (the figure of what was sent as it began)
                figure, sent = count.ask(self._sent)
            else:
                figure, sent = count(), self._sent
            waiting = max(0, int(figure))
        except NotYet:  # (a read off the loop, still running: the figures stay as they were)
            self._asked_at = self._asked_at or now
            if now - self._asked_at >= timedelta(seconds=READ_TIMEOUT_S) and self._waiting is not None:
                log.warning(
                    "the short lane's backlog read has not answered in %.0f s: catch-up goes unpaced",
                    READ_TIMEOUT_S,
                )
                self._waiting = None
            return
        except Exception:
            self._asked_at = None
            if not self._warned:
                self._warned = True
                log.warning("reading the short lane's backlog failed: catch-up goes unpaced", exc_info=True)
            self._read_at, self._waiting, self._sent_at_read = now, None, self._sent
            return
        self._asked_at = None
        offered = None if self._waiting is None else self._waiting + sent - self._sent_at_read
        if self._drained_at is None or not offered:
            self._drained_at = now  # (the first read; or nothing offered: nothing to take)
        if self._read_at is not None and offered:  # (queues empty and nothing sent: no figure)
            seconds = (now - self._read_at).total_seconds()
            drained = max(0, offered - waiting)
            self._drains.append((now, seconds, drained))
            # A drain seen: some taken, and the count moved (or is under the window: nothing to
            # hold). A count that stays put while the poller sends (one behind that froze, or
            # messages no worker can take: FIFO groups behind a running slot) shows nothing of
            # its sends, and that is no sign of workers taking them.
            if drained and (waiting != self._waiting or waiting < self.window):
                self._drained_at = now
            elif waiting > offered:
                # Up by more than it sent: others send here too (other shard groups, the resend
                # watch), and what they sent hides what was taken. No sign that nothing drains:
                # taken for one, every group went unpaced and flooded the queues (QA31).
                self._drained_at = now
            rate = self.drain_rate(now) or 0.0
            if waiting == 0:  # the workers took everything offered: offer more
                self.window = min(MAX_WINDOW, max(2 * self.window, int(rate * TARGET_S)))
            else:
                self.window = min(MAX_WINDOW, max(MIN_WINDOW, int(rate * TARGET_S)))
        self._counts.append((now, waiting))
        while now - self._counts[0][0] > timedelta(seconds=2 * STANDING_S):
            self._counts.popleft()
        self._read_at, self._waiting, self._sent_at_read = now, waiting, sent


def spend(
    release: Callable[[int], ReleaseReport],
    left: Callable[[], bool],
    slots: int,
    timers: int,
    into: ReleaseReport | None = None,
) -> ReleaseReport:
    """Release owed timers (``release(n)``: at most n of them) until about ``slots`` messages went
    out, at most ``timers`` timers, while ``left()`` says some are left; each batch's report is
    merged into ``into`` as it comes (a batch that fails does not lose what the ones before sent).

    The allowance is in slots and a timer holds 1 to :data:`MAX_RELEASE_PER_TIMER` of them: a
    CATCHUP timer up to 30, a past minute's fire timer mostly one. Counting each as 30 (QA: a dead
    poller's minute of 1,000 one-slot timers went out one timer a slice, 20 slots a second with
    workers claiming 1,000, its last slot 25 s later than unpaced) held what the window had room
    for. So the first batch counts each timer as a whole CATCHUP timer, and each next one takes
    what the allowance has left at the slots a timer released so far, at most twice the batch
    before (a batch of another kind of timer overshoots by little).
    """
    report = ReleaseReport()
    taken, batch = 0, 0
    while taken < timers and report.released < slots and (not taken or left()):
        per_timer = MAX_RELEASE_PER_TIMER if not taken else max(1, -(-report.released // taken))
        n = max(1, min(timers - taken, (slots - report.released) // per_timer))
        if batch:
            n = min(n, 2 * batch)
        done = release(n)
        report.merge(done)
        if into is not None:
            into.merge(done)
        taken, batch = taken + n, n
    return report


__all__ = ["CatchUpPace", "spend"]
