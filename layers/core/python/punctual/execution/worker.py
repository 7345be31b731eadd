"""The worker facade: claim, run, heartbeat, finish, as one object the shells (Lambda, ECS) use.

It wires the parts together and holds no decision of its own:
:class:`~punctual.execution.claim.Claimer` (the claim and its conditional writes),
:class:`~punctual.execution.lease.Leases` (heartbeat, stop, hand back),
:class:`~punctual.execution.finish.Finisher` (the result, fenced),
:class:`~punctual.execution.after.AfterEffects` (retry timers, delay chains, dependants, turns,
pausing) and :class:`~punctual.execution.sqs.SqsBatch` (the Lambda SQS adapter).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

from punctual.delivery.notifications import Notifier
from punctual.delivery.targets.base import SlotContext, TargetInvoker, TargetResult, secrets_to_sign
from punctual.dispatch.queues import DispatchMessage, MessageKind, QueuePort
from punctual.execution.after import AfterEffects
from punctual.execution.budgets import BUDGET_PACE_MAX_S
from punctual.execution.chain_ends import ChainEnds
from punctual.execution.claim import Claimer
from punctual.execution.deferred_recall import DeferredSlots
from punctual.execution.finish import Finisher
from punctual.execution.inflight import RunsInFlight
from punctual.execution.keeper import LiveClaims
from punctual.execution.lease import Leases, message_kept, owned
from punctual.execution.ports import (
    Claim,
    ClaimOutcome,
    DeadLetterSink,
    Delivery,
    FailureSink,
    FinishResult,
    HandleResult,
    JobPauser,
    MemoryFailureSink,
    WorkerConfig,
    handle_result,
    made_at_once,
)
from punctual.execution.records import Ledger, summary
from punctual.execution.sqs import SqsBatch
from punctual.execution.turns import Turns
from punctual.models import Execution, ExecutionStatus, Job
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink, NullMetrics
from punctual.runtime.settings import Settings
from punctual.runtime.stop_signal import Cancellation
from punctual.security.message_auth import DispatchSigner
from punctual.store.base import JobStore
from punctual.timing.retries import RandomSource, seeded_random

log = logging.getLogger("punctual.execution")

# The longest a claimed, smoothed slot waits in the worker for its instant (the claim returned it
# to the queue when it had a whole second or more to wait).
BUDGET_WAIT_MAX_S = 2.0
# Claims of messages not verified: nothing they name is read or written
_UNREAD = (ClaimOutcome.FORGED, ClaimOutcome.UNVERIFIED)
# A run's outcome: the value of the status it ended in (a lookup, not the enum's ``value`` property)
_OUTCOMES = {status: status.value for status in ExecutionStatus}


class JobServicePauser:
    """:class:`JobPauser` through the job service (the same path as ``POST /jobs/{id}/pause``)."""

    def __init__(self, store: JobStore, queues: QueuePort, clock: Clock, config: WorkerConfig) -> None:
        from punctual.usecases.jobs import JobService

        self.service = JobService(store, queues, clock, config.layout, config.routing)

    def pause(self, tenant: str, job_id: str, reason: str) -> None:
        self.service.pause(tenant, job_id, reason=reason)


class Worker:
    """Claims, runs and finishes executions; the shells (Lambda, ECS) only move messages.

    Parameters
    ----------
    store
        The job store.
    queues
        The FIFO queue port (returning messages, extending visibility, sending dependants).
    invoker
        Runs a job's target.
    clock
        Every ``now`` (and so every lease comparison) comes from here.
    config
        Leases, timers, queues, retention.
    metrics
        Where figures go (the shells forward them to Powertools).
    failures
        Where finally failed executions are reported.
    rng
        ``rng(job_id, slot, attempt)`` gives the jitter source of that attempt's retry.
    signing_secrets
        ``signing_secrets(job)`` gives the job's webhook secrets in plain text.
    pauser
        Pauses a job whose target asked never to be called again (None: logged, not paused).
    signer
        Verifies every message's signature before anything else (None: not verified). The
        queues sign what the worker sends when they were given the same signer.
    dead_letters
        Sends a finally failed slot's event to its job's dead-letter queue (None: not sent).
    notifier
        Execution events and the jobs' alerts (None: neither).
    """

    def __init__(
        self,
        store: JobStore,
        queues: QueuePort,
        invoker: TargetInvoker,
        clock: Clock,
        config: WorkerConfig,
        *,
        metrics: MetricsSink | None = None,
        failures: FailureSink | None = None,
        rng: Callable[[str, str, int], RandomSource] = seeded_random,
        signing_secrets: Callable[[Job], tuple[str, ...]] | None = None,
        pauser: JobPauser | None = None,
        signer: DispatchSigner | None = None,
        dead_letters: DeadLetterSink | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.store = store
        self.queues = queues
        self.invoker = invoker
        self.clock = clock
        self.config = config
        self.metrics = metrics or NullMetrics()
        self.failures = failures or MemoryFailureSink()
        self.signing_secrets = signing_secrets or (lambda job: ())
        self.rng = rng
        route = config.routing.queue_for
        self.ledger = Ledger(store, clock, config)
        self.turns = Turns(store, queues, route)
        self.after = AfterEffects(
            self.ledger,
            queues,
            route,
            self.turns,
            self.metrics,
            self.failures,
            self._rng,
            pauser,
            dead_letters,
            notifier,
        )
        self.notifier = self.after.notifier
        # Deliveries (alerts, a heartbeat worker's started event) run beside the runs: a claim
        # only records them (punctual.delivery.notifications.background).
        self.deliveries = self.notifier.deliver_beside()
        self.leases = Leases(self.ledger, queues, route, clock, config, self.metrics)
        self.finisher = Finisher(self.ledger, self.leases, self.after, clock, config, self.metrics, self._rng)
        self.claimer = Claimer(
            self.ledger, queues, self.turns, self.leases, self.after, clock, config, self.metrics, signer
        )
        self.chain_ends = ChainEnds(store, clock, self.metrics)
        self.deferred_slots = DeferredSlots(self.ledger, self.metrics)
        self.sqs = SqsBatch(self)
        # A tenant's runs past their first lease, counted by their heartbeats and bounded at its cap
        self.in_flight = RunsInFlight(store, clock, config, self.metrics)
        self.leases.on_beat = self.in_flight.beat
        # The claims this worker runs now: a lease keeper (punctual.execution.keeper) heartbeats them.
        self.live = LiveClaims(self.in_flight.ended)

    def _rng(self, job_id: str, slot: str, attempt: int) -> RandomSource:
        return self.rng(job_id, slot, attempt)  # late-bound: ``worker.rng`` may be replaced

    # ------------------------------------------------------------------ the whole path

    def process(
        self,
        message: DispatchMessage,
        delivery: Delivery | None = None,
        time_left_s: float | None = None,
        *,
        settle: bool = True,
    ) -> HandleResult:
        """Claim, run and finish one message.

        Parameters
        ----------
        message
            The delivered message.
        delivery
            Its queue and receipt; needed to return it to the queue (WAITING) and to
            hand it back on shutdown. Without it the caller returns the message itself.
        time_left_s
            What remains of a Lambda invocation: a run that could outlast it is not started
            (the message goes back at once for the next invocation).
        settle
            Wait for the message's deliveries (its alerts) before returning. A batch passes
            False and calls :meth:`settle` once at its end, so that no message of the batch
            waits for another's alert targets.

        Returns
        -------
        HandleResult
            ``ack`` says whether the shell should delete the message.
        """
        timed = log.isEnabledFor(logging.DEBUG)
        began = time.monotonic() if timed else 0.0
        try:
            claim = self.claim(message, delivery, time_left_s)
            if claim.outcome is not ClaimOutcome.CLAIMED:
                return handle_result(claim.outcome.value, claim.ack, claim.return_after_s, claim.execution)
            claimed = time.monotonic() if timed else 0.0
            live = self.live
            live.add(claim)  # heartbeated while it runs (punctual.execution.keeper)
            try:
                result = self.run(claim)
                ran = time.monotonic() if timed else 0.0
                finished = self.finish(claim, result)
            finally:
                live.discard(claim)
            if timed:
                log.debug(
                    "%s %s: claimed in %.0f ms, ran in %.0f ms, finished in %.0f ms",
                    message.job_id,
                    message.slot,
                    (claimed - began) * 1000,
                    (ran - claimed) * 1000,
                    (time.monotonic() - ran) * 1000,
                )
        finally:
            self.notifier.flush_unless_held()  # the slot's events, in as few calls as possible
            if settle:
                self.settle()
        status = finished.status or ExecutionStatus.RUNNING
        outcome = "superseded" if finished.superseded else _OUTCOMES[status]
        return handle_result(outcome, not message_kept(claim, finished), None, finished.execution)

    def settle(self, timeout_s: float | None = None) -> int:
        """Wait for the deliveries still in flight (at most ``timeout_s``); returns how many are
        left (their alerts stay SENDING, and their sweeps finish them)."""
        pending = self.deliveries.pending
        if not pending:  # nothing to wait for, nor to log (a delivery's fatal end still raises)
            return self.deliveries.settle(timeout_s)
        started = time.monotonic()
        left = self.deliveries.settle(timeout_s)
        if pending:
            waited_s = time.monotonic() - started
            # Worth a line when it held the invocation up or left some behind (not every batch's).
            log.log(
                logging.INFO if left or waited_s >= 1.0 else logging.DEBUG,
                "waited %.1f s for %d deliveries beside the runs (%d left)",
                waited_s,
                pending,
                left,
            )
        return left

    def process_sqs_record(self, record: Mapping[str, Any], time_left_s: float | None = None) -> HandleResult:
        """One record of a Lambda SQS event (:meth:`punctual.execution.sqs.SqsBatch.process_record`)."""
        return self.sqs.process_record(record, time_left_s)

    def return_blocked_records(self, event: Mapping[str, Any], failed_ids: set[str]) -> int:
        """See :meth:`punctual.execution.sqs.SqsBatch.return_blocked_records`."""
        return self.sqs.return_blocked_records(event, failed_ids)

    def after_error(self, message: DispatchMessage, delivery: Delivery | None, error: BaseException) -> bool:
        """See :meth:`punctual.execution.parking.Parking.after_error` (True: delete the message).
        Only a message this worker's key signed is parked: parking writes a record and a timer for
        the slot it names, which the poller then sends signed (review: a forged body that raised
        before its check would have been parked); another is dropped (True)."""
        signer = self.claimer.signer
        if signer is not None and not signer.verify(message):
            log.warning(
                "dropped a message that failed and is not signed: %s %s", message.job_id, message.slot
            )
            return True
        return self.claimer.parking.after_error(message, delivery, error)

    # ------------------------------------------------------------------ the steps

    def claim(
        self, message: DispatchMessage, delivery: Delivery | None = None, time_left_s: float | None = None
    ) -> Claim:
        """See :meth:`punctual.execution.claim.Claimer.claim`; the slot that ends its job's chain
        also marks the job COMPLETED (:mod:`punctual.execution.chain_ends`), and a WAITING message
        at its queue's dead-letter limit is sent afresh
        (:meth:`punctual.execution.parking.Parking.resend_waiting`: the claim's ``ack`` says so).
        A claim that read the store recalls the messages returned after its errors
        (:mod:`punctual.execution.recall`)."""
        held = self.in_flight.hold(message, delivery, self.claimer.parking, self.claimer.signer)
        claim = held or self.claimer.claim(message, delivery, time_left_s)
        if claim.job is not None or claim.execution is not None:  # the store answered
            self.claimer.parking.recalls.answered()  # (messages returned after its errors)
        if claim.outcome is ClaimOutcome.CLAIMED:
            self.in_flight.started(claim)  # (a tenant near its cap: counted from its start)
        if claim.outcome is ClaimOutcome.WAITING:  # near the dead-letter limit: sent afresh
            self.claimer.parking.resend_waiting(claim)
        if message.last and claim.outcome not in _UNREAD:
            self._end_chain(claim)
        if claim.outcome is ClaimOutcome.EXHAUSTED or (
            message.attempt > 1
            and claim.execution is not None
            and claim.execution.status is ExecutionStatus.SUPERSEDED
        ):
            self._abandon(claim)
        return claim

    def _end_chain(self, claim: Claim) -> None:
        """Mark the job of a chain's last slot COMPLETED. When that write fails (throttled, a
        conflict through the store's retries) and the claim holds the slot, the slot runs all the
        same and the mark is made again after its finish: raised here, the claim would stand
        RUNNING with no run behind it until its lease lapsed, and the attempt end "lost" (QA24: a
        one-time job of one attempt never ran). Otherwise it is raised: the message comes back."""
        try:
            self.chain_ends.handled(claim.message, claim.job)
        except Exception:
            if not claim.claimed:
                raise
            log.warning(
                "job %s not marked COMPLETED yet: again after its run", claim.message.job_id, exc_info=True
            )
            claim.unmarked = True

    def _abandon(self, claim: Claim) -> None:
        """A slot ended with no attempt left to run it (attempts or max_age used up, its spec
        superseded): an ECS task its last attempt left running, for the next to adopt, is stopped
        (QA: it ran on untracked, never stopped at the timeout, the record saying the slot ended)."""
        job, execution = claim.job, claim.execution
        abandon = getattr(self.invoker, "abandon", None)
        if (
            job is None
            or execution is None
            or getattr(job.target, "type", None) != "ecs"
            or not callable(abandon)
        ):
            return
        if stopped := abandon(job.target, _context_of(job, execution, claim.cancel)):
            log.warning(
                "stopped %d ecs task(s) of %s %s: the slot ended without them",
                stopped,
                job.id,
                execution.slot,
            )
            self.metrics.add("OrphanTasksStopped", stopped)

    def run(self, claim: Claim) -> TargetResult:
        """Invoke the job's target for a claimed attempt (never raises for a target's failure)."""
        job, execution = owned(claim)
        secrets = self._secrets(job, execution.slot)
        if isinstance(secrets, TargetResult):
            return secrets
        ctx = _context_of(job, execution, claim.cancel, secrets, lambda: self.heartbeat_if_due(claim))
        if claim.message.not_before:  # smoothed (else held_until is None: nothing to wait for)
            retry = claim.message.kind == MessageKind.RETRY  # held by its tenant's retry rate, not a target's
            slot = (execution.slot, execution.scheduled_at)
            self._wait_for_budget(
                claim.message.held_until, job, slot, paced=not retry, attempt=execution.attempt
            )
        if not self.leases.held_for_call(claim):  # paused past its lease: taken over meanwhile?
            return TargetResult.stopped_early("not called: the lease was lost before the call")
        started = self.clock.now()
        try:
            result = self.invoker.invoke(job.target, job.payload, ctx)
        except Exception as exc:
            log.exception("target of %s %s raised", job.id, execution.slot)
            result = TargetResult.retryable(summary(f"worker error: {type(exc).__name__}: {exc}"))
        self.metrics.add("RunDurationMs", (self.clock.now() - started).total_seconds() * 1000, "Milliseconds")
        return result

    def _secrets(self, job: Job, slot: str) -> tuple[str, ...] | TargetResult:
        """The secrets an HTTP target's requests are signed with (no other target signs), or, when
        they cannot be read, a failure naming why: nothing is sent unsigned (QA22: the error
        escaped the run, and each attempt ended when its lease lapsed, 'lease expired: the worker
        was lost', the reason nowhere). KMS throttling or unavailable defers the slot without
        counting an attempt (:meth:`punctual.execution.finish.Finisher.finish`); another key or
        KMS refusing fails the attempt. A deferred slot comes back as soon as a secret of its
        tenant opens in this worker again (:mod:`punctual.execution.deferred_recall`)."""
        secrets = secrets_to_sign(job.target, job, self.signing_secrets)
        if isinstance(secrets, TargetResult):
            log.warning("signing secret of %s: %s", job.id, secrets.summary)
            secrets.summary = summary(secrets.summary)
            if secrets.deferred:  # brought back once a secret of its tenant opens again
                self.deferred_slots.deferred(job, slot)
        elif secrets:  # (punctual.execution.deferred_recall)
            self.deferred_slots.opened(job.tenant)
        return secrets

    def _wait_for_budget(
        self,
        instant: datetime | None,
        job: Job,
        slot: tuple[str, datetime],
        paced: bool = True,
        attempt: int = 1,
    ) -> None:
        """A smoothed slot claimed before its instant (the claim returns a message to the queue
        to come back one to two seconds early): wait for the instant its target's rate budget
        gave it, so the call is never early (:mod:`punctual.dispatch.smoothing`).

        A smoothed slot claimed after its instant (its message reached this worker late) is not
        called at once either: it takes a new instant of its target's budget (its own, else the
        deployment's for its host), within its lateness (its own, else the deployment's), reserved
        like the poller's (:meth:`punctual.execution.budgets.WorkerBudgets.late_instant`), so late
        messages of several workers do not reach the target together. Not ``paced``: a retry held by
        its tenant's retry rate (:mod:`punctual.dispatch.polling.retry_pace`), which waits for its
        instant, or reached after it takes a new one of its tenant's retry grid
        (:meth:`punctual.execution.budgets.WorkerBudgets.late_retry`)."""
        if instant is None:
            return  # not smoothed, or signed but unreadable: the claim ran it at once too
        rate = self.after.budgets.rate(job) if paced else None
        if rate:
            instant = self.after.budgets.late_instant(job, slot, instant, rate, self.clock.now())
        elif not paced:
            instant = self.after.budgets.late_retry(job, slot, attempt, instant, self.clock.now())
            rate = self.config.max_retries_per_second or None
        wait_s = (instant - self.clock.now()).total_seconds()
        if wait_s > 0:
            self.clock.sleep(min(wait_s, BUDGET_PACE_MAX_S if rate else BUDGET_WAIT_MAX_S))

    def heartbeat(self, claim: Claim, message: bool = True) -> bool:
        """See :meth:`punctual.execution.lease.Leases.heartbeat`."""
        return self.leases.heartbeat(claim, message)

    def heartbeat_if_due(self, claim: Claim) -> bool:
        """See :meth:`punctual.execution.lease.Leases.heartbeat_if_due`."""
        return self.leases.heartbeat_if_due(claim)

    def stop(self, claim: Claim, reason: str) -> bool:
        """See :meth:`punctual.execution.lease.Leases.stop`."""
        return self.leases.stop(claim, reason)

    def release(self, claim: Claim) -> bool:
        """See :meth:`punctual.execution.lease.Leases.release`."""
        return self.leases.release(claim)

    def finish(self, claim: Claim, result: TargetResult) -> FinishResult:
        """See :meth:`punctual.execution.finish.Finisher.finish`; then the COMPLETED mark its claim
        could not make (raised again: the message comes back, and its redelivery marks the job)."""
        finished = self.finisher.finish(claim, result)
        if claim.unmarked:
            claim.unmarked = False
            self.chain_ends.handled(claim.message, claim.job)
        return finished


def _context_of(job: Job, execution: Execution, cancel: Cancellation, *run: Any) -> SlotContext:
    """The :class:`SlotContext` of ``execution``'s attempt of ``job``; ``run``: its signing secrets
    and heartbeat (none, and a lease already gone, for a slot being let go of)."""
    secrets, heartbeat = run or ((), _gone)
    return slot_context(
        job.id, job.tenant, execution.slot, execution.scheduled_at, execution.attempt,
        float(job.timeout_seconds), secrets, heartbeat, cancel,
    )  # fmt: skip


def _gone() -> bool:
    return False


def slot_context(
    job_id: str,
    tenant: str,
    slot: str,
    scheduled_at: datetime,
    attempt: int,
    timeout_s: float,
    signing_secrets: tuple[str, ...],
    heartbeat: Callable[[], bool],
    cancel: Cancellation,
) -> SlotContext:
    """``SlotContext(...)`` of every field, its ``__dict__`` set at once: a frozen dataclass's
    ``__init__`` sets each of its ten fields through ``object.__setattr__`` (three times the
    time, once a run)."""
    return made_at_once(
        SlotContext,
        {
            "job_id": job_id,
            "tenant": tenant,
            "slot": slot,
            "scheduled_at": scheduled_at,
            "attempt": attempt,
            "timeout_s": timeout_s,
            "signing_secrets": signing_secrets,
            "heartbeat": heartbeat,
            "cancel": cancel,
            "target_field": "target",
        },
    )


def default_invoker(settings: Settings, clock: Clock) -> TargetInvoker:
    """The production target invoker (imported late: adapters pull in their own modules)."""
    from punctual.delivery.targets import DefaultTargetInvoker

    return DefaultTargetInvoker(None, settings, clock=clock)


def default_dead_letters(settings: Settings, metrics: MetricsSink | None = None) -> DeadLetterSink:
    """Jobs' dead-letter queues, sent to as each job's target role under the tenant boundary
    (imported late, like the invoker)."""
    from punctual.delivery.targets import DefaultTargetInvoker
    from punctual.execution.dead_letters import SqsDeadLetters
    from punctual.security.boundary import Boundary

    return SqsDeadLetters(DefaultTargetInvoker.client_factory(settings), Boundary.of(settings), metrics)


def default_signing_secrets(settings: Settings) -> Callable[[Job], tuple[str, ...]]:
    """Decrypts a job's webhook signing secret (cached: a stored form decrypts the same forever)."""
    from punctual.security.signing_secrets import SecretCipher, SecretsError, job_binding

    try:
        cipher = SecretCipher(settings)
    except SecretsError:
        return lambda job: ()

    @lru_cache(maxsize=4096)
    def decrypt(stored: str, tenant: str, job_id: str) -> str:
        # Bound to the job: a ciphertext copied onto another job's item does not decrypt.
        return cipher.decrypt(stored, job_binding(tenant, job_id))

    def secrets_of(job: Job) -> tuple[str, ...]:
        # Current first; during a rotation the previous one signs too.
        current, previous = job.signing_secret_enc, job.signing_secret_prev_enc
        if not current and not previous:
            return ()  # (most jobs: no secret, nothing to build a tuple of, each run)
        return tuple(decrypt(s, job.tenant, job.id) for s in (current, previous) if s)

    return secrets_of
