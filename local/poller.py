"""The ``poller`` components: the tick and its state machine, on one machine.

In the cloud, EventBridge starts one Step Functions execution per coming minute M; it
waits until ``M - lead`` and invokes the poller Lambdas of its plan (two per shard group on a
minute the tick plans on the standard poller), each of which runs until ``M + 60 s + grace``.
Consecutive minutes therefore overlap by ``lead + grace``. Here each poller process does the
same with threads for one replica: ``PLAN_AHEAD_S`` before ``M - lead`` it sizes the minute, and
at ``M - lead`` it *starts* it (:func:`start_minute`:
the first process to plan it with the core, :func:`punctual.dispatch.tick.plan_minute`, writes the plan
to ``<state>/run/minutes/m-YYYYMMDDTHHMM.json``, created exclusively as Step Functions names an
execution once; the others read it) and calls ``functions/poller/handler.py`` once per item of
its replica (``poller`` the first of each group, ``poller-2`` the second), in its own thread,
with the Map item as the event and a stand-in Lambda context that counts down from the poller's
timeout in the template. So either process starts every minute (the tick, and its second path),
and a group keeps a poller while one process is dead.

A poller whose handler raises is retried as the deployed state machine retries its task:
with the retriers of the template's ``Retry`` (``local/retriers.py``; by default 1 s, then
x1.5 up to 2 s, 47 times, which covers the poller's window), the same (minute, group) item
each time, in a fresh invocation; only when they are used up is the failure logged and left,
as the state machine's Catch (``GroupFailed``) leaves it. A killed poller *process* is
restarted by the supervisor with the same delays, and a (re)started process starts every
minute whose window is still open (``M - lead <= now < M + 60 s + grace``): a crash costs a
restart, not the rest of the minute. Releasing a slot twice is harmless (same FIFO dedup id,
same next timer, and the worker's claim drops a second start).

Beside the minutes, in a thread of its own, it also runs the tick's predictive scaling every few
seconds (:class:`local.scaling.LocalScaler`): the supervisor starts ``burst-N`` worker processes ahead of
a minute whose planned load the standing workers would not start in time, and stops them after.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from local.cloud_tick import CloudTick
from local.component import LambdaContext, load_handler, prepare
from local.config import LocalConfig
from local.retriers import Attempts, Retrier, error_name, retriers_from
from local.scaling import LocalScaler

log = logging.getLogger("local.poller")

MINUTE = timedelta(minutes=1)
# A minute is sized this long before its start (its lead before it), as the tick plans ahead:
# its far timers were all written at least far_threshold_s (180 s) before it, so the sizing is
# the same, and its pollers start at their lead however long the count queries take.
PLAN_AHEAD_S = 40.0
SCALE_WAKE_S = 0.5  # the scaler decides every local.scaling.PERIOD_S; it is asked this often


def serialise_metrics(metrics: Any) -> None:
    """Make a Powertools ``Metrics`` object safe for concurrent invocations in one process.

    In the cloud each concurrent poller invocation has its own container; here they are
    threads sharing the handler module's ``Metrics``, whose metric set is a plain dict.
    """
    provider = getattr(metrics, "provider", metrics)
    lock = threading.RLock()
    for name in ("add_metric", "serialize_metric_set", "flush_metrics", "clear_metrics"):
        method = getattr(provider, name, None)
        if method is None:
            continue

        def locked(*args: Any, _method: Callable[..., Any] = method, **kwargs: Any) -> Any:
            with lock:
                return _method(*args, **kwargs)

        setattr(provider, name, locked)


def start_minute(plans: Path, minute: datetime, plan: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The plan of ``minute``'s execution: the one written first (by any process), else ``plan()``
    written now. Exclusive creation (a link of a complete file) makes a minute's plan one, as a
    Standard execution's name does."""
    from punctual.dispatch.burst_sight import execution_name

    plans.mkdir(parents=True, exist_ok=True)
    path = plans / f"{execution_name(minute)}.json"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        pass
    fd, tmp = tempfile.mkstemp(prefix=".plan-", dir=plans)
    with os.fdopen(fd, "w") as handle:
        json.dump(plan(), handle)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another process started it first: its plan stands
    finally:
        os.unlink(tmp)
    for old in plans.glob("m-*.json"):  # a few minutes of plans are enough
        if old.name < f"{execution_name(minute - 5 * MINUTE)}.json":
            old.unlink(missing_ok=True)
    return dict(json.loads(path.read_text()))


class MinuteScheduler:
    """Starts each minute's pollers at ``minute - lead``; one thread per (minute, group) of its
    ``replica``.

    ``retriers`` are the state machine's retriers of the poller task (none: a failure is
    only logged); ``wait(seconds)`` sleeps before a retry and returns True if local mode is
    stopping meanwhile (tests pass their own). ``plans``: where minutes' plans are shared with
    the other poller processes (None: this process plans alone).
    """

    def __init__(
        self,
        handler: Callable[[dict[str, Any], Any], Any],
        timeout_s: int,
        retriers: list[Retrier] | None = None,
        wait: Callable[[float], bool] | None = None,
        scaler: LocalScaler | None = None,
        replica: int = 0,
        plans: Path | None = None,
        cloud: CloudTick | None = None,
    ) -> None:
        from punctual.runtime.composition import Container
        from punctual.runtime.settings import Settings

        self.handler = handler
        self.timeout_s = timeout_s
        self.retriers = list(retriers or [])
        built = Container(Settings.from_env())
        self.settings = built.settings
        self.clock = built.clock
        self.store = built.store
        self.started: set[datetime] = set()
        self.planning: dict[datetime, threading.Thread] = {}  # minutes being sized ahead
        self.planned: dict[datetime, dict[str, Any]] = {}  # their plans, until their start
        self.contexts: list[LambdaContext] = []
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self.wait = wait or self.stopping.wait
        self.scaler = scaler
        self.replica = replica
        self.plans = plans
        self.cloud = cloud  # the cloud's tick plans the minutes (local.cloud_tick)

    def window(self, minute: datetime) -> tuple[datetime, datetime]:
        lead = timedelta(seconds=self.settings.poller_lead_s)
        grace = timedelta(seconds=self.settings.poller_grace_s)
        return minute - lead, minute + MINUTE + grace

    def due_minutes(self, now: datetime) -> list[datetime]:
        current = now.replace(second=0, microsecond=0)
        due = []
        for minute in (current - MINUTE, current, current + MINUTE):
            opens, closes = self.window(minute)
            if minute not in self.started and opens <= now < closes:
                due.append(minute)
        return due

    def minutes_to_plan(self, now: datetime) -> list[datetime]:
        """Minutes whose start is at most ``PLAN_AHEAD_S`` away, not yet sized or started (the
        other replicas half as far ahead: by then they read the first replica's plan). None at
        the cloud's cadence: there the tick planned each minute a minute or two ahead, and its
        re-plan (a burst grown meanwhile) must stand, so the minute reads it at its start."""
        if self.cloud is not None:
            return []
        current = now.replace(second=0, microsecond=0)
        ahead = timedelta(seconds=PLAN_AHEAD_S if self.replica == 0 else PLAN_AHEAD_S / 2)
        return [
            minute
            for minute in (current + MINUTE, current + 2 * MINUTE)
            if minute not in self.started
            and minute not in self.planning
            and self.window(minute)[0] - ahead <= now < self.window(minute)[0]
        ]

    def next_wake(self, now: datetime) -> float:
        """Seconds until the next minute's pollers must start (at most one)."""
        current = now.replace(second=0, microsecond=0)
        coming = [
            self.window(m)[0] for m in (current + MINUTE, current + 2 * MINUTE) if m not in self.started
        ]
        if self.cloud is not None and self.replica == 0 and self.cloud.next_at is not None:
            coming.append(self.cloud.next_at)
        opens = min(coming, default=now + timedelta(seconds=1))
        return max(0.05, min(1.0, (opens - now).total_seconds()))

    def plan_ahead(self, minute: datetime) -> None:
        """Size ``minute`` now, in a thread of its own, for :meth:`start` to use at its lead.

        In the cloud the tick plans a minute and starts its execution ahead, and the execution
        only waits for ``M - lead``: the sizing (count queries on the minute's far buckets) is not
        in the lead. Sized at the lead here, it took 12.5 s with moto busy on a loaded machine,
        and a burst's minute started 2.5 s after its instant.
        """
        with self._lock:
            if minute in self.planning or minute in self.started:
                return
            self.planning[minute] = thread = threading.Thread(
                target=self._plan_into, args=(minute,), name=f"plan-{minute:%H%M}", daemon=True
            )
        thread.start()

    def _plan_into(self, minute: datetime) -> None:
        try:
            plan = self.plan(minute)
        except Exception:  # start() sizes it again
            log.exception("planning %s ahead failed", minute)
            return
        with self._lock:
            self.planned[minute] = plan

    def plan(self, minute: datetime) -> dict[str, Any]:
        """The plan of ``minute``: shared with the other poller processes, else sized here."""
        from punctual.dispatch.tick import plan_minute

        def sized() -> dict[str, Any]:
            try:
                # At the cloud's cadence, the plan the tick made (local.cloud_tick); else sized here.
                planned = self.cloud.plan(minute) if self.cloud is not None else None
                if planned:
                    return planned
                return plan_minute(minute, self.settings, self.store, previous=self.previous_plan(minute))
            except Exception:  # as the tick does: never block a minute on its sizing
                log.exception("sizing %s failed: starting it with the minimum shard groups", minute)
                return plan_minute(minute, self.settings)

        return start_minute(self.plans, minute, sized) if self.plans is not None else sized()

    def start(self, minute: datetime) -> None:
        self.started.add(minute)
        self.started = {m for m in self.started if m >= minute - 3 * MINUTE}
        with self._lock:
            ahead = self.planning.pop(minute, None)
        if ahead is not None:
            ahead.join(timeout=max(0.0, (self.window(minute)[1] - self.clock.now()).total_seconds()))
        with self._lock:
            plan = self.planned.pop(minute, None)
            for old in [m for m in self.planned if m < minute]:
                del self.planned[old]
        if plan is None:
            plan = self.plan(minute)
        mine = [item for item in plan["pollers"] if item.get("replica", 0) == self.replica]
        for item in mine:
            thread = threading.Thread(
                target=self._invoke,
                args=(item,),
                name=f"poller-{minute:%H%M}-g{item['group']}",
                daemon=True,
            )
            with self._lock:
                self.threads = [t for t in self.threads if t.is_alive()] + [thread]
            thread.start()
        log.info(
            "minute %s: %d poller(s) started (replica %d of %d group(s))",
            f"{minute:%H:%M}",
            len(mine),
            self.replica,
            len(plan["groups"]),
        )

    def previous_plan(self, minute: datetime) -> dict[str, Any] | None:
        """The plan of the minute before (what the tick reads from its execution's input)."""
        if self.plans is None:
            return None
        from punctual.dispatch.burst_sight import execution_name

        try:
            return dict(json.loads((self.plans / f"{execution_name(minute - MINUTE)}.json").read_text()))
        except (OSError, ValueError):
            return None

    def _context(self) -> LambdaContext:
        """A fresh invocation's context, cut at once if local mode is stopping."""
        context = LambdaContext("punctual-poller-local", timeout_s=self.timeout_s, memory_limit_in_mb=1024)
        with self._lock:
            self.contexts.append(context)
        if self.stopping.is_set():
            context.cut()
        return context

    def _invoke(self, item: dict[str, Any]) -> None:
        """Run one (minute, group) as the state machine's task does: retried per its retriers."""
        attempts = Attempts(self.retriers)
        while True:
            context = self._context()
            failure: Exception | None = None
            try:
                report = self.handler(item, context)
            except Exception as exc:
                failure = exc
            finally:
                with self._lock:
                    if context in self.contexts:
                        self.contexts.remove(context)
            if failure is None:
                self._log_report(item, report)
                return
            delay_s = attempts.next_delay_s(error_name(failure))
            if delay_s is None or self.stopping.is_set():
                # The state machine's Catch (GroupFailed): the other groups and minutes go on.
                log.error("poller for %s group %s failed", item["minute"], item["group"], exc_info=failure)
                return
            log.warning(
                "poller for %s group %s failed (%s: %s): retrying in %.1fs",
                item["minute"],
                item["group"],
                error_name(failure),
                failure,
                delay_s,
            )
            if self.wait(delay_s):  # stopping
                return

    @staticmethod
    def _log_report(item: dict[str, Any], report: dict[str, Any]) -> None:
        delay = report.get("fire_delay_p99_ms")
        log.info(
            "minute %s group %s/%s done: released %s, stale %s, skipped %s, completed %s%s",
            item["minute"][11:16],
            item["group"],
            item["group_count"],
            report.get("released"),
            report.get("stale"),
            report.get("skipped"),
            report.get("completed"),
            f", fire delay p99 {delay:.0f} ms" if isinstance(delay, int | float) else "",
        )

    def _scale(self, stop: threading.Event) -> None:
        """The tick's scaling (:class:`local.scaling.LocalScaler`), in a thread of its own: a
        decision reads the coming minutes' timers, which took 10 to 14 s with moto busy on a
        loaded machine, and in the minutes' loop that held back a minute's pollers as long (a
        burst's minute started 14 s late). In the cloud too the tick is a Lambda of its own."""
        assert self.scaler is not None
        while not stop.is_set():
            try:
                self.scaler.step(self.clock.now())
            except Exception:  # as the tick: scaling never stops a minute
                log.exception("predictive scaling failed: deciding again shortly")
            stop.wait(SCALE_WAKE_S)

    def run(self, stop: threading.Event) -> None:
        scaling = None
        if self.scaler is not None:
            scaling = threading.Thread(target=self._scale, args=(stop,), name="scaling", daemon=True)
            scaling.start()
        while not stop.is_set():
            now = self.clock.now()
            for minute in self.minutes_to_plan(now):
                self.plan_ahead(minute)
            for minute in self.due_minutes(now):
                self.start(minute)
            if self.cloud is not None and self.replica == 0:  # one tick, beside the first replica
                try:
                    self.cloud.step(now)
                except Exception:  # as the cloud: a failed tick is covered by the next
                    log.exception("the tick failed: the next one plans again")
            stop.wait(self.next_wake(self.clock.now()))
        self.stopping.set()  # no retry waits or starts after this
        with self._lock:
            for context in self.contexts:
                context.cut()  # the handler stops as if its invocation were about to time out
            threads = list(self.threads)
        for thread in threads:
            thread.join(timeout=15)
        if scaling is not None:
            scaling.join(timeout=15)


def run(config: LocalConfig, stop: threading.Event, name: str = "poller", replica: int = 0) -> None:
    deployment = prepare(config, stop=stop)
    handler = load_handler("poller")
    from punctual.runtime.lambda_support import metrics

    serialise_metrics(metrics)
    retriers = retriers_from(deployment.poller_retry)
    from punctual.runtime.composition import Container
    from punctual.runtime.settings import Settings

    built = Container(Settings.from_env())
    # The tick runs beside the first replica only (one decision, as one tick makes): at the
    # cloud's cadence (local.cloud_tick; every replica reads the minutes it planned), else local
    # mode's scaling.
    cloud: CloudTick | None = None
    scaler: LocalScaler | None = None
    if config.tick_cadence_s:
        cloud = CloudTick(config, built.settings, built.store, built.client("sqs"))
    elif replica == 0:
        scaler = LocalScaler(config, built.settings, built.store, built.client("sqs"))
    scheduler = MinuteScheduler(
        handler.handler,
        deployment.poller_timeout_s,
        retriers,
        scaler=scaler,
        cloud=cloud,
        replica=replica,
        plans=config.run_dir / "minutes",
    )
    retried = ", ".join(f"{'|'.join(r.errors)} up to {r.max_attempts}x" for r in retriers)
    log.info(
        "%s (replica %d): %d far + %d near shards, lead %ss, grace %ss, retried as the state machine: %s",
        name,
        replica,
        scheduler.settings.shard_count,
        scheduler.settings.near_shard_count,
        scheduler.settings.poller_lead_s,
        scheduler.settings.poller_grace_s,
        retried or "never (the template's poller task has no Retry)",
    )
    scheduler.run(stop)
