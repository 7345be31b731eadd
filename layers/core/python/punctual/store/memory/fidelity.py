"""The in-memory store, as stale and as contentious as DynamoDB: :class:`Fidelity`.

DynamoDB differs from a dict behind a lock in two ways the core must survive, and which moto
never shows:

* **Eventually consistent reads are behind.** A read without ``ConsistentRead`` may answer an
  item as it was up to about a second earlier: missing when it was just created, at its old
  version when it was just replaced, still there when it was just deleted. The store's reads
  marked eventually consistent are ``get_job`` / ``batch_get_jobs`` and ``get_calendar`` /
  ``batch_get_calendars`` with ``consistent=False``, and ``query_timers`` with a ``from_ms``
  (the near lane's polls). With ``stale_read_s`` = L above zero, each item such a read returns
  is the item as it was at a random instant up to L seconds before the read (uniform per item;
  the store keeps each item's versions of the last L seconds).
* **Transactions conflict.** A transaction that meets another transaction on one of its items
  is cancelled (``TransactionConflict``), and a plain write on such an item is refused
  (``TransactionConflictException``). Here, an item "a transaction holds" is one that some
  transaction has written (the job item, its listing, the tenant counter, a timer written with a
  job, a dependency link): each write that touches such an item is cancelled with probability
  ``conflict_share`` (as if another transaction held it at that moment), and a test can script
  exact conflicts with :meth:`Fidelity.inject_conflict`. Items no transaction ever touches
  (execution records, turns, alerts) never conflict, as in DynamoDB. A cancelled write changes
  nothing and is retried by :func:`punctual.store.conflicts.retry_conflicts`, the same policy
  the DynamoDB store uses; one that outlives it raises
  :class:`~punctual.store.base.TransactionConflictError`.

Which item each store operation reads or writes, and whether DynamoDB writes it in a
transaction, is listed once here (:data:`WRITES`, :data:`STALE_READS`, :data:`OTHER_OPERATIONS`);
``tests/integration/test_store_fidelity.py`` runs the same scenarios against this store and
against DynamoDB on moto with :mod:`local.moto_fidelity` (the same simulation behind moto's
API), and checks that every operation of the store port is listed.

Usage::

    store = MemoryStore(fidelity=Fidelity(stale_read_s=1.0, conflict_share=0.2, seed=7,
                                          clock=lambda: manual_clock.now().timestamp()))
"""

from __future__ import annotations

import inspect
import math
import random
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from punctual.models import Job
from punctual.store.base import Page
from punctual.store.conflicts import CONFLICT_RETRY, ConflictRetry, retry_conflicts
from punctual.store.memory.base import MemoryBase
from punctual.timing.timers import Timer, minute_key

ItemKey = tuple[Hashable, ...]
Kind = Literal["transaction", "write"]
TRANSACTION: Kind = "transaction"
WRITE: Kind = "write"
CONFLICT_MESSAGE = "Transaction is ongoing for the item"  # what DynamoDB says, both errors


class SimulatedConflict(Exception):
    """The in-memory store's stand-in for DynamoDB's conflict errors (never leaves the store).

    ``index`` is the position of the held item among the operation's items (a transaction's
    ``CancellationReasons`` name it there).
    """

    def __init__(self, operation: str, kind: Kind, index: int) -> None:
        name = "TransactionCanceledException" if kind == TRANSACTION else "TransactionConflictException"
        super().__init__(f"{name} in {operation} (item {index}): {CONFLICT_MESSAGE}")
        self.operation = operation
        self.kind = kind
        self.index = index


def is_simulated_conflict(exc: Exception) -> bool:
    return isinstance(exc, SimulatedConflict)


# ------------------------------------------------------------------------- the items


def job_item(tenant: str, job_id: str) -> ItemKey:
    return ("job", tenant, job_id)


def listing_item(tenant: str, job_id: str) -> ItemKey:
    return ("listing", tenant, job_id)


def counter_item(tenant: str) -> ItemKey:
    return ("meta", tenant)


def link_item(tenant: str, parent: str, child: str) -> ItemKey:
    return ("link", tenant, parent, child)


def calendar_item(tenant: str, name: str) -> ItemKey:
    return ("calendar", tenant, name)


def timer_item(timer: Timer) -> ItemKey:
    return ("timer", timer.lane, minute_key(timer.due), timer.shard, timer.sk)


def _links(tenant: str, child: str, parents: Iterable[str]) -> list[ItemKey]:
    out: list[ItemKey] = []
    for parent in parents:
        out += [link_item(tenant, parent, child), job_item(tenant, parent)]
    return out


Args = dict[str, Any]


def _uses(tenant: str, a: Args, drops: bool = True) -> list[ItemKey]:
    """The calendar items a job write's calendar uses (``calendars``) update in its transaction."""
    uses = a.get("calendars")
    if uses is None:
        return []
    return [calendar_item(tenant, n) for n in (*uses.add, *(uses.drop if drops else ()))]


def _create_job(a: Args) -> list[ItemKey]:
    job = a["job"]
    keys = [job_item(job.tenant, job.id), listing_item(job.tenant, job.id), counter_item(job.tenant)]
    keys += [timer_item(a["timer"])] if a.get("timer") is not None else []
    return keys + _links(job.tenant, job.id, a.get("parents", ())) + _uses(job.tenant, a)


def _create_job_group(a: Args) -> list[ItemKey]:
    """A group of new jobs (:mod:`punctual.store.job_groups`): the counter, each job's items."""
    keys: list[ItemKey] = [counter_item(job.tenant) for job, _ in a["jobs"][:1]]
    for job, timer in a["jobs"]:
        keys += [job_item(job.tenant, job.id), listing_item(job.tenant, job.id)]
        keys += [timer_item(timer)] if timer is not None else []
    return keys


def _replace_job(a: Args) -> list[ItemKey]:
    job = a["job"]
    keys = [job_item(job.tenant, job.id), listing_item(job.tenant, job.id)]
    previous = a.get("previous_trigger_rate")
    if previous is not None and job.trigger_rate != previous:
        keys.append(counter_item(job.tenant))
    keys += [timer_item(t) for t in a.get("timers", ())]
    if a.get("graph") is not None:
        keys.append(("graph", job.tenant))  # the tenant's dependency graph version
    changed = [*a.get("parents_added", ()), *a.get("parents_removed", ())]
    return keys + _links(job.tenant, job.id, changed) + _uses(job.tenant, a)


def _delete_job(a: Args) -> list[ItemKey]:
    tenant, job_id = a["tenant"], a["job_id"]
    keys = [job_item(tenant, job_id), listing_item(tenant, job_id), counter_item(tenant)]
    return keys + _links(tenant, job_id, a.get("parents", ())) + _uses(tenant, a)


@dataclass(frozen=True)
class WriteSpec:
    """How DynamoDB makes one store operation: a transaction or a plain write, on which items."""

    kind: Kind
    items: Callable[[Args], list[ItemKey]]


# The store operations that touch items some transaction writes. Every other write is listed in
# OTHER_OPERATIONS: it touches only items no transaction writes, so it never conflicts.
WRITES: dict[str, WriteSpec] = {
    "create_job": WriteSpec(TRANSACTION, _create_job),
    "create_job_group": WriteSpec(TRANSACTION, _create_job_group),
    "replace_job": WriteSpec(TRANSACTION, _replace_job),
    "delete_job": WriteSpec(TRANSACTION, _delete_job),
    "set_dependents": WriteSpec(
        TRANSACTION, lambda a: _links(a["tenant"], a["child_id"], a["parents"])
    ),  # a transaction per parent in DynamoDB
    "add_skipped": WriteSpec(WRITE, lambda a: [job_item(a["tenant"], a["job_id"])]),
    # Calendar items: a job write's transaction updates the users of each calendar it excludes.
    "put_calendar": WriteSpec(WRITE, lambda a: [calendar_item(a["calendar"].tenant, a["calendar"].name)]),
    "delete_calendar": WriteSpec(WRITE, lambda a: [calendar_item(a["tenant"], a["name"])]),
    "use_calendars": WriteSpec(WRITE, lambda a: [calendar_item(a["tenant"], n) for n in a["names"]]),
    "drop_calendar_user": WriteSpec(
        TRANSACTION, lambda a: [job_item(a["tenant"], a["job_id"]), calendar_item(a["tenant"], a["name"])]
    ),
}

# Reads DynamoDB may answer from behind, and when (the argument that makes them eventually
# consistent, with its default).
STALE_READS: dict[str, Callable[[Args], bool]] = {
    "get_job": lambda a: not a.get("consistent", True),
    "batch_get_jobs": lambda a: not a.get("consistent", True),
    "get_calendar": lambda a: not a.get("consistent", True),
    "batch_get_calendars": lambda a: not a.get("consistent", False),
    "query_timers": lambda a: a.get("from_ms") is not None,
    # Always eventually consistent: the chain auditor's scan of an index, and the load ledger
    # (a forecast, read a minute or two ahead of its minute).
    "audit_page": lambda a: True,
    "get_minute_load": lambda a: True,
}

# Everything else the store port does: strongly consistent reads, and writes of items that no
# transaction writes (so no conflict can meet them).
OTHER_OPERATIONS = frozenset(
    {
        "list_jobs",
        "tenant_trigger_rate",
        "first_version",  # a strongly consistent read of a tombstone
        "count_request",
        "put_timers",  # BatchWriteItem: DynamoDB documents no conflict for it
        "count_timers",
        "get_watermarks",
        "advance_watermarks",
        "put_progress",
        "put_sent_bound",
        "get_progress",
        "take_turn",
        "wait_for_turn",
        "pass_turn",
        "get_turn",
        # A tenant's burst quotas (punctual.security.tenant_quotas): items of their own, no transaction.
        "get_peaks",
        "put_peaks",
        "join_backfills",
        "leave_backfills",
        "running_backfills",
        "take_backfill_slots",
        # The minute-load ledger (punctual.dispatch.load_forecast) and the tenants' data keys: items of their
        # own, no transaction (the ledger's read is eventually consistent: STALE_READS).
        "add_minute_loads",
        "get_tenant_key",
        "put_tenant_key",
        # The rate budgets' reservations (punctual.dispatch.budget_reservations): items of their own, no
        # transaction; a conditional write each, and a strongly consistent query.
        "reserve_budget_instant",
        "budget_reservations",
        "save_execution",
        "get_execution",
        "batch_get_executions",
        "list_executions",
        "record_parent_success",
        "list_dependents",
        "claim_child_dispatch",
        "dependency_graph",  # a strongly consistent read of the tenant's graph version
        "waiting_child_slots",  # a strongly consistent query of the child's dependency items
        "create_group",
        "get_group",
        "list_groups",
        "update_group",
        "delete_group",
        "create_alert",
        "take_over_alert",
        "save_alert",
        "get_alert",
        "list_alerts",
        "open_streak",
        "get_streak",
        "replace_streak",
        "throttle_alert",
        "list_calendars",
        "calendar_users",
        "create_backfill",
        "get_backfill",
        "update_backfill",
    }
)

# The items a write changes that a stale read can see (jobs, calendars, timers), per operation.
_CHANGES: dict[str, Callable[[Args], list[ItemKey]]] = {
    "create_job": lambda a: [k for k in _create_job(a) if k[0] in ("job", "timer")],
    "create_job_group": lambda a: [k for k in _create_job_group(a) if k[0] in ("job", "timer")],
    "replace_job": lambda a: [k for k in _replace_job(a) if k[0] in ("job", "timer")],
    "delete_job": lambda a: [k for k in _delete_job(a) if k[0] == "job"],
    "set_dependents": lambda a: [job_item(a["tenant"], p) for p in a["parents"]],
    "add_skipped": lambda a: [job_item(a["tenant"], a["job_id"])],
    "put_timers": lambda a: [timer_item(t) for t in a["timers"]],
    "put_calendar": lambda a: [calendar_item(a["calendar"].tenant, a["calendar"].name)],
    "delete_calendar": lambda a: [calendar_item(a["tenant"], a["name"])],
}


# ------------------------------------------------------------------------- the simulation


class History:
    """Each item's recent versions, so a read can answer an item as it was a moment ago.

    Versions older than ``horizon_s`` are dropped, except the newest of them (what the item was
    throughout the horizon until the next version).
    """

    def __init__(self, horizon_s: float) -> None:
        self.horizon_s = horizon_s
        self._versions: dict[ItemKey, list[tuple[float, Any]]] = {}

    def known(self, key: ItemKey) -> bool:
        return key in self._versions

    def record(self, key: ItemKey, at: float, value: Any) -> None:
        versions = self._versions.setdefault(key, [])
        versions.append((at, value))
        cut = at - self.horizon_s
        keep = 0
        while keep + 1 < len(versions) and versions[keep + 1][0] <= cut:
            keep += 1
        if keep:
            del versions[:keep]

    def as_of(self, key: ItemKey, at: float, current: Any) -> tuple[Any, bool]:
        """The item's value at instant ``at``, and whether that is older than its latest version
        (``current``, not behind, when no write of it was observed)."""
        versions = self._versions.get(key)
        if not versions:
            return current, False
        for position in range(len(versions) - 1, -1, -1):
            when, value = versions[position]
            if when <= at:
                return value, position < len(versions) - 1
        return versions[0][1], len(versions) > 1  # all newer than ``at``: the oldest kept


class Contention:
    """Decides which writes meet another transaction (see the module docstring)."""

    def __init__(self, share: float, rng: random.Random) -> None:
        self.share = share
        self.rng = rng
        self.held: set[ItemKey] = set()  # items a transaction has written
        self.scripted: list[tuple[str | None, Callable[[ItemKey], bool] | None]] = []
        self.injected = 0

    def decide(self, operation: str, kind: Kind, items: Sequence[ItemKey]) -> int | None:
        """The index of the item a conflict is met on, or None: the write goes ahead."""
        for position, (wanted, match) in enumerate(self.scripted):
            if wanted not in (None, operation):
                continue
            hit = next((i for i, key in enumerate(items) if match is None or match(key)), None)
            if hit is not None:
                del self.scripted[position]
                self.injected += 1
                return hit
        if self.share <= 0:
            return None
        candidates = [i for i, key in enumerate(items) if key in self.held]
        if candidates and self.rng.random() < self.share:
            self.injected += 1
            return self.rng.choice(candidates)
        return None


def _no_wait(_: float) -> None:
    """The in-memory store's backoff: no real time passes (its clock is the test's)."""


@dataclass
class Fidelity:
    """Stale reads and transaction conflicts for a :class:`~punctual.store.memory.MemoryStore`.

    Parameters
    ----------
    stale_read_s
        L: an eventually consistent read answers each item as it was up to L seconds earlier
        (0: never behind).
    conflict_share
        The share of writes on items a transaction holds that meet a conflict (0: none
        unless scripted with :meth:`inject_conflict`).
    seed, rng
        Randomness of both (``rng`` wins; a test passes one whose ``uniform`` draws the top of
        the range to read exactly L behind).
    clock
        Seconds, for the versions' instants: the test's clock (``lambda: clock.now().timestamp()``)
        so that "one second behind" is one second of the scenario.
    retry, sleep
        The conflict retry policy (the DynamoDB store's) and how its backoff waits (no real
        waiting by default).
    """

    stale_read_s: float = 0.0
    conflict_share: float = 0.0
    seed: int | None = 0
    rng: Any = None
    clock: Callable[[], float] = time.monotonic
    retry: ConflictRetry = CONFLICT_RETRY
    sleep: Callable[[float], None] = _no_wait
    stale_answers: int = field(default=0, init=False)  # items a read answered older than they are
    _store: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0 <= self.conflict_share < 1:
            raise ValueError("conflict_share must be in [0, 1): at 1 no write on a held item ever succeeds")
        if self.stale_read_s < 0:
            raise ValueError("stale_read_s must not be negative")
        self.rng = self.rng or random.Random(self.seed)
        self.history = History(max(self.stale_read_s, 0.0))
        self.contention = Contention(self.conflict_share, self.rng)
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ scripting

    def inject_conflict(
        self, operation: str | None = None, item: Callable[[ItemKey], bool] | None = None, times: int = 1
    ) -> None:
        """Make the next ``times`` calls of ``operation`` (any: None) that touch an item ``item``
        accepts (any: None) meet a conflict, whatever the share."""
        for _ in range(times):
            self.contention.scripted.append((operation, item))

    @property
    def conflicts_injected(self) -> int:
        return self.contention.injected

    # ------------------------------------------------------------------ wiring

    def attach(self, store: MemoryBase) -> None:
        """Route ``store``'s operations through the simulation (instance attributes shadow the
        class's methods, so subclasses that override them are covered too)."""
        self._store = store
        self._lock = store._lock  # one lock: a decision and the write it guards are atomic
        for name in set(WRITES) | set(_CHANGES):
            setattr(store, name, self._writer(name, getattr(store, name)))
        for name in STALE_READS:
            setattr(store, name, self._reader(name, getattr(store, name)))

    def _writer(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        spec = WRITES.get(name)
        changes = _CHANGES.get(name)
        signature = inspect.signature(method)

        def attempt(args: Args, call: Callable[[], Any]) -> Any:
            with self._lock:
                items = spec.items(args) if spec else []
                if spec is not None:
                    index = self.contention.decide(name, spec.kind, items)
                    if index is not None:
                        raise SimulatedConflict(name, spec.kind, index)
                changed = changes(args) if changes and self.stale_read_s > 0 else []
                for key in changed:
                    if not self.history.known(key):
                        self.history.record(key, -math.inf, self._current(key))
                try:
                    result = call()
                finally:
                    now = self.clock()
                    for key in changed:
                        self.history.record(key, now, self._current(key))
                if spec is not None and spec.kind == TRANSACTION:
                    self.contention.held.update(items)
                return result

        def write(*a: Any, **kw: Any) -> Any:
            bound = signature.bind(*a, **kw)
            bound.apply_defaults()
            args = dict(bound.arguments)
            return retry_conflicts(
                lambda: attempt(args, lambda: method(*a, **kw)),
                is_simulated_conflict,
                name,
                self.retry,
                self.sleep,
            )

        return write

    def _reader(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        behind = STALE_READS[name]
        signature = inspect.signature(method)

        def read(*a: Any, **kw: Any) -> Any:
            bound = signature.bind(*a, **kw)
            bound.apply_defaults()
            args = dict(bound.arguments)
            if self.stale_read_s <= 0 or not behind(args):
                return method(*a, **kw)
            with self._lock:
                current = method(*a, **kw)
                return self._behind(name, args, current)

        return read

    # ------------------------------------------------------------------ stale answers

    def _when(self) -> float:
        lag: float = self.rng.uniform(0.0, self.stale_read_s)
        return self.clock() - lag

    def _older(self, key: ItemKey, current: Any) -> Any:
        value, behind = self.history.as_of(key, self._when(), current)
        if behind:
            self.stale_answers += 1
            return value
        return current  # the latest version: what the store holds

    def _behind(self, name: str, args: Args, current: Any) -> Any:
        copy = self._store._copy if self._store is not None else (lambda item: item)
        if name == "get_job":
            found = self._older(job_item(args["tenant"], args["job_id"]), self._current_job(args))
            return copy(found) if found is not None else None
        if name == "batch_get_jobs":
            jobs = {}
            for tenant, job_id in set(args["keys"]):
                found = self._older(job_item(tenant, job_id), self._current_job(args, (tenant, job_id)))
                if found is not None:
                    jobs[(tenant, job_id)] = copy(found)
            return jobs
        if name == "get_calendar":
            found = self._older(calendar_item(args["tenant"], args["name"]), current)
            return found.model_copy(deep=True) if found is not None else None
        if name == "batch_get_calendars":
            calendars = self._store._calendars
            out = {}
            for key in set(args["keys"]):
                found = self._older(calendar_item(*key), calendars.get(key))
                if found is not None:
                    out[key] = found.model_copy(deep=True)
            return out
        if name == "get_minute_load":
            return current  # counters added to without a read: no history kept of them here
        if name == "audit_page":  # an index scan: a job written a moment ago may be missing or older
            page: Page[Any] = current
            kept = []
            for item in page.items:
                if isinstance(item, Job):
                    item = self._older(job_item(item.tenant, item.id), item)
                    if item is None:
                        continue
                    item = copy(item)
                kept.append(item)
            return Page(kept, page.cursor, page.unreadable)
        # query_timers: rows written after the instant read are not there yet; a row rewritten
        # since is its earlier version.
        rows: list[Timer] = []
        for timer in current:
            found = self._older(timer_item(timer), timer)
            if found is not None:
                rows.append(found)
        return rows

    def _current_job(self, args: Args, key: tuple[str, str] | None = None) -> Any:
        tenant, job_id = key or (args["tenant"], args["job_id"])
        return self._store._jobs.get((tenant, job_id))

    def _current(self, key: ItemKey) -> Any:
        """An item as the store holds it now (a copy: later changes in place must not reach it)."""
        store = self._store
        kind = key[0]
        if kind == "job":
            job = store._jobs.get((key[1], key[2]))
            return job.model_copy(deep=True) if job is not None else None
        if kind == "calendar":
            calendar = store._calendars.get((key[1], key[2]))
            return calendar.model_copy(deep=True) if calendar is not None else None
        if kind == "timer":
            _, lane, minute, shard, sk = key
            return store._timer_row(lane, minute, shard, sk)
        raise ValueError(f"no history is kept of {kind} items")
