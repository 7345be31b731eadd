"""Long runs of missed slots, counted and recorded without listing each one.

A job paused for a year at ``rate(1 second)`` owes 31.5 million slots when it is resumed; an
outage leaves thousands behind a ``rate(1 second)`` job. The catch-up policy runs few of them (the
window's, or the newest) and drops the rest, and every dropped slot must be accounted for. Listing
them one by one would cost a record and a schedule step each; instead a *run* of more than
:data:`RANGE_AFTER` consecutive slots dropped for the same reason becomes one MISSED *range record*
(the first slot's record, naming the last slot and how many it stands for), counted in full in
``SlotsMissed`` and the job's ``skipped_slots``. Shorter runs keep a record per slot.

Counting a run is arithmetic for ``rate(...)``; other schedules are stepped through, at most
:data:`SPAN_CAP` slots per release (a longer run is recorded in pieces, one per release, chained
like any catch-up).

Pure functions of their arguments: :func:`punctual.timing.slots.plan_release` supplies the schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

RANGE_AFTER = 30  # a run of more than this many dropped slots is one range record (the per-timer cap)
SPAN_CAP = 2_000  # slots of a schedule other than rate(...) stepped through per release (~40 ms)

Step = Callable[[datetime], datetime | None]  # the job's next slot strictly after an instant


@dataclass(frozen=True)
class MissedRange:
    """``count`` consecutive slots, ``first`` to ``last``, dropped for ``reason``."""

    first: datetime
    last: datetime
    count: int
    reason: str


@dataclass(frozen=True)
class Span:
    """The slots from ``first`` up to (not including) an instant."""

    count: int
    last: datetime | None  # the last of them (None when there are none)
    following: datetime | None  # the first slot after them (None: the schedule ends first)
    complete: bool  # False: cut at the cap, ``following`` is the next slot still before the instant


def span(
    first: datetime, before: datetime, step: Step, period: timedelta | None, end_at: datetime | None, cap: int
) -> Span:
    """The slots ``first``, ``step(first)``, ... that are before ``before``.

    ``first`` is a slot of the schedule. ``period``: the schedule is ``rate(...)``, whose slots
    are ``first + k * period`` up to ``end_at`` (counted, not stepped). Otherwise at most
    ``cap`` slots are stepped through.
    """
    if first >= before:
        return Span(0, None, first, True)
    if period is not None:
        bound = before if end_at is None or end_at >= before else None
        if bound is not None:
            count = -(-(bound - first) // period)  # ceil: the slots strictly before ``before``
        else:
            assert end_at is not None
            count = (end_at - first) // period + 1  # the slots up to ``end_at`` (all before ``before``)
        last = first + (count - 1) * period
        following = last + period
        if end_at is not None and following > end_at:
            return Span(count, last, None, True)
        return Span(count, last, following, True)
    stepped, seen = 0, None
    current: datetime | None = first
    while current is not None and current < before:
        if stepped == cap:
            return Span(stepped, seen, current, False)
        stepped, seen = stepped + 1, current
        current = step(current)
    return Span(stepped, seen, current, True)


@dataclass
class Bulk:
    """What :func:`drop_in_bulk` skipped: the range records, and where the plan goes on."""

    ranges: list[MissedRange] = field(default_factory=list)
    following: datetime | None = None  # the next slot to plan (None: the schedule ended)
    complete: bool = True  # False: a range was cut at the cap; the plan goes on from ``following``


def drop_in_bulk(
    first: datetime,
    step: Step,
    period: timedelta | None,
    end_at: datetime | None,
    segments: list[tuple[datetime, str]],
) -> Bulk:
    """Skip, oldest first, the runs of slots that ``segments`` drop whatever else happens.

    ``segments`` are ``(before, reason)`` in increasing ``before`` (nominal slot instants): the
    slots before the first are dropped for the first reason, then those before the second for the
    second, and so on. A run of :data:`RANGE_AFTER` slots or fewer ends the bulk: the plan's
    slot-by-slot pass records those one by one.
    """
    bulk = Bulk(following=first)
    for before, reason in segments:
        current = bulk.following
        if current is None:
            return bulk
        probe = span(current, before, step, period, end_at, RANGE_AFTER + 1)
        if probe.count == 0:
            continue
        if probe.count <= RANGE_AFTER:
            return bulk  # a short run: one record per slot, as the slot-by-slot pass writes them
        run = probe if period is not None else span(current, before, step, period, end_at, SPAN_CAP)
        assert run.last is not None
        bulk.ranges.append(MissedRange(current, run.last, run.count, reason))
        bulk.following = run.following
        if not run.complete:
            bulk.complete = False
            return bulk
    return bulk


def without_taken(
    first: datetime,
    last: datetime,
    count: int,
    taken: list[tuple[datetime, datetime, int]],
    step: Step,
    period: timedelta | None,
    end_at: datetime | None,
) -> list[tuple[datetime, datetime, int]]:
    """The runs of the range ``first`` to ``last`` (``count`` slots) less the slots ``taken``:
    ``(slot, last, count)`` of each record already in it, oldest first (one slot's, or a range
    record's), after ``first``. Each run is ``(first, last, count)``; a range with nothing taken is
    itself. A slot of the range never stands in two records (QA23: a slot a backfill ran during a
    pause was counted MISSED too by the range the resume wrote over it)."""
    runs: list[tuple[datetime, datetime, int]] = []
    current: datetime | None = first
    left = count
    for slot, until, many in taken:
        if current is None or slot > last:
            break
        if slot < current:
            continue
        if slot > current:
            run = span(current, slot, step, period, end_at, left)
            if run.last is not None:
                runs.append((current, run.last, run.count))
                left -= run.count
        left -= many
        current = step(until)
    if current is not None and current <= last and left > 0:
        runs.append((current, last, left))
    return runs
