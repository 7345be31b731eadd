"""Peak quotas: how many of a tenant's slots can be due in one second and in one minute.

The triggers-per-minute quota (:mod:`punctual.security.quotas`) limits an average: it spreads a cron's
slots over the day, so 100,000 ``cron(0 * * * ? *)`` jobs use 1,667 of a 60,000 quota and fire
100,000 slots at one instant. The peak quota limits the burst itself: a tenant's jobs may not
make more than ``maxSlotsPerSecondPerTenant`` slots due in any one second, nor more than
``maxSlotsPerMinutePerTenant`` in any one minute.

**A job's profile.** Its slots projected onto the UTC day: for each minute of the day, how many
slots it can have in that minute and in that minute's busiest second (the most over the days
sampled). The slots are those the poller releases (dispatch instants: jitter included), sampled
in :data:`WINDOWS` windows a season apart from the job's anchor (stable for the life of a
version, so the profile a job added is the one its replacement or deletion takes away), each from
its first slot for eight days (a cron: one day, which shows all its minutes
of the day) or 50 slots. A job with more than 50 slots a day, or whose slots
fall on more than :data:`SPARSE_MINUTES` minutes of the day (``rate(1 minute)``, ``*/5``), counts
*everywhere*: its busiest minute is added to every minute, and its busiest second to the few
seconds of the minute it fires at (``rate(1 minute)``: one) or else to every second. The busiest
second of a minute of the day is counted per job, so jobs at different seconds of one minute
add up in it (an upper bound that is exact for crons, which fire at second 0). ``delay(...)`` (whose
slots follow run times) counts everywhere with ``60 / period`` a minute and one a second;
``after(...)`` (fired by its parents) with one of each.

**A tenant's profile** is the sum of its jobs'; its peaks are upper bounds of what can be due at
once (two jobs at 09:00 on different weekdays both count at 09:00). Projecting onto the day is
what keeps the count small and exact enough: jobs at different times of day never add up.
"""

from __future__ import annotations

import json
import math
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from punctual.models import Job
from punctual.timing.schedules import CronSchedule
from punctual.timing.slots import dispatch_instant, next_slot, schedule_of

MINUTES_PER_DAY = 1440
WINDOWS = 4  # sampled windows, a season apart: at least one on each side of any DST change
SEASON = timedelta(days=91)
WINDOW = timedelta(days=8)  # each from its first slot: a weekly job shows its week
WINDOW_SLOTS = 50  # ... or this many slots (a job with more a day counts in every minute)
SPARSE_MINUTES = 96  # more minutes of the day than this: the job counts in every minute
_DAY = timedelta(days=1)
MAX_PHASES = 6  # a job that counts everywhere at this many seconds of the minute or fewer keeps them


@dataclass
class Profile:
    """Slots that can be due per UTC minute of the day and in its busiest second.

    Attributes
    ----------
    minutes
        Minute of the day (0-1439) -> slots in that minute.
    seconds
        Minute of the day -> slots in that minute's busiest second.
    every_minute
        Added to every minute: the jobs that count everywhere.
    phases
        Second of the minute (0-59) -> slots: jobs that count everywhere but always fire at a few
        seconds of the minute (``rate(1 minute)``: the second it was registered at).
    every_second
        Added to every second: the other jobs that count everywhere.
    """

    minutes: dict[int, int] = field(default_factory=dict)
    seconds: dict[int, int] = field(default_factory=dict)
    every_minute: int = 0
    every_second: int = 0
    phases: dict[int, int] = field(default_factory=dict)

    def peak_per_minute(self) -> int:
        return max(self.minutes.values(), default=0) + self.every_minute

    def peak_per_second(self) -> int:
        """An upper bound of the slots due in one second (never above the minute's)."""
        second = max(self.seconds.values(), default=0) + max(self.phases.values(), default=0)
        return min(second + self.every_second, self.peak_per_minute())

    def combined(self, other: Profile, sign: int = 1) -> Profile:
        """This profile plus (``sign`` 1) or minus (-1) ``other``; no count goes below zero (jobs
        registered before peaks were counted are taken away without having been added)."""

        def merge(mine: dict[int, int], theirs: dict[int, int]) -> dict[int, int]:
            out = dict(mine)
            for minute, count in theirs.items():
                value = out.get(minute, 0) + sign * count
                if value > 0:
                    out[minute] = value
                else:
                    out.pop(minute, None)
            return out

        return Profile(
            merge(self.minutes, other.minutes),
            merge(self.seconds, other.seconds),
            max(0, self.every_minute + sign * other.every_minute),
            max(0, self.every_second + sign * other.every_second),
            merge(self.phases, other.phases),
        )

    def to_doc(self) -> str:
        return json.dumps(
            {
                "m": {str(k): v for k, v in sorted(self.minutes.items())},
                "s": {str(k): v for k, v in sorted(self.seconds.items())},
                "em": self.every_minute,
                "es": self.every_second,
                "p": {str(k): v for k, v in sorted(self.phases.items())},
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_doc(cls, doc: str | None) -> Profile:
        if not doc:
            return cls()
        data: dict[str, Any] = json.loads(doc)
        return cls(
            {int(k): int(v) for k, v in data.get("m", {}).items()},
            {int(k): int(v) for k, v in data.get("s", {}).items()},
            int(data.get("em", 0)),
            int(data.get("es", 0)),
            {int(k): int(v) for k, v in data.get("p", {}).items()},
        )


def job_profile(job: Job) -> Profile:
    """The profile of one job (see the module notes); the same job version always gets the same."""
    schedule = schedule_of(job)
    if schedule.kind == "delay":
        period_s = max(schedule.period.total_seconds() if schedule.period else 60.0, 1.0)
        return Profile(every_minute=math.ceil(60 / period_s), every_second=1)
    if schedule.kind == "after":
        return Profile(every_minute=1, every_second=1)
    if job.jitter_seconds:  # each slot's offset is its own: nothing to share
        return _sampled(job)
    # Without jitter the profile depends on the schedule and the windows sampled only: jobs
    # registered in bulk with one expression (the usual burst) are sampled once.
    anchor = job.anchor if schedule.period is not None else job.anchor.date()
    dst = (job.dst.gap, job.dst.repeat) if job.dst else None
    key = (job.schedule, job.timezone, dst, job.start_at, job.end_at, anchor)
    return _cached(key, job)


_profiles: OrderedDict[tuple[object, ...], Profile] = OrderedDict()
_profiles_lock = threading.Lock()
MAX_CACHED_PROFILES = 4096


def _cached(key: tuple[object, ...], job: Job) -> Profile:
    with _profiles_lock:
        found = _profiles.get(key)
        if found is not None:
            _profiles.move_to_end(key)
            return found
    profile = _sampled(job)
    with _profiles_lock:
        _profiles[key] = profile
        while len(_profiles) > MAX_CACHED_PROFILES:
            _profiles.popitem(last=False)
    return profile


def _sampled(job: Job) -> Profile:
    """Sample the job's dispatch instants in a few windows a season apart (both sides of a DST
    change), each from its first slot for :data:`WINDOW` or :data:`WINDOW_SLOTS` slots.

    Each instant counts once: a job whose slots are a season or more apart (an ``at()``, a yearly
    or quarterly cron) has the same next slot from several windows, and counting it in each made
    one such job 2 to 4 slots of its tenant's peak (QA: a tenant at ``maxSlotsPerSecondPerTenant``
    of 4 could register one ``at()`` job at an instant, not four)."""
    per_minute: Counter[tuple[int, int]] = Counter()  # (day, minute of day) -> slots
    per_second: Counter[tuple[int, int, int]] = Counter()  # (day, minute, second) -> slots
    counted: set[datetime] = set()  # a slot two windows reach (one a season or more apart) counts once
    crowded = False
    # A cron's minutes of the day are the same on every day it fires (its hour and minute fields
    # do not depend on the day): a day of it shows them all.
    span = _DAY + timedelta(seconds=1) if isinstance(schedule_of(job), CronSchedule) else WINDOW
    for window in range(WINDOWS):
        slot: datetime | None = next_slot(job, job.anchor - timedelta(seconds=1) + window * SEASON)
        first = slot
        taken = 0
        while slot is not None and first is not None and slot - first < span and taken < WINDOW_SLOTS:
            at = dispatch_instant(job, slot)
            if at not in counted:
                counted.add(at)
                minute = at.hour * 60 + at.minute
                per_minute[(at.toordinal(), minute)] += 1
                per_second[(at.toordinal(), minute, at.second)] += 1
            taken += 1
            slot = next_slot(job, slot)
        if taken == WINDOW_SLOTS and slot is not None and first is not None and slot - first < _DAY:
            crowded = True  # more than WINDOW_SLOTS a day: no need to look further
            break
    if not per_minute:
        return Profile()
    minutes: dict[int, int] = {}
    for (_, minute), count in per_minute.items():
        minutes[minute] = max(minutes.get(minute, 0), count)
    seconds: dict[int, int] = {}
    for (_, minute, _), count in per_second.items():
        seconds[minute] = max(seconds.get(minute, 0), count)
    # Too many slots a day, or on too many minutes of the day: the job counts in every minute,
    # with its busiest minute and second.
    if crowded or len(minutes) > SPARSE_MINUTES:
        period = schedule_of(job).period  # a sample of 50 may cover less than a whole minute
        busiest_minute = max(max(minutes.values()), math.ceil(60 / period.total_seconds()) if period else 0)
        busiest_second = max(seconds.values())
        phases = {second for (_, _, second) in per_second}
        if len(phases) <= MAX_PHASES:
            return Profile(every_minute=busiest_minute, phases=dict.fromkeys(phases, busiest_second))
        return Profile(every_minute=busiest_minute, every_second=busiest_second)
    return Profile(minutes, seconds)


@dataclass(frozen=True)
class PeakLimits:
    """A tenant's peak quotas (None: no limit)."""

    per_second: int | None = None
    per_minute: int | None = None

    def breach(self, before: Profile, after: Profile) -> tuple[str, int, int] | None:
        """The quota ``after`` passes while raising its peak above ``before``'s: (name, limit,
        peak), else None. A change that does not raise a peak is never refused (a limit lowered
        below what a tenant already has only stops it from growing)."""
        checks = (
            (
                "maxSlotsPerSecondPerTenant",
                self.per_second,
                before.peak_per_second(),
                after.peak_per_second(),
            ),
            (
                "maxSlotsPerMinutePerTenant",
                self.per_minute,
                before.peak_per_minute(),
                after.peak_per_minute(),
            ),
        )
        for name, limit, old, new in checks:
            if limit is not None and new > limit and new > old:
                return name, limit, new
        return None


__all__ = ["PeakLimits", "Profile", "job_profile"]
