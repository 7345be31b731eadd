"""Burst smoothing: spread a burst's calls to one target over time, never past a slot's lateness.

A top-of-minute burst may send thousands of calls to one HTTP host or one AWS resource in the
same second. A *rate budget* (calls a second, on the job's target as ``rate_budget_per_second``,
or deployment-wide per host and tenant in ``PUNCTUAL_TARGET_RATE_BUDGETS``) lets the poller
spread them: each slot is given a release instant no earlier than its own instant and no
earlier than the budget allows after the slots placed before it.

The rule (:func:`place_slot`, pure; a virtual-scheduling / GCRA step):

* ``earliest = max(due, next_free)``, rounded down to a whole second after ``due`` (the worker
  defers a message by its visibility, which counts whole seconds: the slots of one second of
  the budget go together, so the budget holds per second);
* if ``earliest - due <= max_lateness_s`` (the job's ``max_lateness_seconds``, else the
  deployment's ``PUNCTUAL_MAX_LATENESS_SECONDS``): release at ``earliest`` and move
  ``next_free`` one interval (``1 / rate``) on;
* otherwise the budget and the lateness cannot both hold: the slot is released **on time**
  (at ``due``) and an :class:`Overrun` is reported — never silently late. It does not move
  ``next_free``: the slots after it keep their place in the budget.

So a slot is never released later than ``due + max_lateness_s``, whatever the budget (the
unit tests prove it over generated bursts), and within that bound the target never gets more
than its budget a second from one poller. Pollers of one minute share a budget by dividing
it: each of ``group_count`` shard groups gets ``rate / group_count`` (the groups' slots are a
hash split of the jobs, so each sees about its share of a target's burst).

Where it applies: the poller's release (:mod:`punctual.polling.release`) places every first
attempt of a scheduled slot whose target has a budget, and stamps the message with
``not_before``; the worker (:mod:`punctual.execution.claim`) returns a message received before
its ``not_before`` to the queue for the whole seconds left (its visibility), and claims it
then. Retries, takeovers and hand triggers are not smoothed (their own backoff spreads them).

The overrun hook: :class:`OverrunSink` receives each :class:`Overrun` (the poller counts it as
``RateBudgetOverruns`` and logs one structured record ``rate_budget_overrun``); the alerting
of issue #19 can subscribe a sink of its own.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol
from urllib.parse import urlsplit

from punctual.instants import format_instant

log = logging.getLogger("punctual.smoothing")


class SmoothingConfigError(ValueError):
    """A rate budget that cannot be read."""


@dataclass(frozen=True)
class Placement:
    """Where one slot goes: its release instant, the budget's next free instant, an overrun."""

    release_at: datetime
    next_free: datetime | None
    overrun: bool


def place_slot(
    next_free: datetime | None, due: datetime, rate_per_s: float, max_lateness_s: float
) -> Placement:
    """The release instant of a slot due at ``due`` under a budget of ``rate_per_s`` calls a second.

    ``next_free`` is the budget's state (None: nothing placed yet). See the module docstring.
    """
    if rate_per_s <= 0:
        raise ValueError("a rate budget must be positive")
    # Whole microseconds, rounded up: n intervals never sum to less than n / rate seconds.
    interval = timedelta(microseconds=math.ceil(1_000_000 / rate_per_s))
    if next_free is None or next_free <= due:
        return Placement(due, due + interval, False)
    # Whole seconds (the worker holds a message by its visibility): the budget's second, so the
    # slots that share a second of the budget go together, never after the budget's instant.
    wait_s = (next_free - due) // timedelta(seconds=1)
    if wait_s > max_lateness_s:
        return Placement(due, next_free, True)  # on time, reported
    return Placement(due + timedelta(seconds=wait_s), next_free + interval, False)


@dataclass(frozen=True)
class Overrun:
    """A slot released on time although its target's budget was spent (the alerting hook)."""

    tenant: str
    job_id: str
    slot: str
    target: str
    rate_per_s: float
    max_lateness_s: float
    due: datetime

    def record(self) -> dict[str, object]:
        return {
            "event": "rate_budget_overrun",
            "tenant": self.tenant,
            "job_id": self.job_id,
            "slot": self.slot,
            "target": self.target,
            "rate_budget_per_second": self.rate_per_s,
            "max_lateness_seconds": self.max_lateness_s,
            "due": format_instant(self.due),
        }


class OverrunSink(Protocol):
    def overrun(self, event: Overrun) -> None: ...


class LoggedOverruns:
    """The default sink: one structured log record per overrun."""

    def overrun(self, event: Overrun) -> None:
        record = event.record()
        log.warning(
            "rate budget overrun: %s on %s", event.slot, event.target, extra={"rate_budget_overrun": record}
        )


def target_key(target: object) -> str:
    """What a budget is kept per: an HTTP target's host (``host:port`` when a port is given),
    an AWS target's resource ARN."""
    url = getattr(target, "url", None)
    if isinstance(url, str):
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        return f"{host}:{parts.port}" if parts.port else host
    for name in (
        "function_arn",
        "queue_arn",
        "topic_arn",
        "event_bus_arn",
        "state_machine_arn",
        "task_definition_arn",
    ):
        value = getattr(target, name, None)
        if isinstance(value, str):
            return value
    return ""


def parse_budgets(entries: list[str]) -> dict[tuple[str, str], float]:
    """``PUNCTUAL_TARGET_RATE_BUDGETS`` entries ``[tenant/]target=rate`` → {(tenant or "*", target): rate}.

    Raises
    ------
    SmoothingConfigError
        An entry without ``=``, an empty target or a rate that is not a positive number.
    """
    budgets: dict[tuple[str, str], float] = {}
    for entry in entries:
        name, sep, rate_text = entry.rpartition("=")
        if not sep or not name:
            raise SmoothingConfigError(f"rate budget {entry!r}: expected [tenant/]host=calls-per-second")
        tenant, slash, target = name.partition("/") if not name.startswith("arn:") else ("", "", name)
        if not slash:
            tenant, target = "*", name
        try:
            rate = float(rate_text)
        except ValueError:
            rate = -1.0
        if not target or not (rate > 0 and math.isfinite(rate)):
            raise SmoothingConfigError(f"rate budget {entry!r}: the rate must be a positive number")
        budgets[(tenant, target.lower() if not target.startswith("arn:") else target)] = rate
    return budgets


class BudgetLedger:
    """The budgets' state in one poller: per (tenant, target), the next free instant. Thread-safe
    (a poller releases chunks concurrently); a slot is placed in the order it is released."""

    def __init__(self, budgets: Mapping[tuple[str, str], float] | None = None, share: float = 1.0) -> None:
        self.budgets = dict(budgets or {})
        self.share = share  # this poller's share of each budget (1 / the minute's groups)
        self._next_free: dict[tuple[str, str], datetime | None] = {}
        self._lock = threading.Lock()

    def rate_for(self, tenant: str, key: str, own: float | None) -> float | None:
        """The budget that applies: the target's own, else the tenant's for that host, else everyone's."""
        rate = own or self.budgets.get((tenant, key)) or self.budgets.get(("*", key))
        return rate * self.share if rate else None

    def place(self, tenant: str, key: str, rate: float, due: datetime, max_lateness_s: float) -> Placement:
        with self._lock:
            state = (tenant, key)
            placement = place_slot(self._next_free.get(state), due, rate, max_lateness_s)
            self._next_free[state] = placement.next_free
            return placement
