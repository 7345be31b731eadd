"""Two tenants that chose the same job id, run by the real poller loop and the real worker.

:class:`TwoTenants` registers jobs with :class:`JobService`, runs minute pollers on a simulated
timeline (:mod:`simulation`, the real ``MinutePoll`` and drain) and hands what they send to a
real :class:`~punctual.execution.Worker` every few seconds of that timeline, on one store (the
in-memory one or DynamoDB under moto). ``calls(tenant)`` are the target calls of a tenant's
runs, in order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta

from execution_harness import LAYOUT, LONG, SHORT, Rig
from punctual.dispatch.polling import PollerConfig
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobStore
from punctual.timing.timers import Lane, TimerLayout, shard_of
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import Simulation

WORK_EVERY_S = 5


def same_shards(job_id: str, first: str, layout: TimerLayout = LAYOUT) -> str:
    """A tenant name whose timers of ``job_id`` share ``first``'s shard in both lanes, so both
    tenants' rows meet in one bucket (one query, one pack, one drain) as they did before the
    tenant was in the key."""
    for n in range(10_000):
        other = f"{first}-twin-{n}"
        if all(
            shard_of(other, job_id, count) == shard_of(first, job_id, count)
            for count in (layout.shard_count, layout.near_shard_count)
        ):
            return other
    raise AssertionError("no tenant name shares the shards")


class TwoTenants:
    """Jobs of several tenants on one store, released by minute pollers, run by a worker."""

    def __init__(self, store: JobStore, start: datetime) -> None:
        self.clock = ManualClock(start)
        config = PollerConfig(
            layout=LAYOUT, short_queue_urls=(SHORT,), long_queue_urls=(LONG,), concurrency=2
        )
        self.sim = Simulation(store, self.clock, config=config)
        self.rig = Rig(store, self.clock)
        self.rig.queues = self.sim.queues  # the worker takes what the pollers send
        self.worker = self.rig.worker()
        self.jobs = JobService(store, self.sim.queues, self.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))

    def run(
        self, first_minute: datetime, minutes: int, events: list[tuple[datetime, Callable[[], object]]] = ()
    ) -> None:
        """Pollers for ``minutes`` minutes from ``first_minute``; the worker drains the queue every
        few seconds; ``events`` happen at their instants."""
        end = first_minute + timedelta(minutes=minutes)
        work = [
            (first_minute + timedelta(seconds=s), self._work)
            for s in range(0, int((end - first_minute).total_seconds()) + 60, WORK_EVERY_S)
        ]
        self.sim.run(
            [first_minute + timedelta(minutes=k) for k in range(minutes)],
            until=end + timedelta(seconds=30),
            events=[*events, *work],
        )
        self._work()

    def _work(self) -> None:
        self.rig.work_until_idle(self.worker)

    def calls(self, tenant: str) -> list[str]:
        """The slots the target was called for on behalf of ``tenant``'s jobs, in call order."""
        return [c.slot for c in self.rig.target.calls if c.tenant == tenant]

    def once_each(self, tenant: str) -> bool:
        counts = Counter(self.calls(tenant))
        return all(n == 1 for n in counts.values())

    def buckets(self, job_id: str, tenant: str) -> set[tuple[Lane, int]]:
        return {
            (lane, shard_of(tenant, job_id, count))
            for lane, count in ((Lane.FAR, LAYOUT.shard_count), (Lane.NEAR, LAYOUT.near_shard_count))
        }
