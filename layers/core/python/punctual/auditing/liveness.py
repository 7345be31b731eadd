"""What a live chain is, per kind of job: pure functions of a job, an instant and what was read.

A job's *chain* is what brings its next slot: for a job whose slots come from the clock
(``cron``, ``rate``, ``at``) a FIRE or CATCHUP timer that each release replaces by the next one;
for a ``delay(...)`` job the timer its last run's end wrote (or its registration's), or that run
while it is in flight; for an ``after(...)`` job its parents' links to it. Executions in flight
have chains of their own: a RETRY_WAIT slot its retry timer, a RUNNING one its lease (the
message, or a LEASE timer), a QUEUED one its turn or its check timer; a running backfill its step
timer.

Every judgement here leaves *grace*: a chain counts as live when the slot it should hold came due
less than ``grace`` ago, because the poller writes the next timer right after a release and a
slot's timer is kept (immutable, a day past its due) after it fired. So the head the auditor looks
for is the first slot released after ``now - grace``: its timer exists on a live chain whether the
slot is still ahead or was released a moment ago.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from punctual.models import CatchupKind, Execution, ExecutionStatus, Job, Overlap
from punctual.models.executions import IN_FLIGHT
from punctual.store.base import Turn
from punctual.timing.slots import dispatch_instant, fire_timer, first_slot, next_slot, schedule_of
from punctual.timing.timers import (
    CHAIN_KINDS,
    Lane,
    Timer,
    TimerKind,
    TimerLayout,
    minute_of,
    minutes_between,
    slot_instant,
    slot_key,
)
from punctual.usecases.backfills import Backfill, BackfillState
from punctual.usecases.delay_chains import chains_from, next_delay_slot

# With jitter, a slot's release can come after a later slot's: the head is the first slot in
# slot order released after the instant, found by stepping; a job that needs more steps than this
# (a jitter many times its period) is not judged (counted ``skipped``).
MAX_HEAD_STEPS = 256
# The lane of a timer depends on when it was written; around the lane threshold both are read.
LANE_MARGIN_S = 10
# A head timer in the wrong minute (a bad write, a fault) is looked for this far either side of
# its slot's minute, only for a chain about to be repaired.
MISPLACED_MINUTES = 10
ONE_SECOND = timedelta(seconds=1)
# A clock repair restarts the chain at the first slot released after now minus this, not after
# now: the auditor's clock may be this far ahead of the cluster's (an auditor ahead by 30 s
# recorded a slot due 20 s later lost, and completed a one-time job before its instant). A slot of
# the margin that was due is released at once (late, under its catch-up policy), not lost.
REPAIR_SKEW_S = 30


class ChainKind(StrEnum):
    CLOCK = "clock"  # cron, rate, at: the poller writes each next timer
    DELAY = "delay"  # delay(...): each run's end writes the next timer
    AFTER = "after"  # after(...): the parents' successes dispatch it


class HeadTooFar(Exception):
    """The job's head needs more than :data:`MAX_HEAD_STEPS` steps to find (a large jitter)."""


def chain_kind(job: Job) -> ChainKind:
    kind = schedule_of(job).kind
    if kind == "after":
        return ChainKind.AFTER
    if kind == "delay":
        return ChainKind.DELAY
    return ChainKind.CLOCK


def head_after(job: Job, instant: datetime) -> datetime | None:
    """The first slot, in slot order, whose release instant is after ``instant``: the slot whose
    timer a live chain holds (None when the job has no slot left).

    Releases follow slot order, and a slot's timer is written when the one before it is
    released: so the head is the first slot released after ``instant``, even when jitter makes a
    slot's release come before its predecessor's.
    """
    if job.jitter_seconds <= 0:
        return next_slot(job, instant)
    slot = next_slot(job, instant - timedelta(seconds=job.jitter_seconds) - ONE_SECOND)
    for _ in range(MAX_HEAD_STEPS):
        if slot is None or dispatch_instant(job, slot) > instant:
            return slot
        slot = next_slot(job, slot)
    raise HeadTooFar(job.id)


def placements(layout: TimerLayout, job: Job, head: datetime, written: list[datetime]) -> list[Timer]:
    """Where the timer of ``head`` is, if it was written at one of ``written`` (give or take the
    lane margin): one far or near bucket each; the caller matches by job and slot, not by key."""
    out: dict[tuple[Lane, int, int], Timer] = {}
    for at in written:
        for delta in (0, LANE_MARGIN_S):
            timer = fire_timer(layout, job, head, at + timedelta(seconds=delta))
            out.setdefault((timer.lane, timer.shard, timer.due_ms // 60_000), timer)
    return list(out.values())


def clock_writes(layout: TimerLayout, job: Job, head: datetime) -> list[datetime]:
    """When a clock job's chain wrote the timer of ``head``: when the slot before it was
    released (read in the near lane when that is within the lane threshold), or at the job's
    last change (registration, replace, resume) when ``head`` is the first slot since."""
    due = dispatch_instant(job, head)
    window = timedelta(seconds=layout.far_threshold_s + LANE_MARGIN_S)
    writes = [job.updated_at]
    earlier = next_slot(job, head - window)
    if earlier is not None and earlier < head:
        writes.append(due - ONE_SECOND)  # a slot within the threshold before it: the near lane
        writes.append(dispatch_instant(job, earlier))  # the earliest such: far, if far enough
    else:
        writes.append(due - window - ONE_SECOND)  # written well ahead: the far lane
    return writes


def is_chain_timer(timer: Timer, job: Job) -> bool:
    """A timer that carries ``job``'s chain: its FIRE/CATCHUP timer, first attempt, current version."""
    return (
        timer.tenant == job.tenant
        and timer.job_id == job.id
        and timer.kind in CHAIN_KINDS
        and timer.attempt == 1
        and timer.job_version == job.version
    )


def holds_head(timers: list[Timer], job: Job, head: datetime) -> bool:
    """Whether ``timers`` hold the chain at ``head`` or past it."""
    return any(is_chain_timer(t, job) and slot_instant(t.slot) >= head for t in timers)


def stray_buckets(
    layout: TimerLayout, job: Job, head: datetime, since: datetime
) -> list[tuple[Lane, datetime, int]]:
    """The job's buckets, both lanes, within :data:`MISPLACED_MINUTES` of ``head``'s minute (from
    ``since``'s on: one before was released and its slot's record tells), where a misplaced timer
    of ``head`` can be."""
    due = minute_of(dispatch_instant(job, head))
    window = timedelta(minutes=MISPLACED_MINUTES)
    minutes = minutes_between(max(minute_of(since), due - window), due + window)
    return [
        (lane, m, layout.shard_for(lane, job.tenant, job.id))
        for m in minutes
        for lane in (Lane.FAR, Lane.NEAR)
    ]


def misplaced(timers: list[Timer], job: Job, head: datetime) -> Timer | None:
    """A chain timer of ``head`` among ``timers`` (read where it should not be), the earliest."""
    found = [t for t in timers if is_chain_timer(t, job) and t.slot == slot_key(head)]
    return min(found, key=lambda t: t.due_ms, default=None)


def in_motion(timers: list[Timer], job: Job, since: datetime) -> bool:
    """Whether the chain wrote or released a timer due at or after ``since`` (a catch-up, or a
    timer written after its instant, whose due is when it was written)."""
    since_ms = int(since.timestamp() * 1000)
    return any(is_chain_timer(t, job) and t.due_ms >= since_ms for t in timers)


# --------------------------------------------------------------------------- delay(...)


def scheduled(record: Execution) -> bool:
    """A record of a scheduled slot (a run-now slot, ``~m...``, is no link of any chain)."""
    return "~" not in record.slot


_NOT_RUN = frozenset({ExecutionStatus.EXCLUDED, ExecutionStatus.MISSED})


def delay_heads(job: Job, newest: Execution | None) -> list[tuple[datetime, datetime]]:
    """The slot a ``delay(...)`` chain waits on, with when its timer was written: after its
    newest run of this version (or the run a change left the chain to) ended, as the worker chains
    it, else the first slot of its last change (registration or replace; a resume may start from
    its pause instead)."""
    if newest is not None and chains_from(job, newest) and newest.status.terminal:
        finished = newest.finished_at or newest.scheduled_at
        # A slot not run: the release that recorded it chained on from the slot's own instant
        ended = slot_instant(newest.slot) if newest.status in _NOT_RUN else finished
        slot = next_delay_slot(job, newest.slot, ended)
        return [] if slot is None else [(slot, finished)]
    armed = job.updated_at
    heads: list[tuple[datetime, datetime]] = []
    first = first_slot(job, armed)
    if first is not None:
        heads.append((first, armed))
    if job.paused_at is not None and job.catchup.policy is not CatchupKind.NONE:
        after = max(job.paused_at, armed - timedelta(seconds=job.catchup.window_seconds))
        resumed = next_slot(job, after)
        if resumed is not None and resumed != first:
            heads.append((resumed, armed))
    return heads


def delay_placements(layout: TimerLayout, job: Job, heads: list[tuple[datetime, datetime]]) -> list[Timer]:
    """Where a delay chain's next timer is: written at its run's end (or the change), due at the
    slot's release instant, or at once when that had passed."""
    out: dict[tuple[Lane, int, int], Timer] = {}
    for head, written in heads:
        for timer in placements(layout, job, head, [written]):
            out.setdefault((timer.lane, timer.shard, timer.due_ms // 60_000), timer)
    return list(out.values())


# --------------------------------------------------------------------------- in flight


@dataclass(frozen=True)
class FollowUp:
    """The timer that moves a slot in flight on (a retry, a lease takeover, a queued check)."""

    kind: TimerKind
    slot: str
    attempt: int
    owner: str | None
    reason: str


def stuck(job: Job, record: Execution, now: datetime, grace_s: float) -> FollowUp | None:
    """A slot in flight that its own timer should have moved on more than ``grace_s`` ago.

    RETRY_WAIT: its retry is due at most ``retry.max_seconds`` after its attempt ended; a slot
    still waiting ``grace_s`` past that lost its retry timer. RUNNING: a lease that lapsed
    ``grace_s`` ago was never taken over (the message and the LEASE timer both lost).
    """
    cutoff = now - timedelta(seconds=grace_s)
    if record.status is ExecutionStatus.RETRY_WAIT:
        ended = record.finished_at or record.scheduled_at
        if ended + timedelta(seconds=job.retry.max_seconds) <= cutoff:
            return FollowUp(TimerKind.RETRY, record.slot, record.attempt + 1, None, "retry overdue")
        return None
    if record.status is ExecutionStatus.RUNNING:
        if record.lease_until is not None and record.lease_until <= cutoff:
            return FollowUp(TimerKind.LEASE, record.slot, record.attempt, record.owner, "lease lapsed")
        return None
    return None


def stuck_turn(
    job: Job,
    turn: Turn,
    holder: Execution | None,
    waiting: Execution | None,
    now: datetime,
    grace_s: float,
    stale_turn_s: float,
) -> FollowUp | None:
    """A ``skip``/``queue`` job's turn that does not move: its holder stuck in flight, or the
    oldest queued slot (``waiting``, its record) still QUEUED ``grace_s`` after the holder ended
    or was found stale: the hand-over and every check of it were lost."""
    if job.overlap is Overlap.ALLOW:
        return None
    if holder is not None and holder.status in IN_FLIGHT:
        return stuck(job, holder, now, grace_s)
    cutoff = now - timedelta(seconds=grace_s)
    if waiting is None or waiting.status is not ExecutionStatus.QUEUED or waiting.scheduled_at > cutoff:
        return None
    if turn.holder is None:
        reason = "a slot waits while the turn is free"
    elif holder is None:
        since = turn.since or now
        if since + timedelta(seconds=stale_turn_s) > cutoff:
            return None
        reason = f"the turn's holder {turn.holder} never started"
    elif (holder.finished_at or now) <= cutoff:
        reason = f"the turn's holder {holder.slot} ended"
    else:
        return None
    return FollowUp(TimerKind.QUEUED, waiting.slot, waiting.attempt, None, reason)


def stalled(backfill: Backfill, now: datetime, grace_s: float) -> bool:
    """A running backfill whose steps stopped: each step writes its record, every ``tick_s``."""
    if backfill.state is not BackfillState.RUNNING:
        return False
    quiet = max(grace_s, 10 * backfill.tick_s)
    return backfill.updated_at + timedelta(seconds=quiet) <= now
