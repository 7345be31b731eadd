"""The slots a release does not run, and the records that say why.

A slot dropped by the catch-up policy or its window, owed by a pause, or whose excluded calendar
is gone gets a record MISSED; a slot on a day of a calendar its job excludes, a record EXCLUDED.
Both are conditional puts, so a slot is counted once however often it is released; a long run of
dropped slots is one range record (:mod:`punctual.timing.missed_ranges`), which a repeated release
that finds a longer run grows. Each slot recorded MISSED is notified: its event, and an ``alert``
message to a worker when its job has a ``missed`` rule or a bus of its own (the worker makes the
alert once per slot, however often the message comes).

Which slots a calendar excludes is decided here too (:class:`CalendarExclusions`): calendars are
read eventually consistently, and again strongly before anything is excluded on that read.
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from punctual.delivery.notifications import Notifier
from punctual.dispatch.queues import DispatchMessage, MessageKind, QueuePort, message_for
from punctual.execution.records import (
    GONE_NOTE,
    lost_run_of_a_gone_job,
    records_inside,
    rest_of_range,
    retry_not_started,
    skipped_record,
)
from punctual.execution.unrun_children import UnrunChildren
from punctual.models import AlertCondition, Execution, ExecutionStatus, Job
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink
from punctual.store.base import ExecutionConflictError, Expect, JobStore, UnreadableJobError
from punctual.store.reads import read_calendars
from punctual.timing.missed_ranges import MissedRange, without_taken
from punctual.timing.slots import (
    ReleasePlan,
    calendar_before_catchup,
    dispatch_instant,
    next_slot,
    schedule_of,
)
from punctual.timing.timers import MANUAL_MARK, Timer, TimerKind, slot_instant, slot_key
from punctual.usecases.calendars import (
    Calendar,
    calendar_missing_note,
    excluding,
    exclusion_note,
    on_excluded_day,
)
from punctual.usecases.delay_chains import chains_from, next_delay_slot

log = logging.getLogger("punctual.dispatch.polling")


def unrun_record(
    job: Job, slot: datetime, reason: str, now: datetime, status: ExecutionStatus = ExecutionStatus.MISSED
) -> Execution:
    """The record of a slot that is not run (MISSED, or EXCLUDED), decided at ``now``."""
    return Execution(
        job_id=job.id,
        tenant=job.tenant,
        slot=slot_key(slot),
        scheduled_at=dispatch_instant(job, slot),
        status=status,
        finished_at=now,
        error=reason,
        job_version=job.version,
    )


def ended_for_gone(timer: Timer, current: Execution, now: datetime) -> tuple[Execution, Expect] | None:
    """The end of a deleted job's slot that ``timer`` finds still open, and what its write
    expects; None when it is not open for that timer (or its run is alive: its worker ends it).

    A job deleted while a slot of it waits for its retry, for its overlap turn, or runs on a
    worker then lost would strand it: with the job gone, no message is sent for that timer, and
    the record stayed open until its TTL (QA, a soak: four of four deletes during a retry wait
    left RETRY_WAIT records, and a queue job's waiting slots stayed QUEUED). Nothing follows the
    end: no retry, alert, dead letter or dependant, the job is gone."""
    status, attempt = current.status, current.attempt
    if (
        timer.kind is TimerKind.RETRY
        and status is ExecutionStatus.RETRY_WAIT
        and attempt == timer.attempt - 1
    ):
        return retry_not_started(current, now, GONE_NOTE), Expect(frozenset({status}), attempt)
    if timer.kind is TimerKind.QUEUED and status is ExecutionStatus.QUEUED:
        return skipped_record(current, now, GONE_NOTE), Expect(frozenset({status}), attempt)
    if timer.kind is TimerKind.LEASE and current.owner == timer.owner:
        return lost_run_of_a_gone_job(current, now)
    return None


def range_record(job: Job, missed: MissedRange, now: datetime) -> Execution:
    """The one MISSED record of a long run of dropped slots (:mod:`punctual.timing.missed_ranges`)."""
    record = unrun_record(job, missed.first, missed.reason, now)
    return record.model_copy(update={"last_slot": slot_key(missed.last), "slot_count": missed.count})


_MICRO = timedelta(microseconds=1)


def less_recorded(store: JobStore, job: Job, record: Execution) -> list[Execution]:
    """A range ``record`` less the slots after its first that have a record already (a backfill
    ran them during the pause; a release that died wrote part of it): the records of its runs
    without one. One Query when there are none (the common case)."""
    first, last = slot_instant(record.slot), slot_instant(record.last_slot or record.slot)
    taken: list[tuple[datetime, datetime, int]] = []
    for found in records_inside(store, job.tenant, job.id, record.slot, record.last_slot or record.slot):
        instant = slot_instant(found.slot) if MANUAL_MARK not in found.slot else None
        if instant is not None and next_slot(job, instant - _MICRO) == instant:  # a slot of it
            taken.append((instant, slot_instant(found.last_slot or found.slot), found.slot_count))
    if not taken:
        return [record]
    schedule = schedule_of(job)
    period = schedule.period if schedule.kind == "rate" else None
    runs = without_taken(
        first, last, record.slot_count, taken, lambda t: next_slot(job, t), period, job.end_at
    )
    return [
        record.model_copy(
            update={
                "slot": slot_key(a),
                "scheduled_at": dispatch_instant(job, a),
                "last_slot": slot_key(b) if n > 1 else None,
                "slot_count": n,
            }
        )
        for a, b, n in runs
    ]


class UnrunSlots:
    """Writes the MISSED and EXCLUDED records of a release, counts them, and notifies the missed.

    ``queue_for`` routes a job's ``alert`` messages (the release's queue routing)."""

    def __init__(
        self,
        store: JobStore,
        queues: QueuePort,
        clock: Clock,
        retention_days: int,
        metrics: MetricsSink,
        notifier: Notifier,
        queue_for: Callable[[Job], str],
    ) -> None:
        self.store = store
        self.queues = queues
        self.clock = clock
        self.retention_days = retention_days
        self.metrics = metrics
        self.notifier = notifier
        self.queue_for = queue_for
        self.children = UnrunChildren(store, self._ttl)

    def _ttl(self) -> int:
        return int((self.clock.now() + timedelta(days=self.retention_days)).timestamp())

    def record_excluded(self, records: list[Execution], jobs: dict[tuple[str, str], Job]) -> int:
        """Write EXCLUDED records where the slot has none yet (a repeat finds one and counts nothing);
        the ``after()`` children's slots under each are recorded SKIPPED (a repeat's too: a release
        that died before it could record them)."""
        ttl = self._ttl()
        written = 0
        under: list[tuple[Job, Execution]] = []
        for record in records:
            job = jobs.get((record.tenant, record.job_id))
            try:
                self.store.save_execution(record, None, ttl)
                written += 1
            except ExecutionConflictError as exc:
                if exc.current is None or exc.current.status is not ExecutionStatus.EXCLUDED:
                    continue
            if job is not None and job.dependents > 0:
                under.append((job, record))
        self._record_children(under)
        return written

    def _record_children(self, under: list[tuple[Job, Execution]]) -> None:
        """Record the ``after()`` children's slots under parents' MISSED or EXCLUDED records
        (:mod:`punctual.execution.unrun_children`): a SKIPPED one with its event, a MISSED one
        with its event, alert and its job's count of slots not run. A failure is logged and
        counted (``ChildRecordsFailed``), never the release's: its records and next timers stand,
        and what was written before it is still told."""
        if not under:
            return
        now = self.clock.now()
        found = self.children.record(under, now)
        try:
            for child, record in found.skipped:
                self.notifier.changed(child, record, now)
            per_job: dict[tuple[str, str], int] = defaultdict(int)
            for child, record in found.missed:
                per_job[(child.tenant, child.id)] += record.slot_count
            self._notify_missed(found.missed)
            for (tenant, job_id), count in per_job.items():
                self.store.add_skipped(tenant, job_id, count)
            self.send_alerts(found.skipped)  # the SKIPPED ones' copies on the children's own buses
        except Exception:
            log.exception("could not tell of the after() children's records of %d slot(s)", len(under))
            found.failed += 1
        if found.failed:
            self.metrics.add("ChildRecordsFailed", found.failed)

    def end_gone(self, ended: list[tuple[Execution, Expect]]) -> int:
        """Write the ends of deleted jobs' open slots (:func:`ended_for_gone`), each as its record
        was read, once a read of the job alone confirms it is gone; returns how many were written
        (a record that moved meanwhile is left to what moved it)."""
        deleted = self._deleted({(record.tenant, record.job_id) for record, _ in ended})
        return self._save_each([(r, expect) for r, expect in ended if (r.tenant, r.job_id) in deleted])

    def _deleted(self, keys: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """Of jobs a batch read did not return, those that are gone: the batch read leaves out a
        job the model cannot read too (review: such a job's open slots were ended as if deleted),
        for which this read raises."""
        gone = set()
        for tenant, job_id in keys:
            with contextlib.suppress(UnreadableJobError):
                if self.store.get_job(tenant, job_id) is None:
                    gone.add((tenant, job_id))
        return gone

    def _save_each(self, writes: Sequence[tuple[Execution, Expect | None]]) -> int:
        """Each conditional write (None: the record must not exist); how many landed."""
        ttl = self._ttl()
        written = 0
        for record, expect in writes:
            try:
                self.store.save_execution(record, expect, ttl)
            except ExecutionConflictError:
                continue
            written += 1
        return written

    def record_missed(self, records: list[Execution], jobs: dict[tuple[str, str], Job]) -> int:
        """Write MISSED records where the slot has none yet; count each slot once per job.

        Each slot recorded MISSED (now, or by a release that died before it could tell) is
        notified: its event, and an ``alert`` message when its job has a ``missed`` rule (the
        worker makes the alert once per slot, however often the message comes).
        """
        if not records:
            return 0
        ttl = self._ttl()
        per_job: dict[tuple[str, str], int] = defaultdict(int)
        notify: list[tuple[Job, Execution]] = []
        under: list[tuple[Job, Execution]] = []  # parents' MISSED records with after() children
        for whole in records:
            job = jobs.get((whole.tenant, whole.job_id))
            for record in less_recorded(self.store, job, whole) if job and whole.slot_count > 1 else [whole]:
                record, conflict = self._save_missed(record, job, ttl)
                if conflict is not None:
                    # The slot ran, or was recorded missed before: nothing new to count. A record
                    # missed before is notified again (its alert is made once however often).
                    earlier = conflict.current
                    if earlier is None or earlier.status is not ExecutionStatus.MISSED:
                        continue
                    added = self._extend_range(record, earlier, ttl)
                    if added:
                        per_job[(record.tenant, record.job_id)] += added
                    now_is = record if added else earlier  # (QA23: an extension was told as it was)
                    if job is not None and (added or job.alerts or job.events_bus is not None):
                        notify.append((job, now_is))  # once (QA: twice with alerts, three events a slot)
                    if job is not None and job.dependents > 0:
                        under.append((job, now_is))  # its children, if a release died before them
                    continue
                per_job[(record.tenant, record.job_id)] += record.slot_count
                if job is not None:
                    notify.append((job, record))
                    if job.dependents > 0:
                        under.append((job, record))
        self._notify_missed(notify)
        for (tenant, job_id), count in per_job.items():
            self.store.add_skipped(tenant, job_id, count)
        self._record_children(under)  # last: the parents' records are told whatever it meets
        return sum(per_job.values())

    def _save_missed(
        self, record: Execution, job: Job | None, ttl: int
    ) -> tuple[Execution, ExecutionConflictError | None]:
        """Write ``record`` where its slot has none yet; returns the record written (or last tried)
        and the conflict that stopped it. A range whose first slot has a record other than MISSED
        goes on from its next slot: that slot ran, released just before the pause that owes it (QA23:
        the whole range was taken for recorded before, and its slots went unrecorded)."""
        while True:
            try:
                self.store.save_execution(record, None, ttl)
                return record, None
            except ExecutionConflictError as exc:
                ran = exc.current is not None and exc.current.status is not ExecutionStatus.MISSED
                rest = rest_of_range(job, record) if ran and job is not None else None
                if rest is None:
                    return record, exc
                record = rest

    def _notify_missed(self, notify: list[tuple[Job, Execution]]) -> None:
        if notify:
            self.notifier.missed(notify, self.clock.now())  # the events
            self.send_alerts(notify)

    def _extend_range(self, record: Execution, earlier: Execution, ttl: int) -> int:
        """A repeated release (after a crash) may find a longer run than the first one recorded:
        the range record grows to cover it. Returns how many slots it gained."""
        gained = record.slot_count - earlier.slot_count
        if gained <= 0 or (earlier.last_slot or earlier.slot) >= (record.last_slot or record.slot):
            return 0
        try:
            self.store.save_execution(
                record, Expect(frozenset({ExecutionStatus.MISSED}), earlier.attempt), ttl
            )
        except ExecutionConflictError:
            return 0
        return gained

    def send_alerts(self, missed: list[tuple[Job, Execution]]) -> None:
        """Hand each missed slot of a job with a ``missed`` rule to a worker, which raises its
        alert (once per slot, by a conditional write) and delivers it with the target role; and
        each slot recorded not run (MISSED, or a child's SKIPPED) of a job with an ``events_bus``,
        whose event the worker copies there."""
        now = self.clock.now()
        outgoing: dict[str, list[DispatchMessage]] = defaultdict(list)
        for job, record in missed:
            alerted = record.status is ExecutionStatus.MISSED and any(
                AlertCondition.MISSED in rule.on for rule in job.alerts
            )
            if job.events_bus is not None or alerted:
                message = message_for(job, record.slot, record.scheduled_at, 1, MessageKind.ALERT, now)
                outgoing[self.queue_for(job)].append(replace(message, ordered=False))
        for queue, messages in outgoing.items():
            self.queues.send(queue, messages)
            self.metrics.add("AlertsHandedOver", len(messages))


def _delay_goes_on(job: Job, plan: ReleasePlan, records: list[Execution]) -> None:
    """A ``delay(...)`` chain's slot that is not run (its day excluded, or its calendar gone): the
    chain goes on N after the slot's own instant, as the auditor expects of it
    (:func:`punctual.auditing.liveness.delay_heads`), the same for a repeated release (QA28: the
    next timer is written by a run's end, and there was none, so the job never fired again); none
    left before ``end_at``: the job completes. Not a slot a replace's catch-up owes (the replace
    started the job's chain)."""
    if schedule_of(job).kind != "delay" or plan.release or len(records) != 1:
        return
    if not chains_from(job, records[0]):
        return
    slot = records[0].slot
    plan.next_slot = next_delay_slot(job, slot, slot_instant(slot))
    plan.chain = True


class CalendarExclusions:
    """Takes the slots on an excluded calendar day out of a chunk's release plans."""

    def __init__(self, store: JobStore, metrics: MetricsSink) -> None:
        self.store = store
        self.metrics = metrics

    def exclude(
        self, plans: list[tuple[Job, ReleasePlan]], now: datetime
    ) -> tuple[list[Execution], list[Execution]]:
        """Remove excluded slots from ``plans``; returns their records: (EXCLUDED, MISSED).

        A slot on a day of a calendar its job excludes is EXCLUDED; the slots of a job whose
        excluded calendar is gone are MISSED (``calendar missing``)."""
        excluded: list[Execution] = []
        missed: list[Execution] = []
        keys = {(job.tenant, name) for job, _ in plans for name in job.exclude_calendars}
        if not keys:
            return excluded, missed
        calendars = read_calendars(self.store, keys, lambda found: self._excludes_any(plans, found))
        for job, plan in plans:
            if not job.exclude_calendars:
                continue
            gone = [n for n in job.exclude_calendars if (job.tenant, n) not in calendars]
            if gone:
                records = self._calendar_missing(job, plan, gone, now)
                missed.extend(records)
                _delay_goes_on(job, plan, records)
                continue
            mine: list[Calendar] = [calendars[(job.tenant, n)] for n in job.exclude_calendars]
            calendar_before_catchup(job, plan, now, on_excluded_day(mine))
            kept: list[datetime] = []
            records = []
            for slot in plan.release:
                calendar = excluding(mine, slot)
                if calendar is None:
                    kept.append(slot)
                else:
                    records.append(
                        unrun_record(job, slot, exclusion_note(calendar), now, ExecutionStatus.EXCLUDED)
                    )
            plan.release = kept
            excluded.extend(records)
            _delay_goes_on(job, plan, records)
        return excluded, missed

    @staticmethod
    def _excludes_any(
        plans: list[tuple[Job, ReleasePlan]], calendars: dict[tuple[str, str], Calendar]
    ) -> bool:
        """Whether ``calendars`` (as read) would keep any slot of ``plans`` from running."""
        for job, plan in plans:
            mine = [calendars[(job.tenant, n)] for n in job.exclude_calendars if (job.tenant, n) in calendars]
            if mine and any(excluding(mine, slot) is not None for slot in plan.release):
                return True
        return False

    def _calendar_missing(
        self, job: Job, plan: ReleasePlan, gone: list[str], now: datetime
    ) -> list[Execution]:
        """A job whose excluded calendar is gone: its slots are not run (any may fall on one of
        the calendar's days) but recorded MISSED, ``calendar missing``, with the event and the
        ``missed`` alert of any missed slot; the chain goes on."""
        if not plan.release:
            return []
        note = calendar_missing_note(gone)
        log.error("job %s: %s; %d slot(s) recorded MISSED", job.id, note, len(plan.release))
        self.metrics.add("SlotsCalendarMissing", len(plan.release))
        records = [unrun_record(job, slot, note, now) for slot in plan.release]
        plan.release = []
        return records
