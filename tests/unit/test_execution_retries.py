"""Failures: retry timers at the backoff instants, max attempts, max age, the failed-executions queue."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from typing import Any

import pytest

from execution_harness import SHORT, FakeTarget, Rig, statuses
from punctual.delivery.targets.base import Outcome, TargetResult
from punctual.dispatch.queues import MessageKind, message_for
from punctual.execution.ports import Delivery
from punctual.models import ExecutionStatus, JobState
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.retries import seeded_random
from punctual.timing.timers import TimerKind, slot_key

S = ExecutionStatus
RETRYABLE = TargetResult.retryable("HTTP 503")


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


def run_to_the_end(rig: Rig, max_rounds: int = 20) -> list[datetime]:
    """Let the worker and the poller run: each retry at its timer's instant. Returns run instants."""
    worker = rig.worker()
    ran: list[datetime] = []
    for _ in range(max_rounds):
        for _result in rig.work_until_idle(worker):
            ran.append(rig.clock.now())
        retries = [
            t
            for t in rig.timers(
                rig.clock.now() - timedelta(hours=1), rig.clock.now() + timedelta(days=2), TimerKind.RETRY
            )
            if (t.pk, t.sk) not in rig.released_timers
        ]
        if not retries:
            return ran
        rig.clock.set(retries[0].due)
        rig.poll()
    raise AssertionError("did not settle")


@pytest.mark.parametrize(
    ("backoff", "jitter", "offsets"),
    [
        ("fixed", False, [0, 10, 20, 30]),
        ("linear", False, [0, 10, 30, 60]),
        ("exponential", False, [0, 10, 30, 70]),
        # The rig's jitter source draws the top of each range: jitter never exceeds the backoff
        ("exponential", True, [0, 10, 30, 70]),
    ],
)
def test_retry_sequence_per_backoff_kind(
    rig: Rig, t0: datetime, backoff: str, jitter: bool, offsets: list[int]
) -> None:
    # Given a job that fails every time, four attempts, 10 s base
    job = rig.add_job(retry={"max_attempts": 4, "backoff": backoff, "base_seconds": 10, "jitter": jitter})
    rig.target = FakeTarget(RETRYABLE)
    rig.send(rig.message(job, t0))
    # When the worker and the poller run until nothing is left
    ran = run_to_the_end(rig)
    # Then the attempts ran at the backoff instants, and the slot ended FAILED
    assert ran == [t0 + timedelta(seconds=s) for s in offsets]
    assert [attempt for _, attempt in rig.target.calls_for(job.id)] == [1, 2, 3, 4]
    [record] = rig.history(job)
    assert (record.status, record.attempt) == (S.FAILED, 4)
    assert statuses(record.attempts) == [(1, "FAILED"), (2, "FAILED"), (3, "FAILED"), (4, "FAILED")]
    assert rig.metrics.total("Retries") == 3


def test_real_jitter_stays_within_the_backoff_bounds(t0: datetime) -> None:
    # Given the worker's own (seeded) jitter, across many slots
    rig = Rig(MemoryStore(), ManualClock(t0))
    job = rig.add_job(retry={"max_attempts": 2, "backoff": "exponential", "base_seconds": 40, "jitter": True})
    rig.target = FakeTarget(RETRYABLE)
    worker = rig.worker()
    worker.rng = seeded_random
    delays = []
    for i in range(30):
        slot = t0 + timedelta(minutes=i)
        rig.clock.set(slot)
        claim = worker.claim(rig.message(job, slot))
        delays.append((worker.finish(claim, worker.run(claim)).retry_at - slot).total_seconds())  # type: ignore[operator]
    # Then every retry is within [0, 40 s] and they are spread out (full jitter)
    assert all(0 <= d <= 40 for d in delays)
    assert max(delays) - min(delays) > 20


def test_final_failure_goes_to_the_failed_executions_queue(rig: Rig, t0: datetime) -> None:
    job = rig.add_job(retry={"max_attempts": 2, "backoff": "fixed", "base_seconds": 5, "jitter": False})
    rig.target = FakeTarget(TargetResult.retryable("HTTP 503"), TargetResult.retryable("HTTP 502"))
    rig.send(rig.message(job, t0))
    run_to_the_end(rig)
    [report] = rig.failures.bodies
    assert json.loads(json.dumps(report)) == report  # a JSON body
    assert report["job_id"] == job.id and report["slot"] == slot_key(t0)
    assert (report["status"], report["attempt"], report["error"]) == ("FAILED", 2, "HTTP 502")
    assert [(a["attempt"], a["status"], a["error"]) for a in report["attempts"]] == [
        (1, "FAILED", "HTTP 503"),
        (2, "FAILED", "HTTP 502"),
    ]
    assert rig.metrics.total("ExecutionsFailed") == 1


def test_no_retry_past_max_age(rig: Rig, t0: datetime) -> None:
    # Given a slot scheduled at t0 whose attempts may not run later than t0 + 25 s
    job = rig.add_job(
        retry={
            "max_attempts": 10,
            "backoff": "fixed",
            "base_seconds": 10,
            "jitter": False,
            "max_age_seconds": 25,
        }
    )
    rig.target = FakeTarget(RETRYABLE)
    rig.send(rig.message(job, t0))
    ran = run_to_the_end(rig)
    assert ran == [t0, t0 + timedelta(seconds=10), t0 + timedelta(seconds=20)]  # t0 + 30 s is too old
    assert rig.history(job)[0].status is S.FAILED
    assert len(rig.failures.bodies) == 1


def test_retry_after_hint_is_honoured_within_the_cap(rig: Rig, t0: datetime) -> None:
    job = rig.add_job(
        retry={"max_attempts": 3, "backoff": "fixed", "base_seconds": 5, "max_seconds": 120, "jitter": False}
    )
    rig.target = FakeTarget(
        TargetResult.retryable("429", retry_after_s=90),
        TargetResult.retryable("429", retry_after_s=9999),
        TargetResult.ok(),
    )
    rig.send(rig.message(job, t0))
    ran = run_to_the_end(rig)
    assert ran == [t0, t0 + timedelta(seconds=90), t0 + timedelta(seconds=210)]


def test_timeout_is_retried_like_a_failure_and_ends_timed_out(rig: Rig, t0: datetime) -> None:
    job = rig.add_job(retry={"max_attempts": 2, "backoff": "fixed", "base_seconds": 5, "jitter": False})
    timed_out = TargetResult(Outcome.RETRYABLE, "no answer within 300 s", timed_out=True)
    rig.target = FakeTarget(timed_out)
    rig.send(rig.message(job, t0))
    run_to_the_end(rig)
    [record] = rig.history(job)
    assert (record.status, record.attempt) == (S.TIMED_OUT, 2)
    assert statuses(record.attempts) == [(1, "TIMED_OUT"), (2, "TIMED_OUT")]
    assert rig.failures.bodies[0]["status"] == "TIMED_OUT"


def test_permanent_failure_is_not_retried(rig: Rig, t0: datetime) -> None:
    job = rig.add_job(retry={"max_attempts": 5})
    rig.target = FakeTarget(TargetResult.permanent("HTTP 400: bad payload"))
    rig.send(rig.message(job, t0))
    run_to_the_end(rig)
    assert statuses(rig.history(job)) == [(1, "FAILED")]
    assert rig.timers(t0, t0 + timedelta(days=1), TimerKind.RETRY) == []


def test_target_that_asks_to_stop_pauses_the_job_with_the_reason(rig: Rig, t0: datetime) -> None:
    job = rig.add_job()
    rig.target = FakeTarget(TargetResult.permanent("HTTP 410 Gone", pause_job=True))
    rig.send(rig.message(job, t0))
    run_to_the_end(rig)
    paused = rig.store.get_job(job.tenant, job.id)
    assert paused is not None
    assert (paused.state, paused.version) == (JobState.PAUSED, job.version + 1)
    assert "HTTP 410 Gone" in (paused.state_reason or "")
    # The next slot of the old version is now stale for the poller; a late message is skipped
    rig.send(rig.message(job, t0 + timedelta(minutes=1)))
    assert [r.outcome for r in rig.work_until_idle(rig.worker())] == ["skipped"]
    assert rig.history(job)[0].error == "job is paused"
    # ... while a run the user triggers by hand still runs
    rig.target.results = [TargetResult.ok()]
    rig.send(rig.message(job, f"{slot_key(t0)}~mbyhand", kind=MessageKind.MANUAL))
    assert [r.outcome for r in rig.work_until_idle(rig.worker())] == ["SUCCEEDED"]


def test_retry_message_for_a_slot_already_retried_is_dropped(rig: Rig, t0: datetime) -> None:
    # Given a slot that failed once and was retried successfully
    job = rig.add_job(retry={"max_attempts": 3, "backoff": "fixed", "base_seconds": 5, "jitter": False})
    rig.target = FakeTarget(RETRYABLE, TargetResult.ok())
    rig.send(rig.message(job, t0))
    run_to_the_end(rig)
    # When the poller resends the retry much later (after the dedup window)
    rig.clock.advance(3600)
    rig.send(rig.message(job, t0, attempt=2, kind=MessageKind.RETRY))
    results: list[Any] = rig.work_until_idle(rig.worker())
    # Then it is dropped: two runs in all
    assert [r.outcome for r in results] == ["duplicate"]
    assert len(rig.target.calls) == 2


def test_a_one_time_job_whose_target_asks_to_stop_ends_completed_without_a_pause_error(
    rig: Rig, t0: datetime, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a one-time job whose only slot is answered 410 (the worker marks the job COMPLETED)
    job = rig.add_job(schedule=f"at({t0.strftime('%Y-%m-%dT%H:%M:%S')})")
    rig.target = FakeTarget(TargetResult.permanent("HTTP 410 Gone", pause_job=True))
    rig.send(message_for(job, slot_key(t0), t0, 1, MessageKind.FIRE, t0, last=True))
    with caplog.at_level(logging.INFO, logger="punctual"):
        run_to_the_end(rig)
    # Then the job stays COMPLETED, and nothing says a pause failed: there was nothing left to stop
    # (QA: three pause tries, each refused "is completed", then an ERROR "could not pause job")
    done = rig.store.get_job(job.tenant, job.id)
    assert done is not None and done.state is JobState.COMPLETED
    assert statuses(rig.history(job)) == [(1, "FAILED")]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in caplog.records if "trying again" in r.getMessage()]


def test_a_redelivered_message_keeps_the_retry_where_the_receivers_retry_after_put_it(
    rig: Rig, t0: datetime
) -> None:
    # Given a slot answered 503 with Retry-After: 60 (a fixed 1 s backoff would retry at once)
    job = rig.add_job(retry={"max_attempts": 3, "backoff": "fixed", "base_seconds": 1, "jitter": False})
    rig.target = FakeTarget(TargetResult.retryable("HTTP 503", retry_after_s=60))
    message = rig.message(job, t0)
    rig.worker().process(message, Delivery(SHORT, "r-1", 1))
    [first] = rig.timers(t0, t0 + timedelta(hours=1), TimerKind.RETRY)
    assert first.due >= t0 + timedelta(seconds=60)
    # When the worker's message comes back (it died before deleting it): its after-effects repeat
    rig.clock.advance(2)
    rig.worker().process(message, Delivery(SHORT, "r-1", 2))
    # Then no retry timer comes due before the receiver's 60 s (QA: the repeat recomputed the
    # instant without Retry-After and wrote a second retry timer 1 s after the failure)
    timers = rig.timers(t0, t0 + timedelta(hours=1), TimerKind.RETRY)
    assert [t.due for t in timers] == [first.due]


@pytest.mark.parametrize("gone", ["deleted", "unreadable"])
def test_a_pause_the_target_asked_for_of_a_deleted_or_unreadable_job_is_not_raised(
    rig: Rig, gone: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a job the pause is refused for, then found soft-deleted, or whose read fails
    job = rig.add_job()
    worker = rig.worker()

    class Refusing:
        def pause(self, tenant: str, job_id: str, reason: str) -> None:
            raise RuntimeError("refused")

    worker.after.pauser = Refusing()  # type: ignore[assignment]
    if gone == "deleted":
        rig.store.replace_job(job.model_copy(update={"state": JobState.DELETED, "version": 2}), 1)
    else:

        def failing(*_: Any, **__: Any) -> None:
            raise RuntimeError("unreadable")

        rig.store.get_job = failing  # type: ignore[method-assign]
    # When the target's 410 asks to pause it
    with caplog.at_level(logging.INFO, logger="punctual"):
        worker.after.pause(job, "the target asked to stop")
    # Then nothing escapes; a deleted job has nothing to stop (no error), an unreadable one is tried again
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert (errors == []) if gone == "deleted" else len(errors) == 1
