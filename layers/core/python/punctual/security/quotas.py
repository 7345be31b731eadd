"""Per-tenant quotas: how many scheduled triggers a minute a job adds to its tenant's total.

A tenant's *trigger rate* is the sum over its registered jobs (whatever their state) of
each schedule's triggers per minute; registration and replacement are refused when it
would pass ``PUNCTUAL_MAX_TRIGGERS_PER_MINUTE_PER_TENANT`` (cdk.json
``maxTriggersPerMinutePerTenant``). Rates are counted in micro-triggers per minute
(integers, so the store can add and subtract them exactly):

* ``rate(N unit)`` and ``delay(N unit)``: 60 / N seconds a minute (a delay runs at most that
  often);
* cron (AWS or Unix): its slots on a day it fires, spread over the day's 1,440 minutes
  (``cron(0 9 * * ? *)`` is 1/1,440, ``* * * * *`` is 1, ``0/5 * * * ? *`` is 0.2);
* ``at(...)``: its one instant counted as a daily job;
* ``after(a, b)``: the largest rate of its parents (it fires at most once per parent slot).

Every job counts at least one micro-trigger.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from punctual.timing.schedules import AtSchedule, CronSchedule, Schedule

MICRO = 1_000_000
MINUTES_PER_DAY = 1440


def micro_rate(schedule: Schedule, parent_rate: Callable[[str], int] | None = None) -> int:
    """Micro-triggers per minute of ``schedule`` (see the module notes).

    Parameters
    ----------
    schedule
        The parsed schedule.
    parent_rate
        For ``after(...)``: the stored rate of a parent job (0 when unknown).
    """
    if schedule.period is not None:
        rate = math.ceil(60 * MICRO / max(schedule.period.total_seconds(), 1))
    elif isinstance(schedule, CronSchedule):
        rate = math.ceil(schedule.slots_per_firing_day * MICRO / MINUTES_PER_DAY)
    elif isinstance(schedule, AtSchedule):
        rate = math.ceil(len(schedule.instants) * MICRO / MINUTES_PER_DAY)
    elif schedule.parents:
        rate = max((parent_rate(p) for p in schedule.parents), default=0) if parent_rate else 0
    else:
        rate = 0
    return max(rate, 1)


def per_minute(micro: int) -> str:
    """A micro rate as triggers per minute, for messages (``60``, ``0.2``, ``0.000695``)."""
    return f"{micro / MICRO:.6f}".rstrip("0").rstrip(".")
