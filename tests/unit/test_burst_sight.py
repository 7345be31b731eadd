"""Bursts seen at any lead time (issue 32): the planner at every lead a burst can be registered
with, its re-plan before the minute, the Burst Shortfall it reports when capacity comes too late,
no phantom load from lease timers, and the ledger kept current by registration, replace and the
release of near chains (punctual.dispatch.load_forecast, punctual.dispatch.burst_sight)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fake_sfn import FakeSfn

from factories import spec
from punctual.delivery.notifications import EventPublisher, MemoryEventSink
from punctual.dispatch.burst_sight import BURST_SHORTFALL, execution_name
from punctual.dispatch.load_forecast import HORIZON_S, LoadForecast, seeded_slots
from punctual.dispatch.polling import Poller, PollerConfig
from punctual.dispatch.queues import MemoryQueues
from punctual.dispatch.scaling import MemoryActuator
from punctual.dispatch.tick import Tick
from punctual.runtime.clock import ManualClock
from punctual.runtime.settings import Settings
from punctual.store.loads import MinuteLoad
from punctual.store.memory import MemoryStore
from punctual.timing.timers import Lane, TimerKind, minute_of
from punctual.usecases.jobs import JobService, QueueRouting

M = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)  # the burst's minute
QUEUE = "queue://short"
SLOTS = 600
SETTINGS = Settings(
    shard_count=8,
    near_shard_count=2,
    load_sample_shards=8,
    burst_head_sample_shards=8,
    far_threshold_s=180,
    poller_lead_s=10,
    burst_triggers_per_poller=100,  # 600 slots at once: 6 pollers
    max_shard_groups=40,
    burst_workers_max=100,
    worker_max_concurrency=5,
    worker_max_concurrency_ceiling=5,
    event_source_cold_concurrency=5,
    event_source_ramp_per_minute=0,
    worker_message_ms=1000,  # the standing 5 start 50 slots in the 10 s target
    burst_worker_messages_per_s=10,  # a burst worker starts 100 in it: 600 slots ask for 6
    burst_start_lead_s=75,
    burst_hold_s=30,
    burst_lateness_target_s=10,
    worker_event_source_mappings=["uuid-1"],
    state_machine_arn="arn:aws:states:us-east-1:123456789012:stateMachine:minutes",
    short_queue_urls=[QUEUE],
)
WANTED_WORKERS = 6
WANTED_POLLERS = 6
SHORTFALL_SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "docs" / "burst_shortfall.schema.json").read_text()
)


class Deployment:
    """A store, the API's job service (with the ledger), the tick with its actuator and events."""

    def __init__(self, settings: Settings = SETTINGS) -> None:
        self.clock = ManualClock(M - timedelta(minutes=10))
        self.store = MemoryStore()
        self.queues = MemoryQueues(now=self.clock.now)
        self.layout = settings.layout()
        self.jobs = JobService(
            self.store,
            self.queues,
            self.clock,
            self.layout,
            QueueRouting((QUEUE,), ()),
            max_jobs_per_tenant=10**6,
            forecast=LoadForecast(self.store, self.layout, head_s=float(settings.burst_lateness_target_s)),
        )
        self.sfn = FakeSfn()
        self.actuator = MemoryActuator(burst_workers=0, max_concurrency=5)
        self.sink = MemoryEventSink()
        self.tick = Tick(settings, self.sfn, self.store, self.actuator, events=EventPublisher(self.sink))

    def register(self, count: int, schedule: str, **overrides: Any) -> None:
        for index in range(count):
            self.jobs.register("t", spec(schedule, **overrides), job_id=f"job-{index:04d}")

    def tick_at(self, instant: datetime) -> None:
        self.clock.set(instant)
        self.tick.start_minutes(instant)

    def shortfalls(self, minute: datetime) -> list[dict[str, Any]]:
        return [
            e.detail
            for e in self.sink.events
            if e.detail_type == BURST_SHORTFALL
            and e.detail["minute"] == minute.strftime("%Y-%m-%dT%H:%M:%SZ")
        ]

    def workers_asked_by(self, instant: datetime) -> int:
        asked = [
            value for at, what, value in self.actuator.changes if what == "burst_workers" and at <= instant
        ]
        return asked[-1] if asked else 0


def _run(lead_s: int, schedule: str | None = None) -> Deployment:
    """A burst of 600 slots at M registered ``lead_s`` before it; the ticks of every minute around."""
    deployment = Deployment()
    registered = False
    for k in (5, 4, 3, 2, 1, 0, -1, -2):
        tick_at = M - timedelta(minutes=k) + timedelta(seconds=2)
        if not registered and M - timedelta(seconds=lead_s) <= tick_at:
            deployment.clock.set(M - timedelta(seconds=lead_s))
            deployment.register(SLOTS, schedule or f"at({M:%Y-%m-%dT%H:%M:%S})", start_at=M.isoformat())
            registered = True
        deployment.tick_at(tick_at)
    return deployment


@pytest.mark.parametrize("lead_s", [600, 300, 181, 150, 121])
def test_a_burst_registered_two_minutes_ahead_is_fully_prepared_whatever_its_lane(lead_s: int) -> None:
    deployment = _run(lead_s)
    # Then its minute starts with the pollers it needs, never re-planned
    assert deployment.sfn.groups_of(M) >= WANTED_POLLERS
    assert execution_name(M) + "-r" not in deployment.sfn.executions
    # and its burst workers were asked for at least their start lead before it
    assert deployment.workers_asked_by(M - timedelta(seconds=SETTINGS.burst_start_lead_s)) >= WANTED_WORKERS
    assert deployment.shortfalls(M) == []


@pytest.mark.parametrize("lead_s", [110, 90, 70])
def test_a_burst_seen_at_the_last_tick_before_it_is_replanned_and_its_late_workers_reported(
    lead_s: int,
) -> None:
    deployment = _run(lead_s)
    # Then the minute, planned lean two minutes ahead, was stopped while it waited and started
    # again with the pollers the burst needs
    first = deployment.sfn.executions[execution_name(M)]
    assert first["status"] == "ABORTED" and len(first["input"]["groups"]) < WANTED_POLLERS
    assert deployment.sfn.groups_of(M) >= WANTED_POLLERS
    # and the burst workers asked for 58 s ahead come after their 75 s lead: a Burst Shortfall
    assert deployment.workers_asked_by(M) >= WANTED_WORKERS
    (first_report, *_) = deployment.shortfalls(M)
    assert first_report["late_slots"] > 0 and first_report["reason"] == "asked too late for the start lead"
    jsonschema.validate(first_report, SHORTFALL_SCHEMA)


@pytest.mark.parametrize("lead_s", [50, 20])
def test_a_burst_registered_after_the_last_tick_before_it_is_a_shortfall_not_a_silence(lead_s: int) -> None:
    deployment = _run(lead_s)
    # Then its pollers could not be changed (they start 10 s before it), and the tick after it
    # reports the minute served late and still asks for the workers (its backlog drains sooner)
    assert deployment.workers_asked_by(M + timedelta(seconds=2)) >= WANTED_WORKERS
    reports = deployment.shortfalls(M)
    assert reports and all(r["late_slots"] > 0 for r in reports)
    assert deployment.tick.metrics is not None


def test_a_near_chain_is_forecast_by_its_registration_and_each_release_a_horizon_ahead() -> None:
    # Given 600 rate(1 minute) jobs registered 150 s before their first slot (a near chain)
    deployment = Deployment()
    deployment.clock.set(M - timedelta(seconds=150))
    deployment.register(SLOTS, "rate(1 minute)", start_at=M.isoformat())
    horizon = int(HORIZON_S // 60)
    # Then the registration forecast their first slots, a horizon's worth
    for k in range(horizon):
        assert deployment.store.get_minute_load(M + timedelta(minutes=k)) == MinuteLoad(SLOTS, SLOTS)
    assert deployment.store.get_minute_load(M + timedelta(minutes=horizon)) == MinuteLoad()
    # When the poller releases their slot at M, Then it forecasts the slot a horizon later
    config = PollerConfig(layout=deployment.layout, short_queue_urls=(QUEUE,), burst_head_s=10)
    poller = Poller(deployment.store, deployment.queues, deployment.clock, config)
    deployment.clock.set(M)
    due = [
        t
        for lane, count in ((Lane.NEAR, 2), (Lane.FAR, 8))
        for shard in range(count)
        for t in deployment.store.query_timers(lane, M, shard)
    ]
    assert len(due) == SLOTS
    poller.release(due)
    assert deployment.store.get_minute_load(M + timedelta(minutes=horizon)) == MinuteLoad(SLOTS, SLOTS)
    # ... and each minute of the chain is in the ledger before the tick two minutes ahead looks
    deployment.tick_at(M + timedelta(minutes=horizon - 2, seconds=2))
    assert deployment.sfn.groups_of(M + timedelta(minutes=horizon)) >= WANTED_POLLERS


def test_a_replace_pause_and_delete_take_the_forecast_back() -> None:
    deployment = Deployment()
    deployment.clock.set(M - timedelta(seconds=100))
    deployment.jobs.register("t", spec("rate(1 minute)", start_at=M.isoformat()), job_id="j")
    assert deployment.store.get_minute_load(M).total == 1
    deployment.jobs.replace(
        "t", "j", spec("rate(1 minute)", start_at=(M + timedelta(seconds=30)).isoformat())
    )
    assert deployment.store.get_minute_load(M) == MinuteLoad(1, 0)  # now at :30, past the head
    deployment.jobs.pause("t", "j")
    assert deployment.store.get_minute_load(M) == MinuteLoad()
    deployment.jobs.resume("t", "j")
    assert deployment.store.get_minute_load(M).total == 1
    deployment.jobs.delete("t", "j")
    assert deployment.store.get_minute_load(M) == MinuteLoad()


def test_only_near_slots_are_forecast_far_ones_are_for_the_sample() -> None:
    layout = SETTINGS.layout()
    from factories import job as make_job

    now = M - timedelta(minutes=10)
    # a daily job whose first slot is 10 minutes away: a far timer, none in the ledger
    assert seeded_slots(make_job("a", "cron(0 12 * * ? *)", now=now), now, layout) == []
    # its first slot 2 minutes away: near, one slot (its chain is far)
    soon = now + timedelta(minutes=8)
    assert seeded_slots(make_job("b", "cron(0 12 * * ? *)", now=now), soon, layout) == [M]
    # a rate(10 seconds) job: every slot is near, a horizon's worth
    fast = seeded_slots(make_job("c", "rate(10 seconds)", now=now), now, layout)
    assert len(fast) == HORIZON_S // 10


def test_lease_timers_make_no_phantom_burst() -> None:
    # Given the LEASE timers 600 burst-task runs write (due 4 minutes later: far timers)
    deployment = Deployment()
    lease_minute = M + timedelta(minutes=4)
    timers = [
        deployment.layout.make(
            now=M,
            due=lease_minute,
            job_id=f"job-{i:04d}",
            tenant="t",
            slot=M.strftime("%Y-%m-%dT%H:%M:%SZ"),
            attempt=1,
            kind=TimerKind.LEASE,
            job_version=1,
            owner=f"task-{i}",
        )
        for i in range(SLOTS)
    ]
    deployment.store.put_timers(timers)
    # When the ticks look at that minute, Then it is no burst: no pollers, no workers for it
    for k in (2, 1, 0):
        deployment.tick_at(lease_minute - timedelta(minutes=k) + timedelta(seconds=2))
    assert deployment.sfn.groups_of(lease_minute) == 1
    assert (
        deployment.actuator.changes == []
        or deployment.workers_asked_by(lease_minute + timedelta(minutes=1)) == 0
    )


def test_the_minute_load_ledger_sums_its_shards_and_never_goes_negative() -> None:
    store = MemoryStore()
    store.add_minute_loads({M: MinuteLoad(5, 2)}, shard=3)
    store.add_minute_loads({M: MinuteLoad(-7, -1)}, shard=1)
    assert store.get_minute_load(M) == MinuteLoad(0, 1)
    assert store.get_minute_load(minute_of(M + timedelta(minutes=1))) == MinuteLoad()
