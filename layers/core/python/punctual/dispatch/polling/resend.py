"""Re-sending what no worker claimed: the bound on a worker that dies before its handler runs.

A Lambda worker leases its batch's messages for seconds as soon as its handler starts
(:mod:`punctual.execution.batch`). One that dies *before* that (an init failure, a crash while
the runtime starts) leaves the batch in flight for the short queue's visibility timeout, which
the event source mapping requires to be at least the function's (960 s), and FIFO keeps the
message's group behind it for as long.

The poller is alive all its minute, so it watches what it sends to the Lambda lane: a few
seconds after a message (a slot's first attempt, a retry, a takeover, a dependant's slot) was
sent, it reads the slot's record (one eventually consistent read per message, batched by 100).
A message whose attempt no worker has recorded yet is sent again with ``resend`` n + 1: another
message group and deduplication id (:attr:`punctual.dispatch.queues.DispatchMessage.group_id`), so it
passes a group held by a dead worker, and the claim keeps the slot to one run whichever copy
comes first (the held original is dropped, or repairs, when it comes back). Each message is
re-sent at most :data:`MAX_RESENDS` times, each copy checked as long after its send. A smoothed
message (``not_before``, :mod:`punctual.dispatch.smoothing`) is held in the queue until its instant by
design: it is checked that long after its instant, not after its send.

**A claimed slot whose lease lapsed.** A check that finds the slot claimed but still RUNNING
watches on: at its lease's end (plus :data:`LAPSED_AFTER_S`) it reads the record again, and when
the lease has lapsed (confirmed by a strongly consistent read) it sends a takeover of the next
attempt, again in a group and with a deduplication id of its own. That bounds a double fault the
lease alone does not: the worker of a run dies, its message comes back when its visibility
lapses, and the worker that receives it dies *before its handler holds it* — the message is then
in flight for the queue's whole timeout, no LEASE timer is written on the Lambda lane, and the
slot would stay RUNNING for a quarter of an hour. The claim keeps it to one run: a lease still
live (a heartbeat the eventually consistent read missed) makes the takeover wait, never run.
The watch lasts while the poller does (its minute and grace); runs that outlive it keep the
message's own lease.

**A backlog is not a dead worker.** A message merely waiting behind a burst the workers are
draining is unclaimed too, and a copy of it only joins the same backlog: each is a claim the
workers drop, in front of every later slot (QA 2026-12-07: a tenant's 420-slot catch-up after a
restart drew ~970 such copies, and another tenant's slots behind them ran 18 to 95 s late). So an
unclaimed message is re-sent only when the workers went past it (a message sent after it to the
same queue is claimed) or when no message sent before it was claimed in the last ``after_s`` (an
idle queue, or workers that claim nothing); otherwise it is checked again in a second
(:meth:`ResendWatch._skipped`, ``UnclaimedWaitingInBacklog``). A message a dead worker holds is
then re-sent ``after_s`` after the workers reached it, not after its send. One still waiting at the
watch's last check (its poller's end) is re-sent then, as before, rather than never. A copy's slot
found claimed says nothing of the workers reaching the copy's place (the claim may be its
original's): only an original's claim marks the queue consumed up to it.

**Other senders' backlogs.** Each shard group's poller has a watch of its own, and all send to the
same queues: a backlog of the other groups' messages the workers drain holds this poller's too,
with no claim of its own to show for it. So with no claim of its own in the last ``after_s``, the
watch goes by the queue's waiting count (every sender's messages, :mod:`.resend_backlog`): an
unclaimed message is held while the count is fresh, over 0 and fell within ``after_s``, until the
workers took as many as waited when it was first held; re-sent as before when the count cannot
be read, is 0 (a message a worker holds is not counted), stood for ``after_s``, after
:data:`.resend_backlog.HOLD_PERIODS` periods held so (the falls undercount a drain while others
send: steady traffic would hold it to the watch's end), or at the watch's end. A message a dead
worker holds behind another group's backlog is so re-sent once what waited in front of it drained
(the falls seen add up to it), the count stops falling, or two periods after it was first held so
(``3 * after_s`` and a second after its send when held from its first check), not ``after_s``
after its send (``tests/unit/test_resend_shared_queues.py``). A queue whose count reads had
stopped (its messages claimed before their checks) has no fall to go by at the first check that
finds one unclaimed: that message is held up to :data:`.resend_backlog.RESTART_S` while the reads
restart, unless a fresh count says nothing waits (so a message a dead worker holds on an idle queue
is re-sent about a second later than ``after_s``: the count's read answers a loop late).

What it costs: one read unit per two watched messages, one more per lease period for a run that
outlives its first check, a read a second of each message waiting in a backlog, and at most
:data:`MAX_PER_ROUND` re-sends a check round (one a second; all that are due in the watch's last
round, whose next second is past its end); ``GetQueueAttributes`` (off the loop, at
most one a second a queue) over the wait of messages sent to a queue where a check found messages
unclaimed in the last minute, or not read in it: about 6 a minute a queue a poller sends to while
its messages are claimed before their checks.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from punctual.dispatch.polling.resend_backlog import BacklogMark, QueueBacklogs
from punctual.dispatch.queues import DispatchMessage, MessageKind, QueuePort
from punctual.models import Execution, ExecutionStatus
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink
from punctual.store.base import ExecutionKey, JobStore

log = logging.getLogger("punctual.dispatch.polling")

RESEND_AFTER_S = 4.0  # longer than a healthy worker takes to claim (claims are sub-second)
MAX_RESENDS = 3
# A claimed slot's record is read again this long after its lease's end: a live worker renews its
# lease well before it ends (the clock skew and 2 s before: every 5 s at the 12 s lease), so a
# lease lapsed this long means a lost worker.
LAPSED_AFTER_S = 1.0
MAX_TAKEOVERS = 3  # takeover copies the watch sends for one message, at most
MAX_PER_ROUND = 50
MAX_READ_PER_ROUND = 1000
# A poller's last checks try a round that failed (a read throttled: its messages due again at once)
# again this long after, not at once on and on
ROUND_RETRY_S = 0.2
# What a worker records when it claims: the kinds whose claim writes (or advances) the record.
WATCHED = frozenset({MessageKind.FIRE, MessageKind.RETRY, MessageKind.TAKEOVER, MessageKind.CHILD})


@dataclass(order=True)
class _Watched:
    check_at: datetime
    seq: int
    queue: str = field(compare=False)
    message: DispatchMessage = field(compare=False)
    wait_s: float = field(compare=False)
    takeovers: int = field(default=0, compare=False)  # copies sent for a lapsed lease
    place: int = field(default=0, compare=False)  # its place in the queue: the order of the watch's sends
    # When the watch last knew it unclaimed, by the poller's clock: its send, then each check that
    # found it so. A claim found later was made after this, whatever the worker's clock says.
    unclaimed_at: datetime | None = field(default=None, compare=False)
    # The queue's count when it was first held on it (:mod:`.resend_backlog`)
    backlog: BacklogMark | None = field(default=None, compare=False)
    restart_held_at: datetime | None = field(default=None, compare=False)  # first held as reads restarted


def _held_until(message: DispatchMessage) -> datetime:
    """When a worker may claim ``message``: a smoothed one waits in the queue for its instant
    (``not_before``, :mod:`punctual.dispatch.smoothing`), so it is not unclaimed before then."""
    return message.held_until or datetime.min.replace(tzinfo=UTC)


def _lapsed_at(record: Execution) -> datetime | None:
    """When a RUNNING record's lease counts as lost (:data:`LAPSED_AFTER_S` past its end); None
    when the record is not running on a lease."""
    if record.status is not ExecutionStatus.RUNNING or record.lease_until is None:
        return None
    return record.lease_until + timedelta(seconds=LAPSED_AFTER_S)


def claimed(message: DispatchMessage, attempt: int | None) -> bool:
    """Whether a record at ``attempt`` (None: no record) shows the message's attempt claimed: the
    record reached it (running, ended, queued behind the slot before it, or parked)."""
    return attempt is not None and attempt >= message.attempt


def _claimed_record(message: DispatchMessage, records: Mapping[ExecutionKey, Execution]) -> Execution | None:
    """``message``'s slot record when it shows the message's attempt claimed (:func:`claimed`)."""
    record = records.get((message.tenant, message.job_id, message.slot))
    return record if record is not None and claimed(message, record.attempt) else None


class ResendWatch:
    """Watches one poller's sends to the Lambda lane and re-sends what no worker claimed.

    Parameters
    ----------
    store, queues
        Reads the records; re-sends.
    watched_queues
        The queues whose consumer takes its batch before its handler runs (the short lane).
    after_s
        How long a message may go unclaimed before it is re-sent.
    """

    def __init__(
        self,
        store: JobStore,
        queues: QueuePort,
        watched_queues: Collection[str],
        metrics: MetricsSink,
        after_s: float = RESEND_AFTER_S,
    ) -> None:
        self.store = store
        self.queues = queues
        self.watched_queues = frozenset(watched_queues)
        self.metrics = metrics
        self.after_s = after_s
        self._heap: list[_Watched] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()  # a large release sends its chunks from several threads
        # Per queue, what the checks saw of its consumption: the place of the latest-sent message
        # found claimed, and when a check last found one claimed (:meth:`_skipped`).
        self._claimed_upto: dict[str, int] = {}
        self._progress_at: dict[str, datetime] = {}
        # What the queues' counts (every sender's messages) say of a backlog being drained
        self.backlogs = QueueBacklogs.of(queues, after_s)

    def __len__(self) -> int:
        with self._lock:
            return len(self._heap)

    @property
    def active(self) -> bool:
        return self.after_s > 0 and bool(self.watched_queues)

    def watches(self, queue: str) -> bool:
        return self.after_s > 0 and queue in self.watched_queues

    def sent(self, queue: str, messages: Sequence[DispatchMessage], now: datetime) -> None:
        """Note messages sent at ``now`` (the ones of watched kinds to watched queues)."""
        if not self.watches(queue):
            return
        check_at = now + timedelta(seconds=self.after_s)
        self.backlogs.sent(queue, now)
        with self._lock:
            for message in messages:
                if message.kind in WATCHED and message.resend < MAX_RESENDS:
                    at = max(check_at, _held_until(message) + timedelta(seconds=self.after_s))
                    self._push(self._watched(at, queue, message, self.after_s, now))

    def _watched(
        self,
        at: datetime,
        queue: str,
        message: DispatchMessage,
        wait_s: float,
        sent_at: datetime,
        takeovers: int = 0,
    ) -> _Watched:
        """A message sent at ``sent_at``, checked at ``at``: its place in the queue is the end."""
        seq = next(self._seq)
        return _Watched(at, seq, queue, message, wait_s, takeovers, place=seq, unclaimed_at=sent_at)

    def _again(self, entry: _Watched, at: datetime, unclaimed_at: datetime | None = None) -> _Watched:
        """``entry`` checked again at ``at`` (its place in the queue kept); ``unclaimed_at``: a check
        found it unclaimed then."""
        seen = unclaimed_at or entry.unclaimed_at
        return replace(entry, check_at=at, seq=next(self._seq), unclaimed_at=seen)

    def _push(self, entry: _Watched) -> None:
        heapq.heappush(self._heap, entry)

    def next_check(self) -> datetime | None:
        """When :meth:`check` is next due: a message's check, or a read of a count its check may
        go by (none when no message is watched)."""
        with self._lock:
            if not self._heap:
                return None
            check = self._heap[0].check_at
        read = self.backlogs.next_read()
        return check if read is None else min(check, read)

    def last_checks(
        self,
        clock: Clock,
        first_end: datetime,
        check_round: Callable[[datetime], object],
        stop: Callable[[], bool],
    ) -> None:
        """A poller's last checks: ``check_round(ends_at)`` at each check due by ``first_end`` (the
        first check of what it sent last). They never outlast the invocation: once ``stop`` says
        its time is nearly out, the rounds due within a second are the last (they re-send what they
        find unclaimed, as the watch's end does) and they end; and a round that failed (its
        messages due again at once) is tried again :data:`ROUND_RETRY_S` later, so they end by the
        clock too (review: a store failing held a poller in them until killed).

        They do not stay on for messages held in a backlog the workers drain: tried (8 s more while
        one was held, 2026-12-07), a catch-up in local mode drew 484 copies and another tenant's
        slots up to 14 s late against 11 copies and 4.9 s without it (the pollers' reads each second
        of a long held backlog weigh on the store the workers claim through)."""
        last: datetime | None = None
        stop_end: datetime | None = None  # (the second after stop came: its rounds are the last)
        while (check := self.next_check()) is not None:
            end = first_end
            if last is not None and check <= last:
                check = last + timedelta(seconds=ROUND_RETRY_S)
            if stop_end is None and stop():
                stop_end = clock.now() + timedelta(seconds=1)
            if stop_end is not None:
                end = min(end, stop_end)
            if check > end:
                return
            clock.sleep(max(0.0, (check - clock.now()).total_seconds()))
            last = clock.now()
            check_round(end if stop_end is None else min(end, last))

    def check(self, now: datetime, ends_at: datetime | None = None) -> int:
        """Read the records of the messages due a check; re-send the unclaimed. Returns how many
        were re-sent. Raises if the read or a send fails (what was due is checked again).
        ``ends_at``: when the watch ends (its poller's last checks), so a message whose next check
        would come after it is re-sent now rather than never."""
        with self._lock:
            due: list[_Watched] = []
            while self._heap and self._heap[0].check_at <= now and len(due) < MAX_READ_PER_ROUND:
                due.append(heapq.heappop(self._heap))
        if not due:
            self.backlogs.observe(now)
            return 0
        try:
            keys: set[ExecutionKey] = {(w.message.tenant, w.message.job_id, w.message.slot) for w in due}
            records = self.store.batch_get_executions(keys, consistent=False)
        except Exception:
            with self._lock:
                for entry in due:
                    self._push(entry)
            raise
        again: dict[str, list[DispatchMessage]] = {}
        later: list[_Watched] = []
        count = waiting = 0
        # Copies a round: at most MAX_PER_ROUND, but none left over in the watch's last round (its
        # next second is past the watch's end: the rest would wait for the queue's timeout)
        room = MAX_PER_ROUND if ends_at is None or now + timedelta(seconds=1) <= ends_at else len(due)
        # Each message with its record when the record shows it claimed (None: unclaimed)
        found = [(entry, _claimed_record(entry.message, records)) for entry in due]
        for entry, record in found:
            if record is not None:
                self._consumed(entry, record, now)
        # Unclaimed ones: their queues' counts are read a period more
        self.backlogs.unclaimed({entry.queue for entry, record in found if record is None}, now)
        self.backlogs.observe(now)
        for entry, record in found:
            message = entry.message
            if record is not None:
                follow = self._running(entry, record, now)
                if isinstance(follow, _Watched):
                    later.append(follow)
                elif follow is not None and count < room:
                    again.setdefault(entry.queue, []).append(follow)
                    count += 1
                    later.append(self._after_takeover(entry, follow, now))
                elif follow is not None:
                    later.append(self._again(entry, now + timedelta(seconds=1)))
                continue
            if count >= room or not self._skipped(entry, now, ends_at):
                # A backlog the workers are draining (or a busy queue, more likely than that many
                # dead workers): a copy would only join it. Checked again in a second.
                waiting += 1
                later.append(self._again(entry, now + timedelta(seconds=1), now))
                continue
            copy = replace(message, resend=message.resend + 1, sig="")
            again.setdefault(entry.queue, []).append(copy)
            count += 1
            if copy.resend < MAX_RESENDS:
                # Checked again as soon as the first time: a copy's worker dying too (a sustained
                # fault) costs one more period, not a doubling one.
                at = now + timedelta(seconds=entry.wait_s)
                later.append(self._watched(at, entry.queue, copy, entry.wait_s, now))
        with self._lock:
            for entry in later:
                self._push(entry)
        for queue, messages in again.items():
            self.queues.send(queue, messages)
            log.warning(
                "re-sent %d message(s) no worker claimed within %.0f s (a worker may have died before "
                "its handler ran)",
                len(messages),
                self.after_s,
            )
        if count:
            self.metrics.add("UnclaimedResent", count)
        if waiting:
            self.metrics.add("UnclaimedWaitingInBacklog", waiting)
        return count

    def _consumed(self, entry: _Watched, record: Execution, now: datetime) -> None:
        """Note a message found claimed: its queue was consumed up to its place at least, when its
        worker claimed it: the record's start, by the worker's clock, within what the watch knows by
        its own (after the message was last known unclaimed, never later than now). QA29: workers
        whose clocks were 5 s behind the poller's made a backlog they were draining look idle, and
        every message of it still unclaimed at its check was re-sent, three times.

        A copy's slot found claimed moves the place consumed up to nothing: the claim may be its
        original's, sent long before it (the copy still waiting at the queue's end), and taken for
        the workers past the copy's place, every message sent before the copy and still waiting
        was re-sent in turn (QA 2026-12-07: 300 to 430 copies a catch-up, cascading)."""
        at = record.started_at or record.finished_at or now
        at = min(max(at, entry.unclaimed_at or at), now)
        self._progress_at[entry.queue] = max(at, self._progress_at.get(entry.queue, at))
        if not entry.message.resend:
            self._claimed_upto[entry.queue] = max(entry.place, self._claimed_upto.get(entry.queue, -1))

    def _skipped(self, entry: _Watched, now: datetime, ends_at: datetime | None = None) -> bool:
        """Whether an unclaimed message is held by a dead worker rather than waiting in a backlog.

        Workers take a queue about in the order it was sent, so a message sent after this one that
        is claimed already means the workers went past it: a worker holds it and did not claim it.
        Nothing sent after it claimed, but messages sent before it claimed within the last
        ``after_s`` (their records' starts): the workers are draining a backlog and have not
        reached it, and a copy would only join the backlog's end. No claim that recent (an idle
        queue, or workers that claim nothing): it is re-sent as it always was. So a message a dead
        worker holds is re-sent ``after_s`` after the workers reached it, at its first check on a
        queue that is not backlogged. Its next check past the watch's end (``ends_at``): re-sent
        now, as it always was, since no check would come."""
        if ends_at is not None and now + timedelta(seconds=1) > ends_at:
            return True
        upto = self._claimed_upto.get(entry.queue)
        if upto is not None and upto > entry.place:
            return True
        progress = self._progress_at.get(entry.queue)
        if progress is not None and (now - progress).total_seconds() <= self.after_s:
            return False
        held, entry.backlog = self.backlogs.holds(entry.queue, entry.backlog, now, entry.restart_held_at)
        if held and entry.backlog is None and entry.restart_held_at is None:
            entry.restart_held_at = now  # (held while the reads restart: its hold is counted from now)
        return not held

    def _running(
        self, entry: _Watched, record: Execution, now: datetime
    ) -> _Watched | DispatchMessage | None:
        """For a claimed slot: None when it needs no more watching; the entry checked again at its
        lease's end while it runs; a takeover to send once its lease lapsed (confirmed by a
        strongly consistent read)."""
        lapsed_at = _lapsed_at(record)
        if lapsed_at is None or entry.takeovers >= MAX_TAKEOVERS:
            return None
        if lapsed_at > now:
            return self._again(entry, lapsed_at)
        message = entry.message
        key = (message.tenant, message.job_id, message.slot)
        current = self.store.batch_get_executions([key]).get(key)
        lapsed_at = _lapsed_at(current) if current is not None else None
        if lapsed_at is None:
            return None
        if lapsed_at > now:
            return self._again(entry, lapsed_at)
        assert current is not None and current.lease_until is not None
        log.warning(
            "slot %s of %s is RUNNING as attempt %d with its lease lapsed since %s: sending a takeover",
            message.slot,
            message.job_id,
            current.attempt,
            current.lease_until.isoformat(),
        )
        self.metrics.add("LapsedLeasesTakenOver", 1)
        return replace(
            message,
            attempt=current.attempt + 1,
            kind=MessageKind.TAKEOVER,
            resend=message.resend + 1,
            sig="",
        )

    def _after_takeover(self, entry: _Watched, sent: DispatchMessage, now: datetime) -> _Watched:
        """Watch the takeover just sent as the original was: claimed, or sent again (at its place
        in the queue: the end, now)."""
        at = now + timedelta(seconds=self.after_s)
        return self._watched(at, entry.queue, sent, entry.wait_s, now, entry.takeovers + 1)
