"""QA17 (qa3): ``after()`` children of parent slots that end in ways the rule names less often.

Found against local mode: a parent whose retry is superseded by a replace (the usual fix of a
failing webhook: ``PUT`` the job with the corrected target while its retry waits) ends its slot
``SUPERSEDED``, for good, and the child's and grandchild's slot had no record at all.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig
from factories import spec
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.queues import MessageKind
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key
from punctual.usecases.jobs import JobService, QueueRouting

RETRY = {"max_attempts": 3, "backoff": "fixed", "base_seconds": 60, "jitter": False}


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


def service(rig: Rig) -> JobService:
    return JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))


def test_a_parents_retry_superseded_by_a_replace_leaves_its_childs_slot_a_record(
    rig: Rig, t0: datetime
) -> None:
    # Given parent (hourly, retried after 60 s), child = after(parent), grandchild = after(child)
    jobs = service(rig)
    parent, _ = jobs.register("default", spec("rate(1 hour)", retry=RETRY), job_id="parent")
    child, _ = jobs.register("default", spec("after(parent)"), job_id="child")
    grandchild, _ = jobs.register("default", spec("after(child)"), job_id="grandchild")
    slot = t0 + timedelta(hours=1)

    def first_attempt_fails(ctx: SlotContext) -> TargetResult:
        return TargetResult.retryable("HTTP 500") if ctx.attempt == 1 else TargetResult.ok()

    rig.target = FakeTarget(first_attempt_fails)
    rig.clock.set(slot)
    worker = rig.worker()
    rig.send(rig.message(parent, slot))
    rig.work_until_idle(worker)
    waiting = rig.store.get_execution("default", parent.id, slot_key(slot))
    assert waiting is not None and waiting.status is ExecutionStatus.RETRY_WAIT
    # When the user fixes the parent's target while its retry waits (a replace)
    rig.clock.advance(5)
    jobs.replace("default", parent.id, spec("rate(1 hour)", retry=RETRY, payload={"fixed": True}))
    # and the retry comes due
    rig.clock.advance(120)
    rig.poll()
    rig.work_until_idle(worker)
    ended = rig.store.get_execution("default", parent.id, slot_key(slot))
    assert ended is not None and ended.status is ExecutionStatus.SUPERSEDED  # (documented)
    # Then the child's and the grandchild's slot say why they did not run (as under a FAILED,
    # SKIPPED or MISSED parent slot), rather than having no record at all
    assert rig.target.calls_for(child.id) == []
    for below, above in ((child, parent), (grandchild, child)):
        record = rig.store.get_execution("default", below.id, slot_key(slot))
        assert record is not None, f"{below.id}'s slot {slot_key(slot)} has no record"
        assert record.status is ExecutionStatus.MISSED  # a backfill with include_dependants runs it
        assert record.error == f"not run: parent {above.id}'s slot was " + (
            "SUPERSEDED" if above is parent else "MISSED"
        )


def test_a_failed_run_now_slot_of_one_parent_records_no_slot_for_a_child_of_several(
    rig: Rig, t0: datetime
) -> None:
    # Given a and b hourly, both = after(a, b) and solo = after(a)
    jobs = service(rig)
    a, _ = jobs.register("default", spec("rate(1 hour)", retry={"max_attempts": 1}), job_id="a")
    jobs.register("default", spec("rate(1 hour)"), job_id="b")
    both, _ = jobs.register("default", spec("after(a, b)"), job_id="both")
    solo, _ = jobs.register("default", spec("after(a)"), job_id="solo")
    rig.target = FakeTarget(TargetResult.permanent("HTTP 500"), TargetResult.ok())
    worker = rig.worker()
    # When a's run-now slot fails, and a later run-now slot of a succeeds
    failed = f"{slot_key(t0)}~m000000000001"
    rig.send(rig.message(a, failed, kind=MessageKind.MANUAL))
    rig.work_until_idle(worker)
    rig.clock.advance(10)
    succeeded = f"{slot_key(rig.clock.now())}~m000000000002"
    rig.send(rig.message(a, succeeded, kind=MessageKind.MANUAL))
    rig.work_until_idle(worker)
    # Then the child of a alone follows a's run-now slots: SKIPPED under the failure, run after
    # the success (a parent's run-now slot still runs its children)
    assert [(r.slot, r.status.value) for r in rig.history(solo)] == [
        (succeeded, "SUCCEEDED"),
        (failed, "SKIPPED"),
    ]
    # And the child of a and b has neither: a run-now slot names only a, so both never has it
    # (QA17: its history showed the failed one SKIPPED, "not run: parent a's slot ended FAILED",
    # with its event, while the successful one, rightly, left no record)
    assert rig.history(both) == []
    assert rig.target.calls_for(both.id) == []


@pytest.mark.parametrize("unlink", ["delete the child", "replace the child"])
def test_a_completed_parent_kept_for_its_child_is_deleted_once_no_child_names_it(
    rig: Rig, t0: datetime, unlink: str
) -> None:
    # Given a one-time parent that asked to be deleted after completion, and a child after it
    jobs = service(rig)
    once = t0 + timedelta(minutes=5)
    at = f"at({once.strftime('%Y-%m-%dT%H:%M:%S')})"
    parent, _ = jobs.register("default", spec(at, delete_after_completion=True), job_id="once")
    child, _ = jobs.register("default", spec("after(once)"), job_id="child")
    # When its slot has run (and the child's after it)
    rig.clock.set(once + timedelta(seconds=1))
    rig.poll()
    rig.work_until_idle(rig.worker())
    assert rig.target.calls_for(child.id) == [(slot_key(once), 1)]
    # Then it is kept, COMPLETED, while the child names it (documented)
    kept = rig.store.get_job("default", parent.id)
    assert kept is not None and kept.state.value == "COMPLETED"
    # And once the child no longer names it, it is deleted, as it asked (QA17: kept for good)
    rig.clock.advance(60)
    if unlink == "delete the child":
        jobs.delete("default", child.id)
    else:
        jobs.replace("default", child.id, spec("rate(1 hour)"))
    assert rig.store.get_job("default", parent.id) is None
    assert [r.status.value for r in rig.history(parent)] == ["SUCCEEDED"]  # its history stays


def test_jitter_on_an_after_job_is_refused_and_a_stored_one_stays_readable() -> None:
    """QA17: taken and silently ignored (a child is sent when its last parent succeeds)."""
    from pydantic import ValidationError

    from punctual.models import ACCEPTED, Job, JobSpec

    body = {
        "schedule": "after(a)",
        "jitter_seconds": 30,
        "target": {"type": "http", "url": "https://e.com/x"},
    }
    with pytest.raises(
        ValidationError, match="jitter_seconds: an after\\(\\) job runs when its parents succeed"
    ):
        JobSpec.model_validate(body)
    stamp = "2026-12-01T00:00:00Z"
    stored = {**body, "id": "c", "tenant": "t", "created_at": stamp, "updated_at": stamp, "anchor": stamp}
    assert Job.model_validate(stored, context=ACCEPTED).jitter_seconds == 30
