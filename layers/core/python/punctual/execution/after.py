"""What follows the end of an attempt: retry timer, failure report and dead-letter event, next
``delay`` slot, dependants, the overlap turn, deleting a completed job that asked for it, the
execution event and the job's alerts, and pausing a job its target asked to stop.

Every step comes *after* the record's write and is idempotent: a worker that dies between the
two leaves its message to be redelivered, and the redelivery finds the attempt ended and runs
these again (REPAIR).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from punctual.delivery.notifications import Notifier
from punctual.delivery.notifications.alerts import end_unwatched_streak
from punctual.dispatch.load_forecast import forecast_ecs_timer
from punctual.dispatch.queues import DispatchMessage, MessageKind, QueuePort, message_for
from punctual.execution.budgets import WorkerBudgets
from punctual.execution.chain_ends import complete_job
from punctual.execution.completion import Completion
from punctual.execution.ports import DeadLetterSink, FailureSink, JobPauser
from punctual.execution.records import RELEASED_NOTE, Ledger, deferred
from punctual.execution.turns import Turns
from punctual.execution.unrun_children import MAX_DEPTH, UnrunChildren, others_have_slot
from punctual.execution.versions import superseded_for_good
from punctual.models import Execution, ExecutionStatus, Job, JobState, Overlap
from punctual.runtime.observability import MetricsSink, NullMetrics
from punctual.store.base import ExecutionConflictError
from punctual.store.reads import read_calendars
from punctual.timing.instants import format_instant_ms
from punctual.timing.retries import RandomSource, deferral_at, next_retry_at
from punctual.timing.slots import SENT_CHECK_S, fire_timer, inside_window, schedule_of, sent_check_timer
from punctual.timing.timers import MANUAL_MARK, slot_instant, slot_key
from punctual.usecases.backfills import backfill_ref
from punctual.usecases.calendars import Calendar, calendar_missing_note, excluding, exclusion_note
from punctual.usecases.delay_chains import chains_from, next_delay_slot

log = logging.getLogger("punctual.execution")

# The error of an after() job's slot whose parents all succeeded while it was paused.
PAUSED_CHILD_NOTE = "job is paused: its parents' slot completed while it was paused"

PAUSE_TRIES = 3
# The ends a run (or its claim) writes, after which a delay() chain's next timer is due.
_RUN_ENDS = frozenset(
    {ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT, ExecutionStatus.SKIPPED}
)
_DISPATCHED_TO = (JobState.ENABLED, JobState.PAUSED, JobState.COMPLETED)
SERIAL_CHILDREN = 8  # a parent's children dispatched in turn up to this many; more, on threads
FANOUT_THREADS = 8  # (a batch runs up to 10 records at once: 80 threads beside boto3's pool of 64)


def each_child(children: list[tuple[str, Job | None]], one: Callable[[str, Job | None], None]) -> None:
    """``one`` for each child: in turn up to :data:`SERIAL_CHILDREN`, else on threads. A child is a
    few writes and a send one after another (~20 ms in the cloud), so 500 children sent in turn
    would start the last ~10 s after its parent succeeded (QA27). Every child is tried; the first
    error is raised after (each child's writes are idempotent)."""
    if len(children) <= SERIAL_CHILDREN:
        for child_id, child in children:
            one(child_id, child)
        return
    with ThreadPoolExecutor(min(FANOUT_THREADS, len(children)), thread_name_prefix="children") as pool:
        sent = [pool.submit(one, child_id, child) for child_id, child in children]
    for future in sent:
        future.result()


class AfterEffects:
    """Applies what follows an attempt's end.

    Parameters
    ----------
    ledger
        Records and timers.
    queues, route
        Where dependants' slots go (``route(job)`` names the queue).
    turns
        Passes the overlap turn on.
    metrics, failures
        Figures; finally failed executions.
    rng
        ``rng(job_id, slot, attempt)``: the jitter of that attempt's retry.
    pauser
        Pauses a job whose target asked never to be called again.
    dead_letters
        Sends a finally failed slot's event to its job's dead-letter queue (None: not sent).
    notifier
        Publishes the execution event and raises the job's alerts (default: neither).
    """

    def __init__(
        self,
        ledger: Ledger,
        queues: QueuePort,
        route: Callable[[Job], str],
        turns: Turns,
        metrics: MetricsSink,
        failures: FailureSink,
        rng: Callable[[str, str, int], RandomSource],
        pauser: JobPauser | None,
        dead_letters: DeadLetterSink | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.ledger = ledger
        self.dead_letters = dead_letters
        self.store = ledger.store
        self.queues = queues
        self.route = route
        self.turns = turns
        self.metrics = metrics
        self.failures = failures
        self.rng = rng
        self.pauser = pauser
        self.notifier = notifier or Notifier()
        self.completion = Completion(self.store, metrics)
        self.budgets = WorkerBudgets(self.store, ledger.config, metrics, self.notifier)

    def apply(
        self,
        job: Job,
        execution: Execution,
        now: datetime,
        retry_at: datetime | None = None,
        repeat: bool = False,
        message: DispatchMessage | None = None,
    ) -> None:
        """What follows an attempt's end. Every step is idempotent (REPAIR runs it again).
        ``message``: the claim's, for a SUPERSEDED end (:meth:`superseded`).

        The failed-executions report is at least once: a worker that dies after sending it
        but before its message is deleted sends it again on the redelivery.
        """
        status = execution.status
        count = NullMetrics() if repeat else self.metrics
        if status is ExecutionStatus.RETRY_WAIT:
            self.ledger.put_retry_timer(job, execution, now, retry_at or now)
            if execution.error != RELEASED_NOTE:
                # A deferred attempt (KMS, STS failing a moment) is no retry: the slot is late
                count.add("AttemptsDeferred" if deferred(execution) else "Retries", 1)
                self.notifier.changed(job, execution, now)
            return
        if status is ExecutionStatus.SUCCEEDED:
            count.add("ExecutionsSucceeded", 1)
            if job.dependents > 0:  # (else no after() job waits on it: _children has none)
                self.dispatch_dependants(job, execution, now)
        elif status in (ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT):
            count.add("ExecutionsFailed", 1)
            if status is ExecutionStatus.TIMED_OUT:
                count.add("ExecutionsTimedOut", 1)
            self.failures.publish(failure_report(execution))
            if job.dead_letter is not None and self.dead_letters is not None:
                self.dead_letters.send(job, execution, now)
            self.skip_dependants(job, execution, now)
        elif status is ExecutionStatus.SKIPPED:
            self.skip_dependants(job, execution, now)  # (the claims that skip call it too)
        elif status is ExecutionStatus.SUPERSEDED and message is not None:
            self.superseded(job, execution, now, message)
        if status.terminal:
            self._chain_delay(job, execution, now)
            if job.overlap is not Overlap.ALLOW:  # (an overlap 'allow' job takes no turns)
                self.turns.pass_on(job, execution, now)
            deleted = job.delete_after_completion and self.completion.delete_if_done(
                job, execution.job_version, now, alerts_after=True
            )
            # Last: the event and the alerts come after everything the slot's progress needs.
            self.notifier.changed(job, execution, now)
            if deleted:  # its failure streak ends after them: a failed last slot's opened it after
                # the delete, and the delete's end, first, left a recovered last slot untold (QA28)
                end_unwatched_streak(self.store, job, None)

    def retry_instant_of(self, job: Job, execution: Execution) -> datetime | None:
        """The retry instant of a RETRY_WAIT record, recomputed exactly as it was first computed."""
        if execution.status is not ExecutionStatus.RETRY_WAIT or execution.finished_at is None:
            return None
        if execution.error == RELEASED_NOTE:
            return execution.finished_at
        if deferred(execution):
            instant = deferral_at(
                execution.releases,
                execution.finished_at,
                execution.retry_origin,
                job.retry.max_age_seconds,
                self.rng(job.id, execution.slot, execution.attempt),
            )
            return instant or execution.finished_at
        due = next_retry_at(
            job.retry,
            failed_attempt=execution.attempt - execution.releases,
            failed_at=execution.finished_at,
            scheduled_at=execution.retry_origin,
            rng=self.rng(job.id, execution.slot, execution.attempt),
            retry_after_s=execution.retry_after_s,
        )
        return due or execution.finished_at

    def pause(self, job: Job, reason: str) -> None:
        """The target asked never to be called again: pause the job (a few tries on conflicts)."""
        if self.pauser is None:
            log.error("job %s asked to be paused, but this worker cannot pause jobs", job.id)
            return
        for _ in range(PAUSE_TRIES):
            try:
                self.pauser.pause(job.tenant, job.id, reason)
                self.metrics.add("JobsPausedByTarget", 1)
                return
            except Exception as exc:  # a conflicting update: read again and retry
                try:
                    current = self.store.get_job(job.tenant, job.id)
                except Exception:  # unreadable, or the store failing: try the pause again
                    log.info("pausing %s: %s; trying again", job.id, exc)
                    continue
                if current is None or current.state in (JobState.COMPLETED, JobState.DELETED):
                    # Nothing left to stop (a one-time job's slot, or its last, marked it COMPLETED;
                    # or it was deleted): not a failed pause (QA: three tries, then an error)
                    log.info("job %s asked to be paused has no slot left to stop", job.id)
                    return
                log.info("pausing %s: %s; trying again", job.id, exc)
        log.error("could not pause job %s after the target asked to stop", job.id)

    def ended_copy(self, job: Job, current: Execution | None, now: datetime) -> None:
        """A copy of a slot that found its attempt already ended, dropped (another Region's release
        received first after the end, a re-send). Its end's writes that move the slot on are made
        again, idempotently: a worker lost between its record and them (its Region lost) left them
        to its own message's redelivery, which comes back only with that Region (QA25, QA27):

        * a RETRY_WAIT slot's retry timer, the same one (its instant recomputed as the end did);
        * a succeeded slot's ``after(...)`` children whose slot has no record yet;
        * a ``skip``/``queue`` job's turn, while the ended slot still holds it;
        * a ``delay(...)`` chain's next timer, while the chain's next slot has no record (a copy
          of an older slot finds the next one recorded)."""
        if current is None:
            return
        if current.status is ExecutionStatus.RETRY_WAIT:
            self.ledger.put_retry_timer(job, current, now, self.retry_instant_of(job, current) or now)
            return
        if current.status is ExecutionStatus.SUCCEEDED and job.dependents > 0:
            self.dispatch_dependants(job, current, now, unless_recorded=True)
        self.turns.pass_on(job, current, now)  # (nothing for 'allow', nor for a slot not ended)
        if current.status not in _RUN_ENDS or schedule_of(job).kind != "delay":
            return
        nxt = next_delay_slot(job, current.slot, current.finished_at or now)
        if nxt is None or MANUAL_MARK in current.slot:
            return
        if self.store.get_execution(job.tenant, job.id, slot_key(nxt)) is None:
            self._chain_delay(job, current, now)

    def _chain_delay(self, job: Job, execution: Execution, now: datetime) -> None:
        """``delay(...)`` jobs: the next slot counts from this finish, for the same job version."""
        if schedule_of(job).kind != "delay" or "~" in execution.slot:
            return  # manual runs do not start a second chain
        current = self.store.get_job(job.tenant, job.id)
        if current is None or current.state is not JobState.ENABLED or not chains_from(current, execution):
            return  # paused, deleted or changed: the change started its own chain, or its resume will
        # A poller whose clock runs ahead releases a slot early, and its run can end before the
        # slot's own instant: the delay counts from the later of the two, so that skew moves when
        # a run starts, never how often, and the chain never names this slot again (it stopped).
        nxt = next_delay_slot(current, execution.slot, execution.finished_at or now)
        if nxt is None:  # the chain ends (its next run would be past end_at): the job is done, as
            complete_job(self.store, current, self.ledger.clock)  # an after() child past its end_at
            return
        timer = fire_timer(self.ledger.config.layout, current, nxt, now)
        self.store.put_timers([timer])
        forecast_ecs_timer(self.store, current, timer.due)  # ECS tasks ready for it

    def dispatch_dependants(
        self, job: Job, execution: Execution, now: datetime, unless_recorded: bool = False
    ) -> None:
        """``after(...)`` jobs: record this parent's success; send each child whose parents all
        succeeded (also for a success a child was linked during: :mod:`punctual.execution.relinks`).
        ``unless_recorded`` (a dropped copy's repair): not a child whose slot has a record.

        Send first, then record the dispatch: the dedup id makes a repeat harmless, and a
        repeat after SQS's window is dropped by the child's claim.
        """
        children = self._children(job, execution)
        if not children:
            return
        ttl = self.ledger.ttl(now)

        def one(child_id: str, child: Job | None) -> None:
            self._dispatch_child(job, execution, child_id, child, ttl, now, unless_recorded)

        each_child(children, one)

    def _dispatch_child(
        self,
        job: Job,
        execution: Execution,
        child_id: str,
        child: Job | None,
        ttl: int,
        now: datetime,
        unless_recorded: bool,
    ) -> None:
        """:meth:`dispatch_dependants` for one child."""
        if unless_recorded and self.store.get_execution(job.tenant, child_id, execution.slot):
            return  # dispatched (and claimed) before
        done = self.store.record_parent_success(job.tenant, child_id, execution.slot, job.id, ttl)
        if child is not None and child.state is JobState.PAUSED:  # maybe behind: read it again
            child = self.store.get_job(job.tenant, child_id)
        if child is None or child.state not in _DISPATCHED_TO:
            return
        parents = schedule_of(child).parents
        if not parents or not set(parents) <= done:
            return
        if self._outside_window(child, execution.slot, now):
            self.store.claim_child_dispatch(job.tenant, child_id, execution.slot)
            return
        if child.state is JobState.COMPLETED and child.end_at is None:
            return  # a child completed past its end_at still runs its slots before it (review)
        if child.state is JobState.PAUSED:
            # Its parents' slot came while it was paused: recorded MISSED with its event and
            # missed alert (an after() job owes no slot on resume: it has no schedule of its own).
            self._record_unrun(child, execution.slot, now, ExecutionStatus.MISSED, PAUSED_CHILD_NOTE)
            self.store.claim_child_dispatch(job.tenant, child_id, execution.slot)
            return
        if child.exclude_calendars and self.excluded(child, execution.slot, now):
            self.store.claim_child_dispatch(job.tenant, child_id, execution.slot)
            return
        # A backfilled parent's children are backfilled too (their records say so).
        ref = backfill_ref(execution.backfill, True) if execution.backfill else ""
        message = message_for(child, execution.slot, now, 1, MessageKind.CHILD, now, backfill=ref)
        # on its target's rate budget, as the poller places a scheduled slot
        message, held_s = self.budgets.place_child(child, message, now)
        if not ref:  # checked later (a backfilled child is late by design)
            check = sent_check_timer(
                self.ledger.config.layout, child, execution.slot, now, after_s=SENT_CHECK_S + held_s
            )
            self.store.put_timers([check])
        self.queues.send(self.route(child), [message])
        self.store.claim_child_dispatch(job.tenant, child_id, execution.slot)
        self.metrics.add("ChildrenDispatched", 1)

    def _children(self, job: Job, execution: Execution) -> list[tuple[str, Job | None]]:
        """The ``after(...)`` jobs of ``job`` an end of ``execution`` concerns, each with the job
        as read (None: gone): none for a job no job waits on (the common case: no query is made),
        nor for a backfill run without ``include_dependants``."""
        if job.dependents <= 0 or (execution.backfill and not execution.backfill_dependants):
            return []
        children = self.store.list_dependents(job.tenant, job.id)
        if not children:
            return []
        jobs = self.store.batch_get_jobs((job.tenant, child) for child in children)
        return [(child, jobs.get((job.tenant, child))) for child in children]

    def skip_dependants(self, job: Job, execution: Execution, now: datetime, depth: int = 0) -> None:
        """``after(...)`` jobs of a parent whose slot ended for good without success (FAILED,
        TIMED_OUT, or SKIPPED: its overlap, its pause, a cancelled backfill): that slot of each
        child is recorded SKIPPED with the reason (and of their children in turn), so that a
        child's history has every slot its parents had (QA: it had no record at all). A record the
        slot has already (its own, or a repeat of these after-effects) is left as it is."""
        if depth >= MAX_DEPTH:
            return
        slot = execution.slot
        note = f"not run: parent {job.id}'s slot ended {execution.status.value}"
        for _, child in self._children(job, execution):
            if child is None or child.state not in _DISPATCHED_TO or job.id not in schedule_of(child).parents:
                continue
            if MANUAL_MARK in slot:
                if len(schedule_of(child).parents) > 1:
                    continue  # a run-now slot names one parent: a child of several never has it
            elif not inside_window(child, slot_instant(slot)):
                continue
            elif not others_have_slot(self.store, child, job.id, slot_instant(slot)):
                continue  # a slot the child never has (its other parents have none there)
            skipped = self._record_unrun(child, slot, now, ExecutionStatus.SKIPPED, note)
            if skipped is not None:
                self.skip_dependants(child, skipped, now, depth + 1)

    def _outside_window(self, child: Job, slot: str, now: datetime) -> bool:
        """A parents' slot before the child's ``start_at`` or after its ``end_at``: not the child's
        (QA: an after() job ran slots past its end_at and stayed ENABLED). Past ``end_at`` the child
        is COMPLETED, as a scheduled job past its end is; a parent's run-now slot runs its children."""
        if MANUAL_MARK in slot or (child.start_at is None and child.end_at is None):
            return False
        instant = slot_instant(slot)
        if inside_window(child, instant):
            return False
        if child.end_at is not None and instant > child.end_at and child.state is JobState.ENABLED:
            # Completed, never deleted here even with delete_after_completion: a parent's slot
            # inside its window may still run (a retry, a slot released and not claimed yet), and
            # it runs the child's (review: deleted, that slot was lost with no record)
            complete_job(self.store, child, self.ledger.clock)  # a change meanwhile stands
        return True

    def excluded(self, child: Job, slot: str, now: datetime) -> bool:
        """An ``after()`` child whose slot falls on a day of a calendar it excludes: recorded
        EXCLUDED (once) instead of sent; one whose excluded calendar is gone: recorded MISSED,
        ``calendar missing``, with its event and missed alert, instead of run. A run-now slot of
        the parent is not excluded."""
        if "~" in slot:
            return False
        keys = [(child.tenant, name) for name in child.exclude_calendars]
        instant = slot_instant(slot)

        def excludes(calendars: dict[tuple[str, str], Calendar]) -> bool:
            return excluding((calendars[k] for k in keys if k in calendars), instant) is not None

        found = read_calendars(self.store, keys, excludes)  # strongly consistent before excluding
        gone = [name for (_, name) in keys if (child.tenant, name) not in found]
        calendar = None if gone else excluding((found[k] for k in keys), instant)
        if calendar is None and not gone:
            return False
        if calendar is not None:
            self._record_unrun(child, slot, now, ExecutionStatus.EXCLUDED, exclusion_note(calendar))
        elif self._record_unrun(child, slot, now, ExecutionStatus.MISSED, calendar_missing_note(gone)):
            log.error("job %s: %s", child.id, calendar_missing_note(gone))
            self.metrics.add("SlotsCalendarMissing", 1)
        return True

    def _record_unrun(
        self, child: Job, slot: str, now: datetime, status: ExecutionStatus, note: str
    ) -> Execution | None:
        """Record a child's slot that is not run (EXCLUDED; SKIPPED with its event; MISSED with
        its event and missed alert); None when it was recorded before (a repeat of these
        after-effects)."""
        record = Execution(
            job_id=child.id,
            tenant=child.tenant,
            slot=slot,
            scheduled_at=slot_instant(slot),
            status=status,
            finished_at=now,
            error=note,
            job_version=child.version,
        )
        try:
            self.ledger.save(record, None, None)
        except ExecutionConflictError:
            return None
        self._notify_unrun(child, record, now)
        if status is not ExecutionStatus.SKIPPED:  # (a SKIPPED one's: skip_dependants goes on)
            below = UnrunChildren(self.store, lambda: self.ledger.ttl(now)).record([(child, record)], now)
            for grandchild, unrun in below.missed + below.skipped:
                self._notify_unrun(grandchild, unrun, now)
            if below.failed:
                self.metrics.add("ChildRecordsFailed", below.failed)
        return record

    def superseded(self, job: Job, record: Execution, now: datetime, message: DispatchMessage) -> None:
        """A slot of ``job`` recorded SUPERSEDED that no later release runs
        (:func:`punctual.execution.versions.superseded_for_good`; its first attempt ran when the
        record has a start): its ``after()`` children's slots (and theirs, down the chain) are
        recorded MISSED with their events and alerts, as under a MISSED parent slot
        (:mod:`punctual.execution.unrun_children`). Made again by a repeat of the claim (a
        redelivery's REPAIR, a duplicate: conditional puts, written once)."""
        ran = record.started_at is not None
        version = max(record.job_version, message.job_version)  # (a stale message of a later one)
        if job.dependents <= 0 or not superseded_for_good(job, message, ran, version):
            return
        below = UnrunChildren(self.store, lambda: self.ledger.ttl(now)).record([(job, record)], now)
        for child, unrun in below.missed + below.skipped:
            self._notify_unrun(child, unrun, now)
        if below.failed:
            self.metrics.add("ChildRecordsFailed", below.failed)

    def _notify_unrun(self, job: Job, record: Execution, now: datetime) -> None:
        """A slot recorded not run: MISSED with its event and missed alert, SKIPPED with its event."""
        if record.status is ExecutionStatus.MISSED:
            self.notifier.missed([(job, record)], now)
            if self.notifier.alerter is not None:
                self.notifier.alerter.missed(job, record)
        elif record.status is ExecutionStatus.SKIPPED:
            self.notifier.changed(job, record, now)


def failure_report(execution: Execution) -> dict[str, Any]:
    """The failed-executions queue's message for a finally failed execution."""
    return {
        "tenant": execution.tenant,
        "job_id": execution.job_id,
        "slot": execution.slot,
        "scheduled_at": format_instant_ms(execution.scheduled_at),
        "status": execution.status.value,
        "attempt": execution.attempt,
        "error": execution.error,
        "finished_at": format_instant_ms(execution.finished_at) if execution.finished_at else None,
        "attempts": [record.model_dump(mode="json") for record in execution.attempts],
    }
