"""The worker core against DynamoDB (moto) and the memory store: conditions, keys, history, TTL."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig, statuses
from factories import spec
from punctual.delivery.targets.base import TargetResult
from punctual.dispatch.queues import MessageKind
from punctual.execution import ClaimOutcome
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobStore
from punctual.store.dynamo import DynamoStore, job_pk
from punctual.timing.timers import TimerKind, slot_key
from punctual.usecases import jobs as jobs_module
from punctual.usecases.job_errors import PreconditionFailedError
from punctual.usecases.jobs import JobService, QueueRouting

S = ExecutionStatus
MINUTE = timedelta(minutes=1)


@pytest.fixture
def rig(store: JobStore, t0: datetime) -> Rig:
    return Rig(store, ManualClock(t0))


def test_history_newest_first_paged_with_attempts_and_ttl(rig: Rig, t0: datetime) -> None:
    # Given five slots of one job: the third needed two attempts, the fifth is still running
    job = rig.add_job(retry={"max_attempts": 3, "backoff": "fixed", "base_seconds": 5, "jitter": False})
    worker = rig.worker()
    for i in range(5):
        slot = t0 + i * MINUTE
        rig.clock.set(slot)
        claim = worker.claim(rig.message(job, slot))
        if i == 4:
            break
        if i == 2:
            worker.finish(claim, TargetResult.retryable("HTTP 503"))
            rig.clock.advance(5)
            claim = worker.claim(rig.message(job, slot, attempt=2, kind=MessageKind.RETRY))
        worker.finish(claim, TargetResult.ok(f"run {i}"))
    # When the history is read two at a time
    pages, cursor = [], None
    while True:
        page = rig.store.list_executions(job.tenant, job.id, limit=2, cursor=cursor)
        pages.append([r.slot for r in page.items])
        cursor = page.cursor
        if cursor is None:
            break
    # Then it is newest first, paged, and lists every attempt
    slots = [slot_key(t0 + i * MINUTE) for i in range(5)]
    assert pages == [slots[4:2:-1], slots[2:0:-1], slots[:1]]
    history = rig.history(job)
    assert [(r.status, r.attempt) for r in history] == [
        (S.RUNNING, 1),
        (S.SUCCEEDED, 1),
        (S.SUCCEEDED, 2),
        (S.SUCCEEDED, 1),
        (S.SUCCEEDED, 1),
    ]
    assert statuses(history[2].attempts) == [(1, "FAILED"), (2, "SUCCEEDED")]
    assert history[2].attempts[0].error == "HTTP 503"
    running = rig.store.list_executions(job.tenant, job.id, limit=5, status=S.RUNNING).items
    assert [r.slot for r in running] == [slots[4]]
    # And every record expires retention_days after its last write (DynamoDB TTL attribute)
    if isinstance(rig.store, DynamoStore):
        item = rig.store.client.get_item(
            TableName=rig.store.table,
            Key={"pk": {"S": job_pk(job.tenant, job.id)}, "sk": {"S": f"exec#{slots[2]}"}},
        )["Item"]
        written = t0 + 2 * MINUTE + timedelta(seconds=5)
        assert int(item["expires_at"]["N"]) == int((written + timedelta(days=30)).timestamp())


def test_duplicate_after_the_dedup_window_is_dropped_by_the_conditional_write(rig: Rig, t0: datetime) -> None:
    job = rig.add_job()
    worker = rig.worker()
    message = rig.message(job, t0)
    rig.send(message)
    rig.work_until_idle(worker)
    rig.clock.advance(3600)
    rig.send(message)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["duplicate"]
    assert len(rig.target.calls) == 1


def test_two_workers_racing_for_one_takeover_start_it_once(rig: Rig, t0: datetime) -> None:
    # Given a lapsed lease, and two takeover messages for it (e.g. the poller resent one)
    job = rig.add_job(timeout_seconds=60)
    first = rig.worker().claim(rig.message(job, t0))
    rig.clock.advance(200)
    a, b = rig.worker(), rig.worker()
    # When two workers claim at once (the second decides on the record it read before the first wrote)
    stale = rig.store.get_execution(job.tenant, job.id, slot_key(t0))
    claim_a = a.claim(rig.message(job, t0, attempt=2, kind=MessageKind.TAKEOVER))
    rig.store.get_execution = lambda *args: stale  # type: ignore[method-assign, assignment, return-value]
    claim_b = b.claim(rig.message(job, t0, attempt=2, kind=MessageKind.TAKEOVER))
    # Then exactly one owns attempt 2; the other waits for that lease; the first owner is fenced
    assert claim_a.outcome is ClaimOutcome.CLAIMED
    assert claim_b.outcome is ClaimOutcome.WAITING
    assert rig.worker().finish(first, TargetResult.ok()).superseded


def test_slow_worker_is_fenced_by_the_condition_on_owner(rig: Rig, t0: datetime) -> None:
    job = rig.add_job(timeout_seconds=60)
    slow = rig.worker()
    a = slow.claim(rig.message(job, t0))
    rig.clock.advance(121)
    fast = rig.worker()
    b = fast.claim(rig.message(job, t0, attempt=2, kind=MessageKind.TAKEOVER))
    fast.finish(b, TargetResult.ok("B"))
    assert slow.finish(a, TargetResult.ok("A")).superseded
    [record] = rig.history(job)
    assert (record.status, record.attempt, record.result) == (S.SUCCEEDED, 2, "B")


def test_retry_timer_rows_and_final_failure(rig: Rig, t0: datetime) -> None:
    job = rig.add_job(retry={"max_attempts": 2, "backoff": "fixed", "base_seconds": 30, "jitter": False})
    rig.target = FakeTarget(TargetResult.retryable("503"))
    worker = rig.worker()
    rig.send(rig.message(job, t0))
    rig.work_until_idle(worker)
    [retry] = rig.timers(t0, t0 + MINUTE, TimerKind.RETRY)
    assert (retry.attempt, retry.due, retry.job_version) == (2, t0 + timedelta(seconds=30), job.version)
    rig.clock.set(retry.due)
    rig.poll()
    rig.work_until_idle(worker)
    assert statuses(rig.history(job)) == [(2, "FAILED")]
    assert [b["attempt"] for b in rig.failures.bodies] == [2]


def test_overlap_skip_on_the_real_store(rig: Rig, t0: datetime) -> None:
    job = rig.add_job(overlap="skip", timeout_seconds=600)
    worker = rig.worker()
    worker.claim(rig.message(job, t0))
    for i in range(1, 7):
        rig.clock.set(t0 + i * MINUTE)
        rig.send(rig.message(job, t0 + i * MINUTE))
        rig.work_until_idle(worker)
    history = rig.history(job)
    assert [r.status for r in history] == [S.SKIPPED] * 6 + [S.RUNNING]
    assert {r.blocked_by for r in history[:-1]} == {slot_key(t0)}  # the new field round-trips
    stored = rig.store.get_job(job.tenant, job.id)
    assert stored is not None and stored.skipped_slots == 6


def test_after_two_parents_on_the_real_store(rig: Rig, t0: datetime) -> None:
    service = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    a, _ = service.register("default", spec("rate(1 hour)"), job_id="a")
    b, _ = service.register("default", spec("rate(1 hour)"), job_id="b")
    child, _ = service.register("default", spec("after(a, b)"), job_id="c")
    slot = t0 + timedelta(hours=1)
    rig.clock.set(slot)
    worker = rig.worker()
    rig.send(rig.message(a, slot), rig.message(b, slot))
    rig.work_until_idle(worker)
    assert rig.target.calls_for(child.id) == [(slot_key(slot), 1)]
    assert rig.store.claim_child_dispatch("default", child.id, slot_key(slot)) is False  # recorded once


def test_a_backfill_replaces_an_earlier_jobs_record_at_the_id_once(rig: Rig, t0: datetime) -> None:
    """The conditional overwrite of an earlier job's record (a job deleted and created again at its
    id): of two workers that read it, one replaces it; the other's write is refused, and it then
    finds the slot taken."""
    import dataclasses

    from punctual.store.base import ExecutionConflictError, Expect
    from punctual.usecases.backfills import backfill_ref

    slot = t0 - timedelta(hours=1)
    ran, job = rig.created_again_after_a_run(slot)
    # Two writes that both expect the earlier job's record as they read it: the second is refused
    as_read = Expect(frozenset({S.SUCCEEDED}), 1)
    mine = ran.model_copy(update={"status": S.RUNNING, "started_at": rig.clock.now(), "finished_at": None})
    rig.store.save_execution(mine, as_read, 0)
    with pytest.raises(ExecutionConflictError):
        rig.store.save_execution(mine.model_copy(update={"owner": "other"}), as_read, 0)
    # Through the claim: a backfill message twice, one run
    rig.store.save_execution(
        ran.model_copy(update={"job_id": job.id, "slot": slot_key(slot - MINUTE)}), None, 0
    )
    message = dataclasses.replace(
        rig.message(job, slot - MINUTE, kind=MessageKind.BACKFILL), backfill=backfill_ref("b1", False, 0)
    )
    first, second = rig.worker(), rig.worker()
    won = first.claim(message)
    assert (won.outcome, second.claim(message).outcome) == (ClaimOutcome.CLAIMED, ClaimOutcome.WAITING)
    first.finish(won, TargetResult.ok("ran"))
    assert second.claim(message).outcome is ClaimOutcome.DUPLICATE
    assert rig.store.get_execution(job.tenant, job.id, slot_key(slot - MINUTE)).backfill == "b1"


def test_a_job_created_again_at_an_id_never_takes_the_earlier_jobs_timers_or_etags(
    rig: Rig, t0: datetime
) -> None:
    """Concurrency QA: a job deleted and created again under its id (EventBridge's DeleteSchedule +
    CreateSchedule) started at version 1 again, so the earlier job's pending chain timer (also
    version 1) was released for it: the new job ran at a slot of the earlier one's schedule. A
    deleted job leaves its last version (a tombstone); the next job at its id starts past it."""
    jobs = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    first, _ = jobs.register("default", spec("cron(0 12 * * ? *)"), job_id="report")
    jobs.replace("default", "report", spec("cron(0 12 * * ? *)", description="v2"))
    jobs.delete("default", "report")
    again, _ = jobs.register("default", spec("cron(0 14 * * ? *)"), job_id="report")
    assert (first.version, again.version) == (1, 3)  # past the deleted job's last version (2)
    with pytest.raises(PreconditionFailedError):
        jobs.replace("default", "report", spec("cron(0 15 * * ? *)"), expected_version=1)  # a stale If-Match
    worker = rig.worker()
    for at in (12, 14):
        rig.clock.set(t0.replace(hour=at, minute=0, second=1))
        rig.poll()
        rig.work_until_idle(worker)
    assert [slot for slot, _ in rig.target.calls_for("report")] == [
        slot_key(t0.replace(hour=14, minute=0, second=0))
    ]


def test_a_child_whose_parent_was_deleted_after_its_check_is_not_stored(rig: Rig) -> None:
    """Concurrency QA: a child's create read its parent, the parent was deleted, then the create
    committed: a child naming a parent that is gone (it never runs). The write's link to the
    parent now fails it: 422 naming the parent, nothing stored."""
    from punctual.usecases.job_errors import InvalidJobError

    jobs = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    jobs.register("default", spec("rate(1 hour)"), job_id="parent")
    checked = jobs.admission.check_dependencies

    def then_deleted(*args: Any, **kwargs: Any) -> Any:
        parents = checked(*args, **kwargs)
        jobs.delete("default", "parent")  # another client, between the check and the write
        return parents

    jobs.admission.check_dependencies = then_deleted  # type: ignore[method-assign]
    with pytest.raises(InvalidJobError, match="parent job 'parent' does not exist"):
        jobs.register("default", spec("after(parent)"), job_id="child")
    assert rig.store.get_job("default", "child") is None


def test_a_parent_given_a_child_after_its_delete_checked_is_not_deleted(rig: Rig) -> None:
    """Concurrency QA, the other race: a delete checked its job had no after() children, a child
    was created, then the delete committed: the child named a parent that was gone and never ran
    (only the auditor's JobsOrphaned report saw it). The delete now conditions on the dependents
    count it read: it fails, checks again, and is refused naming the child; both jobs stay."""
    from punctual.usecases.job_errors import JobHasDependentsError

    jobs = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    jobs.register("default", spec("rate(1 hour)"), job_id="parent")
    jobs.register("default", spec("rate(1 hour)"), job_id="other")
    jobs.register("default", spec("after(other)"), job_id="stale")  # a link that stops counting:
    jobs.replace("default", "stale", spec("rate(1 hour)"))  # its child no longer names it
    rig.store.set_dependents("default", "stale", ["parent"], present=True)  # (as an older writer left)
    checks = []
    real = jobs_module.after_children

    def then_created(store: JobStore, tenant: str, job_id: str) -> list[str]:
        children = real(store, tenant, job_id)
        checks.append(children)
        if len(checks) == 1:  # another client, between the delete's check and its write
            jobs.register("default", spec("after(parent)"), job_id="child")
        return children

    jobs_module.after_children = then_created  # type: ignore[assignment]
    try:
        with pytest.raises(JobHasDependentsError) as refused:
            jobs.delete("default", "parent")
    finally:
        jobs_module.after_children = real  # type: ignore[assignment]
    assert checks == [[], ["child"]] and refused.value.children == ["child"]
    assert rig.store.get_job("default", "parent") is not None
    assert rig.store.get_job("default", "child") is not None
    # With no race, the stale link does not hold the delete back once the child is gone
    jobs.delete("default", "child")
    jobs.delete("default", "parent")
    assert rig.store.get_job("default", "parent") is None


def test_a_claim_whose_write_was_applied_before_its_response_was_lost_runs_at_once(
    lost_answers: DynamoStore, t0: datetime
) -> None:
    """QA25: a claim's conditional put retried after a read timeout finds its own write applied.
    Judged a conflict, the claim read its own RUNNING record as another worker's live lease and
    waited it out: the slot ran a lease late (8 s or more, past the 10 s bound)."""
    rig = Rig(lost_answers, ManualClock(t0))
    job = rig.add_job()
    claim = rig.worker().claim(rig.message(job, t0))
    assert claim.outcome is ClaimOutcome.CLAIMED
    # A record written with another owner is still a conflict: the same slot is not started twice
    assert rig.worker().claim(rig.message(job, t0)).outcome is not ClaimOutcome.CLAIMED
