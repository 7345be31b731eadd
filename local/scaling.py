"""Predictive scaling on one machine: the cloud's planner sizes local mode's worker processes.

The ``poller`` component runs what the tick Lambda runs for scaling (:meth:`punctual.dispatch.tick.Tick.sight`
and :meth:`punctual.dispatch.tick.Tick.scale`, the same :func:`punctual.dispatch.scaling.plan_capacity`) every
``PERIOD_S`` seconds, with a capacity profile that describes local mode: the standing capacity is
the ``workers`` worker processes (no event-source ramp: each polls from the start), a *burst
worker* is one more worker process (``burst-1``, ``burst-2``, ...) that drains
``burst_worker_messages_per_s`` (deliberately low, so a burst of a few dozen slots asks for one),
is started ``START_LEAD_S`` before its minute, and is kept a few seconds after it (never before the
minute's burst window is over: :func:`punctual.dispatch.scaling.plan_capacity`).

The decision is applied by :class:`FileActuator`: it writes the desired count to
``run/scaling.json`` and appends each change to ``run/scaling.jsonl``; the supervisor
(:mod:`local.supervisor`) reads the file and starts or stops ``burst-N`` processes to match. The
worker processes of the standing set (``worker-1``, ``worker-2``) and the ECS worker are never
touched.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from local.config import LocalConfig
from punctual.dispatch.scaling import ScalingDecision
from punctual.runtime.settings import Settings
from punctual.timing.instants import format_instant

log = logging.getLogger("local.scaling")

PERIOD_S = 2.0  # how often the planner decides (the cloud's tick: every minute)
# A burst worker forked from its zygote (local.supervisor) receives within a second of the
# decision even at load average 10-12 on two cores (bench/local_burst_start.py; a new process took
# 4-8 s there, 17-30 s at load 30); the lead also covers a zygote that had to start again, and a
# worker started any later than this before its minute costs CPU while the burst is released.
START_LEAD_S = 20
HOLD_S = 5
BURST_PREFIX = "burst-"


def scaling_file(config: LocalConfig) -> Path:
    return config.run_dir / "scaling.json"


def history_file(config: LocalConfig) -> Path:
    return config.run_dir / "scaling.jsonl"


def local_settings(settings: Settings, config: LocalConfig) -> Settings:
    """``settings`` with the capacity profile of local mode's worker processes."""
    rate = max(1, config.burst_worker_messages_per_s)
    return settings.model_copy(
        update={
            "worker_max_concurrency": config.workers,
            "worker_max_concurrency_ceiling": config.workers,  # no event source to raise
            "event_source_cold_concurrency": config.workers,
            "event_source_ramp_per_minute": 0,
            "worker_message_ms": 1000 / rate,
            "burst_workers": 0,
            "burst_workers_max": config.burst_workers_max,
            "burst_worker_messages_per_s": float(rate),
            "burst_start_lead_s": START_LEAD_S,
            "burst_hold_s": HOLD_S,
            "scaling_period_s": PERIOD_S,
        }
    )


def desired_burst_workers(config: LocalConfig) -> int:
    """What the planner last asked for (0 when it has not decided yet)."""
    try:
        return int(json.loads(scaling_file(config).read_text())["burst_workers"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


class FileActuator:
    """Applies a decision by writing the desired burst workers for the supervisor.

    ``backlog`` reads the short queues' depth as the cloud actuator does (moto's SQS).
    """

    def __init__(self, config: LocalConfig, sqs: Any, queue_urls: list[str]) -> None:
        self.config = config
        self.sqs = sqs
        self.queue_urls = queue_urls
        self.current = desired_burst_workers(config)
        self._lock = threading.Lock()

    def backlog(self) -> int:
        total = 0
        for url in self.queue_urls:
            attributes = self.sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            ).get("Attributes", {})
            total += sum(int(value) for value in attributes.values())
        return total

    def running(self) -> int | None:
        """What it last asked for: the supervisor starts a burst worker within the start lead."""
        return self.current

    def apply(self, decision: ScalingDecision) -> list[str]:
        with self._lock:
            wanted = decision.burst_workers
            if wanted == self.current and scaling_file(self.config).exists():
                return []
            change = f"burst workers {self.current} -> {wanted}"
            record = {
                "burst_workers": wanted,
                "previous": self.current,
                "decided_at": format_instant(decision.decided_at),
                "minutes": [
                    {"minute": format_instant(n.minute), "load": n.load, "burst_workers": n.burst_workers}
                    for n in decision.driven_by
                ],
            }
            path = scaling_file(self.config)
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_suffix(".tmp")
            temporary.write_text(json.dumps(record))
            os.replace(temporary, path)  # the supervisor never reads half a file
            with history_file(self.config).open("a") as history:
                history.write(json.dumps(record) + "\n")
            self.current = wanted
            return [change]


class LocalScaler:
    """Runs the tick's scaling every ``PERIOD_S`` in the poller process (see the module docstring)."""

    def __init__(self, config: LocalConfig, settings: Settings, store: Any, sqs: Any) -> None:
        from punctual.dispatch.tick import Tick

        scaled = local_settings(settings, config)
        actuator = FileActuator(config, sqs, list(settings.short_queue_urls))
        self.tick = Tick(scaled, None, store, actuator)
        self.tick.log_every_decision = False
        self.next_at: datetime | None = None

    def step(self, now: datetime) -> ScalingDecision | None:
        """Decide (at most every ``PERIOD_S``); None when it was not time yet or nothing was read."""
        if self.next_at is not None and now < self.next_at:
            return None
        self.next_at = now + timedelta(seconds=PERIOD_S)
        current = now.replace(second=0, microsecond=0)
        far: dict[datetime, int | None] = {current + timedelta(minutes=k): None for k in (1, 2)}
        sighted = self.tick.sight(now, far)
        if sighted is None:
            return None
        return self.tick.scale(now, *sighted)


# The event source mapping's own scaling, which the planner does not see: Lambda adds execution
# environments while messages wait (a batch holds its environment until its slowest message is
# done), so a tenant's slow target never holds back the others' slots. Local mode's standing
# worker processes are few: while every one of them has held one batch for BUSY_S, one more burst
# worker is asked for (at most ``event_source_workers_max`` in all); once no worker has held a
# batch that long for IDLE_S, they are all given back (workers that only take quick batches, the
# demo's, are not held).
BUSY_S = 1.0
IDLE_S = 10.0


class ReactiveWorkers:
    """How many burst workers the event source's own scaling asks for (see above), decided from
    the worker processes' in-flight files (``<run>/<name>.inflight.json``, written while a batch is
    worked, dated by its receipt)."""

    def __init__(self, config: LocalConfig) -> None:
        self.config = config
        self.wanted = 0
        self._held_at: float | None = None  # when a worker was last seen holding a batch

    def _held(self, name: str, wall: float) -> bool:
        """Whether ``name`` has worked one batch for BUSY_S."""
        try:
            received = self.config.inflight_file(name).stat().st_mtime
        except OSError:
            return False
        return wall - received >= BUSY_S

    def decide(self, workers: list[str], bursting: int, now: float, wall: float) -> int:
        """``workers``: the worker processes running now (standing and burst); ``bursting``: how
        many of them are burst workers."""
        held = [self._held(name, wall) for name in workers]
        if any(held):
            self._held_at = now
            if all(held):
                self.wanted = min(self.config.event_source_workers_max, bursting + 1)
        elif self.wanted and (self._held_at is None or now - self._held_at >= IDLE_S):
            self.wanted = 0
        return self.wanted
