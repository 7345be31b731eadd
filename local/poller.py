"""The ``poller`` component: the tick and its state machine, on one machine.

In the cloud, EventBridge starts one Step Functions execution per coming minute M; it
waits until ``M - lead`` and invokes one poller Lambda per shard group, each of which
runs until ``M + 60 s + grace``. Consecutive minutes therefore overlap by ``lead + grace``.
Here one process does the same with threads: at ``M - lead`` it plans the minute with
the core (:func:`punctual.tick.plan_minute`, as the tick Lambda does) and calls
``functions/poller/handler.py`` once per group, in its own thread, with the Map item as
the event and a stand-in Lambda context that counts down from the poller's timeout in
the template.

A (re)started poller process also starts every minute whose window is still open
(``M - lead <= now < M + 60 s + grace``): a crash costs a restart, not the rest of the
minute. Releasing a slot twice is harmless (same FIFO dedup id, same next timer, and the
worker's claim drops a second start).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from local.component import LambdaContext, load_handler, prepare
from local.config import LocalConfig

log = logging.getLogger("local.poller")

MINUTE = timedelta(minutes=1)


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


class MinuteScheduler:
    """Starts each minute's pollers at ``minute - lead``; one thread per (minute, group)."""

    def __init__(self, handler: Callable[[dict[str, Any], Any], Any], timeout_s: int) -> None:
        from punctual.clock import SystemClock
        from punctual.runtime import store_from
        from punctual.settings import Settings

        self.handler = handler
        self.timeout_s = timeout_s
        self.settings = Settings.from_env()
        self.clock = SystemClock(self.settings.clock_offset_s)
        self.store = store_from(self.settings)
        self.started: set[datetime] = set()
        self.contexts: list[LambdaContext] = []
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

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

    def next_wake(self, now: datetime) -> float:
        """Seconds until the next minute's pollers must start (at most one)."""
        current = now.replace(second=0, microsecond=0)
        coming = [
            self.window(m)[0] for m in (current + MINUTE, current + 2 * MINUTE) if m not in self.started
        ]
        opens = min(coming, default=now + timedelta(seconds=1))
        return max(0.05, min(1.0, (opens - now).total_seconds()))

    def start(self, minute: datetime) -> None:
        from punctual.tick import plan_minute

        self.started.add(minute)
        self.started = {m for m in self.started if m >= minute - 3 * MINUTE}
        try:
            plan = plan_minute(minute, self.settings, self.store)
        except Exception:  # as the tick does: never block a minute on its sizing
            log.exception("sizing %s failed: starting it with the minimum shard groups", minute)
            plan = plan_minute(minute, self.settings)
        for item in plan["groups"]:
            context = LambdaContext(
                "punctual-poller-local", timeout_s=self.timeout_s, memory_limit_in_mb=1024
            )
            thread = threading.Thread(
                target=self._invoke,
                args=(item, context),
                name=f"poller-{minute:%H%M}-g{item['group']}",
                daemon=True,
            )
            with self._lock:
                self.contexts.append(context)
                self.threads = [t for t in self.threads if t.is_alive()] + [thread]
            thread.start()
        log.info("minute %s: %d poller(s) started", f"{minute:%H:%M}", len(plan["groups"]))

    def _invoke(self, item: dict[str, Any], context: LambdaContext) -> None:
        try:
            report = self.handler(item, context)
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
        except Exception:  # the state machine's Catch: the other groups and minutes go on
            log.exception("poller for %s group %s failed", item["minute"], item["group"])
        finally:
            with self._lock:
                if context in self.contexts:
                    self.contexts.remove(context)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            now = self.clock.now()
            for minute in self.due_minutes(now):
                self.start(minute)
            stop.wait(self.next_wake(self.clock.now()))
        with self._lock:
            for context in self.contexts:
                context.cut()  # the handler stops as if its invocation were about to time out
            threads = list(self.threads)
        for thread in threads:
            thread.join(timeout=15)


def run(config: LocalConfig, stop: threading.Event) -> None:
    deployment = prepare(config)
    handler = load_handler("poller")
    from punctual.lambda_support import metrics

    serialise_metrics(metrics)
    scheduler = MinuteScheduler(handler.handler, deployment.poller_timeout_s)
    log.info(
        "poller: %d far + %d near shards, lead %ss, grace %ss",
        scheduler.settings.shard_count,
        scheduler.settings.near_shard_count,
        scheduler.settings.poller_lead_s,
        scheduler.settings.poller_grace_s,
    )
    scheduler.run(stop)
