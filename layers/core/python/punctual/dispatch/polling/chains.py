"""What a fire timer means once its job is read: release it, drop it, or account for a pause.

A job's *chain* is its one pending fire timer: each release writes the next. A replace starts a
new chain for the new spec (``spec_version``), so the old chain's timers are stale. A pause ends
the chain without changing the spec, and the resume starts it again
(:meth:`punctual.usecases.jobs.JobService.resume`) from the first slot the pause owes:

* the first slot at or after the pause (``paused_at``): every slot due while paused is the
  resume's, caught up under the catch-up policy like slots missed in an outage;
* or earlier, ``owed_from``: a slot due *before* the pause whose timer a poller met only after
  it (a late release). The poller that meets it while the job is paused records it on the job
  (:data:`Verdict.PARK`), so the resume starts there;
* a timer due before the pause that a poller meets only after the resume (a pause and a resume
  within the poller's lag) found the resume gone past it: the poller catches up those slots
  itself, up to where the resumed chain starts (:data:`Verdict.ORPHAN`).

A replace starts the new spec's chain at its first slot after the replace (``replaced_at``). A
slot of the old chain due at or before the replace that no poller released yet (a poller a moment
behind, or down) is owed all the same: the poller that meets the old chain's timer catches it up
under the new spec, from the timer's slot up to where the new chain starts
(:data:`Verdict.REPLACED`; the catch-up policy decides the late ones), and while the job is paused
records it on the job as a pause's owed slot (:data:`Verdict.PARK`).

So no slot around a pause or a replace is dropped silently: it runs, or the catch-up policy
records it MISSED.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import Enum

from punctual.models import Job, JobState
from punctual.models.jobs import with_replaced_timing
from punctual.timing.slots import ReleasePlan, next_slot, plan_release, resume_start, schedule_of
from punctual.timing.timers import Timer, slot_instant


class Verdict(Enum):
    RELEASE = "release"  # the job's current chain: release it
    STALE = "stale"  # a chain the job no longer has (deleted, new spec, or the resume owns its slots)
    PARK = "park"  # the job is paused and this slot was due before the pause: the resume owes it
    ORPHAN = "orphan"  # due before a pause and met after the resume: catch it up here
    REPLACED = "replaced"  # a replaced spec's chain, due by the replace: caught up under the new spec


def verdict(timer: Timer, job: Job | None) -> Verdict:
    """What to do with the chain timer ``timer`` of ``job`` (as read; None when gone)."""
    if job is None or job.state not in (JobState.ENABLED, JobState.PAUSED):
        return Verdict.STALE
    if timer.job_version > job.version:
        return Verdict.STALE  # a job read behind its timer
    if timer.job_version < job.spec_since:
        return _replaced(timer, job)
    if job.state is JobState.ENABLED and timer.job_version == job.version:
        return Verdict.RELEASE
    if schedule_of(job).kind == "delay":
        return Verdict.STALE  # delay(...) chains from finish times: its resume starts afresh
    slot = slot_instant(timer.slot)
    if job.paused_at is None or slot >= job.paused_at:
        # No pause owes it (due while paused: the resume's chain starts at or before it); a replace
        # of the identical spec may have restarted the chain while this slot was due
        return _replaced(timer, job) if job.state is JobState.ENABLED else Verdict.STALE
    if job.state is JobState.PAUSED:
        return Verdict.PARK
    start = resume_start(job)
    return Verdict.ORPHAN if start is not None and slot < start else Verdict.STALE


OWED_BY_REPLACE = "job replaced"  # the cause put before the reason of a slot a replace made missed


def _replaced(timer: Timer, job: Job) -> Verdict:
    """A timer of a chain a replace cut (an older spec's, or the same spec's before a replace that
    changed nothing): owed when its slot was due by the replace."""
    if job.replaced_at is None:
        return Verdict.STALE  # (a job replaced before replaces kept their instant)
    slot = slot_instant(timer.slot)
    if slot > job.replaced_at:
        return Verdict.STALE  # the new chain's slots: it starts after the replace
    if job.state is JobState.PAUSED:
        paused_at = job.paused_at
        return Verdict.PARK if paused_at is not None and slot < paused_at else Verdict.STALE
    return Verdict.REPLACED


def replaced_plan(job: Job, timer: Timer, now: datetime) -> ReleasePlan:
    """The slots a replace owes (:data:`Verdict.REPLACED`): the old chain's own slots (its timing,
    :attr:`Job.replaced_timing`, when the replace changed it) from the timer's up to the replace,
    released under the new spec; the timer the plan writes next stays the old chain's (its
    version), so the job's current chain stays apart. An owed slot the new spec cannot run (a
    one-time, ``after()`` or ``delay()`` job now; before its ``start_at`` or after its ``end_at``)
    is recorded MISSED, not run. When the new spec has no slot after the replace, the plan's end
    ends the job (as its last slot would have)."""
    replaced_at = job.replaced_at
    assert replaced_at is not None
    walker = with_replaced_timing(job)
    plan = plan_release(
        walker,
        slot_instant(timer.slot),
        now,
        due=timer.due,
        stop_before=replaced_at + timedelta(microseconds=1),
        cause=OWED_BY_REPLACE,
    )
    plan.timer_version = timer.job_version
    unrunnable = [slot for slot in plan.release if not _runs_under(job, slot)]
    if unrunnable:
        plan.release = [slot for slot in plan.release if slot not in unrunnable]
        plan.missed.extend((slot, f"{OWED_BY_REPLACE}: {NOT_A_SLOT_OF_THE_NEW_SPEC}") for slot in unrunnable)
    if plan.next_slot is None and next_slot(job, replaced_at) is None and schedule_of(job).kind not in _FIRED:
        plan.chain = True  # no chain of the new spec goes on: this plan's end is the job's
    return plan


NOT_A_SLOT_OF_THE_NEW_SPEC = "the new spec would not run it"
_FIRED = ("after", "delay")  # kinds whose slots follow other runs, not a schedule


def _runs_under(job: Job, slot: datetime) -> bool:
    """Whether the new spec may run an owed slot of its old chain (one of its own when the replace
    kept the timing: a rotation, an identical spec, a payload edit)."""
    if not job.replaced_timing:
        return True
    if schedule_of(job).kind in (*_FIRED, "at"):
        return False
    return (job.start_at is None or slot >= job.start_at) and (job.end_at is None or slot <= job.end_at)
