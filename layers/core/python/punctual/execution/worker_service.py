"""The ECS worker for long jobs: ``python -m punctual.execution.worker_service``.

It long-polls the long queue(s) (or, with ``PUNCTUAL_WORKER_LANE=short``, the short ones: the
standing burst workers beside the worker Lambda) and runs up to ``concurrency`` executions at once, one thread
each, through the same core as the Lambda worker (:mod:`punctual.execution`): its receive sets
each message's visibility to the message lease (seconds, ``PUNCTUAL_MESSAGE_LEASE_S``, 7 s: a task
that dies gives back within it what it held, started or not: a run's message back is its
takeover), and a heartbeat thread (:class:`punctual.execution.keeper.LeaseKeeper`) renews that
visibility every 4 s while it holds a message, and the record's lease of every run that outlives
its first beat (``lease_until``, ``PUNCTUAL_LEASE_S``, 12 s), with a backstop LEASE timer, a far
timer, re-written every two minutes or so.

On SIGTERM (ECS stops a task: scale-in, deploy) it

1. stops receiving; a message received after the signal goes straight back (visibility 0);
2. lets running executions finish until the grace period ends (heartbeats go on);
3. stops the rest (``SlotContext.cancel``: an HTTP call is cut off, an ECS task is left running
   for the next attempt to adopt) and hands each back when its run has returned: it goes
   RETRY_WAIT as *released* (not counted against the retry policy), its next attempt is sent at
   once and its own message deleted, so another worker takes it over without waiting for the
   lease to lapse;
4. a run that does not return within ``stop_s`` (a call no adapter can cut short, such as a
   synchronous Lambda invoke in flight) is handed back all the same and counted
   (``RunsAbandoned``): its late result is fenced, and its receiver sees the next attempt's
   higher fencing token;
5. waits for the alert deliveries still in flight (they run beside the runs, never on a claim's
   path) while grace + stop lasts, and exits 0, well inside ECS's stop timeout.

Settings: the usual ``PUNCTUAL_*`` (:class:`punctual.runtime.settings.Settings`) plus
``PUNCTUAL_WORKER_CONCURRENCY``, ``PUNCTUAL_WORKER_WAIT_S``, ``PUNCTUAL_WORKER_GRACE_S``,
``PUNCTUAL_WORKER_STOP_S``, ``PUNCTUAL_WORKER_HEARTBEAT_S`` and ``PUNCTUAL_WORKER_LANE``
(:class:`ServiceSettings`).

Which queues (:func:`queue_urls_for`): ``long`` (the default) polls the long queues, or the
short ones when none is configured (local mode); ``short`` polls the short queues. The lane
only picks what to receive: every queue URL stays in the settings, so a takeover or a
dependent run is still sent to the lane its job names. A short-lane message is run the same
way as a long one: the receive sets its visibility to the message lease (not the short queue's
default of the Lambda timeout plus a minute) and heartbeats renew it, so a task that dies gives
its messages back within a lease; its backstop LEASE timers are far timers, so a burst's do not crowd
the few near buckets.

Every delete the task makes (a run ended, a duplicate dropped) goes out in a
``DeleteMessageBatch`` of up to ten (:class:`punctual.dispatch.queue_acks.BatchedDeletes`, at most 0.1 s
after the first of its batch): one SQS request per ten triggers, not one per trigger.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field

from punctual.delivery.targets.base import TargetInvoker
from punctual.dispatch.queue_acks import BatchedDeletes
from punctual.dispatch.queues import Received
from punctual.execution import SHUTDOWN, Claim, Delivery, Worker
from punctual.execution.keeper import LeaseKeeper
from punctual.execution.lease import beat_interval_s, message_kept
from punctual.runtime.clock import Clock, SystemClock
from punctual.runtime.composition import container
from punctual.runtime.emf import EmfBuffer
from punctual.runtime.settings import Platform, Settings, read_env

log = logging.getLogger("punctual.execution.worker_service")

_SQS_MAX_BATCH = 10
_IDLE_PAUSE_S = 0.05  # after an empty receive (SQS long-polls; in-memory queues do not)
# While the task holds a run past SQS's 12-hour visibility cap (its message let go of), it reports
# how many (RunsDetached) this often: the service's scale-in counts them (a minute's Maximum).
DETACHED_REPORT_S = 15.0
# The longest a receive's answer takes to come back from SQS (a request's time, as the lease's
# BEAT_SLACK_S counts one): its messages' visibility started no earlier than this before it returned.
RECEIVE_LAG_S = 1.0


class ServiceSettings(BaseModel):
    """The ECS worker's own knobs (``PUNCTUAL_WORKER_*``)."""

    concurrency: int = Field(default=4, ge=1, le=256)
    wait_s: int = Field(default=10, ge=0, le=20)  # SQS long poll
    grace_s: float = Field(default=90.0, ge=0, le=3600)  # keep it under the task's stopTimeout
    stop_s: float = Field(default=10.0, ge=0, le=600)  # after the grace: stopped runs return
    heartbeat_s: float | None = Field(default=None, gt=0, le=3600)  # default: when the lease asks
    lane: Literal["long", "short"] = "long"  # the queues to receive from (queue_urls_for)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServiceSettings:
        return read_env(cls, "PUNCTUAL_WORKER_", environ)


def queue_urls_for(settings: Settings, lane: str) -> list[str]:
    """The queues the ECS worker receives from: its lane's (``long`` falls back to the short ones)."""
    if lane == "short":
        return list(settings.short_queue_urls)
    return list(settings.long_queue_urls or settings.short_queue_urls)


class EmfMetrics:
    """A MetricsSink that prints CloudWatch embedded-metric-format lines: counts as sums per flush,
    every other unit (a delay, a duration) value by value, as the Lambda sink prints them, so that
    its percentiles are those of the values, not of a minute's sums."""

    def __init__(
        self, namespace: str, service: str = "punctual-ecs-worker", clock: Clock | None = None
    ) -> None:
        self.namespace = namespace
        self.service = service
        self.clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._sums: dict[tuple[str, str], float] = defaultdict(float)
        self._values = EmfBuffer(namespace, service, lambda line: print(line, flush=True), self.clock)

    def add(self, name: str, value: float, unit: str = "Count") -> None:
        if unit != "Count":
            self._values.add(name, value, unit)
            return
        with self._lock:
            self._sums[(name, unit)] += value

    def flush(self) -> None:
        self._values.flush()
        with self._lock:
            sums, self._sums = self._sums, defaultdict(float)
        if not sums:
            return
        document: dict[str, Any] = {
            "_aws": {
                "Timestamp": int(self.clock.now().timestamp() * 1000),
                "CloudWatchMetrics": [
                    {
                        "Namespace": self.namespace,
                        "Dimensions": [["service"]],
                        "Metrics": [{"Name": name, "Unit": unit} for name, unit in sums],
                    }
                ],
            },
            "service": self.service,
            **{name: value for (name, _), value in sums.items()},
        }
        print(json.dumps(document), flush=True)


class WorkerService:
    """Receives, runs concurrently, heartbeats, and drains on stop.

    Parameters
    ----------
    worker
        The execution core in heartbeat mode (``lease_timers=True``).
    queue_urls
        The queues to long-poll, in turn.
    concurrency
        Executions run at once.
    wait_s
        The long poll of each receive.
    grace_s
        After :meth:`stop`, how long running executions may take before they are stopped.
    stop_s
        After the grace period, how long stopped runs may take to return before they are
        handed back still running.
    heartbeat_s
        Seconds between heartbeats (default: when each lease asks, its length minus a margin).
    """

    def __init__(
        self,
        worker: Worker,
        queue_urls: Sequence[str],
        *,
        concurrency: int = 4,
        wait_s: int = 10,
        grace_s: float = 90.0,
        stop_s: float = 10.0,
        heartbeat_s: float | None = None,
        metrics_flush_s: float = 60.0,
    ) -> None:
        if not queue_urls:
            raise ValueError("the ECS worker needs at least one queue URL")
        most = beat_interval_s(worker.config.lease_s)
        if heartbeat_s is not None and heartbeat_s > most:
            # Beaten less often, a run's record lease would lapse, by a clock up to the skew ahead,
            # under the live run: copies of its message (the pollers') would take it over (review)
            raise ValueError(
                f"PUNCTUAL_WORKER_HEARTBEAT_S={heartbeat_s:g}: at most {most:g} s, the lease "
                f"({worker.config.lease_s} s) less the clock skew between nodes and 2 s"
            )
        self.worker = worker
        self.queues = worker.queues
        self.queue_urls = list(queue_urls)
        self.concurrency = concurrency
        self.wait_s = wait_s
        self.grace_s = grace_s
        self.stop_s = stop_s
        self.keeper = LeaseKeeper(worker, beat_s=heartbeat_s, tick_s=min(1.0, heartbeat_s or 1.0))
        self.metrics_flush_s = metrics_flush_s
        self._stop = threading.Event()
        self._stopped_at: float | None = None
        self._cond = threading.Condition()
        self._running: set[threading.Thread] = set()
        self._claims: dict[threading.Thread, Claim] = {}
        self._released_all = False

    # ------------------------------------------------------------------ control

    def stop(self) -> None:
        """Stop taking work; :meth:`run` then drains and returns. Safe from a signal handler."""
        if self._stopped_at is None:
            self._stopped_at = time.monotonic()
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM (ECS) and SIGINT (a terminal) start the drain."""

        def on_signal(signum: int, frame: object) -> None:
            log.info("signal %d: draining", signum)
            self.stop()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    @property
    def active(self) -> int:
        """Executions (or claims in progress) running now."""
        with self._cond:
            return len(self._running)

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        """Work until :meth:`stop`, then drain: finish or release everything running."""
        threading.Thread(target=self._heartbeats, name="heartbeat", daemon=True).start()
        turn = 0
        while not self._stop.is_set():
            with self._cond:
                while len(self._running) >= self.concurrency and not self._stop.is_set():
                    self._cond.wait(0.5)
                free = self.concurrency - len(self._running)
            if self._stop.is_set():
                break
            url = self.queue_urls[turn % len(self.queue_urls)]
            turn += 1
            try:
                received, received_at = self._receive(url, min(free, _SQS_MAX_BATCH))
            except Exception:
                log.exception("receive from %s failed", url)
                self._stop.wait(1.0)
                continue
            if not received:
                self._stop.wait(_IDLE_PAUSE_S)
            # A batch may hold several messages of one FIFO group (a queue-overlap job's slots,
            # in order): they run one after the other in one thread, in the order received;
            # different groups run side by side. Those waiting their turn are held (their
            # visibility kept renewed by the keeper) until theirs comes.
            groups: dict[str, list[Received]] = {}
            for item in received:
                groups.setdefault(item.message.group_id, []).append(item)
            for items in groups.values():
                if self._stop.is_set():
                    for item in items:
                        self._give_back(url, item)
                else:
                    self._start(url, items, received_at)
        self._drain()
        close = getattr(self.queues, "close", None)
        if callable(close):  # the deletes still waiting for their batch
            close()
        self._flush_metrics()

    def _receive(self, url: str, count: int) -> tuple[list[Received], datetime]:
        """Up to ``count`` messages of ``url``, and when their visibility (the message lease)
        started, dated early, never late: the keeper renews them from then (:meth:`LeaseKeeper.adopt
        <punctual.execution.keeper.LeaseKeeper.adopt>`).

        SQS hands the messages out between the request and its answer: at once if some were
        waiting, else as the first arrives during the long poll (up to ``wait_s``, 20 s), which then
        answers at once. So no earlier than the request was sent, nor than the answer's time
        (:data:`RECEIVE_LAG_S`) before it came back. QA30 review: dated before the long poll, a
        claim made after a wait of a renewal interval or more paid a visibility request at once."""
        sent = self.worker.clock.now()
        received = self.queues.receive(url, count, self.wait_s, self.worker.config.message_visibility_s)
        returned = self.worker.clock.now()
        return received, max(sent, returned - timedelta(seconds=RECEIVE_LAG_S))

    def _start(self, url: str, items: list[Received], received_at: datetime) -> None:
        if len(items) > 1:
            # QA: they kept the receive's lease only: behind a run longer than that, their
            # visibility lapsed while they waited, and they were received again beside this thread
            self.keeper.hold(url, [item.receipt for item in items[1:]], self.worker.clock.now())
        thread = threading.Thread(
            target=self._execute_in_order,
            args=(url, items, received_at),
            name=f"run-{items[0].message.job_id}",
            daemon=True,
        )
        with self._cond:
            self._running.add(thread)
        thread.start()

    def _execute_in_order(self, url: str, items: list[Received], received_at: datetime) -> None:
        me = threading.current_thread()
        try:
            for index, item in enumerate(items):
                if index:  # held while it waited: its claim's heartbeats keep it from now on,
                    received_at = self.worker.clock.now()  # (set no earlier than its request is sent)
                    if self._give_back(url, item, self.worker.config.message_visibility_s):
                        # from a whole message lease, as a receive's (adopted again by _execute)
                        self.keeper.release(url, item.receipt)
                    # else still held as it was: _execute's adopt keeps its last renewal's instant
                    # (review: taken for a fresh lease, it came back under its run, a takeover)
                if not self._execute(url, item, received_at):
                    # Left in the queue (waiting, handed back): the group's later messages go
                    # back too, so they come after it again, in order.
                    for later in items[index + 1 :]:
                        self.keeper.release(url, later.receipt)
                        self._give_back(url, later)
                    return
        finally:
            for item in items:  # (a run that raised past its own handling: nothing stays held)
                self.keeper.release(url, item.receipt)
            with self._cond:
                self._running.discard(me)
                self._cond.notify_all()

    def _execute(self, url: str, item: Received, received_at: datetime | None = None) -> bool:
        """Claim, run and finish one message; False if it was left in the queue.

        ``received_at``: when its visibility was last set to the message lease (now if None). The
        message is held by the keeper (:meth:`LeaseKeeper.adopt
        <punctual.execution.keeper.LeaseKeeper.adopt>`, no request) from before its claim to its finish:
        renewed a message lease at a time, so it never comes back under a live run (QA30), and
        comes back within one when the task dies (its return is the takeover)."""
        me = threading.current_thread()
        delivery = Delivery(url, item.receipt, item.receive_count, item.message_id)
        try:
            if self._stop.is_set():
                self._give_back(url, item)
                return False
            # Held from its receive, not from its claim: a claim slower than the message lease (a
            # store retrying) keeps its message hidden, so the message never comes back (the
            # run's takeover) under a claim that is still to write its record (review)
            self.keeper.adopt(url, item.receipt, received_at or self.worker.clock.now())
            claim = self.worker.claim(item.message, delivery)
            if not claim.claimed:
                self.keeper.release(url, item.receipt)  # (a WAITING message's visibility is the core's)
                if claim.ack:
                    self.queues.delete(url, item.receipt)  # batched (BatchedDeletes)
                return claim.ack  # a WAITING message had its visibility set by the core
            with self._cond:
                self._claims[me] = claim
                late = self._released_all
            if late:  # claimed after the drain released everything: hand it back too
                self.worker.release(claim)
                self.worker.in_flight.ended(claim)  # (counted at its start: never run)
                return False
            try:
                with self.worker.live.running(claim):  # heartbeated while it runs
                    finished = self.worker.finish(claim, self.worker.run(claim))
            finally:  # (kept, it must lapse by itself; deleted, nothing is left to renew)
                self.keeper.release(url, item.receipt)
            if message_kept(claim, finished):
                return False
            self.queues.delete(url, item.receipt)
            return True
        except Exception as exc:
            log.exception("execution of %s %s failed in the worker", item.message.job_id, item.message.slot)
            try:
                if self.worker.after_error(item.message, delivery, exc):  # parked with a record
                    self.queues.delete(url, item.receipt)
                    return True
            except Exception:
                log.exception("could not hand %s %s back", item.message.job_id, item.message.slot)
            return False
        finally:
            with self._cond:
                self._claims.pop(me, None)

    def _give_back(self, url: str, item: Received, after_s: int = 0) -> bool:
        """Set ``item``'s visibility to ``after_s``; whether it was set."""
        try:
            self.queues.change_visibility(url, item.receipt, after_s)
        except Exception:  # its visibility timeout brings it back anyway
            log.warning("could not return message %s", item.message_id, exc_info=True)
            return False
        return True

    def _heartbeats(self) -> None:
        last_flush = time.monotonic()
        while True:
            time.sleep(self.keeper.tick_s)
            try:
                self.keeper.step()  # every run whose heartbeat is due
            except Exception:
                log.exception("heartbeats failed")
            detached = self._detached()
            if time.monotonic() - last_flush >= (DETACHED_REPORT_S if detached else self.metrics_flush_s):
                if detached:
                    self.worker.metrics.add("RunsDetached", detached)
                self._flush_metrics()
                last_flush = time.monotonic()

    def _detached(self) -> int:
        """Runs of this task past SQS's 12-hour visibility cap: no message of theirs is in flight
        for the scale-in to see (QA: it stopped the task mid-run, and the run began again)."""
        with self._cond:
            return sum(1 for claim in self._claims.values() if claim.detached and claim.live)

    def _drain(self) -> None:
        deadline = (self._stopped_at or time.monotonic()) + self.grace_s
        self._wait_for_runs(deadline)
        with self._cond:
            running = list(self._claims.values())
        stopped = sum(self.worker.stop(claim, SHUTDOWN) for claim in running)
        if stopped:
            # Each stopped run's adapter cuts its call short and its thread hands it back.
            log.info("grace period over: %d runs stopped", stopped)
            self._wait_for_runs(time.monotonic() + self.stop_s)
        with self._cond:
            self._released_all = True
            leftover = list(self._claims.values())
        abandoned = 0
        for claim in leftover:
            try:
                if self.worker.release(claim):
                    abandoned += 1
                    log.warning(
                        "%s %s did not stop: handed back still running",
                        claim.message.job_id,
                        claim.message.slot,
                    )
            except Exception:
                log.exception("release of %s %s failed", claim.message.job_id, claim.message.slot)
        if abandoned:
            self.worker.metrics.add("RunsAbandoned", abandoned)
        # Alerts delivered beside the runs: given what is left of grace + stop (the bound the task's
        # stopTimeout allows for); one cut short stays SENDING, and its sweep finishes it.
        left = self.worker.settle(max(deadline + self.stop_s - time.monotonic(), 0.0))
        log.info(
            "drained: %d stopped, %d handed back still running, %d deliveries left", stopped, abandoned, left
        )

    def _wait_for_runs(self, deadline: float) -> None:
        with self._cond:
            while self._running and time.monotonic() < deadline:
                self._cond.wait(min(0.2, max(deadline - time.monotonic(), 0.0)))

    def _flush_metrics(self) -> None:
        flush = getattr(self.worker.metrics, "flush", None)
        if callable(flush):
            flush()


def main(argv: Sequence[str] | None = None, *, invoker: TargetInvoker | None = None) -> int:
    """Run the ECS worker until SIGTERM; return the exit status.

    Parameters
    ----------
    argv
        Unused (configuration is the environment); accepted for the ``-m`` entry point.
    invoker
        Replaces the production target invoker (tests, local mode).
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    built = container()
    settings = built.settings
    knobs = ServiceSettings.from_env()
    urls = queue_urls_for(settings, knobs.lane)
    metrics = EmfMetrics(Platform.from_env().metrics_namespace)
    built.queues.metrics = metrics  # a malformed body received counts as forged
    # Every delete of the task (runs ended, messages dropped) goes out ten at a time.
    queues = BatchedDeletes(built.queues)
    worker = built.worker(lease_timers=True, invoker=invoker, metrics=metrics, queues=queues)
    try:
        service = WorkerService(
            worker,
            urls,
            concurrency=knobs.concurrency,
            wait_s=knobs.wait_s,
            grace_s=knobs.grace_s,
            stop_s=knobs.stop_s,
            heartbeat_s=knobs.heartbeat_s,
        )
    except ValueError as exc:  # a setting that cannot run: one line, exit 2
        print(f"punctual ECS worker: {exc}", file=sys.stderr)
        return 2
    service.install_signal_handlers()
    log.info("ECS worker polling the %s lane %s with %d slots", knobs.lane, urls, knobs.concurrency)
    service.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
