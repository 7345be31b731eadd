"""Predictive scaling: capacity for a coming minute's burst, decided before the minute.

Punctual knows its load ahead of time: far timers are written at least ``far_threshold_s``
before they are due, and the tick already counts each coming minute's timers to size its
pollers. This module turns those counts into worker capacity, for those minutes only.

The decision is a pure function (:func:`plan_capacity`) of

* the planned load of each coming minute (slots due in it, taken as due at its first instant:
  a top-of-minute burst is the worst case of a minute),
* the messages waiting in the short queues now (a burst that is still draining),
* a :class:`CapacityProfile`: what the standing capacity drains within the lateness target, how
  fast one extra worker drains, how long one takes to start, how long to keep it after the
  minute and how often the decision is made.

It answers a :class:`ScalingDecision`: how many *burst workers* should run now (ECS burst
tasks in the cloud, ``burst-N`` worker processes in local mode) and the short queues' event
sources' ``MaximumConcurrency``. Invariants:

* **Early enough.** Capacity for minute M is asked for at the last decision that still leaves
  ``start_lead_s`` before M (a decision made at ``now`` covers every minute whose start lead
  begins before the *next* decision): a Fargate task is polling when M's slots are released.
* **Only while needed.** It is held until ``hold_s`` after M (never before M's burst window,
  ``lateness_target_s``, is over) and for as long as the short
  queues hold more than the standing capacity drains within the target; then the next
  decision scales back to the standing figures (never below them: the standing count is what
  the deployment asked for).
* **Bounded.** Never more burst workers than ``burst_workers_max``, never a concurrency above
  ``concurrency_ceiling`` (1,000: the event-source API's limit). A minute the bounds cannot
  serve within the target is still served with the most there is, and the decision says so
  (``met`` False, ``shortfall`` the slots expected to start late), so it is logged and
  counted, never silent.

Why the burst workers and not the worker Lambda: an SQS event source that found its queue
idle starts at 5 concurrent invokes and adds 300 a minute (``docs/capacity.md``), so raising
``MaximumConcurrency`` or warming the function does not make a cold burst start sooner; tasks
that already long-poll do. The concurrency is still raised for a minute whose load the standing
concurrency could not drain within the minute at all, once the event source has ramped.

The actuator port (:class:`CapacityActuator`) applies a decision: the AWS one changes the
worker event-source mappings and the burst ECS service (``punctual.dispatch.scaling_aws``), the
in-memory one records (tests), local mode's writes the count its supervisor obeys.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Protocol

from punctual.runtime.settings import Settings
from punctual.timing.instants import format_instant

log = logging.getLogger("punctual.dispatch.scaling")


@dataclass(frozen=True)
class CapacityProfile:
    """What the planner knows of the worker capacity (see ``docs/capacity.md`` for the figures).

    Attributes
    ----------
    lateness_target_s
        Every slot of a minute should have started this long after its instant.
    message_s
        One message's time on one worker Lambda environment (19.3 ms with an instant target).
    standing_concurrency
        The short queues' event sources' ``MaximumConcurrency`` at rest (``workerMaxConcurrency``).
    concurrency_ceiling
        The most it may be raised to.
    cold_concurrency, ramp_per_minute
        An event source that found its queue idle starts at this many concurrent invokes and adds
        this many a minute (5 and 300, published). Local mode: its worker processes, no ramp.
    burst_workers_standing, burst_workers_max
        Burst workers at rest (``ecsBurstTasks``) and at most.
    burst_worker_messages_per_s
        What one burst worker drains a second (644 for a 1 vCPU task with 32 threads).
    start_lead_s
        From asking for a burst worker to its first receive (Fargate: provisioning, image pull,
        start; local mode: a process start).
    hold_s
        How long after its minute a burst's capacity is kept (and longer while the queues hold a
        backlog).
    period_s
        How often the planner decides (the tick: every minute).
    """

    lateness_target_s: float = 10.0
    message_s: float = 0.0193
    standing_concurrency: int = 400
    concurrency_ceiling: int = 1000
    cold_concurrency: int = 5
    ramp_per_minute: int = 300
    burst_workers_standing: int = 0
    burst_workers_max: int = 0
    burst_worker_messages_per_s: float = 644.0
    start_lead_s: float = 75.0
    hold_s: float = 30.0
    period_s: float = 60.0

    @classmethod
    def from_settings(cls, settings: Settings) -> CapacityProfile:
        return cls(
            lateness_target_s=settings.burst_lateness_target_s,
            message_s=settings.worker_message_ms / 1000,
            standing_concurrency=settings.worker_max_concurrency,
            concurrency_ceiling=max(settings.worker_max_concurrency, settings.worker_max_concurrency_ceiling),
            cold_concurrency=settings.event_source_cold_concurrency,
            ramp_per_minute=settings.event_source_ramp_per_minute,
            burst_workers_standing=settings.burst_workers,
            burst_workers_max=max(settings.burst_workers, settings.burst_workers_max),
            burst_worker_messages_per_s=settings.burst_worker_messages_per_s,
            start_lead_s=settings.burst_start_lead_s,
            hold_s=settings.burst_hold_s,
            period_s=settings.scaling_period_s,
        )


def standing_drain(profile: CapacityProfile, seconds: float, warm: int = 0) -> int:
    """Messages the standing capacity starts within ``seconds`` of a burst's instant.

    The event sources' concurrency grows from ``cold_concurrency`` (or ``warm``, what the minute
    before kept busy, when more) by ``ramp_per_minute`` up to
    ``standing_concurrency`` (integrated exactly, piecewise linear); each concurrent worker
    starts ``1 / message_s`` messages a second; standing burst workers add their own rate.
    """
    if seconds <= 0:
        return 0
    low = min(max(profile.cold_concurrency, warm), profile.standing_concurrency)
    high = profile.standing_concurrency
    ramp_s = profile.ramp_per_minute / 60
    if ramp_s <= 0 or low >= high:
        area = low * seconds
    else:
        reach_s = (high - low) / ramp_s  # when the ramp meets the ceiling
        climbing = min(seconds, reach_s)
        area = low * climbing + ramp_s * climbing**2 / 2 + high * max(0.0, seconds - reach_s)
    lambdas = area / profile.message_s if profile.message_s > 0 else 0.0
    tasks = profile.burst_workers_standing * profile.burst_worker_messages_per_s * seconds
    return math.floor(lambdas + tasks)


@dataclass(frozen=True)
class MinuteNeed:
    """What one minute's planned load asks for."""

    minute: datetime
    load: int
    burst_workers: int  # total burst workers (standing included) that start it within the target
    max_concurrency: int
    shortfall: int  # slots expected to start later than the target even at the bounds
    # Slots expected to start later than the target because the burst workers were asked for too
    # late for their start lead (a burst seen less than ``start_lead_s`` before its minute).
    late: int = 0
    ready_at: datetime | None = None  # when the workers asked for now are ready (late: after the minute)

    @property
    def met(self) -> bool:
        return self.shortfall == 0 and self.late == 0


def warm_concurrency(profile: CapacityProfile, total: int) -> int:
    """Concurrency a minute of ``total`` slots keeps its event sources at (none: cold)."""
    return min(profile.standing_concurrency, math.ceil(total * profile.message_s / 60))


def need_for(
    load: int, profile: CapacityProfile, minute: datetime, total: int | None = None, warm: int = 0
) -> MinuteNeed:
    """The burst workers ``load`` slots due at once ask for (the event sources at ``warm``
    concurrency from the minute before), and the event-source concurrency that drains the
    minute's ``total`` slots (default: ``load``) within the minute."""
    target = profile.lateness_target_s
    standing = standing_drain(profile, target, warm)
    workers = profile.burst_workers_standing
    shortfall = 0
    if load > standing:
        per_worker = profile.burst_worker_messages_per_s * target
        extra = math.ceil((load - standing) / per_worker) if per_worker > 0 else 0
        workers = min(profile.burst_workers_max, profile.burst_workers_standing + extra)
        shortfall = max(
            0, load - standing - math.floor((workers - profile.burst_workers_standing) * per_worker)
        )
    # Concurrency that drains the minute within the minute once the event source has ramped.
    concurrency = profile.standing_concurrency
    wanted = math.ceil((load if total is None else max(load, total)) * profile.message_s / 60)
    if wanted > concurrency:
        concurrency = min(profile.concurrency_ceiling, wanted)
    return MinuteNeed(minute, load, workers, concurrency, shortfall)


def too_late(
    need: MinuteNeed, profile: CapacityProfile, now: datetime, running: int, warm: int = 0
) -> MinuteNeed:
    """``need`` with the slots it starts late because its burst workers are asked for at ``now``:
    ``running`` burst workers run already; the others start ``start_lead_s`` from now and take
    part only in what is left of the minute's target window after that."""
    standing_workers = profile.burst_workers_standing
    have = max(running, standing_workers)
    if need.burst_workers <= have:
        return need
    ready_at = now + timedelta(seconds=profile.start_lead_s)
    if ready_at <= need.minute:
        return need
    target = profile.lateness_target_s
    rate = profile.burst_worker_messages_per_s
    window = max(0.0, (need.minute - ready_at).total_seconds() + target)
    started = (
        standing_drain(profile, target, warm)
        + (have - standing_workers) * rate * target
        + (need.burst_workers - have) * rate * window
    )
    late = max(0, need.load - math.floor(started) - need.shortfall)
    return replace(need, late=late, ready_at=ready_at)


@dataclass(frozen=True)
class ScalingDecision:
    """What should run now, and why (logged as it is, one structured record per decision)."""

    decided_at: datetime
    burst_workers: int
    max_concurrency: int
    standing_burst_workers: int
    standing_concurrency: int
    backlog: int = 0
    driven_by: tuple[MinuteNeed, ...] = ()  # the minutes (and backlog) that hold capacity now
    upcoming: tuple[MinuteNeed, ...] = ()  # every minute considered
    shortfall: int = 0  # slots of the active minutes expected to start after the target
    running: int | None = None  # burst workers running when it was decided (None: not known)

    @property
    def scaled(self) -> bool:
        """Above the standing figures."""
        return (
            self.burst_workers > self.standing_burst_workers
            or self.max_concurrency > self.standing_concurrency
        )

    def record(self) -> dict[str, object]:
        """The structured log record of this decision."""
        return {
            "event": "scaling_decision",
            "decided_at": format_instant(self.decided_at),
            "burst_workers": self.burst_workers,
            "max_concurrency": self.max_concurrency,
            "standing_burst_workers": self.standing_burst_workers,
            "standing_concurrency": self.standing_concurrency,
            "scaled": self.scaled,
            "backlog": self.backlog,
            "shortfall": self.shortfall,
            "running": self.running,
            "minutes": [
                {
                    "minute": format_instant(need.minute),
                    "load": need.load,
                    "burst_workers": need.burst_workers,
                    "max_concurrency": need.max_concurrency,
                    "shortfall": need.shortfall,
                    "late": need.late,
                    "driving": need in self.driven_by,
                }
                for need in self.upcoming
            ],
        }


def _active(minute: datetime, now: datetime, profile: CapacityProfile) -> bool:
    """Whether minute's capacity must be up now: its start lead begins before the next decision
    (waiting for it would be too late) and its hold has not ended.

    The hold never ends before the burst's own window (``lateness_target_s``): the burst is the
    slots due in it, so a hold shorter than the window (local mode's was 5 s of a 10 s window)
    scaled the workers back just before a burst at the window's end was released, and a moment
    later, its backlog seen, started them again — processes stopped and started at the instant."""
    starts = minute - timedelta(seconds=profile.start_lead_s)
    ends = minute + timedelta(seconds=max(profile.hold_s, profile.lateness_target_s))
    return starts <= now + timedelta(seconds=profile.period_s) and now < ends


def plan_capacity(
    now: datetime,
    planned: Mapping[datetime, int],
    backlog: int,
    profile: CapacityProfile,
    totals: Mapping[datetime, int] | None = None,
    running: int | None = None,
) -> ScalingDecision:
    """The capacity to run at ``now``.

    Parameters
    ----------
    now
        The decision's instant.
    planned
        Slots due at once per minute (minute start → count: the slots due in its first
        ``lateness_target_s``, its burst), for the minutes the caller can see: the coming ones
        and, to hold a burst through its minute, the current one.
    backlog
        Messages in the short queues now (waiting and in flight); a burst still draining keeps
        its capacity.
    profile
        The capacity figures.
    totals
        Slots due in the whole minute (default: ``planned``): the event sources' concurrency is
        sized to drain them within the minute. A minute of sustained load (10,000/s spread over
        it) has a small burst and a large total: it raises no burst worker. A minute's total
        also says how warm it leaves the event sources for the next one (cold: none known).
    running
        Burst workers running now (None: unknown, taken as the standing ones). A minute whose
        burst workers are asked for less than ``start_lead_s`` before it counts the slots that
        start late for it (``MinuteNeed.late``): capacity asked for too late for its lead.
    """
    totals = totals or {}
    minute_s = timedelta(minutes=1)
    have = profile.burst_workers_standing if running is None else running
    needs = tuple(
        too_late(
            need_for(load, profile, minute, totals.get(minute), warm),
            profile,
            now,
            have,
            warm,
        )
        for minute, load in sorted(planned.items())
        for warm in [warm_concurrency(profile, totals.get(minute - minute_s, 0))]
    )
    driving = [need for need in needs if _active(need.minute, now, profile) and need.load > 0]
    if backlog > standing_drain(profile, profile.lateness_target_s):
        driving.append(need_for(backlog, profile, now))
    workers = max([profile.burst_workers_standing, *(n.burst_workers for n in driving)])
    concurrency = max([profile.standing_concurrency, *(n.max_concurrency for n in driving)])
    held = tuple(
        n
        for n in driving
        if n.burst_workers > profile.burst_workers_standing
        or n.max_concurrency > profile.standing_concurrency
    )
    return ScalingDecision(
        decided_at=now,
        burst_workers=workers,
        max_concurrency=concurrency,
        standing_burst_workers=profile.burst_workers_standing,
        standing_concurrency=profile.standing_concurrency,
        backlog=backlog,
        driven_by=held,
        upcoming=needs,
        shortfall=max((n.shortfall + n.late for n in driving), default=0),
        running=running,
    )


# --------------------------------------------------------------------------- applying it


class CapacityActuator(Protocol):
    """Applies a decision: idempotent, and cheap when nothing changes."""

    def backlog(self) -> int:
        """Messages in the short queues now (waiting and in flight); 0 when unknown."""
        ...

    def running(self) -> int | None:
        """Burst workers running now (None: unknown)."""
        ...

    def apply(self, decision: ScalingDecision) -> list[str]:
        """Make the capacity match ``decision``; return what was changed (for the log)."""
        ...


@dataclass
class MemoryActuator:
    """The in-memory twin: holds the current figures and every change made (tests, benches)."""

    burst_workers: int = 0
    max_concurrency: int = 0
    queued: int = 0
    changes: list[tuple[datetime, str, int]] = field(default_factory=list)

    def backlog(self) -> int:
        return self.queued

    def running(self) -> int | None:
        return self.burst_workers  # the twin's workers start at once

    def apply(self, decision: ScalingDecision) -> list[str]:
        changed = []
        if decision.burst_workers != self.burst_workers:
            changed.append(f"burst workers {self.burst_workers} -> {decision.burst_workers}")
            self.burst_workers = decision.burst_workers
            self.changes.append((decision.decided_at, "burst_workers", decision.burst_workers))
        if decision.max_concurrency != self.max_concurrency:
            changed.append(f"max concurrency {self.max_concurrency} -> {decision.max_concurrency}")
            self.max_concurrency = decision.max_concurrency
            self.changes.append((decision.decided_at, "max_concurrency", decision.max_concurrency))
        return changed
