"""Keeping a worker process's leases alive: one thread, about once a second, for every lane.

A lease is seconds (:mod:`punctual.execution.lease`), so whatever runs an attempt must renew it
while the attempt lasts, from outside the target's call (which may block for minutes). The
:class:`LeaseKeeper` does that for one process:

* **held messages** (the Lambda lane, :mod:`punctual.execution.batch`, and an ECS task's messages
  waiting their group's turn, or whose claim runs: :meth:`LeaseKeeper.adopt`, with no request,
  from its receive's visibility): a batch's messages have their visibility set to the *message
  lease* (``message_lease_s``, 7 s) as soon as the batch arrives, and keep it renewed until the
  batch is done with each, whether it has started yet or not, running or not. Every
  :attr:`LeaseKeeper.renew_s` (4 s) the held messages are renewed with the others of their queue
  in one request of up to ten. A run's message is its run's lease (its return is a takeover:
  :func:`punctual.execution.records.message_back`), so one whose renewal cannot land before its
  visibility ends is let go of first (:meth:`Leases.message_lapsing
  <punctual.execution.lease.Leases.message_lapsing>`). A worker that dies gives back within the
  message lease what it held, started or not; so does a run that lost its lease (or handed it
  back) while its thread goes on: its message is renewed no more.
* **live claims** (:class:`LiveClaims`, registered by whoever runs them: :meth:`Worker.process
  <punctual.execution.worker.Worker.process>` and the ECS worker service) have their record's lease
  heartbeated when due (:meth:`Leases.heartbeat_if_due
  <punctual.execution.lease.Leases.heartbeat_if_due>`, every 5 s), and with it the message of a
  claim no keeper holds.

Nothing is written for a run (or a batch) shorter than the first renewal interval: the claim's
own lease and the batch's first visibility cover it.

The writes of one step are made side by side, on up to :data:`BEAT_THREADS` threads
(:class:`_Beats`), and the step waits for them no longer than a tick: a heartbeat (or a renewal)
that is slow (a throttled write retried, a read timeout of 30 s) holds up only its own claim,
never the others' (QA: one keeper thread beating every run in turn let one slow write delay
the rest past their lease, and another worker took over runs still alive: the target called
twice). A claim whose heartbeat is still under way is not beaten again until it returns.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from punctual.delivery.notifications import Notifier
from punctual.dispatch.queues import QueuePort
from punctual.execution.lease import BEAT_SLACK_S, LAPSE_SLACK_S, Leases, beat_interval_s
from punctual.execution.ports import Claim, Delivery, WorkerConfig
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink

log = logging.getLogger("punctual.execution")

TICK_S = 1.0  # how often the keeper looks
BEAT_THREADS = 8  # heartbeats (and renewals) of one process under way at once
BEAT_IDLE_S = 60.0  # a beat thread with nothing to do this long ends


class LiveClaims:
    """The claims a process is running now (thread-safe).

    Without a lock: each call is one operation of the interpreter on a dict keyed by ints (a
    store, a pop, a copy of its values: C calls that run no Python code, which the GIL keeps
    whole), and the keeper's snapshot copies the values before it reads them. A lock taken twice
    a run cost the worker more than the dict itself."""

    def __init__(self, on_end: Callable[[Claim], None] | None = None) -> None:
        self._claims: dict[int, Claim] = {}
        self._on_end = on_end  # a run counted in flight leaves (punctual.execution.inflight)

    def running(self, claim: Claim) -> _Running:
        """Registered while the block runs: the run, its finish, its hand-back (a plain context
        manager: no generator made per claim)."""
        return _Running(self, claim)

    def add(self, claim: Claim) -> None:
        """Register ``claim`` until :meth:`discard` (what :meth:`running` does, for a caller that
        holds it in a ``try``/``finally`` of its own: no context object made per claim)."""
        self._claims[id(claim)] = claim

    def discard(self, claim: Claim) -> None:
        self._claims.pop(id(claim), None)
        if claim.in_flight and self._on_end is not None:
            self._on_end(claim)

    def snapshot(self) -> list[Claim]:
        return [claim for claim in list(self._claims.values()) if claim.live]

    def let_go(self) -> list[Claim]:
        """The claims still running here whose lease is no longer theirs (lost, or handed back),
        their thread going on (a target that ignores its cancel): their messages are not to be
        kept hidden (:meth:`LeaseKeeper.step`)."""
        return [claim for claim in list(self._claims.values()) if claim.lost or claim.released]

    def __len__(self) -> int:
        return len(self._claims)


class _Running:
    """:meth:`LiveClaims.running`'s context: the claim registered from enter to exit."""

    __slots__ = ("claim", "live")

    def __init__(self, live: LiveClaims, claim: Claim) -> None:
        self.live = live
        self.claim = claim

    def __enter__(self) -> Claim:
        self.live.add(self.claim)
        return self.claim

    def __exit__(self, *exc: object) -> None:
        self.live.discard(self.claim)


class KeptWorker(Protocol):
    """What the keeper needs of a worker (:class:`punctual.execution.worker.Worker` is one).

    Declared here, where it is used, so that this module never imports the worker that uses it.
    """

    @property
    def config(self) -> WorkerConfig: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def queues(self) -> QueuePort: ...

    @property
    def metrics(self) -> MetricsSink: ...

    @property
    def leases(self) -> Leases: ...

    @property
    def notifier(self) -> Notifier: ...

    @property
    def live(self) -> LiveClaims: ...


@dataclass
class _Held:
    queue_url: str
    receipt: str
    since: datetime  # when its visibility was last set


class _Beats:
    """The keeper's writes, made side by side on up to ``threads`` daemon threads (started as
    needed), at most one at a time per key (a claim, a queue's renewal)."""

    def __init__(self, threads: int) -> None:
        self._size = threads
        self._lock = threading.Lock()
        self._busy: set[Hashable] = set()
        self._started = 0
        self._tasks: queue.SimpleQueue[tuple[Hashable, Callable[[], object], threading.Event]] = (
            queue.SimpleQueue()
        )

    def submit(self, key: Hashable, write: Callable[[], object]) -> threading.Event | None:
        """Make ``write`` on a beat thread; set when done. None when ``key``'s last write is still
        under way (it is not queued behind it)."""
        done = threading.Event()
        with self._lock:
            if key in self._busy:
                return None
            self._busy.add(key)
            self._tasks.put((key, write, done))
            if self._started < min(self._size, len(self._busy)):
                self._started += 1
                threading.Thread(target=self._work, name="lease-beat", daemon=True).start()
        return done

    def idle(self, timeout_s: float) -> bool:
        """Wait until no write is under way (at most ``timeout_s``); whether none is."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                if not self._busy:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)

    def _work(self) -> None:
        while True:
            try:
                key, write, done = self._tasks.get(timeout=BEAT_IDLE_S)
            except queue.Empty:
                with self._lock:  # (a write is only queued under the lock: none is left behind)
                    if self._tasks.empty():
                        self._started -= 1
                        return
                continue
            try:
                write()
            except Exception:  # each write logs its own failure; never let a beat thread die
                log.exception("lease keeper write failed")
            finally:
                with self._lock:
                    self._busy.discard(key)
                done.set()


class LeaseKeeper:
    """Heartbeats a worker's live claims and renews the messages its batches hold.

    Parameters
    ----------
    worker
        Its :attr:`~punctual.execution.worker.Worker.live` claims and its leases.
    beat_s
        Heartbeat live claims this often instead of when their lease asks for it (tests).
    tick_s
        How often the thread looks.
    """

    def __init__(self, worker: KeptWorker, beat_s: float | None = None, tick_s: float = TICK_S) -> None:
        self.worker = worker
        self.beat_s = beat_s
        self.tick_s = tick_s
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], _Held] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._beats = _Beats(BEAT_THREADS)
        worker.leases.held_until = self.held_until  # a held run's message: its lease is ours
        worker.leases.hold = lambda delivery, since: self.adopt(delivery.queue_url, delivery.receipt, since)

    @property
    def lease_s(self) -> int:
        return self.worker.config.lease_s

    @property
    def message_lease_s(self) -> int:
        """The visibility of a held message that is not running (:attr:`WorkerConfig.message_visibility_s
        <punctual.execution.ports.WorkerConfig.message_visibility_s>`)."""
        return self.worker.config.message_visibility_s

    @property
    def renew_s(self) -> float:
        """How often a held message is renewed: early enough for two tries, a tick apart, before
        a run's message is let go of (:meth:`_lapsing`, a tick before :data:`LAPSE_SLACK_S
        <punctual.execution.lease.LAPSE_SLACK_S>` before its visibility ends): the message lease
        less a tick and a request's time (:data:`BEAT_SLACK_S
        <punctual.execution.lease.BEAT_SLACK_S>`) and a tick more, 4 s of the 7 s; never less often
        than its run's heartbeat (:func:`~punctual.execution.lease.beat_interval_s`). Review: renewed
        at 5 s, a renewal that stalled was let go of only at 7 s, as its message was back."""
        return min(beat_interval_s(self.lease_s), max(1.0, self.message_lease_s - BEAT_SLACK_S - TICK_S))

    # ------------------------------------------------------------------ held messages

    def hold(self, queue_url: str, receipts: list[str], now: datetime) -> None:
        """Give a batch's messages the message lease of visibility now (one request per ten) and
        keep it renewed until :meth:`release`. A message refused alone keeps the queue's visibility
        and is not held: the poller's re-send recovers its slot if the worker dies (polling.resend),
        and its run's heartbeats renew it (:meth:`Leases._hide
        <punctual.execution.lease.Leases._hide>`) and hand it to the keeper."""
        if not receipts:
            return
        try:
            failed = set(
                self.worker.queues.change_visibility_batch(queue_url, receipts, self.message_lease_s)
            )
        except Exception:
            # Held all the same, from now: each keeps the queue's visibility (longer) until its first
            # renewal, which the keeper then tries again each step as for any other (review: left to
            # its run's heartbeats, one refused renewal stopped the run, the takeover calling again)
            log.warning("could not set the visibility of a batch of %d", len(receipts), exc_info=True)
            failed = set()
        with self._lock:
            for receipt in receipts:
                if receipt not in failed:
                    self._held[(queue_url, receipt)] = _Held(queue_url, receipt, now)

    def adopt(self, queue_url: str, receipt: str, since: datetime) -> None:
        """Keep renewing a message whose visibility was set to the message lease at ``since`` (by
        its receive, or a hand-back), with no request now: an ECS task's claimed run is held from
        its claim until :meth:`release`, as a batch's, so its message never lapses before its
        record's heartbeats renew it (QA30: with a run lease of 60 s, its first heartbeat came at
        53 s, and the message was visible again from 8 s under the live run)."""
        with self._lock:
            self._held.setdefault((queue_url, receipt), _Held(queue_url, receipt, since))

    def held_until(self, delivery: Delivery) -> datetime | None:
        """Until when (the worker's clock) a held message is surely hidden: its visibility was last
        set, by a request sent at ``since``, to the message lease. None: not held here."""
        with self._lock:
            held = self._held.get((delivery.queue_url, delivery.receipt))
        return None if held is None else held.since + timedelta(seconds=self.message_lease_s)

    def release(self, queue_url: str, receipt: str) -> None:
        """The batch is done with this message (deleted, returned, or failed with a visibility of
        its own): stop renewing it."""
        with self._lock:
            self._held.pop((queue_url, receipt), None)

    def settle(self, timeout_s: float = 10.0) -> bool:
        """Wait until the heartbeats and renewals under way are made (tests, benchmarks: what they
        wrote is then all counted); whether they were."""
        return self._beats.idle(timeout_s)

    @property
    def held(self) -> int:
        with self._lock:
            return len(self._held)

    # ------------------------------------------------------------------ one step

    def step(self) -> None:
        """Renew what is due: held messages set :attr:`renew_s` ago or more (and the records of the
        claims they carry), then every other live claim whose heartbeat is due. The writes are made
        side by side (:class:`_Beats`); the step waits for them at most ``tick_s``."""
        now = self.worker.clock.now()
        renew = timedelta(seconds=self.renew_s)
        let_go = [c.delivery for c in self.worker.live.let_go() if c.delivery is not None]
        with self._lock:
            # A held message whose run lost its lease (or handed it back) while its thread goes on
            # is renewed no more: it comes back as its record's lease lapses, for another worker
            # to take the run over (QA30 review: renewed as any held message while a target that
            # ignored its cancel hung, it never came back, and the slot silently stopped)
            for gone in let_go:
                self._held.pop((gone.queue_url, gone.receipt), None)
            due = [h for h in self._held.values() if now - h.since >= renew]
        claims = self.worker.live.snapshot()
        by_message = {(c.delivery.queue_url, c.delivery.receipt): c for c in claims if c.delivery is not None}
        due = self._lapsing(due, by_message, now)
        held_keys = {(h.queue_url, h.receipt) for h in due}
        writes: list[threading.Event | None] = []
        for key in held_keys:
            held_claim = by_message.get(key)
            if held_claim is not None and self._beat_due(held_claim, now):
                # Its record's lease (for the pollers and any other copy of its message); its
                # message is renewed below, with its batch
                writes.append(self._beats.submit(id(held_claim), self._beater(held_claim, message=False)))
        by_queue: dict[str, list[_Held]] = {}
        for held in due:
            by_queue.setdefault(held.queue_url, []).append(held)
        for queue_url, items in by_queue.items():
            writes.append(
                self._beats.submit(
                    ("renew", queue_url), functools.partial(self._renew, items, by_message, now)
                )
            )
        if due:
            # A batch that outlives its first lease margin holds a long run: the events its claims
            # buffered (their started events) go out now, not with the batch's end, minutes away,
            # or never if the worker dies (QA: a worker killed mid-run left its attempt no event)
            self.worker.notifier.flush_soon()
        with self._lock:
            holding = set(self._held)
        for claim in claims:
            delivery = claim.delivery
            held_key = (delivery.queue_url, delivery.receipt) if delivery is not None else None
            if held_key in holding:
                # Its message (and so its record) is renewed with its batch. A record whose beat
                # with it failed (the store throttled) is tried again at each step while it is due
                # (QA: only with the message's next renewal, a beat interval on, by when the lease
                # had lapsed under the live run and a takeover could start it again; QA29: tried
                # again only once the lease was about to lapse, 1 to 2 s after a worker whose clock
                # was 5 s ahead could see it lapsed)
                if held_key not in held_keys and self._beat_due(claim, now):
                    writes.append(self._beats.submit(id(claim), self._beater(claim, message=False)))
                continue
            if self.beat_s is not None:
                last = claim.last_heartbeat
                if last is None or (now - last).total_seconds() >= self.beat_s:
                    writes.append(self._beats.submit(id(claim), self._beater(claim, message=True)))
            elif self.worker.leases.due(claim):
                writes.append(self._beats.submit(id(claim), self._beater(claim, message=None)))
        deadline = time.monotonic() + self.tick_s
        for done in writes:
            if done is not None:
                done.wait(max(deadline - time.monotonic(), 0.0))

    def _beat_due(self, claim: Claim, now: datetime) -> bool:
        """Whether a held claim's record is to be heartbeated: when its lease asks, or every
        ``beat_s`` when set (an ECS task's claimed runs are held too)."""
        if self.beat_s is None:
            return self.worker.leases.due(claim)
        last = claim.last_heartbeat
        return last is None or (now - last).total_seconds() >= self.beat_s

    def _lapsing(
        self, due: list[_Held], by_message: dict[tuple[str, str], Claim], now: datetime
    ) -> list[_Held]:
        """``due`` less the messages of runs whose lease ends now: their visibility, not renewed in
        time (a renewal failing, or under way too long, or a process frozen), may lapse before
        another renewal lands, and the message's return is a takeover. Their runs are let go of
        (:meth:`Leases.message_lapsing <punctual.execution.lease.Leases.message_lapsing>`)."""
        keep = []
        last_step = now + timedelta(seconds=TICK_S)  # (the next step may come too late)
        for held in due:
            claim = by_message.get((held.queue_url, held.receipt))
            if claim is not None and last_step >= self._lapses(held):
                self._let_go(held, claim)
            else:
                keep.append(held)
        return keep

    def _lapses(self, held: _Held) -> datetime:
        """When a held run's message must be renewed by: its visibility's end less the slack."""
        return held.since + timedelta(seconds=self.message_lease_s - LAPSE_SLACK_S)

    def _let_go(self, held: _Held, claim: Claim) -> None:
        with self._lock:
            self._held.pop((held.queue_url, held.receipt), None)
        self.worker.leases.message_lapsing(claim)

    def _renew(self, items: list[_Held], claims: dict[tuple[str, str], Claim], now: datetime) -> None:
        """One queue's held messages due: a fresh message lease of visibility each, ten a request.

        A run's message (``claims``, by queue and receipt) whose renewal failed stays held: the next
        step tries again, or lets its run go when that would land too late (:meth:`_lapsing`,
        which has already kept out of ``items`` every message due for that now). Any other message
        refused alone is held no more (its visibility brings it back).

        Only those still held as it is sent: one released since the step picked it (its run let
        go, its batch returned it) is not hidden again (it waited for a beat thread, behind slow
        writes as long as a read timeout). One released while the request is under way may still
        be renewed once: a request's time, not worth a lock held across it."""
        queue_url = items[0].queue_url
        with self._lock:
            items = [h for h in items if self._held.get((h.queue_url, h.receipt)) is h]
        if not items:
            return
        try:
            receipts = [h.receipt for h in items]
            failed = set(
                self.worker.queues.change_visibility_batch(queue_url, receipts, self.message_lease_s)
            )
            answered = True
        except Exception:  # (every message is tried again at the next step)
            log.warning("renewing the visibility of %d messages failed", len(items), exc_info=True)
            failed, answered = {h.receipt for h in items}, False
        self.worker.metrics.add("VisibilityRenewals", len(items) - len(failed))
        with self._lock:
            for held in items:
                key = (queue_url, held.receipt)
                if held.receipt not in failed:
                    if key in self._held:
                        held.since = now
                elif answered and key not in claims:  # refused for it alone: its visibility brings it back
                    self._held.pop(key, None)

    def _beater(self, claim: Claim, message: bool | None) -> Callable[[], None]:
        """The heartbeat of ``claim`` (``message=None``: when its lease asks for it)."""

        def beat() -> None:
            try:
                if message is None:
                    self.worker.leases.heartbeat_if_due(claim)
                else:
                    self.worker.leases.heartbeat(claim, message=message)
            except Exception:
                log.exception("heartbeat of %s %s failed", claim.message.job_id, claim.message.slot)

        return beat

    # ------------------------------------------------------------------ the thread

    def start(self) -> LeaseKeeper:
        """Run :meth:`step` every ``tick_s`` in a daemon thread (once; later calls do nothing)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        took = 0.0
        # Each step a tick after the last began, not after it ended: a step waits for its writes up
        # to a tick, and ticks that drifted by each step's length left the renewals' deadlines late
        while not self._stop.wait(max(0.0, self.tick_s - took)):
            began = time.monotonic()
            try:
                self.step()
            except Exception:  # never let the keeper die: every lease of the process rests on it
                log.exception("lease keeper step failed")
            took = time.monotonic() - began
