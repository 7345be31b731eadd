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

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from punctual.execution.records import records_inside
from punctual.models import Execution, ExecutionStatus, Job, JobState
from punctual.store.base import ExecutionConflictError, JobStore
from punctual.timing.schedules.after import MAX_CHAIN_DEPTH
from punctual.timing.slots import inside_window, next_slot, schedule_of
from punctual.timing.timers import MANUAL_MARK, slot_instant, slot_key

log = logging.getLogger("punctual.execution")

MAX_DEPTH = MAX_CHAIN_DEPTH  # how far down after() chains a parent's slot that did not run is recorded
# A parent's record -> its children's (a child's own record, in turn, for the grandchildren).
_UNDER = {
    ExecutionStatus.MISSED: ExecutionStatus.MISSED,
    ExecutionStatus.EXCLUDED: ExecutionStatus.SKIPPED,
    ExecutionStatus.SKIPPED: ExecutionStatus.SKIPPED,
    # a slot a replace superseded that no later release runs (execution.versions.superseded_for_good):
    # as a MISSED one, a backfill of the parent that includes its dependants still runs it
    ExecutionStatus.SUPERSEDED: ExecutionStatus.MISSED,
}
_RECORDED_FOR = (JobState.ENABLED, JobState.PAUSED, JobState.COMPLETED)


def has_slot(
    store: JobStore, job: Job, instant: datetime, depth: int = 0, read: _Reads | None = None
) -> bool:
    """Whether ``job`` has a slot at ``instant``: one of its schedule's, or, an ``after()`` job,
    one every parent has (a ``delay()`` job's slots come from finish times: taken as had)."""
    schedule = schedule_of(job)
    if schedule.kind == "delay" or depth >= MAX_DEPTH:
        return True
    if schedule.kind != "after":
        return next_slot(job, instant - timedelta(seconds=1)) == instant
    parents = (read or _Reads(store)).jobs(job.tenant, schedule.parents)
    return all(
        p in parents and has_slot(store, parents[p], instant, depth + 1, read) for p in schedule.parents
    )


class _Reads:
    """Jobs read once per walk (a range's slots ask about the same parents again and again)."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self.found: dict[tuple[str, str], Job | None] = {}

    def jobs(self, tenant: str, ids: Sequence[str]) -> dict[str, Job]:
        missing = [i for i in ids if (tenant, i) not in self.found]
        if missing:
            got = self.store.batch_get_jobs((tenant, i) for i in missing)
            self.found.update({(tenant, i): got.get((tenant, i)) for i in missing})
        return {i: job for i in ids if (job := self.found[(tenant, i)]) is not None}


def others_have_slot(
    store: JobStore, child: Job, parent_id: str, instant: datetime, read: _Reads | None = None
) -> bool:
    """Whether every parent of ``child`` but ``parent_id`` has a slot at ``instant``: a child of a
    five-minute and an hourly parent has no 08:05 slot, whatever the five-minute one did there
    (review: such a slot was recorded MISSED, alerted and counted). Reads only for a child of
    several parents."""
    others = [p for p in schedule_of(child).parents if p != parent_id]
    if not others:
        return True
    read = read or _Reads(store)
    jobs = read.jobs(child.tenant, others)
    return all(p in jobs and has_slot(store, jobs[p], instant, 0, read) for p in others)


def slots_of(job: Job, record: Execution) -> list[datetime]:
    """The slots ``record`` stands for: one, or a range record's (its job's schedule from its first
    slot to its last)."""
    first = slot_instant(record.slot)
    if record.slot_count <= 1 or record.last_slot is None:
        return [first]
    last = slot_instant(record.last_slot)
    out, current = [first], first
    while len(out) < record.slot_count:
        following = next_slot(job, current)
        if following is None or following > last:
            break
        out.append(following)
        current = following
    if out[-1] != last:
        out.append(last)
    return out


def _runs(kept: list[datetime], slots: list[datetime]) -> list[list[datetime]]:
    """``kept`` (a subsequence of ``slots``) cut where ``slots`` had one it left out."""
    index = {slot: n for n, slot in enumerate(slots)}
    runs: list[list[datetime]] = []
    for slot in kept:
        if runs and index[slot] == index[runs[-1][-1]] + 1:
            runs[-1].append(slot)
        else:
            runs.append([slot])
    return runs


def child_note(parent: Job, status: ExecutionStatus) -> str:
    return f"not run: parent {parent.id}'s slot was {status.value}"


@dataclass
class ChildRecords:
    """What :meth:`UnrunChildren.record` wrote: the children's MISSED and SKIPPED records, and how
    many parent records it could not finish (an error, logged)."""

    missed: list[tuple[Job, Execution]] = field(default_factory=list)
    skipped: list[tuple[Job, Execution]] = field(default_factory=list)
    failed: int = 0


class UnrunChildren:
    """Records the ``after()`` children's slots of parent slots recorded MISSED or EXCLUDED."""

    def __init__(self, store: JobStore, ttl: Callable[[], int]) -> None:
        self.store = store
        self.ttl = ttl

    def record(self, unrun: list[tuple[Job, Execution]], now: datetime) -> ChildRecords:
        """Each child's (and grandchild's...) slots under each parent record of ``unrun``. A
        failure under one parent is logged and counted; what was written stays in the answer
        (its events and alerts go out) and the other parents are done."""
        out = ChildRecords()
        for parent, record in unrun:
            if MANUAL_MARK in record.slot:
                continue  # a run-now slot: never MISSED or EXCLUDED by a release
            try:
                self._under(parent, record.status, slots_of(parent, record), now, out, 0)
            except Exception:
                log.exception("could not record the after() children of %s %s", parent.id, record.slot)
                out.failed += 1
        return out

    def _under(
        self,
        parent: Job,
        parent_status: ExecutionStatus,
        slots: list[datetime],
        now: datetime,
        out: ChildRecords,
        depth: int,
    ) -> None:
        status = _UNDER.get(parent_status)
        if status is None or parent.dependents <= 0 or depth >= MAX_DEPTH:
            return
        children = self.store.list_dependents(parent.tenant, parent.id)
        if not children:
            return
        jobs = self.store.batch_get_jobs((parent.tenant, child) for child in children)
        note = child_note(parent, parent_status)
        read = _Reads(self.store)  # the other parents, read once for all the children
        for child_id in children:
            child = jobs.get((parent.tenant, child_id))
            if (
                child is None
                or child.state not in _RECORDED_FOR
                or parent.id not in schedule_of(child).parents
            ):
                continue
            kept = [
                slot
                for slot in slots
                if inside_window(child, slot)
                and slot >= child.created_at  # a parent's old slots a late catch-up drops now
                and others_have_slot(self.store, child, parent.id, slot, read)
            ]
            runs = _runs(kept, slots) if status is ExecutionStatus.MISSED else [[s] for s in kept]
            for whole in [part for run in runs for part in self._unrecorded(child, run)]:
                run, written, found = self._save(child, whole, status, note, now)
                if written is not None:
                    (out.missed if status is ExecutionStatus.MISSED else out.skipped).append((child, written))
                below = written or found
                if below is not None:  # a repeat goes on down too: it may have died before the grandchildren
                    self._under(child, below.status, run, now, out, depth + 1)

    def _unrecorded(self, child: Job, run: list[datetime]) -> list[list[datetime]]:
        """A range ``run`` of the child less the slots after its first that have a record already
        (its own run, SKIPPED under another parent's failure, a range of a release that died): the
        runs between them, so that each slot is run or recorded, never both (QA23: a child's range
        counted them again). One Query of the child's records a range; a single slot reads none
        (its write's condition finds a record)."""
        if len(run) <= 1:
            return [run]
        inside = records_inside(self.store, child.tenant, child.id, slot_key(run[0]), slot_key(run[-1]))
        taken = [(r.slot, r.last_slot or r.slot) for r in inside]
        if not taken:
            return [run]
        left = [t for t in run if not any(a <= slot_key(t) <= b for a, b in taken)]
        return _runs(left, run)

    def _save(
        self, child: Job, run: list[datetime], status: ExecutionStatus, note: str, now: datetime
    ) -> tuple[list[datetime], Execution | None, Execution | None]:
        """The child's record of ``run`` (one slot, or a MISSED range), as (run, written, None);
        (run, None, found) when the slot has a record not run already (a repeat's), (run, None,
        None) when it has another. A range whose first slot has a record other than MISSED (the
        child's slot SKIPPED by its other parent's failure, EXCLUDED, run) goes on from its next
        slot, and ``run`` is what is left of it (QA23: the whole range went unrecorded)."""
        while True:
            record = Execution(
                job_id=child.id,
                tenant=child.tenant,
                slot=slot_key(run[0]),
                scheduled_at=run[0],
                status=status,
                finished_at=now,
                error=note,
                job_version=child.version,
                last_slot=slot_key(run[-1]) if len(run) > 1 else None,
                slot_count=len(run),
            )
            try:
                self.store.save_execution(record, None, self.ttl())
            except ExecutionConflictError as exc:
                current = exc.current
                if len(run) > 1 and current is not None and current.status is not ExecutionStatus.MISSED:
                    run = run[1:]
                    continue
                return run, None, current if current is not None and current.status in _UNDER else None
            return run, record, None
