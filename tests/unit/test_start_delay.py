"""``StartDelayMs``, what the ``StartDelayP99`` alarm reads: a first attempt's start after the
instant it was due to start, leaving out the waits a job asks for (QA25 review: a tenant's
smoothed or queued slots made the operator's alarm fire on lateness by design)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from execution_harness import SHORT, Rig
from punctual.delivery.targets.base import TargetResult
from punctual.models import Overlap
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.instants import format_instant_ms


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


def test_a_smoothed_slot_is_timed_from_the_instant_its_budget_gave_it(rig: Rig, t0: datetime) -> None:
    job = rig.add_job("smoothed")
    held = replace(rig.message(job, t0), not_before=format_instant_ms(t0 + timedelta(seconds=6)))
    rig.clock.set(t0 + timedelta(seconds=6.25))
    assert rig.worker().claim(held).claimed
    assert rig.metrics.values["StartDelayMs"] == [250.0]  # not 6,250: its wait was its budget's


def test_a_queued_slots_turn_is_not_timed_as_late(rig: Rig, t0: datetime) -> None:
    # Given an overlap 'queue' job whose slot t0 runs 30 s, and whose next slot comes meanwhile
    job = rig.add_job("queued", "rate(10 seconds)", overlap=Overlap.QUEUE)
    worker = rig.worker()
    rig.clock.set(t0)
    first = worker.claim(rig.message(job, t0))
    nxt = t0 + timedelta(seconds=10)
    rig.clock.set(nxt)
    assert worker.claim(rig.message(job, nxt)).outcome.value == "queued"
    # When the first ends and the turn starts the queued slot 20 s after its instant
    rig.clock.set(t0 + timedelta(seconds=30))
    worker.finish(first, TargetResult.ok())
    rig.work_until_idle(worker)
    # Then only the first start is timed: the queued slot waited for its own job's run
    assert rig.metrics.values["StartDelayMs"] == [0.0]
    assert len(rig.target.calls_for(job.id)) == 1  # (the turn's run: its start is not timed)


@pytest.mark.parametrize(("ended_s", "lane_s"), [(20, 0), (1, 30)], ids=["at-its-end", "lane-late"])
def test_a_slot_waiting_in_its_jobs_message_group_behind_a_run_is_timed_from_that_runs_end(
    rig: Rig, t0: datetime, ended_s: int, lane_s: int
) -> None:
    # Given an overlap 'queue' job whose slot t0 runs from its message (in flight: it holds the
    # job's FIFO message group), and whose next slot is released on time meanwhile
    job = rig.add_job("queued", "rate(10 seconds)", overlap=Overlap.QUEUE)
    worker = rig.worker()
    rig.send(rig.message(job, t0))
    [first] = rig.queues.receive(SHORT, 10, 0, 900)
    run = worker.claim(first.message)
    nxt = t0 + timedelta(seconds=10)
    rig.clock.set(nxt)
    rig.send(rig.message(job, nxt))
    assert rig.work(worker) == []  # it waits behind the run's message: no record, no claim
    # When the run ends and its message is deleted, ended_s after the next slot's instant, and the
    # lane starts the next slot lane_s after that
    rig.clock.set(nxt + timedelta(seconds=ended_s))
    worker.finish(run, TargetResult.ok())
    rig.queues.delete(SHORT, first.receipt)
    rig.clock.advance(lane_s)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    # Then its wait for its own job's run is not timed as late (QA: a run outliving its period put
    # each next slot's wait, minutes, in StartDelayP99), but the lane's start after that run's end
    # is (QA27 review: any run ending past the next instant hid the next start however late)
    assert rig.metrics.values["StartDelayMs"] == [0.0, lane_s * 1000.0]


def test_a_queue_jobs_slot_started_late_with_no_run_before_it_is_timed(rig: Rig, t0: datetime) -> None:
    # Given an overlap 'queue' job whose slot t0 ended on time
    job = rig.add_job("queued", "rate(10 seconds)", overlap=Overlap.QUEUE)
    worker = rig.worker()
    rig.send(rig.message(job, t0))
    rig.work_until_idle(worker)
    # When its next slot is started 20 s after its instant (the workers behind)
    nxt = t0 + timedelta(seconds=10)
    rig.send(rig.message(job, nxt))
    rig.clock.set(t0 + timedelta(seconds=30))
    rig.work_until_idle(worker)
    # Then that start is timed: no run of its job held it
    assert rig.metrics.values["StartDelayMs"] == [0.0, 20_000.0]
