"""What the short queues' own counts say of an unclaimed message: waiting in a backlog that some
worker drains, or not.

The re-send watch (:mod:`.resend`) sees only its own poller's sends: when several shard groups'
pollers send to the same queues, a backlog of the others' messages the workers are draining
holds this poller's messages too, and none of its own is claimed meanwhile. That looked like an
idle queue (or workers that claim nothing), and every message it had waiting there was re-sent
(QA 2026-12-07, four shard groups catching up over the same queues: 34 to 3,700 copies a run, each
a claim the workers drop in front of every later slot).

So the watch also reads how many messages wait in the queue (SQS's
``ApproximateNumberOfMessages``, the count the catch-up pace reads:
:class:`.queue_counts.CountsWaiting`), a count that covers every sender. It reads a queue only
while a check there finds a message unclaimed, at most every :data:`READ_EVERY_S`, off the
poller's loop when the count is remote (:class:`.queue_counts.BackgroundCount`). An unclaimed
message with no claim of its poller's own to go by is held (checked again in a second) only while
all of this holds (:meth:`QueueBacklogs.holds`):

* a figure was read within :data:`FRESH_S` (a count that cannot be read, or whose read has not
  answered, is no evidence: the message is re-sent as before, never held on a guess);
* messages wait (none waiting: the message is not among them, a worker holds it);
* the count fell within the watch's period (``after_s``): someone takes the queue. A count that
  stood or rose that long is no sign of it;
* since the message was first held, the falls seen add up to less than the count then: the
  workers may not have reached it yet. Once they took as many as waited then (falls are a lower
  bound of what they took: the others' sends in between hide some), its turn is past, and it is
  re-sent. That bounds a message a dead worker holds (not counted: it is in flight) behind the
  others' backlog: re-sent once what waited in front of it drained, or the count stops falling
  for ``after_s``;
* it was first held less than :data:`HOLD_PERIODS` periods ago. The falls undercount what the
  workers take while others send (a count hovering at 50 under steady traffic, one fall every two
  seconds, held a message a dead worker had for 100 s: to its poller's end, though the workers
  reached it in 5 s), and a lagging count falls late: so a message held on the count alone is
  re-sent at most ``HOLD_PERIODS * after_s`` (and a second) after it was first held so, which is
  ``(1 + HOLD_PERIODS) * after_s`` after its send when held from its first check. A backlog of
  the others' longer than that in front of it costs one copy of it (the copy is held as long).

One more case holds a message, briefly: the queue's reads have just (re)started (they stop while
the poller's messages are claimed before their checks) and no figure since shows a fall yet. A
first figure has nothing to fall from, so the first message found unclaimed in a new backlog was
re-sent at once, however fast the workers drained it (CI, stop 62: a wasted copy in a third of
the four-group catch-ups). It is held (no mark) for :data:`RESTART_S`, the two reads a fall needs
off the loop, unless a fresh figure says nothing waits or the reads fail; a message a dead worker
holds pays those seconds at most once an episode, within its :data:`HOLD_PERIODS` (counted from
its first hold of either kind, so the bound above stands).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from punctual.dispatch.polling.queue_counts import (
    BackgroundCount,
    CountsWaiting,
    NotYet,
    counts_remotely,
    read_by,
)

log = logging.getLogger("punctual.dispatch.polling")

READ_EVERY_S = 1.0  # a queue's count is read at most this often
# A queue where a check found messages unclaimed this lately is read over the next sends' wait
EPISODE_S = 60.0
# A figure older than this is no evidence (a read off the loop that has not answered since, or a
# queue no check found a message unclaimed in): the watch re-sends as it did without counts.
FRESH_S = 3.0
# A message is held on the count alone at most this many watch periods (``after_s``) from when it
# was first held: the falls undercount what the workers take while others send (steady traffic:
# a count hovering at 50 that falls by one every two seconds held a message a dead worker had
# for 100 s, past its poller's end, though the workers reached it in 5 s).
HOLD_PERIODS = 2.0
# A queue whose reads (re)started this lately, with no fall seen since, is no evidence either way
# yet: a remote read answers one read late, so a fall shows on the third read (at 2 s).
RESTART_S = 3 * READ_EVERY_S


@dataclass
class BacklogMark:
    """What a queue's count said when an unclaimed message was first held on it."""

    falls: int  # the queue's falls so far (:attr:`_Queue.falls`)
    waiting: int  # messages waiting then: at most that many were in front of it
    at: datetime  # when (held on the count at most :data:`HOLD_PERIODS` periods from then)


@dataclass
class _Queue:
    count: Callable[[], int] | BackgroundCount
    until: datetime | None = None  # read until then (None: not wanted)
    wanted_at: datetime | None = None  # when it was last wanted after a time not wanted
    asked_at: datetime | None = None  # when a read was last asked for
    read_at: datetime | None = None  # when the last figure came
    waiting: int | None = None  # that figure (None: none, or the read failed)
    falls: int = 0  # every fall of the count from one figure to the next, added up
    fell_at: datetime | None = None  # the last figure under the one before it
    unclaimed_at: datetime | None = None  # when a check last found a message unclaimed here
    failed: bool = False  # the last read failed


class QueueBacklogs:
    """The short queues' counts, read while the watch has unclaimed messages to judge on them.

    Parameters
    ----------
    count
        ``count(queue)``: how many messages wait in ``queue`` (None: the queue port cannot count;
        nothing is ever held on a count).
    remote
        Whether a read goes over the network (then it runs off the poller's loop).
    after_s
        The watch's period: a count that did not fall for that long is no sign of a drain.
    """

    def __init__(self, count: Callable[[str], int] | None, remote: bool, after_s: float) -> None:
        self._count = count
        self._remote = remote
        self.after_s = after_s
        self._queues: dict[str, _Queue] = {}
        self._lock = threading.Lock()
        self._warned = False

    @classmethod
    def of(cls, queues: object, after_s: float) -> QueueBacklogs:
        if not isinstance(queues, CountsWaiting):
            return cls(None, False, after_s)
        counting = queues
        return cls(lambda url: counting.waiting([url]), counts_remotely(queues), after_s)

    def unclaimed(self, queues: Collection[str], now: datetime) -> None:
        """A check found messages unclaimed in ``queues``: read their counts for a period more."""
        with self._lock:
            for url in queues:
                queue = self._want(url, now)
                if queue is not None:
                    queue.unclaimed_at = now

    def sent(self, url: str, now: datetime) -> None:
        """Messages were just sent to ``url``: their checks will want its count over their wait
        when a check found messages unclaimed there in the last :data:`EPISODE_S`, or it was not
        read that lately. So a queue whose messages are claimed before their checks is read a
        period a minute while the poller sends, not on and on: a count over 0 is no backlog in
        front of this poller's messages (review: at 10,000 triggers a second the messages in
        transit keep it over 0, and reading every queue each second all minute was $0.003 per
        million triggers more, 20 pollers over 3 queues)."""
        with self._lock:
            queue = self._queues.get(url)
            if queue is not None and queue.waiting is not None and queue.read_at is not None:
                lately = now - timedelta(seconds=EPISODE_S)
                unclaimed = queue.unclaimed_at is not None and queue.unclaimed_at >= lately
                if queue.read_at >= lately and not unclaimed:
                    return  # (read lately, and nothing found unclaimed lately)
            self._want(url, now)

    def _want(self, url: str, now: datetime) -> _Queue | None:
        if self._count is None:
            return None
        queue = self._queues.get(url)
        if queue is None:
            queue = self._queues[url] = _Queue(self._reader(url))
        until = now + timedelta(seconds=self.after_s + 1)
        if queue.until is None or queue.until < now:  # (not wanted, or no longer: observe not run since)
            queue.wanted_at = now
        queue.until = max(until, queue.until or until)
        return queue

    def next_read(self) -> datetime | None:
        """When a wanted count is next due a read (None: none wanted): at once when wanted, then
        each :data:`READ_EVERY_S`. The poller's loop wakes for it, so the figures cover the sends'
        wait and their first check has falls to go by (due at the window's end, the first read
        came at the first check, with no fall seen: every message there was re-sent)."""
        with self._lock:
            due = [
                max(q.asked_at + timedelta(seconds=READ_EVERY_S), q.wanted_at or q.asked_at)
                if q.asked_at is not None
                else q.wanted_at or q.until
                for q in self._queues.values()
                if q.until is not None
            ]
        return min(due) if due else None

    def observe(self, now: datetime) -> None:
        """Read each wanted count not read in the last :data:`READ_EVERY_S`."""
        todo = []
        with self._lock:
            for queue in self._queues.values():
                if queue.until is not None and queue.until < now:
                    queue.until = None  # (no longer wanted)
                asked = queue.asked_at
                if queue.until is None:
                    continue
                if asked is not None and timedelta(0) <= now - asked < timedelta(seconds=READ_EVERY_S):
                    continue  # (read lately; a clock set back reads again)
                queue.asked_at = now
                todo.append(queue)
        for queue in todo:
            self._read(queue, now)

    def _reader(self, url: str) -> Callable[[], int] | BackgroundCount:
        assert self._count is not None
        return read_by(functools.partial(self._count, url), self._remote)

    def _read(self, queue: _Queue, now: datetime) -> None:
        try:
            reader = queue.count
            figure = reader.ask(0)[0] if isinstance(reader, BackgroundCount) else reader()
            waiting = max(0, int(figure))
        except NotYet:
            return  # (the figure before stays, and ages: FRESH_S)
        except Exception:
            if not self._warned:
                self._warned = True
                log.warning(
                    "reading a short queue's backlog failed: unclaimed messages are re-sent as before"
                )
            queue.waiting, queue.failed = None, True
            return
        queue.failed = False
        before, before_at = queue.waiting, queue.read_at
        if (
            queue.fell_at is not None
            and before_at is not None
            and timedelta(seconds=2 * READ_EVERY_S) < now - before_at <= timedelta(seconds=EPISODE_S)
        ):
            # Not read for a while (the loop was busy, a read hung): time not looked at is no
            # time the count stood, so the fall seen last stays as recent as it was then
            queue.fell_at = min(now, queue.fell_at + (now - before_at) - timedelta(seconds=READ_EVERY_S))
        if before is not None and before_at is not None and waiting < before:
            queue.falls += before - waiting
            if now - before_at <= timedelta(seconds=EPISODE_S):  # (not a fall long ago)
                queue.fell_at = now
        queue.waiting, queue.read_at = waiting, now

    def holds(
        self, url: str, mark: BacklogMark | None, now: datetime, since: datetime | None = None
    ) -> tuple[bool, BacklogMark | None]:
        """Whether an unclaimed message on ``url`` waits in a backlog the workers are draining, and
        its mark (the count when it was first held): see the module docstring. ``since``: when it was
        first held while the reads restarted, the start of its :data:`HOLD_PERIODS` (review of
        873777c6: counted from its mark after that, a message a dead worker held was re-sent up to
        RESTART_S later than the bound, 15 s after its send, not 13)."""
        held, mark = self._drained_by_count(url, mark, now, since)
        if held or mark is not None:
            return held, mark
        # Held as the reads restart at most RESTART_S from its first such hold, however often they
        # restart (a loop that checks less often than a period restarted them at each check, and a
        # count standing over 0 held a message a dead worker had to the watch's end)
        first = since is None or timedelta(0) <= now - since < timedelta(seconds=RESTART_S)
        return first and self._restarting(url, now), mark

    def _restarting(self, url: str, now: datetime) -> bool:
        """Whether ``url``'s reads (re)started within :data:`RESTART_S` with no fall seen since,
        the reads not failing and no fresh figure of 0 waiting: no evidence either way yet."""
        queue = self._queues.get(url)
        if queue is None or queue.failed or queue.wanted_at is None or queue.until is None:
            return False
        if not timedelta(0) <= now - queue.wanted_at < timedelta(seconds=RESTART_S):
            return False
        if queue.fell_at is not None and queue.fell_at >= queue.wanted_at:
            return False  # (a fall seen since: the count's own rule judged it)
        fresh = queue.read_at is not None and queue.read_at >= queue.wanted_at
        return not (fresh and queue.waiting == 0)

    def _drained_by_count(
        self, url: str, mark: BacklogMark | None, now: datetime, since: datetime | None
    ) -> tuple[bool, BacklogMark | None]:
        queue = self._queues.get(url)
        if queue is None or queue.waiting is None or queue.read_at is None:
            return False, mark
        if not timedelta(0) <= now - queue.read_at <= timedelta(seconds=FRESH_S):
            return False, mark  # (no figure lately)
        if queue.waiting == 0 or queue.fell_at is None:
            return False, mark
        if not timedelta(0) <= now - queue.fell_at <= timedelta(seconds=self.after_s):
            return False, mark  # (not falling that long)
        if mark is None:
            return True, BacklogMark(queue.falls, queue.waiting, min(since or now, now))
        if not timedelta(0) <= now - mark.at < timedelta(seconds=HOLD_PERIODS * self.after_s):
            return False, mark  # (held that long already, or the clock was set back)
        return queue.falls - mark.falls < mark.waiting, mark


__all__ = ["FRESH_S", "RESTART_S", "BacklogMark", "QueueBacklogs"]
