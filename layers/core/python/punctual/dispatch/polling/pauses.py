"""The two pause cases a poller acts on (see :mod:`punctual.dispatch.polling.chains`).

* **Park.** A paused job's chain timer whose slot was due before the pause: the slot was never
  released, so the resume owes it. The job records it as ``owed_from`` (the earliest such slot)
  by a version-checked write, so that a resume racing this write either sees it or fails its own
  version check and reads the job again: the owed slot is never lost between the two.
* **Orphan.** The same timer met only after the resume, which started the chain at the pause:
  the slots from the timer's up to that start are caught up here, under the catch-up policy.
"""

from __future__ import annotations

import logging
from datetime import datetime

from punctual.delivery.targets.payload import is_schedule_job
from punctual.dispatch.polling.chains import Verdict, verdict
from punctual.models import CatchupKind, Job
from punctual.store.base import JobStore, VersionConflictError
from punctual.timing.slots import ReleasePlan, plan_release, resume_start
from punctual.timing.timers import Timer, slot_instant

log = logging.getLogger("punctual.dispatch.polling")

PARK_TRIES = 3
OWED_BY_PAUSE = "job paused"  # the cause put before the reason of a slot a pause made missed
PARK_GAVE_UP = f"{OWED_BY_PAUSE}: due before the pause, not kept for the resume (the job kept changing)"


def owing_by_resume(job: Job) -> Job:
    """The job whose catch-up policy decides the slots a resume owes: ``job``, but for a schedule
    made through the EventBridge Scheduler API, whose owed slots are all recorded MISSED (catch-up
    ``none``): the service invokes nothing while a schedule is DISABLED and, enabled again, it goes
    on from its next occurrence (QA27: enabling a cron schedule ran at once every slot of the last
    hour it was DISABLED). A slot due before the disable that no poller had released yet goes
    with them (EventBridge invokes a slot within its minute: a disable inside it may stop it too)."""
    if not is_schedule_job(job.id) or job.catchup.policy is CatchupKind.NONE:
        return job
    return job.model_copy(update={"catchup": job.catchup.model_copy(update={"policy": CatchupKind.NONE})})


def _owed(job: Job, timer: Timer) -> bool:
    """Whether ``job`` owes ``timer``'s slot already (it, or an earlier one, is parked on it)."""
    return job.owed_from is not None and job.owed_from <= timer.slot


class Pauses:
    """Parks owed slots on paused jobs and plans orphaned chains.

    Parameters
    ----------
    store
        The job store.
    """

    def __init__(self, store: JobStore) -> None:
        self.store = store

    def park(self, job: Job, timer: Timer) -> tuple[Job | None, Verdict]:
        """Record the timer's slot as owed by the pause of ``job``; returns the job as it is then
        and what to do with the timer now (STALE once parked; the job changed: decided again;
        PARK when it could not be parked in :data:`PARK_TRIES` tries: to be recorded MISSED)."""
        for _ in range(PARK_TRIES):
            if _owed(job, timer):
                return job, Verdict.STALE  # an earlier slot is owed already: the resume starts there
            parked = job.model_copy(
                update={"owed_from": timer.slot, "version": job.version + 1, "spec_version": job.spec_since}
            )
            try:
                self.store.replace_job(parked, expected_version=job.version)
            except VersionConflictError:
                found = self.store.get_job(job.tenant, job.id)  # consistent: what the write met
                again = verdict(timer, found)
                if again is not Verdict.PARK or found is None:
                    return found, again
                job = found
                continue
            log.info("job %s: slot %s owed by its pause", job.id, timer.slot)
            return parked, Verdict.STALE
        if _owed(job, timer):
            return job, Verdict.STALE  # the last conflict was a park of it (or of an earlier slot)
        # Not parked: still PARK, so the release records the slot MISSED (PARK_GAVE_UP) rather than
        # drop it with its timer. The chain auditor does not look at paused jobs (QA27: the slot
        # was in no record and the resume did not owe it).
        log.warning("job %s kept changing; slot %s recorded missed", job.id, timer.slot)
        return job, Verdict.PARK

    @staticmethod
    def orphan_plan(chain: Job, timer: Timer, now: datetime) -> ReleasePlan:
        """The slots of a chain a pause cut, from the timer's up to where the resumed chain
        starts: every one late (due before the pause), decided by the catch-up policy."""
        return plan_release(
            chain,
            slot_instant(timer.slot),
            now,
            due=timer.due,
            owed_before=now,
            stop_before=resume_start(chain),
            cause=OWED_BY_PAUSE,
        )
