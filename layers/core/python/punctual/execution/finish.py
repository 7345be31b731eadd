"""The end of a run: its result recorded, fenced on owner and attempt, then its after-effects.

A result is written only by the attempt's owner (a conditional write on status, attempt and
owner); a worker that lost its lease gets ``superseded`` and its result is noted on the slot's
attempt list once the slot has ended, never applied. A write that fails for another reason (the
store throttles or errs) is tried again for ``finish_retry_s``: a result that is never recorded
is run again by the takeover that follows. A run stopped because its worker shuts down is handed
back (:meth:`punctual.execution.lease.Leases.release`), not recorded as a failure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from punctual.delivery.targets.base import Outcome, TargetResult
from punctual.execution.after import AfterEffects
from punctual.execution.lease import SHUTDOWN, Leases, owned
from punctual.execution.ports import Claim, FinishResult, WorkerConfig, finish_result
from punctual.execution.records import (
    AGE_CUT_NOTE,
    DEFERRED_NOTE,
    MAX_SUMMARY_CHARS,
    Ledger,
    owned_by,
    summary,
)
from punctual.models import AttemptRecord, Execution, ExecutionStatus, IllegalTransition
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink
from punctual.store.base import ExecutionConflictError, Expect
from punctual.timing.retries import RandomSource, deferral_at, next_retry_at

log = logging.getLogger("punctual.execution")

FINISH_RETRY_FIRST_S = 0.2
FINISH_RETRY_MAX_S = 5.0


class Finisher:
    """Records results.

    Parameters
    ----------
    ledger, leases, after
        Records; the hand-back of a stopped run; what follows an end.
    clock, config, metrics
        As the worker's.
    rng
        ``rng(job_id, slot, attempt)``: the jitter of that attempt's retry.
    """

    def __init__(
        self,
        ledger: Ledger,
        leases: Leases,
        after: AfterEffects,
        clock: Clock,
        config: WorkerConfig,
        metrics: MetricsSink,
        rng: Callable[[str, str, int], RandomSource],
    ) -> None:
        self.ledger = ledger
        self.leases = leases
        self.after = after
        self.clock = clock
        self.config = config
        self.metrics = metrics
        self.rng = rng

    def finish(self, claim: Claim, result: TargetResult) -> FinishResult:
        """Record the run's outcome, fenced on owner and attempt, then its after-effects.

        Raises
        ------
        IllegalTransition
            The claim does not hold a RUNNING attempt (a caller bug).
        """
        job, current = owned(claim)
        # Cut short because this worker shuts down: not the target's answer. Hand it back.
        if result.stopped and claim.stop_reason == SHUTDOWN and self.leases.release(claim):
            return finish_result(ExecutionStatus.RETRY_WAIT, False, claim.execution)
        now = self.clock.now()
        deferred = self._deferred(claim, result, now)
        status, retry_at, text, ended = deferred or self._ended(claim, result, now)
        with claim.lock:
            if claim.finished:
                raise IllegalTransition(current.status, status)
            superseded: Execution | None = None
            if claim.lost or claim.released:
                fenced = True  # known already: no write can succeed
                superseded = self.ledger.store.get_execution(job.tenant, job.id, current.slot)
            else:
                fenced, superseded = self._record(ended, current)
            if fenced:
                claim.lost = True
                self._note_superseded(claim, ended.attempts[-1].status, text, superseded)
                return finish_result(None, True, superseded)
            claim.execution = ended
            claim.finished = True
        self.after.apply(job, ended, now, retry_at=retry_at)
        if result.pause_job:
            self.after.pause(job, f"the target asked to stop: {text}")
        return finish_result(status, False, ended, retry_at)

    def _deferred(
        self, claim: Claim, result: TargetResult, now: datetime
    ) -> tuple[ExecutionStatus, datetime, str, Execution] | None:
        """A run whose target was not called because the scheduler's own infrastructure failed for
        a moment (``result.deferred``: KMS throttling, STS unavailable) is handed back, as a run
        at shutdown is: RETRY_WAIT, the attempt listed as released (not counted against
        ``max_attempts``, nor its retry's backoff), tried again after a short growing wait
        (:func:`punctual.timing.retries.deferral_at`), within ``max_age_seconds`` (its claim's age
        check applies) and at most ``MAX_DEFERRALS`` times; past them (None), the attempt counts."""
        job, current = owned(claim)
        if not result.deferred:
            return None
        due = deferral_at(
            current.releases + 1,
            now,
            current.retry_origin,
            job.retry.max_age_seconds,
            self.rng(job.id, current.slot, current.attempt),
        )
        if due is None:
            return None
        text = summary(DEFERRED_NOTE + result.summary)
        ended = current.ended(
            ExecutionStatus.RETRY_WAIT, now, text, result=text, releases=current.releases + 1
        )
        return ExecutionStatus.RETRY_WAIT, due, text, ended

    def _ended(
        self, claim: Claim, result: TargetResult, now: datetime
    ) -> tuple[ExecutionStatus, datetime | None, str, Execution]:
        """The record of the run ended by ``result`` under the job's retry policy: its status,
        its retry's instant (None: none), the summary and the record."""
        job, current = owned(claim)
        succeeded = result.outcome is Outcome.SUCCEEDED
        attempt_status = (
            ExecutionStatus.SUCCEEDED
            if succeeded
            else (ExecutionStatus.TIMED_OUT if result.timed_out else ExecutionStatus.FAILED)
        )
        retry_at: datetime | None = None
        if result.outcome is Outcome.RETRYABLE and not result.pause_job:
            retry_at = next_retry_at(
                job.retry,
                failed_attempt=current.attempt - current.releases,
                failed_at=now,
                scheduled_at=current.retry_origin,
                rng=self.rng(job.id, current.slot, current.attempt),
                retry_after_s=result.retry_after_s,
            )
        status = ExecutionStatus.RETRY_WAIT if retry_at is not None else attempt_status
        text = summary(result.summary)
        if (
            result.outcome is Outcome.RETRYABLE
            and not result.pause_job
            and retry_at is None
            and current.attempt - current.releases < job.retry.max_attempts  # an attempt was left
        ):
            text = f"{text[: MAX_SUMMARY_CHARS - len(AGE_CUT_NOTE) - 2]}; {AGE_CUT_NOTE}"  # kept whole
        ended = current.ended(
            status,
            now,
            None if succeeded else text,
            attempt_status=attempt_status,
            result=text or None,
            retry_after_s=result.retry_after_s if retry_at is not None else None,
        )
        return status, retry_at, text, ended

    def _record(self, ended: Execution, current: Execution) -> tuple[bool, Execution | None]:
        """Write the ended attempt, trying again while the store fails (not on a conflict) for
        ``finish_retry_s`` from its first try. Read here, under the claim's lock, not the finish's
        ``now``: a heartbeat holds that lock through its own write, slow when the store fails,
        and the wait for it would eat into the window (review 19).

        Returns
        -------
        (fenced, current)
            ``fenced``: another owner holds the slot (``current`` as it is then).
        """
        began = self.clock.now()  # (its timestamp taken only when a write fails)
        give_up: float | None = None
        pause = FINISH_RETRY_FIRST_S
        failed_before = False
        while True:
            try:
                self.ledger.save(ended, current, owned_by(current))
                return False, None
            except ExecutionConflictError as exc:
                if failed_before and _is_own_write(exc.current, ended):
                    return False, None  # an earlier try was written after all (its answer was lost)
                return True, exc.current
            except IllegalTransition:
                raise
            except Exception:
                if give_up is None:
                    give_up = began.timestamp() + self.config.finish_retry_s
                if self.clock.now().timestamp() + pause > give_up:
                    raise
                failed_before = True
                self.metrics.add("FinishWriteRetries", 1)
                log.warning("recording %s %s failed; trying again", ended.job_id, ended.slot, exc_info=True)
                self.clock.sleep(pause)
                pause = min(pause * 2, FINISH_RETRY_MAX_S)

    def _note_superseded(
        self, claim: Claim, status: ExecutionStatus, text: str, current: Execution | None
    ) -> None:
        """Record a fenced-off worker's result on the slot's attempt list, never as the result."""
        owner = claim.execution.owner if claim.execution else None
        attempt = claim.execution.attempt if claim.execution else claim.message.attempt
        self.metrics.add("SupersededResults", 1)
        log.warning(
            "superseded result of %s %s attempt %d (%s: %s) not applied",
            claim.message.job_id,
            claim.message.slot,
            attempt,
            status.value,
            text,
        )
        if current is None or not current.status.terminal:
            return  # a live owner writes this record: appending now would race its writes
        note = f"late result {status.value}: {text} (superseded)"
        attempts = list(current.attempts)
        for index, record in enumerate(attempts):
            if record.attempt == attempt and record.owner == owner:
                joined = f"{record.error}; {note}" if record.error else note
                attempts[index] = record.model_copy(update={"error": summary(joined)})
                break
        else:
            attempts.append(AttemptRecord(attempt=attempt, status=status, error=summary(note), owner=owner))
        noted = current.model_copy(update={"attempts": Execution.bounded(attempts)})
        try:
            # Same status (a terminal one): not a transition, so not through Ledger.save.
            self.ledger.store.save_execution(
                noted,
                Expect(frozenset({current.status}), current.attempt, current.owner, check_owner=True),
                self.ledger.ttl(self.clock.now()),
            )
        except ExecutionConflictError:
            log.info("could not note the superseded result: the record changed again")


def _is_own_write(stored: Execution | None, ended: Execution) -> bool:
    return (
        stored is not None
        and stored.owner == ended.owner
        and stored.attempt == ended.attempt
        and stored.status is ended.status
        and stored.finished_at == ended.finished_at
    )
