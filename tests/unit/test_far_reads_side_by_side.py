"""Issue 31 (fairness under bursts): a minute's far buckets are read side by side at its start.

One after another, a burst's four buckets (5,000 timers) took 10 s in local mode on a loaded
machine against the 10 s lead, and the release came after the instant."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from factories import spec
from punctual.dispatch.polling.poller import Poller
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import Lane
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
