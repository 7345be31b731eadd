"""The lease of a running attempt: heartbeat, stop, and hand back on shutdown.

A run holds two leases of seconds, on both lanes:

* **Its message's**, the *message lease* (``message_lease_s``, 7 s): the visibility of every
  message a worker holds, running or not (a Lambda batch's, set as it arrives,
  :mod:`punctual.execution.batch`; an ECS task's, set by its receive), renewed by the lease keeper
  every 4 s while the worker holds it (:mod:`punctual.execution.keeper`), by SQS's clock alone.
  The claim names the message's receive in the record's owner
  (:func:`punctual.execution.records.claim_owner`), so **the run's own message received again is
  its lease lapsed** (:func:`~punctual.execution.records.message_back`): the next worker takes the
  run over at once, whatever the record says and whatever the two workers' clocks. A worker that
  dies has its runs started again within the message lease of its death. The holder, for its
  part, lets go of a run before its message could be back: a renewal failing until
  :data:`LAPSE_SLACK_S` before the visibility it last set could end stops the run (the Lambda
  lane), or lets the message go (the ECS lanes: deleted, the run goes on under its backstop
  LEASE timer), and a run paused past it does not call its target (:meth:`Leases.held_for_call`).
* **Its record's** (``lease_s``, 12 s): ``lease_until``, written by the claim and extended by
  heartbeats every :func:`beat_interval_s` (5 s) while the run lasts: a conditional write on owner
  and attempt, by which a worker whose run was taken over learns it. It is what judges the run
  for every reader but its own message: a copy of the message (the pollers' takeover, a re-send,
  a Region's), the pollers' checks and the backstop LEASE timers. Runs shorter than the first
  heartbeat interval write nothing more.

**Clock skew.** ``lease_until`` is the holder's clock; a worker that reads it to take the run
over compares it with its own, which may be :data:`~punctual.runtime.settings.CLOCK_SKEW_S` ahead
and see the lease end that much early. So a heartbeat comes the skew and :data:`BEAT_SLACK_S`
before the lease ends, and a holder whose store fails stops its run before the earliest instant
another worker may see the lease lapsed (QA29: with the 8 s lease beaten every 5 s, a worker 2.5 s
ahead of a live run's took it over and called the target a second time). The message's lease has
no such margin to keep: one clock, SQS's, times it.

The ECS lanes (``lease_timers``) also keep a *backstop*: a LEASE timer due ``backstop_s`` ahead
(the far threshold plus a minute, so it lands in a far bucket, never in the few near ones a
burst would crowd), re-written every half of that while the run lasts. It recovers a run whose
message was lost or let go of (SQS's 12 hours of visibility, a stale receipt, renewals that
failed); the message recovers every other death in seconds. The Lambda lane's message always
comes back (at worst after the queue's visibility timeout): it writes no backstop.

A run is *stopped* (:meth:`Leases.stop`) when its lease is lost, or when the worker shuts down:
``claim.cancel`` is set, the target adapter cuts its call short, and the run is handed back
(:meth:`Leases.release`) as a released attempt that another worker takes over at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from botocore.exceptions import ClientError

from punctual.delivery.targets.base import transient_aws_error
from punctual.dispatch.queues import THROTTLE_CODES, MessageKind, QueuePort, message_for
from punctual.execution.ports import Claim, ClaimOutcome, Delivery, FinishResult, WorkerConfig
from punctual.execution.records import RELEASED_NOTE, Ledger, owned_by
from punctual.models import Execution, ExecutionStatus, IllegalTransition, Job
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink
from punctual.runtime.settings import CLOCK_SKEW_S
from punctual.store.base import ExecutionConflictError

log = logging.getLogger("punctual.execution")

SHUTDOWN = "shutdown"  # Claim.stop_reason of a run stopped because its worker shuts down
# A heartbeat lands this long before a worker whose clock is CLOCK_SKEW_S ahead of its holder's
# sees the lease end: the lease keeper's tick (a beat comes up to a second after it is due) and a
# write's time. With the 12 s lease, a run is first heartbeated 5 s after its claim, then each 5 s.
BEAT_SLACK_S = 2.0
# A heartbeat that failed is tried again within this (the lease keeper's tick)
BEAT_RETRY_S = 1.0
# A run lets go of its message (stops, or on the ECS lanes lets the message go) this long before
# the message's visibility, last set by a request sent at a known instant, could end: the message
# back is a takeover (punctual.execution.records.message_back), whatever the record says.
LAPSE_SLACK_S = 0.5


def beat_interval_s(lease_s: float) -> float:
    """Seconds between heartbeats of a lease of ``lease_s``: the lease less the clock skew between
    nodes and :data:`BEAT_SLACK_S` (at least a second), so runs shorter than this never heartbeat."""
    return max(1.0, lease_s - CLOCK_SKEW_S - BEAT_SLACK_S)


def seen_lapsed_from(lease_until: datetime) -> datetime:
    """The earliest instant, by the holder's clock, at which another worker may see a lease ending
    at ``lease_until`` lapsed (its clock up to :data:`CLOCK_SKEW_S` ahead) and take the run over."""
    return lease_until - timedelta(seconds=CLOCK_SKEW_S)


def owned(claim: Claim) -> tuple[Job, Execution]:
    """The job and the RUNNING record a CLAIMED claim holds (a caller bug otherwise)."""
    if claim.job is None or claim.execution is None or claim.outcome is not ClaimOutcome.CLAIMED:
        raise IllegalTransition(claim.execution.status if claim.execution else None, ExecutionStatus.RUNNING)
    return claim.job, claim.execution


def message_kept(claim: Claim, finished: FinishResult) -> bool:
    """Whether ``claim``'s message is not to be deleted after its run: handed back at shutdown,
    let go of (detached), or :func:`left_to_lapse` for the takeover."""
    return claim.released or claim.detached or left_to_lapse(claim, finished)


def left_to_lapse(claim: Claim, finished: FinishResult) -> bool:
    """Whether ``claim``'s run was stopped because its own lease could not be renewed (the store
    failed until it would lapse) and no other worker holds the slot yet: the record is still this
    attempt's, RUNNING. Its message must then come back when its visibility lapses, for the next
    worker to take the run over within the lease; deleted, nothing brought the slot back but a
    backstop timer minutes later (ECS lane) or the auditor (Lambda lane) (QA)."""
    stored, mine = finished.execution, claim.execution
    return (
        claim.lost
        and finished.superseded
        and stored is not None
        and mine is not None
        and stored.status is ExecutionStatus.RUNNING
        and (stored.owner, stored.attempt) == (mine.owner, mine.attempt)
    )


class Leases:
    """Keeps, loses and hands back the leases of running attempts.

    Parameters
    ----------
    ledger
        Records and timers.
    queues, route
        The message of a claim (visibility, delete) and where a handed-back attempt goes.
    clock, config, metrics
        As the worker's.
    """

    def __init__(
        self,
        ledger: Ledger,
        queues: QueuePort,
        route: Callable[[Job], str],
        clock: Clock,
        config: WorkerConfig,
        metrics: MetricsSink,
    ) -> None:
        self.ledger = ledger
        self.queues = queues
        self.route = route
        self.clock = clock
        self.config = config
        self.metrics = metrics
        # Each heartbeat's run, counted for its tenant's cap (the worker sets it: execution.inflight)
        self.on_beat: Callable[[Claim, datetime], None] | None = None
        # Until when a message the lease keeper holds is surely hidden; None when it holds none
        # such (the keeper sets it: execution.keeper.LeaseKeeper.held_until)
        self.held_until: Callable[[Delivery], datetime | None] | None = None
        # Hand the keeper a message a heartbeat hid, to renew from then on (the keeper sets it)
        self.hold: Callable[[Delivery, datetime], None] | None = None

    def lease_s(self, job: Job) -> int:
        """One lease slice (both lanes), extended by heartbeats while the run lasts."""
        return self.config.lease_s

    @property
    def beat_s(self) -> float:
        return beat_interval_s(self.config.lease_s)

    def heartbeat(self, claim: Claim, message: bool = True) -> bool:
        """Extend the lease (and, with ``message``, the message's visibility); False when the
        lease was lost.

        Conditional on owner and attempt: a worker whose execution was taken over learns it
        here, and its run is stopped (``claim.cancel``). ``message=False``: the caller renews the
        message itself (a Lambda batch renews its messages together, :mod:`.keeper`).

        A claim whose lock is held is not waited for: its record is being written (its finish,
        which tries again for ``finish_retry_s`` while the store fails, or a heartbeat already
        under way), and one keeper thread beats every run of the process (QA: a finish retrying
        its write held the keeper up, and the other runs' leases lapsed while they ran).
        """
        if not claim.lock.acquire(blocking=False):
            return claim.live
        try:
            return self._heartbeat(claim, message)
        finally:
            claim.lock.release()

    def _heartbeat(self, claim: Claim, message: bool) -> bool:
        """:meth:`heartbeat` with the claim's lock held."""
        if not claim.live:
            return False
        job, current = owned(claim)
        now = self.clock.now()
        extended = current.model_copy(update={"lease_until": now + timedelta(seconds=self.lease_s(job))})
        try:
            self.ledger.save(extended, current, owned_by(current))
        except ExecutionConflictError:
            self._lose(claim, "was lost")
            return False
        except Exception:
            # The store is failing. While the next try comes before any other worker may see
            # the lease lapsed (its clock ahead by the skew), it tries again; past that another
            # worker may take the slot over, so this run gives up now: it is stopped and its
            # result is never recorded.
            lapses = current.lease_until
            if lapses is not None and now + timedelta(seconds=BEAT_RETRY_S) >= seen_lapsed_from(lapses):
                self._lose(claim, "could not be extended before it lapses")
                return False
            raise
        claim.execution = extended
        claim.last_heartbeat = now
        self.metrics.add("Heartbeats", 1)
        if self.on_beat is not None:
            self.on_beat(claim, now)
        self.keep_backstop(claim, job, extended, now)
        delivery = claim.delivery
        if message and delivery is not None and not claim.detached and self._held(delivery) is None:
            return self._hide(claim, delivery, now)
        return True

    def _held(self, delivery: Delivery) -> datetime | None:
        """Until when the lease keeper keeps ``delivery``'s message hidden; None: not held there."""
        return None if self.held_until is None else self.held_until(delivery)

    def _hide(self, claim: Claim, delivery: Delivery, now: datetime) -> bool:
        """A heartbeat's renewal of a message the lease keeper does not hold: hidden a message
        lease more. The message back is a takeover (:func:`punctual.execution.records.message_back`),
        so a renewal that fails when the next beat would come after it lapses stops the run."""
        lease = self.config.message_visibility_s
        try:
            self.queues.change_visibility(delivery.queue_url, delivery.receipt, lease)
        except Exception as exc:
            if _refused_for_now(exc):
                # A throttle, a 5xx, a lost connection: tried again at the next beat while that
                # comes before the message is back (QA27: one such answer let go of the message for
                # good, and a run lost later was recovered by its LEASE timer, minutes on)
                until = claim.message_until
                if until is not None and now + timedelta(seconds=self.beat_s + LAPSE_SLACK_S) >= until:
                    self.message_lapsing(claim)
                    return False
                log.warning(
                    "could not renew %s %s's message: next beat", claim.message.job_id, claim.message.slot
                )
                return True
            # SQS caps a message's visibility at 12 hours in all. Past that (or if the receipt
            # went stale) let go of the message: the LEASE timers recover the run.
            log.info(
                "detaching %s %s from its message", claim.message.job_id, claim.message.slot, exc_info=True
            )
            self.message_lapsing(claim)
            return claim.live
        claim.message_until = now + timedelta(seconds=lease)
        if self.hold is not None:  # renewed by the keeper from now: each step tries again
            self.hold(delivery, now)
        return True

    def message_lapsing(self, claim: Claim) -> None:
        """``claim``'s message could not be kept hidden and may come back, which is a takeover of
        its run: on the ECS lanes (``lease_timers``) the message is let go of (deleted) and the run
        goes on, its backstop LEASE timer recovering it should its worker die; otherwise (the
        Lambda lane), or when the delete fails, the run is stopped now."""
        if self.config.lease_timers and self._detach(claim):
            log.warning(
                "%s %s let go of its message: its backstop timer keeps it",
                claim.message.job_id,
                claim.message.slot,
            )
            return
        self._lose(claim, "could not keep its message hidden")

    def heartbeat_if_due(self, claim: Claim) -> bool:
        """Beat when :attr:`beat_s` has passed since the claim or the last beat; report the lease.

        Called by the adapters while they wait and by the lease keeper's thread
        (:mod:`punctual.execution.keeper`) for every live claim, about once a second.

        A store that fails while the lease still outlasts the next beat is reported as the lease
        held (the next call tries again; one that fails until the lease would lapse loses it).
        QA: raised into the ECS adapter's poll loop, one throttled write ended an hour-long run as
        a "worker error", its task left running and the attempt counted.
        """
        if not claim.live:
            return False
        if self.due(claim):
            return self._beat_or_hold(claim, lambda: self.heartbeat(claim), "heartbeat")
        return True

    def held_for_call(self, claim: Claim) -> bool:
        """Whether ``claim`` still holds its lease as its target is about to be called.

        A claim whose last beat is :attr:`beat_s` old or more (its process was paused between the
        claim and the call: SIGSTOP, a frozen host, a long wait for its rate budget) beats first,
        after any beat under way, so that a run whose slot was taken over meanwhile learns it before
        it calls, not after (QA: resumed 20 s on, it called the target for its superseded attempt
        before its lease keeper's thread found the takeover). A store that fails while the lease
        still outlasts the next beat does not stop the call (the keeper tries again). The record
        alone is renewed: the message's visibility stays the lease keeper's (a Lambda batch renews
        its messages together).
        """
        with claim.lock:
            if not claim.live:
                return False
            if self._message_lapsed(claim):
                self._lose(claim, "lapsed with its message's visibility before its call")
                return False
            if not self.due(claim):
                return True
            return self._beat_or_hold(claim, lambda: self._heartbeat(claim, False), "renewal before its call")

    def _message_lapsed(self, claim: Claim) -> bool:
        """Whether ``claim``'s message may be visible again by now (its renewals stalled: a process
        paused): its return would be a takeover."""
        delivery = claim.delivery
        if delivery is None or claim.detached:
            return False
        until = self._held(delivery) or claim.message_until
        return until is not None and self.clock.now() >= until - timedelta(seconds=LAPSE_SLACK_S)

    @staticmethod
    def _beat_or_hold(claim: Claim, beat: Callable[[], bool], what: str) -> bool:
        """``beat()``'s answer; when the store fails (a lease that still outlasts the next beat:
        :meth:`_heartbeat` raises only then), the lease is still held and the next beat tries again."""
        try:
            return beat()
        except Exception:
            log.warning(
                "lease %s of %s %s failed; tried again at the next beat",
                what,
                claim.message.job_id,
                claim.message.slot,
                exc_info=True,
            )
            return claim.live

    def due(self, claim: Claim) -> bool:
        """:attr:`beat_s` has passed since the claim or its last beat."""
        last = claim.last_heartbeat
        return last is None or (self.clock.now() - last).total_seconds() >= self.beat_s

    def keep_backstop(self, claim: Claim, job: Job, execution: Execution, now: datetime) -> None:
        """ECS lanes: (re)write the backstop LEASE timer when the last one is due within half of
        ``backstop_s`` (at the claim, then about every ``backstop_s / 2`` of the run). Never raises:
        a write that fails is tried again at the next heartbeat."""
        if not self.config.lease_timers:
            return
        backstop = self.config.backstop_s
        due = claim.backstop_due
        if due is not None and (due - now).total_seconds() > backstop / 2:
            return
        due = now + timedelta(seconds=backstop)
        try:
            self.ledger.put_lease_timer(job, execution, now, due)
        except Exception:
            # A backstop: the run's lease is its message's, renewed by the heartbeats, and the next
            # one writes it (QA24: raised at the claim, the RUNNING record stood with no run behind
            # it, and with no attempt left the slot ended TIMED_OUT, never run)
            log.warning("backstop of %s %s not written yet", job.id, execution.slot, exc_info=True)
            return
        claim.backstop_due = due

    def stop(self, claim: Claim, reason: str) -> bool:
        """Ask a running attempt to stop now (``claim.cancel``); False when it is no longer live.

        The run's adapter cuts its call short; :meth:`punctual.execution.finish.Finisher.finish`
        then hands the attempt back (``reason`` :data:`SHUTDOWN`) instead of recording a result.
        """
        with claim.lock:
            if not claim.live:
                return False
            claim.stop_reason = reason
        claim.cancel.set()
        return True

    def _lose(self, claim: Claim, how: str) -> None:
        claim.lost = True
        claim.cancel.set()  # stop the run: another worker may take the slot over
        self.metrics.add("LeasesLost", 1)
        log.warning("lease of %s %s %s: the run is stopped", claim.message.job_id, claim.message.slot, how)

    def _detach(self, claim: Claim) -> bool:
        """Let go of ``claim``'s message (deleted: it never comes back); whether it was."""
        delivery = claim.delivery
        if delivery is not None:
            # At once, not batched (an ECS task's BatchedDeletes queues a delete and never raises):
            # a delete that fails must stop the run before its message is back (review)
            delete = getattr(self.queues, "delete_now", self.queues.delete)
            try:
                delete(delivery.queue_url, delivery.receipt)
            except Exception:
                log.warning("could not delete a detached message", exc_info=True)
                return False
        claim.detached = True
        return True

    def release(self, claim: Claim) -> bool:
        """Hand a running attempt back (shutdown): another worker takes it over at once.

        The record goes RUNNING -> RETRY_WAIT (the attempt is listed as released and does
        not count against ``max_attempts``), the next attempt's message is sent, and this
        one is deleted so the job's FIFO group moves on. A late finish of this run is then
        fenced. If the send fails, a RETRY timer due now does it through the poller.

        Returns
        -------
        bool
            False when the attempt had already ended or been taken over.
        """
        with claim.lock:
            if not claim.live:
                return False
            job, current = owned(claim)
            now = self.clock.now()
            released = current.ended(
                ExecutionStatus.RETRY_WAIT, now, RELEASED_NOTE, releases=current.releases + 1
            )
            try:
                self.ledger.save(released, current, owned_by(current))
            except ExecutionConflictError:
                claim.lost = True
                return False
            claim.execution = released
            claim.released = True
        claim.cancel.set()
        self.metrics.add("ExecutionsReleased", 1)
        self._hand_on(claim, job, released, now)
        return True

    def _hand_on(self, claim: Claim, job: Job, released: Execution, now: datetime) -> None:
        next_message = message_for(
            job, released.slot, released.scheduled_at, released.attempt + 1, MessageKind.TAKEOVER, now
        )
        delivery = claim.delivery
        try:
            self.queues.send(delivery.queue_url if delivery else self.route(job), [next_message])
        except Exception:
            log.warning(
                "could not send the takeover of %s %s; leaving it to a timer",
                job.id,
                released.slot,
                exc_info=True,
            )
            self.ledger.put_retry_timer(job, released, now, now)
            return
        if delivery is not None and not claim.detached:
            try:
                self.queues.delete(delivery.queue_url, delivery.receipt)
            except Exception:
                log.warning("could not delete a released message", exc_info=True)


def _refused_for_now(exc: Exception) -> bool:
    """Whether SQS refused a message's renewal for a moment (a throttle, a 5xx, a lost connection),
    not for good (the 12-hour cap, a stale receipt)."""
    throttled = isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") in THROTTLE_CODES
    return throttled or transient_aws_error(exc)
