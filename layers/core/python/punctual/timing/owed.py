"""Which owed slots of a job's old chains its current spec runs (:mod:`punctual.dispatch.polling.chains`
catches up the unreleased ones; a worker starts the released ones that no worker had started,
:func:`punctual.execution.claim.owed_to_current`)."""

from __future__ import annotations

from datetime import datetime

from punctual.models import Job, JobState
from punctual.models.jobs import chain_end
from punctual.timing.slots import inside_window, schedule_of
from punctual.timing.timers import MANUAL_MARK, slot_instant

NOT_A_SLOT_OF_THE_NEW_SPEC = "the new spec would not run it"
FIRED = ("after", "delay")  # kinds whose slots follow other runs, not a schedule


def not_run_why(job: Job, walker: Job, slot: datetime) -> str | None:
    """Why the current spec may not run an owed slot of an old chain (None: it runs it); the old
    chain on the job's own timing (a rotation, an identical spec, a payload edit) runs."""
    if job.state is JobState.COMPLETED:
        return "the new spec has completed"
    if walker is job:
        return None
    if job.state is JobState.PAUSED:
        return "the job is paused and the replace moved its timing"
    if schedule_of(job).kind in (*FIRED, "at"):
        return NOT_A_SLOT_OF_THE_NEW_SPEC
    if not inside_window(job, slot):
        return NOT_A_SLOT_OF_THE_NEW_SPEC
    return None


def owed_at_restart(job: Job, version: int, slot: str) -> bool:
    """Whether a scheduled slot released for ``version``, a chain a replace ended (kept in
    ``job.restarts``), was due by that restart and is one the job's current spec runs."""
    if MANUAL_MARK in slot or job.state is not JobState.ENABLED:
        return False
    found = chain_end(job, version)
    if found is None:
        return False
    restart, walker = found
    instant = slot_instant(slot)
    return instant <= restart.at and not_run_why(job, walker, instant) is None
