"""One tenant's hanging runs do not hold every worker (punctual.execution.inflight).

A pool of worker threads on one lane, a real clock and the lease keeper: tenant A's jobs call a
target that hangs (until the test ends), one new slot a second; tenant B's slots, due meanwhile,
call a healthy target. Without a cap A's runs fill every worker and B's slots wait for A's
timeouts; with ``maxRunsInFlightPerTenant`` A holds its cap (and the runs it starts before the
first is counted) and B's slots run while A's still hang.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from execution_harness import LAYOUT, LONG, SHORT
from factories import job as make_job
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.queues import DispatchMessage, MemoryQueues, MessageKind
from punctual.execution import Delivery, Worker, WorkerConfig
from punctual.execution.keeper import LeaseKeeper
from punctual.models import Job
from punctual.runtime.clock import SystemClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key

pytestmark = pytest.mark.slow

WORKERS = 8
CAP = 2
A_SLOTS = 14  # one a second: without a cap, every worker is A's after eight
B_SLOTS = 10  # one every half second, after A's
DEADLINE_S = 60.0


class Targets:
    """A's target hangs until the test ends (or its run is stopped); B's answers at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.a_running = 0
        self.a_most = 0
        self.calls: list[tuple[str, str, int]] = []
        self.b_delays: list[float] = []

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        with self.lock:
            self.calls.append((ctx.job_id, ctx.slot, ctx.attempt))
            if ctx.tenant == "tenant-b":
                self.b_delays.append((datetime.now(UTC) - ctx.scheduled_at).total_seconds())
                return TargetResult.ok()
            self.a_running += 1
            self.a_most = max(self.a_most, self.a_running)
        while not self.release.is_set() and not ctx.cancel.is_set():
            self.release.wait(0.05)
            ctx.heartbeat()
        with self.lock:
            self.a_running -= 1
        return TargetResult.ok()


def fire(store: MemoryStore, queues: MemoryQueues, tenant: str, job_id: str) -> None:
    now = datetime.now(UTC)
    job: Job = make_job(job_id, "rate(1 hour)", now=now, tenant=tenant, timeout_seconds=600)
    store.create_job(job, None, max_jobs=1000)
    message = DispatchMessage(
        tenant=tenant,
        job_id=job_id,
        slot=slot_key(now),
        scheduled_at=now.isoformat().replace("+00:00", "Z"),
        attempt=1,
        job_version=job.version,
        kind=MessageKind.FIRE,
    )
    queues.send(SHORT, [message])


def run_lane(cap: int) -> Targets:
    store, clock, targets = MemoryStore(), SystemClock(), Targets()
    queues = MemoryQueues(now=clock.now)
    config = WorkerConfig(
        layout=LAYOUT,
        short_queue_urls=(SHORT,),
        long_queue_urls=(LONG,),
        lease_s=2,  # beats 1 s after the claim: counted then
        max_runs_in_flight=cap,
    )
    worker = Worker(store, queues, targets, clock, config)
    worker.in_flight.read_every_s = 0.2
    keeper = LeaseKeeper(worker, tick_s=0.1).start()
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            received = queues.receive(SHORT, 1, 0, config.lease_s)
            if not received:
                time.sleep(0.02)
                continue
            item = received[0]
            handled = worker.process(item.message, Delivery(SHORT, item.receipt, item.receive_count))
            if handled.ack:
                queues.delete(SHORT, item.receipt)

    pool = [threading.Thread(target=work, daemon=True) for _ in range(WORKERS)]
    for thread in pool:
        thread.start()
    try:
        for n in range(A_SLOTS):
            fire(store, queues, "tenant-a", f"a-{n}")
            time.sleep(1.0)
        for n in range(B_SLOTS):
            fire(store, queues, "tenant-b", f"b-{n}")
            time.sleep(0.5)
        deadline = time.monotonic() + DEADLINE_S
        while len(targets.b_delays) < B_SLOTS and time.monotonic() < deadline:
            time.sleep(0.1)
        return targets
    finally:
        targets.release.set()
        stop.set()
        keeper.stop()
        for thread in pool:
            thread.join(timeout=10)


def test_b_runs_while_a_hangs_at_its_cap() -> None:
    targets = run_lane(CAP)
    print(f"A's runs at once, at most {targets.a_most}; B's fire delays {sorted(targets.b_delays)}")
    assert len(targets.b_delays) == B_SLOTS  # every B slot ran while A's runs still hung
    assert targets.a_most < WORKERS  # A never held every worker
    assert len(targets.calls) == len(set(targets.calls))  # no attempt ran twice
