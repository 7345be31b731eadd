"""ECS worker tasks running before the ECS lane's slots are due: the tick's part.

The ECS worker service scales on its queues: out when a long-lane message waits, in when nothing
waits or runs, from ``ecsMinTasks`` (0 by default: an idle deployment pays for no task). A slot that
finds no task waits for that scale-out: a CloudWatch alarm over one-minute periods, then a Fargate
start (about a minute). So an ECS-lane slot would start two to three minutes late.

The minute-load ledger counts every ECS-lane slot ahead (:func:`punctual.dispatch.load_forecast.add_ecs_slot`:
a registration its job's first slot, a release the slot of the next timer it writes). Each tick
reads the ledger for the minutes from now to ``ecs_lane_sight_s`` ahead (a Fargate start, a tick
period and a margin). While an ECS-lane slot is in sight, the service's minimum capacity is raised
to ``ecs_ready_tasks`` (2 by default: one task's death leaves another to take its messages within
their lease). Application Auto Scaling starts those tasks at once. When nothing is in sight, the
minimum goes back to ``ecs_min_tasks``, and the service's own scale-in policy stops the tasks once
nothing waits or runs. CloudWatch invokes an Auto Scaling action again every minute its alarm
stays in ALARM (CloudWatch user guide, "Alarm actions"), so an idle alarm held back by the raised
minimum scales in once the minimum is lowered. A raised minimum never stops a run: only that
policy scales in.

What it leaves out: an ``after(...)`` child on the ECS lane (its last parent's worker sends it,
and no timer announces it) and a slot registered less than a Fargate start before it is due.
Both start when the scale-out does, as before.

The minimum is read (``DescribeScalableTargets``) and written (``RegisterScalableTarget``) only
when it differs: a tick that keeps it costs one read of a control-plane API.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from punctual.runtime.observability import MetricsSink, NullMetrics
from punctual.store.loads import MinuteLoad, MinuteLoadRepository
from punctual.timing.timers import minute_of

log = logging.getLogger("punctual.dispatch.ecs_lane")

NAMESPACE = "ecs"
DIMENSION = "ecs:service:DesiredCount"


class ScalableTarget(Protocol):
    """The ECS worker service's scalable target (its minimum task count)."""

    def min_capacity(self) -> int | None:
        """The minimum now (None: it cannot be read)."""
        ...

    def set_min_capacity(self, tasks: int) -> None:
        """Set the minimum (the service scales out to it at once when it runs fewer)."""
        ...


@dataclass
class AwsScalableTarget:
    """The target in Application Auto Scaling. ``resource_id``: ``service/<cluster>/<service>``."""

    client: Any
    resource_id: str

    def min_capacity(self) -> int | None:
        reply = self.client.describe_scalable_targets(
            ServiceNamespace=NAMESPACE, ResourceIds=[self.resource_id], ScalableDimension=DIMENSION
        )
        targets = reply.get("ScalableTargets") or []
        return int(targets[0]["MinCapacity"]) if targets else None

    def set_min_capacity(self, tasks: int) -> None:
        self.client.register_scalable_target(
            ServiceNamespace=NAMESPACE,
            ResourceId=self.resource_id,
            ScalableDimension=DIMENSION,
            MinCapacity=tasks,
        )


@dataclass
class MemoryScalableTarget:
    """The in-memory twin (tests): the minimum, and every change made."""

    minimum: int = 0
    changes: list[int] | None = None

    def min_capacity(self) -> int | None:
        return self.minimum

    def set_min_capacity(self, tasks: int) -> None:
        self.minimum = tasks
        self.changes = [*(self.changes or []), tasks]


@dataclass(frozen=True)
class LaneDecision:
    """One tick's decision: the ECS-lane slots in sight and the minimum it asked for."""

    in_sight: int
    minimum: int
    previous: int | None
    changed: bool


class EcsLaneReadiness:
    """Keeps the ECS worker service's minimum at ``ready_tasks`` while ECS-lane slots are in sight.

    Parameters
    ----------
    ledger
        The minute-load ledger (its ``ecs`` counters).
    target
        The service's scalable target.
    min_tasks, ready_tasks
        The minimum when nothing is in sight (``ecsMinTasks``), and while something is.
    sight_s
        How far ahead a slot is in sight: at least a Fargate start and a tick period.
    """

    def __init__(
        self,
        ledger: MinuteLoadRepository,
        target: ScalableTarget,
        min_tasks: int,
        ready_tasks: int,
        sight_s: float,
        metrics: MetricsSink | None = None,
    ) -> None:
        self.ledger = ledger
        self.target = target
        self.min_tasks = min_tasks
        self.ready_tasks = max(ready_tasks, min_tasks)
        self.sight_s = sight_s
        self.metrics: MetricsSink = metrics or NullMetrics()

    def in_sight(self, now: datetime, read: Callable[[datetime], MinuteLoad] | None = None) -> int:
        """The ECS-lane slots the ledger holds from this minute to the sight's end (``read``: the
        tick's own reads of the ledger, shared with its scaling; else the ledger's)."""
        read = read or self.ledger.get_minute_load
        minute, last = minute_of(now), minute_of(now + timedelta(seconds=self.sight_s))
        total = 0
        while minute <= last:
            total += read(minute).ecs
            minute += timedelta(minutes=1)
        return total

    def on_tick(
        self, now: datetime, read: Callable[[datetime], MinuteLoad] | None = None
    ) -> LaneDecision | None:
        """:meth:`apply` for the tick: a failure is logged, counted and left to the next tick (None),
        never kept from the minutes' start."""
        try:
            return self.apply(now, read)
        except Exception:
            log.exception("readying the ECS lane failed: the next tick decides again")
            self.metrics.add("EcsLaneErrors", 1)
            return None

    def apply(self, now: datetime, read: Callable[[datetime], MinuteLoad] | None = None) -> LaneDecision:
        """Decide and set the minimum (written only when it differs)."""
        in_sight = self.in_sight(now, read)
        wanted = self.ready_tasks if in_sight > 0 else self.min_tasks
        previous = self.target.min_capacity()
        changed = previous != wanted
        if changed:
            self.target.set_min_capacity(wanted)
        decision = LaneDecision(in_sight, wanted, previous, changed)
        self.metrics.add("EcsLaneMinTasks", wanted)
        level = logging.INFO if changed else logging.DEBUG
        log.log(level, "ECS lane: %d slot(s) in sight, minimum %s -> %d tasks", in_sight, previous, wanted)
        return decision
