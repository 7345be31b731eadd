"""Releasing due timers: send each slot to its FIFO queue, then write the job's next timer.

**Send first, next timer second.** A crash between the two re-sends the same dedup id and
re-writes the same next timer row, so nothing is lost or doubled.

A release is *uncertain* when an earlier poller may already have made it (a restarted
poller's first seconds, a dead poller's minute drained by another): then the slots'
execution records are read first, and a slot a worker has already started is not sent
again (the next timer is still written: it may be what the crash lost), unless it is running
and the table is multi-Region: the run may be in another Region, which may be lost with the
message that would take it over, so this Region sends its copy as it sends every slot. Fire delay is
counted once per slot, when it is sent for the first time as far as the poller can tell.

A slot that is not run gets an execution record that says why (status MISSED): dropped by
the catch-up policy or its window, after an outage or while its job was paused. Those records
are conditional puts, so a slot is counted missed once however often it is read; a long run of
them is one range record (:mod:`punctual.dispatch.polling.unrun`). A pause ends the job's chain and the
resume starts it again from the slots the pause owes (:mod:`punctual.dispatch.polling.chains`).

**Burst smoothing.** A first attempt whose target has a rate budget is placed in the budget
(:mod:`punctual.dispatch.smoothing`), on an instant reserved in the table so that every poller of the
deployment shares the budget (:mod:`punctual.dispatch.budget_reservations`): its message carries
``not_before``, the instant the budget gives it,
never later than the slot's instant plus the job's ``max_lateness_seconds``; the worker holds it
until then. A slot the budget cannot take within that bound is sent on time and reported
(``RateBudgetOverruns``, the overrun sink, and a ``Rate Budget Overrun`` event). The message is
sent at once either way, so a crash after the send loses nothing.

A slot on a day of a calendar its job excludes (:mod:`punctual.usecases.calendars`) is not sent: it
gets a record EXCLUDED naming the calendar and the version it was decided on, and the chain
goes on to the next slot. The calendars are read here, at release (one batched, eventually
consistent read per chunk, only for jobs that exclude any; read again strongly consistently
before a slot is excluded, or when a calendar a job names is missing), so a calendar change
applies from the next released slot on without touching the jobs that use it. A calendar that
is gone (a job write checks that each exists and a delete refuses one in use: a fault) runs
nothing: the job's slots are recorded MISSED, ``calendar missing``, with the missed event and
alert.

**Nothing is dropped on a read that may be behind.** Jobs and calendars are read eventually
consistently (half the cost); a timer that read would drop (job missing, paused, at another
version) or a slot it would exclude is decided only after a strongly consistent read.

ALERT timers are alerts' sweeps (:mod:`punctual.delivery.notifications.sweep`): each is handed to a worker.

BACKFILL timers are the steps of backfills (:mod:`punctual.usecases.backfill_runner`): each is handed to
the backfill runner, which sends the backfill's next slots and arms its next step.
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from punctual.delivery.notifications import Notifier
from punctual.delivery.notifications.sweep import sweep_message, undelivered
from punctual.dispatch.budget_reservations import BudgetRequest, SharedBudgetLedger
from punctual.dispatch.load_forecast import MinuteTally, chain_forecast, on_ecs_lane
from punctual.dispatch.polling.chains import Verdict, replaced_plan, verdict
from punctual.dispatch.polling.config import PollerConfig
from punctual.dispatch.polling.fairness import interleave_tenants
from punctual.dispatch.polling.job_reads import read_jobs
from punctual.dispatch.polling.pauses import OWED_BY_PAUSE, PARK_GAVE_UP, Pauses, owing_by_resume
from punctual.dispatch.polling.redrain import keep_maybe_sent, paused_copy
from punctual.dispatch.polling.resend import ResendWatch
from punctual.dispatch.polling.retry_pace import DueRetry, PacedRetries, RetryPacer
from punctual.dispatch.polling.unrun import (
    CalendarExclusions,
    UnrunSlots,
    ended_for_gone,
    range_record,
    unrun_record,
)
from punctual.dispatch.queues import (
    SQS_BATCH_MAX,
    DispatchMessage,
    MessageKind,
    QueuePort,
    QueueRouting,
    message_for,
    spec_of,
)
from punctual.dispatch.smoothing import HEAD_START_S, LoggedOverruns, Overrun, OverrunSink, target_key
from punctual.dispatch.sqs_send import maybe_sent
from punctual.execution.completion import complete_unsent
from punctual.execution.relinks import relink_message
from punctual.models import Execution, ExecutionStatus, Job, JobState
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink, add_all
from punctual.security.tenant_quotas import BackfillQuota
from punctual.store.base import ExecutionKey, Expect, JobStore
from punctual.store.loads import MinuteLoad
from punctual.timing.instants import format_instant_ms
from punctual.timing.slots import (
    CheckedSend,
    ReleasePlan,
    dispatch_instant,
    fire_timer,
    owed_since,
    plan_release,
)
from punctual.timing.timers import (
    CHAIN_KINDS,
    MANUAL_MARK,
    Lane,
    Timer,
    TimerKind,
    from_ms,
    slot_instant,
    slot_key,
)
from punctual.usecases.backfill_runner import BackfillRunner

log = logging.getLogger("punctual.dispatch.polling")

CHUNK = 100  # BatchGetItem's limit: timers are released in chunks of this many, concurrently
# The first chunk of a release goes alone, before the others start (it holds every tenant's first
# slots): smaller, so that its job read and its sends are done sooner. Half a chunk halves the
# time to a burst's first message (in local mode 0.27 s to read 100 jobs at a burst's instant)
# and still holds the first 25 slots of two tenants, the first of each of 50.
HEAD_CHUNK = 50
# Read once: an enum's member read through its class costs several times a global's (the enum
# metaclass's __getattr__ hook), and these are read per slot released.
_PARK, _RELEASE, _ENABLED = Verdict.PARK, Verdict.RELEASE, JobState.ENABLED
_NEAR, _RESUME = Lane.NEAR, TimerKind.RESUME
_SUPERSEDED, _RUNNING = ExecutionStatus.SUPERSEDED, ExecutionStatus.RUNNING
# Follow-up timers whose slot names no record: an alert's sweep, a parent's relink check
_NO_RECORD_KINDS = frozenset({TimerKind.ALERT, TimerKind.RELINK})


def release_chunks(timers: Sequence[Timer]) -> list[Sequence[Timer]]:
    """``timers`` (interleaved across tenants) in the chunks a release works: a head of
    ``HEAD_CHUNK``, then chunks of ``CHUNK``."""
    head, rest = timers[:HEAD_CHUNK], timers[HEAD_CHUNK:]
    return [head, *(rest[i : i + CHUNK] for i in range(0, len(rest), CHUNK))] if head else []


class ReleaseFailed(Exception):
    """A release that failed once it had sent some of its slots: ``sent``, the timers whose slots
    it may have sent. Its caller takes them again as maybe sent by then (:mod:`.redrain`), not
    judged late again: their messages wait in the queues (QA33: a retry 62 s on recorded MISSED
    176 slots sent on time, whose next timers' write had failed after the sends)."""

    def __init__(self, sent: Sequence[Timer]) -> None:
        super().__init__(f"a release failed after it sent the slots of {len(sent)} timer(s)")
        self.sent = list(sent)


@dataclass
class ReleaseReport:
    released: int = 0  # messages sent
    stale: int = 0  # timers of a job gone, changed or paused, and follow-ups no longer wanted
    superseded: int = 0  # timers and slots an earlier release already handled (not sent again)
    skipped: int = 0  # slots newly recorded MISSED
    excluded: int = 0  # slots newly recorded EXCLUDED (a calendar the job excludes)
    completed: int = 0  # one-time jobs and jobs past their end, marked COMPLETED
    fire_delays_ms: list[float] = field(default_factory=list)  # one per slot sent for the first time

    def merge(self, other: ReleaseReport) -> None:
        self.released += other.released
        self.stale += other.stale
        self.superseded += other.superseded
        self.skipped += other.skipped
        self.excluded += other.excluded
        self.completed += other.completed
        self.fire_delays_ms.extend(other.fire_delays_ms)


@dataclass
class _Outgoing:
    """What one chunk sends and writes, gathered before anything is sent."""

    messages: dict[str, list[DispatchMessage]] = field(default_factory=lambda: defaultdict(list))
    delays_ms: list[float] = field(default_factory=list)
    next_timers: list[Timer] = field(default_factory=list)
    completions: list[Job] = field(default_factory=list)
    forecast: MinuteTally = field(default_factory=MinuteTally)  # near chains' slots, ahead
    missed: list[Execution] = field(default_factory=list)
    excluded: list[Execution] = field(default_factory=list)
    budgeted: list[tuple[str, int, Job, BudgetRequest]] = field(default_factory=list)  # (queue, index)


def started_slots(
    store: JobStore, plans: list[tuple[Job, ReleasePlan]], every_region_releases: bool
) -> dict[ExecutionKey, bool]:
    """Of the slots ``plans`` would send, those a worker already started (or ran), each with
    whether it is sent all the same: on a multi-Region table (``every_region_releases``), a running
    one. Its run may be in another Region, whose queue holds the only message that takes it over
    if that Region is lost (QA27); this Region's copy waits out the lease as every Region's copy
    does, and the claim keeps one run. (Not counted in the fire delay: it was sent before.)"""
    keys = {(job.tenant, job.id, slot_key(slot)) for job, plan in plans for slot in plan.release}
    if not keys:
        return {}
    records = store.batch_get_executions(keys)
    # A MISSED record is final (the claim drops the slot); only a superseded one may run.
    return {
        key: every_region_releases and record.status is _RUNNING
        for key, record in records.items()
        if record.status is not _SUPERSEDED
    }


class SlotReleaser:
    """Turns due timers into messages, next timers, MISSED records and completions.

    Parameters
    ----------
    store, queues
        The storage and FIFO queue ports.
    clock
        Every clock read goes through it.
    config
        Queues, layout and retention.
    metrics
        Where SlotsReleased, FireDelayMs, SlotsMissed and StaleTimersIgnored go.
    pool
        Runs chunks of a large release concurrently.
    notifier
        Publishes the events of the slots recorded MISSED (default: none). Their ``missed`` alerts
        go to a worker as ``alert`` messages.
    """

    def __init__(
        self,
        store: JobStore,
        queues: QueuePort,
        clock: Clock,
        config: PollerConfig,
        metrics: MetricsSink,
        pool: ThreadPoolExecutor,
        notifier: Notifier | None = None,
        overruns: OverrunSink | None = None,
    ) -> None:
        self.notifier = notifier or Notifier()
        self.store = store
        self.queues = queues
        self.clock = clock
        self.config = config
        self.metrics = metrics
        self.pool = pool
        self.routing = config.routing
        self.ledger = SharedBudgetLedger(store, config.rate_budgets, metrics=metrics)
        self.overruns: OverrunSink = overruns or LoggedOverruns()
        # A tenant's retries, at most its retry rate a second (punctual.dispatch.polling.retry_pace).
        retry_rate = config.max_retries_per_second_per_tenant
        self.retries = RetryPacer(self.ledger, retry_rate, config.layout, metrics)
        quota = BackfillQuota(
            store, config.max_backfills_per_tenant, config.backfill_slots_per_minute_per_tenant
        )
        self.backfills = BackfillRunner(store, queues, clock, config.layout, config.routing, quota=quota)
        self.pauses = Pauses(store)
        self.exclusions = CalendarExclusions(store, metrics)
        self.unrun = UnrunSlots(
            store, queues, clock, config.retention_days, metrics, self.notifier, self.queue_for
        )
        # What it sends to the Lambda lane, re-sent if no worker claims it (polling.resend).
        self.watch = ResendWatch(store, queues, config.short_queue_urls, metrics, config.resend_after_s)

    def queue_for(self, job: Job) -> str:
        return self.routing.queue_for(job)

    def release(
        self, timers: Sequence[Timer], uncertain: bool = False, sent_by_ms: int | None = None
    ) -> ReleaseReport:
        """Release due timers now. ``uncertain``: they may have been released before, by a poller
        that may have been releasing until ``sent_by_ms`` (:mod:`.redrain`; None: by none).

        Raises if a send or a write fails after retries; the caller keeps the timers and
        tries again (a repeat is harmless: same dedup ids, same timer rows).
        """
        report = ReleaseReport()
        if not timers:
            return report
        timers = interleave_tenants(timers)  # one tenant's burst cannot push another's slots back
        chunks = release_chunks(timers)
        log.debug("releasing %d timers in %d chunk(s)", len(timers), len(chunks))
        # The first chunk alone, before the others start: it holds every tenant's first slots,
        # which so enter the queues ahead of the rest of a burst (run side by side, a later chunk
        # could be sent first). Beside other chunks, its messages go out in their order too.
        sent_by = sent_by_ms if uncertain else None
        report.merge(
            self._release_chunk(chunks[0], uncertain, 0, in_order=len(chunks) > 1, sent_by_ms=sent_by)
        )
        futures = [
            self.pool.submit(self._release_chunk, chunk, uncertain, index, sent_by_ms=sent_by)
            for index, chunk in enumerate(chunks[1:], start=1)
        ]
        sent, failure = list(chunks[0]), None  # (every chunk is waited for: what each sent is known)
        for chunk, future in zip(chunks[1:], futures, strict=True):
            try:
                report.merge(future.result())
                sent.extend(chunk)
            except Exception as exc:
                sent.extend(exc.sent if isinstance(exc, ReleaseFailed) else ())
                failure = failure or exc
        if failure is not None:
            raise ReleaseFailed(sent) from failure
        self.notifier.flush()  # the rate budget overruns' events
        self._record(report)
        return report

    def _release_chunk(
        self,
        timers: Sequence[Timer],
        uncertain: bool,
        index: int = 0,
        in_order: bool = False,
        sent_by_ms: int | None = None,
    ) -> ReleaseReport:
        now = self.clock.now()
        self.ledger.fresh_reads()  # a budget's first slot in this chunk reads its reservations again
        report = ReleaseReport()
        out = _Outgoing()
        jobs = self.read_jobs(timers)
        log.debug("chunk %d: %d jobs read in %.0f ms", index, len(jobs), self._ms_since(now))
        fire = [t for t in timers if t.kind in CHAIN_KINDS]
        plans: list[tuple[Job, ReleasePlan]] = []
        maybe_sent: list[ExecutionKey] = []  # slots an earlier release may have sent (.redrain)
        for timer in fire:
            job = jobs.get((timer.tenant, timer.job_id))
            found = verdict(timer, job)
            if found is _PARK and job is not None:
                copy = paused_copy(job, timer, sent_by_ms) if sent_by_ms is not None else None
                if copy is not None:  # maybe sent before the pause: a copy, what follows owed (.redrain)
                    plans.append(copy[:2])
                    maybe_sent.append((job.tenant, job.id, timer.slot))
                parked = timer if copy is None else copy[2]
                job, found = (job, Verdict.STALE) if parked is None else self.pauses.park(job, parked)
                if job is not None and parked is not None:
                    jobs[(job.tenant, job.id)] = job
                    if found is _PARK:  # not parked: recorded, not dropped
                        out.missed.append(unrun_record(job, slot_instant(parked.slot), PARK_GAVE_UP, now))
            if found is _RELEASE and job is not None:
                plans.append((job, _plan(job, timer, now)))
            elif found is Verdict.ORPHAN and job is not None:
                # Released as the chain it is (its version): the job's current chain stays apart.
                chain = job.model_copy(update={"version": timer.job_version})
                plans.append((chain, self.pauses.orphan_plan(chain, timer, now)))
            elif found is Verdict.REPLACED and job is not None:
                plans.append((job, replaced_plan(job, timer, now)))
            else:
                report.stale += 1
                continue
            if sent_by_ms is not None and plans[-1][1].missed:
                maybe_sent.extend(keep_maybe_sent(*plans[-1], timer, sent_by_ms))
        excluded, missed = self.exclusions.exclude(plans, now)
        out.excluded.extend(excluded)
        out.missed.extend(missed)
        started = started_slots(self.store, plans, self.config.every_region_releases) if uncertain else {}
        for key in maybe_sent:  # no worker started it: a copy of the message it may have, as it is
            started.setdefault(key, True)
        for job, plan in plans:
            self._plan_outgoing(job, plan, started, now, out, report)
        self._smooth(out)
        if len(fire) < len(timers):  # retries, leases, children, queued checks, sweeps, backfills
            followups = [t for t in timers if t.kind not in CHAIN_KINDS and t.kind is not TimerKind.BACKFILL]
            self._followups(followups, jobs, now, out, report)
            for timer in timers:
                if timer.kind is TimerKind.BACKFILL:
                    report.released += self.backfills.step(timer, jobs.get((timer.tenant, timer.job_id)))

        went: set[tuple[str, str]] = set()  # (tenant, job) of every message a request took
        try:  # (a failure once something was sent says what may have gone: ReleaseFailed)
            # Send first, next timers second: see the module docstring.
            for queue, messages in out.messages.items():
                if messages:
                    self._send(queue, messages, in_order, went)
                    self.watch.sent(queue, messages, now)
                    report.released += len(messages)
            log.debug(
                "chunk %d: %d messages sent %.0f ms after it began",
                index,
                report.released,
                self._ms_since(now),
            )
            report.fire_delays_ms.extend(out.delays_ms)
            if out.next_timers:
                self.store.put_timers(out.next_timers)
            if out.forecast:
                self._forecast(out.forecast.loads())
            report.skipped += self.unrun.record_missed(out.missed, jobs)
            report.excluded += self.unrun.record_excluded(out.excluded, jobs)
            for job in out.completions:  # last slots no message carries (recorded MISSED or EXCLUDED)
                report.completed += complete_unsent(self.store, job, self.clock, self.metrics)
        except Exception as exc:
            if went:
                raise ReleaseFailed([t for t in timers if (t.tenant, t.job_id) in went]) from exc
            raise
        return report

    def _send(
        self, queue: str, messages: list[DispatchMessage], in_order: bool, went: set[tuple[str, str]]
    ) -> None:
        """Send ``messages`` to ``queue``; ``in_order``: one request of ten after another, so that
        they enter the FIFO queue in their order (the port sends a larger list's requests side by
        side, in any order). A burst's first chunk goes so: the slots of every tenant at the
        head of the interleaved release are the first messages the workers receive, not a
        random tenth of the chunk's (measured in local mode: the small tenant's last slot of 20
        arrived after 90 of the burst's, in the third round of the workers' batches). It costs
        the chunk its requests' latency ten times over (tens of milliseconds in AWS), once per
        burst. ``went``: the (tenant, job) of each message a send took, added as each returns, and
        of those a failed send says it may have taken (:func:`.sqs_send.maybe_sent`: they wait in
        the queue, and must not be judged late again by the retry); any other failure took none."""
        step = SQS_BATCH_MAX if in_order else len(messages)
        for start in range(0, len(messages), step):
            try:
                self.queues.send(queue, sent := messages[start : start + step])
            except Exception as exc:
                went.update((m.tenant, m.job_id) for m in maybe_sent(exc))
                raise
            went.update((m.tenant, m.job_id) for m in sent)

    def _ms_since(self, began: datetime) -> float:
        return (self.clock.now() - began).total_seconds() * 1000

    def read_jobs(self, timers: Sequence[Timer]) -> dict[tuple[str, str], Job]:
        """The timers' jobs (:func:`.job_reads.read_jobs`: nothing dropped on a read that may be behind)."""
        return read_jobs(self.store, timers)

    def _plan_outgoing(
        self,
        job: Job,
        plan: ReleasePlan,
        started: dict[ExecutionKey, bool],
        now: datetime,
        out: _Outgoing,
        report: ReleaseReport,
    ) -> None:
        queue = self.queue_for(job)
        spec = spec_of(job)  # once per job, whatever number of its slots go
        ends = plan.chain and plan.next_slot is None  # no next timer: the job completes
        handed_over = False
        # _budget_request's first check, made once per job: no budget can apply (the usual case)
        budgeted = getattr(job.target, "rate_budget_per_second", None) is not None or self.ledger.budgets
        for slot in plan.release:
            key = slot_key(slot)
            copy = started.get((job.tenant, job.id, key)) if started else None  # None unless uncertain
            if copy is False:
                report.superseded += 1
                continue
            scheduled = dispatch_instant(job, slot)
            last = ends and slot == plan.release[-1]
            message = message_for(job, key, scheduled, 1, MessageKind.FIRE, now, spec=spec, last=last)
            if copy:  # a run in flight: a copy to take it over, sent as it is
                out.messages[queue].append(message)
                handed_over = handed_over or last
                continue
            request = self._budget_request(job, message.slot, scheduled) if budgeted else None
            if request is not None:  # placed with the chunk's other budgeted slots (_smooth)
                out.budgeted.append((queue, len(out.messages[queue]), job, request))
            out.messages[queue].append(message)
            out.delays_ms.append((now - scheduled).total_seconds() * 1000)
            handed_over = handed_over or last
        if plan.missed:  # (usually none: no generator made for nothing)
            out.missed.extend(unrun_record(job, slot, reason, now) for slot, reason in plan.missed)
        if plan.ranges:
            out.missed.extend(range_record(job, missed, now) for missed in plan.ranges)
        if plan.next_slot is not None:
            timer = fire_timer(self.config.layout, job, plan.next_slot, now, chained=True)
            if plan.timer_version is not None:
                timer = replace(timer, job_version=plan.timer_version)
            out.next_timers.append(timer)
            if timer.lane is _NEAR and plan.release:
                # A near chain: this release forecasts a slot a horizon on (punctual.dispatch.load_forecast).
                ahead = chain_forecast(plan.release[-1], plan.next_slot, self.config.forecast_horizon_s)
                out.forecast.add_slot(dispatch_instant(job, ahead), self.config.burst_head_s)
            if on_ecs_lane(job):  # ECS tasks are started ahead of it (punctual.dispatch.ecs_lane)
                out.forecast.add_ecs_slot(timer.due)
        elif ends and not handed_over:
            # No message ends the chain (its last slot was missed, excluded or already started):
            # the poller marks the job itself, on this rare path only (punctual.execution.chain_ends).
            out.completions.append(job)

    def _forecast(self, loads: dict[datetime, MinuteLoad]) -> None:
        """Add a chunk's forecast to the minute-load ledger: one write per minute, best effort (a
        failure costs the forecast, never the release)."""
        try:
            self.store.add_minute_loads(loads, shard=random.randrange(1 << 16))
        except Exception:
            log.warning("could not add a release's forecast to the load ledger", exc_info=True)

    def _budget_request(self, job: Job, slot: str, scheduled: datetime) -> BudgetRequest | None:
        """The placement a slot's target's rate budget asks for (None: no budget applies)."""
        own = getattr(job.target, "rate_budget_per_second", None)
        if own is None and not self.ledger.budgets:
            return None  # no budget can apply (the usual case): no target key to work out
        key = target_key(job.target)
        rate = self.ledger.rate_for(job.tenant, key, own)
        if rate is None:
            return None
        lateness = job.max_lateness_seconds
        lateness_s = self.config.max_lateness_s if lateness is None else float(lateness)
        # Its message reaches a worker before its call: a slot released less than HEAD_START_S
        # before its instant goes no earlier than HEAD_START_S after the instant. Anchored on the
        # instant, not the release, so that the pollers of a group (each releases every slot of
        # it, SQS keeping one message per slot) place each slot at the same instant.
        head = None
        if self.clock.now() + timedelta(seconds=HEAD_START_S) > scheduled:
            head = scheduled + timedelta(seconds=HEAD_START_S)
        # The owner names the slot: every poller of the deployment shares the placement.
        return BudgetRequest(job.tenant, key, f"{job.id}/{slot}", rate, scheduled, lateness_s, head)

    def lateness_under_budget(self, job: Job, slot: str, scheduled: datetime) -> float | None:
        """The lateness bound (s) of a slot a rate budget applies to; None when none applies."""
        request = self._budget_request(job, slot, scheduled)
        return None if request is None else request.max_lateness_s

    def _smooth(self, out: _Outgoing) -> None:
        """Give the chunk's budgeted messages the instants their budgets give them, placed together
        (see the module docstring); report those the budget cannot take within their lateness."""
        if not out.budgeted:
            return
        placements = self.ledger.place_all([request for *_, request in out.budgeted])
        for (queue, index, job, request), placement in zip(out.budgeted, placements, strict=True):
            message = out.messages[queue][index]
            if placement.overrun:
                self.metrics.add("RateBudgetOverruns", 1)
                overrun = Overrun(
                    job.tenant,
                    job.id,
                    message.slot,
                    request.key,
                    request.rate,
                    request.max_lateness_s,
                    request.due,
                )
                self.overruns.overrun(overrun)
                self.notifier.overrun(job, overrun, self.clock.now())  # the event (sent with the release)
            if placement.release_at > request.due:
                out.messages[queue][index] = replace(
                    message, not_before=format_instant_ms(placement.release_at)
                )

    def _followups(
        self,
        timers: list[Timer],
        jobs: dict[tuple[str, str], Job],
        now: datetime,
        out: _Outgoing,
        report: ReleaseReport,
    ) -> None:
        """Retry, lease, child and queued timers: send a message if the record still waits for it.
        ALERT timers: each alert's sweep goes to a worker (:mod:`punctual.delivery.notifications.sweep`),
        which reads the alert; no record is read for it here (nor for RELINK: :func:`_no_record`)."""
        if not timers:
            return
        keys = {(t.tenant, t.job_id, t.slot) for t in timers if t.kind not in _NO_RECORD_KINDS}
        executions = self.store.batch_get_executions(keys) if keys else {}
        gone: list[tuple[Execution, Expect]] = []
        retries: list[DueRetry] = []
        for timer in timers:
            job = jobs.get((timer.tenant, timer.job_id))
            execution = executions.get((timer.tenant, timer.job_id, timer.slot))
            message = None
            if timer.kind in _NO_RECORD_KINDS:
                message = _no_record(self.store, self.metrics, timer, job, now)
            elif timer.kind is TimerKind.CHILD:
                message = unclaimed_child(timer, job, execution, now)
            elif job is not None and job.state is not JobState.DELETED and execution is not None:
                message = _followup(timer, job, execution, now)
                if message is not None and timer.kind is TimerKind.RETRY and self.retries.applies(execution):
                    retries.append(DueRetry(timer, job, execution, message))  # placed below
                    continue
            elif job is None and execution is not None and (end := ended_for_gone(timer, execution, now)):
                gone.append(end)  # a deleted job's open slot: ended here, or it stayed open for good
            if message is None:
                report.stale += 1
                continue
            out.messages[self.queue_for(job)].append(message)  # type: ignore[arg-type]
        if retries:
            _add_paced(out, self.retries.pace(retries, now), self.routing)
        if gone:
            self.metrics.add("DeletedJobSlotsEnded", self.unrun.end_gone(gone))

    def _record(self, report: ReleaseReport) -> None:
        self.metrics.add("SlotsReleased", report.released)
        if report.stale:
            self.metrics.add("StaleTimersIgnored", report.stale)
        if report.superseded:
            self.metrics.add("ResendsAvoided", report.superseded)
        if report.skipped:
            self.metrics.add("SlotsMissed", report.skipped)
        if report.excluded:
            self.metrics.add("SlotsExcluded", report.excluded)
        add_all(self.metrics, "FireDelayMs", report.fire_delays_ms, "Milliseconds")


def _plan(job: Job, timer: Timer, now: datetime) -> ReleasePlan:
    """The release plan of a timer of the job's chain; a RESUME timer's slots due before it
    were owed by a pause (the catch-up policy decides them, whatever their lateness; an
    EventBridge Scheduler API schedule's are all MISSED: :func:`.pauses.owing_by_resume`)."""
    slot, due = slot_instant(timer.slot), timer.due
    if timer.kind is _RESUME:
        return plan_release(owing_by_resume(job), slot, now, due=due, owed_before=due, cause=OWED_BY_PAUSE)
    return plan_release(job, slot, now, due=due)


def _followup(timer: Timer, job: Job, execution: Execution, now: datetime) -> DispatchMessage | None:
    """A RETRY, LEASE or QUEUED timer's message, when its slot's record still waits for it."""
    status, attempt = execution.status, execution.attempt
    if timer.kind is TimerKind.RETRY:
        if status is ExecutionStatus.RETRY_WAIT and attempt == timer.attempt - 1:
            return message_for(job, timer.slot, from_ms(timer.due_ms), timer.attempt, MessageKind.RETRY, now)
        return None
    if timer.kind is TimerKind.LEASE:
        lease = execution.lease_until
        lease_lapsed = lease is not None and lease <= now
        if status is ExecutionStatus.RUNNING and execution.owner == timer.owner and lease_lapsed:
            # The worker is gone: the next attempt takes over (the claim fences the old owner).
            return message_for(
                job, timer.slot, execution.scheduled_at, attempt + 1, MessageKind.TAKEOVER, now
            )
        return None
    if timer.kind is TimerKind.QUEUED and status is ExecutionStatus.QUEUED:
        # A slot queued behind another (overlap queue): its claim checks it still waits.
        return message_for(job, timer.slot, execution.scheduled_at, attempt, MessageKind.CHECK, now)
    return None


def _no_record(
    store: JobStore, metrics: MetricsSink, timer: Timer, job: Job | None, now: datetime
) -> DispatchMessage | None:
    """An ALERT timer's sweep message, or a RELINK timer's check (:mod:`punctual.execution.relinks`):
    a worker reads what each needs. A sweep whose job is gone delivers nothing: an alert left
    SENDING is given up visibly (:func:`~punctual.delivery.notifications.sweep.undelivered`)."""
    if timer.kind is TimerKind.ALERT:
        message = sweep_message(job, timer, now)
        if message is None and (job is None or job.state is JobState.DELETED):
            undelivered(store, metrics, timer)
        return message
    return relink_message(job, timer, now)


def _add_paced(out: _Outgoing, paced: PacedRetries, routing: QueueRouting) -> None:
    """A chunk's retries, placed on their tenants' retry rates: the messages it sends, and the
    timers it writes again for those deferred (:mod:`punctual.dispatch.polling.retry_pace`)."""
    for job, message in paced.messages:
        out.messages[routing.queue_for(job)].append(message)
    for job, timer in paced.deferred:
        out.next_timers.append(timer)
        if on_ecs_lane(job):  # ECS tasks ready for it, as for the timer it replaces
            out.forecast.add_ecs_slot(timer.due)


def unclaimed_child(
    timer: Timer, job: Job | None, execution: Execution | None, now: datetime
) -> DispatchMessage | None:
    """A CHILD timer (:func:`punctual.timing.slots.sent_check_timer`): the slot an after(...)
    child or a run-now request was sent, again, in a group and under a deduplication id of its
    own, when no worker has claimed it (the one that received it may have died before its
    handler ran). A run-now slot (``~m...``) runs while its job is paused; a child's is recorded
    SKIPPED by its claim (it was due: a record says why it did not run).

    The copy stands for the message it checks (QA21): its scheduled instant, and the spec it
    would run. That is the job as it is now, unless a replace since made an after() job wait on a
    parent its message's spec did not (that parent counts from its next success): then the copy is
    the message's own version, without the job, so that its claim reads the job and decides as for
    that message taken late (SUPERSEDED). A replace of a run-now slot's job does the same (the
    claim supersedes a run-now slot released for an earlier spec). Built from the job as it was at
    the re-send, the copy of a child's slot ran at once under a replace that had added a parent,
    before that parent succeeded for the slot (or when it failed); and every copy named the
    re-send's instant as its scheduled one, so its record and events said it started on time.
    """
    if job is None or execution is not None:
        return None
    manual = MANUAL_MARK in timer.slot
    if job.state is JobState.DELETED or (
        job.state is JobState.COMPLETED and job.end_at is None and not manual
    ):
        # a paused job's child slot is sent (its claim records it SKIPPED), and a child's that
        # completed past its end_at (its slots before it still run: review)
        return None
    kind = MessageKind.MANUAL if manual else MessageKind.CHILD
    sent = CheckedSend.of(timer)
    if sent is None:  # a slot nothing sent yet (a replace that dropped a parent owes it): sent now
        return replace(message_for(job, timer.slot, now, 1, kind, now), resend=1)
    changed = job.version != timer.job_version
    if not changed or (job.version > timer.job_version and not manual and owed_since(job, sent.parents)):
        return replace(message_for(job, timer.slot, sent.at, 1, kind, now), resend=1)
    sent_for = job.model_copy(update={"version": timer.job_version})  # (or a read behind the check)
    return replace(message_for(sent_for, timer.slot, sent.at, 1, kind, now, spec=""), resend=1)
