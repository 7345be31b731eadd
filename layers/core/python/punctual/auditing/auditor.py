"""The chain auditor: checks that every ENABLED job has a live chain, and repairs the broken ones.

**Segments, no leader.** Jobs are read from the audit index a segment at a time; a job's segment
is its far timer shard, so the far buckets the auditor reads for a segment hold that segment's
timers only. A run takes the segments of its minute (:func:`segments_for`: segment ``s`` in the
minute ``m`` with ``m % period == s % period``), so every job is checked once per
``period_minutes``, by whichever invocation runs that minute; a run that fails or is cut short is
retried by its invocation, and the segment comes round again next period anyway.

**Three steps per job.** (1) *Cheap*: from the index's copy of the job (eventually consistent)
compute the chain's head (:mod:`.liveness`) and look for its timer in the bucket(s) it is in,
reading each bucket once per page for every job of the page (eventually consistent, bounded to
the dues looked for). Almost every job ends here. (2) *Confirm*, for a job whose head was not
found: read the job strongly consistently (changed since: not judged); skip it while its shards'
pollers are behind (their watermarks have not passed ``now - grace``: its chain may wait in an
undrained bucket); read, strongly consistently, the head's buckets in both lanes, the next slot's,
and the job's near buckets of the last ``grace`` (a catch-up, or a timer written after its
instant, is due when it was written). Any timer of the chain there means it is live. (3) *Repair*
(:mod:`.repairs`) what is still broken, and report it: a ``Chain Repaired`` event, the metrics
``ChainsBroken`` (found) and ``ChainsRepaired`` (written), a warning in the log.

A decision to repair rests only on strongly consistent reads, made after ``grace`` has passed
since anything of the chain happened.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from punctual.auditing import liveness as live
from punctual.auditing.repairs import Repair, Repairer, missed_events, repair_event
from punctual.delivery.notifications.events import EventPublisher
from punctual.execution.turns import STALE_TURN_S
from punctual.models import Execution, Job, JobState, Overlap
from punctual.models.executions import IN_FLIGHT
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink, NullMetrics
from punctual.store.base import JobStore, UnreadableJobError
from punctual.timing.slots import dispatch_instant, next_slot, schedule_of
from punctual.timing.timers import (
    Lane,
    Timer,
    TimerLayout,
    from_ms,
    minute_of,
    minutes_between,
    slot_instant,
    slot_key,
    to_ms,
)
from punctual.usecases.backfills import Backfill
from punctual.usecases.delay_chains import chains_from, find_newest_scheduled, scheduled_floor
from punctual.usecases.shared_slots import no_shared_slot

log = logging.getLogger("punctual.auditing")

NEAR_GAP_MS = 2_000  # near-lane dues closer than this are read in one range
# A slot released without a record yet is not lost while its timer is due less than the in-flight
# grace plus this ago (a rate budget's max lateness is an hour at most). Every such slot past a
# broken chain's newest record is looked for (QA29: eight at most were, so a backlog of more
# recorded the rest MISSED and dropped their runs), each bucket read once: so as many as that
# window holds, bounded here (a rate(1 second) job's window holds 5,400).
PENDING_S = 3600
PENDING_STEPS = 20_000
GAP_STEPS = 8  # future slots without a timer of their own looked past for a later one (a catch-up's next)


class NewestUnknown(Exception):
    """A job's newest scheduled record was not among the records read (all run-now slots)."""


def segments_for(minute: datetime, segments: int, period_minutes: int) -> list[int]:
    """The segments the run of ``minute`` audits: every ``period_minutes``-th one."""
    index = int(minute.timestamp() // 60) % period_minutes
    return [segment for segment in range(segments) if segment % period_minutes == index]


@dataclass(frozen=True)
class AuditConfig:
    """The auditor's settings (built from :class:`punctual.runtime.settings.Settings`)."""

    layout: TimerLayout
    period_minutes: int = 60
    grace_s: float = 300.0
    inflight_grace_s: float = 1800.0
    repair: bool = True
    page_size: int = 500


@dataclass
class AuditReport:
    """What one run did; ``repairs`` lists every broken chain found (applied or not)."""

    segments: list[int] = field(default_factory=list)
    jobs: int = 0  # ENABLED jobs read
    live: int = 0  # found live at the first look
    recent: int = 0  # changed within the grace: not judged
    skipped: int = 0  # no head found within the step bound (a jitter far above the period), or no
    # newest scheduled run of a delay job among the records read
    suspects: int = 0  # looked at again
    confirmed_live: int = 0  # live after all (a lane guessed wrong, a read behind, a chain in motion)
    changed: int = 0  # changed between the two looks: not judged
    deferred: int = 0  # its shards' pollers behind: judged on a later run
    unreadable: int = 0
    orphans: int = 0  # after() jobs whose parents were deleted: they can never fire
    released_again: int = 0  # delay runs released past the grace, still unclaimed: released again
    timer_reads: int = 0
    complete: bool = True  # every segment read before the run had to stop
    repairs: list[Repair] = field(default_factory=list)

    @property
    def broken(self) -> int:
        return len(self.repairs)

    @property
    def repaired(self) -> int:
        return sum(1 for r in self.repairs if r.applied)


@dataclass
class _Lookup:
    """A job whose head timer is looked for in the first step."""

    job: Job
    kind: live.ChainKind
    head: datetime
    timers: list[Timer]  # where the head's timer can be
    slots: frozenset[str] = frozenset()  # delay: the head slots that count


@dataclass
class _Suspect:
    job: Job
    why: str
    backfill: Backfill | None = None


class ChainAuditor:
    """Checks and repairs chains (see the module docstring).

    Parameters
    ----------
    store
        The job store (its audit index, timers, records).
    clock
        Every ``now``.
    config
        Layout, period, graces, whether to repair.
    repairer
        Writes the repairs.
    metrics, events
        ``ChainsAudited``, ``ChainsBroken``, ``ChainsRepaired``, ``ChainAuditDeferred``; the
        ``Chain Repaired`` events (None: not published).
    """

    def __init__(
        self,
        store: JobStore,
        clock: Clock,
        config: AuditConfig,
        repairer: Repairer,
        metrics: MetricsSink | None = None,
        events: EventPublisher | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.config = config
        self.layout = config.layout
        self.repairer = repairer
        self.metrics = metrics or NullMetrics()
        self.events = events or EventPublisher(None)
        self._watermarks: dict[Lane, dict[int, datetime]] | None = None
        self._links: dict[tuple[str, str], frozenset[str]] = {}

    # ------------------------------------------------------------------ runs

    def run(self, minute: datetime, stop: Callable[[], bool] | None = None) -> AuditReport:
        """The run of ``minute``: its share of the segments (:func:`segments_for`)."""
        segments = segments_for(minute, self.layout.shard_count, self.config.period_minutes)
        return self.audit(segments, stop)

    def audit(self, segments: Iterable[int], stop: Callable[[], bool] | None = None) -> AuditReport:
        """Audit ``segments`` (all of a segment's jobs), until done or ``stop()``."""
        report = AuditReport(segments=list(segments))
        self._watermarks = None
        self._links = {}
        for segment in report.segments:
            if stop is not None and stop():
                report.complete = False
                break
            self._segment(segment, report, stop)
        self._publish(report)
        return report

    def _segment(self, segment: int, report: AuditReport, stop: Callable[[], bool] | None) -> None:
        cursor: str | None = None
        while True:
            page = self.store.audit_page(segment, self.layout.shard_count, self.config.page_size, cursor)
            report.unreadable += len(page.unreadable)
            self._page(page.items, report)
            cursor = page.cursor
            if cursor is None:
                return
            if stop is not None and stop():
                report.complete = False
                return

    # ------------------------------------------------------------------ the first look

    def _page(self, items: list[Job | Backfill], report: AuditReport) -> None:
        now = self.clock.now()
        since = now - timedelta(seconds=self.config.grace_s)
        suspects: list[_Suspect] = []
        lookups: list[_Lookup] = []
        jobs = {(i.tenant, i.id): i for i in items if isinstance(i, Job)}
        for item in items:
            if isinstance(item, Backfill):
                if live.stalled(item, now, self.config.grace_s):
                    owner = jobs.get((item.tenant, item.job_id))
                    found = owner or self._job(item.tenant, item.job_id)
                    if found is not None:
                        suspects.append(_Suspect(found, "backfill steps stopped", item))
                continue
            if item.state is not JobState.ENABLED:
                continue
            report.jobs += 1
            if item.updated_at > since:
                report.recent += 1
                continue
            try:
                self._first_look(item, now, since, lookups, suspects, report)
            except (live.HeadTooFar, NewestUnknown):
                report.skipped += 1
        heads = self._read_heads(lookups, report)
        for lookup in lookups:
            timers = heads.get((lookup.job.tenant, lookup.job.id), [])
            if self._head_found(lookup, timers, since):
                report.live += 1
            else:
                suspects.append(_Suspect(lookup.job, f"no timer of slot {lookup.head:%Y-%m-%dT%H:%M:%SZ}"))
        for suspect in suspects:
            report.suspects += 1
            self._confirm(suspect, report)

    def _first_look(
        self,
        job: Job,
        now: datetime,
        since: datetime,
        lookups: list[_Lookup],
        suspects: list[_Suspect],
        report: AuditReport,
    ) -> None:
        kind = live.chain_kind(job)
        if job.overlap is not Overlap.ALLOW:
            follow = self._stuck_turn(job, now)
            if follow is not None:
                suspects.append(_Suspect(job, follow.reason))
                return
        if kind is live.ChainKind.AFTER:
            missing = self._missing_links(job)
            if missing:
                suspects.append(_Suspect(job, f"not linked from {', '.join(missing)}"))
            elif never := never_fires(self.store, job, now):
                report.orphans += 1  # nothing can dispatch it: said loudly, a user must act
                log.warning("after() job %s/%s can never fire: %s", job.tenant, job.id, never)
            else:
                report.live += 1
            return
        if kind is live.ChainKind.DELAY:
            newest = newest_known(self.store, job)
            if newest is not None and chains_from(job, newest) and newest.status in IN_FLIGHT:
                if live.stuck(job, newest, now, self.config.inflight_grace_s) is not None:
                    suspects.append(_Suspect(job, f"slot {newest.slot} stuck {newest.status.value}"))
                else:
                    report.live += 1
                return
            heads = live.delay_heads(job, newest)
            if not heads:
                report.live += 1  # past end_at: nothing is owed
                return
            timers = live.delay_placements(self.layout, job, heads)
            slots = frozenset(slot_key(h) for h, _ in heads)
            lookups.append(_Lookup(job, kind, heads[0][0], timers, slots))
            return
        head = live.head_after(job, since)
        if head is None:
            suspects.append(_Suspect(job, "still ENABLED with no slot left"))
            return
        timers = live.placements(self.layout, job, head, live.clock_writes(self.layout, job, head))
        lookups.append(_Lookup(job, kind, head, timers))

    def _head_found(self, lookup: _Lookup, timers: list[Timer], since: datetime) -> bool:
        job = lookup.job
        if lookup.kind is live.ChainKind.CLOCK:
            return live.holds_head(timers, job, lookup.head)
        # delay: the next run's timer, not yet released long ago (then its run would have a record)
        return holds_delay_head(timers, job, lookup.slots, to_ms(since))

    def _read_heads(self, lookups: list[_Lookup], report: AuditReport) -> dict[tuple[str, str], list[Timer]]:
        """Every bucket the page's heads are in, read once each over the dues looked for."""
        dues: dict[tuple[Lane, int, int], list[int]] = defaultdict(list)
        for lookup in lookups:
            for timer in lookup.timers:
                dues[(timer.lane, timer.due_ms // 60_000, timer.shard)].append(timer.due_ms)
        found: dict[tuple[str, str], list[Timer]] = defaultdict(list)
        for (lane, minute_no, shard), values in dues.items():
            minute = minute_of(from_ms(minute_no * 60_000))
            for low, high in _ranges(sorted(values), lane):
                report.timer_reads += 1
                for timer in self.store.query_timers(lane, minute, shard, low, high):
                    found[(timer.tenant, timer.job_id)].append(timer)
        return found

    # ------------------------------------------------------------------ confirm and repair

    def _confirm(self, suspect: _Suspect, report: AuditReport) -> None:
        stale = suspect.job
        job = self._job(stale.tenant, stale.id)
        now = self.clock.now()
        since = now - timedelta(seconds=self.config.grace_s)
        if (
            job is None
            or job.state is not JobState.ENABLED
            or job.version != stale.version
            or job.updated_at > since
        ):
            report.changed += 1
            return
        if suspect.backfill is not None:
            self._confirm_backfill(job, suspect.backfill, now, report)
            return
        if job.overlap is not Overlap.ALLOW:
            follow = self._stuck_turn(job, now)
            if follow is not None:
                self._repair(report, job, lambda: self.repairer.follow_up(job, follow, now), follow.reason)
                return
        kind = live.chain_kind(job)
        if kind is live.ChainKind.AFTER:
            missing = self._missing_links(job, fresh=True)
            if missing:
                why = f"not linked from {', '.join(missing)}"
                self._repair(report, job, lambda: self.repairer.links(job, missing, why), why)
            else:
                report.confirmed_live += 1
            return
        if self._behind(job, since):
            report.deferred += 1
            return
        if kind is live.ChainKind.DELAY:
            try:
                self._confirm_delay(job, now, since, suspect.why, report)
            except NewestUnknown:
                report.skipped += 1
            return
        try:
            head = live.head_after(job, since)
            restart = live.head_after(job, max(since, now - timedelta(seconds=live.REPAIR_SKEW_S)))
        except live.HeadTooFar:
            report.skipped += 1
            return
        timers = self._sweep(job, now, since, [head] if head is not None else [])
        if (head is not None and live.holds_head(timers, job, head)) or live.in_motion(timers, job, since):
            report.confirmed_live += 1
            return
        if head is not None:  # its timer in the wrong minute (a bad write, a fault): no slot lost
            at = head
            stray = live.misplaced(self._read(live.stray_buckets(self.layout, job, at, since)), job, at)
            if stray is not None:
                why = misplaced_reason(job, at, stray)
                self._repair(report, job, lambda: self.repairer.rearm(job, at, "misplaced", why, now), why)
                return
        floor = lost_floor(self.store, self.layout, job, restart, now, self.config.inflight_grace_s)
        if floor is None:  # every slot left was released, its message not run yet: no chain to mend
            report.confirmed_live += 1
            return
        why, told = suspect.why, lambda r: announce(self.events, self.clock.now(), job, r, flush=True)
        self._repair(report, job, lambda: self.repairer.clock(job, restart, floor, why, now, told), why)

    def _confirm_delay(self, job: Job, now: datetime, since: datetime, why: str, report: AuditReport) -> None:
        newest = newest_known(self.store, job)
        if newest is not None and chains_from(job, newest) and newest.status in IN_FLIGHT:
            follow = live.stuck(job, newest, now, self.config.inflight_grace_s)
            if follow is None:
                report.confirmed_live += 1
                return
            self._repair(report, job, lambda: self.repairer.follow_up(job, follow, now), follow.reason)
            return
        heads = live.delay_heads(job, newest)
        if not heads:
            report.confirmed_live += 1
            return
        timers = self._sweep(
            job, now, since, [h for h, _ in heads], live.delay_placements(self.layout, job, heads)
        )
        slots = frozenset(slot_key(h) for h, _ in heads)
        # Its timer released within the grace (QA29: within the in-flight grace plus PENDING_S kept a
        # job whose message was lost stopped ~90 minutes); one released before: release_again
        if holds_delay_head(timers, job, slots, to_ms(since)) or live.in_motion(timers, job, since):
            report.confirmed_live += 1
            return
        # Repairs off: reported found as any broken chain (review of QA30: counted released again,
        # nothing written, the chain stopped silently)
        if self.config.repair and any(live.is_chain_timer(t, job) and t.slot in slots for t in timers):
            release_again(self.repairer, report, job, heads[0][0], now)
            return
        head = heads[0][0]
        self._repair(report, job, lambda: self.repairer.rearm(job, head, "delay", why, now), why)

    def _confirm_backfill(self, job: Job, seen: Backfill, now: datetime, report: AuditReport) -> None:
        backfill = self.store.get_backfill(seen.tenant, seen.job_id, seen.id)
        if backfill is None or not live.stalled(backfill, now, self.config.grace_s):
            report.confirmed_live += 1
            return
        why = f"backfill {backfill.id} made no step since {backfill.updated_at:%Y-%m-%dT%H:%M:%SZ}"
        self._repair(report, job, lambda: self.repairer.backfill(job, backfill, why, now), why)

    def _repair(self, report: AuditReport, job: Job, apply: Callable[[], Repair], why: str) -> None:
        if not self.config.repair:
            report.repairs.append(
                Repair("found", job.tenant, job.id, why, applied=False, version=job.version)
            )
            log.warning("broken chain of %s/%s (not repaired: repairs are off): %s", job.tenant, job.id, why)
            return
        repair = apply()
        report.repairs.append(repair)
        log.warning(
            "chain of %s/%s repaired (%s): %s; next %s, missed %d%s",
            job.tenant,
            job.id,
            repair.kind,
            why,
            repair.next_slot,
            repair.missed_count,
            "" if repair.applied else " (another writer got there first: nothing written)",
        )
        if repair.applied and not repair.announced:
            announce(self.events, self.clock.now(), job, repair, flush=False)

    # ------------------------------------------------------------------ reads

    def _job(self, tenant: str, job_id: str) -> Job | None:
        try:
            return self.store.get_job(tenant, job_id, consistent=True)
        except UnreadableJobError:
            return None

    def _stuck_turn(self, job: Job, now: datetime) -> live.FollowUp | None:
        turn = self.store.get_turn(job.tenant, job.id)
        if turn is None:
            return None
        wanted = [slot for slot in (turn.holder, turn.waiting[0] if turn.waiting else None) if slot]
        records = (
            self.store.batch_get_executions((job.tenant, job.id, slot) for slot in wanted) if wanted else {}
        )
        holder = records.get((job.tenant, job.id, turn.holder)) if turn.holder else None
        waiting = records.get((job.tenant, job.id, turn.waiting[0])) if turn.waiting else None
        return live.stuck_turn(job, turn, holder, waiting, now, self.config.inflight_grace_s, STALE_TURN_S)

    def _missing_links(self, job: Job, fresh: bool = False) -> list[str]:
        """The parents of an ``after(...)`` job that exist and do not list it as a dependant."""
        missing: list[str] = []
        for parent in schedule_of(job).parents:
            key = (job.tenant, parent)
            if fresh or key not in self._links:
                self._links[key] = frozenset(self.store.list_dependents(job.tenant, parent))
            if job.id in self._links[key]:
                continue
            if self.store.get_job(job.tenant, parent) is not None:  # a parent deleted is no link to mend
                missing.append(parent)
        return missing

    def _behind(self, job: Job, since: datetime) -> bool:
        """Whether the pollers of the job's shards have not drained the minute of ``since``."""
        if self._watermarks is None:
            far = range(self.layout.shard_count)
            near = range(self.layout.near_shard_count)
            self._watermarks = {
                Lane.FAR: self.store.get_watermarks(Lane.FAR, list(far)),
                Lane.NEAR: self.store.get_watermarks(Lane.NEAR, list(near)),
            }
        needed = minute_of(since)
        for lane in (Lane.FAR, Lane.NEAR):
            mark = self._watermarks[lane].get(self.layout.shard_for(lane, job.tenant, job.id))
            if mark is None or mark <= needed:
                return True
        return False

    def _sweep(
        self,
        job: Job,
        now: datetime,
        since: datetime,
        heads: list[datetime],
        extra: list[Timer] | None = None,
    ) -> list[Timer]:
        """Strongly consistent reads of every bucket the chain can be in: the heads' (and the
        slot after each) in both lanes, and the job's near buckets from ``since`` to the lane
        threshold ahead of now."""
        buckets: set[tuple[Lane, datetime, int]] = set()
        threshold = timedelta(seconds=self.layout.far_threshold_s)
        for head in heads:
            following = next_slot(job, head)
            for slot in [head] if following is None else [head, following]:
                due = dispatch_instant(job, slot)
                for lane in (Lane.FAR, Lane.NEAR):
                    buckets.add((lane, minute_of(due), self.layout.shard_for(lane, job.tenant, job.id)))
        for timer in extra or []:
            buckets.add((timer.lane, minute_of(timer.due), timer.shard))
        near = self.layout.shard_for(Lane.NEAR, job.tenant, job.id)
        for minute in minutes_between(minute_of(since), minute_of(now + threshold)):
            buckets.add((Lane.NEAR, minute, near))
        return [t for t in self._read(buckets) if t.job_id == job.id]

    def _read(self, buckets: Iterable[tuple[Lane, datetime, int]]) -> list[Timer]:
        return [
            t for lane, minute, shard in sorted(buckets) for t in self.store.query_timers(lane, minute, shard)
        ]

    # ------------------------------------------------------------------ report

    def _publish(self, report: AuditReport) -> None:
        if report.jobs:
            self.metrics.add("ChainsAudited", report.jobs)
        if report.deferred:
            self.metrics.add("ChainAuditDeferred", report.deferred)
        if report.broken:
            self.metrics.add("ChainsBroken", report.broken)
        if report.orphans:
            self.metrics.add("JobsOrphaned", report.orphans)
        if report.released_again:
            self.metrics.add("DelayRunsReleasedAgain", report.released_again)
        if report.repaired:
            self.metrics.add("ChainsRepaired", report.repaired)
            self.metrics.add("SlotsMissed", sum(r.missed_count for r in report.repairs if r.applied))
        self.events.flush()


def lost_floor(
    store: JobStore, layout: TimerLayout, job: Job, restart: datetime | None, now: datetime, grace_s: float
) -> datetime | None:
    """The instant after which a broken clock chain's lost slots begin: its newest scheduled
    record's slot (or its last change), and past it each slot released since whose message may
    still run (its timer there, due less than ``grace_s`` plus :data:`PENDING_S` ago: held by a
    rate budget, behind a backlog, in an outage's backoff; QA27: recorded MISSED, its run was then
    dropped). A slot without a timer of its own followed by one with its timer was released too: a
    late release catches up every slot due by then, however many, and writes the timer of the next
    one only (every past slot is looked past, and :data:`GAP_STEPS` slots after now for that
    next one; review of QA29: a catch-up of nine slots stopped the walk at eight). None when that
    leaves no slot: the job's last one was released so (or by its resume's catch-up), and its
    message completes the job."""
    floor = job.updated_at
    seen = scheduled_floor(store, job)
    if seen is not None:
        floor = max(floor, seen)
    after_ms = to_ms(now - timedelta(seconds=grace_s + PENDING_S))
    read: dict[tuple[Lane, datetime, int], list[Timer]] = {}

    def bucket(lane: Lane, minute: datetime, shard: int) -> list[Timer]:
        if (lane, minute, shard) not in read:
            read[(lane, minute, shard)] = [
                t for t in store.query_timers(lane, minute, shard) if t.job_id == job.id
            ]
        return read[(lane, minute, shard)]

    released = resumed_pending(bucket, layout, job, after_ms)
    slot, gap = next_slot(job, floor), 0
    for _ in range(PENDING_STEPS):
        if slot is None or (restart is not None and slot >= restart) or (gap >= GAP_STEPS and slot > now):
            break
        writes = live.clock_writes(layout, job, slot)
        buckets = {(t.lane, minute_of(t.due), t.shard) for t in live.placements(layout, job, slot, writes)}
        key = slot_key(slot)
        if any(
            live.is_chain_timer(t, job) and t.slot == key and t.due_ms > after_ms
            for w in buckets
            for t in bucket(*w)
        ):
            floor, released, gap = slot, True, 0
        else:
            gap += 1
        slot = next_slot(job, slot)
    if released and restart is None and next_slot(job, floor) is None:
        return None
    return floor


def resumed_pending(
    bucket: Callable[[Lane, datetime, int], list[Timer]], layout: TimerLayout, job: Job, after_ms: int
) -> bool:
    """Whether the job's last change (a resume) released slots it owed, due before it, less than the
    pending window ago: its RESUME timer, due at the change, is there. Their messages may still run,
    and the last one completes the job (QA29: a job resumed past its end_at, the workers behind, was
    "repaired" COMPLETED as a chain broken)."""
    at = job.updated_at
    if job.paused_at is None or to_ms(at) <= after_ms:
        return False  # never paused (no slot owed by a resume), or changed before the window
    shard = layout.shard_for(Lane.NEAR, job.tenant, job.id)
    return any(
        live.is_chain_timer(t, job) and slot_instant(t.slot) < at
        for minute in {minute_of(at), minute_of(at + timedelta(seconds=live.LANE_MARGIN_S))}
        for t in bucket(Lane.NEAR, minute, shard)
    )


def announce(events: EventPublisher, now: datetime, job: Job, repair: Repair, flush: bool) -> None:
    """``repair``'s events: its Chain Repaired, and a Slot Missed for each record it wrote MISSED
    (QA23: a repair's range had none); ``flush``: sent now (a repair announced before its chain
    goes on, QA30), else with the run's other events."""
    events.add(repair_event(job, repair, now))
    for event in missed_events(repair, now):
        events.add(event)
    if flush:
        events.flush()


def release_again(repairer: Repairer, report: AuditReport, job: Job, head: datetime, now: datetime) -> None:
    """A delay chain's run whose timer is there, released past the grace (its pollers are not
    behind), with no record yet: it waits in its queue (a worker outage) or its message was lost
    (dead-lettered: that queue's alarm says so). Not a broken chain (QA30: a long outage was reported
    "repaired", a false alarm): its timer is written again all the same, the claim keeping the slot
    to one run, and it is counted apart from repairs (only once written: with repairs off the run is
    reported found, as a broken chain)."""
    repairer.rearm(job, head, "delay", "released again", now)
    report.released_again += 1
    log.info("delay run %s of %s/%s released again: no record yet", slot_key(head), job.tenant, job.id)


def holds_delay_head(timers: list[Timer], job: Job, slots: frozenset[str], after_ms: int) -> bool:
    """Whether ``timers`` hold a delay chain's next run (one of ``slots``), due after ``after_ms``."""
    return any(live.is_chain_timer(t, job) and t.slot in slots and t.due_ms > after_ms for t in timers)


def newest_known(store: JobStore, job: Job) -> Execution | None:
    """The job's newest record of a scheduled slot (run-now slots left out); raises
    :class:`NewestUnknown` when the records read were all run-now slots (a delay chain is not
    judged then: QA27, judged from its registration, a live chain was "repaired" by arming a
    slot run long ago again, a second chain once that slot's record had expired)."""
    newest, unread = find_newest_scheduled(store, job)
    if newest is None and unread is not None:
        raise NewestUnknown(job.id)
    return newest


def misplaced_reason(job: Job, head: datetime, stray: Timer) -> str:
    """Why a chain whose head timer is in the wrong minute was repaired, and why the stray is left:
    released before its slot's instant, a worker holds its message until then (``held_early``);
    after, the slot's record makes its claim a repeat, dropped. Either way the slot starts once."""
    due = dispatch_instant(job, head)
    early = "released early, a worker holds its message until the slot's instant"
    when = early if stray.due < due else "released after the slot ran, its claim is a repeat, dropped"
    return (
        f"timer of slot {slot_key(head)} in the wrong minute: due {stray.due:%Y-%m-%dT%H:%M:%SZ}, not"
        f" {due:%Y-%m-%dT%H:%M:%SZ}; the right one written, the stray left (harmless: {when})"
    )


def never_fires(store: JobStore, job: Job, now: datetime) -> str | None:
    """Why an ``after(...)`` job can never fire, or None: a parent is gone (a delete refuses a
    parent its children name; one deleted before that rule, or in a race with a child's write,
    leaves it with nothing to dispatch it), or its parents share no slot (a write refuses that;
    jobs written before the rule may)."""
    gone, found = [], []
    for parent in schedule_of(job).parents:
        try:
            # Half a read unit each; a parent the read (up to a second behind) says is gone is read
            # again strongly consistently before it is reported (one written a moment ago).
            read = store.get_job(job.tenant, parent, consistent=False) or store.get_job(job.tenant, parent)
        except UnreadableJobError:
            continue  # it exists
        if read is None:
            gone.append(parent)
        else:
            found.append(read)
    if gone:
        return f"parent(s) {', '.join(gone)} gone"
    if _never_shared(found, now) is None:
        return None
    # Said only as the parents are now (a read up to a second behind may miss a schedule's change).
    fresh = [p for p in (store.get_job(job.tenant, parent.id) for parent in found) if p is not None]
    return _never_shared(fresh, now) if len(fresh) == len(found) else None


def _never_shared(parents: list[Job], now: datetime) -> str | None:
    """Why ``parents`` share no slot; judged while every one is ENABLED only (a paused or completed
    parent says why by itself)."""
    if len(parents) < 2 or any(parent.state is not JobState.ENABLED for parent in parents):
        return None
    return no_shared_slot(parents, now)


def _ranges(dues: list[int], lane: Lane) -> list[tuple[int, int]]:
    """Sorted dues as read ranges: a far bucket is one segment's, read once from the first due
    to the last; near dues (every segment's timers share a near bucket) in clusters."""
    if lane is Lane.FAR:
        return [(dues[0], dues[-1])]
    out: list[tuple[int, int]] = []
    low = high = dues[0]
    for due in dues[1:]:
        if due - high > NEAR_GAP_MS:
            out.append((low, high))
            low = due
        high = due
    out.append((low, high))
    return out
