"""Repairing a chain the auditor found broken: from the job's next slot, the lost slots recorded.

Every repair is a write a live chain would also make, or one guarded by a condition, so a
repair repeated, racing another auditor or racing the chain itself never doubles a slot:

clock (``cron``, ``rate``, ``at``)
    The slots the chain lost, from the first one after the job's newest record (or its last
    change) up to the first slot released after now, become **one** MISSED record, reason
    ``chain repaired``, on the first of them (``last_slot`` and ``slot_count`` say how far it
    goes). It is created only if that slot has no record: the conditional put is the repair's
    lock, so a second auditor, or a chain that moved meanwhile, repairs nothing. The range is told
    of (its missed alert, the after() children's records, the skipped count, the Chain Repaired
    and Slot Missed events, sent) and its record marked told, then the timer of that next slot is
    written, the very row a live chain would write (same key), and the chain goes on from there: an
    auditor that dies after the timer has left nothing untold, and one that dies before it leaves
    the chain to the next pass, which restarts it after the range's record (its ``last_slot``) and
    tells of that range first if it is not marked told. A job with no slot left is
    marked COMPLETED, as its last release would have (conditional on its version).
delay
    The next run's FIRE timer is written again, due at once if its instant passed: the poller
    releases it with its deduplication id and the worker's claim starts it once; its end
    chains the next one as usual. A fixed-delay chain loses no slot, it runs late.
in flight
    The follow-up timer (retry, lease expiry, queued check) of a slot that waits for it, due
    now: the poller sends its message only if the record still waits for that very step.
after
    The missing links from its parents (``set_dependents``), so their next success dispatches it.
backfill
    The timer of its current step (a step repeated is dropped by the record's ``tick``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TypeVar

from punctual.auditing.liveness import REPAIR_SKEW_S, FollowUp
from punctual.delivery.notifications.events import CHAIN_REPAIRED as CHAIN_REPAIRED_EVENT
from punctual.delivery.notifications.events import REPAIRED, SLOT_MISSED, Event, execution_event
from punctual.dispatch.queues import MessageKind, QueuePort, QueueRouting, message_for
from punctual.execution.records import new_owner
from punctual.execution.unrun_children import UnrunChildren
from punctual.models import AlertCondition, Execution, ExecutionStatus, Job, JobState
from punctual.store.base import ExecutionConflictError, Expect, JobStore, VersionConflictError
from punctual.timing.schedules.periods import RateSchedule
from punctual.timing.slots import dispatch_instant, fire_timer, next_slot, schedule_of
from punctual.timing.timers import TimerKind, TimerLayout, slot_instant, slot_key
from punctual.usecases.backfills import Backfill
from punctual.usecases.delay_chains import find_newest_scheduled

log = logging.getLogger("punctual.auditing")

CHAIN_REPAIRED = "chain repaired"
TELL_TRIES = 3  # tries of each step that tells of a repaired range (a transaction conflict passes)
T = TypeVar("T")
MAX_COUNTED = 1_000_000  # lost slots of a non-rate schedule counted one by one, at most


@dataclass(frozen=True)
class Repair:
    """One repair: what was broken and what was done about it.

    ``applied`` is False when the repair was only found (repairs turned off) or another writer
    got there first (the lost slots' record existed: nothing was written).
    """

    kind: str  # clock, completion, delay, retry, lease, queued, dependency, backfill
    tenant: str
    job_id: str
    reason: str
    next_slot: str | None = None
    missed_from: str | None = None
    missed_through: str | None = None
    missed_count: int = 0
    applied: bool = True
    version: int = 0
    # The MISSED records the repair wrote (the job's range, its after() children's): each is a
    # Slot Missed event on the deployment's bus, as the slots a poller records MISSED are.
    missed_records: tuple[tuple[Job, Execution], ...] = field(default=(), compare=False, repr=False)
    announced: bool = field(default=False, compare=False)  # its events were sent by the repair itself


@dataclass(frozen=True)
class LostSlots:
    first: datetime
    last: datetime
    count: int
    complete: bool  # False: counted up to MAX_COUNTED only


def count_lost(job: Job, first: datetime, before: datetime | None) -> LostSlots | None:
    """The job's slots from ``first`` (a slot) up to, not including, ``before`` (None: to the
    schedule's end). ``rate(...)`` is counted by arithmetic, other schedules step by step."""
    if before is not None and first >= before:
        return None
    schedule = schedule_of(job)
    period = schedule.period if isinstance(schedule, RateSchedule) else None
    if period is not None and before is not None:
        bound = before if job.end_at is None or job.end_at >= before else job.end_at + timedelta(seconds=1)
        count = max(1, -(-(bound - first) // period))
        return LostSlots(first, first + (count - 1) * period, count, True)
    count, last = 0, first
    current: datetime | None = first
    while current is not None and (before is None or current < before):
        if count == MAX_COUNTED:
            return LostSlots(first, last, count, False)
        count, last = count + 1, current
        current = next_slot(job, current)
    return LostSlots(first, last, count, True)


class Repairer:
    """Applies repairs. Parameters: the store; the timer layout; how long records are kept;
    the queues and routing that hand a lost range's ``missed`` alert to a worker (None: no alerts)."""

    def __init__(
        self,
        store: JobStore,
        layout: TimerLayout,
        retention_days: int,
        queues: QueuePort | None = None,
        routing: QueueRouting | None = None,
    ) -> None:
        self.store = store
        self.layout = layout
        self.retention_days = retention_days
        self.queues = queues
        self.routing = routing

    # ------------------------------------------------------------------ clock chains

    def clock(
        self,
        job: Job,
        head: datetime | None,
        floor: datetime,
        reason: str,
        now: datetime,
        announce: Callable[[Repair], None] | None = None,
    ) -> Repair:
        """Record the slots lost from ``floor`` on (the first slot after it) up to ``head``, the
        first slot released after now, and restart the chain at ``head`` (None: complete the job).

        The lost range is told of (:meth:`_told`), the repair announced (``announce``: its events,
        sent) and the range's record marked told before the chain goes on: a repairer that dies
        after the timer's write has left nothing untold, and one that dies before it leaves the
        chain to the next audit, which restarts it after the range its record holds (QA30: the
        range's alert, children's records, skipped count and events came after the timer, and were
        lost for good with the auditor) and tells of that range only if it was not marked told."""
        first = next_slot(job, floor)
        lost = count_lost(job, first, head) if first is not None else None
        earlier = self._earlier_range(job)
        base = Repair(
            kind="clock" if head is not None else "completion",
            tenant=job.tenant,
            job_id=job.id,
            reason=reason,
            next_slot=slot_key(head) if head is not None else None,
            version=job.version,
        )
        if earlier is not None:  # told first (the older range), on both paths (review of QA30)
            self._tell_marked(_of_range(job, earlier), job, now, announce)
        if lost is not None:
            base = replace(
                base,
                missed_from=slot_key(lost.first),
                missed_through=slot_key(lost.last),
                missed_count=lost.count,
            )
            record = self._lock_lost(job, lost, reason, now)
            if record is None:
                return replace(base, applied=False)
            # Told of before the chain goes on; each step's failure is caught and logged, so none
            # costs the chain its timer (QA29: a write of the job item a transaction held did)
            base = self._tell_marked(replace(base, missed_records=((job, record),)), job, now, announce)
        if head is not None:
            if announce is not None and not base.announced:  # (no slot lost: its Chain Repaired)
                announce(base)
                base = replace(base, announced=True)
            self.store.put_timers([fire_timer(self.layout, job, head, written(now))])
            return base
        done = job.model_copy(
            update={
                "state": JobState.COMPLETED,
                "updated_at": now,
                "state_reason": f"{CHAIN_REPAIRED}: no slot left ({reason})",
            }
        )
        try:
            self.store.replace_job(done, expected_version=job.version)
        except VersionConflictError:
            # Another writer moved the job first: its completion is left to the next audit, but
            # the lost slots recorded above are written, and told of (review, QA24: reported as
            # not applied, their records never had their events, and no later audit sends them)
            return replace(base, applied=bool(base.missed_records))
        return base

    def _earlier_range(self, job: Job) -> Execution | None:
        """The range an earlier repair of ``job`` recorded MISSED and did not mark told, when it is
        still the job's newest scheduled record: its repairer died before telling of it (QA30), so
        it is told of now. One marked told is not told again (review of QA30: a repairer that died
        after telling, before the timer, had its range counted and announced twice)."""
        newest, _ = find_newest_scheduled(self.store, job)
        if newest is None or newest.status is not ExecutionStatus.MISSED or newest.told_at is not None:
            return None
        return newest if (newest.error or "").startswith(CHAIN_REPAIRED) else None

    def _tell_marked(
        self, repair: Repair, job: Job, now: datetime, announce: Callable[[Repair], None] | None
    ) -> Repair:
        """``repair``'s range told of (:meth:`_told`), announced (``announce``: its events, sent),
        then its record marked told: only a death between the telling and the mark leaves it to be
        told again (its count and events twice, never zero times)."""
        told = self._told(repair, job, now)
        if announce is not None:
            announce(told)
            told = replace(told, announced=True)
        _, record = repair.missed_records[0]
        marked = record.model_copy(update={"told_at": now})
        expect = Expect(statuses=frozenset({ExecutionStatus.MISSED}), owner=record.owner, check_owner=True)
        self._step(job, "its told mark", lambda: self.store.save_execution(marked, expect, self._ttl(now)))
        return told

    def _lock_lost(self, job: Job, lost: LostSlots, reason: str, now: datetime) -> Execution | None:
        """The lost slots' one MISSED record, created only if its first slot has none (the lock);
        None: another writer holds the lock."""
        more = "" if lost.complete else " or more"
        record = Execution(
            job_id=job.id,
            tenant=job.tenant,
            slot=slot_key(lost.first),
            scheduled_at=dispatch_instant(job, lost.first),
            status=ExecutionStatus.MISSED,
            finished_at=now,
            error=(
                f"{CHAIN_REPAIRED}: {lost.count}{more} slot(s) from {slot_key(lost.first)} to"
                f" {slot_key(lost.last)} were not run ({reason})"
            ),
            job_version=job.version,
            last_slot=slot_key(lost.last),
            slot_count=lost.count,
            # Fresh per repair: the put retried after its answer was lost (a read timeout) finds
            # this very record and succeeds, not a lock held by another writer (QA27: the repair
            # was then not applied, no timer written, and the range's alert and events never sent)
            owner=new_owner(),
        )
        try:
            self.store.save_execution(record, None, self._ttl(now))
        except ExecutionConflictError:
            return None
        return record

    def _ttl(self, now: datetime) -> int:
        return int((now + timedelta(days=self.retention_days)).timestamp())

    def _told(self, repair: Repair, job: Job, now: datetime) -> Repair:
        """``repair`` with its lost range told of: its ``missed`` alert, its after() children's same
        slots recorded MISSED, the jobs' skipped counts. Best effort once the chain goes on, each
        step on its own, tried :data:`TELL_TRIES` times (review of QA29: one try of all of them in
        a row, a conflict on the count lost the alert and the children's records too); a step that
        still fails is logged, and the repair reported with what it recorded (its events sent)."""
        if not repair.missed_records:
            return repair
        _, record = repair.missed_records[0]
        recorded = [(job, record)]
        self._step(job, "its missed alert", lambda: self._alert(job, record, now))
        if job.dependents > 0:  # the after() children's same slots: MISSED too, not left unrecorded
            ttl = self._ttl(now)
            below = self._step(
                job,
                "its children's records",
                lambda: UnrunChildren(self.store, lambda: ttl).record([(job, record)], now),
            )
            for child, missed in below.missed if below is not None else ():
                self._tell_child(child, missed, now)
                recorded.append((child, missed))
        self._step(
            job, "its skipped count", lambda: self.store.add_skipped(job.tenant, job.id, record.slot_count)
        )
        return replace(repair, missed_records=tuple(recorded))

    def _tell_child(self, child: Job, missed: Execution, now: datetime) -> None:
        self._step(child, "its missed alert", lambda: self._alert(child, missed, now))
        self._step(
            child,
            "its skipped count",
            lambda: self.store.add_skipped(child.tenant, child.id, missed.slot_count),
        )

    def _step(self, job: Job, what: str, step: Callable[[], T]) -> T | None:
        for attempt in range(TELL_TRIES):
            try:
                return step()
            except Exception:
                if attempt + 1 == TELL_TRIES:
                    log.warning(
                        "chain of %s/%s repaired; %s not recorded", job.tenant, job.id, what, exc_info=True
                    )
        return None

    def _alert(self, job: Job, record: Execution, now: datetime) -> None:
        """A job with a ``missed`` alert rule: a worker raises it for the range (once per slot); a
        job with its own ``events_bus``: the worker copies the range's Slot Missed there (QA23: a
        job with a bus and no missed rule never heard of the slots the repair recorded MISSED),
        as a poller's release hands them over."""
        if self.queues is None or self.routing is None:
            return
        if job.events_bus is None and not any(AlertCondition.MISSED in rule.on for rule in job.alerts):
            return
        message = message_for(job, record.slot, record.scheduled_at, 1, MessageKind.ALERT, now)
        self.queues.send(self.routing.queue_for(job), [replace(message, ordered=False)])

    # ------------------------------------------------------------------ the others

    def rearm(self, job: Job, head: datetime, kind: str, reason: str, now: datetime) -> Repair:
        """Write ``head``'s timer again where its chain puts it (due at once if its instant passed):
        a delay chain's next run (``delay``), or a head whose timer is in the wrong minute
        (``misplaced``: no slot lost, the stray is harmless, :func:`..auditor.misplaced_reason`)."""
        self.store.put_timers([fire_timer(self.layout, job, head, written(now))])
        return Repair(kind, job.tenant, job.id, reason, next_slot=slot_key(head), version=job.version)

    def follow_up(self, job: Job, follow: FollowUp, now: datetime) -> Repair:
        """The follow-up timer of a slot in flight, due now."""
        self._due_now(job, follow.slot, follow.attempt, follow.kind, now, follow.owner)
        return Repair(
            follow.kind.value, job.tenant, job.id, follow.reason, next_slot=follow.slot, version=job.version
        )

    def links(self, job: Job, parents: list[str], reason: str) -> Repair:
        """Link ``job`` to the parents that lost their link to it."""
        self.store.set_dependents(job.tenant, job.id, parents, present=True)
        return Repair("dependency", job.tenant, job.id, reason, version=job.version)

    def backfill(self, job: Job, backfill: Backfill, reason: str, now: datetime) -> Repair:
        """The timer of a stalled backfill's current step, due now."""
        self._due_now(job, backfill.id, backfill.tick, TimerKind.BACKFILL, now)
        return Repair("backfill", job.tenant, job.id, reason, version=job.version)

    def _due_now(
        self, job: Job, slot: str, attempt: int, kind: TimerKind, now: datetime, owner: str | None = None
    ) -> None:
        timer = self.layout.make(
            now=written(now),
            due=written(now),
            job_id=job.id,
            tenant=job.tenant,
            slot=slot,
            attempt=attempt,
            kind=kind,
            job_version=job.version,
            owner=owner,
        )
        self.store.put_timers([timer])


def _of_range(job: Job, record: Execution) -> Repair:
    """The repair that recorded ``record``, a chain-repaired MISSED range, as it can be told of."""
    return Repair(
        kind="clock",
        tenant=job.tenant,
        job_id=job.id,
        reason=record.error or CHAIN_REPAIRED,
        missed_from=record.slot,
        missed_through=record.last_slot or record.slot,
        missed_count=record.slot_count or 1,
        version=record.job_version,
        missed_records=((job, record),),
    )


def written(now: datetime) -> datetime:
    """When a repair's timers count as written, and the earliest they are due: the auditor's now
    plus :data:`~punctual.auditing.liveness.REPAIR_SKEW_S`. A timer due at an auditor's now that is
    behind the pollers' clocks goes into a minute whose pollers may have stopped reading it (10 s
    past its end): QA27, an auditor 30 s behind repaired a lost retry with a timer never released.
    A repair (of a chain broken for its grace at least) is so up to that much later."""
    return now + timedelta(seconds=REPAIR_SKEW_S)


def missed_events(repair: Repair, now: datetime) -> list[Event]:
    """The ``Slot Missed`` events of the records ``repair`` wrote MISSED (the job's range, its
    children's): a subscriber to Slot Missed hears of a repair's lost slots as of a poller's."""
    return [
        execution_event(job, record, now, detail_type=SLOT_MISSED)
        for job, record in repair.missed_records
        if record.status is ExecutionStatus.MISSED
    ]


def repair_event(job: Job, repair: Repair, now: datetime) -> Event:
    """The ``Chain Repaired`` event of ``repair``: on the first lost slot (its MISSED record) when
    slots were lost, else on the slot the chain goes on from."""
    slot = repair.missed_from or repair.next_slot or slot_key(now)  # else: the repair's instant
    carrier = Execution(
        tenant=job.tenant,
        job_id=job.id,
        slot=slot,
        scheduled_at=slot_instant(slot),
        status=ExecutionStatus.MISSED,
        attempt=1,
        error=f"{CHAIN_REPAIRED} ({repair.kind}): {repair.reason}",
        job_version=repair.version,
    )
    extra = {
        "repair": repair.kind,
        "next_slot": repair.next_slot,
        "missed_from": repair.missed_from,
        "missed_through": repair.missed_through,
        "missed_count": repair.missed_count,
    }
    return execution_event(job, carrier, now, detail_type=CHAIN_REPAIRED_EVENT, status=REPAIRED, extra=extra)
