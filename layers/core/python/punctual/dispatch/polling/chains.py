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

A replace (an identical one, a secret rotation) starts a new chain at its first slot after it, and
the job keeps the restart (``Job.restarts``: the old chain's last version, the instant, its timing
when the replace moved it). A slot of the old chain due by the restart that no poller released yet
(a poller a moment behind, or down) is owed all the same: the poller that meets the old chain's
timer catches its slots up, on its own timing and under the current spec, up to the restart
(:data:`Verdict.REPLACED`; the catch-up policy decides the late ones), and while the job is paused
on the same timing records it on the job as a pause's owed slot (:data:`Verdict.PARK`).

So no slot around a pause or a replace is dropped silently: it runs, or the catch-up policy
records it MISSED.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import Enum

from punctual.models import Job, JobState
from punctual.models.jobs import chain_end
from punctual.timing.owed import FIRED, not_run_why
from punctual.timing.slots import ReleasePlan, next_slot, plan_release, resume_start, schedule_of
from punctual.timing.timers import Timer, slot_instant


class Verdict(Enum):
    RELEASE = "release"  # the job's current chain: release it
    STALE = "stale"  # a chain the job no longer has (deleted, new spec, or the resume owns its slots)
    PARK = "park"  # the job is paused and this slot was due before the pause: the resume owes it
    ORPHAN = "orphan"  # due before a pause and met after the resume: catch it up here
    REPLACED = "replaced"  # a replaced spec's chain, due by the replace: caught up under the new spec


# Read once: an enum's member read through its class costs several times a global's (the enum
# metaclass's __getattr__ hook), and these are read per timer released.
_RELEASE, _ENABLED = Verdict.RELEASE, JobState.ENABLED


def verdict(timer: Timer, job: Job | None) -> Verdict:
    """What to do with the chain timer ``timer`` of ``job`` (as read; None when gone)."""
    # The usual case first (what the checks below answer for it, in fewer reads): the current
    # chain of an enabled job whose spec has not changed since the timer's version.
    if job is not None and job.state is _ENABLED and timer.job_version == job.version >= job.spec_since:
        return _RELEASE
    if job is None or timer.job_version > job.version:
        return Verdict.STALE  # gone, or a job read behind its timer
    if job.state is JobState.COMPLETED and timer.job_version < job.version:
        return _replaced(timer, job)  # the new chain ended first: an old chain's owed slot is recorded
    if job.state not in (JobState.ENABLED, JobState.PAUSED):
        return Verdict.STALE
    if timer.job_version < job.spec_since:
        return _replaced(timer, job)
    if job.state is JobState.ENABLED and timer.job_version == job.version:
        return Verdict.RELEASE
    if schedule_of(job).kind == "delay":
        return Verdict.STALE  # delay(...) chains from finish times: its resume starts afresh
    if job.state is JobState.ENABLED and (cut := _replaced(timer, job)) is not Verdict.STALE:
        return cut  # a chain a restart cut (a resumed chain a rotation restarted at once included)
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
    """A timer of a chain a write restarted (a replace, an identical one, a rotation): owed when
    its slot was due by the end of its chain (:func:`punctual.models.jobs.chain_end`)."""
    found = chain_end(job, timer.job_version)
    if found is None:
        return Verdict.STALE  # a chain older than the restarts the job keeps (or a pause's)
    restart, walker = found
    slot = slot_instant(timer.slot)
    if slot > restart.at:
        return Verdict.STALE  # the next chain's slots: it starts after the restart
    if job.state is JobState.PAUSED and walker is job:  # its own timing: the resume owes it
        paused_at = job.paused_at
        return Verdict.PARK if paused_at is not None and slot < paused_at else Verdict.STALE
    return Verdict.REPLACED


def replaced_plan(job: Job, timer: Timer, now: datetime) -> ReleasePlan:
    """The slots a restart owes (:data:`Verdict.REPLACED`): the old chain's own slots (on its
    timing) from the timer's up to the restart that ended it, released under the current spec;
    the timer the plan writes next stays the old chain's (its version), so the job's current chain
    stays apart. An owed slot the current spec would not run (now at(), after() or delay(), before
    its ``start_at`` or after its ``end_at``; the job completed, or paused on another timing) is
    recorded MISSED, not run. When the job's last chain has no slot after its restart, the plan's
    end ends the job (as its last slot would have)."""
    found = chain_end(job, timer.job_version)
    assert found is not None
    restart, walker = found
    plan = plan_release(
        walker,
        slot_instant(timer.slot),
        now,
        due=timer.due,
        stop_before=restart.at + timedelta(microseconds=1),
        cause=OWED_BY_REPLACE,
    )
    plan.timer_version = timer.job_version
    unrun = [(slot, why) for slot in plan.release if (why := not_run_why(job, walker, slot)) is not None]
    if unrun:
        dropped = {slot for slot, _ in unrun}
        plan.release = [slot for slot in plan.release if slot not in dropped]
        plan.missed.extend((slot, f"{OWED_BY_REPLACE}: {why}") for slot, why in unrun)
    last = restart is job.restarts[-1] and job.state is JobState.ENABLED
    if last and plan.next_slot is None and schedule_of(job).kind not in FIRED:
        plan.chain = (
            next_slot(job, restart.at) is None
        )  # no later chain goes on: this plan's end is the job's
    return plan
