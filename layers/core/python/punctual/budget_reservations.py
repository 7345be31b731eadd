"""Rate budgets shared by every poller of the deployment: a slot's instant is a reservation.

The grid and the lanes are :mod:`punctual.smoothing`'s. What this module adds is who decides
which slot goes on which instant. Each poller alone cannot: since every shard group has two
pollers, each releasing every slot of the group (SQS FIFO keeping one message per slot), two
ledgers in two processes place the same slots in different orders, and the message that wins
the deduplication of slot X may carry one poller's instant while slot Y's carries the other's —
two slots on one instant, the budget broken. So the pollers agree through the table, with
conditional writes only (no leader):

* an instant of a budget's grid is an item per (tenant, target key, instant) owned by one slot
  (``<job>/<slot>``) (:class:`~punctual.store.reservations.BudgetReservationRepository`);
* a poller places a slot on the first instant of its lane at or after ``max(due, head start)``
  that its view shows free, with a conditional write that succeeds when the instant is free or
  already the slot's. A slot that already owns an instant (the other poller of its group placed
  it first) keeps it: both pollers' messages carry that instant, whichever SQS keeps;
* the view is one strongly consistent query of the key's reservations over the range the
  placement looks at, read again at each chunk of a release (:meth:`SharedBudgetLedger.fresh_reads`)
  and after every failed condition (an instant another poller took since: move on). It only
  saves writes: the conditional write alone decides, so a view that is behind costs a failed
  write, never a shared instant. At worst a slot holds two instants (both pollers placed it at
  the same moment, on different ones): one goes unused, no other slot is on either;
* no free instant within the slot's lateness: it is released on time and reported as an
  :class:`~punctual.smoothing.Overrun`, as before;
* a store error while placing never costs the slot: it is placed by this process's own ledger
  (the per-process placement, within the lateness or on time), counted
  (``RateBudgetStoreErrors``) and logged.

Cost, per budgeted slot (only budgeted slots pay anything): one conditional write by the poller
that places it first (the other finds it in its view: nothing, or a repeat write that succeeds
when both place it at once), one failed write and one query for each instant lost to a race, and
the view's query — one per chunk of 100 timers per target key and poller, each reading the
reservations it covers (a strongly consistent read: 1 RCU per 4 KB, about 40 instants).
The items expire a day after their instant (``expires_at``).

Quota: a budget's instants of one minute are one partition key; DynamoDB allows 1,000 write
units a second per partition (AWS documentation, "Best practices for designing and using
partition keys effectively"), so a budget above several hundred calls a second should be split
(a deployment budget per host is meant for targets that cannot take that many anyway).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from punctual.observability import MetricsSink
from punctual.smoothing import BudgetLedger, Placement, _lane_instant, spacing_us
from punctual.store.reservations import BudgetReservationRepository

log = logging.getLogger("punctual.smoothing")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
RESERVATION_TTL_S = 24 * 3600  # a reservation is kept a day after its instant
VIEW_INSTANTS = 256  # a view reads this many of the lane's instants ahead at a time


def _us(instant: datetime) -> int:
    return (instant - _EPOCH) // timedelta(microseconds=1)


def _at(epoch_us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=epoch_us)


@dataclass
class _View:
    """One budget's reservations as last read, over ``[low, high]`` (epoch microseconds)."""

    generation: int
    low: int = 0
    high: int = -1
    holders: dict[int, str] = field(default_factory=dict)  # instant -> owner
    owned: dict[str, int] = field(default_factory=dict)  # owner -> an instant it holds
    # A scan's (start, lane, spacing) -> the first of its instants not known taken: those before
    # it are taken for good (a reservation is never given back), so the next scan starts there.
    resume: dict[tuple[int, int, int, int], int] = field(default_factory=dict)

    def add(self, found: Mapping[datetime, str]) -> None:
        for at, owner in found.items():
            instant = _us(at)
            self.holders[instant] = owner
            self.owned.setdefault(owner, instant)


class SharedBudgetLedger(BudgetLedger):
    """A poller's budgets, placed through reservations every poller shares (see the module).

    Parameters
    ----------
    store
        Where the reservations are.
    budgets, lane
        As :class:`~punctual.smoothing.BudgetLedger` (also this process's fallback).
    metrics
        Where ``RateBudgetStoreErrors`` goes.
    """

    def __init__(
        self,
        store: BudgetReservationRepository,
        budgets: Mapping[tuple[str, str], float] | None = None,
        lane: tuple[int, int] = (0, 1),
        metrics: MetricsSink | None = None,
    ) -> None:
        super().__init__(budgets, lane)
        self.store = store
        self.metrics = metrics
        self._generation = 0
        self._views: dict[tuple[str, str], _View] = {}
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._guard = threading.Lock()

    def fresh_reads(self) -> None:
        """The next placement of each budget reads its reservations again (a release's chunk)."""
        with self._guard:
            self._generation += 1

    def place_shared(
        self,
        tenant: str,
        key: str,
        owner: str,
        rate: float,
        due: datetime,
        max_lateness_s: float,
        not_before: datetime | None = None,
    ) -> Placement:
        """The instant of slot ``owner`` (``<job>/<slot>``) due at ``due``, reserved for it."""
        if rate <= 0:
            raise ValueError("a rate budget must be positive")
        state = (tenant, key)
        with self._guard:
            lock = self._locks.setdefault(state, threading.Lock())
        try:
            with lock:
                return self._reserve(state, owner, rate, due, max_lateness_s, not_before)
        except Exception:
            # Never lose or hold back the slot: this process's own placement (within its bound).
            log.warning("could not reserve a rate budget instant for %s on %s", owner, key, exc_info=True)
            if self.metrics is not None:
                self.metrics.add("RateBudgetStoreErrors", 1)
            return self.place(tenant, key, rate, due, max_lateness_s, not_before)

    def _reserve(
        self,
        state: tuple[str, str],
        owner: str,
        rate: float,
        due: datetime,
        max_lateness_s: float,
        not_before: datetime | None,
    ) -> Placement:
        group, groups = self.lane
        step = spacing_us(rate)
        due_us = _us(due)
        limit = due_us + round(max_lateness_s * 1_000_000)
        start = max(due_us, _us(not_before) if not_before is not None else due_us)
        ahead = step * max(1, groups) * VIEW_INSTANTS
        view = self._view(state, due_us, min(limit, start + ahead))
        expires = int(due.timestamp()) + RESERVATION_TTL_S
        scan = (start, group, groups, step)
        candidate = _lane_instant(view.resume.get(scan, start), step, group, groups)
        while candidate <= limit:
            held = view.owned.get(owner)
            if held is not None and due_us <= held <= limit:
                return Placement(_at(held), None, False)  # placed before (the other poller)
            if candidate > view.high:
                view = self._view(state, due_us, min(limit, candidate + ahead))
                continue
            holder = view.holders.get(candidate)
            if holder is None:
                if self.store.reserve_budget_instant(*state, _at(candidate), owner, expires):
                    view.holders[candidate] = owner
                    view.owned.setdefault(owner, candidate)
                    return Placement(_at(candidate), None, False)
                # Taken since the view was read: read again (it shows who) and move on.
                view = self._view(state, due_us, view.high, reread=True)
                view.holders.setdefault(candidate, "")
                continue
            if holder == owner:
                return Placement(_at(candidate), None, False)
            candidate = _lane_instant(candidate + 1, step, group, groups)
            view.resume[scan] = candidate
        held = view.owned.get(owner)
        if held is not None and due_us <= held <= limit:
            return Placement(_at(held), None, False)
        return Placement(due, None, True)  # on time, reported

    def _view(self, state: tuple[str, str], low: int, high: int, reread: bool = False) -> _View:
        """The budget's view, read where it does not yet cover ``[low, high]`` (all of it again
        when ``reread`` or when a new chunk has started since it was read)."""
        with self._guard:
            generation = self._generation
        view = self._views.get(state)
        if view is None or view.generation != generation or reread:
            fresh = _View(generation, low, high)
            if view is not None and view.generation == generation:
                fresh.low, fresh.high = min(low, view.low), max(high, view.high)
                fresh.resume = view.resume
            fresh.add(self.store.budget_reservations(*state, _at(fresh.low), _at(fresh.high)))
            self._views[state] = fresh
            return fresh
        if low < view.low:
            view.add(self.store.budget_reservations(*state, _at(low), _at(view.low - 1)))
            view.low = low
        if high > view.high:
            view.add(self.store.budget_reservations(*state, _at(view.high + 1), _at(high)))
            view.high = high
        return view
