"""A worker rig for execution tests: one store, FIFO queues, a manual clock, a scripted target.

The same rig serves the in-memory tests (tests/unit) and the DynamoDB ones (tests/integration):
only the store differs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from factories import job as make_job
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.polling import Poller, PollerConfig
from punctual.dispatch.queues import DispatchMessage, MemoryQueues, MessageKind
from punctual.execution import (
    Claim,
    Delivery,
    HandleResult,
    JobServicePauser,
    MemoryFailureSink,
    Worker,
    WorkerConfig,
)
from punctual.execution.keeper import LeaseKeeper
from punctual.models import Execution, ExecutionStatus, Job, Overlap
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.store.base import JobStore
from punctual.timing.timers import Lane, Timer, TimerLayout, minutes_between, slot_key

SHORT = "queue://short"
LONG = "queue://long"
LAYOUT = TimerLayout(shard_count=4, near_shard_count=2, far_threshold_s=180)

Script = Callable[[SlotContext], TargetResult]


class Crash(BaseException):
    """A worker process dying: not an Exception, so nothing in the worker catches it."""


class FakeTarget:
    """A TargetInvoker that records every call and answers from a script.

    ``results`` are returned in order (the last one repeats); a callable is called with the
    context; an exception instance is raised.
    """

    def __init__(self, *results: TargetResult | Script | BaseException) -> None:
        self.results = list(results) or [TargetResult.ok()]
        self.calls: list[SlotContext] = []

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        self.calls.append(ctx)
        step = self.results[min(len(self.calls), len(self.results)) - 1]
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            return step(ctx)
        return step

    def calls_for(self, job_id: str) -> list[tuple[str, int]]:
        return [(c.slot, c.attempt) for c in self.calls if c.job_id == job_id]


class UpperBound:
    """A jitter source that always draws the top of the range (deterministic instants)."""

    def uniform(self, a: float, b: float) -> float:
        return b


@dataclass
class Rig:
    store: JobStore
    clock: ManualClock
    target: FakeTarget = field(default_factory=FakeTarget)
    metrics: RecordingMetrics = field(default_factory=RecordingMetrics)
    failures: MemoryFailureSink = field(default_factory=MemoryFailureSink)
    queues: MemoryQueues = field(init=False)
    released_timers: set[tuple[str, str]] = field(default_factory=set)
    notifier: Any = None  # events and alerts (punctual.delivery.notifications.Notifier); None: neither

    def __post_init__(self) -> None:
        self.queues = MemoryQueues(now=self.clock.now)

    # ------------------------------------------------------------------ building

    def worker(
        self,
        *,
        lease_timers: bool = False,
        lease_s: int = 60,
        target: FakeTarget | None = None,
        clock: Any = None,
        signer: Any = None,
        dead_letters: Any = None,
        queues: Any = None,
        **config: Any,
    ) -> Worker:
        settings = WorkerConfig(
            layout=LAYOUT,
            short_queue_urls=(SHORT,),
            long_queue_urls=(LONG,),
            lease_s=lease_s,
            lease_timers=lease_timers,
            **config,
        )
        return Worker(
            self.store,
            queues or self.queues,
            target or self.target,
            clock or self.clock,
            settings,
            metrics=self.metrics,
            failures=self.failures,
            rng=lambda job_id, slot, attempt: UpperBound(),
            pauser=JobServicePauser(self.store, self.queues, clock or self.clock, settings),
            signer=signer,
            dead_letters=dead_letters,
            notifier=self.notifier,
        )

    def add_job(self, job_id: str = "job-1", schedule: str = "rate(1 minute)", **overrides: Any) -> Job:
        created = make_job(job_id, schedule, now=self.clock.now(), **overrides)
        self.store.create_job(created, None, max_jobs=1000)
        return created

    def created_again_after_a_run(self, slot: datetime, job_id: str = "job-1") -> tuple[Execution, Job]:
        """A job whose ``slot`` ran (a record SUCCEEDED, begun now), deleted, and two minutes later
        created again at its id (as an EventBridge schedule deleted and created again under its
        name): the earlier job's record and the new job."""
        old = self.add_job(job_id)
        now = self.clock.now()
        ran = Execution(
            job_id=old.id, tenant=old.tenant, slot=slot_key(slot), scheduled_at=slot,
            status=ExecutionStatus.SUCCEEDED, started_at=now, finished_at=now,
        )  # fmt: skip
        self.store.save_execution(ran, None, 0)
        self.store.delete_job(old.tenant, old.id)
        self.clock.advance(120)
        return ran, self.add_job(job_id)

    def message(
        self, job: Job, slot: datetime | str, attempt: int = 1, kind: str = MessageKind.FIRE
    ) -> DispatchMessage:
        key = slot if isinstance(slot, str) else slot_key(slot)
        at = slot if isinstance(slot, datetime) else self.clock.now()
        return DispatchMessage(
            tenant=job.tenant,
            job_id=job.id,
            slot=key,
            scheduled_at=at.isoformat().replace("+00:00", "Z"),
            attempt=attempt,
            job_version=job.version,
            kind=kind,
            ordered=job.overlap is Overlap.QUEUE,
        )

    # ------------------------------------------------------------------ queues

    def held_run(self, worker: Worker, job: Job, slot: datetime) -> tuple[LeaseKeeper, Claim]:
        """``job``'s slot as a Lambda batch runs it: received, held by a lease keeper (not started:
        stepped by the test), claimed, and registered as running."""
        self.send(self.message(job, slot))
        [received] = self.queues.receive(SHORT, 1, 0, 900)
        keeper = LeaseKeeper(worker)
        keeper.hold(SHORT, [received.receipt], worker.clock.now())  # (by the worker's own clock)
        claim = worker.claim(received.message, Delivery(SHORT, received.receipt, 1, received.message_id))
        assert claim.claimed
        worker.live.add(claim)
        return keeper, claim

    def send(self, *messages: DispatchMessage, queue: str = SHORT) -> None:
        self.queues.send(queue, list(messages))

    def work(self, worker: Worker, queue: str = SHORT, visibility_s: int = 900) -> list[HandleResult]:
        """Receive every visible message once, process it, delete it when acknowledged."""
        results = []
        for received in self.queues.receive(queue, 10, 0, visibility_s):
            delivery = Delivery(queue, received.receipt, received.receive_count, received.message_id)
            handled = worker.process(received.message, delivery)
            if handled.ack:
                self.queues.delete(queue, received.receipt)
            results.append(handled)
        return results

    def lambda_round(
        self,
        worker: Worker,
        errors: tuple[type[Exception], ...],
        seen: Callable[[Delivery], None] = lambda delivery: None,
    ) -> None:
        """Deliver what is visible on the short queue now, as the Lambda shell does: a record
        that raises one of ``errors`` is handed to ``after_error``; acknowledged records are
        deleted. ``seen`` is shown each delivery first."""
        for received in self.queues.receive(SHORT, 10, 0, 900):
            delivery = Delivery(SHORT, received.receipt, received.receive_count, received.message_id)
            seen(delivery)
            try:
                handled = worker.process(received.message, delivery)
            except errors as exc:
                if worker.after_error(received.message, delivery, exc):
                    self.queues.delete(SHORT, received.receipt)
                continue
            if handled.ack:
                self.queues.delete(SHORT, received.receipt)

    def work_until_idle(self, worker: Worker, queue: str = SHORT, rounds: int = 20) -> list[HandleResult]:
        out: list[HandleResult] = []
        for _ in range(rounds):
            batch = self.work(worker, queue)
            if not batch:
                return out
            out.extend(batch)
        raise AssertionError("queue did not drain")

    # ------------------------------------------------------------------ timers and the poller

    def timers(self, start: datetime, end: datetime, kind: Any = None) -> list[Timer]:
        """Every timer row due in [start, end], in due order."""
        found: list[Timer] = []
        for minute in minutes_between(start, end):
            for lane, count in ((Lane.FAR, LAYOUT.shard_count), (Lane.NEAR, LAYOUT.near_shard_count)):
                for shard in range(count):
                    found.extend(self.store.query_timers(lane, minute, shard))
        found = [t for t in found if start <= t.due <= end and (kind is None or t.kind is kind)]
        return sorted(found, key=lambda t: (t.due_ms, t.sk))

    def dispatcher(self, **overrides: Any) -> Poller:
        # No retry rate: each retry goes at its backoff's instant, not on its tenant's grid (the
        # retry rate per tenant has tests of its own: tests/unit/test_retry_pace.py).
        config = PollerConfig(
            layout=LAYOUT,
            short_queue_urls=(SHORT,),
            long_queue_urls=(LONG,),
            concurrency=1,
            max_retries_per_second_per_tenant=0,
            **overrides,
        )
        return Poller(self.store, self.queues, self.clock, config, notifier=self.notifier)

    def poll(self, lookback: timedelta = timedelta(minutes=15)) -> list[Timer]:
        """What a poller does now: release every due timer not released before."""
        now = self.clock.now()
        due = [t for t in self.timers(now - lookback, now) if (t.pk, t.sk) not in self.released_timers]
        if due:
            self.dispatcher().release(due)
            self.released_timers.update((t.pk, t.sk) for t in due)
        return due

    def advance_to(self, instant: datetime) -> None:
        self.clock.set(instant)

    def history(self, job: Job, limit: int = 50) -> list[Any]:
        return self.store.list_executions(job.tenant, job.id, limit=limit).items


def statuses(records: Iterable[Any]) -> list[tuple[int, str]]:
    return [(r.attempt, r.status.value) for r in records]
