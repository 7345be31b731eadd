"""Planning a minute: how many pollers (shard groups) it gets, and what each is told.

The tick starts one Step Functions execution per coming minute. An idle deployment gets
``shard_groups`` pollers (one by default: a poller runs for its whole minute, so every
always-on group costs Lambda time around the clock); a minute whose far buckets hold a
burst gets as many as it needs, estimated from a sample of its far buckets. All far
timers of a minute are written at least ``far_threshold_s`` before it, so two minutes
ahead the sample is complete.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from punctual.settings import Settings
from punctual.store.base import JobStore
from punctual.timers import Lane, minute_of


def _stamp(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def estimate_far_load(store: JobStore, minute: datetime, settings: Settings, rng: random.Random) -> int:
    """Timers due in ``minute`` across all far shards, extrapolated from a sample of shards."""
    count = settings.shard_count
    sample_size = min(settings.load_sample_shards, count)
    if sample_size == 0:
        return 0
    sample = rng.sample(range(count), sample_size)
    seen = sum(store.count_timers(Lane.FAR, minute, shard) for shard in sample)
    return math.ceil(seen * count / sample_size)


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
) -> dict[str, Any]:
    """The Step Functions input for ``minute``: when the pollers start, and one item per group."""
    settings = settings or Settings.from_env()
    minute = minute_of(minute)
    load = estimate_far_load(store, minute, settings, rng or random.Random()) if store else 0
    groups = group_count_for(load, settings)
    return {
        "minute": _stamp(minute),
        "start_at": _stamp(minute - timedelta(seconds=settings.poller_lead_s)),
        "estimated_far_timers": load,
        "groups": [
            {
                "minute": _stamp(minute),
                "group": index,
                "group_count": groups,
                "shard_count": settings.shard_count,
                "near_shard_count": settings.near_shard_count,
            }
            for index in range(groups)
        ],
    }
