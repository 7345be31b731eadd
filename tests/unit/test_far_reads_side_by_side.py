"""Issue 31 (fairness under bursts): a minute's far buckets are read side by side at its start.

One after another, a burst's four buckets (5,000 timers) took 10 s in local mode on a loaded
machine against the 10 s lead, and the release came after the instant."""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from factories import spec
from punctual.dispatch.polling.minute import FAR_READS_AT_ONCE
from punctual.dispatch.polling.poller import Poller
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import Lane, TimerLayout
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import LAYOUT, LONG, SHORT, Simulation

T0 = datetime(2026, 12, 4, 3, 17, tzinfo=UTC)


class _SideBySide(MemoryStore):
    """A store whose far reads of one minute each wait until every one of them has begun."""

    def __init__(self, parties: int) -> None:
        super().__init__()
        self.barrier = threading.Barrier(parties, timeout=30)

    def query_timers(self, lane: Lane, minute: datetime, *args: Any, **kwargs: Any) -> Any:
        if lane is Lane.FAR and minute == T0:
            self.barrier.wait()  # broken (raises) when the reads come one after another
        return super().query_timers(lane, minute, *args, **kwargs)


def test_a_minutes_far_buckets_are_read_side_by_side_and_all_held() -> None:
    # Given a poller of a minute with a burst spread over its group's far buckets
    far = LAYOUT.shards_of_group(Lane.FAR, 0, 1)
    store = _SideBySide(len(far))
    clock = ManualClock(T0 - timedelta(minutes=10))
    sim = Simulation(store, clock)
    jobs = JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    for i in range(200):
        jobs.register("big", spec("at(2026-12-04T03:17:00)"), job_id=f"a{i:03d}")
    held = sum(len(MemoryStore.query_timers(store, Lane.FAR, T0, shard)) for shard in far)
    assert held == 200 and len(far) > 1
    poll = Poller(store, sim.queues, clock, sim.config).minute_poll(T0)
    clock.set(T0 - timedelta(seconds=10))

    # When it starts (its lead before the minute)
    poll.start()

    # Then every far bucket was read at once (each read waited for the others) and is held
    assert poll.unread == set()
    assert len(poll.drain) == 200


class _OneShardFails(MemoryStore):
    """A store whose first far read of one shard fails, and which notes the far reads."""

    def __init__(self, failing: int) -> None:
        super().__init__()
        self.failing = failing
        self.read: list[int] = []

    def query_timers(self, lane: Lane, minute: datetime, shard: int, *args: Any, **kwargs: Any) -> Any:
        if lane is Lane.FAR and minute == T0:
            self.read.append(shard)
            if shard == self.failing and self.read.count(shard) == 1:
                raise RuntimeError("throttled")
        return super().query_timers(lane, minute, shard, *args, **kwargs)


def test_more_far_buckets_than_threads_are_each_read_once_and_a_failed_one_is_retried(
    caplog: Any,
) -> None:
    # Given a poller whose group has more far buckets than the reads it makes at once, one of
    # whose reads fails
    layout = TimerLayout(shard_count=4 * FAR_READS_AT_ONCE + 3, near_shard_count=2)
    far = layout.shards_of_group(Lane.FAR, 0, 1)
    assert len(far) > FAR_READS_AT_ONCE
    store = _OneShardFails(far[5])
    clock = ManualClock(T0 - timedelta(minutes=10))
    sim = Simulation(store, clock)
    jobs = JobService(store, sim.queues, clock, layout, QueueRouting((SHORT,), (LONG,)))
    for i in range(300):
        jobs.register("big", spec("at(2026-12-04T03:17:00)"), job_id=f"a{i:03d}")
    in_failing = len(MemoryStore.query_timers(store, Lane.FAR, T0, far[5]))
    config = dataclasses.replace(sim.config, layout=layout)
    poll = Poller(store, sim.queues, clock, config).minute_poll(T0)
    clock.set(T0 - timedelta(seconds=10))

    # When it starts
    poll.start()

    # Then every bucket was read once, the failed one is left to retry (and logged), the rest held
    assert sorted(store.read) == sorted(far)  # (each once)
    assert poll.unread == {far[5]}
    assert len(poll.drain) == 300 - in_failing
    assert any("reading far bucket" in r.message and r.exc_info for r in caplog.records)

    # And the next poll reads it again and holds its timers
    poll._poll(clock.now())
    assert poll.unread == set() and len(poll.drain) == 300
