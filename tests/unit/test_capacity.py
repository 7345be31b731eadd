"""The capacity model's and the request meter's arithmetic (bench/capacity.py, bench/awsmeter.py).

No timings: these check the formulas that turn published limits and counted requests into
headroom, break points, burst delays and billed units.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # capacity imports benchlib by name, as the scripts do
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


capacity = _load("capacity")
awsmeter = _load("awsmeter")

D = capacity.Deployment()
P = capacity.PerTrigger(
    wru=3.0,
    rru=1.0,
    timer_bytes=200.0,
    poller_cpu_us_near=600.0,
    poller_cpu_us_far=400.0,
    worker_cpu_us=1000.0,
    worker_io_ms=16.0,
    target_ms=0.0,
    near_share=0.5,
)


# --------------------------------------------------------------------------- CPU and workers


def test_a_lambda_gets_one_vcpu_per_1769_mb() -> None:
    assert capacity.vcpu(1769) == pytest.approx(1.0)
    assert capacity.vcpu(512) == pytest.approx(512 / 1769)


def test_a_pollers_rate_is_its_cpu_share_over_the_cpu_a_trigger_takes() -> None:
    # 1,769 MB (one vCPU) at 500 µs a trigger (the mixed lane: half near, half far) releases 2,000/s.
    one_vcpu = replace(D, poller_memory_mb=1769)
    assert P.poller_cpu_us == pytest.approx(500.0)
    assert capacity.poller_rate(one_vcpu, P) == pytest.approx(2000.0)
    assert capacity.poller_rate(one_vcpu, P, "far") == pytest.approx(2500.0)
    assert capacity.poller_rate(one_vcpu, P, "near") == pytest.approx(1e6 / 600)


def test_a_worker_message_takes_its_io_its_cpu_at_its_share_and_the_target() -> None:
    d = replace(D, worker_memory_mb=1769)
    assert capacity.worker_seconds(d, replace(P, target_ms=100.0)) == pytest.approx(0.016 + 0.001 + 0.1)


def test_the_tick_plans_one_group_per_triggers_per_poller_minute_within_the_bounds() -> None:
    assert capacity.groups_for(0, D) == 1
    assert capacity.groups_for(10_000, D) == 10  # 600,000 a minute / 60,000
    assert capacity.groups_for(10_001, D) == 11
    assert capacity.groups_for(1e9, D) == D.max_shard_groups


def test_worker_concurrency_is_queues_times_event_source_concurrency_within_the_account() -> None:
    assert capacity.worker_concurrency_cap(D) == 200
    assert capacity.worker_concurrency_cap(replace(D, queue_count=10, worker_max_concurrency=1000)) == 1000


# --------------------------------------------------------------------------- DynamoDB


def test_a_query_costs_its_items_in_started_4_kb_units_and_never_less_than_one() -> None:
    assert capacity.query_read_units(0, 200) == 1
    assert capacity.query_read_units(20, 200) == 1  # 4,000 bytes
    assert capacity.query_read_units(21, 200) == 2  # 4,200 bytes


def test_sustained_checks_carry_the_demand_each_limit_sees() -> None:
    checks = {c.name.split(" (")[0]: c for c in capacity.sustained_checks(10_000, D, P)}
    assert checks["DynamoDB table writes"].demand == pytest.approx(30_000)
    assert checks["DynamoDB table writes"].headroom == pytest.approx(40_000 / 30_000)
    # next timers of a minute spread over 512 far shards
    assert checks["far bucket partition writes"].demand == pytest.approx(10_000 / 512)
    # half the triggers through 32 near shards
    assert checks["near bucket partition writes"].demand == pytest.approx(5000 / 32)
    # one send per ten messages, on one queue
    assert checks["SQS FIFO SendMessageBatch per queue"].demand == pytest.approx(1000)
    # every worker of a queue holds a batch of ten in flight
    workers = 10_000 * capacity.worker_seconds(D, P)
    assert checks["SQS FIFO in-flight messages per queue"].demand == pytest.approx(min(workers, 200) * 10)


def test_near_reads_count_the_look_back_re_reads_and_overlapping_pollers() -> None:
    checks = {c.name.split(" (")[0]: c for c in capacity.sustained_checks(10_000, D, P)}
    per_shard = 5000 / 32  # near-lane timers per second per near shard
    items = per_shard * (7 + 1)  # what one poll's look-back window holds
    units = math.ceil(items * 200 / 4096)
    assert checks["near bucket partition reads"].demand == pytest.approx(units * 75 / 60)


def test_headroom_is_limit_over_demand_and_a_limit_breaks_at_rate_times_headroom() -> None:
    check = capacity.Check("x", demand=250.0, limit=1000.0, unit="u", source="s")
    assert check.headroom == pytest.approx(4.0)
    assert check.breaks_at(10_000) == pytest.approx(40_000)
    fixed = capacity.Check("y", demand=10.0, limit=40.0, unit="u", source="s", scales_with_rate=False)
    assert fixed.breaks_at(10_000) is None
    assert capacity.Check("z", demand=0.0, limit=1.0, unit="u", source="s").headroom == math.inf


def test_the_first_limit_to_break_is_the_one_with_least_headroom_among_those_that_scale() -> None:
    checks = [
        capacity.Check("wide", demand=1.0, limit=10.0, unit="u", source="s"),
        capacity.Check("tight", demand=1.0, limit=1.5, unit="u", source="s"),
        capacity.Check("fixed", demand=1.0, limit=1.1, unit="u", source="s", scales_with_rate=False),
    ]
    found = capacity.first_break(checks, 1000)
    assert found is not None
    assert found[0].name == "tight"
    assert found[1] == pytest.approx(1500)


# --------------------------------------------------------------------------- the burst


def test_the_drain_estimate_is_messages_times_time_each_over_concurrency() -> None:
    # 600,000 messages at 20 ms each with 200 workers: 60 s.
    assert capacity.drain_seconds(600_000, 0.02, 200) == pytest.approx(60.0)


def test_a_burst_limited_by_workers_drains_in_the_estimate() -> None:
    # Given pollers far faster than the workers and the workers warm from the start
    fast = replace(D, prewarmed_workers=200, poller_memory_mb=1769 * 100)
    burst = capacity.simulate_burst(600_000, fast, P, groups=40, dt=0.01)
    per_message = capacity.worker_seconds(fast, P)
    # Then the last start comes when 200 workers have worked through every message
    assert burst.started_by_s == pytest.approx(capacity.drain_seconds(600_000, per_message, 200), rel=0.01)
    assert burst.p50_s == pytest.approx(burst.started_by_s / 2, rel=0.02)
    assert burst.p99_s == pytest.approx(burst.started_by_s * 0.99, rel=0.02)


def test_a_burst_limited_by_pollers_starts_each_slot_as_it_is_released() -> None:
    # Given workers far faster than the release
    d = replace(D, prewarmed_workers=200, worker_max_concurrency=200)
    quick = replace(P, worker_io_ms=0.001, worker_cpu_us=0.001)
    burst = capacity.simulate_burst(60_000, d, quick, groups=1, dt=0.01)
    # Then the starts follow the release: 60,000 at one poller's far-lane rate
    assert burst.release_s == pytest.approx(60_000 / capacity.poller_rate(d, quick, "far"))
    assert burst.started_by_s == pytest.approx(burst.release_s, rel=0.01)


def test_cold_workers_ramp_at_lambdas_scaling_rate() -> None:
    # Given 2,000 workers allowed but none warm: Lambda adds 100 environments a second
    d = replace(D, queue_count=2, worker_max_concurrency=1000, account_concurrency=3000, prewarmed_workers=0)
    cold = capacity.simulate_burst(600_000, d, P, groups=400, dt=0.01)
    warm = capacity.simulate_burst(600_000, replace(d, prewarmed_workers=2000), P, groups=400, dt=0.01)
    # Then the cold start takes longer by roughly the time spent ramping
    assert cold.started_by_s > warm.started_by_s + 5
    assert warm.started_by_s == pytest.approx(600_000 * capacity.worker_seconds(d, P) / 2000, rel=0.05)


def test_burst_write_pressure_counts_every_write_of_a_start_and_the_timers_per_key() -> None:
    burst = capacity.simulate_burst(600_000, replace(D, prewarmed_workers=200), P, dt=0.01)
    assert burst.peak_wru == pytest.approx(burst.peak_start_rate * P.wru)
    assert burst.far_key_wru == pytest.approx(600_000 / 512 / burst.release_s)


def test_the_settings_found_for_a_burst_meet_both_targets() -> None:
    found = capacity.burst_settings(600_000, D, P)
    groups = math.ceil(600_000 / (capacity.poller_rate(D, P, "far") * 2.5))
    burst = capacity.simulate_burst(600_000, found, P, groups=groups, dt=0.02)
    assert burst.p99_s <= 5.0
    assert burst.started_by_s <= 10.0
    assert found.queue_count * 1000 >= found.prewarmed_workers  # an event source runs at most 1,000


# --------------------------------------------------------------------------- billed units


def test_item_size_counts_names_and_values_by_dynamodbs_rules() -> None:
    item = {
        "pk": {"S": "job#t#j"},  # 2 + 7
        "n": {"N": "12345"},  # 1 + (3 + 1): five digits in three bytes, plus one
        "ok": {"BOOL": True},  # 2 + 1
        "m": {"M": {"a": {"S": "xy"}}},  # 1 + (3 + (1 + 2 + 1))
        "l": {"L": [{"S": "q"}, {"N": "7"}]},  # 1 + (3 + (1 + 1) + (2 + 1))
        "ss": {"SS": ["ab", "c"]},  # 2 + 3
        "é": {"S": "é"},  # 2 + 2 (UTF-8 bytes)
    }
    assert awsmeter.item_size(item) == 9 + 5 + 3 + 8 + 9 + 5 + 4
    assert awsmeter.item_size(None) == 0


def test_numbers_take_a_byte_per_two_significant_digits_plus_one() -> None:
    assert awsmeter.number_size("0") == 2
    assert awsmeter.number_size("7") == 2
    assert awsmeter.number_size("1764496800000") == 5  # trailing zeros drop: 8 significant digits
    assert awsmeter.number_size("1764496800001") == 8  # 13 significant digits


def test_write_units_take_the_larger_item_per_started_kb_and_double_in_transactions() -> None:
    assert awsmeter.write_units(0) == 1
    assert awsmeter.write_units(1024) == 1
    assert awsmeter.write_units(1025) == 2
    assert awsmeter.write_units(300, 1500) == 2  # the item before was larger
    assert awsmeter.write_units(300, transactional=True) == 2


def test_read_units_are_per_started_4_kb_and_halved_when_eventually_consistent() -> None:
    assert awsmeter.read_units(0, consistent=True) == 1
    assert awsmeter.read_units(4096, consistent=True) == 1
    assert awsmeter.read_units(4097, consistent=True) == 2
    assert awsmeter.read_units(850, consistent=False) == 0.5
    assert awsmeter.query_units([2000, 2000, 200], consistent=True) == 2  # summed, then rounded
    assert awsmeter.query_units([], consistent=False) == 0.5


def test_sqs_bills_one_request_per_started_64_kb() -> None:
    assert awsmeter.sqs_requests(0) == 1
    assert awsmeter.sqs_requests(10 * 213) == 1
    assert awsmeter.sqs_requests(65_537) == 2


def test_the_load_minus_idle_difference_is_per_key() -> None:
    load = {("poller", "dynamodb.Query", "near"): awsmeter.Tally(calls=10, billed=10, rru=12.0, items=30)}
    idle = {("poller", "dynamodb.Query", "near"): awsmeter.Tally(calls=10, billed=10, rru=10.0)}
    diff = awsmeter.subtract(load, idle)[("poller", "dynamodb.Query", "near")]
    assert (diff.calls, diff.rru, diff.items) == (0, 2.0, 30)
