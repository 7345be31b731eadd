"""A deterministic driver for pollers: several minute-runs, each with its own clock skew,
interleaved on one simulated timeline (no threads, no real sleeping)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from punctual.clock import ManualClock, OffsetClock
from punctual.polling import MinutePoll, Poller, PollerConfig
from punctual.queues import DispatchMessage, MemoryQueues, QueuePort
from punctual.store.base import JobStore
from punctual.timers import TimerLayout

SHORT = "queue://short"
LONG = "queue://long"
LAYOUT = TimerLayout(shard_count=8, near_shard_count=4, far_threshold_s=180)


class RecordingQueues(MemoryQueues):
    """MemoryQueues that also logs every accepted send with the true (base clock) instant."""

    def __init__(self, base: ManualClock) -> None:
        super().__init__(now=base.now)
        self.base = base
        self.log: list[tuple[datetime, DispatchMessage]] = []

    def send(self, queue_url: str, messages):  # type: ignore[no-untyped-def, override]
        before = {url: len(items) for url, items in self.queues.items()}
        super().send(queue_url, messages)
        accepted = self.queues[queue_url][before.get(queue_url, 0) :]
        self.log.extend((self.base.now(), stored.message) for stored in accepted)


@dataclass
class Node:
    """A poller node: its own skewed view of the base clock."""

    poller: Poller
    offset_s: float = 0.0


@dataclass
class _Active:
    run: MinutePoll
    node: Node
    wake: datetime  # base-clock instant
    started: bool = False


@dataclass
class Simulation:
    store: JobStore
    base: ManualClock
    queues: RecordingQueues = field(init=False)
    config: PollerConfig = field(
        default_factory=lambda: PollerConfig(
            layout=LAYOUT,
            short_queue_urls=(SHORT,),
            long_queue_urls=(LONG,),
            concurrency=2,
        )
    )
    lead_s: float = 10.0

    def __post_init__(self) -> None:
        self.queues = RecordingQueues(self.base)

    def poller(
        self, offset_s: float = 0.0, store: JobStore | None = None, queues: QueuePort | None = None
    ) -> Node:
        clock = OffsetClock(self.base, offset_s) if offset_s else self.base
        return Node(Poller(store or self.store, queues or self.queues, clock, self.config), offset_s)

    def run(
        self,
        minutes: list[datetime],
        until: datetime,
        pollers: list[Node] | None = None,
        events: list[tuple[datetime, Callable[[], object]]] | None = None,
    ) -> None:
        """Run, for every minute, one minute-run per poller, each started ``lead_s`` early
        by its own clock, until the base clock reaches ``until``."""
        pollers = pollers or [self.poller()]
        pending = [
            _Active(p.poller.minute_poll(m), p, m - timedelta(seconds=self.lead_s + p.offset_s))
            for m in minutes
            for p in pollers
        ]
        active: list[_Active] = []
        todo = sorted(events or [], key=lambda e: e[0])
        while True:
            now = self.base.now()
            if now >= until:
                break
            while todo and todo[0][0] <= now:
                todo.pop(0)[1]()
            for item in [a for a in pending if a.wake <= now]:
                pending.remove(item)
                item.run.start()
                item.started = True
                active.append(item)
            for item in list(active):
                if item.wake <= self.base.now():
                    wake = item.run.step()
                    if wake is None:
                        item.run.finish()
                        active.remove(item)
                    else:
                        item.wake = wake - timedelta(seconds=item.node.offset_s)
            if not active and not pending:
                break
            upcoming = [a.wake for a in active + pending] + [until] + [e[0] for e in todo[:1]]
            self.base.set(max(min(upcoming), self.base.now() + timedelta(milliseconds=1)))

    def sent(self, job_id: str | None = None) -> list[DispatchMessage]:
        return [m for _, m in self.queues.log if job_id is None or m.job_id == job_id]

    def slots(self, job_id: str) -> list[str]:
        return [m.slot for m in self.sent(job_id)]
