"""Burst smoothing: spread a burst's calls to one target over time, never past a slot's lateness.

A top-of-minute burst may send thousands of calls to one HTTP host or one AWS resource in the
same second. A *rate budget* (calls a second, on the job's target as ``rate_budget_per_second``,
or deployment-wide per host and tenant in ``PUNCTUAL_TARGET_RATE_BUDGETS``) lets the poller
spread them: each slot is given a release instant no earlier than its own instant and no
earlier than the budget allows after the slots placed before it.

The rule (:func:`place_slot`, pure; a virtual-scheduling / GCRA step on a shared grid):

* a budget of ``rate`` calls a second is a grid of instants ``spacing = (1 + SPACING_MARGIN) /
  rate`` apart, counted from the start of each minute (a top-of-minute slot is on it) and
  stopping a spacing before the next minute's, so every poller of the deployment sees the same
  grid. The shard groups of a minute take turns on it: group ``g`` of ``G`` places its slots
  only on the grid's instants ``j x spacing`` with ``j mod G == g`` (its *lane*), so the calls
  of all of a minute's pollers together are never closer than ``spacing`` — in every one-second
  window, the first second of a burst included, at most ``ceil(rate)`` (``rate`` for a whole
  number) calls;
* a slot goes to the first instant of its lane at or after ``max(due, next_free, release +
  HEAD_START_S)`` (2 s: the time for its message to reach a worker before its instant); if that is
  within ``max_lateness_s`` (the job's ``max_lateness_seconds``, else the deployment's
  ``PUNCTUAL_MAX_LATENESS_SECONDS``) of ``due``, it is released there and ``next_free`` moves
  past it;
* otherwise the budget and the lateness cannot both hold: the slot is released **on time**
  (at ``due``) and an :class:`Overrun` is reported — never silently late. It does not move
  ``next_free``: the slots after it keep their place in the budget.

So a slot is never released later than ``due + max_lateness_s``, whatever the budget (the
unit tests prove it, and the budget across any number of pollers, over generated bursts). The
spacing keeps a margin (``SPACING_MARGIN``, 10 %): a call that reaches its target up to a
tenth of a second after its instant (a claim's write, a connection) still keeps the receiver
within its budget in every one-second window.

Where it applies: the poller's release (:mod:`punctual.dispatch.polling.release`) places every first
attempt of a scheduled slot whose target has a budget, and stamps the message with
``not_before``; the worker (:mod:`punctual.execution.claim`) returns a message received two
seconds or more before its ``not_before`` to the queue so that it comes back one to two seconds
early (the time to receive it again), and otherwise claims it and waits for the instant before
calling the target (:meth:`punctual.execution.worker.Worker.run`). Which slot goes on which
instant is a reservation every poller of the deployment shares (:mod:`punctual.dispatch.budget_reservations`:
the two pollers of a group both release each slot of it). Retries, takeovers, hand triggers
and an ``overlap: queue`` slot's start at its turn (a hand-over) are not smoothed (their own
backoff, or the job's turn, spreads them).

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

from punctual.timing.instants import format_instant, from_epoch_us, to_epoch_us

log = logging.getLogger("punctual.dispatch.smoothing")


class SmoothingConfigError(ValueError):
    """A rate budget that cannot be read."""


SPACING_MARGIN = 0.1  # a budget's calls are 1.1 / rate apart: 100 ms of slack in every second
# A budgeted call is placed at least this long after its release: its message reaches a worker
# before its instant, and the worker calls at the instant (a call whose message arrives late goes
# at once, and late calls bunch: the receiver would see them closer than the budget allows).
HEAD_START_S = 2.0
_US = 1_000_000
_MINUTE_US = 60 * _US


@dataclass(frozen=True)
class Placement:
    """Where one slot goes: its release instant, the budget's next free instant, an overrun."""

    release_at: datetime
    next_free: datetime | None
    overrun: bool


def spacing_us(rate_per_s: float) -> int:
    """Microseconds between two calls of a budget of ``rate_per_s`` (rounded up: never closer)."""
    return math.ceil(_US * (1 + SPACING_MARGIN) / rate_per_s)


def _lane_instant(earliest_us: int, step_us: int, group: int, groups: int) -> int:
    """The first grid instant at or after ``earliest_us`` in the lane of ``group`` of ``groups``.

    The grid restarts at each minute and ends a step before the next minute's start, so that
    instants of two minutes are never closer than a step either. When a minute cannot hold a
    turn of every lane (a budget smaller than its pollers take turns in a minute), the lanes take
    turns on the minutes' instants counted from the epoch: the same grid, whatever the number of
    lanes, so a worker's late call (one lane) and every minute's pollers share it (QA22: such a
    budget used a grid from the epoch in the pollers and the minute's in the worker, whose
    instants could be closer than a step). A step longer than a minute is one grid from the epoch.
    """
    if step_us > _MINUTE_US:
        j = -(-earliest_us // step_us)
        return (j + (group - j) % groups) * step_us
    per_minute = _MINUTE_US // step_us  # instants j x step with (j + 1) x step <= a minute
    if groups >= per_minute:
        minute, offset = divmod(earliest_us, _MINUTE_US)
        k = minute * per_minute + min(-(-offset // step_us), per_minute)  # (the next minute's first)
        k += (group - k) % groups
        return (k // per_minute) * _MINUTE_US + (k % per_minute) * step_us
    while True:
        start = earliest_us - earliest_us % _MINUTE_US
        j = -(-(earliest_us - start) // step_us)
        j += (group - j) % groups
        instant = start + j * step_us
        if instant + step_us <= start + _MINUTE_US:
            return instant
        earliest_us = start + _MINUTE_US  # none left in this minute: the next minute's grid


def place_slot(
    next_free: datetime | None,
    due: datetime,
    rate_per_s: float,
    max_lateness_s: float,
    lane: tuple[int, int] = (0, 1),
    not_before: datetime | None = None,
) -> Placement:
    """The release instant of a slot due at ``due`` under a budget of ``rate_per_s`` calls a second,
    placed by the poller of shard group ``lane[0]`` of ``lane[1]``, no earlier than ``not_before``
    (the poller's release plus :data:`HEAD_START_S`).

    ``next_free`` is this poller's state of the budget (None: nothing placed yet). See the
    module docstring.
    """
    if rate_per_s <= 0:
        raise ValueError("a rate budget must be positive")
    group, groups = lane
    step = spacing_us(rate_per_s)
    start = due if next_free is None or next_free <= due else next_free
    earliest = to_epoch_us(start if not_before is None or not_before <= start else not_before)
    release = from_epoch_us(_lane_instant(earliest, step, group, groups))
    if release - due > timedelta(seconds=max_lateness_s):
        return Placement(due, next_free, True)  # on time, reported
    return Placement(release, release + timedelta(microseconds=1), False)


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


_DEFAULT_PORTS = {"http": 80, "https": 443}  # (QA22: https://h:443/ and https://h/ kept two budgets)


def target_key(target: object) -> str:
    """What a budget is kept per: an HTTP target's host (``host:port`` when a port other than
    the scheme's own is given; no final dot), an AWS target's resource ARN."""
    url = getattr(target, "url", None)
    if isinstance(url, str):
        parts = urlsplit(url)
        host = (parts.hostname or "").lower().rstrip(".")
        port = parts.port if parts.port != _DEFAULT_PORTS.get(parts.scheme.lower()) else None
        return f"{host}:{port}" if port else host
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
        budgets[(tenant, target if target.startswith("arn:") else _host_key(target))] = rate
    return budgets


def budget_for(
    budgets: Mapping[tuple[str, str], float], tenant: str, key: str, own: float | None
) -> float | None:
    """The budget that applies: the target's own, else the tenant's for that host, else everyone's."""
    return own or budgets.get((tenant, key)) or budgets.get(("*", key))


def _host_key(target: str) -> str:
    """A deployment budget's ``host[:port]`` as :func:`target_key` spells a job's: lower case, no
    final dot, no port 80 or 443 (a job's URL with the scheme's own port is keyed without it)."""
    host, colon, port = target.lower().rpartition(":")
    if not colon or not port.isdigit():
        host, port = target.lower(), ""
    host = host.rstrip(".")
    return f"{host}:{port}" if port and int(port) not in _DEFAULT_PORTS.values() else host


class BudgetLedger:
    """The budgets' state in one poller: per (tenant, target), the next free instant. Thread-safe
    (a poller releases chunks concurrently); a slot is placed in the order it is released.

    ``lane`` is this poller's (shard group, group count) of its minute: the groups take turns on
    each budget's grid (:func:`place_slot`), so together they keep to it.
    """

    def __init__(
        self, budgets: Mapping[tuple[str, str], float] | None = None, lane: tuple[int, int] = (0, 1)
    ) -> None:
        self.budgets = dict(budgets or {})
        self.lane = lane
        self._next_free: dict[tuple[str, str], datetime | None] = {}
        self._lock = threading.Lock()

    def rate_for(self, tenant: str, key: str, own: float | None) -> float | None:
        return budget_for(self.budgets, tenant, key, own)

    def place(
        self,
        tenant: str,
        key: str,
        rate: float,
        due: datetime,
        max_lateness_s: float,
        not_before: datetime | None = None,
    ) -> Placement:
        with self._lock:
            state = (tenant, key)
            placement = place_slot(
                self._next_free.get(state), due, rate, max_lateness_s, self.lane, not_before
            )
            self._next_free[state] = placement.next_free
            return placement
