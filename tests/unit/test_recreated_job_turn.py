"""A job deleted and created again at its id while a slot of the earlier job still runs: the new
job's slots are not held by the earlier job's overlap turn (QA29: under ``skip`` the new job's first
slot was SKIPPED, "overlap: slot ... had not finished", naming the deleted job's run), nor, under
``queue``, by its FIFO message group (QA29: every new slot waited, with no record, until the deleted
job's run ended, up to its timeout: 14 minutes on the Lambda lane, days on ECS)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig
from factories import spec
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.queues import MemoryQueues
from punctual.models import Execution, ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key
from punctual.usecases.jobs import JobService, QueueRouting

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
FIRST, SECOND = T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)
EVERY_MINUTE = "cron(* * * * ? *)"


def _until(rig: Rig, end: datetime) -> None:
    worker = rig.worker()
    while rig.clock.now() < end:
        rig.clock.set(rig.clock.now() + timedelta(seconds=1))
        rig.poll()
        rig.work_until_idle(worker, SHORT)


def _second_slot_during_first_run(
    change: Callable[[JobService], object], overlap: str = "skip"
) -> tuple[Rig, Execution | None]:
    """An ``overlap`` job whose 12:01 run lasts while ``change`` is made, 5 s into it, and the
    12:02 slot comes due: the 12:02 slot's record as it is before the 12:01 run ends."""
    clock = ManualClock(T0)
    rig = Rig(MemoryStore(), clock)
    rig.queues = MemoryQueues(now=clock.now)
    jobs = JobService(rig.store, rig.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    seen: dict[str, Execution | None] = {}

    def long_run(ctx: SlotContext) -> TargetResult:
        if ctx.slot == slot_key(FIRST) and not seen:
            rig.clock.set(rig.clock.now() + timedelta(seconds=5))
            change(jobs)
            _until(rig, SECOND + timedelta(seconds=5))
            seen["second"] = rig.store.get_execution("default", "job-1", slot_key(SECOND))
        return TargetResult.ok()

    rig.target = FakeTarget(long_run)
    jobs.register("default", spec(EVERY_MINUTE, overlap=overlap), job_id="job-1")
    clock.set(FIRST - timedelta(seconds=1))
    _until(rig, FIRST + timedelta(seconds=1))
    return rig, seen["second"]


@pytest.mark.parametrize("overlap", ["skip", "queue"])
def test_a_job_created_again_does_not_wait_behind_the_deleted_jobs_run(overlap: str) -> None:
    # Given an overlap 'skip' or 'queue' job deleted and created again at its id while its 12:01
    # run lasts
    def created_again(jobs: JobService) -> None:
        jobs.delete("default", "job-1")
        jobs.register("default", spec(EVERY_MINUTE, overlap=overlap), job_id="job-1")

    rig, second = _second_slot_during_first_run(created_again, overlap)
    # Then the new job's 12:02 slot ran while the earlier job's run was still in flight: the turn
    # the deleted job's slot holds is no turn of the new job's, nor is its message group
    assert second is not None and second.status is ExecutionStatus.SUCCEEDED, second
    assert [c.slot for c in rig.target.calls] == [slot_key(FIRST), slot_key(SECOND)]
    # and the earlier run's end passes no turn to anyone (the new job's next slots run as usual)
    _until(rig, SECOND + timedelta(minutes=2, seconds=5))
    later = rig.store.get_execution("default", "job-1", slot_key(SECOND + timedelta(minutes=2)))
    assert later is not None and later.status is ExecutionStatus.SUCCEEDED


def test_a_replaced_jobs_run_in_flight_still_holds_the_turn() -> None:
    # The earlier-job rule reads versions, not clocks: a run of the same job released for its older
    # spec (a replace while it runs) still holds the turn, and the next slot is SKIPPED behind it
    def replaced(jobs: JobService) -> None:
        jobs.replace("default", "job-1", spec(EVERY_MINUTE, overlap="skip", payload={"v": 2}))

    _, second = _second_slot_during_first_run(replaced)
    assert second is not None and second.status is ExecutionStatus.SKIPPED, second
    assert second.error == f"overlap: slot {slot_key(FIRST)} had not finished"
