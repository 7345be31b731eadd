"""Whether the parents of an ``after(A, B, ...)`` job ever share a slot.

Such a job runs slot S once every parent succeeded for slot S: parents whose schedules never
land on the same instant (``cron(0 * * * ? *)`` and ``cron(30 * * * ? *)``) leave it ENABLED and
never running, without a sign. A create or replace is refused when they share no slot in the
coming year (or, for frequent parents, the week the walk's bound covers); ``rate(...)`` parents
are decided by arithmetic. Parents that are themselves
``after(...)`` or ``delay(...)`` jobs have no slots to compare (their slots come from finishes):
nothing is decided for them, as nothing can be known in advance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta

from punctual.models import Job
from punctual.models.jobs import SLOT_FIELDS
from punctual.timing.instants import format_instant
from punctual.timing.slots import next_slot, schedule_of

HORIZON = timedelta(days=366)
# The walk's bound, in next-slot computations (~5 µs each: 0.3 s at most, however many parents).
# Stopped by it before the year, the parents are all frequent (steps of minutes or seconds): a
# week without a shared slot is refused too, naming the span, as a week of schedules that repeat
# daily or weekly shows all they will do (two rate(1 minute) jobs registered 12 s apart: never).
MAX_WORK = 60_000
MIN_SPAN = timedelta(days=7)
TIMING_FIELDS = SLOT_FIELDS  # what decides a job's slots (an edit keeping them is never judged)
_INSTANT = timedelta(microseconds=1)


def no_shared_slot(parents: Sequence[Job], now: datetime) -> str | None:
    """Why ``parents`` share no slot from ``now`` on (a sentence naming them), or None when they
    do, may (a parent without fixed slots), or the check is inconclusive.

    The walk: the latest of the parents' next slots at or after ``t`` becomes ``t``, until every
    parent has a slot at ``t`` (shared), one has no slot left, or the year is past."""
    if len(parents) < 2 or any(schedule_of(p).kind in ("after", "delay") for p in parents):
        return None
    names = ", ".join(repr(p.id) for p in parents)
    if all(schedule_of(p).kind == "rate" and p.end_at is None for p in parents):
        return _rates_never_meet(parents, now, names)
    t = now + _INSTANT
    for _ in range(MAX_WORK // len(parents)):
        slots = [next_slot(p, t - _INSTANT) for p in parents]
        ended = [p.id for p, slot in zip(parents, slots, strict=True) if slot is None]
        if ended:
            return f"after(): parent {ended[0]!r} has no slot left that the other parents share"
        latest = max(s for s in slots if s is not None)
        if all(slot == latest for slot in slots):
            return None
        if t > now + HORIZON:  # every instant up to t was passed over without a shared slot
            return _refusal(names, "in the year from", now)
        t = latest
    return _refusal(names, f"in the {(t - now).days} days from", now) if t - now >= MIN_SPAN else None


def _rates_never_meet(parents: Sequence[Job], now: datetime, names: str) -> str | None:
    """``rate(...)`` parents without an end: slots ``first + k * period`` (whole seconds, no DST),
    which meet somewhere iff every two firsts differ by a multiple of their periods' gcd (the
    Chinese remainder theorem for two moduli; pairwise is enough for all). Decided at once, however
    far apart the meeting is (twenty rate(1 minute) jobs registered a second apart: never)."""
    grids = []
    for parent in parents:
        first = next_slot(parent, now)
        second = next_slot(parent, first) if first is not None else None
        if first is None or second is None:
            return None  # (a rate job without an end always has a next slot)
        grids.append((int(first.timestamp()), int((second - first).total_seconds())))
    for i, (first_a, period_a) in enumerate(grids):
        for first_b, period_b in grids[i + 1 :]:
            if (first_a - first_b) % math.gcd(period_a, period_b):
                return _refusal(names, "ever, from", now)
    return None


def _refusal(names: str, span: str, now: datetime) -> str:
    return (
        f"after(): parents {names} share no slot {span} {format_instant(now)}; a child runs slot S"
        " once every parent succeeded for slot S, so it would never run"
    )
