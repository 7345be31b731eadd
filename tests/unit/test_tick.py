"""Sizing a minute's pollers from its load."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from punctual.settings import Settings
from punctual.store.memory import MemoryStore
from punctual.tick import group_count_for, plan_minute
from punctual.timers import TimerKind, TimerLayout


def test_idle_minute_gets_the_configured_minimum() -> None:
    settings = Settings(shard_groups=1)
    assert group_count_for(0, settings) == 1
    assert group_count_for(59_000, settings) == 1
    assert group_count_for(600_000, settings) == 10
    assert group_count_for(10**9, settings) == settings.max_shard_groups
    assert group_count_for(10**9, Settings(shard_count=4, max_shard_groups=64)) == 4


def test_plan_names_the_minute_the_lead_and_every_group() -> None:
    minute = datetime(2026, 11, 30, 10, 1, 17, tzinfo=UTC)
    plan = plan_minute(minute, Settings(shard_groups=3, poller_lead_s=10, shard_count=16, near_shard_count=4))
    assert plan["minute"] == "2026-11-30T10:01:00Z"
    assert plan["start_at"] == "2026-11-30T10:00:50Z"
    assert [g["group"] for g in plan["groups"]] == [0, 1, 2]
    assert {(g["group_count"], g["shard_count"], g["near_shard_count"]) for g in plan["groups"]} == {
        (3, 16, 4)
    }


def test_burst_minute_gets_more_pollers_from_a_sample_of_its_far_buckets() -> None:
    # Given 6,000 far timers due in one minute over 64 shards, and 1,000 per poller-minute
    settings = Settings(
        shard_count=64, near_shard_count=4, load_sample_shards=16, triggers_per_poller_minute=1000
    )
    layout = TimerLayout(64, 4, 180)
    store = MemoryStore()
    minute = datetime(2026, 11, 30, 10, 5, tzinfo=UTC)
    now = minute - timedelta(minutes=10)
    store.put_timers(
        [
            layout.make(
                now=now,
                due=minute + timedelta(milliseconds=10 * i),
                job_id=f"j{i}",
                tenant="t",
                slot=str(i),
                attempt=1,
                kind=TimerKind.FIRE,
                job_version=1,
            )
            for i in range(6000)
        ]
    )
    # When the minute is planned from a 16-shard sample
    plan = plan_minute(minute, settings, store, random.Random(3))
    # Then the estimate is near the truth and the group count follows it
    assert 4500 <= plan["estimated_far_timers"] <= 7500
    assert len(plan["groups"]) == plan["groups"][0]["group_count"] >= 5
    idle = plan_minute(minute + timedelta(minutes=1), settings, store, random.Random(3))
    assert idle["estimated_far_timers"] == 0 and len(idle["groups"]) == 1
