"""The predictive scaling planner (punctual.dispatch.scaling): decisions from planned loads, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from punctual.dispatch.scaling import (
    CapacityProfile,
    MemoryActuator,
    need_for,
    plan_capacity,
    standing_drain,
)
from punctual.runtime.settings import Settings

M = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)  # the burst minute
CLOUD = CapacityProfile(burst_workers_max=300)  # the defaults: 400 Lambda, 644 msgs/s a task, 75 s lead


def at(seconds: float) -> datetime:
    return M + timedelta(seconds=seconds)


def test_standing_drain_integrates_the_event_source_ramp() -> None:
    # 5 concurrent invokes adding 5 a second: in 10 s, 5*10 + 5*10**2/2 = 300 invoke-seconds.
    assert standing_drain(CLOUD, 10) == int(300 / 0.0193)
    # Past the ramp's end (79 s to reach 400), the ceiling holds.
    ramp_end = (400 - 5) / 5
    area = 5 * ramp_end + 5 * ramp_end**2 / 2 + 400 * 21
    assert standing_drain(CLOUD, ramp_end + 21) == int(area / 0.0193)
    assert standing_drain(CLOUD, 0) == 0
    # Standing burst workers add their rate.
    with_tasks = CapacityProfile(burst_workers_standing=2, burst_worker_messages_per_s=100)
    assert standing_drain(with_tasks, 10) == standing_drain(CLOUD, 10) + 2000


def test_a_load_the_standing_capacity_drains_needs_nothing() -> None:
    need = need_for(10_000, CLOUD, M)
    assert (need.burst_workers, need.max_concurrency, need.shortfall) == (0, 400, 0)


def test_a_600000_slot_burst_asks_for_enough_tasks_to_start_it_within_the_target() -> None:
    need = need_for(600_000, CLOUD, M)
    standing = standing_drain(CLOUD, 10)
    # Enough tasks: their 10 s of work plus the standing drain covers the burst ...
    assert standing + need.burst_workers * 644 * 10 >= 600_000
    # ... and one fewer would not.
    assert standing + (need.burst_workers - 1) * 644 * 10 < 600_000
    assert need.met
    # 600,000 x 19.3 ms = 11,580 s of Lambda time in a minute: 193 concurrent, under 400.
    assert need.max_concurrency == 400


def test_a_burst_beyond_the_bounds_is_served_with_the_most_and_reports_its_shortfall() -> None:
    small = CapacityProfile(burst_workers_max=10)
    need = need_for(600_000, small, M)
    assert need.burst_workers == 10
    assert need.shortfall == 600_000 - standing_drain(small, 10) - 10 * 6440
    assert not need.met


def test_a_minute_the_concurrency_cannot_drain_raises_it_within_the_ceiling() -> None:
    # 2,000,000 slots x 19.3 ms over 60 s = 644 concurrent.
    assert need_for(2_000_000, CLOUD, M).max_concurrency == 644
    assert need_for(10_000_000, CLOUD, M).max_concurrency == 1000


def test_capacity_goes_up_at_the_last_decision_that_leaves_the_start_lead() -> None:
    # Given a 600,000-slot burst at M, decisions every 60 s and a 75 s start lead
    planned = {M: 600_000}
    # When the tick decides two minutes before (the next tick, 60 s later, would leave 60 s < 75 s)
    early = plan_capacity(at(-118), planned, 0, CLOUD)
    # Then it scales now
    assert early.scaled and early.burst_workers == need_for(600_000, CLOUD, M).burst_workers
    assert [n.minute for n in early.driven_by] == [M]
    # And three minutes before, it waits for the next tick (which still leaves the lead)
    assert not plan_capacity(at(-178), planned, 0, CLOUD).scaled


def test_a_shorter_lead_scales_one_tick_later() -> None:
    quick = CapacityProfile(burst_workers_max=300, start_lead_s=45)
    assert not plan_capacity(at(-118), {M: 600_000}, 0, quick).scaled
    assert plan_capacity(at(-58), {M: 600_000}, 0, quick).scaled


def test_capacity_is_held_through_the_hold_and_the_backlog_then_scaled_back() -> None:
    planned = {M: 600_000}
    # During the minute's hold it stays up
    assert plan_capacity(at(20), planned, 0, CLOUD).scaled
    # After the hold, with the queues drained, back to the standing figures
    after = plan_capacity(at(62), planned, 0, CLOUD)
    assert (after.burst_workers, after.max_concurrency, after.scaled) == (0, 400, False)
    # After the hold, with 200,000 messages still waiting, it holds what drains them
    draining = plan_capacity(at(62), planned, 200_000, CLOUD)
    assert draining.scaled and draining.burst_workers == need_for(200_000, CLOUD, at(62)).burst_workers
    # A backlog the standing capacity drains within the target holds nothing
    assert not plan_capacity(at(62), planned, 1_000, CLOUD).scaled


def test_a_hold_shorter_than_the_burst_window_still_covers_the_window() -> None:
    """Issue 31 (fairness under bursts): local mode holds a burst 5 s, its window is 10 s. A burst
    due at M + 9 s is still in its minute's burst; scaling back at M + 8 s (nothing released yet,
    no backlog) stopped the burst workers at its instant, and the backlog started them again."""
    short_hold = CapacityProfile(burst_workers_max=300, hold_s=5, lateness_target_s=10)
    planned = {M: 600_000}
    # Past the hold, inside the burst's window, with nothing released yet: still held
    assert plan_capacity(at(8), planned, 0, short_hold).scaled
    # Past the window, the queues drained: scaled back
    assert not plan_capacity(at(11), planned, 0, short_hold).scaled


def test_never_below_the_standing_figures() -> None:
    standing = CapacityProfile(burst_workers_standing=3, burst_workers_max=300)
    idle = plan_capacity(at(-600), {}, 0, standing)
    assert (idle.burst_workers, idle.max_concurrency) == (3, 400)
    assert not idle.scaled


def test_the_largest_active_minute_wins_and_the_record_names_it() -> None:
    planned = {M: 100_000, M + timedelta(minutes=1): 600_000, M + timedelta(minutes=5): 900_000}
    decision = plan_capacity(at(-10), planned, 0, CLOUD)
    assert decision.burst_workers == need_for(600_000, CLOUD, M).burst_workers
    record = decision.record()
    assert record["event"] == "scaling_decision"
    driving = [m["minute"] for m in record["minutes"] if m["driving"]]  # type: ignore[union-attr]
    assert driving == ["2026-12-01T12:00:00Z", "2026-12-01T12:01:00Z"]  # not the minute 5 ahead


def test_no_burst_workers_configured_still_reports_the_shortfall() -> None:
    none = CapacityProfile()  # burst_workers_max 0: the Lambda alone
    decision = plan_capacity(at(-30), {M: 600_000}, 0, none)
    assert decision.burst_workers == 0 and decision.shortfall == 600_000 - standing_drain(none, 10)


@pytest.mark.parametrize("load", [0, 1, 15_000, 16_000, 100_000, 599_999, 600_000, 3_000_000])
def test_the_decided_capacity_starts_the_load_within_the_target_or_says_how_much_not(load: int) -> None:
    need = need_for(load, CLOUD, M)
    started = standing_drain(CLOUD, 10) + need.burst_workers * 644 * 10
    assert started + need.shortfall >= load
    assert need.shortfall == 0 or need.burst_workers == CLOUD.burst_workers_max


def test_profile_from_settings() -> None:
    settings = Settings(
        burst_workers=2, burst_workers_max=50, worker_max_concurrency=300, burst_start_lead_s=90
    )
    profile = CapacityProfile.from_settings(settings)
    assert (profile.burst_workers_standing, profile.burst_workers_max) == (2, 50)
    assert (profile.standing_concurrency, profile.concurrency_ceiling, profile.start_lead_s) == (
        300,
        1000,
        90,
    )
    assert profile.message_s == pytest.approx(0.0193)


def test_memory_actuator_records_changes_only() -> None:
    actuator = MemoryActuator(burst_workers=0, max_concurrency=400)
    up = plan_capacity(at(-100), {M: 600_000}, 0, CLOUD)
    assert actuator.apply(up) == [f"burst workers 0 -> {up.burst_workers}"]
    assert actuator.apply(up) == []
    down = plan_capacity(at(90), {M: 600_000}, 0, CLOUD)
    assert actuator.apply(down) == [f"burst workers {up.burst_workers} -> 0"]
    assert [kind for _, kind, _ in actuator.changes] == ["burst_workers", "burst_workers"]


def test_a_spread_minute_is_sized_by_its_burst_and_drained_by_its_total() -> None:
    # 2,000,000 in a minute but only 10,000 due in its first seconds: no burst worker, and the
    # event sources raised to drain the whole minute within it
    decision = plan_capacity(at(-100), {M: 10_000}, 0, CLOUD, totals={M: 2_000_000})
    assert decision.burst_workers == 0 and decision.max_concurrency == 644


def test_the_minute_before_warms_the_event_sources() -> None:
    # After a minute of 600,000 spread over it (193 concurrent), 200,000 due at once need fewer tasks
    cold = plan_capacity(at(-100), {M: 200_000}, 0, CLOUD)
    warm = plan_capacity(at(-100), {M: 200_000}, 0, CLOUD, totals={M - timedelta(minutes=1): 600_000})
    assert 0 < warm.burst_workers < cold.burst_workers
    assert standing_drain(CLOUD, 10, warm=193) > standing_drain(CLOUD, 10)
