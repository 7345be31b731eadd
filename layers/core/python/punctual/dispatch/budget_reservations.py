"""Rate budgets shared by every poller of the deployment: a slot's instant is a reservation.

The grid and the lanes are :mod:`punctual.dispatch.smoothing`'s. What this module adds is who decides
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
* a chunk's budgeted slots are placed together (:meth:`SharedBudgetLedger.place_all`): each is
  given the next instant its view shows free, and their conditional writes go out side by side
  (:data:`WRITERS` at a time), so a chunk waits for a few round trips, not one per slot; those
  whose write failed are placed again after a re-read;
* the view is one strongly consistent query of the key's reservations over the range the
  placement looks at, read again at each chunk of a release (:meth:`SharedBudgetLedger.fresh_reads`)
  and after a round with a failed condition (an instant another poller took since: move on). It only
  saves writes: the conditional write alone decides, so a view that is behind costs a failed
  write, never a shared instant. At worst a slot holds two instants (both pollers placed it at
  the same moment, on different ones): one goes unused, no other slot is on either;
* no free instant within the slot's lateness: it is released on time and reported as an
  :class:`~punctual.dispatch.smoothing.Overrun`, as before;
* a store error while placing never costs the slot: it is placed by this process's own ledger
  (the per-process placement, within the lateness or on time), counted
  (``RateBudgetStoreErrors``) and logged.

Cost, per budgeted slot (only budgeted slots pay anything): one conditional write by the poller
that places it first (the other finds it in its view: nothing, or a repeat write that succeeds
when both place it at once), one failed write and one query for each instant lost to a race, and
the view's query — one per chunk of 100 timers per target key and poller, each reading the
reservations it covers (a strongly consistent read: 1 RCU per 4 KB, about 40 instants) — and,
for a call that reaches its worker after its instant, one query and one write more
(:func:`late_instant`).
The items expire a day after their instant (``expires_at``).

Quota: a budget's instants of one minute are one partition key; DynamoDB allows 1,000 write
units a second per partition (AWS documentation, "Best practices for designing and using
partition keys effectively"), so a budget above several hundred calls a second should be split
(a deployment budget per host is meant for targets that cannot take that many anyway).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from punctual.dispatch.smoothing import BudgetLedger, Placement, _lane_instant, spacing_us
from punctual.runtime.observability import MetricsSink
from punctual.store.reservations import BudgetReservationRepository
from punctual.timing.instants import from_epoch_us, to_epoch_us

log = logging.getLogger("punctual.dispatch.smoothing")

RESERVATION_TTL_S = 24 * 3600  # a reservation is kept a day after its instant
VIEW_INSTANTS = 256  # a view reads this many of the lane's instants ahead at a time
WRITERS = 16  # conditional writes of one chunk's placements in flight at once


@dataclass(frozen=True)
class BudgetRequest:
    """One slot to place: its budget (tenant, target key, rate), its owner name (``<job>/<slot>``),
    its instant, how late it may go, and no earlier than ``not_before`` (the head start)."""

    tenant: str
    key: str
    owner: str
    rate: float
    due: datetime
    max_lateness_s: float
    not_before: datetime | None = None

    @property
    def state(self) -> tuple[str, str]:
        return (self.tenant, self.key)


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
            instant = to_epoch_us(at)
            self.holders[instant] = owner
            self.owned.setdefault(owner, instant)


class SharedBudgetLedger(BudgetLedger):
    """A poller's budgets, placed through reservations every poller shares (see the module).

    Parameters
    ----------
    store
        Where the reservations are.
    budgets, lane
        As :class:`~punctual.dispatch.smoothing.BudgetLedger` (also this process's fallback).
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
        self._writers: ThreadPoolExecutor | None = None

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
        return self.place_all([BudgetRequest(tenant, key, owner, rate, due, max_lateness_s, not_before)])[0]

    def place_all(self, requests: Sequence[BudgetRequest]) -> list[Placement]:
        """Each request's placement, in the order given (earlier requests get earlier instants)."""
        for request in requests:
            if request.rate <= 0:
                raise ValueError("a rate budget must be positive")
        out: list[Placement | None] = [None] * len(requests)
        by_state: dict[tuple[str, str], list[int]] = {}
        for index, request in enumerate(requests):
            by_state.setdefault(request.state, []).append(index)
        for state, indexes in by_state.items():
            with self._guard:
                lock = self._locks.setdefault(state, threading.Lock())
            try:
                with lock:
                    self._reserve(state, [(i, requests[i]) for i in indexes], out)
            except Exception:
                # Never lose or hold back a slot: this process's own placement (within its bound).
                left = [i for i in indexes if out[i] is None]
                log.warning("could not reserve rate budget instants on %s", state[1], exc_info=True)
                if self.metrics is not None:
                    self.metrics.add("RateBudgetStoreErrors", len(left))
                for i in left:
                    r = requests[i]
                    out[i] = self.place(r.tenant, r.key, r.rate, r.due, r.max_lateness_s, r.not_before)
        return [placement for placement in out if placement is not None]

    def _reserve(
        self, state: tuple[str, str], pending: list[tuple[int, BudgetRequest]], out: list[Placement | None]
    ) -> None:
        group, groups = self.lane
        low = min(to_epoch_us(r.due) for _, r in pending)
        high = max(self._bounds(r)[2] for _, r in pending)
        view = self._view(state, low, high)
        lost: set[int] = set()  # instants a write found taken (a re-read may not show them yet)
        while pending:
            tries: list[tuple[int, BudgetRequest, int]] = []
            chosen: set[int] = set()
            for index, request in pending:
                due_us, start, _, limit = self._bounds(request)
                held = view.owned.get(request.owner)
                if held is not None and due_us <= held <= limit:
                    out[index] = Placement(
                        from_epoch_us(held), None, False
                    )  # placed before (the other poller)
                    continue
                step = spacing_us(request.rate)
                scan = (start, group, groups, step)
                candidate = _lane_instant(view.resume.get(scan, start), step, group, groups)
                advancing = True
                while candidate <= limit:
                    if candidate > view.high:
                        self._extend(
                            state, view, view.low, min(limit, candidate + step * groups * VIEW_INSTANTS)
                        )
                    taken = candidate in view.holders or candidate in lost
                    if not taken and candidate not in chosen:
                        break
                    candidate = _lane_instant(candidate + 1, step, group, groups)
                    advancing = advancing and taken
                    if advancing:
                        view.resume[scan] = candidate
                if candidate > limit:
                    out[index] = Placement(request.due, None, True)  # on time, reported
                    continue
                chosen.add(candidate)
                tries.append((index, request, candidate))
            written = self._write(state, tries)
            pending = []
            for (index, request, candidate), ok in zip(tries, written, strict=True):
                if ok:
                    view.holders[candidate] = request.owner
                    view.owned.setdefault(request.owner, candidate)
                    out[index] = Placement(from_epoch_us(candidate), None, False)
                else:  # taken since the view was read: read again (it shows who) and move on
                    lost.add(candidate)
                    pending.append((index, request))
            if pending:
                view.add(
                    self.store.budget_reservations(*state, from_epoch_us(view.low), from_epoch_us(view.high))
                )

    def _bounds(self, request: BudgetRequest) -> tuple[int, int, int, int]:
        """(due, start, the end of its first read, limit) of a request, in epoch microseconds."""
        due_us = to_epoch_us(request.due)
        limit = due_us + round(request.max_lateness_s * 1_000_000)
        start = max(due_us, to_epoch_us(request.not_before) if request.not_before is not None else due_us)
        ahead = spacing_us(request.rate) * max(1, self.lane[1]) * VIEW_INSTANTS
        return due_us, start, max(due_us, min(limit, start + ahead)), limit

    def _write(self, state: tuple[str, str], tries: list[tuple[int, BudgetRequest, int]]) -> list[bool]:
        """The conditional writes of a round, side by side; whether each took its instant."""

        def take(attempt: tuple[int, BudgetRequest, int]) -> bool:
            _, request, candidate = attempt
            expires = int(request.due.timestamp()) + RESERVATION_TTL_S
            return self.store.reserve_budget_instant(*state, from_epoch_us(candidate), request.owner, expires)

        if len(tries) <= 1:
            return [take(attempt) for attempt in tries]
        with self._guard:
            if self._writers is None:
                self._writers = ThreadPoolExecutor(WRITERS, thread_name_prefix="budget")
            writers = self._writers
        return list(writers.map(take, tries))

    def _view(self, state: tuple[str, str], low: int, high: int) -> _View:
        """The budget's view covering ``[low, high]``: read anew when a chunk has started since it
        was read, else extended where it does not cover it yet."""
        with self._guard:
            generation = self._generation
        view = self._views.get(state)
        if view is None or view.generation != generation:
            view = _View(generation, low, high)
            view.add(self.store.budget_reservations(*state, from_epoch_us(low), from_epoch_us(high)))
            self._views[state] = view
            return view
        self._extend(state, view, low, high)
        return view

    def _extend(self, state: tuple[str, str], view: _View, low: int, high: int) -> None:
        if low < view.low:
            view.add(self.store.budget_reservations(*state, from_epoch_us(low), from_epoch_us(view.low - 1)))
            view.low = low
        if high > view.high:
            view.add(
                self.store.budget_reservations(*state, from_epoch_us(view.high + 1), from_epoch_us(high))
            )
            view.high = high


# A tenant's retries' grid (punctual.dispatch.polling.retry_pace): a pseudo target no host or ARN
# names (none starts with '#')
RETRY_KEY = "#retries"
LATE_TOLERANCE_S = 0.05  # a call this late keeps its instant: the grid's margin (10 %) covers it
LATE_LEAD_S = 0.05  # a late call's new instant is at least this far ahead (the reservation's time)


def late_instant(
    store: BudgetReservationRepository,
    request: BudgetRequest,
    instant: datetime,
    now: datetime,
) -> Placement:
    """When a worker calls a smoothed slot whose message reached it after its ``instant``.

    A message that comes back late (a busy queue, a worker that was busy) would be called at once,
    and late calls of several workers bunch: the receiver would see them closer than the budget
    allows. So a late call takes a new instant of the budget's grid, reserved like the poller's
    (owner ``<job>/<slot>#late``), at or after ``now``, within the slot's lateness; none left:
    it goes now (it is late already), an overrun the worker reports. A store error: it goes now
    as well.
    """
    if now <= instant + timedelta(seconds=LATE_TOLERANCE_S):
        return Placement(instant, None, False)
    late = BudgetRequest(
        request.tenant,
        request.key,
        f"{request.owner}#late",
        request.rate,
        request.due,
        request.max_lateness_s,
        now + timedelta(seconds=LATE_LEAD_S),
    )
    try:
        placed = SharedBudgetLedger(store).place_all([late])[0]
    except Exception:
        log.warning("could not reserve a late call's instant for %s", request.owner, exc_info=True)
        return Placement(now, None, False)
    return Placement(now, None, True) if placed.overrun else placed
