"""An ``after(...)`` job's slots a replace made due by dropping a parent.

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

from datetime import datetime

from punctual.models import ExecutionStatus, Job
from punctual.store.base import JobStore
from punctual.timing.slots import schedule_of, sent_check_timer
from punctual.timing.timers import MANUAL_MARK, TimerLayout, slot_instant

WAITING_READ = 500  # the child's newest slots read back (one dependency item each)
_DECIDED = frozenset(  # a parent's slot that ended without success: its child's slot was decided
    status for status in ExecutionStatus if status.terminal and status is not ExecutionStatus.SUCCEEDED
)


def owed_child_slots(store: JobStore, job: Job, dropped: tuple[str, ...]) -> list[str]:
    """The slots of ``job`` (an after() job as just written, that no longer names the parents
    ``dropped``) whose parents all succeeded and that were never sent, inside its ``start_at`` and
    ``end_at``. Not owed: a slot a dropped parent had ended without success (the old spec decided
    it: the child does not run), and a run-now slot of a parent (``~m``: it named only that parent)."""
    parents = set(schedule_of(job).parents)
    if not parents:
        return []
    candidates = [
        slot
        for slot, done in store.waiting_child_slots(job.tenant, job.id, WAITING_READ)
        if MANUAL_MARK not in slot and parents <= done and _inside(job, slot_instant(slot))
    ]
    keys = [(job.tenant, parent, slot) for slot in candidates for parent in dropped]
    ended = store.batch_get_executions(keys) if keys else {}
    return [
        slot
        for slot in candidates
        if not any(
            (found := ended.get((job.tenant, parent, slot))) is not None and found.status in _DECIDED
            for parent in dropped
        )
    ]


def _inside(job: Job, instant: datetime) -> bool:
    return (job.start_at is None or instant >= job.start_at) and (job.end_at is None or instant <= job.end_at)


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
