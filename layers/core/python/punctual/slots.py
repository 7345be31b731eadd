"""When a job's slots are, and which of them to release: pure functions of the job and ``now``.

Slots are computed from the previous slot and the schedule, never from the clock, so clock
skew moves *when* a slot is released, never *whether* or *how often*.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache

from punctual import schedules
from punctual.models import CatchupKind, Job, JobSpec
from punctual.timers import Timer, TimerKind, TimerLayout, slot_key

MISSED_AFTER_S = 60  # a slot released later than this is "missed": the catch-up policy decides
# Catch-up releases at most this many slots per timer, then chains on through a near timer due
# now: a long outage drains a job a poll interval at a time, never in one unbounded release.
MAX_RELEASE_PER_TIMER = 30
_ONE_SECOND = timedelta(seconds=1)


def ceil_second(instant: datetime) -> datetime:
    """Slots are whole seconds: the first whole second at or after ``instant``."""
    whole = instant.astimezone(UTC).replace(microsecond=0)
    return whole if whole == instant else whole + _ONE_SECOND


@lru_cache(maxsize=4096)
def _parse(expression: str, timezone: str, gap: str | None, repeat: str | None) -> schedules.Schedule:
    dst = schedules.DstOptions(gap=gap, repeat=repeat) if (gap or repeat) else None  # type: ignore[arg-type]
    return schedules.cached_schedule(expression, timezone, dst)


def schedule_of(spec: JobSpec) -> schedules.Schedule:
    """The parsed schedule of a job, cached: a poller evaluates the same jobs every minute."""
    dst = spec.dst
    return _parse(spec.schedule, spec.timezone, dst.gap if dst else None, dst.repeat if dst else None)


def next_slot(job: Job, after: datetime) -> datetime | None:
    """The job's first slot strictly after ``after``, inside ``start_at``/``end_at``; None if none.

    ``delay(...)`` and ``after(...)`` jobs are not chained by the poller: the first is
    anchored here, later ones come from finish times and parents' successes.
    """
    return _next_slot(job, schedule_of(job), after)


def _next_slot(job: Job, schedule: schedules.Schedule, after: datetime) -> datetime | None:
    """:func:`next_slot` with the job's schedule already looked up."""
    if schedule.kind == "after":
        return None
    lower = after
    if job.start_at is not None:
        lower = max(lower, ceil_second(job.start_at) - _ONE_SECOND)
    slot = schedule.next_after(lower, anchor=job.anchor)
    if slot is None or (job.end_at is not None and slot > job.end_at):
        return None
    return slot


def first_slot(job: Job, now: datetime) -> datetime | None:
    """The slot a freshly registered (or resumed) job fires first."""
    schedule = schedule_of(job)
    if schedule.kind == "delay":
        # The first run of a fixed-delay job is the anchor plus the delay.
        slot = schedule.next_after(job.anchor, anchor=job.anchor)
        if slot is not None and slot <= now:
            slot = schedule.next_after(now, anchor=None)
        return slot
    return next_slot(job, now)


def dispatch_instant(job: Job, slot: datetime) -> datetime:
    """When a slot is released: its nominal instant plus the job's deterministic jitter."""
    if job.jitter_seconds <= 0:
        return slot
    return slot + timedelta(seconds=schedules.jitter_offset_s(job.id, slot, job.jitter_seconds))


def fire_timer(
    layout: TimerLayout, job: Job, slot: datetime, now: datetime, *, chained: bool = False
) -> Timer:
    """The timer that releases ``slot`` of ``job`` at its dispatch instant. ``chained``: written
    by a release, when an instant already passed makes it a CATCHUP timer, which waits its turn
    behind on-time slots."""
    due = dispatch_instant(job, slot)
    return layout.make(
        now=now,
        due=due,
        job_id=job.id,
        tenant=job.tenant,
        slot=slot_key(slot),
        attempt=1,
        kind=TimerKind.CATCHUP if chained and due <= now else TimerKind.FIRE,
        job_version=job.version,
    )


MISSED_BY_LATEST = "catch-up policy latest: a newer slot ran instead"
MISSED_BY_NONE = "catch-up policy none: missed slots are not run"
MISSED_OUTSIDE_WINDOW = "older than the catch-up window"


@dataclass
class ReleasePlan:
    """What one fire timer leads to."""

    release: list[datetime] = field(default_factory=list)  # slots to send, oldest first
    missed: list[tuple[datetime, str]] = field(default_factory=list)  # slots dropped, and why
    next_slot: datetime | None = None  # the slot of the timer to write next (None: the job completes)
    chain: bool = True  # False for delay(...) jobs, which chain from finish times

    @property
    def skipped(self) -> int:
        """How many slots the catch-up policy drops."""
        return len(self.missed)


def plan_release(job: Job, slot: datetime, now: datetime) -> ReleasePlan:
    """Decide which slots to release for a due fire timer of ``slot``.

    Normally that is just ``slot``, and the next timer is the following slot. After an
    outage the slots between ``slot`` and ``now`` are enumerated and the catch-up
    policy applied to those released more than :data:`MISSED_AFTER_S` late: ``all``
    releases every one inside the window, ``latest`` only the newest (and none if a
    slot is on time anyway), ``none`` skips them all.
    """
    schedule = schedule_of(job)
    if schedule.kind == "delay":
        return ReleasePlan(release=[slot], next_slot=None, chain=False)
    due: list[datetime] = []
    instants: list[datetime] = []  # dispatch_instant of each slot in ``due`` (jitter hashes once)
    current: datetime | None = slot
    while current is not None and len(due) < MAX_RELEASE_PER_TIMER:
        instant = dispatch_instant(job, current)
        if instant > now:
            break
        due.append(current)
        instants.append(instant)
        current = _next_slot(job, schedule, current)
    if not due:  # released early (clock skew): release it anyway, it is this timer's slot
        return ReleasePlan(release=[slot], next_slot=_next_slot(job, schedule, slot))
    missed_before = now - timedelta(seconds=MISSED_AFTER_S)
    if len(due) == 1 and instants[0] >= missed_before:
        # The common case, one slot on time: every policy releases just it.
        return ReleasePlan(release=due, next_slot=current)
    on_time = [s for s, at in zip(due, instants, strict=True) if at >= missed_before]
    late = [(s, at) for s, at in zip(due, instants, strict=True) if at < missed_before]
    window_start = now - timedelta(seconds=job.catchup.window_seconds)
    in_window = [s for s, at in late if at >= window_start]
    policy = job.catchup.policy
    if policy is CatchupKind.ALL:
        chosen, reason = in_window, MISSED_OUTSIDE_WINDOW  # only slots outside the window are dropped
    elif policy is CatchupKind.LATEST:
        chosen, reason = (in_window[-1:] if not on_time else []), MISSED_BY_LATEST
    else:
        chosen, reason = [], MISSED_BY_NONE
    kept, window = set(chosen), set(in_window)
    missed = [(s, reason if s in window else MISSED_OUTSIDE_WINDOW) for s, _ in late if s not in kept]
    return ReleasePlan(release=chosen + on_time, missed=missed, next_slot=current)
