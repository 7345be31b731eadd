"""A retry storm in virtual time (tests/simulation.py): one tenant's jobs call a target that always
fails, each slot retried 186 times a millisecond apart, released by two shard groups of two pollers
each over several minutes. Its attempts keep to the deployment's retry rate per tenant in every
one-second window (punctual.dispatch.polling.retry_pace), while another tenant's slots start as
they would alone."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from factories import spec
from punctual.dispatch.queues import DispatchMessage
from punctual.models import Execution, ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.base import Expect
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerKind
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import LAYOUT, LONG, SHORT, Simulation, most_within

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
STORM = {"max_attempts": 186, "backoff": "fixed", "base_seconds": 0.001, "max_seconds": 0.001}
RATE = 20  # the storming tenant's retries a second, all pollers together
LATENCY_S = 0.2  # from a message's send (or its not_before) to its claim


class _FailingWorkers(Simulation):
    """Workers that claim each message kept by the queue at its instant (its ``not_before``, else
    its send plus the latency): the storming tenant's target fails every attempt (its next retry
    timer is due a millisecond later), the other tenant's succeeds. Every start is kept."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.waiting: list[tuple[datetime, int, DispatchMessage]] = []
        self.order = itertools.count()
        self.starts: list[tuple[datetime, DispatchMessage]] = []

    def _ingest(self) -> None:
        while self._claimed < len(self.queues.log):
            sent_at, message = self.queues.log[self._claimed]
            self._claimed += 1
            at = sent_at + timedelta(seconds=LATENCY_S)
            held = message.held_until
            heapq.heappush(self.waiting, (max(at, held) if held else at, next(self.order), message))

    def _next_claim(self) -> datetime | None:
        self._ingest()
        return self.waiting[0][0] if self.waiting else None

    def _claim(self, now: datetime) -> None:
        self._ingest()
        while self.waiting and self.waiting[0][0] <= now:
            _, _, message = heapq.heappop(self.waiting)
            self._run(message, now)

    def _run(self, message: DispatchMessage, now: datetime) -> None:
        current = self.store.get_execution(message.tenant, message.job_id, message.slot)
        n = message.attempt
        if (n == 1) != (current is None) or (current is not None and current.attempt != n - 1):
            return  # a stale copy: the claim drops it
        self.starts.append((now, message))
        fails = message.tenant == "storm"
        status = ExecutionStatus.SUCCEEDED
        if fails:
            status = ExecutionStatus.RETRY_WAIT if n < 186 else ExecutionStatus.FAILED
        record = Execution(
            job_id=message.job_id,
            tenant=message.tenant,
            slot=message.slot,
            scheduled_at=datetime.fromisoformat(message.scheduled_at)
            if current is None
            else current.scheduled_at,
            attempt=n,
            status=status,
            started_at=now,
            finished_at=now,
            job_version=message.job_version,
            error="HTTP 500" if fails else None,
        )
        expect = None if current is None else Expect(frozenset({ExecutionStatus.RETRY_WAIT}), n - 1)
        self.store.save_execution(record, expect, 0)
        if status is ExecutionStatus.RETRY_WAIT:
            timer = LAYOUT.make(
                now=now,
                due=now + timedelta(milliseconds=1),
                job_id=message.job_id,
                tenant=message.tenant,
                slot=message.slot,
                attempt=n + 1,
                kind=TimerKind.RETRY,
                job_version=message.job_version,
            )
            self.store.put_timers([timer])


def _storm(rate: float) -> _FailingWorkers:
    store = MemoryStore()
    clock = ManualClock(T0 - timedelta(minutes=6))
    sim = _FailingWorkers(store, clock)
    sim.config = replace(sim.config, max_retries_per_second_per_tenant=rate)  # (its pollers', below)
    jobs = JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    start = (T0 + timedelta(seconds=1)).isoformat()
    for n in range(4):  # 4 failing slots a second, 186 attempts each
        jobs.register("storm", spec("rate(1 second)", start_at=start, retry=STORM), job_id=f"storm-{n}")
    for n in range(6):  # the other tenant: a slot a second, and 6 every minute at once
        jobs.register("calm", spec("rate(1 second)", start_at=start), job_id=f"calm-rate-{n}")
    for n in range(6):
        jobs.register("calm", spec("rate(1 minute)", start_at=T0.isoformat()), job_id=f"calm-minute-{n}")
    clock.set(T0 - timedelta(seconds=15))
    nodes = [sim.poller(offset_s=0.1 * r, lane=(group, 2)) for group in range(2) for r in range(2)]
    minutes = [T0 + timedelta(minutes=m) for m in range(3)]
    sim.run(minutes, until=T0 + timedelta(minutes=3), pollers=nodes)
    return sim


def test_a_retry_storm_keeps_to_its_tenants_retry_rate_and_the_other_tenants_slots_go_on_time() -> None:
    sim = _storm(RATE)
    storm = [(at, m) for at, m in sim.starts if m.tenant == "storm"]
    retries = [at for at, m in storm if m.attempt > 1]
    # Then the storm made retries all along (the chains go on: none was dropped)
    assert len(retries) > 2 * 60 * RATE
    # and its retries started at most RATE in every one-second window, across the four pollers
    assert most_within(retries, timedelta(seconds=1)) <= RATE
    # (its first attempts are not held: each starts when its slot is due)
    for at, message in storm:
        if message.attempt == 1:
            assert at - datetime.fromisoformat(message.scheduled_at) <= timedelta(seconds=1.5)
    # and the other tenant's slots all started, each within the poll interval and the claim's latency
    calm = [(at, m) for at, m in sim.starts if m.tenant == "calm"]
    assert len(calm) >= 6 * 170 + 6 * 2
    assert max(at - datetime.fromisoformat(m.scheduled_at) for at, m in calm) <= timedelta(seconds=1.5)
    # and every deferred storm slot still waits for its retry (deferred, never dropped)
    waiting = [sim.store.get_execution("storm", m.job_id, m.slot) for at, m in storm if m.attempt == 1]
    assert all(r is not None and r.status is ExecutionStatus.RETRY_WAIT for r in waiting)
