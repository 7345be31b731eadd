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
# The model's parts, as capacity itself imports them (one module object each: one Deployment class).
capacity_limits = importlib.import_module("capacity_limits")
capacity_model = importlib.import_module("capacity_model")
capacity_burst = importlib.import_module("capacity_burst")
capacity_deploy = importlib.import_module("capacity_deploy")

D = capacity_model.Deployment()
P = capacity_model.PerTrigger(
    timer_wru=1.0,
    exec_wru=2.0,
    rru=1.0,
    timer_bytes=200.0,
    poller_cpu_us_near=600.0,
    poller_cpu_us_far=400.0,
    far_query_cpu_us=40.0,
    worker_cpu_us=1000.0,
    put_item_cpu_us=250.0,
    worker_io_ms=16.0,
    target_ms=0.0,
    near_share=0.5,
)

PRICES = {
    "lambda": {"arm64_gb_second": {"usd": 0.0000133334}},
    "stepfunctions": {"standard_per_thousand_transitions": {"usd": 0.025}},
    "dynamodb": {"on_demand_read_per_million": {"usd": 0.125}},
}


# --------------------------------------------------------------------------- CPU and workers


def test_a_lambda_gets_one_vcpu_per_1769_mb_and_a_python_process_uses_at_most_one() -> None:
    assert capacity_model.vcpu(1769) == pytest.approx(1.0)
    assert capacity_model.vcpu(512) == pytest.approx(512 / 1769)
    assert capacity_model.python_vcpu(3538) == pytest.approx(1.0)


def test_a_pollers_rate_is_its_cpu_share_over_the_cpu_a_trigger_takes() -> None:
    # 1,769 MB (one vCPU) at 500 µs a trigger (the mixed lane: half near, half far) releases 2,000/s.
    one_vcpu = replace(D, poller_memory_mb=1769)
    assert P.poller_cpu_us == pytest.approx(500.0)
    assert capacity_model.poller_rate(one_vcpu, P) == pytest.approx(2000.0)
    assert capacity_model.poller_rate(one_vcpu, P, "far") == pytest.approx(2500.0)
    assert capacity_model.poller_rate(one_vcpu, P, "near") == pytest.approx(1e6 / 600)
    # at a burst's instant the far Query was done a minute ahead: (600 + 360) / 2 = 480 µs
    assert capacity_model.poller_rate(one_vcpu, P, "release") == pytest.approx(1e6 / 480)
    # twice the memory buys no more: one Python process
    assert capacity_model.poller_rate(replace(D, poller_memory_mb=3538), P) == pytest.approx(2000.0)


def test_a_pollers_io_bound_is_its_threads_over_a_chunks_serial_calls() -> None:
    # a chunk of 100: BatchGetItem 8 ms + 10 sends x 10 ms + 4 writes x 10 ms = 148 ms
    assert capacity_model.poller_io_rate(D) == pytest.approx(8 * 100 / 0.148)
    slow = replace(D, send_concurrency=1, poller_memory_mb=1769)
    assert capacity_model.release_rate(slow, P) == pytest.approx(100 / 0.148)


def test_a_worker_message_takes_its_io_its_cpu_at_its_share_and_the_target() -> None:
    d = replace(D, worker_memory_mb=1769)
    assert capacity_model.worker_seconds(d, replace(P, target_ms=100.0)) == pytest.approx(0.016 + 0.001 + 0.1)


def test_an_ecs_task_starts_what_its_cpu_or_its_threads_allow() -> None:
    # CPU: 0.8 of a vCPU over 1,250 µs (worker + LEASE timer put) = 640/s; I/O: 32 / 16 ms = 2,000/s
    assert capacity_model.ecs_task_rate(D, P) == pytest.approx(0.8 / 0.00125)
    assert capacity_model.ecs_task_rate(replace(D, ecs_threads=4), P) == pytest.approx(4 / 0.016)


def test_the_tick_plans_one_group_per_triggers_per_poller_minute_within_the_bounds() -> None:
    assert capacity_model.groups_for(0, D) == 1
    assert capacity_model.groups_for(10_000, D) == 10  # 600,000 a minute / 60,000
    assert capacity_model.groups_for(10_001, D) == 11
    assert capacity_model.groups_for(1e9, D) == D.max_shard_groups


def test_worker_concurrency_is_queues_times_event_source_concurrency_within_the_account() -> None:
    assert capacity_model.worker_concurrency_cap(D) == 200
    # within what the account leaves the workers: its 1,000 less the API's reserved concurrency
    many = replace(D, queue_count=10, worker_max_concurrency=1000)
    assert capacity_model.worker_concurrency_cap(many) == 1000 - D.api_reserved_concurrency == 900
    assert capacity_model.worker_concurrency_cap(replace(many, api_reserved_concurrency=0)) == 1000


# --------------------------------------------------------------------------- DynamoDB


def test_a_query_costs_its_items_in_started_4_kb_units_and_never_less_than_one() -> None:
    assert capacity_model.query_read_units(0, 200) == 1
    assert capacity_model.query_read_units(20, 200) == 1  # 4,000 bytes
    assert capacity_model.query_read_units(21, 200) == 2  # 4,200 bytes


def test_sustained_checks_carry_the_demand_each_limit_sees() -> None:
    checks = {c.name.split(" (")[0]: c for c in capacity_model.sustained_checks(10_000, D, P)}
    assert checks["DynamoDB table writes"].demand == pytest.approx(30_000)
    assert checks["DynamoDB table writes"].headroom == pytest.approx(40_000 / 30_000)
    # next timers of a minute spread over 512 far shards
    assert checks["far bucket partition writes"].demand == pytest.approx(10_000 / 512)
    # half the triggers through 32 near shards
    assert checks["near bucket partition writes"].demand == pytest.approx(5000 / 32)
    # one send per ten messages, on one queue
    assert checks["SQS FIFO SendMessageBatch per queue"].demand == pytest.approx(1000)
    # every worker of a queue holds a batch of ten in flight
    workers = 10_000 * capacity_model.worker_seconds(D, P)
    assert checks["SQS FIFO in-flight messages per queue"].demand == pytest.approx(min(workers, 200) * 10)


def test_packed_timers_lower_the_per_key_writes_by_their_write_units() -> None:
    packed = replace(P, timer_wru=0.2)
    checks = {c.name.split(" (")[0]: c for c in capacity_model.sustained_checks(10_000, D, packed)}
    assert checks["DynamoDB table writes"].demand == pytest.approx(22_000)
    assert checks["near bucket partition writes"].demand == pytest.approx(5000 * 0.2 / 32)


def test_standing_ecs_tasks_add_a_lease_write_for_the_share_they_take() -> None:
    d = replace(D, ecs_burst_tasks=10)  # 10 x 640/s = 6,400/s of 10,000/s
    assert capacity_model.ecs_share(10_000, d, P) == pytest.approx(0.64)
    checks = {c.name.split(" (")[0]: c for c in capacity_model.sustained_checks(10_000, d, P)}
    assert checks["DynamoDB table writes"].demand == pytest.approx(10_000 * (3 + 0.64))


def test_near_reads_count_the_look_back_re_reads_and_overlapping_pollers() -> None:
    checks = {c.name.split(" (")[0]: c for c in capacity_model.sustained_checks(10_000, D, P)}
    per_shard = 5000 / 32  # near-lane timers per second per near shard
    items = per_shard * (7 + 1)  # what one poll's look-back window holds
    units = math.ceil(items * 200 / 4096)
    assert checks["near bucket partition reads"].demand == pytest.approx(units * 75 / 60)


def test_headroom_is_limit_over_demand_and_a_limit_breaks_at_rate_times_headroom() -> None:
    check = capacity_model.Check("x", demand=250.0, limit=1000.0, unit="u", source="s")
    assert check.headroom == pytest.approx(4.0)
    assert check.breaks_at(10_000) == pytest.approx(40_000)
    fixed = capacity_model.Check("y", demand=10.0, limit=40.0, unit="u", source="s", scales_with_rate=False)
    assert fixed.breaks_at(10_000) is None
    assert capacity_model.Check("z", demand=0.0, limit=1.0, unit="u", source="s").headroom == math.inf


def test_the_quota_ledger_meets_eventbridge_with_the_execution_events_the_defaults_publish() -> None:
    # eventsStatusChanges is ``problems`` by default: no RUNNING or SUCCEEDED on the bus, so a
    # trigger's events are its failures (one in ten failing with a RETRY_WAIT and a FAILED: 0.2),
    # a Lambda batch's in PutEvents requests of ten; a rule that routes them all is invoked once an
    # event. With ``all`` (two more a trigger) the rule invocations pass the default quota.
    quotas = importlib.import_module("quotas")
    checks = {c.name.split(" (")[0]: c for c in quotas.headroom_checks(10_000, 0.0, D, P)}
    put_events = checks["EventBridge PutEvents"]
    assert put_events.demand == pytest.approx(200) and put_events.limit == 10_000
    invocations = checks["EventBridge rule invocations"]
    assert invocations.demand == pytest.approx(2_000) and invocations.limit == 18_750
    assert invocations.headroom > 2
    every_change = quotas.Assumed(events_per_trigger=2.2)
    checks_all = {c.name.split(" (")[0]: c for c in quotas.headroom_checks(10_000, 0.0, D, P, every_change)}
    assert checks_all["EventBridge rule invocations"].headroom < 1  # over the default quota
    # and the Lambda batch's lease on arrival is a ChangeMessageVisibilityBatch per ten messages
    assert checks["SQS FIFO ChangeMessageVisibility per queue"].demand == pytest.approx(10_000 / 10)


def test_the_first_limit_to_break_is_the_one_with_least_headroom_among_those_that_scale() -> None:
    checks = [
        capacity_model.Check("wide", demand=1.0, limit=10.0, unit="u", source="s"),
        capacity_model.Check("tight", demand=1.0, limit=1.5, unit="u", source="s"),
        capacity_model.Check("fixed", demand=1.0, limit=1.1, unit="u", source="s", scales_with_rate=False),
    ]
    found = capacity_model.first_break(checks, 1000)
    assert found is not None
    assert found[0].name == "tight"
    assert found[1] == pytest.approx(1500)


def test_the_scale_settings_give_twice_the_demand_at_every_limit() -> None:
    tuned = capacity_model.scale_settings(10_000, D, P)
    checks = capacity_model.sustained_checks(10_000, tuned, P)
    assert all(c.headroom >= 2 - 1e-9 for c in checks), [(c.name, c.headroom) for c in checks]
    assert tuned.worker_max_concurrency == math.ceil(2 * 10_000 * capacity_model.worker_seconds(D, P))
    assert tuned.table_wru == 60_000  # 2 x 30,000, a quota request
    # one vCPU per poller is enough here, so the tick's planning is untouched
    assert tuned.poller_memory_mb == 1769
    assert tuned.triggers_per_poller_minute == D.triggers_per_poller_minute


def test_the_scale_settings_lower_triggers_per_poller_minute_when_memory_is_not_enough() -> None:
    heavy = replace(P, poller_cpu_us_near=1200.0, poller_cpu_us_far=1000.0)  # 1,100 µs: 909/s
    tuned = capacity_model.scale_settings(10_000, D, heavy)
    assert tuned.triggers_per_poller_minute == int(1e6 / 1100 * 60 / 2)
    checks = {c.name.split(" (")[0]: c for c in capacity_model.sustained_checks(10_000, tuned, heavy)}
    assert checks["poller release rate"].headroom >= 2


# --------------------------------------------------------------------------- the burst


def test_the_drain_estimate_is_messages_times_time_each_over_concurrency() -> None:
    # 600,000 messages at 20 ms each with 200 workers: 60 s (batches of ten: 10 x 20 ms per batch).
    assert capacity_burst.drain_seconds(600_000, 0.02, 200) == pytest.approx(60.0)
    assert capacity_burst.drain_seconds(600_000, 0.02, 200) == pytest.approx(600_000 * 10 * 0.02 / (200 * 10))


def test_a_standard_event_source_starts_at_five_and_adds_300_invokes_a_minute() -> None:
    d = replace(D, queue_count=2, worker_max_concurrency=100)
    assert capacity_burst.esm_concurrency(d, 0.0) == pytest.approx(2 * 5)
    assert capacity_burst.esm_concurrency(d, 6.0) == pytest.approx(2 * (5 + 30))
    assert capacity_burst.esm_concurrency(d, 600.0) == pytest.approx(2 * 100)  # its MaximumConcurrency


def test_a_provisioned_event_source_starts_at_its_pollers_and_adds_1000_a_minute() -> None:
    d = replace(D, esm_mode="provisioned", esm_min_pollers=20, worker_max_concurrency=1000)
    assert capacity_burst.esm_concurrency(d, 0.0) == pytest.approx(200)
    assert capacity_burst.esm_concurrency(d, 6.0) == pytest.approx(300)


def test_each_function_adds_100_environments_a_second_after_a_cold_start() -> None:
    assert capacity_burst.lambda_environments(D, 0.5) == pytest.approx(5)  # what the idle event source keeps
    assert capacity_burst.lambda_environments(D, 3.0) == pytest.approx(5 + 100 * 2)
    four = replace(D, queue_count=4, worker_functions=4, prewarmed_workers=400)
    assert capacity_burst.lambda_environments(four, 3.0) == pytest.approx(400 + 400 * 2)


def test_a_burst_limited_by_warm_workers_drains_in_the_estimate() -> None:
    # Given 200 workers driven from the start and pollers far faster than they are
    d = replace(D, esm_mode="provisioned", esm_min_pollers=20, prewarmed_workers=200)
    quick_release = replace(P, poller_cpu_us_near=1.0, poller_cpu_us_far=1.0, far_query_cpu_us=0.0)
    burst = capacity_burst.simulate_burst(60_000, replace(d, send_concurrency=256), quick_release, groups=40)
    per_message = capacity_model.worker_seconds(d, P)
    # Then the last start comes when 200 workers have worked through every message
    assert burst.start_concurrency == 200
    assert burst.started_by_s == pytest.approx(
        capacity_burst.drain_seconds(60_000, per_message, 200), rel=0.02
    )
    assert burst.p50_s == pytest.approx(burst.started_by_s / 2, rel=0.03)


def test_pre_warmed_workers_do_not_help_while_the_event_source_ramps() -> None:
    cold = capacity_burst.simulate_burst(100_000, replace(D, worker_max_concurrency=400), P, groups=40)
    warm = capacity_burst.simulate_burst(
        100_000, replace(D, worker_max_concurrency=400, prewarmed_workers=400), P, groups=40
    )
    assert warm.start_concurrency == cold.start_concurrency == 5
    assert warm.started_by_s == pytest.approx(cold.started_by_s, rel=0.01)


def test_a_burst_limited_by_pollers_starts_each_slot_as_it_is_released() -> None:
    # Given standing ECS workers far faster than the release
    d = replace(D, ecs_burst_tasks=1000)
    burst = capacity_burst.simulate_burst(60_000, d, P, groups=1, dt=0.01)
    # Then the starts follow the release: 60,000 at one poller's release rate
    assert burst.release_s == pytest.approx(60_000 / capacity_model.release_rate(d, P))
    assert burst.started_by_s == pytest.approx(burst.release_s, rel=0.01)
    assert burst.p99_s == pytest.approx(burst.release_s * 0.99, rel=0.01)


def test_burst_write_pressure_counts_every_write_of_a_start_and_the_timers_per_key() -> None:
    d = replace(D, ecs_burst_tasks=1000)
    burst = capacity_burst.simulate_burst(60_000, d, P, groups=4)
    rate = 4 * capacity_model.release_rate(d, P)
    # workers keep pace: each start writes claim + finish + a LEASE timer, each release a timer
    assert burst.peak_wru == pytest.approx(rate * (2 + 1) + rate * 1, rel=0.01)
    # (the LEASE timer is a backstop past the far threshold: a far key's write)
    assert burst.far_key_wru == pytest.approx(60_000 * (0.5 + 1) / 512 / burst.release_s, rel=0.01)
    assert burst.near_key_wru == pytest.approx(60_000 * 0.5 / 32 / burst.release_s, rel=0.01)


def test_the_burst_ready_settings_meet_both_targets_with_the_margin() -> None:
    found = capacity_burst.burst_ready_settings(120_000, D, P, "ecs")
    assert found is not None
    ready, groups = found
    burst = capacity_burst.simulate_burst(120_000, ready, P, groups, dt=0.02)
    assert burst.p99_s <= 4.5 and burst.started_by_s <= 9.0
    assert capacity_model.groups_for(120_000 / 60, ready) == groups  # the tick plans them
    assert all(c.headroom >= 1 for c in capacity_burst.burst_checks(burst, ready, P))
    fewer = capacity_burst.simulate_burst(
        120_000, replace(ready, ecs_burst_tasks=ready.ecs_burst_tasks - 1), P, groups
    )
    assert not (fewer.p99_s <= 4.5 and fewer.started_by_s <= 9.0)  # the fewest that do


def test_the_burst_ready_settings_ask_for_the_table_reads_their_release_makes() -> None:
    # 600,000 slots released in ~4.5 s: each a job read and a re-read of its record (P.rru less
    # the history page's 0.05, read later), ~130,000 read units a second against the default 40,000
    found = capacity_burst.burst_ready_settings(600_000, D, P, "ecs")
    assert found is not None
    ready, groups = found
    burst = capacity_burst.simulate_burst(600_000, ready, P, groups, dt=0.02)
    reads = burst.release_rate * (P.rru - 0.05)
    assert reads > D.table_rru
    assert ready.table_rru >= reads and ready.warm_rru >= reads
    assert all(c.headroom >= 1 for c in capacity_burst.burst_checks(burst, ready, P))
    under_default_reads = replace(ready, table_rru=D.table_rru, warm_rru=D.warm_rru)
    held = [c for c in capacity_burst.burst_checks(burst, under_default_reads, P) if c.headroom < 1]
    # held by the read quota, and by what a new table reads at once (12,000 RRU/s; QA27 review:
    # writes had this second check, reads not)
    assert [c.name for c in held] == [
        "DynamoDB table reads (quota)",
        "DynamoDB warm read throughput (what the table takes at once)",
    ]
    # the quota ledger finds nothing that holds the burst back any more
    quotas = importlib.import_module("quotas")
    assert quotas.burst_under_quotas(burst, ready, P)["started_by_s_under_quotas"] == burst.started_by_s
    # and predictive scaling keeps (or raises) them: its burst releases as fast
    pred = capacity_burst.predictive_settings(ready, groups, D)
    predicted = capacity_burst.predictive_burst(600_000, pred, P, {}, PRICES)
    pred_burst = capacity_burst.simulate_burst(
        600_000, replace(pred, ecs_burst_tasks=predicted["burst_tasks"]), P, predicted["pollers"], dt=0.02
    )
    assert predicted["table_rru"] >= pred_burst.release_rate * (P.rru - 0.05)


def test_a_predictive_burst_is_scaled_ahead_started_in_time_then_scaled_back_and_priced() -> None:
    # Given the burst-ready settings, with nothing standing (predictive scaling)
    found = capacity_burst.burst_ready_settings(120_000, D, P, "ecs")
    assert found is not None
    pred = capacity_burst.predictive_settings(*found, D)
    assert pred.ecs_burst_tasks == 0 and pred.lease_lane == "far"
    cost = {"idle": {"defaults (256 far / 8 near, lean poller 128 MB)": {"usd_per_month": {"total": 14.0}}}}
    burst = capacity_burst.predictive_burst(120_000, pred, P, cost, PRICES)

    def at(prefix: str) -> float:
        return next(when for what, when in burst["timeline"] if what.startswith(prefix))

    # The tick asks for the tasks at the last tick that leaves the start lead (75 s)...
    asked = at("tick decides")
    assert -120 < asked <= -75 < asked + 60
    # ... they are polling before the pollers start, the burst meets both targets ...
    assert at("every burst task") < at("the burst's instant") - 10 and burst["met"]
    # ... and they are stopped by the first tick after the hold, the queues drained.
    scaled = [when for when, tasks in burst["decisions"] if tasks]
    assert min(scaled) == asked and max(scaled) < 60 <= at("tick scales back")
    # One burst costs its tasks for the seconds they ran, the extra pollers and their transitions.
    task_hour = pred.ecs_task_vcpu * 0.03238 + pred.ecs_task_gb * 0.00356
    tasks = burst["usd_per_burst"]["burst ECS tasks"]
    assert tasks == pytest.approx(burst["burst_tasks"] * task_hour * burst["task_seconds"] / 3600)
    assert burst["usd_per_burst"]["total"] == pytest.approx(
        sum(v for k, v in burst["usd_per_burst"].items() if k != "total")
    )
    # Idle: the defaults' month plus the tick's scaling reads (the Parallel is the burst machine's)
    idle = burst["idle_usd_per_month"]
    reads = pred.near_shard_count * 0.5 * 0.125e-6 * capacity_limits.MINUTES_A_MONTH
    assert idle["tick: the next minute's near buckets read for scaling"] == pytest.approx(reads)
    assert idle["total"] == pytest.approx(14.0 + reads)


# --------------------------------------------------------------------------- money and deployability


def test_a_profile_costs_its_pollers_standing_workers_and_near_polling() -> None:
    prices = {
        "lambda": {"arm64_gb_second": {"usd": 1e-5}},
        "stepfunctions": {"standard_per_thousand_transitions": {"usd": 0.025}},
        "dynamodb": {
            "on_demand_read_per_million": {"usd": 0.125},
            "on_demand_write_per_million": {"usd": 0.625},
        },
    }
    d = replace(D, prewarmed_workers=100, near_shard_count=1, poller_memory_mb=1024)
    cost = capacity_deploy.monthly_cost(d, P, 1000.0, 2, {}, prices)
    minutes = capacity_limits.MINUTES_A_MONTH
    assert cost["triggers (on-demand, all in, as counted)"] is None  # no cost results
    assert cost["pollers"] == pytest.approx(2 * 80 * 1.0 * 1e-5 * minutes)
    assert cost["Step Functions"] == pytest.approx(8 * 0.025 / 1000 * minutes)
    assert cost["near-shard polling (one read unit each, even empty)"] == pytest.approx(
        81 * 0.125e-6 * minutes
    )
    provisioned = capacity_limits.EXTRA_PRICES["lambda_provisioned_gb_s"][0]
    assert cost["provisioned worker environments"] == pytest.approx(
        100 * 0.5 * provisioned * capacity_limits.SECONDS_A_MONTH
    )
    ecs = capacity_deploy.monthly_cost(replace(D, ecs_burst_tasks=3), P, 1e9, 1, {}, prices)
    task_hour = (
        1.0 * capacity_limits.EXTRA_PRICES["fargate_vcpu_hour"][0]
        + 2.0 * capacity_limits.EXTRA_PRICES["fargate_gb_hour"][0]
    )
    assert ecs["standing ECS burst tasks"] == pytest.approx(
        3 * task_hour * capacity_limits.SECONDS_A_MONTH / 3600
    )


def test_deployability_names_context_keys_quotas_and_what_the_app_lacks() -> None:
    assert capacity_deploy.deployability(D) == {
        "context": {},
        "quotas": [],
        "notes": [],
        "not_deployable": [],
    }
    tuned = replace(D, worker_max_concurrency=400, table_wru=60_000, warm_wru=60_000)
    found = capacity_deploy.deployability(tuned)
    assert found["context"] == {"workerMaxConcurrency": 400, "tableWarmWriteUnitsPerSecond": 60_000}
    assert len(found["quotas"]) == 1 and not found["not_deployable"]
    lacking = capacity_deploy.deployability(replace(D, prewarmed_workers=10, worker_functions=2), groups=60)
    assert len(lacking["not_deployable"]) == 2  # 60 pollers are deployable now (a Parallel of Maps)
    assert (
        len(capacity_deploy.deployability(D, groups=300)["not_deployable"]) == 1
    )  # beyond maxShardGroups 256


def test_the_burst_ready_changes_are_context_keys_now() -> None:
    ready = replace(
        D,
        max_shard_groups=62,
        triggers_per_poller_minute=9678,
        ecs_burst_tasks=214,
        shard_count=576,
        near_shard_count=576,
    )
    found = capacity_deploy.deployability(ready, groups=62)

    assert found["not_deployable"] == []
    assert found["context"] == {
        "shardCount": 576,
        "nearShardCount": 576,
        "maxShardGroups": 62,
        "triggersPerPollerMinute": 9678,
        "ecsBurstTasks": 214,
    }  # threads, vCPU and memory are the cdk.json defaults (32, 1024, 2048)
    assert "first deploy" in found["notes"][0]
    bigger = capacity_deploy.deployability(replace(ready, ecs_threads=64, ecs_task_vcpu=2.0, ecs_task_gb=4.0))
    assert {k: bigger["context"][k] for k in ("ecsBurstConcurrency", "ecsBurstCpu", "ecsBurstMemoryMb")} == {
        "ecsBurstConcurrency": 64,
        "ecsBurstCpu": 2048,
        "ecsBurstMemoryMb": 4096,
    }
    # No burst service: its thread count is not worth a key.
    assert "ecsBurstConcurrency" not in capacity_deploy.deployability(replace(D, ecs_threads=64))["context"]


def test_the_burst_ready_context_is_accepted_by_the_cdk_app() -> None:
    sys.path.insert(0, str(BENCH.parent))  # the CDK app's package, `infra`, is not installed
    from punctual_cdk.config import DEFAULTS, PunctualConfig

    defaults = capacity_model.deployed_defaults()  # cdk.json, as the bench reads it
    found = capacity_burst.burst_ready_settings(
        600_000, capacity_model.scale_settings(10_000, defaults, P), P, "ecs"
    )
    assert found is not None
    ready, groups = found
    context = capacity_deploy.deployability(ready, groups, defaults)["context"]
    config = PunctualConfig.from_context(lambda key: context.get(key))  # raises on any bad key or value
    assert set(context) <= set(DEFAULTS)
    assert config.max_shard_groups >= groups and config.group_slices == capacity_model.map_slices(groups)
    assert config.near_shard_count <= config.shard_count


def test_more_than_40_pollers_run_in_a_parallel_of_inline_maps() -> None:
    assert (
        capacity_model.map_slices(40) == 1
        and capacity_model.map_slices(41) == 2
        and capacity_model.map_slices(256) == 7
    )
    assert capacity_model.map_limit_for(40).value == 40
    assert capacity_model.map_limit_for(62).value == capacity_limits.DEPLOYABLE_MAX_GROUPS == 256
    prices = {"stepfunctions": {"standard_per_thousand_transitions": {"usd": 0.025}}}
    prices |= {"lambda": {"arm64_gb_second": {"usd": 0.0}}}
    prices |= {
        "dynamodb": {"on_demand_read_per_million": {"usd": 0.0}, "on_demand_write_per_million": {"usd": 0}}
    }
    one_map = capacity_deploy.monthly_cost(replace(D, max_shard_groups=40), P, 1.0, 1, {}, prices)[
        "Step Functions"
    ]
    allowed = capacity_deploy.monthly_cost(replace(D, max_shard_groups=62), P, 1.0, 1, {}, prices)[
        "Step Functions"
    ]
    # A minute of one group runs on the single Map even where 62 are allowed (the burst machine,
    # the Parallel, runs only minutes of more than 40) ...
    assert allowed == pytest.approx(one_map)
    # ... and a minute of 46 pays the Parallel and two Maps instead of one Map: two more transitions.
    many = capacity_deploy.monthly_cost(replace(D, max_shard_groups=62), P, 1.0, 46, {}, prices)[
        "Step Functions"
    ]
    forty = capacity_deploy.monthly_cost(replace(D, max_shard_groups=62), P, 1.0, 40, {}, prices)[
        "Step Functions"
    ]
    assert many - forty == pytest.approx((6 * 2 + 2) * 0.025 / 1000 * capacity_limits.MINUTES_A_MONTH)


def test_measured_figures_split_timer_writes_from_execution_writes(tmp_path: Path, monkeypatch) -> None:
    cost = {
        "summary": {
            "dynamodb_units_per_trigger": {"wru": 2.2, "rru": 1.1},
            "worker_lambda_at_scale": {"io_ms_per_trigger": 12.0},
            "rows": [
                {"phase": "poller", "wru_per_trigger": 0.2},
                {"phase": "worker", "wru_per_trigger": 2.0},
            ],
        }
    }
    (tmp_path / "cost_per_million.json").write_text(__import__("json").dumps(cost))
    monkeypatch.setattr(capacity.benchlib, "RESULTS_DIR", tmp_path)
    per = capacity_model.load_measured()
    assert (per.timer_wru, per.exec_wru, per.rru, per.worker_io_ms) == pytest.approx((0.2, 2.0, 1.1, 12.0))


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


def test_progress_marks_cost_per_shard_group_minute_not_per_trigger() -> None:
    # Given a run of one shard group for 5 minutes that wrote 30 progress marks over 1,000 triggers
    cost_money = importlib.import_module("cost_money")
    assert awsmeter._kind_of_key("progress#2026-12-04T03:00", "0/1") == "progress"
    prices = cost_money.Prices.load()
    marks = awsmeter.Tally(calls=30, billed=30, wru=30.0, items=30)
    added = {("poller", "dynamodb.UpdateItem", "progress"): marks}
    # When the rows are scaled to 10,000 triggers a second
    (row,) = cost_money.per_trigger_rows(added, 1_000, prices, group_minutes=5)
    # Then the run's figure is per trigger, and at scale the marks are those of the groups
    # 10,000/s needs, each marking as often as this run's group did, over a minute's triggers
    assert row["wru_per_trigger"] == pytest.approx(0.03)
    groups = cost_money.groups_at(cost_money.SUSTAINED_PER_S)
    expected = 30 / 5 * groups / (cost_money.SUSTAINED_PER_S * 60)
    assert row["wru_per_trigger_at_scale"] == pytest.approx(expected)
    assert row["usd_per_million_at_scale"] == pytest.approx(expected * prices.wru * 1e6)
