"""A whole scheduler on the in-memory store as stale and as contentious as DynamoDB.

The real poller (minute polls with their near-lane reads, drains, catch-up, release), the real
worker (claims, overlap turns, retries, dependants, alerts), the job service and the backfill
runner share one :class:`~punctual.store.memory.MemoryStore` whose eventually consistent reads
answer each item as it was up to ``stale_read_s`` before (random per read) and whose writes on
items a transaction holds meet a conflict with ``conflict_share`` probability. One simulated
timeline (:class:`simulation.Simulation`) drives them: the pollers of each minute, a worker that
takes what is in the queue every ``work_every_s``, and the scenario's own actions.

A write that outlives the store's conflict retries raises, as it would in AWS: an action (the
API's caller) tries again a moment later, a worker's message comes back after its visibility
timeout, a poller retries its step. The verdict reads what the target received and the
execution records.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig
from punctual.delivery.notifications import Alerter, EventPublisher, MemoryEventSink, Notifier
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.polling import Poller, PollerConfig
from punctual.execution import Delivery
from punctual.models import ExecutionStatus, Job
from punctual.runtime.clock import ManualClock
from punctual.store.base import TransactionConflictError
from punctual.store.memory import MemoryStore
from punctual.store.memory.fidelity import Fidelity
from punctual.timing.timers import minute_of
from punctual.usecases.backfill_runner import BackfillRunner
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import Node, Simulation

log = logging.getLogger("tests.fidelity_cluster")
TENANT = "default"
VISIBILITY_S = 30


@dataclass
class Cluster:
    start: datetime
    seed: int
    stale_read_s: float = 1.0
    conflict_share: float = 0.5
    work_every_s: float = 0.1
    answer: Callable[[SlotContext], TargetResult] = field(default=lambda ctx: TargetResult.ok())
    actions: list[tuple[datetime, Callable[[], object]]] = field(default_factory=list)
    down: tuple[float, float] | None = None  # seconds from the start: no poller, no worker

    def __post_init__(self) -> None:
        self.clock = ManualClock(self.start)
        self.fidelity = Fidelity(
            self.stale_read_s, self.conflict_share, seed=self.seed, clock=lambda: self.clock.now().timestamp()
        )
        self.store = MemoryStore(fidelity=self.fidelity)
        self.target = FakeTarget(self.answer)
        self.hooks = FakeTarget()
        self.events = MemoryEventSink()
        alerter = Alerter(self.store, self.hooks, self.clock, signing_secrets=lambda job: ("whsec_test",))
        self.notifier = Notifier(EventPublisher(self.events), alerter)
        config = PollerConfig(
            layout=LAYOUT, short_queue_urls=(SHORT,), long_queue_urls=(LONG,), concurrency=2
        )
        self.sim = Simulation(self.store, self.clock, config=config)
        self.rig = Rig(self.store, self.clock, target=self.target, notifier=self.notifier)
        self.rig.queues = self.sim.queues
        self.worker = self.rig.worker()
        self.service = JobService(
            self.store, self.sim.queues, self.clock, LAYOUT, QueueRouting((SHORT,), (LONG,))
        )
        self.backfills = BackfillRunner(
            self.store, self.sim.queues, self.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)), step_s=2.0
        )
        self.failed_actions = 0
        self.failed_work = 0

    # ------------------------------------------------------------------ the scenario

    def at(self, seconds: float, action: Callable[[], object]) -> None:
        """Do ``action`` (an API call) ``seconds`` after the start; a 503 is tried again 1 s later."""
        self.actions.append((self.start + timedelta(seconds=seconds), self._retrying(action)))

    def _retrying(self, action: Callable[[], object]) -> Callable[[], object]:
        def attempt() -> object:
            try:
                return action()
            except TransactionConflictError:
                self.failed_actions += 1
                self.actions_later.append((self.clock.now() + timedelta(seconds=1), attempt))
                return None

        return attempt

    def register(self, job_id: str, spec: Any) -> Callable[[], object]:
        return lambda: self.service.register(TENANT, spec, job_id=job_id)

    def run(self, seconds: float) -> None:
        """Run the timeline for ``seconds`` (pollers for every minute it touches); during
        ``down`` (seconds from the start) no poller and no worker runs."""
        until = self.start + timedelta(seconds=seconds)
        self.actions_later: list[tuple[datetime, Callable[[], object]]] = []
        phases = [(self.start, until)]
        if self.down is not None:
            off, on = (self.start + timedelta(seconds=s) for s in self.down)
            phases = [(self.start, off), (on, until)]
        for begin, end in phases:
            self.clock.set(max(self.clock.now(), begin))
            self._phase(begin, end)

    def _phase(self, begin: datetime, until: datetime) -> None:
        events = [action for action in self.actions if begin <= action[0] < until]
        instant = begin
        while instant < until:
            events.append((instant, self._work))
            instant += timedelta(seconds=self.work_every_s)
        events.append((until - timedelta(milliseconds=1), self._later))
        minutes = []
        minute = minute_of(begin)
        while minute <= until:
            minutes.append(minute)
            minute += timedelta(minutes=1)
        poller = Node(
            Poller(self.store, self.sim.queues, self.clock, self.sim.config, notifier=self.notifier)
        )
        self.sim.run(minutes, until, pollers=[poller], events=sorted(events, key=lambda e: e[0]))

    def _later(self) -> None:
        for _, action in self.actions_later:
            action()

    def _work(self) -> None:
        for action in [a for a in self.actions_later if a[0] <= self.clock.now()]:
            self.actions_later.remove(action)
            action[1]()
        for queue in (SHORT, LONG):
            for received in self.sim.queues.receive(queue, 10, 0, VISIBILITY_S):
                try:
                    handled = self.worker.process(
                        received.message, Delivery(queue, received.receipt, received.receive_count)
                    )
                except TransactionConflictError:
                    self.failed_work += 1  # the Lambda fails: the message comes back after its visibility
                    continue
                if handled.ack:
                    self.sim.queues.delete(queue, received.receipt)

    # ------------------------------------------------------------------ the verdict

    def runs(self, job_id: str) -> Counter[str]:
        """How often the target was called for each slot of ``job_id`` (first attempts)."""
        return Counter(c.slot for c in self.target.calls if c.job_id == job_id and c.attempt == 1)

    def statuses(self, job: Job | str) -> dict[str, ExecutionStatus]:
        job_id = job if isinstance(job, str) else job.id
        page = self.store.list_executions(TENANT, job_id, 1000, newest_first=False)
        return {record.slot: record.status for record in page.items}

    def alerts(self, job_id: str) -> Counter[tuple[str, str]]:
        return Counter((a.key_slot, a.condition.value) for a in self.store.list_alerts(TENANT, job_id, 1000))
