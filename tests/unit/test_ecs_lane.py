"""ECS worker tasks running before the ECS lane's slots are due (punctual.dispatch.ecs_lane).

The ECS worker service scales from ``ecsMinTasks`` (0 by default) on waiting messages: a slot that
found no task waited minutes for the scale-out and a Fargate start. The ledger now counts every
ECS-lane slot ahead (registration: the first slot; a release: the slot of the next timer it
writes), and each tick raises the service's minimum while such a slot is in sight.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fake_sfn import FakeSfn

from factories import spec
from punctual.dispatch.ecs_lane import EcsLaneReadiness, MemoryScalableTarget
from punctual.dispatch.load_forecast import LoadForecast
from punctual.dispatch.polling import PollerConfig
from punctual.dispatch.scaling import MemoryActuator
from punctual.dispatch.tick import Tick
from punctual.models import Runtime
from punctual.runtime.clock import ManualClock
from punctual.runtime.settings import Settings
from punctual.store.memory import MemoryStore
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import LAYOUT, LONG, SHORT, Simulation

M = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)  # the ECS job's first slot
SIGHT_S = 150.0
SETTINGS = Settings(
    shard_count=LAYOUT.shard_count,
    near_shard_count=LAYOUT.near_shard_count,
    far_threshold_s=LAYOUT.far_threshold_s,
    state_machine_arn="arn:aws:states:us-east-1:123456789012:stateMachine:minutes",
)


class Lane:
    """The API's job service with the ledger, the tick with the ECS lane's readiness."""

    def __init__(self, target: Any = None) -> None:
        self.clock = ManualClock(M - timedelta(minutes=10))
        self.store = MemoryStore()
        self.sim = Simulation(
            self.store,
            self.clock,
            config=PollerConfig(
                layout=LAYOUT, short_queue_urls=(SHORT,), long_queue_urls=(LONG,), concurrency=2
            ),
        )
        self.jobs = JobService(
            self.store,
            self.sim.queues,
            self.clock,
            LAYOUT,
            QueueRouting((SHORT,), (LONG,)),
            forecast=LoadForecast(self.store, LAYOUT, head_s=10.0),
        )
        self.target = target or MemoryScalableTarget()
        self.readiness = EcsLaneReadiness(self.store, self.target, 0, 2, SIGHT_S)
        self.tick = Tick(SETTINGS, FakeSfn(), self.store, ecs_lane=self.readiness)

    def minimum_at(self, instant: datetime) -> int | None:
        self.clock.set(max(instant, self.clock.now()))
        self.tick.start_minutes(instant)
        return self.target.min_capacity()


def test_an_ecs_lane_slot_has_tasks_asked_for_a_fargate_start_ahead_and_let_go_after() -> None:
    lane = Lane()
    job, _ = lane.jobs.register("t", spec("rate(1 hour)", start_at=M.isoformat(), runtime="ecs"))
    assert job.runtime is Runtime.ECS
    # Out of sight (the sight ends before M's minute): the service keeps its minimum of 0
    assert lane.minimum_at(M - timedelta(minutes=5)) == 0
    assert lane.minimum_at(M - timedelta(minutes=3)) == 0
    # In sight 120 s ahead (a Fargate start is about 60 s): two tasks asked for
    assert lane.minimum_at(M - timedelta(minutes=2)) == 2
    assert lane.minimum_at(M - timedelta(minutes=1)) == 2
    # The slot is released; the release forecasts the next one, an hour on (a far timer)
    lane.sim.run([M], until=M + timedelta(seconds=70))
    assert [m.slot for m in lane.sim.sent(job.id)] == ["2026-12-01T12:00:00Z"]
    assert lane.store.get_minute_load(M + timedelta(hours=1)).ecs == 1
    # Nothing in sight after it: back to 0 (the service's own policy scales in once idle)
    assert lane.minimum_at(M + timedelta(minutes=2)) == 0
    assert lane.minimum_at(M + timedelta(minutes=57)) == 0
    # And ready again before the next slot
    assert lane.minimum_at(M + timedelta(minutes=58)) == 2
    assert lane.target.changes == [2, 0, 2]  # written only when it changed


def test_lambda_lane_jobs_ask_for_no_task() -> None:
    lane = Lane()
    lane.jobs.register("t", spec("rate(1 hour)", start_at=M.isoformat()))
    assert lane.minimum_at(M - timedelta(minutes=2)) == 0
    assert lane.target.changes is None


def test_a_job_moved_off_the_ecs_lane_or_paused_takes_its_slot_back() -> None:
    lane = Lane()
    moved, _ = lane.jobs.register("t", spec("rate(1 hour)", start_at=M.isoformat(), runtime="ecs"))
    paused, _ = lane.jobs.register("t", spec("rate(1 hour)", start_at=M.isoformat(), runtime="ecs"))
    assert lane.store.get_minute_load(M).ecs == 2
    lane.jobs.replace("t", moved.id, spec("rate(1 hour)", start_at=M.isoformat()))
    lane.jobs.pause("t", paused.id)
    assert lane.store.get_minute_load(M).ecs == 0
    assert lane.minimum_at(M - timedelta(minutes=2)) == 0


def test_a_slot_registered_inside_the_sight_is_seen_by_the_next_tick() -> None:
    lane = Lane()
    assert lane.minimum_at(M - timedelta(seconds=100)) == 0
    lane.jobs.register("t", spec("rate(1 hour)", start_at=M.isoformat(), runtime="ecs"))
    assert (
        lane.minimum_at(M - timedelta(seconds=40)) == 2
    )  # late for a Fargate start, sooner than a scale-out


class Failing(MemoryScalableTarget):
    def set_min_capacity(self, tasks: int) -> None:
        raise RuntimeError("ThrottlingException")


def test_a_failure_to_raise_the_minimum_never_keeps_a_minute_from_starting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lane = Lane(target=Failing())
    lane.jobs.register("t", spec("rate(1 hour)", start_at=M.isoformat(), runtime="ecs"))
    lane.clock.set(M - timedelta(minutes=2))
    started = lane.tick.start_minutes(M - timedelta(minutes=2))
    assert started  # the minutes in the look-ahead started all the same
    assert "readying the ECS lane failed" in caplog.text
    assert lane.target.min_capacity() == 0


def test_a_minimum_set_by_hand_above_the_ready_count_is_brought_to_it() -> None:
    # The tick owns the minimum: what it finds is only read to write when it differs
    target = MemoryScalableTarget(minimum=5)
    readiness = EcsLaneReadiness(MemoryStore(), target, 0, 2, SIGHT_S)
    decision = readiness.apply(M)
    assert (decision.in_sight, decision.minimum, decision.previous, decision.changed) == (0, 0, 5, True)
    assert readiness.apply(M).changed is False


def test_the_tick_reads_each_minute_of_the_ledger_once_and_afresh_at_each_decision() -> None:
    lane = Lane()
    lane.tick = Tick(SETTINGS, FakeSfn(), lane.store, MemoryActuator(), ecs_lane=lane.readiness)  # scaling on
    reads: list[datetime] = []
    original = lane.store.get_minute_load

    def counted(minute: datetime) -> Any:
        reads.append(minute)
        return original(minute)

    lane.store.get_minute_load = counted  # type: ignore[method-assign]
    assert lane.tick.sight(M - timedelta(minutes=3), {M - timedelta(minutes=2): 0}) is not None
    read_by_scaling = len(reads)
    lane.readiness.on_tick(M - timedelta(minutes=3), lane.tick.ledger)
    assert read_by_scaling and len(reads) == len(set(reads))  # the scaling's reads serve the ECS lane too
    # A later decision (local mode's scaler calls sight() every few seconds) reads afresh
    lane.jobs.register("t", spec("rate(1 hour)", start_at=M.isoformat(), runtime="ecs"))
    before = len(reads)
    lane.tick.sight(M - timedelta(minutes=2), {M - timedelta(minutes=1): 0, M: 0})
    assert len(reads) > before
    lane.readiness.on_tick(M - timedelta(minutes=2), lane.tick.ledger)
    assert lane.target.min_capacity() == 2


def _rig() -> Any:
    from execution_harness import Rig

    return Rig(MemoryStore(), ManualClock(M))


def test_a_retry_of_an_ecs_lane_attempt_is_counted_ahead_too() -> None:
    from punctual.delivery.targets.base import TargetResult

    rig = _rig()
    retry = {"max_attempts": 3, "backoff": "fixed", "base_seconds": 300, "jitter": False}
    ecs = rig.add_job("ecs-job", "rate(1 hour)", runtime="ecs", retry=retry)
    plain = rig.add_job("lambda-job", "rate(1 hour)", retry=retry)
    worker = rig.worker(target=type(rig.target)(TargetResult.retryable("HTTP 503")))
    for job in (ecs, plain):
        worker.process(rig.message(job, M))
    # Both retries are due five minutes on; only the ECS lane's is counted: the service may
    # have scaled in by then, and the tick has tasks running again for it
    assert rig.store.get_minute_load(M + timedelta(minutes=5)).ecs == 1


def test_a_delay_chains_next_slot_on_the_ecs_lane_is_counted_ahead() -> None:
    rig = _rig()
    job = rig.add_job("ecs-delay", "delay(10 minutes)", runtime="ecs")
    rig.worker().process(rig.message(job, M))
    # The worker writes the chain's next timer when the run ends: ten minutes on
    assert rig.store.get_minute_load(M + timedelta(minutes=10)).ecs == 1
