"""The capacity model's burst: a top-of-minute burst of slots as a fluid model, its checks, the
settings that meet its fire-delay targets, and the burst with capacity started ahead (predictive).

Pollers release at their CPU-bound rate; workers start messages as fast as the capacity that
exists at each instant allows, that capacity growing at the published ramps (an SQS event source
adds 300 concurrent invokes a minute, a function 1,000 environments per 10 s, standing ECS tasks
or provisioned environments are there from the start).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import benchlib
from capacity_limits import DEPLOYABLE_MAX_QUEUES, EXTRA_PRICES, LIMITS, MINUTES_A_MONTH, assumed
from capacity_model import (
    Check,
    Deployment,
    PerTrigger,
    dispatch_concurrency,
    ecs_task_rate,
    groups_for,
    map_limit_for,
    map_slices,
    release_rate,
    round_up,
    worker_concurrency_cap,
    worker_seconds,
)

# --------------------------------------------------------------------------- the burst


@dataclass
class Burst:
    slots: int
    groups: int
    release_rate: float  # slots/s all pollers together
    release_s: float
    message_s: float  # worker seconds per message
    max_concurrency: int  # Lambda environments the event sources may drive
    start_concurrency: int  # Lambda environments driving messages at the burst's instant
    ecs_rate: float  # messages/s the standing ECS tasks start
    started_by_s: float  # when the last slot started
    p50_s: float
    p90_s: float
    p99_s: float
    peak_start_rate: float
    peak_wru: float
    far_key_wru: float  # next-timer writes per far bucket key during the release
    near_key_wru: float  # next-timer (and LEASE timer) writes per near bucket key
    curve: list[tuple[float, int]] = field(default_factory=list)


def drain_seconds(messages: float, message_s: float, concurrency: float) -> float:
    """The issue's estimate: messages x time per batch / (concurrency x batch size); a batch of
    ``b`` messages takes ``b`` x time per message, so it is messages x time each / concurrency."""
    return messages * message_s / concurrency


def esm_concurrency(d: Deployment, t: float) -> float:
    """Concurrent invokes all event sources drive ``t`` seconds into a burst that found them idle."""
    if d.esm_mode == "provisioned":
        floor = d.esm_min_pollers * LIMITS["lambda_esm_invokes_per_poller"].value
        ramp = LIMITS["lambda_esm_provisioned_ramp_per_min"].value / 60
    else:
        floor = LIMITS["lambda_esm_start"].value
        ramp = LIMITS["lambda_esm_ramp_per_min"].value / 60
    per_queue = min(d.worker_max_concurrency, max(floor, LIMITS["lambda_esm_start"].value) + ramp * t)
    return d.queue_count * per_queue


def lambda_environments(d: Deployment, t: float) -> float:
    """Worker environments able to take a message ``t`` seconds in: the warm ones (provisioned,
    or those the idle event sources keep) plus each function's scaling, a cold start late."""
    warm = max(d.prewarmed_workers, d.queue_count * LIMITS["lambda_esm_start"].value)
    ramp = d.worker_functions * LIMITS["lambda_scaling_rate"].value / 10
    return warm + ramp * max(0.0, t - assumed("cold_start_s"))


def lambda_concurrency(d: Deployment, t: float, pollers: int) -> float:
    cap = min(d.queue_count * d.worker_max_concurrency, dispatch_concurrency(d) - pollers)
    return max(0.0, min(cap, esm_concurrency(d, t), lambda_environments(d, t)))


def simulate_burst(
    slots: int, d: Deployment, p: PerTrigger, groups: int | None = None, dt: float = 0.01
) -> Burst:
    """Fluid model of a burst: pollers release at their rate; workers start messages as fast as
    the capacity of each instant allows. Slot k's fire delay is when the k-th start happens."""
    groups = groups or groups_for(slots / 60, d)
    rate = groups * release_rate(d, p)
    message_s = worker_seconds(d, p)
    ecs = d.ecs_burst_tasks * ecs_task_rate(d, p) if d.ecs_burst_tasks else 0.0
    quantiles: dict[float, float | None] = {0.5: None, 0.9: None, 0.99: None}
    started = 0.0
    t = 0.0
    peak = 0.0
    curve: list[tuple[float, int]] = []
    while started < slots - 1e-6 and t < 3600:
        t += dt
        released = min(float(slots), rate * t)
        capacity = lambda_concurrency(d, t, groups) / message_s + ecs
        step = min(released - started, capacity * dt)
        started += step
        peak = max(peak, step / dt)
        for q in quantiles:
            if quantiles[q] is None and started >= q * slots - 1e-6:
                quantiles[q] = t
        if not curve or t - curve[-1][0] >= 1.0:
            curve.append((round(t, 2), int(started)))
    curve.append((round(t, 2), round(started)))
    release_s = slots / rate
    ecs_share = min(1.0, ecs / peak) if peak else 0.0
    lease = assumed("ecs_lease_wru") * ecs_share
    return Burst(
        slots=slots,
        groups=groups,
        release_rate=rate,
        release_s=release_s,
        message_s=message_s,
        max_concurrency=worker_concurrency_cap(d),
        start_concurrency=int(lambda_concurrency(d, 0.0, groups)),
        ecs_rate=ecs,
        started_by_s=t,
        p50_s=quantiles[0.5] or t,
        p90_s=quantiles[0.9] or t,
        p99_s=quantiles[0.99] or t,
        peak_start_rate=peak,
        # a start writes its claim; its release wrote the next timer in the same seconds, and with
        # a short target the finish follows within milliseconds
        peak_wru=peak * (p.exec_wru + lease) + min(peak, rate) * p.timer_wru,
        far_key_wru=slots
        * ((1 - p.near_share) * p.timer_wru + (lease if d.lease_lane == "far" else 0.0))
        / d.shard_count
        / release_s,
        near_key_wru=slots
        * (p.near_share * p.timer_wru + (lease if d.lease_lane == "near" else 0.0))
        / d.near_shard_count
        / release_s,
        curve=curve,
    )


HISTORY_RRU = 0.05  # of p.rru: the history page's read (1/20 of a page), made later, not in a release


def release_rru(p: PerTrigger) -> float:
    """Read units a released slot costs: the poller's job read and its re-read of the records of
    the slots it sent (every read unit of ``p.rru`` but the history page's)."""
    return max(p.rru - HISTORY_RRU, 0.0)


def burst_rru(b: Burst, p: PerTrigger) -> float:
    """The table's read units a second while the burst is released."""
    return b.release_rate * release_rru(p)


def burst_checks(b: Burst, d: Deployment, p: PerTrigger) -> list[Check]:
    """The limits a burst meets while it is released and started."""
    lim = LIMITS
    warm = max(d.warm_wru, lim["dynamodb_new_table_wru"].value)
    map_limit = map_limit_for(b.groups)
    return [
        Check(
            "DynamoDB table reads (quota)",
            burst_rru(b, p),
            max(d.table_rru, d.warm_rru),
            "RRU/s",
            lim["dynamodb_table_rru"].source,
        ),
        Check(
            "DynamoDB warm read throughput (what the table takes at once)",
            burst_rru(b, p),
            max(d.warm_rru, lim["dynamodb_new_table_rru"].value),
            "RRU/s",
            lim["dynamodb_new_table_rru"].source,
        ),
        Check(
            "DynamoDB table writes (quota)",
            b.peak_wru,
            d.table_wru,
            "WRU/s",
            lim["dynamodb_table_wru"].source,
        ),
        Check(
            "DynamoDB warm write throughput (what the table takes at once)",
            b.peak_wru,
            warm,
            "WRU/s",
            lim["dynamodb_new_table_wru"].source,
        ),
        Check(
            "far bucket partition writes",
            b.far_key_wru,
            lim["dynamodb_partition_wcu"].value,
            "WRU/s per key",
            lim["dynamodb_partition_wcu"].source,
        ),
        Check(
            "near bucket partition writes (next timers, LEASE timers)",
            b.near_key_wru,
            lim["dynamodb_partition_wcu"].value,
            "WRU/s per key",
            lim["dynamodb_partition_wcu"].source,
        ),
        Check(
            "Step Functions Map (pollers)", b.groups, map_limit.value, "concurrent pollers", map_limit.source
        ),
        Check(
            "SQS FIFO SendMessageBatch per queue",
            b.release_rate / d.batch_size / d.queue_count,
            lim["sqs_fifo_tps"].value,
            "TPS",
            lim["sqs_fifo_tps"].source,
        ),
    ]


def _smallest(low: int, high: int, ok: Any) -> int | None:
    """The smallest integer in [low, high] for which the monotone predicate ``ok`` holds."""
    if not ok(high):
        return None
    while low < high:
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid + 1
    return low


def _meets(b: Burst, p99_s: float, all_s: float) -> bool:
    margin = assumed("burst_margin")
    return b.p99_s <= p99_s * margin and b.started_by_s <= all_s * margin


def _per_poller(load: int, groups: int) -> int:
    """The largest triggers_per_poller_minute for which the tick plans ``groups`` for ``load``."""
    per = math.ceil(load / groups)
    while per > 1 and math.ceil(load / per) < groups:
        per -= 1
    return per


def burst_ready_settings(
    slots: int,
    base: Deployment,
    p: PerTrigger,
    workers: str = "ecs",
    p99_s: float = 5.0,
    all_s: float = 10.0,
) -> tuple[Deployment, int] | None:
    """The fewest pollers, then the fewest standing workers, for which the burst meets both
    targets (with the margin). ``workers``: "ecs" (standing ECS tasks drain the short queues)
    or "lambda" (one worker function per queue, provisioned-mode event sources and provisioned
    concurrency). Then near and far shards are sized for 2x the burst's per-key writes, the
    table quotas and warm throughput for its write peak and its release's reads, and
    triggers_per_poller_minute so that the tick plans those pollers for a minute of that load.
    Returns the settings and the pollers per burst minute."""
    d = replace(base, poller_memory_mb=max(base.poller_memory_mb, int(LIMITS["lambda_vcpu_mb"].value)))
    unbounded = replace(d, ecs_burst_tasks=100_000, ecs_threads=256)
    groups = _smallest(
        1, 10_000, lambda g: _meets(simulate_burst(slots, unbounded, p, g, 0.02), p99_s, all_s)
    )
    if groups is None:
        return None

    def with_workers(n: int) -> Deployment:
        if workers == "ecs":
            return replace(d, ecs_burst_tasks=n)
        queues = DEPLOYABLE_MAX_QUEUES
        per_queue = math.ceil(n / queues)
        return replace(
            d,
            queue_count=queues,
            worker_functions=queues,
            worker_max_concurrency=min(1000, max(d.worker_max_concurrency, per_queue)),
            esm_mode="provisioned",
            esm_min_pollers=min(200, math.ceil(per_queue / LIMITS["lambda_esm_invokes_per_poller"].value)),
            prewarmed_workers=n,
            account_concurrency=max(
                d.account_concurrency, int(round_up(n + 2 * groups + d.api_reserved_concurrency, 100))
            ),
        )

    high = 20_000 if workers == "ecs" else DEPLOYABLE_MAX_QUEUES * 1000
    n = _smallest(
        1, high, lambda k: _meets(simulate_burst(slots, with_workers(k), p, groups, 0.02), p99_s, all_s)
    )
    if n is None:
        return None
    ready = with_workers(n)
    b = simulate_burst(slots, ready, p, groups, 0.02)
    near = 2 * b.near_key_wru * ready.near_shard_count / LIMITS["dynamodb_partition_wcu"].value
    far = 2 * b.far_key_wru * ready.shard_count / LIMITS["dynamodb_partition_wcu"].value
    wru = round_up(b.peak_wru, 10_000)
    rru = round_up(burst_rru(b, p), 10_000)
    near_shards = int(max(ready.near_shard_count, round_up(near, 32)))
    ready = replace(
        ready,
        near_shard_count=near_shards,
        # infra/config.py: nearShardCount may not exceed shardCount
        shard_count=int(max(ready.shard_count, round_up(far, 64), near_shards)),
        table_wru=max(ready.table_wru, wru),
        warm_wru=max(ready.warm_wru, wru),
        table_rru=max(ready.table_rru, rru),
        warm_rru=max(ready.warm_rru, rru),
        max_shard_groups=max(ready.max_shard_groups, groups),
        # the tick plans a minute's pollers from its load: this many a poller gives ``groups``
        triggers_per_poller_minute=min(ready.triggers_per_poller_minute, _per_poller(slots, groups)),
    )
    return ready, groups


# --------------------------------------------------------------------------- predictive scaling


def predictive_settings(ready: Deployment, groups: int, defaults: Deployment) -> Deployment:
    """The burst-ready settings without standing capacity: the burst tasks are started ahead of
    a planned burst by the tick (punctual.dispatch.scaling) and stopped after it; pollers stay at the
    default memory and count for sustained load (a burst minute gets its own, sized from its
    burst: ``burstTriggersPerPoller``); the near shards stay at the defaults (the burst tasks'
    LEASE timers go to far buckets: their lease is longer than the far threshold)."""
    return replace(
        ready,
        ecs_burst_tasks=0,
        poller_memory_mb=defaults.poller_memory_mb,
        triggers_per_poller_minute=defaults.triggers_per_poller_minute,
        near_shard_count=defaults.near_shard_count,
        shard_count=defaults.shard_count,
        lease_lane="far",
    )


def predictive_burst(
    slots: int,
    pred: Deployment,
    p: PerTrigger,
    cost: dict[str, Any],
    prices: dict[str, Any],
    target_s: int = 4,
) -> dict[str, Any]:
    """A planned burst under predictive scaling: what the tick decides (the real planner,
    :func:`punctual.dispatch.scaling.plan_capacity`), when each part is ready, the burst itself, what one
    burst costs, and what the deployment costs a month while idle."""
    from datetime import UTC, datetime, timedelta

    from punctual.dispatch.scaling import CapacityProfile, need_for, plan_capacity

    message_s = worker_seconds(pred, p)
    task_rate = ecs_task_rate(pred, p)
    profile = CapacityProfile(
        lateness_target_s=target_s,
        message_s=message_s,
        standing_concurrency=pred.worker_max_concurrency,
        burst_workers_standing=0,
        burst_workers_max=20_000,
        burst_worker_messages_per_s=task_rate,
        start_lead_s=assumed("fargate_start_s") + 15,  # the default burstStartLeadS: 75 s
        hold_s=30,
    )
    minute = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    tasks = need_for(slots, profile, minute).burst_workers
    # The pollers a burst minute gets: its burst over what one poller releases by the p99 target
    # with the margin (burstTriggersPerPoller), at the default memory.
    per_poller = int(release_rate(pred, p) * 5.0 * assumed("burst_margin"))
    groups = math.ceil(slots / per_poller)
    with_tasks = replace(pred, ecs_burst_tasks=tasks, max_shard_groups=max(pred.max_shard_groups, groups))
    burst = simulate_burst(slots, with_tasks, p, groups, 0.02)
    # The ticks: every minute at :02; the first that leaves the start lead scales up.
    tick_s = assumed("tick_s")
    decisions = []
    scaled_at = released_at = None
    for k in range(-4, 3):
        at = minute + timedelta(minutes=k, seconds=tick_s)
        decision = plan_capacity(at, {minute: slots}, 0, profile)
        decisions.append(((at - minute).total_seconds(), decision.burst_workers))
        if decision.burst_workers and scaled_at is None:
            scaled_at = (at - minute).total_seconds()
        if scaled_at is not None and not decision.burst_workers and released_at is None:
            released_at = (at - minute).total_seconds()
    assert scaled_at is not None and released_at is not None
    launch_s = max(0.0, tasks - LIMITS["fargate_launch_burst"].value) / LIMITS["fargate_launch_rate"].value
    ready_at = scaled_at + launch_s + assumed("fargate_start_s")
    stopped_at = released_at + assumed("fargate_stop_s")
    task_hour = (
        pred.ecs_task_vcpu * EXTRA_PRICES["fargate_vcpu_hour"][0]
        + pred.ecs_task_gb * EXTRA_PRICES["fargate_gb_hour"][0]
    )
    task_s = stopped_at - scaled_at  # Fargate bills from the pull to the stop, a minute at least
    gb_s = benchlib.price(prices, "lambda.arm64_gb_second")
    per_burst = {
        "burst ECS tasks": tasks * task_hour * max(60.0, task_s) / 3600,
        "burst pollers (beyond the idle minute's one)": (groups - 1)
        * pred.poller_billed_s
        * pred.poller_memory_mb
        / 1024
        * gb_s,
        "Step Functions (one transition per extra poller, the burst machine's Parallel and Maps)": (
            groups - 1
        )
        * benchlib.price(prices, "stepfunctions.standard_per_thousand_transitions")
        / 1000,
    }
    per_burst["total"] = sum(per_burst.values())
    summary = cost.get("summary", {})
    per_million = summary.get("on_demand_usd_per_million")
    triggers = per_million * slots / 1e6 if per_million else None
    # Idle: the defaults' idle month (counted by the cost bench), plus the tick's scaling reads
    # (the next minute's near buckets, each empty Query half a read unit).
    idle = cost.get("idle", {}).get("defaults (256 far / 8 near, lean poller 128 MB)", {})
    idle_base = idle.get("usd_per_month", {}).get("total")
    rru = benchlib.price(prices, "dynamodb.on_demand_read_per_million") / 1e6
    scaling_reads = pred.near_shard_count * 0.5 * rru * MINUTES_A_MONTH
    # The Parallel of inline Maps that more than 40 pollers need is a second state machine the tick
    # uses for such minutes only (infra/components/dispatch.py): a burst minute pays its extra
    # transitions, an idle one does not.
    slices = map_slices(groups)
    per_burst["Step Functions (one transition per extra poller, the burst machine's Parallel and Maps)"] += (
        (slices if slices > 1 else 0)
        * benchlib.price(prices, "stepfunctions.standard_per_thousand_transitions")
        / 1000
    )
    per_burst["total"] = sum(v for k, v in per_burst.items() if k != "total")
    timeline = [
        ("far timers of the burst minute all written (far threshold)", -180.0),
        (
            f"tick decides and asks for {tasks} burst tasks (the next tick would leave < the start lead)",
            scaled_at,
        ),
        ("Fargate has launched every task (100 at once, then 20 a second)", scaled_at + launch_s),
        ("every burst task is long-polling the short queues (start assumed)", ready_at),
        (f"{groups} pollers start and read the minute's far buckets (poller lead)", -10.0),
        ("the burst's instant: release begins", 0.0),
        ("p99 of the slots started", burst.p99_s),
        ("every slot started", burst.started_by_s),
        ("tick scales back (hold over, queues drained)", released_at),
        ("the burst tasks have stopped", stopped_at),
    ]
    return {
        "slots": slots,
        "table_wru": round_up(burst.peak_wru, 10_000),  # quota and warm throughput the burst needs
        "table_rru": round_up(burst_rru(burst, p), 10_000),  # likewise for its reads
        "lateness_target_s": target_s,
        "burst_tasks": tasks,
        "pollers": groups,
        "burst_triggers_per_poller": per_poller,
        "burst": {k: v for k, v in asdict(burst).items() if k != "curve"},
        "met": burst.started_by_s <= 10 and burst.p99_s <= 5,
        "far_key_wru": burst.far_key_wru,
        "near_key_wru": burst.near_key_wru,
        "decisions": decisions,
        "timeline": timeline,
        "task_seconds": task_s,
        "usd_per_burst": per_burst,
        "usd_per_burst_triggers": triggers,
        "idle_usd_per_month": {
            "defaults' idle month (cost bench)": idle_base,
            "tick: the next minute's near buckets read for scaling": scaling_reads,
            "total": (idle_base or 0.0) + scaling_reads,
        },
    }
