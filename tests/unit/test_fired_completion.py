"""``delete_after_completion`` on jobs with no computed last slot: a ``delay()`` job whose chain
reached its ``end_at`` is marked COMPLETED, then deleted as asked once no slot of its is live
(QA17: kept for good). An ``after()`` job past its ``end_at`` is kept COMPLETED: a parent's slot
inside its window may still run it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig
from factories import spec
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.usecases.jobs import JobService, QueueRouting

T0 = datetime(2027, 1, 1, 10, 0, tzinfo=UTC)


class _Sim:
    def __init__(self) -> None:
        self.clock = ManualClock(T0)
        self.rig = Rig(MemoryStore(), self.clock)
        self.jobs = JobService(
            self.rig.store, self.rig.queues, self.clock, LAYOUT, QueueRouting((SHORT,), (LONG,))
        )
        self.rig.target = FakeTarget(TargetResult.ok())
        self.worker = self.rig.worker()

    def run_for(self, span: timedelta, step: timedelta = timedelta(seconds=5)) -> None:
        end = self.clock.now() + span
        while self.clock.now() < end:
            self.clock.set(self.clock.now() + step)
            self.rig.poll(timedelta(hours=2))
            for lane in (SHORT, LONG):
                self.rig.work(self.worker, lane)


def test_a_delay_job_past_end_at_is_deleted_when_it_asked_to_be() -> None:
    sim = _Sim()
    body = spec("delay(10 minutes)", end_at="2027-01-01T10:25:00Z", delete_after_completion=True)
    sim.jobs.register("default", body, job_id="chain")
    sim.run_for(timedelta(minutes=40))
    assert sim.rig.store.get_job("default", "chain") is None
    runs = sim.rig.store.list_executions("default", "chain", 10).items  # its history stays
    assert [(r.slot, r.status) for r in runs] == [
        ("2027-01-01T10:20:00Z", ExecutionStatus.SUCCEEDED),
        ("2027-01-01T10:10:00Z", ExecutionStatus.SUCCEEDED),
    ]


def test_a_delay_job_past_end_at_without_it_stays_completed() -> None:
    sim = _Sim()
    sim.jobs.register("default", spec("delay(10 minutes)", end_at="2027-01-01T10:25:00Z"), job_id="chain")
    sim.run_for(timedelta(minutes=40))
    job = sim.rig.store.get_job("default", "chain")
    assert job is not None and job.state.value == "COMPLETED"


def test_an_after_job_past_end_at_is_kept_completed_even_when_it_asked_to_be_deleted() -> None:
    """Review: deleted at the first parent slot past its end_at, it lost an earlier parent slot
    still retrying inside its window (the child's slot never ran, no record)."""
    sim = _Sim()
    retried = {"n": 0}

    def second_try_succeeds(ctx: SlotContext) -> TargetResult:
        if ctx.job_id == "parent" and ctx.slot == "2027-01-01T10:10:00Z" and ctx.attempt == 1:
            retried["n"] += 1
            return TargetResult.retryable("HTTP 500")
        return TargetResult.ok()

    sim.rig.target = FakeTarget(second_try_succeeds)
    sim.worker = sim.rig.worker()  # (a worker calls the target it was made with)
    retry = {"max_attempts": 2, "backoff": "fixed", "base_seconds": 400, "max_seconds": 400, "jitter": False}
    sim.jobs.register("default", spec("rate(5 minutes)", retry=retry), job_id="parent")
    child = spec("after(parent)", end_at="2027-01-01T10:12:00Z", delete_after_completion=True)
    sim.jobs.register("default", child, job_id="child")
    sim.run_for(timedelta(minutes=30))
    job = sim.rig.store.get_job("default", "child")
    assert retried["n"] == 1 and job is not None and job.state.value == "COMPLETED"
    runs = {r.slot: r.status for r in sim.rig.store.list_executions("default", "child", 10).items}
    assert runs["2027-01-01T10:10:00Z"] is ExecutionStatus.SUCCEEDED  # after the parent's retry


def test_an_enabled_after_job_is_never_deleted_by_a_parents_end() -> None:
    sim = _Sim()
    sim.jobs.register("default", spec("rate(5 minutes)"), job_id="parent")
    sim.jobs.register("default", spec("after(parent)", delete_after_completion=True), job_id="child")
    sim.run_for(timedelta(minutes=20))
    job = sim.rig.store.get_job("default", "child")
    assert job is not None and job.state.value == "ENABLED"
