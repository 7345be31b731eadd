"""Bursts seen at any lead time: the minute-load ledger, kept current where near slots are made.

The tick sizes a coming minute's pollers and workers two minutes ahead from a sample of its far
timers. Far timers are written at least ``far_threshold_s`` (180 s) before they are due, so the
sample sees them all; **near** timers are not there yet: a job registered 150 s (or 40 s) before
its slot, and the slots of a chain that goes through the near lane (``rate(1 minute)``: each
slot's timer is written by the release of the one before, 60 s ahead). A 600,000-slot minute of
those was invisible to the tick until too late.

So whoever makes a near slot records it, ahead, in the minute-load ledger
(:class:`punctual.store.loads.MinuteLoadRepository`: per minute, slots due and slots due in its
first ``head_s`` seconds, its burst), and the tick adds the ledger to its far sample:

* **registration and replace** (:meth:`LoadForecast.changed`, also on pause, resume and delete):
  a job's near slots that no release will forecast — its first slot when it is near, and the
  first ``n`` slots of a near chain (``n`` periods cover ``horizon_s``) — are added; the job's
  version before the change has its own taken back;
* **a release** (:func:`chain_forecast`): a near chain's slot just released forecasts the slot
  ``n`` periods on (it will be written by a release ``n - 1`` periods from now, too late for the
  tick), so every slot of a near chain is in the ledger ``horizon_s`` before it is due. One
  counter write per release chunk and minute, not per slot.

**The ECS lane** (``runtime: ecs``) is counted apart, every slot of it near or far
(:func:`add_ecs_slot`): a registration adds its job's first slot, a release the slot its next timer
is for. From that count the tick has ECS worker tasks running before an ECS-lane slot is due
(:mod:`punctual.dispatch.ecs_lane`): a Fargate task takes about a minute to start.

Only load is counted (the slots workers run): lease expiries, queued-slot checks and backfill
steps are not. It is a forecast: a crash between a write and its ledger entry misses a slot, a
repeated release counts one twice, and so does a slot both pollers of a loaded minute's group
release (each may, and which one does is a race: writing it from one of them alone lost the
slots the other released first, so it errs high; a pause takes one count back and the rest
passes with its minutes, as a Burst Shortfall a paused load's last minutes may still show).
Those err high (twice a near chain both pollers release, more on a repeat): the tick asks for
more workers than the slots need. The counters expire a day after their minute.
"""

from __future__ import annotations

import logging
import math
import random
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from punctual.models import Job, JobState, Runtime
from punctual.store.loads import MinuteLoad, MinuteLoadRepository
from punctual.timing.slots import dispatch_instant, first_slot, next_slot, schedule_of
from punctual.timing.timers import TimerLayout, minute_of

HORIZON_S = 240.0  # a slot is in the ledger this long before it is due: the tick looks 118 s ahead
MAX_SEEDED = 600  # slots a registration enumerates at most (rate(1 second): 240 in the horizon)

log = logging.getLogger("punctual.dispatch.load_forecast")
_ONE_SECOND = timedelta(seconds=1)
_ECS = Runtime.ECS  # read once: an enum's member read through its class is slow (a read per slot)


def add_slot(loads: dict[datetime, MinuteLoad], instant: datetime, head_s: float, count: int = 1) -> None:
    """Count one slot due at ``instant`` (negative ``count``: take it back)."""
    minute = minute_of(instant)
    head = count if (instant - minute).total_seconds() < head_s else 0
    # One MinuteLoad made a call (a release adds one a slot), not three: ``get(minute,
    # MinuteLoad()) + MinuteLoad(count, head)`` adds the same counts.
    known = loads.get(minute)
    if known is None:
        loads[minute] = MinuteLoad(count, head)
    else:
        loads[minute] = MinuteLoad(known.total + count, known.head + head, known.ecs)


class MinuteTally:
    """Slots counted per UTC minute as :func:`add_slot` and :func:`add_ecs_slot` count them, in
    place: a release chunk's forecast (a near chain's slot a release), whose :class:`MinuteLoad`
    of each minute is made once, when it is written (:meth:`loads`), not once per slot (a frozen
    dataclass: about half of what counting a slot cost)."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: dict[datetime, list[int]] = {}  # minute -> [total, head, ecs]

    def __bool__(self) -> bool:
        return bool(self._counts)

    def _of(self, minute: datetime) -> list[int]:
        counts = self._counts.get(minute)
        if counts is None:
            counts = self._counts[minute] = [0, 0, 0]
        return counts

    def add_slot(self, instant: datetime, head_s: float, count: int = 1) -> None:
        """:func:`add_slot` (its body in line: a call a released slot)."""
        minute = minute_of(instant)
        counts = self._counts.get(minute)
        if counts is None:
            counts = self._counts[minute] = [0, 0, 0]
        counts[0] += count
        if (instant - minute).total_seconds() < head_s:
            counts[1] += count

    def add_ecs_slot(self, instant: datetime, count: int = 1) -> None:
        """:func:`add_ecs_slot`."""
        self._of(minute_of(instant))[2] += count

    def loads(self) -> dict[datetime, MinuteLoad]:
        """The loads counted, per minute (in the order each was first counted)."""
        return {minute: MinuteLoad(total, head, ecs) for minute, (total, head, ecs) in self._counts.items()}


def add_ecs_slot(loads: dict[datetime, MinuteLoad], instant: datetime, count: int = 1) -> None:
    """Count one ECS-lane slot due at ``instant`` (negative ``count``: take it back)."""
    minute = minute_of(instant)
    loads[minute] = loads.get(minute, MinuteLoad()) + MinuteLoad(ecs=count)


def on_ecs_lane(job: Job) -> bool:
    """Whether ``job``'s slots run on the ECS lane (its workers are Fargate tasks)."""
    return job.runtime is _ECS


def forecast_ecs_timer(ledger: MinuteLoadRepository, job: Job, due: datetime) -> None:
    """A timer a worker writes for an ECS-lane job (a retry, a ``delay(...)`` chain's next slot):
    counted ahead like the pollers' (one counter write). Best effort: a failure costs the
    forecast (the slot then waits for the service's own scale-out), never the timer."""
    if not on_ecs_lane(job):
        return
    loads: dict[datetime, MinuteLoad] = {}
    add_ecs_slot(loads, due)
    try:
        ledger.add_minute_loads(loads, shard=random.randrange(1 << 16))
    except Exception:
        log.warning("could not add an ECS-lane timer to the load ledger", exc_info=True)


def ecs_first_slot(job: Job, now: datetime) -> datetime | None:
    """The due instant of an ENABLED ECS-lane job's first slot from ``now`` (None: not on the
    lane, not enabled, or a slot no timer announces: ``after(...)`` children are sent by their
    last parent's worker)."""
    if not on_ecs_lane(job) or job.state is not JobState.ENABLED or schedule_of(job).kind == "after":
        return None
    first = first_slot(job, now)
    return None if first is None else dispatch_instant(job, first)


def seeded_slots(
    job: Job, now: datetime, layout: TimerLayout, horizon_s: float = HORIZON_S
) -> list[datetime]:
    """The due instants of ``job``'s slots (from ``now``) that its registration forecasts: near
    ones no release will forecast (see the module docstring). None for a job not ENABLED."""
    if job.state is not JobState.ENABLED:
        return []
    schedule = schedule_of(job)
    if schedule.kind == "after":
        return []
    first = first_slot(job, now)
    if first is None:
        return []
    threshold = timedelta(seconds=layout.far_threshold_s)
    due = dispatch_instant(job, first)
    out = [due] if due - now <= threshold else []
    if schedule.kind == "delay":
        return out  # later slots chain from finish times: not forecast
    following = next_slot(job, first)
    if following is None or following - first > threshold:
        return out  # a far chain: the tick's sample sees its later slots
    # A near chain: its first n slots (n periods cover the horizon) have no release to forecast them.
    period_s = max((following - first).total_seconds(), 1.0)
    count = min(math.ceil(horizon_s / period_s), MAX_SEEDED)
    current: datetime | None = following
    out = [due]
    while current is not None and len(out) < count:
        out.append(dispatch_instant(job, current))
        current = next_slot(job, current)
    return out


def chain_forecast(slot: datetime, following: datetime, horizon_s: float = HORIZON_S) -> datetime:
    """The slot a release of ``slot`` forecasts, ``following`` being its near chain's next: ``n``
    periods on, ``n`` periods covering the horizon (exact for rates; a cron's, near enough)."""
    period = max(following - slot, _ONE_SECOND)
    return slot + period * math.ceil(horizon_s / period.total_seconds())


@dataclass
class LoadForecast:
    """Keeps the ledger current as jobs change (the API's side of it).

    Parameters
    ----------
    ledger
        The minute-load ledger (the store).
    layout
        Which slots are near (its far threshold).
    head_s
        A minute's head: the slots due in its first seconds (``burst_lateness_target_s``).
    horizon_s
        How long before its instant a slot is in the ledger.
    """

    ledger: MinuteLoadRepository
    layout: TimerLayout
    head_s: float
    horizon_s: float = HORIZON_S
    rng: random.Random = field(default_factory=random.Random)

    def changed(self, old: Job | None, new: Job | None, now: datetime) -> None:
        """``old`` became ``new`` (None: created, or deleted): take back what ``old`` forecast and
        add what ``new`` does. Best effort: a failure is the forecast's loss, never the change's."""
        loads: dict[datetime, MinuteLoad] = defaultdict(MinuteLoad)
        if old is not None:
            for instant in seeded_slots(old, now, self.layout, self.horizon_s):
                add_slot(loads, instant, self.head_s, -1)
            if (ecs := ecs_first_slot(old, now)) is not None:
                add_ecs_slot(loads, ecs, -1)
        if new is not None:
            for instant in seeded_slots(new, now, self.layout, self.horizon_s):
                add_slot(loads, instant, self.head_s)
            if (ecs := ecs_first_slot(new, now)) is not None:
                add_ecs_slot(loads, ecs)
        self.add(loads)

    def add(self, loads: Mapping[datetime, MinuteLoad]) -> None:
        changed = {minute: load for minute, load in loads.items() if not load.empty}
        if not changed:
            return
        try:
            self.ledger.add_minute_loads(changed, shard=self.rng.randrange(1 << 16))
        except Exception:
            log.warning("could not update the load ledger", exc_info=True)
