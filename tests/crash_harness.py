"""What a poller crash costs: one minute of a job mix, pollers killed at given seconds.

The simulation (:mod:`simulation`) runs the real poller on the in-memory store with a
simulated clock; a kill drops every running poller's memory and starts the same
(minute, group) again ``restart_s`` later, as the state machine's retry does; workers
claim each message ``claim_latency_s`` after it is sent. Used by the crash tests and by
``bench/crash_cost.py`` (which prints the table in README).

The mix, for ``slots`` slots in the measured minute, a third each:

* ``rate(1 second)`` jobs: chains of near timers, the case that made re-sends quadratic;
* ``rate(1 minute)`` jobs spread over the minute's seconds: near timers a minute ahead;
* ``rate(1 hour)`` jobs due in the minute: far timers read ahead of the minute.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from punctual.models import JobSpec
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.store.base import ExecutionKey
from punctual.store.memory import MemoryStore
from punctual.timing.timers import Lane, Timer
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import LAYOUT, SHORT, Simulation

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)  # the measured minute


class CountingStore(MemoryStore):
    """The in-memory store, counting what a poller reads (DynamoDB read units follow these)."""

    def __init__(self) -> None:
        super().__init__()
        self.timer_rows_read = 0
        self.execution_keys_read = 0

    def query_timers(
        self, lane: Lane, minute: datetime, shard: int, from_ms: int | None = None, to_ms: int | None = None
    ) -> list[Timer]:
        rows = super().query_timers(lane, minute, shard, from_ms, to_ms)
        self.timer_rows_read += len(rows)
        return rows

    def batch_get_executions(self, keys: Iterable[ExecutionKey], consistent: bool = True):  # type: ignore[no-untyped-def]
        wanted = list(keys)
        self.execution_keys_read += len(wanted)
        return super().batch_get_executions(wanted, consistent)


@dataclass
class CrashCost:
    """The figures of one run."""

    slots: int  # slots due in the measured minute
    released: int  # of those, how many reached the queue (distinct)
    entries: int  # SQS entries sent for them (re-sends included)
    timer_rows_read: int
    execution_keys_read: int
    restarts: int
    delays_after_kill_ms: list[float] = field(default_factory=list)  # slots due after the first kill
    fire_delays_counted: int = 0  # FireDelayMs values the pollers emitted over the whole run
    resends: int = 0  # SQS entries over the whole run that the queue dropped as duplicates

    @property
    def entries_per_slot(self) -> float:
        return self.entries / self.slots

    def p99_after_kill_ms(self) -> float | None:
        delays = sorted(self.delays_after_kill_ms)
        return delays[min(len(delays) - 1, round(0.99 * (len(delays) - 1)))] if delays else None


def spec(schedule: str, start_at: datetime) -> JobSpec:
    target = {"type": "http", "url": "https://example.com/hook"}
    return JobSpec.model_validate({"schedule": schedule, "start_at": start_at.isoformat(), "target": target})


def crash_cost(
    slots: int,
    kill_seconds: Sequence[float],
    claim_latency_s: float = 0.5,
    restart_s: float = 1.0,
    ms_per_entry: float = 1.0,
) -> CrashCost:
    """Run the mix around minute ``T0`` with the pollers killed at ``T0 + s`` for each s.

    Each SQS entry sent costs ``ms_per_entry`` of simulated time (1 ms: what local mode's
    moto sustains), so re-sends delay the slots behind them as they would for real.
    """
    clock = ManualClock(T0 - timedelta(minutes=6))
    store = CountingStore()
    metrics = RecordingMetrics()
    sim = Simulation(store, clock, claim_latency_s=claim_latency_s, metrics=metrics)
    jobs = JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), ("queue://long",)))
    third = slots // 3
    chains = max(1, third // 60)
    for _ in range(chains):
        jobs.register("default", spec("rate(1 second)", T0 - timedelta(minutes=2)))
    for i in range(third):
        jobs.register(
            "default", spec("rate(1 minute)", T0 - timedelta(minutes=2, seconds=-(i * 60 // third)))
        )
    hourly = slots - chains * 60 - third
    for i in range(hourly):
        jobs.register("default", spec("rate(1 hour)", T0 + timedelta(seconds=i * 60 // hourly)))
    sim.queues.ms_per_entry = ms_per_entry
    minutes = [T0 + timedelta(minutes=m) for m in range(-3, 3)]
    sim.run(
        minutes,
        until=T0 + timedelta(minutes=2, seconds=30),
        kills=[T0 + timedelta(seconds=s) for s in kill_seconds],
        restart_s=restart_s,
    )
    first_kill = T0 + timedelta(seconds=min(kill_seconds)) if kill_seconds else None
    lo, hi = T0, T0 + timedelta(minutes=1)
    first_release: dict[tuple[str, str], datetime] = {}
    for at, message in sim.queues.log:
        scheduled = datetime.fromisoformat(message.scheduled_at)
        if lo <= scheduled < hi:
            first_release.setdefault((message.job_id, message.slot), at)
    delays = [
        (at - datetime.fromisoformat(slot)).total_seconds() * 1000
        for (_, slot), at in first_release.items()
        if first_kill is not None and datetime.fromisoformat(slot) >= first_kill
    ]
    return CrashCost(
        slots=chains * 60 + third + hourly,
        released=len(first_release),
        entries=sim.queues.entries_between(lo, hi),
        timer_rows_read=store.timer_rows_read,
        execution_keys_read=store.execution_keys_read,
        restarts=sim.restarts,
        delays_after_kill_ms=delays,
        fire_delays_counted=len(metrics.values.get("FireDelayMs", [])),
        resends=sim.queues.sends - len(sim.queues.log),
    )
