"""What the EventBridge Scheduler API adds to the worker: context attributes in the payload, a
job's dead-letter queue after its last attempt, and deleting a completed job that asked for it."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from execution_harness import FakeTarget, Rig
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.delivery.targets.payload import execution_id, render_payload
from punctual.execution.dead_letters import MemoryDeadLetters, error_code
from punctual.models import DeadLetterQueue, Execution, ExecutionStatus, RetryPolicy, SchedulerIdentity
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore

DLQ = "arn:aws:sqs:us-east-1:123456789012:reports-dlq"
ARN = "arn:aws:scheduler:us-east-1:123456789012:schedule/default/nightly"


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


def test_scheduler_context_attributes_are_filled_per_attempt(t0: datetime) -> None:
    ctx = SlotContext("job-1", "tenant-a", "2026-11-30T10:00:00Z", t0, 3, 30.0)
    text = '{"t": "<aws.scheduler.scheduled-time>", "id": "<aws.scheduler.execution-id>", "n": "<aws.scheduler.attempt-number>"}'
    rendered = json.loads(render_payload(text, ctx))
    assert rendered == {"t": "2026-11-30T10:00:00Z", "id": execution_id(ctx), "n": "3"}
    # The execution id names the slot's run: the same for each attempt, another for another tenant
    assert execution_id(ctx) == execution_id(SlotContext("job-1", "tenant-a", ctx.slot, t0, 1, 30.0))
    assert execution_id(ctx) != execution_id(SlotContext("job-1", "tenant-b", ctx.slot, t0, 3, 30.0))
    assert len(execution_id(ctx)) == 36


def test_the_last_failed_attempt_sends_the_event_to_the_dead_letter_queue(rig: Rig, t0: datetime) -> None:
    # Given a job with two attempts and a dead-letter queue, whose target always fails
    job = rig.add_job(
        "job-1",
        payload={"n": "<aws.scheduler.attempt-number>"},
        retry=RetryPolicy(max_attempts=2, base_seconds=5, jitter=False),
        dead_letter=DeadLetterQueue(queue_arn=DLQ),
        scheduler=SchedulerIdentity(group="default", name="nightly", arn=ARN, target_arn="arn:x"),
    )
    dead = MemoryDeadLetters()
    failing = FakeTarget(TargetResult.retryable("sqs SendMessage: AccessDenied: not allowed"))
    worker = rig.worker(target=failing, dead_letters=dead)
    rig.send(rig.message(job, t0))
    # When the first attempt fails nothing is dead-lettered yet
    rig.work_until_idle(worker)
    assert dead.sent == []
    # And when the retry fails too, its event goes to the queue once, with the attributes
    rig.advance_to(t0 + timedelta(seconds=30))
    rig.poll()
    rig.work_until_idle(worker)
    assert len(dead.sent) == 1
    queue, body, attributes = dead.sent[0]
    assert queue == DLQ and json.loads(body) == {"n": "2"}
    values = {name: value["StringValue"] for name, value in attributes.items()}
    assert values["ERROR_CODE"] == "AccessDenied"
    assert values["ERROR_MESSAGE"] == "sqs SendMessage: AccessDenied: not allowed"
    assert values["EXHAUSTED_RETRY_CONDITION"] == "MaximumRetryAttempts"
    assert values["RETRY_ATTEMPTS"] == "1" and attributes["RETRY_ATTEMPTS"]["DataType"] == "Number"
    assert values["SCHEDULE_ARN"] == ARN and values["TARGET_ARN"] == "arn:x"
    assert values["SCHEDULED_TIME"] == "2026-11-30T10:00:00Z"
    assert rig.failures.bodies and rig.failures.bodies[0]["status"] == "FAILED"


def test_a_non_retryable_failure_is_dead_lettered_at_once(rig: Rig, t0: datetime) -> None:
    job = rig.add_job("job-1", dead_letter=DeadLetterQueue(queue_arn=DLQ))
    dead = MemoryDeadLetters()
    worker = rig.worker(
        target=FakeTarget(TargetResult.permanent("lambda Invoke: ResourceNotFoundException")),
        dead_letters=dead,
    )
    rig.send(rig.message(job, t0))
    rig.work_until_idle(worker)
    values = {name: value["StringValue"] for name, value in dead.sent[0][2].items()}
    assert values["EXHAUSTED_RETRY_CONDITION"] == "NonRetryableError"
    assert values["ERROR_CODE"] == "ResourceNotFoundException"
    assert values["SCHEDULE_ARN"] == "job-1"  # a /v1 job: its id


@pytest.mark.parametrize("released_s", [23, 95])  # a jittered slot's release; an after() child's dispatch
def test_a_dead_letters_scheduled_time_is_the_slots_not_its_later_release(
    rig: Rig, t0: datetime, released_s: int
) -> None:
    """QA24: a slot released after its instant (``jitter_seconds``, a FlexibleTimeWindow; an
    ``after()`` job's slot, sent when its last parent succeeded) was dead-lettered with the release
    instant as its ``SCHEDULED_TIME`` (10:00:23Z), while the body's
    ``<aws.scheduler.scheduled-time>`` said the slot's (10:00:00Z), as EventBridge Scheduler does."""
    job = rig.add_job(
        "job-1",
        payload={"at": "<aws.scheduler.scheduled-time>"},
        retry=RetryPolicy(max_attempts=1),
        dead_letter=DeadLetterQueue(queue_arn=DLQ),
    )
    dead = MemoryDeadLetters()
    worker = rig.worker(target=FakeTarget(TargetResult.permanent("HTTP 400")), dead_letters=dead)
    released = t0 + timedelta(seconds=released_s)
    rig.advance_to(released)
    rig.send(replace(rig.message(job, t0), scheduled_at=released.isoformat().replace("+00:00", "Z")))
    rig.work_until_idle(worker)
    [(_, body, attributes)] = dead.sent
    assert json.loads(body) == {"at": "2026-11-30T10:00:00Z"}
    assert attributes["SCHEDULED_TIME"]["StringValue"] == "2026-11-30T10:00:00Z"


def test_a_retry_cut_by_the_age_limit_is_dead_lettered_as_such(rig: Rig, t0: datetime) -> None:
    """QA: attempt 2 of 3 failed 100 s after the slot, its retry (100 s later) past the 150 s age:
    reported NonRetryableError; and a permanent failure of a backfilled slot from days ago was
    reported as the age (counted from the slot's instant, not from its first start)."""
    job = rig.add_job(
        "job-1",
        retry=RetryPolicy(
            max_attempts=3, base_seconds=100, jitter=False, max_age_seconds=150, backoff="fixed"
        ),
        dead_letter=DeadLetterQueue(queue_arn=DLQ),
    )
    dead = MemoryDeadLetters()
    worker = rig.worker(target=FakeTarget(TargetResult.retryable("HTTP 503")), dead_letters=dead)
    rig.send(rig.message(job, t0))
    rig.work_until_idle(worker)
    rig.advance_to(t0 + timedelta(seconds=100))
    rig.poll()
    rig.work_until_idle(worker)
    values = {name: value["StringValue"] for name, value in dead.sent[0][2].items()}
    assert (values["EXHAUSTED_RETRY_CONDITION"], values["RETRY_ATTEMPTS"]) == (
        "MaximumEventAgeInSeconds",
        "1",
    )


def test_a_retry_a_retry_after_hint_pushes_past_the_age_is_dead_lettered_as_such(
    rig: Rig, t0: datetime
) -> None:
    """QA: a Retry-After of 100 s with max_age_seconds 60 gave up after attempt 1, and the dead
    letter read NonRetryableError (the condition was worked out again without the hint)."""
    job = rig.add_job(
        "job-1",
        retry=RetryPolicy(max_attempts=3, base_seconds=5, jitter=False, max_age_seconds=60, backoff="fixed"),
        dead_letter=DeadLetterQueue(queue_arn=DLQ),
    )
    dead = MemoryDeadLetters()
    busy = TargetResult.retryable("HTTP 503", retry_after_s=100)
    rig.send(rig.message(job, t0))
    rig.work_until_idle(rig.worker(target=FakeTarget(busy), dead_letters=dead))
    values = {name: value["StringValue"] for name, value in dead.sent[0][2].items()}
    assert values["EXHAUSTED_RETRY_CONDITION"] == "MaximumEventAgeInSeconds"
    assert values["ERROR_CODE"] == "TargetInvocationFailed"  # the error still reads as the target's


def test_a_backfilled_slots_failure_counts_its_age_from_its_first_start(rig: Rig, t0: datetime) -> None:
    from punctual.execution.dead_letters import exhausted_condition
    from punctual.timing.timers import slot_key

    job = rig.add_job("job-1", retry=RetryPolicy(max_attempts=3, base_seconds=5, jitter=False))
    old = t0 - timedelta(days=2)  # a backfilled slot of two days ago, first started now
    record = Execution(
        job_id=job.id,
        slot=slot_key(old),
        scheduled_at=old,
        status=ExecutionStatus.FAILED,
        attempt=1,
        started_at=t0,
        finished_at=t0,
        backfill="bf1",
    )
    assert exhausted_condition(job, record, t0) == "NonRetryableError"
    unfilled = record.model_copy(update={"backfill": None})  # a scheduled slot that old: the age
    assert exhausted_condition(job, unfilled, t0) == "MaximumEventAgeInSeconds"


def test_a_job_without_dead_letter_queue_sends_nothing(rig: Rig, t0: datetime) -> None:
    job = rig.add_job("job-1")
    dead = MemoryDeadLetters()
    rig.send(rig.message(job, t0))
    rig.work_until_idle(rig.worker(target=FakeTarget(TargetResult.permanent("no")), dead_letters=dead))
    assert dead.sent == []


def test_error_codes_of_timeouts_and_plain_errors(t0: datetime) -> None:
    base = Execution(
        job_id="j", slot="s", scheduled_at=t0, status=ExecutionStatus.TIMED_OUT, error="timed out"
    )
    assert error_code(base) == "TargetTimedOut"
    failed = base.model_copy(update={"status": ExecutionStatus.FAILED, "error": "HTTP 500"})
    assert error_code(failed) == "TargetInvocationFailed"


def test_a_completed_one_time_job_that_asked_is_deleted(rig: Rig, t0: datetime) -> None:
    # Given a one-time job with delete_after_completion, its slot now
    at = t0 + timedelta(minutes=1)
    job = rig.add_job("once", f"at({at.strftime('%Y-%m-%dT%H:%M:%S')})", delete_after_completion=True)
    keep = rig.add_job("kept", f"at({at.strftime('%Y-%m-%dT%H:%M:%S')})")
    rig.advance_to(at)
    rig.send(rig.message(job, at), rig.message(keep, at))
    # When its slot ends, it is gone; the one that did not ask stays
    rig.work_until_idle(rig.worker())
    assert rig.store.get_job("default", "once") is None
    assert rig.store.get_job("default", "kept") is not None
    assert rig.history(job)[0].status is ExecutionStatus.SUCCEEDED  # its history stays


def test_a_completed_job_that_after_jobs_name_is_kept_not_deleted(rig: Rig, t0: datetime) -> None:
    """Deleted, it would leave its children ENABLED with no parent (the auditor reports them as
    orphans): kept, as a delete through the API is refused while they name it."""
    at = t0 + timedelta(minutes=1)
    job = rig.add_job("once", f"at({at.strftime('%Y-%m-%dT%H:%M:%S')})", delete_after_completion=True)
    rig.add_job("child", "after(once)")
    rig.store.set_dependents("default", "child", ["once"], present=True)
    rig.advance_to(at)
    rig.send(rig.message(job, at))
    rig.work_until_idle(rig.worker())
    assert rig.history(job)[0].status is ExecutionStatus.SUCCEEDED
    assert rig.store.get_job("default", "once") is not None


def test_a_recurring_job_is_kept_until_its_last_slot(rig: Rig, t0: datetime) -> None:
    job = rig.add_job(
        "rate", "rate(1 minute)", delete_after_completion=True, end_at=t0 + timedelta(minutes=1)
    )
    rig.send(rig.message(job, t0))
    rig.work_until_idle(rig.worker())
    assert rig.store.get_job("default", "rate") is not None  # a slot is left before end_at
    last = t0 + timedelta(minutes=1)
    rig.advance_to(last)
    rig.send(rig.message(job, last))
    rig.work_until_idle(rig.worker())
    assert rig.store.get_job("default", "rate") is None


def test_a_job_changed_while_its_last_slot_ran_is_not_deleted(rig: Rig, t0: datetime) -> None:
    # Given a one-time job that asked to be deleted, changed by its owner while its slot runs
    at = t0 + timedelta(minutes=1)
    job = rig.add_job("once", f"at({at.strftime('%Y-%m-%dT%H:%M:%S')})", delete_after_completion=True)

    def changed_meanwhile(ctx: SlotContext) -> TargetResult:
        rig.store.replace_job(job.model_copy(update={"version": 2}), expected_version=1)
        return TargetResult.ok()

    rig.advance_to(at)
    rig.send(rig.message(job, at))
    rig.work_until_idle(rig.worker(target=FakeTarget(changed_meanwhile)))
    # Then the slot ran, and the changed job stays
    assert rig.history(job)[0].status is ExecutionStatus.SUCCEEDED
    assert rig.store.get_job("default", "once").version == 2


@pytest.mark.parametrize("last", ["excluded", "missed"])
def test_a_job_whose_last_slot_the_poller_records_unrun_is_deleted_too(
    rig: Rig, t0: datetime, last: str
) -> None:
    """The poller, not a worker, ends such a job (no message carries its last slot): it deletes it
    as a worker would, else the job lingered COMPLETED and held its calendar forever."""
    from execution_harness import LAYOUT, SHORT
    from factories import spec
    from punctual.usecases.calendar_service import CalendarService
    from punctual.usecases.calendars import CalendarSpec
    from punctual.usecases.jobs import JobService, QueueRouting

    service = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), ()))
    at = t0 + timedelta(minutes=2)
    when = f"at({at.strftime('%Y-%m-%dT%H:%M:%S')})"
    if last == "excluded":  # its slot's day is in a calendar it excludes
        CalendarService(rig.store, rig.clock).put(
            "default", "today", CalendarSpec(dates=[at.date().isoformat()])
        )
        job, _ = service.register(
            "default", spec(when, exclude_calendars=["today"], delete_after_completion=True)
        )
    else:  # paused over its slot, resumed with catch-up none
        job, _ = service.register(
            "default", spec(when, catchup={"policy": "none"}, delete_after_completion=True)
        )
        service.pause("default", job.id)
    kept, _ = service.register(
        "default", spec(when, exclude_calendars=["today"] if last == "excluded" else [])
    )
    if last == "missed":
        service.pause("default", kept.id)
    rig.advance_to(at + timedelta(seconds=1))
    rig.poll()
    if last == "missed":
        rig.advance_to(at + timedelta(seconds=30))
        service.resume("default", job.id)
        service.resume("default", kept.id)
        rig.poll()
    rig.work_until_idle(rig.worker())
    # Then its last slot is recorded, and it is gone; the job that did not ask is COMPLETED
    assert [r.status.value for r in rig.history(job)] == [last.upper()]
    assert rig.store.get_job("default", job.id) is None
    assert rig.store.get_job("default", kept.id).state.value == "COMPLETED"


def test_a_run_handed_back_at_shutdown_is_no_retry_in_its_dead_letter(rig: Rig, t0: datetime) -> None:
    """QA23: RETRY_ATTEMPTS counted a run its ECS worker handed back as a retry: a job allowed no
    retry read ``MaximumRetryAttempts`` with one retry made."""
    from execution_harness import LONG

    # Given an ECS job allowed one attempt, whose run its worker hands back at shutdown
    job = rig.add_job(
        "job-1", runtime="ecs", retry=RetryPolicy(max_attempts=1), dead_letter=DeadLetterQueue(queue_arn=DLQ)
    )
    first = rig.worker(lease_timers=True, lease_s=8)
    rig.send(rig.message(job, t0), queue=LONG)
    [received] = rig.queues.receive(LONG, 1, 0, 8)
    claim = first.claim(received.message)
    rig.queues.delete(LONG, received.receipt)
    assert claim.claimed and first.release(claim)
    # When the next worker's attempt fails
    dead = MemoryDeadLetters()
    failing = FakeTarget(TargetResult.retryable("HTTP 503"))
    rig.clock.advance(1)
    rig.work_until_idle(rig.worker(lease_timers=True, lease_s=8, target=failing, dead_letters=dead), LONG)
    # Then its dead letter says no retry was made (the hand-back was not one)
    values = {name: value["StringValue"] for name, value in dead.sent[0][2].items()}
    assert (values["EXHAUSTED_RETRY_CONDITION"], values["RETRY_ATTEMPTS"]) == ("MaximumRetryAttempts", "0")
