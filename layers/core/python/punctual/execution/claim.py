"""Claiming a message: the decision of :mod:`punctual.execution.decisions`, applied with
conditional writes on the slot's record.

A first attempt creates the record; on conflict the store returns the record as it is, and the
decision is made again (a few rounds). Overlap ``skip`` / ``queue`` goes through the job's turn
(:mod:`punctual.execution.turns`). An attempt runs the spec of the version its slot was released
for, or is recorded SUPERSEDED (:mod:`punctual.execution.versions`). A first attempt that keeps coming back
(no time left in a Lambda invocation, a claim that keeps racing, or errors) is *parked* before
the queue's dead-letter threshold: recorded QUEUED with the reason and a timer that brings it
back, so no first attempt reaches a dead-letter queue without a record saying why.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from datetime import datetime

from punctual.delivery.notifications.alerts import fire_delay_of
from punctual.dispatch.queues import FORGED_MESSAGES, DispatchMessage, MessageKind, QueuePort, job_from_spec
from punctual.execution.after import AfterEffects
from punctual.execution.decisions import FRESH_KINDS, NEW_SLOT, ClaimAction, ClaimDecision, decide_claim
from punctual.execution.lease import Leases
from punctual.execution.owed_slots import released_slot_owed
from punctual.execution.parking import ERROR_BACKOFF_S, Parking
from punctual.execution.ports import Claim, ClaimOutcome, Delivery, WorkerConfig
from punctual.execution.records import (
    GONE_NOTE,
    LEASE_LOST_NOTE,
    RELEASED_NOTE,
    Ledger,
    back_of,
    covering_range,
    lost_run_of_a_gone_job,
    new_record,
    owned_by,
    owner_for,
    rest_of_range,
    retry_not_started,
    running,
    skipped_record,
    visibility,
)
from punctual.execution.relinks import Relinks
from punctual.execution.turns import QueueFull, Turns, overlap_skip_reason, waits_for_turn
from punctual.execution.versions import released_version, superseded_record
from punctual.models import AlertCondition, Execution, ExecutionStatus, Job, JobState, Overlap
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink
from punctual.security.message_auth import DispatchSigner, replayed_copy
from punctual.store.base import ExecutionConflictError, Expect, JobStore
from punctual.timing.instants import message_instant
from punctual.timing.owed import owed_at_restart
from punctual.timing.slots import MISSED_AFTER_S, schedule_of
from punctual.timing.timers import MANUAL_MARK
from punctual.usecases.backfills import BackfillState, parse_backfill_ref

log = logging.getLogger("punctual.execution")

FINISH_MARGIN_S = 30  # time a Lambda keeps after a run's timeout to record its result
CLAIM_ROUNDS = 5
# A message sent less than this long ago is claimed with the job it carries, without a read.
SPEC_TRUST_S = 5.0
# A smoothed message held back comes back this much (and up to a second more) before its instant:
# the time to receive it again, and the worker waits the rest (punctual.dispatch.smoothing).
HOLD_EARLY_S = 1
# A message released more than this before the instant it was meant to start (by its sender's
# clock) is early: it is held until its instant, never run early (claim's _early).
EARLY_TOLERANCE_S = 5
MAX_HOLD_S = 43_200  # SQS: a message's visibility is at most 12 hours
# A queued slot's turn or check comes long after its release: what it runs is decided on the job
# as it is now (a slot still QUEUED when its job's spec changed runs the new spec, or is
# SUPERSEDED when that spec does not run it: owed_to_current), never on a copy.
_TURN_KINDS = (MessageKind.TURN, MessageKind.CHECK)
# Messages whose carried job may be far older than their send: a queued slot's turn, and a
# takeover, which goes on with a slot started earlier (a hand-back at shutdown sends it with the
# job its run's claim read, maybe hours before: QA, a replace or delete during the run was not
# seen by the next attempt). Their claim reads the job.
_READ_KINDS = (*_TURN_KINDS, MessageKind.TAKEOVER)
_ASKED_FOR = (MessageKind.MANUAL, MessageKind.BACKFILL)  # runs a user asked for: they run while paused
# The only kinds not_to_run may drop: for any other it returns None, and is not asked
_MAYBE_NOT_TO_RUN = (MessageKind.BACKFILL, MessageKind.CHILD, MessageKind.FIRE)
# A scheduled slot claimed this long after its instant may be one a MISSED range record stands for:
# a release records MISSED only slots it releases more than MISSED_AFTER_S after their instant
# (half of it: the nodes' clocks may differ). A slot claimed sooner is in no range yet.
RANGE_CHECK_AFTER_S = MISSED_AFTER_S / 2
# A first attempt of these is never late: a backfilled slot (late by design), a queued slot's turn
_NEVER_LATE = (MessageKind.BACKFILL, *_TURN_KINDS)


def carried_job(message: DispatchMessage, now: datetime) -> Job | None:
    """The job a fresh message carries (signed with it: verified before this), or None.

    Why the claim may trust it: the poller read the job (eventually consistent) when it released
    the slot, a moment ago; the job of that version is what the attempt runs (an attempt runs
    the spec of the version its slot was released for). What it cannot see is a pause, replace
    or delete written in the ``SPEC_TRUST_S`` since the send: such a change applies from the
    next slot on, as if it had been written a moment after this one started. An older message
    (a backlog, a smoothed slot held longer, a retry), a queued slot's turn and a takeover read
    the job.
    """
    if not message.spec or not message.released_at or message.kind in _READ_KINDS:
        return None  # a queued slot's turn, a takeover: the job may have changed since their slot began
    try:
        sent = message_instant(message.released_at)
    except ValueError:
        return None
    if (now - sent).total_seconds() > SPEC_TRUST_S:
        return None
    try:
        job = job_from_spec(message.spec)
    except ValueError:
        return None
    if job.version != message.job_version or job.id != message.job_id or job.tenant != message.tenant:
        return None  # (not the message's own job)
    return job


def not_to_run(
    claimer: Claimer, job: Job, message: DispatchMessage, delivery: Delivery | None
) -> Claim | None:
    """A slot not to run although its job runs: a late one a MISSED range stands for
    (:func:`missed_in_a_range`), a cancelled backfill's, or a child's sent again
    (a CHILD timer's: a worker died before its handler, or a replace dropped a parent,
    :mod:`punctual.usecases.child_slots`) on a day a calendar of its job excludes (recorded
    EXCLUDED as its first send would have been, :meth:`AfterEffects.excluded`)."""
    if message.kind == MessageKind.FIRE:
        return missed_in_a_range(claimer, job, message, delivery) if message.attempt == 1 else None
    if message.kind == MessageKind.BACKFILL and message.attempt == 1:
        return backfill_cancelled(claimer, job, message, delivery)
    resent_child = message.kind == MessageKind.CHILD and message.resend and job.exclude_calendars
    if resent_child and claimer.after.excluded(job, message.slot, claimer.clock.now()):
        return Claim(ClaimOutcome.DUPLICATE, message, delivery, job, reason="its calendar excludes it")
    return None


def missed_in_a_range(
    claimer: Claimer, job: Job, message: DispatchMessage, delivery: Delivery | None
) -> Claim | None:
    """A scheduled slot's first attempt, claimed late, whose slot a MISSED range record stands for:
    dropped, no record written ("MISSED is final"). Its message was in a queue when a later release
    met the slot again (a repeat after a poller died, a window or lateness crossed since the first
    release) and recorded it MISSED in a range (QA23: the claim wrote the slot's first record and
    ran it, though the range counts it MISSED). Only a claim :data:`RANGE_CHECK_AFTER_S` after the
    slot's instant reads (one Query): a timely one costs nothing more. None: claim it as usual."""
    try:
        instant = message_instant(message.scheduled_at)  # (cached: the claim reads it again)
    except ValueError:
        return None
    if (claimer.clock.now() - instant).total_seconds() < RANGE_CHECK_AFTER_S:
        return None
    missed = covering_range(claimer.store, message.tenant, message.job_id, message.slot)
    if missed is None:
        return None
    log.info("dropping %s %s: a MISSED range from %s stands for it", job.id, message.slot, missed.slot)
    claimer.metrics.add("DuplicatesDropped", 1)
    return Claim(ClaimOutcome.DUPLICATE, message, delivery, job, missed, reason="recorded MISSED in a range")


def backfill_cancelled(
    claimer: Claimer, job: Job, message: DispatchMessage, delivery: Delivery | None
) -> Claim | None:
    """A backfill's slot whose backfill was cancelled before the slot started: dropped, no
    record written (the slot stays free for a later backfill). None: claim it as usual."""
    backfill = claimer.store.get_backfill(job.tenant, job.id, parse_backfill_ref(message.backfill)[0])
    if backfill is not None and backfill.state is not BackfillState.CANCELLED:
        return None
    if claimer.store.get_execution(message.tenant, message.job_id, message.slot) is not None:
        return None  # it started before the cancel: the usual claim decides
    claimer.metrics.add("StaleMessages", 1)
    return Claim(ClaimOutcome.STALE, message, delivery, job, reason="backfill cancelled")


def owed_to_current(
    job: Job, message: DispatchMessage, current: Execution | None, action: ClaimAction
) -> tuple[DispatchMessage, Execution | None] | None:
    """A scheduled slot released for a spec a replace ended, that no worker started, is still
    the job's when it was due by the replace: it starts under the current spec, as the slots of
    the old chain no poller had released yet do (:func:`punctual.timing.owed.owed_at_restart`).
    QA: a payload edit 300 ms after a slot's release, with the workers 9 s behind, recorded the
    slot SUPERSEDED, never run. So does a slot QUEUED behind a run (overlap ``queue``), at its
    turn or check, its record made the current version's (QA23: a payload edit during a long run
    recorded the queued slots SUPERSEDED, never run). None: superseded (a retry or takeover, a
    run-now slot, a slot after the replace, or one the new spec does not run)."""
    queued = current is not None and current.status is ExecutionStatus.QUEUED and not current.backfill
    not_started = current is None or current.status in (ExecutionStatus.MISSED, ExecutionStatus.SUPERSEDED)
    if action is not ClaimAction.START or not (not_started or queued):
        return None
    owed = replace(message, job_version=job.version)
    if current is not None and queued:
        due = message.kind in (MessageKind.FIRE, *_TURN_KINDS)
        if due and owed_at_restart(job, current.job_version, message.slot):
            return owed, current.model_copy(update={"job_version": job.version})
        return None
    return (owed, current) if released_slot_owed(job, message) else None


def exhausted(current: Execution, now: datetime) -> tuple[Execution, Expect]:
    """The end of a slot with no attempt left to start (:data:`ClaimAction.EXHAUSTED`): a run
    whose lease lapsed, TIMED_OUT; a slot whose retry came past ``max_age_seconds``, FAILED with
    its last attempt's error (its failure report, dead letter and alert follow)."""
    if current.status is ExecutionStatus.RETRY_WAIT:
        age = (now - current.retry_origin).total_seconds()
        failed = retry_not_started(current, now, f"{age:.1f}s after the slot, past max_age")
        return failed, Expect(frozenset({ExecutionStatus.RETRY_WAIT}), current.attempt)
    return current.ended(ExecutionStatus.TIMED_OUT, now, LEASE_LOST_NOTE), owned_by(current)


_PAUSED = "the job is paused"
PAUSED_RETRY_NOTE = f"its retry was not started: {_PAUSED}"


def handed_back(record: Execution) -> bool:
    """A run its worker handed back at shutdown (RELEASED_NOTE): started before, it goes on while
    its job is paused, as a run taken over does (review: it ended FAILED)."""
    return record.status is ExecutionStatus.RETRY_WAIT and record.error == RELEASED_NOTE


def paused_end(
    claimer: Claimer,
    job: Job,
    base: Execution,
    replaced: Execution | None,
    expect: Expect | None,
    now: datetime,
) -> Execution:
    """A slot that does not start because its job is paused: SKIPPED; one waiting for its retry
    had failed, and ends FAILED, with its failure report, dead letter and ``failed`` alert (QA: it
    ended SKIPPED and its failure was in no alert, dead letter or FAILED listing)."""
    if base.status is ExecutionStatus.RETRY_WAIT and base.error != RELEASED_NOTE:
        failed = retry_not_started(base, now, _PAUSED)
        claimer._save_start(job, failed, replaced, expect)
        claimer.after.apply(job, failed, now)
        return failed
    skipped = skipped_record(base, now, "job is paused")
    claimer._save_start(job, skipped, replaced, expect)
    claimer.turns.pass_on(job, skipped, now)  # had it been handed the turn, the next slot gets it
    claimer.metrics.add("PausedSkipped", 1)
    claimer.after.notifier.changed(job, skipped, now)
    claimer.after.skip_dependants(job, skipped, now)
    return skipped


def overlap_blocked(
    claimer: Claimer,
    job: Job,
    message: DispatchMessage,
    delivery: Delivery | None,
    holder: str,
    current: Execution | None,
    replaced: Execution | None,
    expect: Expect | None,
    now: datetime,
) -> Claim:
    """A first attempt whose job's turn ``holder`` has (overlap ``skip`` or ``queue``):
    recorded SKIPPED, or QUEUED (acknowledged, started when its turn comes)."""
    base = current or new_record(message, ExecutionStatus.QUEUED)
    if not waits_for_turn(job, message, current) or isinstance(holder, QueueFull):  # (skip, a full queue)
        skipped = skipped_record(base, now, overlap_skip_reason(holder), blocked_by=str(holder))
        claimer._save_start(job, skipped, replaced, expect)
        claimer.store.add_skipped(job.tenant, job.id, 1)
        claimer.metrics.add("OverlapSkipped", 1)
        claimer.after.notifier.changed(job, skipped, now)
        claimer.after.skip_dependants(job, skipped, now)
        return Claim(ClaimOutcome.SKIPPED, message, delivery, job, skipped, reason="overlap skip")
    queued = base  # (current, when QUEUED already)
    if queued.status is not ExecutionStatus.QUEUED or queued.blocked_by != holder:
        queued = base.model_copy(
            update={
                "status": ExecutionStatus.QUEUED,
                "attempt": message.attempt,
                "blocked_by": holder,
            }
        )
        # A late first release is judged as it is queued: its turn is not (QA23: neither was)
        release_delay = first_release_delay(claimer, job, message, queued)
        if release_delay is not None:
            claimer.after.notifier.late(job, queued, release_delay)  # made before the record, as a start's
        claimer._save_start(job, queued, replaced, expect)
        claimer.after.notifier.slot_late(job, queued, now, release_delay)
    claimer.parking.put_queued_timer(job.version, queued, now)
    claimer.metrics.add("OverlapQueued", 1)
    return Claim(ClaimOutcome.QUEUED, message, delivery, job, queued, reason=f"waits for slot {holder}")


def first_release_delay(
    claimer: Claimer, job: Job, message: DispatchMessage, record: Execution
) -> float | None:
    """The release delay (ms) of a first attempt the job's late rules judge, else None: not for
    a backfilled slot (late by design) nor a queued slot's turn (its first release, not the
    hand-over, says whether it was late; QA: both raised late alerts)."""
    timely = message.attempt == 1 and message.kind not in _NEVER_LATE
    if not timely or not claimer.after.notifier.reads_release_delay(job):
        return None
    return fire_delay_of(record.scheduled_at, message.released_at)


def forged(claimer: Claimer, message: DispatchMessage, delivery: Delivery | None, why: str = "") -> Claim:
    """A message not signed with the dispatch key (someone outside the scheduler wrote it), or
    ``why`` it is not to run (signed, but older than any queue keeps a message): nothing it names
    is read or written; it is logged, counted and dropped. While the key cannot be read again
    (Secrets Manager unreachable) one that verifies under no key held may be signed with a rotated
    key: it goes back to its queue unread, verified when it comes back (QA24: dropped as forged)."""
    signer = claimer.signer
    if not why and signer is not None and signer.may_be_rotated(message, claimer.clock.now()):
        seconds = claimer.parking.return_after_error(message, delivery)
        claimer.metrics.add("UnverifiedMessagesReturned", 1)
        log.warning(
            "unverified (key unread or old): %r %r back for %d s", message.job_id, message.slot, seconds
        )
        reason = "not verified: the dispatch key cannot be read, or may be rotated since it was"
        return Claim(ClaimOutcome.UNVERIFIED, message, delivery, return_after_s=seconds, reason=reason)
    claimer.metrics.add(FORGED_MESSAGES, 1)
    log.error(
        "dropping a message %s: tenant %r job %r slot %r attempt %r kind %r",
        why or f"without a valid signature ({'unsigned' if not message.sig else 'forged'})",
        message.tenant,
        message.job_id,
        message.slot,
        message.attempt,
        message.kind,
    )
    return Claim(ClaimOutcome.FORGED, message, delivery, reason=why or "not signed with the dispatch key")


def held_early(
    claimer: Claimer, message: DispatchMessage, delivery: Delivery | None, now: datetime
) -> Claim | None:
    """A message its sender released well before the instant it was meant to start, by the
    sender's own clock (a timer found in an earlier minute than its slot's, by a fault or a
    bad write), and still early by this worker's: back to its queue until then. A slot never
    starts early (QA22: a timer moved a minute and a half early fired its slot that early;
    nothing checked). A clock skew between sender and worker is not this: the sender's
    ``released_at`` and ``scheduled_at`` are of one clock."""
    if message.kind != MessageKind.FIRE or not message.released_at:
        return None  # (the other kinds start after a slot's instant: retries, turns, runs asked for)
    try:
        instant = message_instant(message.scheduled_at)
        released = message_instant(message.released_at)
        seconds = int((instant - now).total_seconds())
    except (AttributeError, TypeError, ValueError):  # not instants: the claim decides on it
        return None
    if seconds <= EARLY_TOLERANCE_S or (instant - released).total_seconds() <= EARLY_TOLERANCE_S:
        return None
    seconds = min(seconds, MAX_HOLD_S)
    claimer.parking.return_later(delivery, seconds)
    claimer.metrics.add("EarlyMessagesHeld", 1)
    log.warning("slot %s of %s released %d s before its instant: held", message.slot, message.job_id, seconds)
    reason = f"released before its instant {message.scheduled_at}: held until then"
    return Claim(ClaimOutcome.WAITING, message, delivery, return_after_s=seconds, reason=reason)


def gone_jobs_run(claimer: Claimer, message: DispatchMessage, delivery: Delivery | None) -> Claim | None:
    """A message back from a worker that died mid-run (a redelivery, or the pollers' takeover),
    its job deleted since: the run is ended TIMED_OUT once its lease lapsed, and until then the
    message waits for it (QA: on the Lambda lane, with no lease timer, it stayed RUNNING for good).
    The takeover of a run handed back at shutdown ends its slot FAILED, its next attempt not
    started, as a retry's timer does (QA: it stayed RETRY_WAIT for good).
    None: nothing of the slot is open (the message is dropped as stale)."""
    redelivered = delivery is not None and delivery.receive_count > 1
    if not redelivered and message.kind != MessageKind.TAKEOVER:
        return None
    current = claimer.store.get_execution(message.tenant, message.job_id, message.slot)
    if current is None:
        return None
    now = claimer.clock.now()
    end = lost_run_of_a_gone_job(current, now, back_of(current, delivery))
    if handed_back(current) and current.attempt == message.attempt - 1:
        end = retry_not_started(current, now, GONE_NOTE), Expect(frozenset({current.status}), current.attempt)
    elif current.status is not ExecutionStatus.RUNNING or current.lease_until is None:
        return None
    elif end is None:  # its lease is live: its worker may still end it; back when it lapses
        after_s = visibility((current.lease_until - now).total_seconds() + 1)
        claimer.parking.return_later(delivery, after_s)
        return Claim(ClaimOutcome.WAITING, message, delivery, None, current, return_after_s=after_s)
    with contextlib.suppress(ExecutionConflictError):  # it moved meanwhile: that decides
        claimer.ledger.save(end[0], current, end[1])
        claimer.metrics.add("DeletedJobSlotsEnded", 1)
    return None


def _asked_for(message: DispatchMessage, record: Execution, job: Job, store: JobStore) -> bool:
    """A slot the user asked for (a trigger's, a backfill's): its retries and takeovers too, whose
    messages are RETRY or TAKEOVER (QA: a paused job's backfilled slot that failed once was
    recorded SKIPPED, its retry never run). An after() job's slots carry its parents' keys, so a
    parent's trigger marks its children's slots too: those are not asked for; its own trigger's key
    is no parent's (QA28: its retries ended FAILED while paused). A rare read: a paused job's retry."""
    if message.kind in _ASKED_FOR or record.backfill:
        return True
    if MANUAL_MARK not in message.slot or message.kind == MessageKind.CHILD:
        return False
    parents = schedule_of(job).parents  # (none but an after() job's)
    return not any(store.get_execution(job.tenant, parent, message.slot) for parent in parents)


class Claimer:
    """Claims messages.

    Parameters
    ----------
    ledger, turns, leases, after
        Records and timers; overlap turns; leases; what follows an attempt's end.
    queues
        Returns messages that wait.
    clock, config, metrics
        As the worker's.
    signer
        Verifies each message's signature first (None: messages are not verified).
    """

    def __init__(
        self,
        ledger: Ledger,
        queues: QueuePort,
        turns: Turns,
        leases: Leases,
        after: AfterEffects,
        clock: Clock,
        config: WorkerConfig,
        metrics: MetricsSink,
        signer: DispatchSigner | None = None,
    ) -> None:
        self.ledger = ledger
        self.signer = signer
        self.store = ledger.store
        self.queues = queues
        self.turns = turns
        self.leases = leases
        self.after = after
        self.clock = clock
        self.config = config
        self.metrics = metrics
        self.parking = Parking(ledger, queues, turns, clock, config, metrics)
        self.relinks = Relinks(self.store, after, config.layout)

    def claim(
        self, message: DispatchMessage, delivery: Delivery | None = None, time_left_s: float | None = None
    ) -> Claim:
        """Take the attempt ``message.attempt`` of the slot, or say why not.

        Returns
        -------
        Claim
            CLAIMED (run it), or an outcome that says what happened instead; WAITING
            messages have had their visibility set when ``delivery`` was given.
        """
        if self.signer is not None and not self.signer.verify(message):
            return forged(self, message, delivery)
        arrived = self.clock.now()  # (one reading for the checks before the claim)
        if replayed := replayed_copy(message, arrived):
            return forged(self, message, delivery, replayed)
        if message.kind == MessageKind.ALERT:
            return self._alert(message, delivery)
        if message.kind == MessageKind.RELINK:  # a parent's successes for a child linked meanwhile
            reason = self.relinks.check(message, self.clock.now())
            return Claim(ClaimOutcome.DUPLICATE, message, delivery, reason=reason)
        if message.not_before:  # burst smoothing: held until its target's budget lets it go
            held = self._hold(message, delivery)
            if held is not None:
                return held
        early = held_early(self, message, delivery, arrived)
        if early is not None:
            return early
        job = self.job_of(message)
        if job is None and (waiting := gone_jobs_run(self, message, delivery)) is not None:
            return waiting
        if job is None or job.state is JobState.DELETED:
            log.info("job %s is gone; dropping slot %s", message.job_id, message.slot)
            self.metrics.add("StaleMessages", 1)
            return Claim(ClaimOutcome.STALE, message, delivery, reason="job is gone")
        if time_left_s is not None and job.timeout_seconds + FINISH_MARGIN_S > time_left_s:
            self.metrics.add("DeferredForTime", 1)
            reason = "not enough time left in this invocation"
            parked = self.parking.short_of_time(job, message, delivery, reason)
            return parked or self._wait(message, delivery, job, 0, reason, None)
        if message.kind in _MAYBE_NOT_TO_RUN:
            dropped = not_to_run(self, job, message, delivery)
            if dropped is not None:  # a cancelled backfill's slot, a re-sent child slot on an excluded day
                return dropped
        fresh = message.attempt == 1 or message.kind in FRESH_KINDS
        # A first attempt creates the record; on conflict the store returns the record as it
        # is, so the common path costs no read.
        current = None if fresh else self.store.get_execution(message.tenant, message.job_id, message.slot)
        redelivered = delivery is not None and delivery.receive_count > 1
        for _ in range(CLAIM_ROUNDS):
            now = self.clock.now()
            try:
                backfill = fresh and message.kind == MessageKind.BACKFILL
                if backfill and current is not None and current.of_an_earlier_job(job.created_at):
                    # A backfill of a job created again at this id runs the slot the earlier job
                    # ran: its record is replaced (conditionally, as it was read).
                    return self._start(None, job, message, delivery, now, replacing=current)
                # A fresh message with no record: what decide_claim answers at once (a new slot)
                decision = (
                    NEW_SLOT
                    if fresh and current is None
                    else decide_claim(
                        current,
                        message,
                        now,
                        job.retry.max_attempts,
                        job.retry.max_age_seconds,
                        redelivered,
                        message_is_lease=True,
                        message_back=back_of(current, delivery),
                    )
                )
                return self._apply(decision, current, job, message, delivery, now)
            except ExecutionConflictError as exc:
                current = exc.current or self.store.get_execution(
                    message.tenant, message.job_id, message.slot
                )
        log.warning("claim of %s %s kept racing; trying again later", message.job_id, message.slot)
        reason = "claim kept racing"
        parked = self.parking.park(job.version, message, delivery, reason)
        return parked or self._wait(message, delivery, job, ERROR_BACKOFF_S, reason, current)

    def job_of(self, message: DispatchMessage) -> Job | None:
        """The job the message is for: the one it carries when it was sent less than
        ``SPEC_TRUST_S`` ago (no read: the sender read it, and the claim of a fresh message
        needs nothing newer), else read (half cost first; a consistent read only when the
        first may be behind the message)."""
        carried = carried_job(message, self.clock.now())
        if carried is not None:
            return carried
        job = self.store.get_job(message.tenant, message.job_id, consistent=False)
        if job is None or job.version < message.job_version:
            job = self.store.get_job(message.tenant, message.job_id)
        return job

    def _alert(self, message: DispatchMessage, delivery: Delivery | None) -> Claim:
        """An ``alert`` message: a missed slot's alert handed over by the poller (raised once by
        the alert's conditional put), or an alert's sweep (``message.alert``: taken over if its
        worker died while it was SENDING; returned until then while its owner is alive). The
        delivery runs beside, through the notifier's ``later``; the message is deleted."""
        alerter = self.after.notifier.alerter
        job = self.store.get_job(message.tenant, message.job_id, consistent=False)
        if job is None or job.version < message.job_version:  # maybe behind: ask again before dropping
            job = self.store.get_job(message.tenant, message.job_id)
        if job is None or job.state is JobState.DELETED:
            return Claim(ClaimOutcome.STALE, message, delivery, reason="job is gone")
        if message.alert:
            try:
                condition = AlertCondition(message.alert)
            except ValueError:
                return Claim(ClaimOutcome.STALE, message, delivery, job, reason="unknown alert condition")
            wait_s = alerter.sweep(job, message.slot, condition) if alerter is not None else None
            if wait_s is not None:
                return self._wait(message, delivery, job, wait_s + 1, "its alert is still being sent", None)
            return Claim(ClaimOutcome.DUPLICATE, message, delivery, job, reason="alert swept")
        record = self.store.get_execution(message.tenant, message.job_id, message.slot)
        if record is None:
            return Claim(ClaimOutcome.STALE, message, delivery, reason="job or slot is gone")
        if record.status is ExecutionStatus.MISSED and alerter is not None:
            alerter.missed(job, record)
        self.after.notifier.handed_copy(job, record, self.clock.now())  # the job's own bus, if any
        return Claim(ClaimOutcome.DUPLICATE, message, delivery, job, record, reason="missed alert")

    def _cancelled(self, job: Job, record: Execution) -> bool:
        """Whether ``record`` is of a backfill of ``job`` that was cancelled (a dependant's record
        names its parent's backfill, not found under its own job: never judged here)."""
        if not record.backfill:
            return False
        backfill = self.store.get_backfill(job.tenant, job.id, parse_backfill_ref(record.backfill)[0])
        return backfill is not None and backfill.state is BackfillState.CANCELLED

    def _supersede(
        self,
        job: Job,
        message: DispatchMessage,
        delivery: Delivery | None,
        current: Execution | None,
        released_for: int,
        now: datetime,
    ) -> Claim:
        """The slot (or its next attempt) was released for a spec the job no longer has: record
        it SUPERSEDED, never run it against the new spec (:func:`superseded_record`).

        A conditional write like every claim: a conflict goes back to the claim's loop.
        """
        if current is not None and current.status is ExecutionStatus.SUPERSEDED:
            self.metrics.add("StaleMessages", 1)
            # A repeat: its first write may have died before the children's records (conditional
            # puts: written once). Review: the redelivery returned here and they were never made.
            self.after.superseded(job, current, now, message)  # (a repeat: its first may have died)
            return Claim(ClaimOutcome.STALE, message, delivery, job, current, reason="superseded")
        record, expect = superseded_record(job, message, current, released_for, now)
        self.ledger.save(record, current, expect)
        if record.status is not ExecutionStatus.SUPERSEDED:  # an earlier job's, at this id: ended as deleted
            return Claim(ClaimOutcome.STALE, message, delivery, job, record, reason=GONE_NOTE)
        self.metrics.add("SupersededSlots", 1)
        log.info("slot %s of %s was released for version %d: superseded", message.slot, job.id, released_for)
        self.after.apply(job, record, now, message=message)  # the turn goes on, the event, children
        return Claim(
            ClaimOutcome.STALE, message, delivery, job, record, reason="superseded by a newer version"
        )

    def _apply(
        self,
        decision: ClaimDecision,
        current: Execution | None,
        job: Job,
        message: DispatchMessage,
        delivery: Delivery | None,
        now: datetime,
    ) -> Claim:
        action = decision.action
        if action is ClaimAction.START and released_version(current, message) >= job.spec_since:
            return self._start(current, job, message, delivery, now)  # (the usual start, tried first)
        if action is ClaimAction.DROP:
            log.info("dropping %s %s attempt %d: %s", job.id, message.slot, message.attempt, decision.reason)
            self.metrics.add("DuplicatesDropped", 1)
            self.after.ended_copy(job, current, now)  # what its end left undone (a Region lost)
            return Claim(ClaimOutcome.DUPLICATE, message, delivery, job, current, reason=decision.reason)
        if action is ClaimAction.REPAIR:
            assert current is not None
            retry_at = self.after.retry_instant_of(job, current)
            self.after.apply(job, current, now, retry_at=retry_at, repeat=True, message=message)
            return Claim(ClaimOutcome.DUPLICATE, message, delivery, job, current, reason=decision.reason)
        if action is ClaimAction.WAIT:
            # Back when the lease ends (whole seconds, rounded up): not a second past it (QA30).
            return self._wait(message, delivery, job, decision.wait_s, decision.reason, current)
        if action is ClaimAction.EXHAUSTED:
            assert current is not None
            ended, expect = exhausted(current, now)
            self.ledger.save(ended, current, expect)
            self.after.apply(job, ended, now)
            return Claim(ClaimOutcome.EXHAUSTED, message, delivery, job, ended, reason=decision.reason)
        if action in (ClaimAction.START, ClaimAction.TAKEOVER):
            released_for = released_version(current, message)
            if released_for < job.spec_since:
                owed = owed_to_current(job, message, current, action)
                if owed is None:
                    return self._supersede(job, message, delivery, current, released_for, now)
                message, current = owed
        if action is ClaimAction.TAKEOVER:
            assert current is not None
            lost = current.closed_attempt(ExecutionStatus.TIMED_OUT, now, LEASE_LOST_NOTE)
            taken = running(
                current,
                message,
                now,
                self.leases.lease_s(job),
                owner=owner_for(delivery),
                attempt=current.attempt + 1,
                attempts=Execution.bounded([*current.attempts, lost]),
            )
            self.ledger.save(taken, current, owned_by(current))
            self.metrics.add("Takeovers", 1)
            self.after.notifier.started(job, taken, now, None)  # QA: a takeover published no event
            if self.config.lease_timers:  # a heartbeat worker sends it beside the run, as a start's
                self.after.notifier.flush_soon()
            log.warning("took over %s %s as attempt %d", job.id, current.slot, taken.attempt)
            if not self.config.lease_timers:
                # Message mode: this message came back after a crash, and every return costs it
                # receives towards the queue's maxReceiveCount. If it is dead-lettered, a LEASE
                # timer (one write, on this rare path only) lets the poller recover the run.
                self.ledger.put_lease_timer(job, taken, now)
            return self._claimed(job, message, delivery, taken, now)
        return self._start(current, job, message, delivery, now)

    def _start(
        self,
        current: Execution | None,
        job: Job,
        message: DispatchMessage,
        delivery: Delivery | None,
        now: datetime,
        replacing: Execution | None = None,
    ) -> Claim:
        """Start the slot (or record it SKIPPED or QUEUED) over ``current``, or over ``replacing``:
        an earlier job's record at this id, which the write expects as it was read."""
        expect: Expect | None
        if replacing is not None:  # that very record: a worker that replaced it first wrote its owner
            expect = Expect(
                frozenset({replacing.status}), replacing.attempt, replacing.owner, check_owner=True
            )
        else:
            expect = None if current is None else Expect(frozenset({current.status}), current.attempt)
        replaced = current
        if current is not None and current.status in (ExecutionStatus.MISSED, ExecutionStatus.SUPERSEDED):
            current = None  # the record only said why the slot had not run: start it afresh
        # A slot without a record gets a QUEUED one only where it is recorded so (paused, overlap);
        # its start builds the RUNNING record at once (running(None, ...): no copy of the first).
        base = current
        if current is not None and current.status is ExecutionStatus.QUEUED and self._cancelled(job, current):
            # A cancelled backfill's slot waiting for its turn: not started, as its message would
            # not have been (QA: it ran at its turn, after the cancel)
            skipped = skipped_record(current, now, "backfill cancelled")
            self._save_start(job, skipped, replaced, expect)
            self.turns.pass_on(job, skipped, now)
            self.after.notifier.changed(job, skipped, now)
            self.after.skip_dependants(job, skipped, now)
            return Claim(ClaimOutcome.SKIPPED, message, delivery, job, skipped, reason="backfill cancelled")
        if job.state is JobState.PAUSED:
            base = base or new_record(message, ExecutionStatus.QUEUED)
            if not _asked_for(message, base, job, self.store) and not handed_back(base):
                # Pausing stops scheduled starts and retries; a run the user asked for (by hand, or
                # a backfill) still runs, every attempt of it.
                ended = paused_end(self, job, base, replaced, expect, now)
                outcome = (
                    ClaimOutcome.SKIPPED
                    if ended.status is ExecutionStatus.SKIPPED
                    else ClaimOutcome.EXHAUSTED
                )
                return Claim(outcome, message, delivery, job, ended, reason="job is paused")
        first_attempt = message.attempt == 1
        holder = None
        if first_attempt and job.overlap is not Overlap.ALLOW:
            holder = self.turns.take(job, message.slot, now, waits_for_turn(job, message, current))
        if holder is not None:
            return overlap_blocked(self, job, message, delivery, holder, current, replaced, expect, now)
        started = running(
            base,
            message,
            now,
            self.leases.lease_s(job),
            owner=owner_for(delivery),
            attempt=message.attempt,
            blocked_by=None,
        )
        notifier = self.after.notifier
        # A first attempt released after the job's late bound: its alert is made before the start
        # is recorded (a conditional write and its sweep timer, no call out: a worker that dies
        # in between leaves it to the sweep); it is delivered beside the run, never on this path.
        release_delay = first_release_delay(self, job, message, started)
        if release_delay is not None:  # (without one, late() has nothing to compare)
            notifier.late(job, started, release_delay)
        self._save_start(job, started, replaced, expect)
        if first_attempt and message.kind not in _NEVER_LATE:  # a backfill, a turn: late by design
            due = max(started.scheduled_at, message.held_until or started.scheduled_at)  # (smoothed)
            delay_ms = self.turns.start_delay_ms(job, started.slot, due, now)  # (queue: after its wait)
            self.metrics.add("StartDelayMs", delay_ms, "Milliseconds")
        # The started event: buffered, sent with the attempt's end (a Lambda batch), or at once
        # beside the run by a heartbeat worker.
        notifier.started(job, started, now, release_delay)
        if self.config.lease_timers:
            notifier.flush_soon()
        return self._claimed(job, message, delivery, started, now)

    def _save_start(self, job: Job, new: Execution, old: Execution | None, expect: Expect | None) -> None:
        """The write of a first attempt's record. Over a MISSED range record (a backfill started its
        first slot), the rest of the range keeps a record of its own, from the next slot on."""
        self.ledger.save(new, old, expect)
        rest = rest_of_range(job, old) if old is not None and old.slot_count > 1 else None
        if rest is not None:
            with contextlib.suppress(ExecutionConflictError):  # that slot has a record already
                self.ledger.save(rest, None, None)

    def _claimed(
        self, job: Job, message: DispatchMessage, delivery: Delivery | None, started: Execution, now: datetime
    ) -> Claim:
        claim = Claim(ClaimOutcome.CLAIMED, message, delivery, job, started, last_heartbeat=now)
        self.leases.keep_backstop(claim, job, started, now)  # the ECS lanes' backstop LEASE timer
        return claim

    def _wait(
        self,
        message: DispatchMessage,
        delivery: Delivery | None,
        job: Job,
        seconds: float,
        reason: str,
        current: Execution | None,
    ) -> Claim:
        after_s = visibility(seconds)
        self.parking.return_later(delivery, after_s)
        return Claim(
            ClaimOutcome.WAITING, message, delivery, job, current, return_after_s=after_s, reason=reason
        )

    def _hold(self, message: DispatchMessage, delivery: Delivery | None) -> Claim | None:
        """A smoothed message received before its ``not_before``: back to the queue so that it
        comes back between one and two seconds before its instant (visibility counts whole
        seconds: the whole seconds left less :data:`HOLD_EARLY_S`), and claimed then, the worker
        waiting for the instant. The second of slack covers the time a message takes to be
        received again once visible: a message that came back late would be called late, and
        late calls bunch (the receiver would see them closer than the budget allows)."""
        not_before = message.held_until
        if not_before is None:
            return None  # signed but unreadable: run it now rather than never
        seconds = int((not_before - self.clock.now()).total_seconds()) - HOLD_EARLY_S
        if seconds < 1:
            return None
        self.parking.return_later(delivery, seconds)
        self.metrics.add("SmoothedMessagesHeld", 1)
        by = "its tenant's retry rate" if message.kind == MessageKind.RETRY else "its target's rate budget"
        reason = f"held by {by} until {message.not_before}"
        return Claim(ClaimOutcome.WAITING, message, delivery, return_after_s=seconds, reason=reason)
