"""A job as it is read: its ``next_fire_at``, derived from the schedule when read (never written
on every fire), passing over the days of the calendars it excludes.

``next_fire_at`` is the next instant the job's chain releases a slot, as the pollers do:

* A slot is released at its dispatch instant (its nominal instant plus the job's jitter), so a
  jittered slot whose nominal instant has passed is still to come until its dispatch instant (an
  hourly job with ``jitter_seconds`` 3000: at 10:00:01 the 10:00 slot, due at 10:18:26, is next).
  A slot whose dispatch instant is not after now is released, or being released.
* A release sends its slot and every later one whose dispatch instant has come too (a jitter
  longer than the gap between two slots can put a slot's before the previous one's): so the
  next release is the dispatch instant of the *first slot in slot order* whose dispatch instant
  is after now, not the earliest of them.
* Right after a resume that owes slots the catch-up policy runs (the RESUME timer, due at the
  resume), now: until the first of them is claimed (has an execution record), then as above.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from punctual.models import Job, JobState
from punctual.models.jobs import chain_end
from punctual.store.base import JobStore
from punctual.timing.owed import not_run_why
from punctual.timing.slots import (
    MISSED_AFTER_S,
    calendar_before_catchup,
    dispatch_instant,
    next_slot,
    plan_release,
    resume_start,
    schedule_of,
)
from punctual.timing.timers import slot_key
from punctual.usecases.calendars import Calendar, excluding, included_slots, on_excluded_day

# How long after a resume a read looks for the slots it owes (one execution record read per job
# read): the RESUME timer is due at the resume and released at the pollers' next pass, a second
# or so on; a slot still unclaimed a minute on is late by the pollers' own measure, and the
# reads from then on show the chain's next release.
OWED_LOOKUP_S = MISSED_AFTER_S


class NextFire:
    """Adds ``next_fire_at`` to jobs read from ``store``, as of ``now()``."""

    def __init__(self, store: JobStore, now: Callable[[], datetime]) -> None:
        self.store = store
        self.now = now

    def calendars_of(self, jobs: list[Job]) -> dict[tuple[str, str], Calendar]:
        """The calendars ``jobs`` exclude, read once each."""
        keys = {(job.tenant, name) for job in jobs for name in job.exclude_calendars}
        return self.store.batch_get_calendars(keys) if keys else {}

    def excluded_by(
        self, job: Job, calendars: dict[tuple[str, str], Calendar] | None = None
    ) -> list[Calendar]:
        """The calendars ``job`` excludes, as they are now (one missing is left out)."""
        if not job.exclude_calendars:
            return []
        found = calendars if calendars is not None else self.calendars_of([job])
        return [found[key] for key in ((job.tenant, n) for n in job.exclude_calendars) if key in found]

    def of(self, job: Job, calendars: dict[tuple[str, str], Calendar] | None = None) -> Job:
        """``next_fire_at`` is derived from the schedule when read, never written on every fire;
        slots on a day of a calendar the job excludes are passed over."""
        nxt: datetime | None = None
        if job.state is JobState.ENABLED and schedule_of(job).kind not in ("after", "delay"):
            excluding_calendars = self.excluded_by(job, calendars)
            now = self.now()
            owed = owes_now(self.store, job, now, excluding_calendars)
            nxt = now if owed else next_release(job, now, excluding_calendars)
        return job.model_copy(update={"next_fire_at": nxt})


def owes_now(store: JobStore, job: Job, now: datetime, calendars: Sequence[Calendar]) -> bool:
    """Whether a resume's RESUME timer is still to run a slot the pause owes (its first such slot
    has no execution record yet: a worker creates it when it claims the slot)."""
    owed = owed_by_resume(job, now, calendars)
    return owed is not None and store.get_execution(job.tenant, job.id, slot_key(owed)) is None


def next_release(job: Job, now: datetime, calendars: Sequence[Calendar] = ()) -> datetime | None:
    """When the job's chains next release a slot after ``now`` (each chain's first slot, in slot
    order, whose dispatch instant is after ``now`` and which no calendar of ``calendars``
    excludes); None when no slot is left. A jittered slot is looked for from ``jitter_seconds``
    before now (no later one has a dispatch instant already past), but not before the job's
    registration: a chain goes on from there across a replace (the old chain's slots due by it are
    released under the new spec, on the old chain's timing when the replace moved it) and a pause
    (the resume releases what the pause owes, and the slots due before the pause a poller meets
    after the resume): :mod:`punctual.dispatch.polling.chains`."""
    heads = [found[0][1] for found in _chain_releases(job, now, calendars, 1) if found]
    return min(heads, default=None)


def upcoming_slots(
    job: Job, now: datetime, calendars: Sequence[Calendar] = (), count: int = 10
) -> list[datetime]:
    """The next ``count`` slots the job's chains release after ``now``, in slot order
    (:func:`upcoming_releases` without the instants)."""
    return [slot for slot, _ in upcoming_releases(job, now, calendars, count)]


def upcoming_releases(
    job: Job, now: datetime, calendars: Sequence[Calendar] = (), count: int = 10
) -> list[tuple[datetime, datetime]]:
    """The next ``count`` slots the job's chains release after ``now``, in slot order, each with
    when its chain releases it (:func:`release_instants`), as :func:`next_release` finds the first
    (a jittered slot whose instant passed but whose dispatch instant has not is still to come;
    slots on a day of ``calendars`` are passed over). A replace that moved the job's timing leaves
    the old chain's slots due by it, still to be released on its timing (QA26: the new timing's
    slots before the replace were listed, which no chain releases, and these left out). Slots a
    resume owes (released at once) are not among them."""
    found = [release for chain in _chain_releases(job, now, calendars, count) for release in chain]
    return sorted(found)[:count]


def _chain_releases(
    job: Job, now: datetime, calendars: Sequence[Calendar], count: int
) -> list[list[tuple[datetime, datetime]]]:
    """Each chain's next ``count`` slots after ``now`` and their release instants: the chains that
    replaces moving the job's timing ended (their slots due by the replace: the poller's
    Verdict.REPLACED), then the current one (its slots after the last such replace)."""
    chains: list[tuple[Job | None, datetime | None]] = []
    for restart in job.restarts:
        if restart.timing is None:
            continue  # the same timing goes on
        # Only a chain ended less than its jitter ago has a slot still to dispatch (its timing, the
        # job on it, is made only then: most ended chains are long released)
        pending = restart.at + timedelta(seconds=restart.timing.get("jitter_seconds") or 0) > now
        found = chain_end(job, restart.until_version) if pending else None
        chains.append((found[1] if found is not None else None, restart.at))
    chains.append((job, None))
    out: list[list[tuple[datetime, datetime]]] = []
    lower: datetime | None = None
    for walker, until in chains:
        if walker is not None:
            slots = _pending_slots(job, walker, now, calendars, count, lower, until)
            out.append(list(zip(slots, release_instants(walker, slots), strict=True)))
        lower = until
    return out


def _pending_slots(
    job: Job,
    walker: Job,
    now: datetime,
    calendars: Sequence[Calendar],
    count: int,
    lower: datetime | None,
    until: datetime | None,
) -> list[datetime]:
    """The next ``count`` slots one chain (on ``walker``'s timing) releases after ``now``: after
    ``lower`` and, for an ended chain, up to ``until`` and only those the current spec runs."""
    jitter = timedelta(seconds=walker.jitter_seconds)
    after = min(now, max(now - jitter, job.created_at, lower or job.created_at))
    head: list[datetime] = []

    def chain_slot(instant: datetime) -> datetime | None:
        slot = next_slot(walker, instant)
        while slot is not None and until is not None and slot <= until and not_run_why(job, walker, slot):
            slot = next_slot(walker, slot)  # recorded MISSED when met, not released
        return None if slot is None or (until is not None and slot > until) else slot

    def pending_after(instant: datetime) -> datetime | None:
        if head:
            # Past the chain's head nothing is released yet, a slot whose own dispatch instant has
            # passed neither: it goes with the head's release (QA17: such slots were left out)
            return chain_slot(instant)
        slot = chain_slot(instant)
        while slot is not None and slot <= now and dispatch_instant(walker, slot) <= now:
            slot = chain_slot(slot)
        head.extend([slot] if slot is not None else [])
        return slot

    return included_slots(pending_after, after, calendars, count)


def release_instants(job: Job, slots: Sequence[datetime]) -> list[datetime]:
    """When the chain releases each of ``slots`` (from its head on, in slot order): a release sends
    its slot and every later one whose dispatch instant has come, and stops at the first whose has
    not, so a slot goes out at the latest dispatch instant of the slots up to it (QA17: a jittered
    slot's ``fires_at`` said its own dispatch instant, while it waited for an earlier slot's)."""
    released: list[datetime] = []
    for slot in slots:
        instant = dispatch_instant(job, slot)
        released.append(max(instant, released[-1]) if released else instant)
    return released


def owed_by_resume(job: Job, now: datetime, calendars: Sequence[Calendar] = ()) -> datetime | None:
    """The first slot a job resumed at most :data:`OWED_LOOKUP_S` ago runs at its resume: the
    RESUME timer :func:`punctual.usecases.jobs.resumed` writes (due at the resume, ``updated_at``)
    releases the slots the pause owes as the catch-up policy decides (``all``: every one in the
    window; ``latest``: the newest, unless a slot is due at once; ``none``: only a slot due at
    once). None when the resume owes none that runs, or the job was not just resumed (never
    paused, or a replace changed its spec since: what it answers is the new spec's chain)."""
    resumed_at = job.updated_at
    if job.paused_at is None or job.spec_since >= job.version:
        return None
    if now - resumed_at > timedelta(seconds=OWED_LOOKUP_S):
        return None
    start = resume_start(job)
    if start is None or dispatch_instant(job, start) > resumed_at:
        return None  # a FIRE timer at its dispatch instant: the chain's release (fire_timer)
    plan = plan_release(job, start, max(now, resumed_at), due=resumed_at, owed_before=resumed_at)
    calendar_before_catchup(job, plan, max(now, resumed_at), on_excluded_day(calendars))
    return next((slot for slot in plan.release if excluding(calendars, slot) is None), None)
