"""A backfill whose job is replaced while it runs: the slots it has not sent yet run only when the
new spec has them (QA29: every planned slot ran under the new spec, an ``after()`` job's with no
parent's success, slots a new schedule never has)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig
from factories import spec
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.queues import MemoryQueues, QueueRouting
from punctual.execution import Delivery
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key
from punctual.usecases.backfill_runner import BackfillRunner
from punctual.usecases.backfills import BackfillState
from punctual.usecases.jobs import JobService

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
DAY = datetime(2026, 11, 30, tzinfo=UTC)
HOURLY = "cron(0 * * * ? *)"


def _rig(max_parallel: int) -> tuple[Rig, JobService, BackfillRunner]:
    clock = ManualClock(T0)
    rig = Rig(MemoryStore(), clock)
    rig.queues = MemoryQueues(now=clock.now)
    routing = QueueRouting((SHORT,), (LONG,))
    jobs = JobService(rig.store, rig.queues, clock, LAYOUT, routing)
    return rig, jobs, BackfillRunner(rig.store, rig.queues, clock, LAYOUT, routing, max_parallel=max_parallel)


def _run(rig: Rig, worker: Any, rounds: int) -> None:
    """Poll, work off what is queued, and move the clock on 2 s, ``rounds`` times."""
    for _ in range(rounds):
        rig.poll()
        rig.work_until_idle(worker)
        rig.clock.advance(2)


@pytest.mark.parametrize(
    ("new", "ran_hours"),
    [
        ({"schedule": HOURLY, "payload": {"fixed": True}}, range(6)),  # the same slots: all run
        ({"schedule": "cron(30 * * * ? *)"}, range(2)),  # another schedule: none of its slots
        ({"schedule": HOURLY, "start_at": "2026-11-30T03:30:00Z"}, [0, 1, 4, 5]),  # its window's
        ({"schedule": "after(other)"}, range(2)),  # an after() job runs when its parents do
        ({"schedule": "delay(5 minutes)"}, range(2)),  # a delay() job has no fixed slots
    ],
)
def test_the_slots_not_sent_yet_run_only_when_the_new_spec_has_them(
    new: dict[str, Any], ran_hours: range | list[int]
) -> None:
    rig, jobs, runner = _rig(max_parallel=1)
    clock = rig.clock
    jobs.register("default", spec(HOURLY), job_id="other")
    jobs.register("default", spec(HOURLY), job_id="job-1")
    # Given a backfill of six hourly slots, one at a time, whose first two have run
    started = runner.start("default", "job-1", DAY, DAY + timedelta(hours=6))
    worker = rig.worker()
    while len(rig.target.calls) < 2:
        rig.poll()
        rig.work_until_idle(worker)
        clock.advance(2)
    # When the job is replaced
    jobs.replace("default", "job-1", spec(**new))
    _run(rig, worker, 60)
    # Then the backfill ends, having run each slot the new spec has once, and the others not at all
    done = rig.store.get_backfill("default", "job-1", started.id)
    assert done is not None and done.state is BackfillState.DONE, done
    ran = [slot_key(DAY + timedelta(hours=h)) for h in ran_hours]
    assert [slot for slot, _ in rig.target.calls_for("job-1")] == ran
    assert (done.slots, done.dropped) == (ran, 6 - len(ran))
    assert runner.progress(done) == {"SUCCEEDED": len(ran)}


def test_a_job_made_overlap_skip_since_its_backfill_was_planned_runs_one_slot_at_a_time() -> None:
    """A backfill planned four at a time (overlap ``allow``) of a job replaced to ``skip``: its slots
    in flight together skipped one another (QA29: four of six SKIPPED, "overlap: slot ... had not
    finished", never run, and a later backfill leaves a SKIPPED slot alone)."""
    rig, jobs, runner = _rig(max_parallel=4)
    clock = rig.clock
    jobs.register("default", spec(HOURLY), job_id="job-1")
    started = runner.start("default", "job-1", DAY, DAY + timedelta(hours=6))
    assert started.max_parallel == 4
    jobs.replace("default", "job-1", spec(HOURLY, overlap="skip"))

    def lasting(ctx: SlotContext) -> TargetResult:
        # while a slot runs, other workers take what is queued meanwhile
        if ctx.slot not in running:
            running.add(ctx.slot)
            rig.work_until_idle(rig.worker())
        return TargetResult.ok()

    running: set[str] = set()
    rig.target = FakeTarget(lasting)
    worker = rig.worker()
    for _ in range(60):
        rig.poll()
        for received in rig.queues.receive(SHORT, 1, 0, 900):  # one message to this worker
            if worker.process(
                received.message, Delivery(SHORT, received.receipt, received.receive_count)
            ).ack:
                rig.queues.delete(SHORT, received.receipt)
        clock.advance(2)
    done = rig.store.get_backfill("default", "job-1", started.id)
    assert done is not None and done.state is BackfillState.DONE, done
    assert runner.progress(done) == {"SUCCEEDED": 6}
    assert sorted(slot for slot, _ in rig.target.calls_for("job-1")) == started.slots
