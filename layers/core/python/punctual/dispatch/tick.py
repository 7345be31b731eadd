"""Planning a minute: how many pollers (shard groups) it gets, which poller, and what each is told.

The tick starts one Step Functions execution per coming minute. An idle deployment gets
``shard_groups`` pollers (one by default: a poller runs for its whole minute, so every
always-on group costs Lambda time around the clock); a minute whose far buckets hold a
burst gets as many as it needs, estimated from a sample of its far buckets. All far
timers of a minute are written at least ``far_threshold_s`` before it, so two minutes
ahead the sample is complete.

Which poller: a minute with one group whose planned load is at most
``lean_max_triggers_per_minute`` runs on the *lean* poller (the same code at the smallest
Lambda memory: most of an idle deployment's bill is a poller's memory for ~80 s of every
minute). The planned load is the far estimate plus the near lane: the larger of the load timers
of the last whole minute (chains and retries recur) and the minute-load ledger's forecast of the
minute (near slots recorded where they are made: :mod:`punctual.dispatch.load_forecast`). Load is what
workers run: lease expiries are not counted. A minute whose load is unknown (no store, or the count
failed) gets the standard poller: the lean one is only ever chosen on evidence of idleness.
Nor does a minute that follows a poller that did not finish (a watermark more than two
minutes behind): whatever stopped it (a lean poller out of memory, say) must not stop the
poller that drains what it left.

Predictive scaling: with an actuator (the stack names the worker event-source mappings and the
burst service), each tick also sizes the workers for the minutes it sees — the current one and
the ones it starts — from their planned load (the far estimate plus the ledger's near forecast)
and, around a burst only, the short queues' backlog and the burst workers running (an idle tick
reads neither), with :func:`punctual.dispatch.scaling.plan_capacity`, logs the decision as one structured
record (``scaling_decision``) and counts it (``BurstWorkersDesired``, ``WorkerConcurrencyDesired``,
``BurstPlannedSlots``, ``BurstShortfall``); a minute served late (capacity asked for too late for
its lead, or beyond the bounds) is a ``Burst Shortfall`` event too. A minute planned again at the
next tick whose burst grew meanwhile is re-planned while its pollers wait
(:mod:`punctual.dispatch.burst_sight`). Scaling never delays or stops a minute's start: it runs after the
starts, and a failure is logged and left to the next tick.
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from punctual.delivery.notifications.events import EventPublisher
from punctual.dispatch.burst_sight import (
    REPLAN_SUFFIX,
    Replanner,
    execution_name,
    ledger_load,
    shortfall_events,
)
from punctual.dispatch.ecs_lane import EcsLaneReadiness
from punctual.dispatch.scaling import (
    CapacityActuator,
    CapacityProfile,
    ScalingDecision,
    plan_capacity,
    standing_drain,
)
from punctual.runtime.clock import SystemClock
from punctual.runtime.observability import MetricsSink, NullMetrics
from punctual.runtime.settings import Settings
from punctual.store.base import JobStore
from punctual.store.loads import MinuteLoad
from punctual.timing.instants import format_instant
from punctual.timing.timers import Lane, minute_of

log = logging.getLogger("punctual.dispatch.tick")

STANDARD = "standard"
LEAN = "lean"
RECENT_MINUTES = 5  # how long a tick remembers the loads it counted (the backlog check)
INLINE_MAP_GROUPS = 40  # what one inline Map runs at once: more groups go to the burst machine


def estimate_far_load(store: JobStore, minute: datetime, settings: Settings, rng: random.Random) -> int:
    """Timers due in ``minute`` across all far shards, extrapolated from a sample of shards."""
    count = settings.shard_count
    sample_size = min(settings.load_sample_shards, count)
    if sample_size == 0:
        return 0
    sample = rng.sample(range(count), sample_size)
    seen = sum(store.count_timers(Lane.FAR, minute, shard) for shard in sample)
    return math.ceil(seen * count / sample_size)


def estimate_far_head(
    store: JobStore, minute: datetime, settings: Settings, rng: random.Random, window_s: float
) -> int:
    """Far timers due in the first ``window_s`` of ``minute`` (its burst), extrapolated from a
    small sample of shards whose timers are read (packed rows span the minute: only their
    content says when each is due). Only called for a minute whose total is large."""
    count = settings.shard_count
    sample_size = min(settings.burst_head_sample_shards, count)
    if sample_size == 0:
        return 0
    until_ms = int(minute.timestamp() * 1000 + window_s * 1000)
    seen = 0
    for shard in rng.sample(range(count), sample_size):
        seen += sum(1 for timer in store.query_timers(Lane.FAR, minute, shard) if timer.due_ms < until_ms)
    return math.ceil(seen * count / sample_size)


def count_recent_near_load(store: JobStore, now: datetime, settings: Settings) -> int:
    """Near timers due in the last whole minute before ``now``, across every near shard; or, when
    there were few (at most the lean poller's bound), in the current minute if it holds more: a
    workload registered a moment ago is load already (its first minutes would otherwise be planned
    idle, on one small poller per group)."""
    current = minute_of(now)
    last = sum(
        store.count_timers(Lane.NEAR, current - timedelta(minutes=1), shard)
        for shard in range(settings.near_shard_count)
    )
    if last > settings.lean_max_triggers_per_minute:
        return last
    return max(
        last, sum(store.count_timers(Lane.NEAR, current, shard) for shard in range(settings.near_shard_count))
    )


def drained_behind(store: JobStore, now: datetime, settings: Settings) -> bool:
    """True if some shard's buckets older than two minutes before ``now`` were not all drained.

    A healthy poller advances its shards' watermarks to the end of its minute a few seconds
    after that minute: two minutes back is always drained unless a poller failed.
    """
    floor = minute_of(now) - timedelta(minutes=2)
    for lane, count in ((Lane.FAR, settings.shard_count), (Lane.NEAR, settings.near_shard_count)):
        marks = store.get_watermarks(lane, list(range(count)))
        if any(mark < floor for mark in marks.values()):
            return True
    return False


@dataclass(frozen=True)
class RecentLoad:
    """What the last minutes say, the same for every minute one tick plans: read it once."""

    near: int  # near timers due in the last whole minute
    behind: bool  # some shard not drained up to two minutes ago


def observe_recent(store: JobStore, now: datetime, settings: Settings) -> RecentLoad:
    return RecentLoad(count_recent_near_load(store, now, settings), drained_behind(store, now, settings))


def poller_for(load: int | None, groups: int, settings: Settings) -> str:
    """``"lean"`` for a known, small, single-group load; ``"standard"`` otherwise."""
    if load is None or groups != 1 or settings.lean_max_triggers_per_minute <= 0:
        return STANDARD
    return LEAN if load <= settings.lean_max_triggers_per_minute else STANDARD


def group_count_for(load: int, settings: Settings) -> int:
    """Enough pollers for ``load`` triggers in one minute, within the configured bounds."""
    needed = math.ceil(load / settings.triggers_per_poller_minute) if load else 0
    groups = max(settings.shard_groups, needed)
    # A group owns whole shards: more groups than shards would leave some with none.
    return min(groups, settings.max_shard_groups, settings.shard_count)


def plan_minute(
    minute: datetime,
    settings: Settings | None = None,
    store: JobStore | None = None,
    rng: random.Random | None = None,
    now: datetime | None = None,
    recent: RecentLoad | None = None,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Step Functions input for ``minute``: when the pollers start, which poller, one item per group.

    ``now`` (default: the current time) names the last whole minute whose near timers are counted;
    ``recent``, when given, is that reading already made (for an earlier minute of the same tick).
    ``previous``: the plan of the minute before, when known. An idle (lean) minute takes two idle
    readings in a row: one minute's reading can be low because the pollers were down (the rate
    chains stall with them), and a minute so planned would run on one small poller per group
    just when the group needs its two.
    """
    settings = settings or Settings.from_env()
    minute = minute_of(minute)
    load = estimate_far_load(store, minute, settings, rng or random.Random()) if store else 0
    if recent is None and store is not None:
        recent = observe_recent(store, now or SystemClock(settings.clock_offset_s).now(), settings)
    forecast = ledger_load(store, minute)
    # The near lane: the last whole minute's (chains recur, retries follow failures), or the
    # ledger's forecast of this one (a burst registered inside the far threshold), the larger.
    near = None if recent is None else max(recent.near, forecast.total)
    behind = recent.behind if recent else False
    groups = group_count_for(load + (near or 0), settings)
    observed = None if near is None else load + near
    if observed is not None and previous is not None and previous.get("recent_near_timers") is not None:
        earlier = int(previous.get("estimated_far_timers") or 0) + int(previous["recent_near_timers"])
        observed = max(observed, earlier)  # idle only if the minute before read idle too
    poller = STANDARD if behind else poller_for(observed, groups, settings)
    items = [
        {
            "minute": format_instant(minute),
            "group": index,
            "group_count": groups,
            "shard_count": settings.shard_count,
            "near_shard_count": settings.near_shard_count,
        }
        for index in range(groups)
    ]
    return {
        "minute": format_instant(minute),
        "start_at": format_instant(minute - timedelta(seconds=settings.poller_lead_s)),
        "poller": poller,
        "estimated_far_timers": load,
        "recent_near_timers": near,
        "forecast_near_slots": forecast.total,
        "forecast_near_head": forecast.head,
        "drained_behind": behind,
        "groups": items,
        "pollers": pollers_for(items, replicas_for(groups, poller, settings)),
    }


def replicas_for(groups: int, poller: str, settings: Settings) -> int:
    """How many pollers each shard group of a minute gets (both release every slot: SQS
    deduplication and the claim keep one run per slot; :mod:`punctual.dispatch.polling.replicas`).

    ``poller_replicas`` (2) for a minute planned on the standard poller, as long as the Maps run
    them all at once (40 at a time each: 20 groups on the single Map, more on the burst machine's
    slices); one for an idle (lean) minute, whose second poller would cost as much as the first
    (an always-on Lambda) for at most 60 slots a minute; one when the Maps cannot run them all.
    """
    if poller == LEAN or settings.poller_replicas <= 1:
        return 1
    capacity = INLINE_MAP_GROUPS * max(1, settings.group_slices)
    return settings.poller_replicas if groups * settings.poller_replicas <= capacity else 1


def pollers_for(groups: list[dict[str, Any]], replicas: int) -> list[dict[str, Any]]:
    """The Map's items: each group's item once per replica (``replica`` 1, 2, ... on the extra
    ones; the first is the group's item as it is), replica by replica."""
    return [
        item if replica == 0 else {**item, "replica": replica}
        for replica in range(replicas)
        for item in groups
    ]


# --------------------------------------------------------------------------- the tick itself


def group_slices(groups: list[dict[str, Any]], slices: int) -> list[list[dict[str, Any]]]:
    """``groups`` split in order into ``slices`` runs whose sizes differ by at most one."""
    count = len(groups)
    return [groups[index * count // slices : (index + 1) * count // slices] for index in range(slices)]


class Tick:
    """Starts the Step Functions execution of each coming minute (EventBridge, every minute).

    Each execution is named after its minute and Standard executions are unique by name, so
    a doubled tick, or a tick that covers a minute the previous tick already started, is a
    no-op. It starts the next ``tick_lookahead_minutes`` minutes, so a late or lost tick is
    covered by its predecessor. Each minute is planned by :func:`plan_minute` from the store;
    if planning fails, the minute still starts, with the minimum groups on the standard poller
    (a minute whose load is unknown never gets the lean one). With more than 40 groups
    possible the state machine runs a Parallel of ``group_slices`` inline Maps: the plan then
    also splits the groups into that many slices (``$.groups`` stays whole, for the reader).

    Parameters
    ----------
    settings
        ``state_machine_arn``, ``poller_function``, ``lean_poller_function``,
        ``group_slices``, ``tick_lookahead_minutes`` and the planner's settings.
    sfn
        A Step Functions client.
    store
        Reads timer counts and watermarks (None: every minute's load is unknown).
    """

    def __init__(
        self,
        settings: Settings,
        sfn: Any,
        store: JobStore | None,
        actuator: CapacityActuator | None = None,
        metrics: MetricsSink | None = None,
        loads: dict[datetime, tuple[int, int]] | None = None,
        events: EventPublisher | None = None,
        ecs_lane: EcsLaneReadiness | None = None,
    ) -> None:
        self.settings = settings
        self.sfn = sfn
        self.store = store
        self.actuator = actuator
        self.metrics: MetricsSink = metrics or NullMetrics()
        # Minute -> (burst, total) slots counted by this process's ticks (the composition root
        # keeps it: a warm tick Lambda reuses what the previous minute's tick counted).
        self.loads: dict[datetime, tuple[int, int]] = {} if loads is None else loads
        # The tick logs every decision (one a minute); local mode, deciding every few seconds,
        # only those that scale or change something.
        self.log_every_decision = True
        self.replanner = Replanner(settings, sfn)
        # Burst Shortfall events (punctual.dispatch.burst_sight); None: counted and logged only.
        self.events = events
        self.ecs_lane = ecs_lane  # ECS tasks ahead of the ECS lane's slots (None: off)
        self._ledger_read: dict[datetime, MinuteLoad] = {}  # minutes read this tick, for both

    def poller_function(self, poller: str | None) -> str:
        """The function a minute's pollers run on: the lean one when planned and deployed."""
        settings = self.settings
        return (
            settings.lean_poller_function
            if poller == LEAN and settings.lean_poller_function
            else settings.poller_function
        )

    def recent_load(self, now: datetime) -> RecentLoad | None:
        """The near lane's last minute and the drain watermarks, read once per tick (None: unknown)."""
        if self.store is None:
            return None
        try:
            return observe_recent(self.store, now, self.settings)
        except Exception:
            log.exception("reading the recent load failed: each minute's plan tries again")
            return None

    def plan(
        self,
        minute: datetime,
        now: datetime | None = None,
        recent: RecentLoad | None = None,
        previous: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The execution input of ``minute``: sized from its load when the store can tell
        (``previous``: the plan of the minute before, when known)."""
        try:
            chosen = plan_minute(minute, self.settings, self.store, now=now, recent=recent, previous=previous)
        except Exception:
            log.exception("sizing %s failed: starting it with the minimum shard groups", minute)
            chosen = plan_minute(minute, self.settings)  # no store: unknown load, the standard poller
        chosen["poller_function"] = self.poller_function(chosen.get("poller"))
        self._with_relay(chosen)
        slices = self.settings.group_slices
        if slices > 1:  # the state machine's Parallel of inline Maps reads one slice per Map
            chosen["group_slices"] = group_slices(chosen["pollers"], slices)
        return chosen

    def _with_relay(self, plan: dict[str, Any]) -> None:
        """Group 0's pollers carry what they need to start the next minute if it is missing
        (:func:`punctual.dispatch.polling.relay.relay_next`): the tick is not the only path to a minute."""
        settings = self.settings
        if not settings.state_machine_arn:
            return
        relay = {
            "state_machine_arn": settings.state_machine_arn,
            "burst_state_machine_arn": settings.burst_state_machine_arn,
            "poller_function": settings.poller_function,
            "lean_poller_function": settings.lean_poller_function,
        }
        plan["pollers"] = [{**p, "relay": relay} if p["group"] == 0 else p for p in plan["pollers"]]

    def minutes_due(self, now: datetime) -> list[datetime]:
        """The minutes a tick at ``now`` makes sure of: the current one (its pollers' window is
        open all minute: a tick late by more than the lookahead, or whose predecessors were lost
        or skewed, starts it late rather than never) and the ``tick_lookahead_minutes`` coming."""
        current = minute_of(now)
        return [current + timedelta(minutes=k) for k in range(self.settings.tick_lookahead_minutes + 1)]

    def start_minutes(self, now: datetime, minutes: list[datetime] | None = None) -> list[str]:
        """Start every minute due (:meth:`minutes_due`, or ``minutes``) that has no execution yet;
        return the names of those this call started.

        Each minute on its own: a minute whose start fails (a throttle, say) does not keep the
        others from starting, nor the scaling from running; the first error is raised at the end
        (the tick's error alarm counts it, and EventBridge retries the tick).
        """
        wanted = self.minutes_due(now) if minutes is None else minutes
        self._ledger_read = {}
        started: list[str] = []
        errors: list[Exception] = []
        recent: RecentLoad | None = None
        plans: dict[datetime, dict[str, Any]] = {}
        known: dict[datetime, dict[str, Any]] = {}  # the plans of the minutes that run already
        for minute in sorted(wanted):
            found = self.exists(execution_name(minute))
            if found is not None:
                known[minute] = found
                continue
            try:
                if recent is None:
                    recent = self.recent_load(now)
                before = minute - timedelta(minutes=1)
                previous = plans.get(before) or known.get(before)
                plans[minute] = self.plan(minute, now, recent, previous)
            except Exception as exc:  # plan() falls back by itself: this is a bug, still isolated
                log.exception("planning %s failed", minute)
                errors.append(exc)
        coming = [m for m in wanted if m > minute_of(now)]
        far = {
            m: (plans[m].get("estimated_far_timers") if m in plans else None)
            if self.store is not None
            else None
            for m in coming
        }
        sighted = self.sight(now, far) if coming else None
        if sighted is not None and self.settings.burst_triggers_per_poller:
            for minute, plan in plans.items():
                self.size_for_burst(plan, sighted[0].get(minute, 0))
            for minute, plan in known.items():  # planned by an earlier tick: a burst seen since
                self._replan_if_short(minute, plan, sighted[0].get(minute, 0), now, started)
        for minute, plan in plans.items():
            try:
                if self.start(minute, plan, looked=True):
                    started.append(execution_name(minute))
            except Exception as exc:
                log.exception("starting the pollers of %s failed: the other minutes go on", minute)
                self.metrics.add("MinuteStartFailures", 1)
                errors.append(exc)
        if sighted is not None:
            self.scale(now, *sighted)
        if self.ecs_lane is not None:  # ECS tasks for the ECS-lane slots in sight
            self.ecs_lane.on_tick(now, self.ledger if self.store is not None else None)
        if errors:
            raise errors[0]
        return started

    def ledger(self, minute: datetime) -> MinuteLoad:
        """The ledger's ``minute``, read once a tick (:func:`punctual.dispatch.burst_sight.ledger_load`)."""
        if minute not in self._ledger_read:
            self._ledger_read[minute] = ledger_load(self.store, minute)
        return self._ledger_read[minute]

    def _replan_if_short(
        self, minute: datetime, running: dict[str, Any], burst: int, now: datetime, started: list[str]
    ) -> None:
        """A minute already planned whose burst, seen since, needs more pollers than it waits
        with: stopped and started again with them while its pollers still wait
        (:class:`~punctual.dispatch.burst_sight.Replanner`); never raises (the minute runs as planned)."""
        if not burst or not running.get("groups"):
            return
        plan = json.loads(json.dumps(running))
        self.size_for_burst(plan, burst)
        if len(plan["groups"]) <= len(running["groups"]):
            return
        try:
            target, _ = self.machines_for(plan)
            was, _ = self.machines_for(running)
            if self.replanner.replan(minute, plan, was, target, now):
                started.append(execution_name(minute) + REPLAN_SUFFIX)
        except Exception:
            log.exception("re-planning %s failed: it runs as planned", minute)

    def start(self, minute: datetime, plan: dict[str, Any], looked: bool = False) -> bool:
        """Start ``minute``'s execution with ``plan``; False when it already runs (idempotent by
        name, on either machine; ``looked``: :meth:`exists` just looked on both)."""
        name = execution_name(minute)
        machine, other = self.machines_for(plan)
        if other and not looked and self.started_on(other, name):
            return False  # started on the other machine by an earlier tick: a minute runs once
        try:
            self.sfn.start_execution(stateMachineArn=machine, name=name, input=json.dumps(plan))
        except self.sfn.exceptions.ExecutionAlreadyExists:
            return False  # this minute is already running: the no-op that makes ticks idempotent
        return True

    def exists(self, name: str) -> dict[str, Any] | None:
        """The plan of execution ``name`` when it is known on a machine (its input), else None (a
        failed look is a no: the minute is then planned, and its start is a no-op if it did exist)."""
        for machine in [
            m for m in (self.settings.state_machine_arn, self.settings.burst_state_machine_arn) if m
        ]:
            found = self.described(machine, name, quiet=True)
            if found is not None:
                return found
        return None

    def machines_for(self, plan: dict[str, Any]) -> tuple[str, str]:
        """The state machine a minute's plan runs on, and the other one ("" when there is one).

        With a burst machine (the Parallel of inline Maps), a minute of more than 40 groups runs
        there and every other minute on the single Map, so an idle minute never pays the
        Parallel's transitions; without one, every minute runs on the one machine.
        """
        standard, burst = self.settings.state_machine_arn, self.settings.burst_state_machine_arn
        if not burst:
            return standard, ""
        if len(plan["pollers"]) > INLINE_MAP_GROUPS:
            return burst, standard
        return standard, burst

    def started_on(self, machine: str, name: str, quiet: bool = False) -> bool:
        """Whether ``machine`` already has the execution ``name`` (a failed look is a no)."""
        return self.described(machine, name, quiet) is not None

    def described(self, machine: str, name: str, quiet: bool = False) -> dict[str, Any] | None:
        """The input of ``machine``'s execution ``name`` ({} when unreadable); None when there is
        none (or the look failed)."""
        execution = machine.replace(":stateMachine:", ":execution:", 1) + ":" + name
        try:
            described = self.sfn.describe_execution(executionArn=execution)
        except self.sfn.exceptions.ExecutionDoesNotExist:
            return None
        except Exception as exc:
            if quiet:
                log.info("looking for %s failed (%s): planning it", name, type(exc).__name__)
            else:
                log.exception("looking for %s failed: starting it where its plan says", name)
            return None
        try:
            plan = json.loads(described.get("input") or "{}")
        except (TypeError, ValueError):
            return {}
        return plan if isinstance(plan, dict) else {}

    def size_for_burst(self, plan: dict[str, Any], burst: int) -> None:
        """More pollers for a minute whose burst (slots due at once) needs them to be released
        within the lateness target: ``burst / burst_triggers_per_poller``, within the bounds.
        Sustained load keeps ``triggers_per_poller_minute`` pollers (its burst is small)."""
        settings = self.settings
        needed = math.ceil(burst / settings.burst_triggers_per_poller)
        groups = min(max(needed, len(plan["groups"])), settings.max_shard_groups, settings.shard_count)
        if groups <= len(plan["groups"]):
            return
        item = plan["groups"][0]
        plan["groups"] = [{**item, "group": index, "group_count": groups} for index in range(groups)]
        plan["pollers"] = pollers_for(plan["groups"], replicas_for(groups, STANDARD, settings))
        plan["poller"] = STANDARD
        plan["poller_function"] = self.poller_function(STANDARD)
        plan["burst_slots"] = burst
        self._with_relay(plan)
        if settings.group_slices > 1:
            plan["group_slices"] = group_slices(plan["pollers"], settings.group_slices)

    # ------------------------------------------------------------------ predictive scaling

    def planned_loads(
        self, now: datetime, far: dict[datetime, int | None], profile: CapacityProfile
    ) -> tuple[dict[datetime, int], dict[datetime, int]]:
        """Slots due in the minutes in sight — the current one and each coming one — at once (in
        the minute's first ``lateness_target_s``: its burst) and in all.

        A coming minute's far total is its plan's estimate; the next minute adds the near timers
        already written for it (fresh registrations, retries; the minute after is counted at the
        next tick, still a minute ahead). Only a minute whose total the standing capacity would
        not start within the target has its burst read (a sample of its far timers, all of its
        near ones); any other minute's burst is its total. The current minute's figures are
        what the previous tick counted (kept per process), or counted afresh after a cold start.
        """
        assert self.store is not None
        current = minute_of(now)
        standing = standing_drain(profile, profile.lateness_target_s)
        window = profile.lateness_target_s
        rng = random.Random()
        bursts: dict[datetime, int] = {}
        totals: dict[datetime, int] = {}
        for minute in sorted(far):
            estimate = far[minute]
            if estimate is None:
                estimate = estimate_far_load(self.store, minute, self.settings, rng)
            near = self.ledger(minute)  # near slots come from the ledger, ahead
            totals[minute] = estimate + near.total
            bursts[minute] = self._burst(minute, (estimate, near), standing, window, rng)
        if current in self.loads and not self._grew(current):
            bursts[current], totals[current] = self.loads[current]
        else:
            estimate = estimate_far_load(self.store, current, self.settings, rng)
            near = self.ledger(current)
            totals[current] = estimate + near.total
            bursts[current] = self._burst(current, (estimate, near), standing, window, rng)
        for minute in bursts:
            self.loads[minute] = (bursts[minute], totals[minute])
        for minute in [m for m in self.loads if m < current - timedelta(minutes=RECENT_MINUTES)]:
            del self.loads[minute]
        before = current - timedelta(minutes=1)  # how warm the minute before left the workers
        if before not in self.loads:  # a cold start: counted once
            total = estimate_far_load(self.store, before, self.settings, rng)
            self.loads[before] = (total, total)
        totals[before] = self.loads[before][1]
        return bursts, totals

    def _grew(self, minute: datetime) -> bool:
        """Whether the ledger holds more for ``minute`` than this process counted (a burst
        registered inside the far threshold since): then it is counted again."""
        counted = self.loads.get(minute)
        return counted is not None and self.ledger(minute).head > counted[0]

    def _burst(
        self,
        minute: datetime,
        counts: tuple[int, MinuteLoad],
        standing: int,
        window_s: float,
        rng: random.Random,
    ) -> int:
        """Slots due at once in ``minute`` from its far total and near forecast (see
        :meth:`planned_loads`): a total the standing capacity starts in time is taken as it is;
        a larger one has its far head read (a sample) and its near head from the ledger."""
        far, near = counts
        if far + near.total <= standing or self.store is None:
            return far + near.total
        head = min(far, estimate_far_head(self.store, minute, self.settings, rng, window_s)) if far else 0
        return head + near.head

    def sight(
        self, now: datetime, far: dict[datetime, int | None]
    ) -> tuple[dict[datetime, int], dict[datetime, int]] | None:
        """The minutes in sight's bursts and totals (:meth:`planned_loads`); None when nothing
        uses them (no actuator, no burst sizing of pollers) or they cannot be read."""
        if self.store is None or (self.actuator is None and not self.settings.burst_triggers_per_poller):
            return None
        self._ledger_read = {}  # a decision of its own (local mode's scaler calls it every few seconds)
        try:
            return self.planned_loads(now, far, CapacityProfile.from_settings(self.settings))
        except Exception:
            log.exception("reading the minutes' bursts failed: the next tick reads them again")
            return None

    def scale(
        self, now: datetime, bursts: dict[datetime, int], totals: dict[datetime, int]
    ) -> ScalingDecision | None:
        """Size the workers for the minutes in sight and apply it (None: no actuator)."""
        if self.actuator is None:
            return None
        try:
            profile = CapacityProfile.from_settings(self.settings)
            # The short queues' depth matters only around a burst: an idle tick reads no queue.
            standing = standing_drain(profile, profile.lateness_target_s)
            busy = any(burst > standing for burst, _ in self.loads.values())
            backlog = self.actuator.backlog() if busy else 0
            running = self.actuator.running() if busy else None
            decision = plan_capacity(now, bursts, backlog, profile, totals, running)
            changed = self.actuator.apply(decision)
        except Exception:
            log.exception("predictive scaling failed: the next tick decides again")
            return None
        record = decision.record() | {"changed": changed}
        level = logging.INFO if (self.log_every_decision or changed or decision.scaled) else logging.DEBUG
        log.log(level, "scaling decision: %s", json.dumps(record), extra={"scaling_decision": record})
        self.metrics.add("BurstWorkersDesired", decision.burst_workers)
        self.metrics.add("WorkerConcurrencyDesired", decision.max_concurrency)
        self.metrics.add("BurstPlannedSlots", max((n.load for n in decision.upcoming), default=0))
        self.metrics.add("BurstShortfall", decision.shortfall)
        self.report_shortfall(decision, now)
        return decision

    def report_shortfall(self, decision: ScalingDecision, now: datetime) -> None:
        """A ``Burst Shortfall`` event (and a log record) for each minute served late."""
        events = shortfall_events(decision, now)
        for event in events:
            log.warning(
                "burst shortfall: %s", json.dumps(event.detail), extra={"burst_shortfall": event.detail}
            )
        if events and self.events is not None:
            self.events.publish(events)
