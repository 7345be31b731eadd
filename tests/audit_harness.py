"""A small cluster for chain-audit tests: real minute pollers (:mod:`simulation`), a real worker,
the job service and the chain auditor, on one manual clock; the in-memory store (tests/unit) or
DynamoDB under moto (tests/integration). And the ways tests break a chain on purpose."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from execution_harness import FakeTarget, UpperBound
from factories import spec
from punctual.auditing import AuditConfig, AuditReport, ChainAuditor, Repair, Repairer
from punctual.delivery.notifications import EventPublisher, MemoryEventSink, Notifier
from punctual.dispatch.queues import QueueRouting
from punctual.execution import Delivery, JobServicePauser, MemoryFailureSink, Worker, WorkerConfig
from punctual.models import Execution, Job
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.store.base import JobStore
from punctual.timing.timers import CHAIN_KINDS, Timer, TimerKind, minute_of, minutes_between
from punctual.usecases.jobs import JobService
from simulation import LAYOUT, LONG, SHORT, Simulation

GRACE_S = 120
INFLIGHT_GRACE_S = 600
ROUTING = QueueRouting((SHORT,), (LONG,))


@dataclass
class AuditRig:
    """Pollers, a worker and the auditor over ``store``; ``run`` drives them minute by minute."""

    store: JobStore
    clock: ManualClock
    grace_s: float = GRACE_S
    repair: bool = True
    target: FakeTarget = field(default_factory=FakeTarget)
    metrics: RecordingMetrics = field(default_factory=RecordingMetrics)
    events: MemoryEventSink = field(default_factory=MemoryEventSink)
    reports: list[AuditReport] = field(default_factory=list)

    poll_interval_s: float = 1.0  # the pollers' near-lane reads (moto tests read less often)
    work_every_s: float = 1.0  # how often the worker takes what is visible

    def __post_init__(self) -> None:
        self.sim = Simulation(self.store, self.clock, metrics=self.metrics)
        self.sim.config.poll_interval_s = self.poll_interval_s
        self.queues = self.sim.queues
        self.jobs = JobService(self.store, self.queues, self.clock, LAYOUT, ROUTING)
        config = WorkerConfig(layout=LAYOUT, short_queue_urls=(SHORT,), long_queue_urls=(LONG,), lease_s=60)
        self.worker = Worker(
            self.store,
            self.queues,
            self.target,
            self.clock,
            config,
            metrics=self.metrics,
            failures=MemoryFailureSink(),
            rng=lambda job_id, slot, attempt: UpperBound(),
            pauser=JobServicePauser(self.store, self.queues, self.clock, config),
            notifier=Notifier(EventPublisher(self.events)),
        )
        self.auditor = self.make_auditor()

    def make_auditor(self, **overrides: Any) -> ChainAuditor:
        settings: dict[str, Any] = {
            "layout": LAYOUT,
            "period_minutes": 1,
            "grace_s": self.grace_s,
            "inflight_grace_s": INFLIGHT_GRACE_S,
            "repair": self.repair,
            "page_size": 7,  # small pages: paging is exercised too
        }
        settings.update(overrides)
        repairer = Repairer(self.store, LAYOUT, 30, self.queues, ROUTING)
        return ChainAuditor(
            self.store,
            self.clock,
            AuditConfig(**settings),
            repairer,
            self.metrics,
            EventPublisher(self.events),
        )

    # ------------------------------------------------------------------ driving

    def work(self) -> None:
        """Every worker: process every visible message once (acknowledged ones are deleted)."""
        for queue in (SHORT, LONG):
            for received in self.queues.receive(queue, 100, 0, 900):
                delivery = Delivery(queue, received.receipt, received.receive_count)
                handled = self.worker.process(received.message, delivery)
                if handled.ack:
                    self.queues.delete(queue, received.receipt)

    def audit(self) -> AuditReport:
        report = self.auditor.run(minute_of(self.clock.now()))
        self.reports.append(report)
        return report

    def run(
        self,
        minutes: int,
        events: Sequence[tuple[datetime, Callable[[], object]]] = (),
        kills: Sequence[datetime] = (),
        audit_at_s: float | None = 30.0,
        pollers: int = 1,
        skew_s: Sequence[float] = (),
    ) -> None:
        """Run ``minutes`` whole minutes from the next one: pollers for each minute, the worker
        every ``self.work_every_s``, the auditor at ``audit_at_s`` into each minute (None: not at all)."""
        start = minute_of(self.clock.now()) + timedelta(minutes=1)
        until = start + timedelta(minutes=minutes)
        timeline: list[tuple[datetime, Callable[[], object]]] = list(events)
        at = self.clock.now()
        while at < until:
            at += timedelta(seconds=self.work_every_s)
            timeline.append((at, self.work))
        if audit_at_s is not None:
            for minute in minutes_between(start, until - timedelta(minutes=1)):
                timeline.append((minute + timedelta(seconds=audit_at_s), self.audit))
        nodes = [self.sim.poller(offset) for offset in ([*skew_s] or [0.0] * pollers)]
        runs = minutes_between(start, until)
        self.sim.run(runs, until, pollers=nodes, events=timeline, kills=list(kills))

    # ------------------------------------------------------------------ reading

    @property
    def repairs(self) -> list[Repair]:
        return [repair for report in self.reports for repair in report.repairs]

    def history(self, job: Job) -> list[Execution]:
        return self.store.list_executions(job.tenant, job.id, 1000, newest_first=False).items

    def sent_slots(self, job: Job) -> list[str]:
        """The slots of ``job`` the pollers released (repeats included), in send order."""
        return self.sim.slots(job.id)

    def chain_timers(self, job: Job) -> list[Timer]:
        """Every chain timer row of ``job`` in the store (a scan: tests only), in due order."""
        found = [t for t in all_timers(self.store) if t.job_id == job.id and t.kind in CHAIN_KINDS]
        return sorted(found, key=lambda t: (t.due_ms, t.slot))

    def future_chain_timers(self, job: Job) -> list[Timer]:
        now = self.clock.now()
        return [t for t in self.chain_timers(job) if t.due >= now]


def all_timers(store: JobStore) -> list[Timer]:
    """Every timer row of ``store``: the in-memory buckets, or a scan of the DynamoDB table."""
    buckets = getattr(store, "_buckets", None)
    if buckets is not None:
        return [timer for bucket in buckets.values() for _, timer in bucket]
    client, table = store.client, store.table  # type: ignore[attr-defined]
    out: list[Timer] = []
    request: dict[str, Any] = {"TableName": table}
    while True:
        reply = client.scan(**request)
        for item in reply["Items"]:
            if not item["pk"]["S"].startswith(("timer#", "near#")):
                continue
            if "tm" in item:
                out.extend(store._timers_from_pack(item))  # type: ignore[attr-defined]
            else:
                out.append(store._timer_from_item(item))  # type: ignore[attr-defined]
        if "LastEvaluatedKey" not in reply:
            return out
        request["ExclusiveStartKey"] = reply["LastEvaluatedKey"]


def misplaced_head(
    rig: AuditRig, breaker: Breaker, schedule: str, minutes: int, seconds: int
) -> tuple[Job, Timer]:
    """A job of ``schedule`` run ``minutes``, whose head timer is then moved ``seconds`` (into
    another minute's bucket), run again until past its slot: the job and its head as it was."""
    job, _ = rig.jobs.register("default", spec(schedule), job_id="job")
    rig.run(minutes)
    [head] = rig.future_chain_timers(job)
    breaker.move(head, seconds)
    rig.run(minutes + 1)
    return job, head


# --------------------------------------------------------------------------- breaking chains


class Breaker:
    """Breaks chains in a store: removes or rewrites timer rows (the in-memory buckets, or the
    DynamoDB items, packs included), and drops the next timers a job's release writes."""

    def __init__(self, store: JobStore, client: Any = None, table: str | None = None) -> None:
        self.store = store
        self.client = client
        self.table = table
        self.dropping: set[tuple[str, str]] = set()
        self.dropped: list[Timer] = []
        self._put = store.put_timers
        store.put_timers = self._put_timers  # type: ignore[method-assign]

    def _put_timers(self, timers: Sequence[Timer]) -> None:
        kept = []
        for timer in timers:
            if (timer.tenant, timer.job_id) in self.dropping and timer.kind in (*CHAIN_KINDS, TimerKind.FIRE):
                self.dropped.append(timer)
                continue
            kept.append(timer)
        if kept:
            self._put(kept)

    def drop_next_timers(self, job: Job) -> None:
        """Every chain timer of ``job`` written from now on is lost (a release's next timer)."""
        self.dropping.add((job.tenant, job.id))

    def stop_dropping(self) -> None:
        self.dropping.clear()

    def delete(self, timer: Timer) -> None:
        """Remove one timer row (a lone row, or its entry of a pack)."""
        if self.client is None:
            bucket = self.store._buckets[(timer.lane, _minute_key(timer), timer.shard)]  # type: ignore[attr-defined]
            bucket[:] = [entry for entry in bucket if entry[0] != timer.sk]
            return
        self._delete_dynamo(timer)

    def _delete_dynamo(self, timer: Timer) -> None:
        reply = self.client.query(
            TableName=self.table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": timer.pk}},
            ConsistentRead=True,
        )
        others: list[Timer] = []
        for item in reply["Items"]:
            members = (
                self.store._timers_from_pack(item) if "tm" in item else [self.store._timer_from_item(item)]
            )  # type: ignore[attr-defined]
            if any(m.sk == timer.sk for m in members):
                self.client.delete_item(TableName=self.table, Key={"pk": item["pk"], "sk": item["sk"]})
                others.extend(m for m in members if m.sk != timer.sk)
        if others:
            self._put(others)

    def move(self, timer: Timer, seconds: int) -> None:
        """The same timer due ``seconds`` later (earlier if negative): in another minute's bucket."""
        from dataclasses import replace

        self.delete(timer)
        self._put([replace(timer, due_ms=timer.due_ms + seconds * 1000)])

    def rewrite_version(self, timer: Timer, version: int) -> None:
        """The timer of the same slot, written for another version of the job."""
        from dataclasses import replace

        self.delete(timer)
        self._put([replace(timer, job_version=version)])


def _minute_key(timer: Timer) -> str:
    from punctual.timing.timers import minute_key

    return minute_key(timer.due)
