"""The chain auditor against DynamoDB (moto): the audit index (a sparse GSI) and chains broken on
purpose (a deleted timer row, a row of another version, a lost next timer, a dead delay chain),
found and repaired through the real store; a healthy cluster sees no repair."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
from audit_harness import AuditRig, Breaker, misplaced_head

from factories import spec
from punctual.models import ExecutionStatus, Job
from punctual.runtime.clock import ManualClock
from punctual.store.dynamo import DynamoStore, schema
from punctual.timing.timers import Lane
from punctual.usecases.backfills import Backfill, BackfillState
from simulation import LAYOUT

GRACE_S = 50


def _table(dynamo_client: Any) -> str:
    """The table the ``dynamo_client`` fixture made ("from conftest import TABLE" finds whichever
    conftest loaded first: tests/e2e's when `make test` collects e2e files beside this suite)."""
    (table,) = dynamo_client.list_tables()["TableNames"]
    return str(table)


@pytest.fixture
def store(dynamo_client: Any) -> DynamoStore:
    return DynamoStore(dynamo_client, _table(dynamo_client), LAYOUT)


@pytest.fixture
def rig(store: DynamoStore, t0: datetime) -> AuditRig:
    # moto reads every item of the table per Query: fewer polls, a shorter grace, fewer minutes
    return AuditRig(store, ManualClock(t0), grace_s=GRACE_S, poll_interval_s=4.0, work_every_s=2.0)


def register(rig: AuditRig, job_id: str, schedule: str, **fields: object) -> Job:
    job, _ = rig.jobs.register("default", spec(schedule, **fields), job_id=job_id)
    return job


def runs(rig: AuditRig, job: Job) -> Counter[str]:
    return Counter(c.slot for c in rig.target.calls if c.job_id == job.id and c.attempt == 1)


def breaker(rig: AuditRig, dynamo_client: Any) -> Breaker:
    return Breaker(rig.store, dynamo_client, _table(dynamo_client))


# --------------------------------------------------------------------------- the index


def test_jobs_and_running_backfills_are_in_their_segment_of_the_index(
    store: DynamoStore, t0: datetime
) -> None:
    rig = AuditRig(store, ManualClock(t0))
    ids = [f"job-{i}" for i in range(30)]
    for job_id in ids:
        register(rig, job_id, "rate(1 hour)")
    by_segment: dict[int, list[str]] = {}
    for segment in range(LAYOUT.shard_count):
        cursor, seen = None, []
        while True:  # pages of 4: the cursor carries the index's and the table's keys
            page = store.audit_page(segment, LAYOUT.shard_count, 4, cursor)
            seen += [item.id for item in page.items if isinstance(item, Job)]
            cursor = page.cursor
            if cursor is None:
                break
        by_segment[segment] = seen
        assert all(LAYOUT.shard_for(Lane.FAR, "default", i) == segment for i in seen)
    assert sorted(i for seen in by_segment.values() for i in seen) == sorted(ids)
    # A backfill is in the index while it runs, and leaves it when it is done
    backfill = Backfill(
        id="f" * 20,
        tenant="default",
        job_id="job-0",
        start=t0 - timedelta(hours=2),
        end=t0,
        max_parallel=1,
        tick_s=2.0,
        created_at=t0,
        updated_at=t0,
    )
    store.create_backfill(backfill)
    segment = LAYOUT.shard_for(Lane.FAR, "default", "job-0")

    def backfills() -> list[str]:
        page = store.audit_page(segment, LAYOUT.shard_count, 100)
        return [item.id for item in page.items if isinstance(item, Backfill)]

    assert backfills() == [backfill.id]
    done = backfill.model_copy(update={"state": BackfillState.DONE, "revision": 2})
    assert store.update_backfill(done, 1)
    assert backfills() == []


def test_jobs_stored_before_the_index_are_enrolled_by_the_scan(dynamo_client: Any, t0: datetime) -> None:
    # Given jobs written by a store without a layout (as before the index: no segment)
    old = DynamoStore(dynamo_client, _table(dynamo_client))
    rig = AuditRig(old, ManualClock(t0))
    for i in range(12):
        register(rig, f"old-{i}", "rate(1 hour)")
    current = DynamoStore(dynamo_client, _table(dynamo_client), LAYOUT)

    def indexed() -> int:
        pages = [current.audit_page(s, LAYOUT.shard_count, 100) for s in range(LAYOUT.shard_count)]
        return sum(len(p.items) for p in pages)

    assert indexed() == 0
    # When the enrolment runs over its scan segments, twice (it is idempotent)
    assert sum(current.enrol_for_audit(s, 3) for s in range(3)) == 12
    assert sum(current.enrol_for_audit(s, 3) for s in range(3)) == 0
    # Then every job is in its segment
    assert indexed() == 12


def test_a_job_the_model_cannot_read_does_not_fail_its_segment(
    rig: AuditRig, dynamo_client: Any, store: DynamoStore
) -> None:
    good = register(rig, "good", "rate(1 hour)")
    bad = register(rig, "bad", "rate(1 hour)")
    dynamo_client.update_item(
        TableName=_table(dynamo_client),
        Key=schema.job_key("default", bad.id),
        UpdateExpression="SET #d = :d",
        ExpressionAttributeNames={"#d": "doc"},
        ExpressionAttributeValues={":d": {"S": '{"schedule": 5}'}},
    )
    pages = [store.audit_page(s, LAYOUT.shard_count, 100) for s in range(LAYOUT.shard_count)]
    assert [i.id for p in pages for i in p.items] == [good.id]
    assert [u.id for p in pages for u in p.unreadable] == [bad.id]
    assert rig.audit().unreadable == 1


# --------------------------------------------------------------------------- broken on purpose


def test_a_healthy_cluster_sees_no_repair(rig: AuditRig, t0: datetime) -> None:
    for job_id, schedule in [
        ("minutely", "rate(1 minute)"),
        ("fast", "rate(5 seconds)"),
        ("cron", "cron(*/2 * * * ? *)"),
        ("edge", "rate(3 minutes)"),
        ("delayed", "delay(15 seconds)"),
    ]:
        register(rig, job_id, schedule)
    register(rig, "child", "after(minutely)")
    rig.run(5, kills=[t0 + timedelta(minutes=3, seconds=10)])
    assert len(rig.reports) == 5 and rig.repairs == []
    assert sum(r.jobs for r in rig.reports) == 30


def test_a_deleted_timer_row_is_repaired(rig: AuditRig, dynamo_client: Any) -> None:
    job = register(rig, "job", "rate(1 minute)")
    rig.run(1)
    [head] = rig.future_chain_timers(job)
    breaker(rig, dynamo_client).delete(head)
    assert rig.future_chain_timers(job) == []
    rig.run(3)
    [repair] = rig.repairs
    assert (repair.kind, repair.missed_from, repair.applied) == ("clock", head.slot, True)
    [missed] = [r for r in rig.history(job) if r.status is ExecutionStatus.MISSED]
    assert (missed.slot, missed.last_slot, missed.slot_count) == (
        head.slot,
        repair.missed_through,
        repair.missed_count,
    )
    assert repair.next_slot in runs(rig, job) and max(runs(rig, job).values()) == 1
    assert rig.future_chain_timers(job)


def test_a_repair_whose_record_put_lost_its_answer_is_applied(
    lost_answers: DynamoStore, dynamo_client: Any, t0: datetime
) -> None:
    """QA27: every put applied, then sent again (a read timeout's retry): the repair's conditional
    put of its lost range found its own record, was judged another writer's lock, wrote no timer
    and told nothing, at every pass: the chain stayed dead."""
    rig = AuditRig(lost_answers, ManualClock(t0), grace_s=GRACE_S, poll_interval_s=4.0, work_every_s=2.0)
    job = register(rig, "job", "rate(1 minute)")
    rig.run(1)
    [head] = rig.future_chain_timers(job)
    breaker(rig, dynamo_client).delete(head)
    rig.run(3)
    [repair] = rig.repairs
    assert (repair.kind, repair.missed_from, repair.applied) == ("clock", head.slot, True)
    assert repair.next_slot in runs(rig, job) and max(runs(rig, job).values()) == 1
    assert rig.future_chain_timers(job)


def test_a_timer_row_of_another_version_is_repaired(rig: AuditRig, dynamo_client: Any) -> None:
    job = register(rig, "job", "rate(1 minute)")
    rig.run(1)
    [head] = rig.future_chain_timers(job)
    breaker(rig, dynamo_client).rewrite_version(head, job.version + 1)
    rig.run(3)
    [repair] = rig.repairs
    assert repair.kind == "clock" and repair.missed_from == head.slot
    assert max(runs(rig, job).values()) == 1


def test_a_timer_row_in_the_wrong_minute_is_found_and_its_slot_runs_once(
    rig: AuditRig, dynamo_client: Any
) -> None:
    job, head = misplaced_head(rig, breaker(rig, dynamo_client), "rate(5 minutes)", 6, 150)  # a later bucket
    [repair] = rig.repairs
    assert (repair.kind, repair.next_slot, repair.missed_count) == ("misplaced", head.slot, 0)
    assert head.sk in {t.sk for t in rig.chain_timers(job)}  # the right row written beside the stray
    assert runs(rig, job)[head.slot] == 1 and max(runs(rig, job).values()) == 1


def lose_next_timers(rig: AuditRig, dynamo_client: Any, job: Job) -> None:
    """A minute in which every chain timer ``job``'s releases (or its runs' ends) write is lost."""
    cut = breaker(rig, dynamo_client)
    cut.drop_next_timers(job)
    rig.run(1, audit_at_s=None)  # (no audit while the fault lasts: it would be dropped too)
    cut.stop_dropping()


def test_a_lost_next_timer_is_repaired(rig: AuditRig, dynamo_client: Any) -> None:
    job = register(rig, "job", "rate(1 minute)")
    rig.run(1)
    lose_next_timers(rig, dynamo_client, job)
    sent = rig.sent_slots(job)[-1]
    rig.run(3)
    [repair] = rig.repairs
    assert runs(rig, job)[sent] == 1 and repair.missed_from is not None and repair.missed_from > sent
    assert max(runs(rig, job).values()) == 1


def test_a_dead_delay_chain_is_armed_again(rig: AuditRig, dynamo_client: Any) -> None:
    job = register(rig, "job", "delay(20 seconds)")
    rig.run(1)
    lose_next_timers(rig, dynamo_client, job)
    before = len(runs(rig, job))
    rig.run(3)
    [repair] = rig.repairs
    assert repair.kind == "delay"
    assert len(runs(rig, job)) > before + 3 and max(runs(rig, job).values()) == 1


def test_a_dependant_link_lost_in_the_table_is_restored(rig: AuditRig, store: DynamoStore) -> None:
    parent = register(rig, "parent", "rate(1 minute)")
    child = register(rig, "child", "after(parent)")
    store.set_dependents("default", child.id, [parent.id], present=False)
    rig.run(3)
    [repair] = rig.repairs
    assert repair.kind == "dependency" and store.list_dependents("default", parent.id) == [child.id]
    assert runs(rig, child)


def test_slots_waiting_behind_stopped_workers_are_in_flight_not_repaired(rig: AuditRig, t0: datetime) -> None:
    # QA29: the workers down past the grace: a job's last slots (more than the eight the auditor
    # stepped through) wait in the queue; no repair, no MISSED. A delay() job's released run waiting
    # there is re-armed after the grace (its message may be lost: review of QA29), and the claim
    # keeps its run to one
    end = t0 + timedelta(minutes=14, seconds=30)
    delayed = register(rig, "delayed", "delay(20 seconds)")
    ending = register(rig, "ending", "rate(1 minute)", end_at=end.isoformat())
    rig.run(3)
    work = rig.work
    rig.work = lambda: None  # type: ignore[method-assign]
    rig.run(13)
    assert [r for r in rig.repairs if r.job_id != "delayed"] == []
    rig.work = work  # type: ignore[method-assign]
    rig.run(2)
    assert [r for r in rig.repairs if r.job_id != "delayed"] == []
    assert max(runs(rig, delayed).values()) == 1 and max(runs(rig, ending).values()) == 1
    assert len(runs(rig, ending)) == 14  # 10:01 .. 10:14
    assert not [r for r in rig.history(ending) if r.status is ExecutionStatus.MISSED]
