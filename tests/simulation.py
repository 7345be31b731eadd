"""A deterministic driver for pollers: several minute-runs, each with its own clock skew,
interleaved on one simulated timeline (no threads, no real sleeping)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from punctual.dispatch.polling import MinutePoll, Poller, PollerConfig
from punctual.dispatch.queues import DispatchMessage, MemoryQueues, QueuePort
from punctual.models import Execution, ExecutionStatus
from punctual.runtime.clock import ManualClock, OffsetClock
from punctual.runtime.observability import MetricsSink
from punctual.store.base import ExecutionConflictError, JobStore
from punctual.timing.timers import TimerLayout

SHORT = "queue://short"
LONG = "queue://long"
LAYOUT = TimerLayout(shard_count=8, near_shard_count=4, far_threshold_s=180)


class RecordingQueues(MemoryQueues):
    """MemoryQueues that also logs every accepted send with the true (base clock) instant."""

    def __init__(self, base: ManualClock) -> None:
        super().__init__(now=base.now)
        self.base = base
        self.log: list[tuple[datetime, DispatchMessage]] = []
        self.entries: list[datetime] = []  # the scheduled instant of every entry sent, repeats too
        self.ms_per_entry = 0.0
        self._recording = threading.Lock()

    def entries_between(self, low: datetime, high: datetime) -> int:
        """SQS entries sent (re-sends included) for slots scheduled in [low, high)."""
        return sum(1 for at in self.entries if low <= at < high)

    def send(self, queue_url: str, messages):  # type: ignore[no-untyped-def, override]
        with self._recording:  # the poller sends chunks from several threads
            before = {url: len(items) for url, items in self.queues.items()}
            self.entries.extend(datetime.fromisoformat(m.scheduled_at) for m in messages)
            if self.ms_per_entry:  # sending takes time: a storm of re-sends makes later slots late
                self.base.set(self.base.now() + timedelta(milliseconds=self.ms_per_entry * len(messages)))
            super().send(queue_url, messages)
            accepted = self.queues[queue_url][before.get(queue_url, 0) :]
            self.log.extend((self.base.now(), stored.message) for stored in accepted)


@dataclass
class Node:
    """A poller node: its own skewed view of the base clock."""

    poller: Poller
    offset_s: float = 0.0
    # A new poller of the same node: a killed one's memory (its resend watch too) is lost.
    fresh: Callable[[], Poller] | None = None
    lane: tuple[int, int] = (0, 1)  # the (shard group, group count) it polls of each minute


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
    claim_latency_s: float | None = None
    restarts: int = 0
    metrics: MetricsSink | None = None
    # Messages whose worker dies after receiving them, before its claim (never claimed: the
    # message stays in flight for the queue's visibility timeout, longer than any run here).
    lost: Callable[[DispatchMessage], bool] | None = None

    def __post_init__(self) -> None:
        self.queues = RecordingQueues(self.base)
        self._claimed = 0

    def poller(
        self,
        offset_s: float = 0.0,
        store: JobStore | None = None,
        queues: QueuePort | None = None,
        lane: tuple[int, int] = (0, 1),
    ) -> Node:
        clock = OffsetClock(self.base, offset_s) if offset_s else self.base

        def fresh() -> Poller:
            return Poller(store or self.store, queues or self.queues, clock, self.config, self.metrics)

        return Node(fresh(), offset_s, fresh, lane)

    def run(
        self,
        minutes: list[datetime],
        until: datetime,
        pollers: list[Node] | None = None,
        events: list[tuple[datetime, Callable[[], object]]] | None = None,
        kills: list[datetime] | None = None,
        restart_s: float = 1.0,
        node_kills: list[tuple[datetime, Node]] | None = None,
    ) -> None:
        """Run, for every minute, one minute-run per poller, each started ``lead_s`` early
        by its own clock, until the base clock reaches ``until``.

        At each instant of ``kills`` every running poller dies (its memory is lost) and a
        new one of the same (minute, group) starts ``restart_s`` later, as the state
        machine's retry does; at each of ``node_kills`` only that node's running pollers die,
        restarted the same way. With ``claim_latency_s`` set, a worker claims each accepted
        message that long after it was sent (it writes the RUNNING record).
        """
        pollers = pollers or [self.poller()]
        pending = [
            _Active(p.poller.minute_poll(m, *p.lane), p, m - timedelta(seconds=self.lead_s + p.offset_s))
            for m in minutes
            for p in pollers
        ]
        active: list[_Active] = []
        todo = sorted(events or [], key=lambda e: e[0])
        deaths: list[tuple[datetime, Node | None]] = sorted(
            [(at, None) for at in kills or []] + list(node_kills or []), key=lambda d: d[0]
        )
        while True:
            now = self.base.now()
            if now >= until:
                break
            while todo and todo[0][0] <= now:
                todo.pop(0)[1]()
            while deaths and deaths[0][0] <= now:
                victim = deaths.pop(0)[1]
                dying = [item for item in active if victim is None or item.node is victim]
                for node in {id(item.node): item.node for item in dying}.values():
                    if node.fresh is not None:  # the process died: nothing of it is kept
                        node.poller = node.fresh()
                for item in dying:
                    run = item.run
                    again = item.node.poller.minute_poll(run.minute, run.group, run.group_count)
                    pending.append(_Active(again, item.node, now + timedelta(seconds=restart_s)))
                self.restarts += len(dying)
                active = [item for item in active if item not in dying]
            self._claim(now)
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
            upcoming += [d[0] for d in deaths[:1]]
            claim_at = self._next_claim()
            if claim_at is not None:
                upcoming.append(claim_at)
            self.base.set(max(min(upcoming), self.base.now() + timedelta(milliseconds=1)))

    def _next_claim(self) -> datetime | None:
        if self.claim_latency_s is None or self._claimed >= len(self.queues.log):
            return None
        return self.queues.log[self._claimed][0] + timedelta(seconds=self.claim_latency_s)

    def _claim(self, now: datetime) -> None:
        """The workers: the first claim of each slot writes its record (a repeat is dropped)."""
        while (at := self._next_claim()) is not None and at <= now:
            message = self.queues.log[self._claimed][1]
            self._claimed += 1
            if self.lost is not None and self.lost(message):
                continue
            record = Execution(
                job_id=message.job_id,
                tenant=message.tenant,
                slot=message.slot,
                scheduled_at=datetime.fromisoformat(message.scheduled_at),
                attempt=message.attempt,
                status=ExecutionStatus.RUNNING,
                started_at=now,
                job_version=message.job_version,
            )
            with contextlib.suppress(ExecutionConflictError):  # a second delivery: the claim fails
                self.store.save_execution(record, None, 0)

    def sent(self, job_id: str | None = None) -> list[DispatchMessage]:
        return [m for _, m in self.queues.log if job_id is None or m.job_id == job_id]

    def slots(self, job_id: str) -> list[str]:
        return [m.slot for m in self.sent(job_id)]


def most_within(instants: Sequence[Any], window: Any) -> int:
    """The most of ``instants`` (datetimes, or seconds) in any one ``window`` (a timedelta, or
    seconds), wherever it starts: what a rate per window is checked against."""
    ordered = sorted(instants)
    most, low = 0, 0
    for high, instant in enumerate(ordered):
        while instant - ordered[low] >= window:
            low += 1
        most = max(most, high - low + 1)
    return most


def instant_of(message: DispatchMessage) -> datetime:
    """When a message's attempt is meant to start: its ``not_before``, else its scheduled instant."""
    return datetime.fromisoformat((message.not_before or message.scheduled_at).replace("Z", "+00:00"))
