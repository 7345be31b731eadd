"""The ``after()`` children of a parent slot the poller did not run.

A parent's slot recorded ``MISSED`` (its catch-up policy or window dropped it, its excluded calendar
is gone) or ``EXCLUDED`` (a calendar of the parent's excludes its day) is never run, so no success
and no failure ever reaches its children: their slot had no record at all, a hole in a child's
history that looks like a job that stopped (QA: documented as a gap). Now each child's slot is
recorded too, and so on down the chain, as a parent's unsuccessful end records them SKIPPED
(:meth:`punctual.execution.after.AfterEffects.skip_dependants`):

- under a ``MISSED`` parent slot the child's slot is ``MISSED`` (``not run: parent a's slot was
  MISSED``), with the same event and ``missed`` alert as any missed slot; a backfill of the parent
  that includes its dependants still runs it (the claim starts a MISSED slot for a backfill's
  child message, as it does for a backfill's own);
- under an ``EXCLUDED`` one, ``SKIPPED`` (``not run: parent a's slot was EXCLUDED``), with its
  event: the parent's day is never backfilled, so neither is the child's.

A range record (a long run of dropped slots, :mod:`punctual.timing.missed_ranges`) gives each
child one range record over the same slots (a backfill that starts the range's first slot of a
child keeps no record for its other slots: an after() job has no schedule of its own to name
them). Every write is a conditional put: a slot that has a record (its own, or from a repeat of
this release) is left as it is. Only parents with dependants (``Job.dependents``) cost a read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from punctual.models import Execution, ExecutionStatus, Job, JobState
from punctual.store.base import ExecutionConflictError, JobStore
from punctual.timing.slots import inside_window, next_slot, schedule_of
from punctual.timing.timers import MANUAL_MARK, slot_instant

MAX_DEPTH = 16  # how far down after() chains a parent's slot that did not run is recorded
# A parent's record -> its children's (a child's own record, in turn, for the grandchildren).
_UNDER = {
    ExecutionStatus.MISSED: ExecutionStatus.MISSED,
    ExecutionStatus.EXCLUDED: ExecutionStatus.SKIPPED,
    ExecutionStatus.SKIPPED: ExecutionStatus.SKIPPED,
}
_RECORDED_FOR = (JobState.ENABLED, JobState.PAUSED, JobState.COMPLETED)


def _before(record: Execution, child: Job) -> bool:
    """Whether all the record's slots came before the child was created (a parent's old slots
    a late catch-up drops now): the child never had them."""
    return slot_instant(record.last_slot or record.slot) < child.created_at


def has_slot(store: JobStore, job: Job, instant: datetime, depth: int = 0) -> bool:
    """Whether ``job`` has a slot at ``instant``: one of its schedule's, or, an ``after()`` job,
    one every parent has (a ``delay()`` job's slots come from finish times: taken as had)."""
    schedule = schedule_of(job)
    if schedule.kind == "delay" or depth >= MAX_DEPTH:
        return True
    if schedule.kind != "after":
        return next_slot(job, instant - timedelta(seconds=1)) == instant
    parents = store.batch_get_jobs((job.tenant, p) for p in schedule.parents)
    return all(
        (job.tenant, p) in parents and has_slot(store, parents[(job.tenant, p)], instant, depth + 1)
        for p in schedule.parents
    )


def others_have_slot(store: JobStore, child: Job, parent_id: str, instant: datetime) -> bool:
    """Whether every parent of ``child`` but ``parent_id`` has a slot at ``instant``: a child of a
    five-minute and an hourly parent has no 08:05 slot, whatever the five-minute one did there
    (review: such a slot was recorded MISSED, alerted and counted). Reads only for a child of
    several parents."""
    others = [p for p in schedule_of(child).parents if p != parent_id]
    if not others:
        return True
    jobs = store.batch_get_jobs((child.tenant, p) for p in others)
    return all(
        (child.tenant, p) in jobs and has_slot(store, jobs[(child.tenant, p)], instant) for p in others
    )


def child_note(parent: Job, status: ExecutionStatus) -> str:
    return f"not run: parent {parent.id}'s slot was {status.value}"


@dataclass
class ChildRecords:
    """What :meth:`UnrunChildren.record` wrote: the children's MISSED and SKIPPED records."""

    missed: list[tuple[Job, Execution]] = field(default_factory=list)
    skipped: list[tuple[Job, Execution]] = field(default_factory=list)


class UnrunChildren:
    """Records the ``after()`` children's slots of parent slots recorded MISSED or EXCLUDED."""

    def __init__(self, store: JobStore, ttl: Callable[[], int]) -> None:
        self.store = store
        self.ttl = ttl

    def record(self, unrun: list[tuple[Job, Execution]], now: datetime) -> ChildRecords:
        """Each child's (and grandchild's...) slot under each parent record of ``unrun``."""
        out = ChildRecords()
        for parent, record in unrun:
            self._under(parent, record, now, out, 0)
        return out

    def _under(self, parent: Job, record: Execution, now: datetime, out: ChildRecords, depth: int) -> None:
        status = _UNDER.get(record.status)
        if status is None or parent.dependents <= 0 or depth >= MAX_DEPTH or MANUAL_MARK in record.slot:
            return
        children = self.store.list_dependents(parent.tenant, parent.id)
        if not children:
            return
        jobs = self.store.batch_get_jobs((parent.tenant, child) for child in children)
        instant = slot_instant(record.slot)
        for child_id in children:
            child = jobs.get((parent.tenant, child_id))
            if (
                child is None
                or child.state not in _RECORDED_FOR
                or parent.id not in schedule_of(child).parents
            ):
                continue
            if not inside_window(child, instant) or _before(record, child):
                continue
            if not others_have_slot(self.store, child, parent.id, instant):
                continue
            written, found = self._save(child, record, status, child_note(parent, record.status), now)
            if written is not None:
                (out.missed if status is ExecutionStatus.MISSED else out.skipped).append((child, written))
            below = written or found
            if below is not None:  # a repeat goes on down too: it may have died before the grandchildren
                self._under(child, below, now, out, depth + 1)

    def _save(
        self, child: Job, under: Execution, status: ExecutionStatus, note: str, now: datetime
    ) -> tuple[Execution | None, Execution | None]:
        """The child's record over the parent record's slots, as (written, None); (None, found)
        when the slot has a record not run already (a repeat's), (None, None) when it has another."""
        record = Execution(
            job_id=child.id,
            tenant=child.tenant,
            slot=under.slot,
            scheduled_at=slot_instant(under.slot),
            status=status,
            finished_at=now,
            error=note,
            job_version=child.version,
            last_slot=under.last_slot if status is ExecutionStatus.MISSED else None,
            slot_count=under.slot_count if status is ExecutionStatus.MISSED else 1,
        )
        try:
            self.store.save_execution(record, None, self.ttl())
        except ExecutionConflictError as exc:
            current = exc.current
            return None, current if current is not None and current.status in _UNDER else None
        return record, None
