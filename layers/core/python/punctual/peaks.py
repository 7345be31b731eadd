"""Peak quotas: how many of a tenant's slots can be due in one second and in one minute.

The triggers-per-minute quota (:mod:`punctual.quotas`) limits an average: it spreads a cron's
slots over the day, so 100,000 ``cron(0 * * * ? *)`` jobs use 1,667 of a 60,000 quota and fire
100,000 slots at one instant. The peak quota limits the burst itself: a tenant's jobs may not
make more than ``maxSlotsPerSecondPerTenant`` slots due in any one second, nor more than
``maxSlotsPerMinutePerTenant`` in any one minute.

**A job's profile.** Its slots projected onto the UTC day: for each minute of the day, how many
slots it can have in that minute and in that minute's busiest second (the most over the days
sampled). The slots are those the poller releases (dispatch instants: jitter included), sampled
from the job's anchor (stable for the life of a version, so the profile a job added is the one
its replacement or deletion takes away) over its next :data:`SAMPLE_SLOTS` slots or
:data:`SAMPLE_DAYS` days. A job whose slots fall on more than :data:`SPARSE_MINUTES` minutes of
the day (anything more frequent than every quarter hour: ``rate(1 minute)``, ``*/5``) counts
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
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from punctual.models import Job
from punctual.slots import dispatch_instant, next_slot, schedule_of

MINUTES_PER_DAY = 1440
SAMPLE_SLOTS = 200  # slots sampled per job (a daily job: 200 days; an hourly one: 8)
SAMPLE_DAYS = 400  # ... or this long, whichever ends first (a yearly job, a DST change)
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
    """The profile of one job (see the module notes)."""
    schedule = schedule_of(job)
    if schedule.kind == "delay":
        period_s = max(schedule.period.total_seconds() if schedule.period else 60.0, 1.0)
        return Profile(every_minute=math.ceil(60 / period_s), every_second=1)
    if schedule.kind == "after":
        return Profile(every_minute=1, every_second=1)
    per_minute: Counter[tuple[int, int]] = Counter()  # (day, minute of day) -> slots
    per_second: Counter[tuple[int, int, int]] = Counter()  # (day, minute, second) -> slots
    start = job.anchor - timedelta(seconds=1)
    horizon = start + timedelta(days=SAMPLE_DAYS)
    slot: datetime | None = next_slot(job, start)
    first: datetime | None = None
    sampled = 0
    for sampled in range(1, SAMPLE_SLOTS + 1):
        if slot is None or slot > horizon:
            sampled -= 1
            break
        first = first or slot
        at = dispatch_instant(job, slot)
        day = at.toordinal()
        minute = at.hour * 60 + at.minute
        per_minute[(day, minute)] += 1
        per_second[(day, minute, at.second)] += 1
        slot = next_slot(job, slot)
    if not per_minute:
        return Profile()
    minutes: dict[int, int] = {}
    for (_, minute), count in per_minute.items():
        minutes[minute] = max(minutes.get(minute, 0), count)
    seconds: dict[int, int] = {}
    for (_, minute, _), count in per_second.items():
        seconds[minute] = max(seconds.get(minute, 0), count)
    # The sample ran out of slots inside a day (more than SAMPLE_SLOTS a day), or they fall on too
    # many minutes of the day: the job counts in every minute, with its busiest minute and second.
    crowded = sampled == SAMPLE_SLOTS and first is not None and slot is not None and slot - first < _DAY
    if crowded or len(minutes) > SPARSE_MINUTES:
        busiest_second = max(seconds.values())
        phases = {second for (_, _, second) in per_second}
        if len(phases) <= MAX_PHASES:
            return Profile(every_minute=max(minutes.values()), phases=dict.fromkeys(phases, busiest_second))
        return Profile(every_minute=max(minutes.values()), every_second=busiest_second)
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
