"""A re-drain never judges MISSED a slot an earlier poller may have sent in time.

A slot's fate is decided when it is released: more than 60 s late the job's catch-up policy
applies (``none``: MISSED; ``latest``: only the newest runs), past ``catchup.window_seconds``
every policy records it MISSED. A poller that resumes another's work (a restart that re-reads its
look-back, a dead poller's minute drained by the next minute's poller) releases again, as
*uncertain*, timers the earlier one may have released already. Such a timer whose chain's next
timer is not held beside it (a job due once a minute or less often: its next timer is in a later
minute) is planned again as of now, and its slot, sent on time and still waiting in a backlogged
queue, was found over 60 s late and recorded MISSED; the worker then dropped the original message
on that record (QA: 600 ``rate(1 hour)`` jobs of catch-up ``none`` due at :20, workers claiming 5
a second, the minute's poller dead at :25: 296 slots sent on time were recorded MISSED and never
ran).

So an uncertain release knows until when the earlier poller may have been releasing
(``sent_by_ms``; None: no earlier poller released any of it, which a minute without progress
marks shows). A slot its plan would drop for lateness is *maybe sent* when an earlier release
could have sent it: the first instant that release could be made (the later of the timer's due
instant and the slot's dispatch instant) is by ``sent_by_ms`` and not past the slot's fate line
(:func:`punctual.timing.slots.fate_keep_s` after its dispatch instant). Such a slot is released
as a copy of the message that may stand in the queue (same deduplication id, sent as it is, no
fire delay counted): a slot a worker already claimed has a record and is not sent again, the claim
keeps the slot to one run, and nothing is recorded MISSED over a message that will run. A slot
no earlier poller can have released in time (due after ``sent_by_ms``: the pollers were down)
keeps its policy's verdict.

What it costs: the copies of a restart's or a catch-up's uncertain slots are sent where they were
recorded MISSED before; SQS drops a copy sent within five minutes of its original.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from punctual.models import Job
from punctual.store.base import ExecutionKey
from punctual.timing.slots import (
    MISSED_BY_LATEST,
    MISSED_BY_NONE,
    MISSED_OUTSIDE_WINDOW,
    ReleasePlan,
    dispatch_instant,
    fate_keep_s,
    next_slot,
)
from punctual.timing.timers import Timer, TimerKind, slot_instant, slot_key, to_ms

# Why a slot is dropped for when it is released (with a cause before it, e.g. a pause's)
_LATENESS = (MISSED_BY_NONE, MISSED_BY_LATEST, MISSED_OUTSIDE_WINDOW)


def keep_maybe_sent(job: Job, plan: ReleasePlan, timer: Timer, sent_by_ms: int) -> list[ExecutionKey]:
    """Move out of ``plan.missed`` into ``plan.release`` the slots an earlier release of
    ``timer``, made by ``sent_by_ms``, may have sent in time; returns their keys. Whatever the
    verdict that planned them: the job's chain, a chain a pause cut (its slots owed by the pause
    are late only when due before it, where no release could send them in time), a replaced one
    (a slot its new spec does not run keeps that reason)."""
    keep_ms = fate_keep_s(job, timer.kind) * 1000
    kept: list[datetime] = []
    rest: list[tuple[datetime, str]] = []
    for slot, reason in plan.missed:
        at_ms = to_ms(dispatch_instant(job, slot))
        earliest_ms = max(timer.due_ms, at_ms)  # the first instant a release could send it
        if reason.endswith(_LATENESS) and earliest_ms <= sent_by_ms and earliest_ms <= at_ms + keep_ms:
            kept.append(slot)
        else:
            rest.append((slot, reason))
    if kept:
        plan.missed = rest
        plan.release = sorted([*plan.release, *kept])
    return [(job.tenant, job.id, slot_key(slot)) for slot in kept]


def paused_copy(job: Job, timer: Timer, sent_by_ms: int) -> tuple[Job, ReleasePlan, Timer | None] | None:
    """For a paused job's chain timer an uncertain release would park (its slot owed by the
    resume, decided then by the catch-up policy), when an earlier release may have sent its slot in
    time, before the pause: that slot's fate was decided then, and is its message's (the claim skips
    it while the job is paused, runs it once resumed), not the resume's, which would record MISSED
    a slot whose message still waits in the queue. So: the chain (its version) and a plan that
    sends a copy of that message; and the timer of the slot after it to park, when that one was due
    before the pause too (None: nothing more owed). None: a slot no earlier release sent in time."""
    slot = slot_instant(timer.slot)
    at_ms = to_ms(dispatch_instant(job, slot))
    earliest_ms = max(timer.due_ms, at_ms)
    if earliest_ms > sent_by_ms or earliest_ms > at_ms + fate_keep_s(job, timer.kind) * 1000:
        return None
    chain = job.model_copy(update={"version": timer.job_version})
    following = next_slot(job, slot)
    paused_at = job.paused_at
    owed = following is not None and paused_at is not None and following < paused_at
    rest = replace(timer, slot=slot_key(following)) if owed and following is not None else None
    return chain, ReleasePlan(release=[slot], chain=False), rest


def sent_by_ms(
    marks: Iterable[int], held: Iterable[Timer], unmarked_ms: int, now_ms: int, bound: int | None = None
) -> int | None:
    """Until when the pollers that wrote a past minute's progress may have been releasing its
    timers. ``bound``: the furthest send bound of those that wrote one (:mod:`.sent_bound`: no
    timer due after it was sent). ``marks``: the release marks of those that wrote none (a poller
    from before the bound), and ``held`` the timers a drain of it read from the marks on. None:
    neither, no poller released any of it.

    A release mark bounds its poller's sends only by belief: a mark a lagging CATCHUP timer held
    back (it sits just before one: a mark never passes a timer waiting its turn) says nothing of
    how far its poller went on releasing the minute's on-time timers behind it, maybe to the
    minute's end: then all of it, ``now_ms``. Else the furthest mark and ``unmarked_ms`` (how long a
    poller may release past its last mark)."""
    through = set(marks)
    found = [] if bound is None else [bound]
    if any(timer.kind is TimerKind.CATCHUP and timer.due_ms - 1 in through for timer in held):
        found.append(now_ms)
    elif through:
        found.append(max(through) + unmarked_ms)
    return min(now_ms, max(found)) if found else None


__all__ = ["keep_maybe_sent", "paused_copy", "sent_by_ms"]
