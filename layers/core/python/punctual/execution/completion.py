"""``delete_after_completion`` (EventBridge Scheduler's ActionAfterCompletion DELETE): the job is
deleted once it is *done*, and not before.

Done means: the schedule has no slot after now, its last slot has a record (it was released
and claimed, or recorded MISSED or EXCLUDED), so has every earlier slot still inside the live
window (one released whose message no worker has claimed yet has none), and no slot of the job is
still RUNNING, QUEUED or waiting for a retry (RETRY_WAIT). A job deleted earlier would strand
such a slot: its retry timer, lease timer, turn or message would find the job gone, and the slot
would never end (no run, final record, failure report, dead-letter message or ``failed`` alert).

Every slot that ends runs the check after writing its own record, and the job's history is read
strongly consistently, so of two slots ending together at least the later reader sees both
ended: the job is deleted by whichever slot ends last. The history is read newest first, only as
far back as a slot can still be live (its retries' ``max_age_seconds``, its timeout and an hour
for a lost worker's lease to be noticed). The delete is conditional on the version read, and is
skipped when the job's spec changed since the slot was released (the new spec decides).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from punctual.delivery.notifications.alerts import end_unwatched_streak
from punctual.execution.chain_ends import complete_job
from punctual.models import Execution, Job, JobState
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink
from punctual.security.peaks import PeakLimits, job_profile
from punctual.security.tenant_quotas import PeakQuota
from punctual.store.base import TOMBSTONE_TTL, CalendarUses, ConflictError, JobStore
from punctual.timing.slots import next_slot, schedule_of
from punctual.timing.timers import slot_instant
from punctual.usecases.dependents import after_children

log = logging.getLogger("punctual.execution")

LEASE_NOTICE_S = 3600  # a lost worker's RUNNING record is taken over (or timed out) well within this
HISTORY_PAGE = 100


class Completion:
    """Deletes jobs that asked for it once they are done (see the module docstring).

    Parameters
    ----------
    store
        The job store.
    metrics
        Where ``JobsDeletedAfterCompletion`` is counted.
    """

    def __init__(self, store: JobStore, metrics: MetricsSink) -> None:
        self.store = store
        self.metrics = metrics

    def delete_if_done(self, job: Job, released_for: int, now: datetime, alerts_after: bool = False) -> bool:
        """After a slot released for job version ``released_for`` ended (or was recorded MISSED or
        EXCLUDED): delete the job if it asked to be and is done. True: deleted. ``alerts_after``:
        the slot's alerts come after this (a worker's after-effects), so the caller ends the job's
        failure streak after them (:func:`end_unwatched_streak`)."""
        if not job.delete_after_completion:
            return False
        # A delay() job has no computed last slot: its chain ends at end_at, when the job is marked
        # COMPLETED (QA17: such a job was never deleted); then only no live slot is asked. An
        # after() job is never deleted here: a parent's slot inside its window may still run it.
        kind = schedule_of(job).kind
        if kind == "after":
            return False
        fired = kind == "delay"
        if not fired and next_slot(job, now) is not None:
            return False  # the schedule goes on: the common case, decided without a read
        current = self.store.get_job(job.tenant, job.id)
        if current is None or current.spec_since > released_for:
            return False  # gone already, or re-specified since this slot was released
        if fired and current.state is not JobState.COMPLETED:
            return False
        if not self._done(current, now, fired):
            return False
        if children := after_children(self.store, job.tenant, job.id):
            # Deleted, it would leave them ENABLED with no parent (reported as orphans): kept,
            # COMPLETED, as a delete through the API is refused while they name it.
            log.info("job %s kept after completion: after() jobs %s name it", job.id, ", ".join(children))
            return False
        try:
            self.store.delete_job(
                job.tenant,
                job.id,
                current.version,
                current.trigger_rate,
                calendars=CalendarUses(drop=tuple(current.exclude_calendars)),
                tombstone_until=int((now + TOMBSTONE_TTL).timestamp()),
                expected_dependents=current.dependents,  # a child linked since the check keeps it
            )
        except ConflictError as exc:  # changed, deleted or given a child meanwhile: that write stands
            log.info("job %s not deleted after completion: %s", job.id, exc)
            return False
        # Anything else (throttled, a transaction conflict through the store's retries) is raised:
        # the message comes back and its redelivery (REPAIR) checks again (QA24: the job was kept,
        # COMPLETED, for good)
        PeakQuota(self.store, PeakLimits()).undo(job.tenant, add=job_profile(current))  # its peak goes
        if not alerts_after:
            end_unwatched_streak(self.store, current, None)  # not the next job's at this id (QA28)
        self.metrics.add("JobsDeletedAfterCompletion", 1)
        return True

    def _done(self, job: Job, now: datetime, fired: bool = False) -> bool:
        """No slot of ``job`` is live, and the newest scheduled slot with a record is its last
        (``fired``: a delay() job, COMPLETED: no slot is asked to be its last), with no slot of the
        live window left without a record (:meth:`_unrecorded`)."""
        live_s = job.retry.max_age_seconds + job.timeout_seconds + job.jitter_seconds + LEASE_NOTICE_S
        horizon = now - timedelta(seconds=live_s)
        newest: Execution | None = None  # the newest record of a scheduled (not manual) slot
        newer: Execution | None = None  # the scheduled record read just before (the next newer one)
        cursor: str | None = None
        while True:
            page = self.store.list_executions(job.tenant, job.id, HISTORY_PAGE, cursor)
            for record in page.items:
                if not record.status.terminal:
                    log.info(
                        "job %s not deleted yet: slot %s is %s", job.id, record.slot, record.status.value
                    )
                    return False
                if "~" not in record.slot:
                    if not fired and self._unrecorded(job, record, newer, horizon):
                        return False
                    newest, newer = newest or record, record
                if newest is not None and slot_instant(record.slot) < horizon:
                    return fired or self._is_last(job, newest)
            if page.cursor is None:
                if not fired and self._unrecorded(job, None, newer, horizon):
                    return False
                return fired or (newest is not None and self._is_last(job, newest))
            cursor = page.cursor

    @staticmethod
    def _unrecorded(job: Job, older: Execution | None, newer: Execution | None, horizon: datetime) -> bool:
        """Whether a slot of the schedule before ``newer``, after ``older`` (None: after the job's
        anchor) and inside the live window, has no record: released and not claimed yet (its message
        waits behind a worker that died, or for a free one), or due and not released yet (a flexible
        window's delay). Every slot a worker or poller decided has a record (range records for long
        runs), so such a slot is still to run (QA27: the last slot ended first and the job was
        deleted; the earlier slot's message then found it gone, and the slot never ran)."""
        if newer is None:
            return False
        # Slots the job's current chain fires come after its registration, anchor and last restart
        # (a start_at in the past names slots that were never due to it)
        after = max(horizon, job.anchor, job.created_at, *(restart.at for restart in job.restarts[-1:]))
        if older is not None:
            after = max(after, slot_instant(older.last_slot or older.slot))
        missing = next_slot(job, after)
        return missing is not None and missing < slot_instant(newer.slot)

    @staticmethod
    def _is_last(job: Job, newest: Execution) -> bool:
        """Whether ``newest`` (a range record: through its last slot) is the schedule's last slot."""
        return next_slot(job, slot_instant(newest.last_slot or newest.slot)) is None


def complete_unsent(store: JobStore, job: Job, clock: Clock, metrics: MetricsSink) -> bool:
    """A one-time job, or a job past ``end_at``, whose last slot no message carries (the poller
    recorded it MISSED or EXCLUDED): mark it COMPLETED (the usual case is the worker's:
    :mod:`punctual.execution.chain_ends`), then delete it if it asked to be and is done, as a
    worker does after a slot ends. True: it was marked COMPLETED."""
    if not complete_job(store, job, clock):
        return False
    if job.delete_after_completion:
        try:  # on the poller's release path, where no message comes back to try it again
            Completion(store, metrics).delete_if_done(job, job.version, clock.now())
        except Exception:
            log.warning("job %s completed but not deleted: the delete failed", job.id, exc_info=True)
    return True
