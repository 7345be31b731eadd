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

from punctual.models import Job
from punctual.store.base import JobStore
from punctual.timing.slots import schedule_of, sent_check_timer
from punctual.timing.timers import MANUAL_MARK, TimerLayout

WAITING_READ = 50  # the child's newest slots read back (one dependency item each)


def owed_child_slots(store: JobStore, job: Job) -> list[str]:
    """The slots of ``job`` (an after() job as just written) whose parents all succeeded and that
    were never sent; a run-now slot of a parent (``~m``) is left out: it named only that parent."""
    parents = set(schedule_of(job).parents)
    if not parents:
        return []
    waiting = store.waiting_child_slots(job.tenant, job.id, WAITING_READ)
    return [slot for slot, done in waiting if MANUAL_MARK not in slot and parents <= done]


def send_owed_children(store: JobStore, layout: TimerLayout, job: Job, now: datetime) -> list[str]:
    """Write a CHILD timer due now for each of ``job``'s owed slots; returns the slots."""
    slots = owed_child_slots(store, job)
    timers = [sent_check_timer(layout, job, slot, now, after_s=0) for slot in slots]
    if timers:
        store.put_timers(timers)
    return slots
