"""Lateness by what happened to a slot: every counted slot's fire delay, in three categories.

The verdict (:mod:`local.chaos.verdict`) holds a run to its fire delay over *every* owed slot of a
time-scheduled job that reached the receiver, whatever a kill did to it; this module says which
of three kinds each slot is, and how long a run cut by a kill waited for its re-run:

``untouched``
    no worker died with it: its first request is attempt 1 and arrived with no kill of a worker
    holding it before (it may still be late: a poller died, the machine was busy);
``died before the target``
    a worker died holding it before it called the target: a kill's snapshot of the batch held it
    before its first request, or its first request is a later attempt (the first was lost with
    its worker), or it arrived more than :data:`LOST_DELIVERY_S` late with a worker of its lane
    killed since its release (a batch received that very moment, missed by the snapshot). Its
    fire delay is the recovery: the lease returning the message, or the pollers' re-send;
``run cut mid-way``
    its first attempt reached the target and then its worker died: the attempt ends TIMED_OUT
    ("lease expired") and a later one re-runs the slot. Its fire delay is that first request's;
    the *re-run delay* is from the death (the last kill of its lane while the cut attempt ran)
    to the next attempt's start (its claim, or its request at the receiver if earlier).

The fire delay's p99 over all three together is what the run is held to (``Bounds.max_p99_delay_s``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from punctual.dispatch.polling.resend import RESEND_AFTER_S
from punctual.execution import LEASE_LOST_NOTE
from punctual.models import AttemptRecord, Execution, ExecutionStatus

UNTOUCHED = "untouched"
DIED_BEFORE_TARGET = "died before the target"
CUT_MID_WAY = "run cut mid-way"
CATEGORIES = (UNTOUCHED, DIED_BEFORE_TARGET, CUT_MID_WAY)
# A first request this late after its release, with a worker of the slot's lane killed in
# between, is a delivery lost with that worker (the worker-crash path), not fire delay. The
# quickest such recovery is the pollers' re-send of a slot no worker claimed, RESEND_AFTER_S after
# the send: the bound sits below it (at 5 s, re-sent slots, 4.1 s late, were counted untouched).
LOST_DELIVERY_S = RESEND_AFTER_S - 0.5


def nearest_rank(ordered: list[float], q: float) -> float:
    """The q-th percentile (0 < q <= 100) of sorted values by nearest rank: a value that was seen."""
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass(frozen=True)
class Delays:
    """p50, p99 and max of one delay over the slots that count, in seconds."""

    count: int
    p50: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Delays | None:
        ordered = sorted(values)
        if not ordered:
            return None
        return cls(len(ordered), nearest_rank(ordered, 50), nearest_rank(ordered, 99), ordered[-1])

    def text(self) -> str:
        return f"p50 {self.p50:.2f} s p99 {self.p99:.2f} s max {self.max:.2f} s"


@dataclass(frozen=True)
class SlotDelay:
    """One counted slot: fire delay (to the receiver), claim delay (to attempt 1's claim), its
    category, and (a run cut mid-way) from the death to the re-run's start."""

    job: str
    slot: str
    fire_s: float
    claim_s: float | None
    category: str = UNTOUCHED
    rerun_s: float | None = None


def _ts(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def _lease_lost(attempt: AttemptRecord) -> bool:
    return attempt.status is ExecutionStatus.TIMED_OUT and (attempt.error or "").startswith(LEASE_LOST_NOTE)


def rerun_delay(record: Execution | None, seen: list[dict[str, Any]], kills: list[float]) -> float | None:
    """From the death that cut the slot's first cut attempt to the next attempt's start (None: no
    attempt was cut by a kill, or none followed it)."""
    if record is None:
        return None
    attempts = sorted(record.attempts, key=lambda a: a.attempt)
    starts: dict[int, float] = {}
    for attempt in attempts:
        if (t := _ts(attempt.started_at)) is not None:
            starts[attempt.attempt] = t
    if (t := _ts(record.started_at)) is not None:
        starts.setdefault(record.attempt, t)
    for request in seen:
        n = int(request.get("attempt") or 0)
        starts[n] = min(starts.get(n, math.inf), float(request["arrived"]))
    for attempt in attempts:
        if not _lease_lost(attempt):
            continue
        began, ended = starts.get(attempt.attempt), _ts(attempt.finished_at)
        nxt = starts.get(attempt.attempt + 1)
        if began is None or ended is None or nxt is None:
            continue
        deaths = [t for t in kills if began - 1.0 <= t <= ended]
        if deaths:
            return nxt - max(deaths)
    return None


def categorize(
    release: float,
    record: Execution | None,
    seen: list[dict[str, Any]],
    kills: list[float],
    held_at: Iterable[float],
) -> tuple[str, float | None]:
    """The slot's category and its re-run delay (see the module docstring). ``seen``: its
    requests at the receiver, oldest first; ``kills``: of its lane's workers; ``held_at``: when a
    worker holding its delivery was killed."""
    first = seen[0]
    arrived = float(first["arrived"])
    if int(first.get("attempt") or 0) != 1 or any(t < arrived for t in held_at):
        return DIED_BEFORE_TARGET, rerun_delay(record, seen, kills)
    if arrived - release > LOST_DELIVERY_S and any(release - 1.0 <= t <= arrived for t in kills):
        return DIED_BEFORE_TARGET, rerun_delay(record, seen, kills)
    rerun = rerun_delay(record, seen, kills)
    return (CUT_MID_WAY if rerun is not None else UNTOUCHED), rerun


def latest(delays: list[SlotDelay], count: int = 5) -> str:
    """The ``count`` latest of fire-delay-sorted slots, latest first: job, slot, fire delay, and what
    happened to it when a kill did (its category, the re-run's delay from the death)."""

    def one(d: SlotDelay) -> str:
        text = f"{d.job} {d.slot} {d.fire_s:.1f} s"
        if d.category == UNTOUCHED and d.rerun_s is None:
            return text
        rerun = "" if d.rerun_s is None else f", re-run {d.rerun_s:.1f} s after the death"
        return f"{text} ({d.category}{rerun})"

    return ", ".join(one(d) for d in reversed(delays[-count:])) or "-"


def by_category(delays: Iterable[SlotDelay]) -> dict[str, Delays]:
    """Each category's fire delays (the categories that have slots)."""
    items = list(delays)
    out: dict[str, Delays] = {}
    for category in CATEGORIES:
        found = Delays.of(d.fire_s for d in items if d.category == category)
        if found is not None:
            out[category] = found
    return out


def notes(categories: dict[str, Delays], reruns: Delays | None) -> list[str]:
    """The verdict's lines about them."""
    lines = [
        "fire delay by category: "
        + (
            "; ".join(f"{name} {d.text()} ({d.count} slots)" for name, d in categories.items())
            or "- (0 slots)"
        )
    ]
    lines.append(
        "runs cut mid-way, from the death to the re-run's start: "
        + (f"{reruns.text()} ({reruns.count} runs)" if reruns else "- (0 runs)")
    )
    return lines
