"""A deterministic driver for pollers: several minute-runs, each with its own clock skew,
interleaved on one simulated timeline (no threads, no real sleeping)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from punctual.dispatch.polling import MinutePoll, Poller, PollerConfig
from punctual.dispatch.queues import DispatchMessage, MemoryQueues, QueuePort
from punctual.models import Execution, ExecutionStatus
from punctual.runtime.clock import ManualClock, OffsetClock
from punctual.runtime.observability import MetricsSink
from punctual.store.base import ExecutionConflictError, JobStore
from punctual.store.memory import MemoryStore
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
        kills: Sequence[datetime | tuple[datetime, float]] | None = None,
        restart_s: float = 1.0,
        node_kills: list[tuple[datetime, Node]] | None = None,
    ) -> None:
        """Run, for every minute, one minute-run per poller, each started ``lead_s`` early
        by its own clock, until the base clock reaches ``until``.

        At each instant of ``kills`` every running poller dies (its memory is lost) and a
        new one of the same (minute, group) starts ``restart_s`` later (or as long after as a
        kill given as ``(instant, seconds)`` says), as the state machine's retry does; at each
        of ``node_kills`` only that node's running pollers die,
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
        back = {at: after for at, after in (k for k in kills or [] if isinstance(k, tuple))}
        deaths: list[tuple[datetime, Node | None]] = sorted(
            [(k[0] if isinstance(k, tuple) else k, None) for k in kills or []] + list(node_kills or []),
            key=lambda d: d[0],
        )
        while True:
            now = self.base.now()
            if now >= until:
                break
            while todo and todo[0][0] <= now:
                todo.pop(0)[1]()
            while deaths and deaths[0][0] <= now:
                died, victim = deaths.pop(0)
                after = back.get(died, restart_s) if victim is None else restart_s
                dying = [item for item in active if victim is None or item.node is victim]
                for node in {id(item.node): item.node for item in dying}.values():
                    if node.fresh is not None:  # the process died: nothing of it is kept
                        node.poller = node.fresh()
                for item in dying:
                    run = item.run
                    again = item.node.poller.minute_poll(run.minute, run.group, run.group_count)
                    pending.append(_Active(again, item.node, now + timedelta(seconds=after)))
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
            _claim_record(self.store, message, now, ExecutionStatus.RUNNING)

    def sent(self, job_id: str | None = None) -> list[DispatchMessage]:
        return [m for _, m in self.queues.log if job_id is None or m.job_id == job_id]

    def slots(self, job_id: str) -> list[str]:
        return [m.slot for m in self.sent(job_id)]


def _claim_record(store: JobStore, message: DispatchMessage, at: datetime, status: ExecutionStatus) -> None:
    """A worker's claim: the first delivery of a slot writes its record (a second one's fails)."""
    record = Execution(
        job_id=message.job_id,
        tenant=message.tenant,
        slot=message.slot,
        scheduled_at=datetime.fromisoformat(message.scheduled_at),
        attempt=message.attempt,
        status=status,
        started_at=at,
        job_version=message.job_version,
    )
    with contextlib.suppress(ExecutionConflictError):
        store.save_execution(record, None, 0)


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


class CountingQueues(RecordingQueues):
    """RecordingQueues that say how many messages wait (the backlog catch-up is paced by:
    :mod:`punctual.dispatch.polling.catchup_pace`), from the driver that takes them."""

    def __init__(self, base: ManualClock, waiting: Callable[[], int]) -> None:
        super().__init__(base)
        self._waiting = waiting

    def waiting(self, queue_urls: Sequence[str]) -> int:
        return self._waiting()


class SteadyWorkers(Simulation):
    """Workers that take the queue in the order sent, one claim each 1/``RATE`` s (a repeat of a
    claimed slot costs its claim too, and is dropped), also while a poller sleeps in its last
    checks (the driver runs a poller's ``finish`` whole; workers that stood still meanwhile made
    the queue's count stand, and its backlog look undrained). ``started``: each slot's first claim.
    With ``counted`` the queues say how many messages wait (sent, not yet claimed), as SQS does."""

    RATE = 20.0
    counted = False
    # How far behind the count is (SQS's approximate counts "may not achieve consistency until at
    # least 1 minute after the producers stop sending"): the backlog as it was this long ago.
    count_lag_s = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.counted:
            self.queues = CountingQueues(self.base, self._waiting)
        self._counts: list[tuple[datetime, int]] = []
        self.free_at: datetime | None = None

        # The workers keep taking the queue while a poller sleeps in its last checks (the driver
        # runs a poller's finish whole): they do not stand still while it waits.
        def sleep(seconds: float) -> None:
            end = self.base.now() + timedelta(seconds=max(seconds, 0.0))
            while (at := self._next_claim()) is not None and at <= end:
                self.base.set(max(at, self.base.now()))
                self._claim(self.base.now())
            self.base.set(max(end, self.base.now()))

        self.base.sleep = sleep  # type: ignore[method-assign]
        self.dropped = 0
        self.started: dict[tuple[str, str], datetime] = {}
        self.taken_at: list[datetime] = []  # when the workers took each message of the log

    def _waiting(self) -> int:
        now = self.base.now()
        self._counts.append((now, len(self.queues.log) - self._claimed))
        seen = [count for at, count in self._counts if at <= now - timedelta(seconds=self.count_lag_s)]
        return seen[-1] if seen else 0

    def _next_claim(self) -> datetime | None:
        if self._claimed >= len(self.queues.log):
            return None
        arrives = self.queues.log[self._claimed][0] + timedelta(milliseconds=50)
        return (
            arrives if self.free_at is None else max(arrives, self.free_at + timedelta(seconds=1 / self.RATE))
        )

    def _claim(self, now: datetime) -> None:
        while (at := self._next_claim()) is not None and at <= now:
            message = self.queues.log[self._claimed][1]
            self._claimed, self.free_at = self._claimed + 1, at
            self.taken_at.append(at)
            if (message.job_id, message.slot) in self.started:
                self.dropped += 1
                continue
            self.started[(message.job_id, message.slot)] = at
            _claim_record(self.store, message, at, ExecutionStatus.SUCCEEDED)


@dataclass
class CatchUpBeside:
    """What :func:`catch_up_beside_another_tenant` measured."""

    late: list[float]  # the other tenant's fire delays (its first claims), seconds
    ran: int  # slots of the owing jobs run
    copies: int  # messages re-sent by the pollers' watch
    # Copies sent while the workers were still taking messages sent before their original: each
    # joined the queue behind an original they were about to reach (no worker dies here)
    wasted: int
    last_owed_s: float  # when the last owed slot started, seconds after the pollers came back


def catch_up_beside_another_tenant(
    rate: float,
    counted: bool,
    jobs_owing: int = 1,
    minutes: int = 3,
    count_lag_s: float = 0.0,
    count: Callable[[int], int] | None = None,
    groups: int = 1,
) -> CatchUpBeside:
    """``jobs_owing`` rate(1 second) jobs of one tenant ran, then 7 minutes with no poller (420
    slots owed each, catch-up policy all), and another tenant's rate(5 seconds) job starting as
    the pollers come back; workers (:class:`SteadyWorkers`) that claim ``rate`` a second, the
    queues counted (``counted``: the backlog the pollers pace catch-up by, ``count_lag_s`` behind,
    or what ``count`` makes of the messages waiting) or not; ``groups`` shard groups, each its own
    poller (and pace) over the same queues."""
    from factories import spec
    from punctual.usecases.jobs import JobService, QueueRouting

    start = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    store, clock = MemoryStore(), ManualClock(start - timedelta(minutes=2))
    rig = type("Workers", (SteadyWorkers,), {"RATE": rate, "counted": counted, "count_lag_s": count_lag_s})
    sim = rig(store, clock)
    if counted and count is not None:
        waiting, say = sim._waiting, count
        sim.queues = CountingQueues(clock, lambda: say(waiting()))
    sim.config = replace(sim.config, resend_after_s=4.0)
    jobs = JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    owing = {
        jobs.register("acme", spec("rate(1 second)", start_at=start.isoformat()))[0].id
        for _ in range(jobs_owing)
    }
    pollers = [sim.poller(lane=(group, groups)) for group in range(groups)]
    sim.run([start - timedelta(minutes=1), start], until=start + timedelta(seconds=70), pollers=pollers)
    back = start + timedelta(minutes=8)
    clock.set(back - timedelta(seconds=10))
    first = (back + timedelta(seconds=2)).isoformat()
    other, _ = jobs.register("globex", spec("rate(5 seconds)", start_at=first))
    minutes_back = [back + timedelta(minutes=m) for m in range(minutes)]
    sim.run(minutes_back, until=back + timedelta(minutes=minutes), pollers=pollers)

    def instant(slot: str) -> datetime:
        return datetime.fromisoformat(slot.replace("Z", "+00:00"))

    started = sim.started.items()
    owed = [at for (job, slot), at in started if job in owing and instant(slot) < back]
    return CatchUpBeside(
        late=[(at - instant(slot)).total_seconds() for (job, slot), at in started if job == other.id],
        ran=sum(1 for (job, _), _at in started if job in owing),
        copies=sum(1 for _, m in sim.queues.log if m.resend),
        wasted=_wasted(sim),
        last_owed_s=(max(owed) - back).total_seconds() if owed else 0.0,
    )


def _wasted(sim: SteadyWorkers) -> int:
    """Copies sent before the workers took their first message (the slot's original, resend 0)."""
    first: dict[tuple[str, str, int], int] = {}
    wasted = 0
    for index, (at, message) in enumerate(sim.queues.log):
        original = first.setdefault((message.job_id, message.slot, message.attempt), index)
        if message.resend and (original >= len(sim.taken_at) or sim.taken_at[original] > at):
            wasted += 1
    return wasted
