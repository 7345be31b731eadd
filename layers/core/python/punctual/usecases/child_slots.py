"""An ``after(...)`` job's slots a replace made due by dropping a parent; a run-now slot's send.

A child's slot is sent when its last parent succeeds (:mod:`punctual.execution.after`): each
parent's success is recorded on the child's slot, and the worker of the success that completes
the set sends it. A replace that drops a parent can complete the set itself: ``after(a, b)``
made ``after(a)`` once ``a`` succeeded for a slot and before ``b`` did leaves that slot owed
(``after(a)`` runs a slot once ``a`` succeeded for it), and no worker will send it (``b`` is no
longer a parent; its success, if it comes, does not name the child). QA: the slot was lost, with
no record. The replace reads the child's slots waiting since its last dispatched one and writes a
CHILD timer due at once for each whose remaining parents all succeeded: its release sends the
slot if no worker has claimed it, and the worker checks its calendars before it runs
(:func:`punctual.execution.claim.not_to_run`).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from punctual.dispatch.queues import DispatchMessage, QueuePort
from punctual.models import Execution, ExecutionStatus, Job, JobState
from punctual.models.executions import IN_FLIGHT
from punctual.store.base import JobStore
from punctual.timing.slots import inside_window, next_slot, schedule_of, sent_check_timer
from punctual.timing.timers import MANUAL_MARK, TimerLayout, slot_instant

log = logging.getLogger("punctual.usecases")

WAITING_READ = 500  # the child's newest slots read back (one dependency item each)
_CLOCK_KINDS = ("cron", "rate", "at")  # schedules whose own slots are known ahead
MAX_DEPTH = 20  # after() jobs walked back from a dropped parent (a bound, though no cycle is stored)


def owed_child_slots(store: JobStore, job: Job, dropped: tuple[str, ...]) -> list[str]:
    """The slots of ``job`` (an after() job as just written, that no longer names the parents
    ``dropped``) whose parents all succeeded and that were never sent, inside its ``start_at`` and
    ``end_at``, and that the old spec still left open: each dropped parent's slot is in flight (its
    retry waits, it runs) or is one of its own slots not run yet (an after() parent's: one its own
    parents leave open, :class:`_OpenSlots`). Not owed: a slot a dropped parent
    ended without success (the old spec decided it), one that is not a dropped parent's slot at
    all (review: an hourly parent dropped from after(a, b) ran 88 of the minutely a's old slots),
    and a run-now slot of a parent (``~m``: it named only that parent)."""
    parents = set(schedule_of(job).parents)
    if not parents:
        return []
    candidates = [
        slot
        for slot, done in store.waiting_child_slots(job.tenant, job.id, WAITING_READ)
        if MANUAL_MARK not in slot and parents <= done and inside_window(job, slot_instant(slot))
    ]
    if not candidates:
        return []
    still_open = _OpenSlots(store, job.tenant, candidates)
    return [slot for slot in candidates if all(still_open.of(parent, slot) for parent in dropped)]


class _OpenSlots:
    """Whether a job's slot is still open under the old spec: its run is in flight or succeeded,
    or, not run yet, it is one of the job's own slots (a cron, rate or at job's, that job enabled
    or paused) or an ``after(...)`` job's whose parents all leave it open (walked back, the
    dependency graph has no cycle). Records and jobs are read once per job, for every slot."""

    def __init__(self, store: JobStore, tenant: str, slots: list[str]) -> None:
        self.store = store
        self.tenant = tenant
        self.slots = slots
        self.records: dict[tuple[str, str, str], Execution] = {}
        self.jobs: dict[tuple[str, str], Job] = {}
        self.read: set[str] = set()
        self.known: dict[tuple[str, str], bool] = {}  # (job, slot): a diamond is walked once

    def of(self, job_id: str, slot: str, depth: int = 0) -> bool:
        if (job_id, slot) not in self.known:
            self.known[(job_id, slot)] = self._of(job_id, slot, depth)
        return self.known[(job_id, slot)]

    def _of(self, job_id: str, slot: str, depth: int) -> bool:
        if job_id not in self.read:
            self.records.update(
                self.store.batch_get_executions([(self.tenant, job_id, s) for s in self.slots])
            )
            self.jobs.update(self.store.batch_get_jobs([(self.tenant, job_id)]))
            self.read.add(job_id)
        record = self.records.get((self.tenant, job_id, slot))
        if record is not None:
            return record.status in IN_FLIGHT or record.status is ExecutionStatus.SUCCEEDED
        old = self.jobs.get((self.tenant, job_id))
        if old is None or old.state not in (JobState.ENABLED, JobState.PAUSED, JobState.COMPLETED):
            return False
        schedule = schedule_of(old)
        instant = slot_instant(slot)
        if schedule.kind == "after":  # a paused one records its parents' slots as not run
            ends = old.state is JobState.COMPLETED and old.end_at is not None  # its earlier slots still run
            return (
                depth < MAX_DEPTH
                and (old.state is JobState.ENABLED or ends)
                and inside_window(old, instant)
                and all(self.of(parent, slot, depth + 1) for parent in schedule.parents)
            )
        return (
            old.state is not JobState.COMPLETED
            and schedule.kind in _CLOCK_KINDS
            # the job's own slot: next_slot knows a rate() job's anchor (QA: the bare schedule did
            # not, so a dropped rate() parent's unrun slot counted as closed and was lost)
            and next_slot(old, instant - timedelta(seconds=1)) == instant
        )


def send_owed_children(
    store: JobStore, layout: TimerLayout, job: Job, dropped: tuple[str, ...], now: datetime
) -> list[str]:
    """Write a CHILD timer due now for each of ``job``'s owed slots (a paused job's too: the claim
    records them SKIPPED, the job being paused); returns the slots."""
    slots = owed_child_slots(store, job, dropped)
    timers = [sent_check_timer(layout, job, slot, now, after_s=0) for slot in slots]
    if timers:
        store.put_timers(timers)
    return slots


def send_run_now(
    store: JobStore,
    queues: QueuePort,
    queue_url: str,
    layout: TimerLayout,
    job: Job,
    message: DispatchMessage,
    now: datetime,
) -> None:
    """Send a run-now slot (``message``) after its check (a CHILD timer 5 s on, which sends it
    again if no worker claimed it). Once the check is written the slot stands: a send refused then
    (SQS throttling through the SDK's retries) is left to the check, and the request is accepted.
    QA24: it was answered 503 ("nothing was done, retry"), the check ran the slot all the same,
    and the client's retry of the 503 ran a second one."""
    store.put_timers([sent_check_timer(layout, job, message.slot, now)])
    try:
        queues.send(queue_url, [message])
    except Exception:
        log.warning("run-now %s %s not sent now: its check sends it", job.id, message.slot, exc_info=True)
