"""What a capacity profile costs a month and what deploying it takes: ``cdk.json`` context keys,
account quotas to request, and what the app cannot deploy yet.
"""

from __future__ import annotations

from typing import Any

import benchlib
from capacity_limits import (
    DEPLOYABLE_MAX_GROUPS,
    DEPLOYABLE_MAX_QUEUES,
    EXTRA_PRICES,
    LIMITS,
    MINUTES_A_MONTH,
    SECONDS_A_MONTH,
    assumed,
)
from capacity_model import CDK_CONTEXT_KEYS, Deployment, PerTrigger, ecs_share, map_slices

# --------------------------------------------------------------------------- money and deployability


def monthly_cost(
    d: Deployment, p: PerTrigger, rate: float, groups: int, cost: dict[str, Any], prices: dict[str, Any]
) -> dict[str, float | None]:
    """A profile's dollars a month at a sustained ``rate`` whose minutes each need ``groups``
    pollers: the per-trigger traffic (counted by the cost bench, its poller and Step Functions
    shares taken out), then what the profile's settings add: pollers at their memory, Step
    Functions transitions, near-shard polling, provisioned environments, standing ECS tasks.
    None where no price is known here."""
    out: dict[str, float | None] = {}
    summary = cost.get("summary", {})
    gb_s = benchlib.price(prices, "lambda.arm64_gb_second")
    if "on_demand_usd_per_million" in summary:
        per_million = (
            summary["on_demand_usd_per_million"]
            - summary.get("poller_lambda_usd_per_million_at_10k", 0.0)
            - summary.get("stepfunctions_usd_per_million_at_10k", 0.0)
        )
        out["triggers (on-demand, all in, as counted)"] = per_million * rate * SECONDS_A_MONTH / 1e6
    else:
        out["triggers (on-demand, all in, as counted)"] = None
    out["pollers"] = groups * d.poller_billed_s * d.poller_memory_mb / 1024 * gb_s * MINUTES_A_MONTH
    transitions = 6 + 2 * (groups - 1)  # dispatch.py's docstring: six a minute, two per extra group
    slices = map_slices(groups)
    # A Parallel of inline Maps (the burst machine, for minutes of more than 40 groups only): the
    # Parallel and each Map instead of one Map.
    if slices > 1:
        transitions += slices
    sfn = benchlib.price(prices, "stepfunctions.standard_per_thousand_transitions") / 1000
    out["Step Functions"] = transitions * sfn * MINUTES_A_MONTH
    rru = benchlib.price(prices, "dynamodb.on_demand_read_per_million") / 1e6
    polls = d.poller_billed_s / d.poll_interval_s + 1  # the cost bench's 81 near queries a minute
    out["near-shard polling (one read unit each, even empty)"] = (
        d.near_shard_count * polls * rru * MINUTES_A_MONTH
    )
    out["provisioned worker environments"] = (
        d.prewarmed_workers
        * d.worker_memory_mb
        / 1024
        * EXTRA_PRICES["lambda_provisioned_gb_s"][0]
        * SECONDS_A_MONTH
    )
    task_hour = (
        d.ecs_task_vcpu * EXTRA_PRICES["fargate_vcpu_hour"][0]
        + d.ecs_task_gb * EXTRA_PRICES["fargate_gb_hour"][0]
    )
    out["standing ECS burst tasks"] = d.ecs_burst_tasks * task_hour * SECONDS_A_MONTH / 3600
    share = ecs_share(rate, d, p)
    wru = benchlib.price(prices, "dynamodb.on_demand_write_per_million") / 1e6
    out["LEASE timers of ECS-started triggers"] = (
        share * assumed("ecs_lease_wru") * wru * rate * SECONDS_A_MONTH
    )
    worker = summary.get("worker_lambda_at_scale", {}).get("usd_per_million", 0.0)
    out["worker Lambda the ECS tasks spare"] = -share * worker * rate * SECONDS_A_MONTH / 1e6
    out["provisioned event pollers (price not known here)"] = None if d.esm_mode == "provisioned" else 0.0
    known = [v for v in out.values() if v is not None]
    out["total (known prices)"] = sum(known)
    return out


def deployability(d: Deployment, groups: int | None = None, base: Deployment | None = None) -> dict[str, Any]:
    """What ``d`` is in terms of the CDK app: cdk.json context keys to set (where they differ
    from ``base``), account quotas to request, and what the app cannot deploy yet (each with
    the change it needs)."""
    base = base or Deployment()
    context: dict[str, Any] = {}
    for attr, key in CDK_CONTEXT_KEYS.items():
        if getattr(d, attr) != getattr(base, attr):
            context[key] = int(getattr(d, attr))
    if d.ecs_burst_tasks:  # the burst service's size (cdk.json defaults: 1024 / 2048)
        if d.ecs_task_vcpu != 1.0:
            context["ecsBurstCpu"] = int(d.ecs_task_vcpu * 1024)
        if d.ecs_task_gb != 2.0:
            context["ecsBurstMemoryMb"] = int(d.ecs_task_gb * 1024)
    else:
        context.pop("ecsBurstConcurrency", None)  # threads of a service that is not deployed
    notes = []
    layout = [k for k in ("shardCount", "nearShardCount") if k in context]
    if layout:
        notes.append(
            f"{' and '.join(layout)} {'are' if len(layout) > 1 else 'is'} part of the data layout: set at a"
            " deployment's first deploy"
            " (a live deployment that changes them strands the timers of the shards it no longer reads)"
        )
    quotas = []
    if d.table_wru > LIMITS["dynamodb_table_wru"].value or d.table_rru > LIMITS["dynamodb_table_rru"].value:
        quotas.append(
            f"DynamoDB table-level throughput quota to {d.table_wru:,.0f} WRU / {d.table_rru:,.0f} RRU"
            " (Service Quotas; warm throughput can only be set up to it)"
        )
    if d.account_concurrency > LIMITS["lambda_account_concurrency"].value:
        quotas.append(f"Lambda concurrent executions to {d.account_concurrency:,}")
    missing = []
    most = max(d.max_shard_groups, groups or 0)
    if most > DEPLOYABLE_MAX_GROUPS:
        missing.append(
            f"{most} pollers in a minute: maxShardGroups goes to {DEPLOYABLE_MAX_GROUPS} (a Parallel of"
            " inline Maps, dispatch.py); more needs MAX_SHARD_GROUPS raised in infra/constants.py"
        )
    if d.queue_count > DEPLOYABLE_MAX_QUEUES:
        missing.append(f"queueCount {d.queue_count} > MAX_QUEUE_COUNT 10 (infra/constants.py)")
    if d.worker_functions > 1:
        missing.append(
            f"{d.worker_functions} worker functions, one per short queue (Lambda's scaling rate is per"
            " function): workers.py creates one `Worker{i}` function per queue instead of one for all"
        )
    if d.esm_mode == "provisioned":
        missing.append(
            f"provisioned-mode event sources, MinimumPollers {d.esm_min_pollers}: SqsEventSource has no such"
            " prop; set ProvisionedPollerConfig on the CfnEventSourceMapping (escape hatch) in workers.py"
            " (FIFO support and price to confirm)"
        )
    if d.prewarmed_workers:
        missing.append(
            f"provisioned concurrency {d.prewarmed_workers:,} on the worker function(s): a version/alias with"
            " provisioned_concurrent_executions, and the event sources on the alias (workers.py)"
        )
    if d.ecs_burst_tasks > 5000:
        missing.append(f"ecsBurstTasks {d.ecs_burst_tasks:,} > 5,000 (ECS's tasks per service)")
    return {"context": context, "quotas": quotas, "notes": notes, "not_deployable": missing}
