"""The poller: reads due timers, releases each slot at its instant to SQS FIFO, writes the next timer.

One poller owns (minute M, shard group g of n). It starts a little before M, and:

1. drains every bucket of its shards older than the previous minute that the watermark
   says was not drained (an outage), and the previous minute's once that minute's own
   poller should have finished;
2. reads the far bucket of M for each of its shards once (strongly consistent, paged)
   and holds the timers in memory;
3. until M + 60 s + grace, reads the near buckets of M every poll interval (with a
   look-back that covers clock skew) and releases every held timer at its instant;
4. advances the watermark of each shard whose buckets were all released and whose
   next timers were all written.

Releasing a fire timer: check the job (gone, paused or at another version → stale),
apply the catch-up policy, **send first** (dedup id per job+slot+attempt), **then**
write the next slot's timer. A crash between the two resends the same dedup id and
rewrites the same next timer, so nothing is lost or doubled.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from punctual.clock import Clock
from punctual.models import ExecutionStatus, Job, JobState, Runtime
from punctual.observability import MetricsSink, NullMetrics
from punctual.planning import dispatch_instant, plan_release
from punctual.queues import DispatchMessage, MessageKind, QueuePort, message_for, pick_queue
from punctual.store.base import JobStore
from punctual.timers import (
    Lane,
    Timer,
    TimerKind,
    TimerLayout,
    from_ms,
    minute_of,
    slot_instant,
    slot_key,
    to_ms,
)

log = logging.getLogger("punctual.dispatch")

_CHUNK = 100  # BatchGetItem's limit: timers are released in chunks of this many, concurrently


@dataclass
class DispatchConfig:
    layout: TimerLayout = field(default_factory=TimerLayout)
    short_queue_urls: Sequence[str] = ()
    long_queue_urls: Sequence[str] = ()
    poll_interval_s: float = 1.0
    grace_s: float = 10.0  # how long past its minute a poller keeps reading that minute's near buckets
    skew_s: float = 5.0  # the clock skew the near-lane look-back covers
    max_catchup_minutes: int = 24 * 60  # timers live a day (TTL): older buckets are empty
    concurrency: int = 8

    @property
    def near_lookback_ms(self) -> int:
        return int((self.skew_s + 2 * self.poll_interval_s) * 1000)


@dataclass
class ReleaseReport:
    released: int = 0
    stale: int = 0
    skipped: int = 0
    completed: int = 0
    fire_delays_ms: list[float] = field(default_factory=list)

    def merge(self, other: ReleaseReport) -> None:
        self.released += other.released
        self.stale += other.stale
        self.skipped += other.skipped
        self.completed += other.completed
        self.fire_delays_ms.extend(other.fire_delays_ms)


class Dispatcher:
    """Releases due timers. Stateless between calls except for what ``run_minute`` holds.

    Parameters
    ----------
    store, queues
        The storage and FIFO queue ports.
    clock
        Every clock read goes through it (tests give two pollers clocks that differ).
    config
        Shard layout, queues and timings.
    """

    def __init__(
        self,
        store: JobStore,
        queues: QueuePort,
        clock: Clock,
        config: DispatchConfig,
        metrics: MetricsSink | None = None,
    ) -> None:
        self.store = store
        self.queues = queues
        self.clock = clock
        self.config = config
        self.metrics = metrics or NullMetrics()
        self._pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="release")

    # ------------------------------------------------------------------ releasing

    def queue_for(self, job: Job) -> str:
        urls = self.config.long_queue_urls if job.runtime is Runtime.ECS else self.config.short_queue_urls
        return pick_queue(urls or self.config.short_queue_urls, job.id)

    def release(self, timers: Sequence[Timer]) -> ReleaseReport:
        """Release due timers now: send their messages, then write the next timers.

        Raises if a send or a write fails after retries; the caller keeps the timers
        and tries again (a repeat is harmless: same dedup ids, same timer rows).
        """
        report = ReleaseReport()
        if not timers:
            return report
        chunks = [timers[i : i + _CHUNK] for i in range(0, len(timers), _CHUNK)]
        if len(chunks) == 1:
            report.merge(self._release_chunk(chunks[0]))
        else:
            for future in [self._pool.submit(self._release_chunk, chunk) for chunk in chunks]:
                report.merge(future.result())
        self._record(report)
        return report

    def _release_chunk(self, timers: Sequence[Timer]) -> ReleaseReport:
        now = self.clock.now()
        report = ReleaseReport()
        outgoing: dict[str, list[DispatchMessage]] = defaultdict(list)
        next_timers: list[Timer] = []
        completions: list[Job] = []
        skipped: dict[tuple[str, str], int] = defaultdict(int)

        fire = [t for t in timers if t.kind is TimerKind.FIRE]
        other = [t for t in timers if t.kind is not TimerKind.FIRE]
        # Eventually consistent (half the read cost): a job paused or replaced a moment ago may
        # release one more slot of the old version, which the worker's claim re-checks.
        jobs = self.store.batch_get_jobs({(t.tenant, t.job_id) for t in timers}, consistent=False)

        for timer in fire:
            job = jobs.get((timer.tenant, timer.job_id))
            if job is None or job.state is not JobState.ENABLED or job.version != timer.job_version:
                report.stale += 1
                continue
            plan = plan_release(job, slot_instant(timer.slot), now)
            queue = self.queue_for(job)
            for slot in plan.release:
                scheduled = dispatch_instant(job, slot)
                outgoing[queue].append(
                    self._message(job, slot_key(slot), scheduled, 1, MessageKind.FIRE, now)
                )
                report.fire_delays_ms.append((now - scheduled).total_seconds() * 1000)
            if plan.skipped:
                skipped[(job.tenant, job.id)] += plan.skipped
                report.skipped += plan.skipped
            if plan.next_slot is not None:
                next_timers.append(
                    self.config.layout.make(
                        now=now,
                        due=dispatch_instant(job, plan.next_slot),
                        job_id=job.id,
                        tenant=job.tenant,
                        slot=slot_key(plan.next_slot),
                        attempt=1,
                        kind=TimerKind.FIRE,
                        job_version=job.version,
                    )
                )
            elif plan.chain:
                completions.append(job)

        if other:
            executions = self.store.batch_get_executions({(t.tenant, t.job_id, t.slot) for t in other})
            for timer in other:
                job = jobs.get((timer.tenant, timer.job_id))
                execution = executions.get((timer.tenant, timer.job_id, timer.slot))
                if job is None or job.state is JobState.DELETED or execution is None:
                    report.stale += 1
                    continue
                message = self._followup(
                    timer,
                    job,
                    execution.status,
                    execution.attempt,
                    execution.owner,
                    execution.lease_until,
                    now,
                    execution.scheduled_at,
                )
                if message is None:
                    report.stale += 1
                    continue
                outgoing[self.queue_for(job)].append(message)

        # Send first, next timers second: see the module docstring.
        sends = [(queue, msgs) for queue, msgs in outgoing.items() if msgs]
        for queue, msgs in sends:
            self.queues.send(queue, msgs)
            report.released += len(msgs)
        if next_timers:
            self.store.put_timers(next_timers)
        for (tenant, job_id), count in skipped.items():
            self.store.add_skipped(tenant, job_id, count)
        for job in completions:
            report.completed += self._complete(job, now)
        return report

    @staticmethod
    def _message(
        job: Job, slot: str, scheduled: datetime, attempt: int, kind: str, now: datetime
    ) -> DispatchMessage:
        return message_for(job, slot, scheduled, attempt, kind, now)

    def _followup(
        self,
        timer: Timer,
        job: Job,
        status: ExecutionStatus,
        attempt: int,
        owner: str | None,
        lease_until: datetime | None,
        now: datetime,
        scheduled_at: datetime,
    ) -> DispatchMessage | None:
        """A retry or lease timer: send the next attempt if the record still waits for it."""
        if timer.kind is TimerKind.RETRY:
            if status is ExecutionStatus.RETRY_WAIT and attempt == timer.attempt - 1:
                return self._message(
                    job, timer.slot, from_ms(timer.due_ms), timer.attempt, MessageKind.RETRY, now
                )
            return None
        if timer.kind is TimerKind.LEASE:
            lease_lapsed = lease_until is not None and lease_until <= now
            if status is ExecutionStatus.RUNNING and owner == timer.owner and lease_lapsed:
                # The worker is gone: the next attempt takes over (the claim fences the old owner).
                return self._message(job, timer.slot, scheduled_at, attempt + 1, MessageKind.TAKEOVER, now)
            return None
        if timer.kind is TimerKind.CHILD:
            return self._message(job, timer.slot, from_ms(timer.due_ms), 1, MessageKind.CHILD, now)
        return None

    def _complete(self, job: Job, now: datetime) -> int:
        """A one-time job after its slot, or a job past ``end_at``: mark it COMPLETED."""
        done = job.model_copy(update={"state": JobState.COMPLETED, "updated_at": now})
        try:
            self.store.replace_job(done, expected_version=job.version)
        except Exception:  # someone changed the job meanwhile: their write stands
            log.info("job %s changed before it could be completed", job.id)
            return 0
        return 1

    def _record(self, report: ReleaseReport) -> None:
        self.metrics.add("SlotsReleased", report.released)
        if report.stale:
            self.metrics.add("StaleTimersIgnored", report.stale)
        if report.skipped:
            self.metrics.add("SlotsSkipped", report.skipped)
        for delay in report.fire_delays_ms:
            self.metrics.add("FireDelayMs", delay, "Milliseconds")

    # ------------------------------------------------------------------ draining buckets

    def drain_bucket(self, lane: Lane, minute: datetime, shard: int) -> ReleaseReport:
        """Release every timer of one bucket that is due now (all of it, for a past minute)."""
        now_ms = to_ms(self.clock.now())
        timers = self.store.query_timers(lane, minute, shard, to_ms=now_ms)
        return self.release(timers)

    def catch_up(self, shards_by_lane: dict[Lane, list[int]], before: datetime) -> ReleaseReport:
        """Drain, per shard, every bucket from its watermark up to (not including) ``before``.

        A shard with no watermark yet starts at the minute before ``before``. Watermarks move
        only past buckets drained without error.
        """
        report = ReleaseReport()
        oldest_allowed = before - timedelta(minutes=self.config.max_catchup_minutes)
        for lane, shards in shards_by_lane.items():
            marks = self.store.get_watermarks(lane, shards)
            starts = {s: max(marks.get(s, before - timedelta(minutes=1)), oldest_allowed) for s in shards}
            minute = min(starts.values(), default=before)
            while minute < before:
                due = [s for s in shards if starts[s] <= minute]
                for shard in due:
                    report.merge(self.drain_bucket(lane, minute, shard))
                minute += timedelta(minutes=1)
                self.store.advance_watermarks(lane, due, minute)
        return report

    # ------------------------------------------------------------------ one minute

    def run_minute(
        self,
        minute: datetime,
        group: int = 0,
        group_count: int = 1,
        stop: Callable[[], bool] | None = None,
    ) -> ReleaseReport:
        """Own (``minute``, ``group`` of ``group_count``) until the minute and its grace are over."""
        return self.minute_run(minute, group, group_count).run(stop or (lambda: False))

    def minute_run(self, minute: datetime, group: int = 0, group_count: int = 1) -> MinuteRun:
        """The poller of one (minute, group), to drive step by step (tests, local mode)."""
        minute = minute_of(minute)
        layout = self.config.layout
        far = layout.shards_of_group(Lane.FAR, group, group_count)
        near = layout.shards_of_group(Lane.NEAR, group, group_count)
        return MinuteRun(self, minute, far, near)


class MinuteRun:
    """The state of one poller for one minute: held timers, near-lane cursors, failures."""

    def __init__(self, dispatcher: Dispatcher, minute: datetime, far: list[int], near: list[int]) -> None:
        self.d = dispatcher
        self.minute = minute
        self.far = far
        self.near = near
        self.end = minute + timedelta(minutes=1)
        self.final = self.end + timedelta(seconds=dispatcher.config.grace_s)
        # (due, sk, arrival, timer): the arrival number breaks ties, so two rows with the same
        # due and sort key in different lanes (two skewed pollers wrote one next timer into
        # both) never make the heap compare Timer objects.
        self.heap: list[tuple[int, str, int, Timer]] = []
        self._arrivals = itertools.count()
        # Every timer taken in this minute, by what its (pk, sk) is made of (lane, shard, due,
        # job, slot, attempt): a near timer comes back in every poll of its look-back, and the
        # key is built without formatting the row's key strings.
        self.held: set[tuple[Lane, int, int, str, str, int]] = set()
        self.failed_shards: set[tuple[Lane, int]] = set()
        self.report = ReleaseReport()
        self.previous_checked = False
        self.unread: set[int] = set()
        self.next_poll = minute
        self.last_near_ms: int | None = None

    def hold(self, timers: Iterable[Timer]) -> None:
        held, heap = self.held, self.heap
        for timer in timers:
            key = (timer.lane, timer.shard, timer.due_ms, timer.job_id, timer.slot, timer.attempt)
            if key in held:
                continue
            held.add(key)
            heapq.heappush(heap, (timer.due_ms, timer.sk, next(self._arrivals), timer))

    def run(self, stop: Callable[[], bool]) -> ReleaseReport:
        """Start, step until the minute and its grace are over, finish."""
        self.start()
        while not stop():
            wake = self.step()
            if wake is None:
                break
            self.d.clock.sleep(max(0.0, (wake - self.d.clock.now()).total_seconds()))
        if stop():
            return self.report  # cut short (the Lambda is out of time): the next poller resumes
        return self.finish()

    def start(self) -> None:
        """Catch up old buckets, then read this minute's far buckets ahead of time."""
        both = {Lane.FAR: self.far, Lane.NEAR: self.near}
        self._guarded(lambda: self.report.merge(self.d.catch_up(both, self.minute - timedelta(minutes=1))))
        self.unread = {shard for shard in self.far if not self._read(Lane.FAR, shard)}
        self.next_poll = self.d.clock.now()

    def step(self) -> datetime | None:
        """One turn of the loop: poll if it is time, release what is due. Returns when to wake."""
        d = self.d
        cfg = d.config
        now = d.clock.now()
        if now >= self.final:
            return None
        if not self.previous_checked and now >= self.minute + timedelta(seconds=2 * cfg.grace_s):
            # The previous minute's poller ran until minute + grace: past that, drain what
            # it left (it died), if anything. Waiting one more grace avoids racing it.
            self.previous_checked = True
            both = {Lane.FAR: self.far, Lane.NEAR: self.near}
            self._guarded(lambda: self.report.merge(d.catch_up(both, self.minute)))
        if now >= self.next_poll:
            self.unread = {shard for shard in self.unread if not self._read(Lane.FAR, shard)}
            now_ms = to_ms(now)
            horizon = now_ms + int(cfg.poll_interval_s * 1000)
            base = self.last_near_ms if self.last_near_ms is not None else to_ms(self.minute)
            start = base - cfg.near_lookback_ms
            ok = [self._read(Lane.NEAR, shard, start, horizon) for shard in self.near]
            if all(ok):  # on a failed read, look back again from the same place next time
                self.last_near_ms = now_ms
            self.next_poll = now + timedelta(seconds=cfg.poll_interval_s)
            d.metrics.add("Backlog", self.backlog(now))
        self._release_due()
        wake = self.next_poll
        if self.heap:
            wake = min(wake, from_ms(self.heap[0][0]))
        return min(wake, self.final)

    def finish(self) -> ReleaseReport:
        """Final read of the near buckets, release what is left, advance the watermarks."""
        for shard in self.near:
            if not self._read(Lane.NEAR, shard):
                self.failed_shards.add((Lane.NEAR, shard))
        self.failed_shards.update((Lane.FAR, shard) for shard in self.unread)
        for _ in range(5):
            if not self.heap:
                break
            self._release_due(everything=True)
        self.failed_shards.update((t.lane, t.shard) for *_, t in self.heap)
        self._advance()
        return self.report

    def backlog(self, now: datetime) -> int:
        """Held timers already due and not yet released (0 unless releases are failing)."""
        now_ms = to_ms(now)
        heap = self.heap
        if not heap or heap[0][0] > now_ms:
            return 0
        # Walk the heap from its root, only below due entries: a child is never due before
        # its parent, so this counts the due ones without reading the (far lane's) rest.
        count, size, stack = 0, len(heap), [0]
        while stack:
            index = stack.pop()
            if heap[index][0] <= now_ms:
                count += 1
                child = 2 * index + 1
                stack.extend(range(child, min(child + 2, size)))
        return count

    def _read(self, lane: Lane, shard: int, from_ms: int | None = None, to_ms: int | None = None) -> bool:
        """Hold the timers of one bucket (or a due range of it); False if the read failed."""
        try:
            self.hold(self.d.store.query_timers(lane, self.minute, shard, from_ms, to_ms))
            return True
        except Exception:
            log.exception("reading %s bucket %s/%s failed; will retry", lane.value, self.minute, shard)
            return False

    def _release_due(self, everything: bool = False) -> None:
        now_ms = to_ms(self.d.clock.now())
        due: list[Timer] = []
        while self.heap and (everything or self.heap[0][0] <= now_ms):
            due.append(heapq.heappop(self.heap)[3])
        if not due:
            return
        try:
            self.report.merge(self.d.release(due))
        except Exception:
            log.exception("release of %d timers failed; will retry", len(due))
            for timer in due:
                heapq.heappush(self.heap, (timer.due_ms, timer.sk, next(self._arrivals), timer))
            self.d.clock.sleep(0.2)

    def _guarded(self, action: Callable[[], object], shard: tuple[Lane, int] | None = None) -> None:
        try:
            action()
        except Exception:
            log.exception("poller step failed (minute %s, shard %s)", self.minute, shard)
            if shard is not None:
                self.failed_shards.add(shard)
            else:
                self.failed_shards.update((Lane.FAR, s) for s in self.far)
                self.failed_shards.update((Lane.NEAR, s) for s in self.near)

    def _advance(self) -> None:
        for lane, shards in ((Lane.FAR, self.far), (Lane.NEAR, self.near)):
            done = [s for s in shards if (lane, s) not in self.failed_shards]
            if not done:
                continue
            try:
                self.d.store.advance_watermarks(lane, done, self.end)
            except Exception:
                log.exception("advancing the %s watermarks failed: the next poller drains again", lane.value)
