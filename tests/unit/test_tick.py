"""Sizing a minute's pollers from its load."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from punctual.dispatch.tick import group_count_for, plan_minute, poller_for
from punctual.runtime.settings import Settings
from punctual.store.memory import MemoryStore
from punctual.timing.timers import Lane, TimerKind, TimerLayout


def _timers(
    layout: TimerLayout, now: datetime, first_due: datetime, count: int, step_ms: int, prefix: str
) -> list:
    """``count`` fire timers written at ``now``, due every ``step_ms`` from ``first_due``."""
    return [
        layout.make(
            now=now,
            due=first_due + timedelta(milliseconds=step_ms * i),
            job_id=f"{prefix}{i}",
            tenant="t",
            slot=str(i),
            attempt=1,
            kind=TimerKind.FIRE,
            job_version=1,
        )
        for i in range(count)
    ]


def test_idle_minute_gets_the_configured_minimum() -> None:
    settings = Settings(shard_groups=1)
    assert group_count_for(0, settings) == 1
    assert group_count_for(29_000, settings) == 1  # 30,000 a poller-minute by default
    assert group_count_for(600_000, settings) == 20
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
    store.put_timers(_timers(layout, now, minute, 6000, step_ms=10, prefix="j"))
    # When the minute is planned from a 16-shard sample
    plan = plan_minute(minute, settings, store, random.Random(3))
    # Then the estimate is near the truth and the group count follows it
    assert 4500 <= plan["estimated_far_timers"] <= 7500
    assert len(plan["groups"]) == plan["groups"][0]["group_count"] >= 5
    idle = plan_minute(minute + timedelta(minutes=1), settings, store, random.Random(3))
    assert idle["estimated_far_timers"] == 0 and len(idle["groups"]) == 1


def test_an_idle_minute_is_planned_on_the_lean_poller() -> None:
    settings = Settings(shard_count=16, near_shard_count=4, load_sample_shards=16)
    minute = datetime(2026, 11, 30, 10, 5, tzinfo=UTC)

    plan = plan_minute(minute, settings, MemoryStore(), random.Random(1), now=minute - timedelta(minutes=2))

    assert plan["poller"] == "lean"
    assert (plan["estimated_far_timers"], plan["recent_near_timers"]) == (0, 0)


def test_the_near_lane_of_the_last_whole_minute_counts_as_load() -> None:
    # Given 500 near timers in the minute before the tick, and none in the planned minute's far buckets
    settings = Settings(
        shard_count=16, near_shard_count=4, load_sample_shards=16, lean_max_triggers_per_minute=60
    )
    layout = TimerLayout(16, 4, 180)
    store = MemoryStore()
    now = datetime(2026, 11, 30, 10, 3, 2, tzinfo=UTC)
    last = datetime(2026, 11, 30, 10, 2, tzinfo=UTC)
    store.put_timers(_timers(layout, last, last, 500, step_ms=50, prefix="n"))

    # When the minute two ahead is planned
    plan = plan_minute(datetime(2026, 11, 30, 10, 5, tzinfo=UTC), settings, store, random.Random(1), now=now)

    # Then the standard poller runs it
    assert plan["recent_near_timers"] == 500
    assert plan["poller"] == "standard"


def test_a_workload_registered_this_minute_is_load_already() -> None:
    # Given a minute whose predecessor was idle, and near timers of a workload registered a few
    # seconds ago in the current minute (rate chains of a few seconds: 200 of them due in it)
    settings = Settings(
        shard_count=16, near_shard_count=4, load_sample_shards=16, lean_max_triggers_per_minute=60
    )
    layout = TimerLayout(16, 4, 180)
    store = MemoryStore()
    now = datetime(2026, 11, 30, 10, 2, 50, tzinfo=UTC)  # the poller's lead before 10:03
    current = datetime(2026, 11, 30, 10, 2, tzinfo=UTC)
    store.put_timers(_timers(layout, current + timedelta(seconds=40), current, 200, step_ms=300, prefix="n"))

    # When the next minute is planned
    plan = plan_minute(datetime(2026, 11, 30, 10, 3, tzinfo=UTC), settings, store, random.Random(1), now=now)

    # Then it is planned as loaded, not idle: the standard poller, two pollers per group
    assert plan["recent_near_timers"] == 200
    assert plan["poller"] == "standard" and len(plan["pollers"]) == 2


def test_an_idle_reading_after_a_loaded_one_keeps_the_standard_poller() -> None:
    # Given a minute whose last readings are idle (the pollers were down: the rate chains stalled)
    settings = Settings(shard_count=16, near_shard_count=4, load_sample_shards=16)
    store = MemoryStore()
    minute = datetime(2026, 11, 30, 10, 5, tzinfo=UTC)
    now = minute - timedelta(seconds=10)
    alone = plan_minute(minute, settings, store, random.Random(1), now=now)
    assert alone["poller"] == "lean" and len(alone["pollers"]) == 1
    # When the minute before was planned on a load (its plan read 500 near timers)
    before = {"poller": "standard", "estimated_far_timers": 0, "recent_near_timers": 500}
    plan = plan_minute(minute, settings, store, random.Random(1), now=now, previous=before)
    # Then this one is not idle yet: standard, two pollers per group; two idle readings make it lean
    assert plan["poller"] == "standard" and len(plan["pollers"]) == 2
    idle_before = {"poller": "standard", "estimated_far_timers": 0, "recent_near_timers": 3}
    assert (
        plan_minute(minute, settings, store, random.Random(1), now=now, previous=idle_before)["poller"]
        == "lean"
    )


def test_the_lean_poller_only_for_a_known_small_single_group_load() -> None:
    settings = Settings(lean_max_triggers_per_minute=60)
    assert poller_for(0, 1, settings) == "lean"
    assert poller_for(60, 1, settings) == "lean"
    assert poller_for(61, 1, settings) == "standard"
    assert poller_for(0, 2, settings) == "standard"  # two groups: load enough for more pollers
    assert poller_for(None, 1, settings) == "standard"  # load unknown (no store, or it failed)
    assert poller_for(0, 1, Settings(lean_max_triggers_per_minute=0)) == "standard"  # turned off
    # Without a store the plan cannot tell the load: the standard poller.
    assert plan_minute(datetime(2026, 11, 30, 10, 5, tzinfo=UTC), settings)["poller"] == "standard"


def test_a_minute_after_a_poller_that_did_not_finish_gets_the_standard_poller() -> None:
    # An idle deployment whose pollers keep failing (a lean poller out of memory, say) must
    # not keep planning lean ones: what they left is drained by a standard poller.
    settings = Settings(shard_count=16, near_shard_count=4, load_sample_shards=16)
    now = datetime(2026, 11, 30, 10, 3, 5, tzinfo=UTC)
    store = MemoryStore()
    healthy = now.replace(second=0) - timedelta(minutes=1)  # drained up to the last minute
    store.advance_watermarks(Lane.FAR, list(range(16)), healthy)
    store.advance_watermarks(Lane.NEAR, list(range(4)), healthy)
    plan = plan_minute(now + timedelta(minutes=1), settings, store, random.Random(1), now=now)
    assert (plan["poller"], plan["drained_behind"]) == ("lean", False)

    stuck = MemoryStore()
    stuck.advance_watermarks(Lane.FAR, list(range(16)), healthy)
    stuck.advance_watermarks(Lane.NEAR, [0, 1, 3], healthy)
    stuck.advance_watermarks(Lane.NEAR, [2], healthy - timedelta(minutes=2))  # its poller died
    plan = plan_minute(now + timedelta(minutes=1), settings, stuck, random.Random(1), now=now)
    assert (plan["poller"], plan["drained_behind"]) == ("standard", True)
