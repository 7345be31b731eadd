"""A tenant's runs in flight: counted from their first heartbeat, bounded where the next ones start.

The per-tenant quotas count what a tenant schedules, not how long its runs hold a worker: a Lambda
worker invocation lasts as long as the slowest run of its batch, so one tenant whose targets hang
until their timeout could hold every worker of a lane, and every tenant's slots wait. This module
bounds that at ``maxRunsInFlightPerTenant`` on the short lane (the Lambda workers and the burst
workers) and ``maxLongRunsInFlightPerTenant`` on the ECS long lane (:class:`WorkerConfig`).

**Counting.** Only runs that outlive their first lease are counted: they already write a heartbeat
every few seconds (:mod:`punctual.execution.lease`), and the first heartbeat of each window of
:attr:`RunsInFlight.window_s` (:data:`WINDOW_BEATS` heartbeat intervals: 20 s at the 12 s lease, so
every live run beats in every window; a quarter more writes than the beats') also adds one to its
lane and tenant's counter of that window, on one of :data:`~punctual.store.inflight.IN_FLIGHT_SHARDS`
items (a hash of its job and slot). A run that ends takes its marks back (:meth:`RunsInFlight.ended`,
as it leaves its process); a run whose worker died takes nothing back and drops out when its last
window passes (at most two windows, 24 s, on). A run shorter than its first heartbeat interval writes nothing.

**Reading.** A mark that brings its lane and tenant near the cap (:data:`HOT_FRACTION` of it, as its
shard's count estimates it) also lists the scope in its window's list of scopes near their cap, once
a window per process. A worker reads that list (two items) at most once every :data:`READ_EVERY_S`,
whatever the tenants, and reads the counters of a listed tenant only (the larger of the last two
windows: a live run is in one of them), at most as often per process, lane and tenant. So a
deployment none of whose tenants is near its cap reads two items a worker every few seconds, and
nothing per trigger.

**Holding.** At or over the cap a worker does not claim the tenant's message
(:meth:`RunsInFlight.hold`): nothing is written for the slot, and the message comes back
:data:`AT_CAP_WAIT_S` later, or a first attempt returned before is parked QUEUED with the reason and
a timer that brings it back (:meth:`punctual.execution.parking.Parking.park`): the slot is never
lost, and runs, once, when its tenant's count is under the cap. Takeovers (a run already counted
going on) are never held. Counted as ``RunsHeldAtTenantCap``; each read at the cap logs one
``tenant_runs_at_cap`` line. A counter that cannot be written or read holds nothing.

**Near the cap, from the start.** A run a worker claims for a tenant listed near its cap is
counted at once (:meth:`RunsInFlight.started`: a write at its start and one at its end, for such
tenants only), and in that process's count until its next read: the slots such a tenant starts
together, those waiting at its cap when a wave of its hanging runs ends, are seen by every worker
within :data:`READ_EVERY_S`, not after their first heartbeat.

**What it does not bound: the first wave.** A tenant not yet listed is counted from its runs' first
heartbeat (5 s after their start), and a worker sees the list up to :data:`READ_EVERY_S` later, so
the runs of a tenant that start within those seconds, before any is counted, all start, up to the
lane's workers: a burst of hanging slots at one instant. The cap bounds what is in flight from then
on.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import zlib
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import NamedTuple

from punctual.dispatch.queues import DispatchMessage, MessageKind
from punctual.execution.claim import HOLD_EARLY_S
from punctual.execution.lease import beat_interval_s
from punctual.execution.parking import PARK_AFTER_RECEIVES, Parking
from punctual.execution.ports import Claim, ClaimOutcome, Delivery, WorkerConfig
from punctual.execution.turns import _RUN_AGAIN  # ended records a claim may still start afresh
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink
from punctual.security.message_auth import DispatchSigner
from punctual.store.inflight import IN_FLIGHT_SHARDS, RunsInFlightRepository

log = logging.getLogger("punctual.execution")

WINDOW_BEATS = 4  # heartbeat intervals a window spans
HOT_FRACTION = 0.5  # a scope counting this fraction of its cap is listed for the workers to read
READ_EVERY_S = 3.0  # a process reads a lane and tenant's count at most this often
AT_CAP_WAIT_S = 5  # a message held back at its tenant's cap comes back this long after
SEEN_MAX = 10_000  # counts a process keeps (tenants it saw lately)
# What starts a run; not a takeover (a counted run going on), an alert or a relink
_GATED = frozenset(
    {
        MessageKind.FIRE,
        MessageKind.RETRY,
        MessageKind.MANUAL,
        MessageKind.CHILD,
        MessageKind.TURN,
        MessageKind.CHECK,
        MessageKind.BACKFILL,
    }
)


class Lane(NamedTuple):
    """A lane's counters: its name (in their key), its cap (0: none) and the setting that sets it."""

    name: str
    cap: int
    setting: str


class RunsInFlight:
    """Counts a tenant's runs past their first lease and holds its next runs at the cap.

    Parameters
    ----------
    store
        Where the counters are (a store without them: nothing is counted nor held).
    clock, config, metrics
        As the worker's; ``config.max_runs_in_flight`` and ``config.max_long_runs_in_flight`` are
        the caps (0: none).
    """

    def __init__(self, store: object, clock: Clock, config: WorkerConfig, metrics: MetricsSink) -> None:
        self.store = store if isinstance(store, RunsInFlightRepository) else None
        self.clock = clock
        self.config = config
        self.metrics = metrics
        counted = self.store is not None
        self.short = Lane("short", config.max_runs_in_flight if counted else 0, "maxRunsInFlightPerTenant")
        self.long = Lane(
            "long", config.max_long_runs_in_flight if counted else 0, "maxLongRunsInFlightPerTenant"
        )
        self.window_s = max(2, round(WINDOW_BEATS * beat_interval_s(config.lease_s)))
        self.read_every_s = READ_EVERY_S
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[datetime, int]] = {}  # scope -> (read at, count)
        self._hot_read: tuple[datetime | None, set[str]] = (None, set())  # the scopes near their cap
        self._listed: set[tuple[str, int]] = set()  # (scope, window) this process listed near its cap
        # The counter writes, made in order on a thread of their own (see _later)
        self._writes: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._writer: tuple[int, threading.Thread] | None = None  # (its process, the thread)

    def window(self, now: datetime) -> int:
        return int(now.timestamp() // self.window_s)

    def lane(self, delivery: Delivery | None) -> Lane:
        """The lane of a message from ``delivery``'s queue: the long lane's, else the short one's."""
        return (
            self.long
            if delivery is not None and delivery.queue_url in self.config.long_queue_urls
            else self.short
        )

    # ------------------------------------------------------------------ counting

    def beat(self, claim: Claim, now: datetime) -> None:
        """A run heartbeated at ``now``: counted in this window unless it already is. Never raises."""
        lane = self.lane(claim.delivery)
        if not lane.cap:
            return
        window = self.window(now)
        marks = claim.in_flight
        if marks and marks[-1] == window:
            return
        claim.in_flight = (*marks[-1:], window)  # (taken back if its write fails: the next beat tries)
        self._later(lambda: self._add(claim, lane, window, 1) or self._unmark(claim, window))

    @staticmethod
    def _unmark(claim: Claim, window: int) -> None:
        claim.in_flight = tuple(marked for marked in claim.in_flight if marked != window)

    def started(self, claim: Claim) -> None:
        """A claimed run is about to start. Of a tenant listed near its cap it is counted now, not
        from its first heartbeat, and in this process's count of it until its next read: the runs
        such a tenant starts together (its waiting slots, once a wave of its hanging runs ended) are
        seen within :data:`READ_EVERY_S`. Of any other tenant nothing is written."""
        hot = self._hot_read[1]  # (one tuple, replaced whole: read without the lock)
        if not hot:
            return  # (the usual path: no tenant near its cap)
        lane = self.lane(claim.delivery)
        scope = f"{lane.name}/{claim.message.tenant}"
        if not (lane.cap and scope in hot):
            return
        self.beat(claim, self.clock.now())
        with self._lock:
            seen = self._seen.get(scope)
            if seen is not None:
                self._seen[scope] = (seen[0], seen[1] + 1)

    def ended(self, claim: Claim) -> None:
        """A run left its process (finished, handed back, stopped): its marks of the windows still
        read are taken back. Never raises (a mark not taken back drops out with its window)."""
        marks = claim.in_flight
        if not marks:
            return
        claim.in_flight = ()
        current = self.window(self.clock.now())
        lane = self.lane(claim.delivery)
        for window in marks:
            if window >= current - 1:
                self._later(partial(self._add, claim, lane, window, -1))

    def _later(self, write: Callable[[], object]) -> None:
        """Make ``write`` on this process's counter thread, after the writes asked before it (a
        mark is taken back after it was made). A heartbeat makes a mark: one keeper thread beats
        every run of the process, each under its run's lock, so a counter write that waited (its
        item throttled, an answer lost: seconds of the SDK's retries) held every run's lease
        renewal, and a lease that lapsed meanwhile was taken over while its run went on (QA25
        review). A mark not yet made when its process freezes or ends drops out with its window."""
        self._writes.put(write)
        pid = os.getpid()
        with self._lock:
            writer = self._writer
            if writer is None or writer[0] != pid or not writer[1].is_alive():  # (none since a fork)
                thread = threading.Thread(target=self._write_loop, name="runs-in-flight", daemon=True)
                self._writer = (pid, thread)
                thread.start()

    def _write_loop(self) -> None:
        while True:
            write = self._writes.get()
            try:
                write()
            except Exception:  # (each write logs its own failure: this keeps the thread alive)
                log.warning("a count of runs in flight failed", exc_info=True)

    def drain(self, timeout_s: float = 10.0) -> bool:
        """Wait until the counter writes asked so far are made (tests; whether they were)."""
        done = threading.Event()
        self._later(done.set)
        return done.wait(timeout_s)

    def _add(self, claim: Claim, lane: Lane, window: int, delta: int) -> bool:
        message = claim.message
        scope = f"{lane.name}/{message.tenant}"
        shard = zlib.crc32(f"{message.job_id}/{message.slot}".encode()) % IN_FLIGHT_SHARDS
        expires = (window + 3) * self.window_s + 3600
        try:
            assert self.store is not None
            on_shard = self.store.add_runs_in_flight(scope, window, shard, delta, expires)
        except Exception:
            log.warning("runs in flight of %s not counted (%+d)", scope, delta, exc_info=True)
            return False
        # Near the cap (its shard's count times the shards: an estimate), the scope is listed for
        # the workers to read its count; once a window per process. The mark is made whatever the
        # listing does (QA25 review: a listing that failed left it unrecorded, added again at each
        # beat of the window and never taken back).
        if delta > 0 and on_shard * IN_FLIGHT_SHARDS >= lane.cap * HOT_FRACTION:
            self._list_hot(scope, window, expires)
        return True

    def _list_hot(self, scope: str, window: int, expires: int) -> None:
        """List ``scope`` near its cap in ``window``; never raises (a next mark tries again)."""
        with self._lock:
            if (scope, window) in self._listed:
                return
            if len(self._listed) >= SEEN_MAX:
                self._listed.clear()
            self._listed.add((scope, window))
        try:
            assert self.store is not None
            self.store.mark_hot_in_flight(scope, window, expires)
        except Exception:
            with self._lock:
                self._listed.discard((scope, window))
            log.warning("%s not listed near its cap of runs in flight", scope, exc_info=True)

    def _hot(self, now: datetime) -> set[str]:
        """The scopes listed near their cap in the last two windows, read again when
        :attr:`read_every_s` old: one read of two items per process, whatever the tenants."""
        read_at, hot = self._hot_read  # (one tuple, replaced whole: read without the lock)
        if read_at is not None and self._fresh(read_at, now):
            return hot
        window = self.window(now)
        try:
            assert self.store is not None
            hot = self.store.hot_in_flight((window - 1, window))
        except Exception:
            log.warning("tenants near their cap of runs in flight not read: none held", exc_info=True)
            hot = set()
        with self._lock:
            self._hot_read = (now, hot)
        return hot

    def _fresh(self, read_at: datetime, now: datetime) -> bool:
        """Whether a read made at ``read_at`` is kept at ``now``: younger than :attr:`read_every_s`;
        never one from this clock's future (a step back would keep it until the clock passed it
        again: a tenant held for as long as the step, whatever its count)."""
        return 0 <= (now - read_at).total_seconds() < self.read_every_s

    def count(self, tenant: str, lane: Lane) -> int:
        """The tenant's runs in flight on ``lane`` as this process last read them (again when
        :attr:`read_every_s` old). A read that fails counts none."""
        scope = f"{lane.name}/{tenant}"
        now = self.clock.now()
        if scope not in self._hot(now):
            return 0  # (no read of its counters: far from its cap)
        with self._lock:
            seen = self._seen.get(scope)
        if seen is not None and self._fresh(seen[0], now):
            return seen[1]
        window = self.window(now)
        try:
            assert self.store is not None
            counts = self.store.runs_in_flight(scope, (window - 1, window))
        except Exception:
            log.warning("runs in flight of %s not read: not held", scope, exc_info=True)
            return 0
        # (read eventually consistent: a count a second behind lets that second's starts by, no more)
        count = max(counts.values(), default=0)
        with self._lock:
            if len(self._seen) >= SEEN_MAX:
                self._seen.clear()
            self._seen[scope] = (now, count)
        if count >= lane.cap:
            log.warning(
                "tenant_runs_at_cap %s: runs in flight %d, cap %d (%s): its next runs wait",
                scope,
                count,
                lane.cap,
                lane.setting,
            )
        return count

    # ------------------------------------------------------------------ the gate

    @staticmethod
    def _ended_for_good(message: DispatchMessage, delivery: Delivery | None, parking: Parking) -> bool:
        """A message returned before (:data:`PARK_AFTER_RECEIVES` receives: the pollers' copy of a
        slot, a child's re-send) whose slot has ended for good: held, it would come back every few
        seconds for as long as its tenant stays at its cap, and be sent afresh at its queue's
        dead-letter limit. One read, on this rare path only."""
        if delivery is None or delivery.receive_count < PARK_AFTER_RECEIVES:
            return False
        record = parking.store.get_execution(message.tenant, message.job_id, message.slot)
        return record is not None and record.status.terminal and record.status not in _RUN_AGAIN

    def _smoothed_ahead(self, message: DispatchMessage) -> bool:
        """A smoothed message the claim holds back until its instant anyway (:func:`claim's _hold
        <punctual.execution.claim.Claimer>`): its tenant's cap is looked at when it comes back for
        its instant, so a wait of its own never parks it before (nor moves it off its instant)."""
        until = message.held_until
        return until is not None and int((until - self.clock.now()).total_seconds()) - HOLD_EARLY_S >= 1

    def hold(
        self,
        message: DispatchMessage,
        delivery: Delivery | None,
        parking: Parking,
        signer: DispatchSigner | None,
    ) -> Claim | None:
        """The claim of a message not started because its tenant is at its cap (parked, or back
        :data:`AT_CAP_WAIT_S` later), or None: claim it as usual."""
        lane = self.lane(delivery)
        if not lane.cap or message.kind not in _GATED:
            return None
        count = self.count(message.tenant, lane)
        if count < lane.cap or self._smoothed_ahead(message):  # (the usual path: no tenant near its cap)
            return None
        if signer is not None and not signer.verify(message):
            return None  # the claim drops it, unread: nothing is written for a message not signed
        if self._ended_for_good(message, delivery, parking):
            return None  # a copy of a slot that ran: the claim drops it (held, it would come back for good)
        self.metrics.add("RunsHeldAtTenantCap", 1)
        reason = f"its tenant's runs in flight on the {lane.name} lane: {count}, at its cap ({lane.setting})"
        parked = parking.park(message.job_version, message, delivery, reason)
        if parked is not None:
            return parked
        parking.return_later(delivery, AT_CAP_WAIT_S)
        return Claim(ClaimOutcome.WAITING, message, delivery, return_after_s=AT_CAP_WAIT_S, reason=reason)
