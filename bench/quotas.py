"""Every AWS quota the hot path meets, with its value and source, and the headroom against each at a
sustained rate for a given target duration — and a burst's start under all of them at once.

``bench/capacity.py`` sizes the profiles; this module is the quota ledger it prints beside them:

* :data:`QUOTAS`: the limits :mod:`capacity_limits` did not carry (KMS, SQS per action, Fargate vCPU and
  per-service launch rate, Step Functions state transitions), each with its source page. Where
  the stored copy of the official page did not show the figure, it says so ("unverified here").
* :func:`headroom_checks`: the sustained checks of :func:`capacity_model.sustained_checks` with the
  job's own run time (``target_ms``) in the worker's time per message, plus one row per quota
  above. The table is printed for targets of 0 ms, 100 ms and 1 s (:data:`TARGETS_MS`).
* :func:`quota_ask_for`: what a deployment needs to reach 2x at a target: ``cdk.json`` keys
  (queues, event-source concurrency) and quota requests (Lambda account concurrency).
* :func:`burst_under_quotas`: a burst's last start once every quota it meets is applied: the
  release is bounded by the table's read and write quotas (warm throughput where set) and SQS's
  per-action quotas, not only by pollers and workers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import capacity_burst
import capacity_limits
import capacity_model
from capacity_burst import Burst
from capacity_limits import LIMITS, Limit
from capacity_model import Check, Deployment, PerTrigger

READ = "2026-12-03"
TARGETS_MS = (0.0, 100.0, 1000.0)
QUOTAS: dict[str, Limit] = {
    "kms_symmetric_rps": Limit(
        50_000,
        "KMS cryptographic operations (symmetric: Decrypt, Encrypt, GenerateDataKey...) per second,"
        " shared by the account, us-east-1 (5,500 in most Regions; adjustable)",
        "docs.aws.amazon.com/kms/latest/developerguide/requests-per-second.html; the stored copy does not"
        " show the per-Region figures: as published (5,500; 10,000; 50,000 in us-east-1, us-west-2,"
        " eu-west-1), unverified here",
        adjustable=True,
    ),
    "sqs_fifo_tps_per_action": Limit(
        70_000,
        "transactions/s per API action (SendMessageBatch, ReceiveMessage, DeleteMessageBatch,"
        " ChangeMessageVisibilityBatch each) per high-throughput FIFO queue, us-east-1",
        LIMITS["sqs_fifo_tps"].source,
    ),
    "lambda_esm_max": Limit(
        1000,
        "MaximumConcurrency of one SQS event source (one per short queue)",
        LIMITS["lambda_esm_max_concurrency"].source,
    ),
    "fargate_vcpu": Limit(
        4000,
        "Fargate On-Demand vCPUs running at once per account and Region (adjustable; a new account may"
        " start lower and is raised with use)",
        "aws.amazon.com/blogs/containers/migrating-fargate-service-quotas-to-vcpu-based-quotas/ (the 1,000"
        " task quota became vCPUs, 4 each); unverified here",
        adjustable=True,
    ),
    "fargate_service_launch_per_min": Limit(
        500,
        "tasks a service launches per minute on Fargate",
        f"docs.aws.amazon.com/AmazonECS/latest/developerguide/service-quotas.html (read {READ})",
    ),
    "eventbridge_put_events_tps": Limit(
        10_000,
        "PutEvents requests a second per account, us-east-1 (adjustable; up to 10 entries a request)",
        "docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html (PutEvents throttle limit in"
        " transactions per second, us-east-1: 10,000; as published on repost.aws), unverified here",
        adjustable=True,
    ),
    "eventbridge_invocations_tps": Limit(
        18_750,
        "rule invocations a second per account, us-east-1 (an event matching a rule, sent to its"
        " targets; beyond it they are throttled: delayed and retried for up to 24 hours; adjustable)",
        "docs.aws.amazon.com/eventbridge/latest/userguide/eb-quota.html (Invocations throttle limit in"
        " transactions per second, us-east-1: 18,750; read on the stored copy, 2026-12-06)",
        adjustable=True,
    ),
    "sfn_transitions_per_s": Limit(
        5000,
        "Standard workflow state transitions a second per account, us-east-1 (token bucket refill)",
        "docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html; as published, unverified here",
        adjustable=True,
    ),
}


@dataclass(frozen=True)
class Assumed:
    """What the quota rows take as given (stated beside the table)."""

    tenants: int = 1000  # tenants whose jobs a worker environment runs in its life
    environment_life_s: float = 3600.0  # a worker environment's life (Lambda recycles; unpublished)
    heartbeat_s: float = 20.0  # an ECS run's heartbeat (a third of its 60 s lease)
    # Execution events a trigger: eventsStatusChanges ``problems`` (the default) publishes no RUNNING or
    # SUCCEEDED, so a trigger's events are its problems: 0.2 takes one trigger in ten failing with a
    # RETRY_WAIT and a FAILED (``all`` adds two a trigger, started and ended: 2.2)
    events_per_trigger: float = 0.2
    rules_per_event: float = 1.0  # rules an execution event matches (e.g. one routing them all)


def worker_environments(rate: float, d: Deployment, p: PerTrigger) -> float:
    return rate * capacity_model.worker_seconds(d, p)


def headroom_checks(
    rate: float, target_ms: float, d: Deployment, p: PerTrigger, a: Assumed = Assumed()
) -> list[Check]:
    """Every limit a sustained ``rate`` meets with jobs that run ``target_ms`` each."""
    p = replace(p, target_ms=target_ms)
    checks = [
        c
        for c in capacity_model.sustained_checks(rate, d, p)
        if not c.name.startswith("SQS FIFO SendMessageBatch")
        and not c.name.startswith("SQS FIFO ReceiveMessage")
    ]
    per_queue = rate / d.queue_count
    batches = per_queue / d.batch_size
    environments = worker_environments(rate, d, p)
    q = QUOTAS
    sqs = q["sqs_fifo_tps_per_action"]
    ecs_share = capacity_model.ecs_share(rate, d, p)
    # KMS: one Decrypt per tenant per worker process per key lifetime (envelope encryption): the
    # environments the rate keeps busy, each meeting every tenant once in its life.
    kms = environments * a.tenants / a.environment_life_s
    checks += [
        Check("SQS FIFO SendMessageBatch per queue", batches, sqs.value, "TPS", sqs.source),
        Check("SQS FIFO ReceiveMessage per queue (batches of 10)", batches, sqs.value, "TPS", sqs.source),
        Check(
            "SQS FIFO DeleteMessageBatch per queue (event source; ECS tasks batch theirs)",
            batches,
            sqs.value,
            "TPS",
            sqs.source,
        ),
        Check(
            "SQS FIFO ChangeMessageVisibility per queue (the Lambda batch's lease on arrival;"
            " ECS heartbeats)",
            batches * (1 - ecs_share) + per_queue * ecs_share * (p.target_ms / 1000) / a.heartbeat_s,
            sqs.value,
            "TPS",
            sqs.source,
        ),
        Check(
            "Lambda event-source MaximumConcurrency (per short queue)",
            min(environments, d.worker_max_concurrency * d.queue_count) / d.queue_count,
            q["lambda_esm_max"].value,
            "environments",
            q["lambda_esm_max"].source,
        ),
        Check(
            f"KMS Decrypt (envelope: once per tenant per worker process; {a.tenants:,} tenants,"
            f" {a.environment_life_s / 3600:.0f} h environments)",
            kms,
            q["kms_symmetric_rps"].value,
            "requests/s",
            q["kms_symmetric_rps"].source,
        ),
        Check(
            f"EventBridge PutEvents (execution events, {a.events_per_trigger:g} a trigger, a batch's in"
            " requests of 10)",
            rate * a.events_per_trigger / 10,
            q["eventbridge_put_events_tps"].value,
            "requests/s",
            q["eventbridge_put_events_tps"].source,
        ),
        Check(
            f"EventBridge rule invocations ({a.rules_per_event:g} rule matching every execution event)",
            rate * a.events_per_trigger * a.rules_per_event,
            q["eventbridge_invocations_tps"].value,
            "invocations/s",
            q["eventbridge_invocations_tps"].source,
        ),
        Check(
            "Step Functions state transitions (pollers' Map items, each minute)",
            (3 + capacity_model.groups_for(rate, d)) / 60,
            q["sfn_transitions_per_s"].value,
            "transitions/s",
            q["sfn_transitions_per_s"].source,
        ),
    ]
    if d.ecs_burst_tasks:
        checks.append(
            Check(
                "Fargate vCPUs (standing burst tasks)",
                d.ecs_burst_tasks * d.ecs_task_vcpu,
                q["fargate_vcpu"].value,
                "vCPUs",
                q["fargate_vcpu"].source,
                scales_with_rate=False,
            )
        )
    return checks


def quota_ask_for(
    rate: float, target_ms: float, d: Deployment, p: PerTrigger, target: float = 2.0
) -> dict[str, Any]:
    """The settings and quota requests that give ``target`` x headroom on the worker limits at
    ``rate`` with jobs of ``target_ms``: more short queues (each event source takes 1,000 at
    most), their concurrency, and the account's Lambda concurrency (a Service Quotas request)."""
    environments = worker_environments(rate, d, replace(p, target_ms=target_ms)) * target
    pollers = math.ceil(capacity_model.groups_for(rate, d) * d.poller_minute_s / 60)
    queues = max(d.queue_count, math.ceil(environments / QUOTAS["lambda_esm_max"].value))
    per_queue = min(QUOTAS["lambda_esm_max"].value, math.ceil(environments / queues))
    wanted = environments + pollers * target + d.api_reserved_concurrency  # the API reserves its own
    account = max(d.account_concurrency, int(math.ceil(wanted / 100) * 100))
    context = {}
    if queues > d.queue_count:
        context["queueCount"] = queues
    if per_queue > d.worker_max_concurrency:
        context["workerMaxConcurrency"] = per_queue
    return {
        "target_ms": target_ms,
        "environments_for_2x": math.ceil(environments),
        "cdk_json": context,
        "quota_requests": (
            {"Lambda concurrent executions (L-B99A9384)": account} if account > d.account_concurrency else {}
        ),
        "deployable_by_cdk_json": queues <= capacity_limits.DEPLOYABLE_MAX_QUEUES,
    }


def burst_under_quotas(b: Burst, d: Deployment, p: PerTrigger) -> dict[str, Any]:
    """The burst's last start once its release is held to every per-second quota it meets.

    Per slot released: the poller's job read (BatchGetItem, eventually consistent: ``p.rru`` less
    the history reads, which come later) and the next-timer write; per slot started: the claim
    and finish writes (``p.exec_wru``), a SendMessageBatch, a ReceiveMessage and a
    DeleteMessageBatch per ten. Each quota caps the slots a second; the slowest sets the pace.
    """
    release_rru = capacity_burst.release_rru(p)  # the history read (1/20 of a page) is not the burst's
    caps = {
        "DynamoDB table reads": _cap(max(d.table_rru, d.warm_rru), release_rru),
        "DynamoDB reads a table takes at once (warm throughput)": _cap(
            max(d.warm_rru, LIMITS["dynamodb_new_table_rru"].value), release_rru
        ),
        "DynamoDB table writes": _cap(max(d.table_wru, d.warm_wru), p.wru),
        "DynamoDB writes a table takes at once (warm throughput)": _cap(
            max(d.warm_wru, LIMITS["dynamodb_new_table_wru"].value), p.wru
        ),
        "SQS FIFO per action (x10 batched)": QUOTAS["sqs_fifo_tps_per_action"].value
        * d.batch_size
        * d.queue_count,
    }
    pace = min(caps.values())
    binding = min(caps, key=lambda k: caps[k])
    by_quota_s = b.slots / pace if pace > 0 else math.inf
    return {
        "slots": b.slots,
        "started_by_s_pollers_and_workers": b.started_by_s,
        "caps_slots_per_s": caps,
        "binding_quota": binding,
        "started_by_s_under_quotas": max(b.started_by_s, by_quota_s),
        "p99_s_under_quotas": max(b.p99_s, by_quota_s * 0.99),
        "read_units_per_s_needed": b.slots / max(b.started_by_s, 1e-9) * release_rru,
        "write_units_per_s_needed": b.peak_wru,
    }


def _cap(units_per_s: float, units_per_slot: float) -> float:
    return units_per_s / units_per_slot if units_per_slot > 0 else math.inf


def table_rows(checks: list[Check]) -> list[tuple[Any, ...]]:
    return [(c.name, c.demand, c.limit, c.unit, c.headroom, c.source) for c in checks]


def print_headroom(rate: float, d: Deployment, p: PerTrigger) -> dict[str, Any]:
    """The headroom table at ``rate`` for each target duration, with sources; returns its JSON."""
    import benchlib

    out: dict[str, Any] = {"rate": rate, "assumed": Assumed().__dict__, "targets": {}}
    for target_ms in TARGETS_MS:
        checks = headroom_checks(rate, target_ms, d, p)
        least = min(checks, key=lambda c: c.headroom)
        benchlib.heading(
            f"Headroom at {rate:,.0f} triggers/s, targets of {target_ms:,.0f} ms, defaults:"
            f" least {least.headroom:.2f}x ({least.name})"
        )
        print(
            benchlib.table(
                ["limit", "demand", "limit value", "unit", "headroom", "source"],
                table_rows(checks),
                align="lrrlrl",
            )
        )
        ask = quota_ask_for(rate, target_ms, d, p)
        print(
            f"2x at {target_ms:,.0f} ms: cdk.json {ask['cdk_json'] or '(as is)'};"
            f" quota requests {ask['quota_requests'] or '(none)'}"
        )
        out["targets"][f"{target_ms:.0f}"] = {
            "least": {"name": least.name, "headroom": least.headroom},
            "checks": [
                {
                    "name": c.name,
                    "demand": c.demand,
                    "limit": c.limit,
                    "unit": c.unit,
                    "headroom": c.headroom,
                    "source": c.source,
                }
                for c in checks
            ],
            "for_2x": ask,
        }
    return out


def report(
    rate: float, defaults: Deployment, p: PerTrigger, bursts: dict[str, tuple[Burst, Deployment]]
) -> dict[str, Any]:
    """What ``bench/capacity.py`` prints and records beside its profiles: the headroom table for
    each target duration, and each burst under every quota it meets (with the read capacity its
    profile must ask for)."""
    import benchlib

    out = {"headroom": print_headroom(rate, defaults, p), "bursts": {}}
    rows = []
    for label, (burst, d) in bursts.items():
        under = burst_under_quotas(burst, d, p)
        ask_rru = math.ceil(under["read_units_per_s_needed"] / 10_000) * 10_000
        asked = replace(d, table_rru=max(d.table_rru, ask_rru), warm_rru=max(d.warm_rru, ask_rru))
        with_reads = burst_under_quotas(burst, asked, p)
        out["bursts"][label] = {"as_deployed": under, "with_read_capacity": with_reads, "table_rru": ask_rru}
        rows.append(
            (
                label,
                burst.started_by_s,
                under["binding_quota"],
                under["started_by_s_under_quotas"],
                ask_rru,
                with_reads["binding_quota"],
                with_reads["started_by_s_under_quotas"],
            )
        )
    benchlib.heading(
        "Bursts under every quota they meet (table reads and writes, warm throughput, SQS per action)"
    )
    print(
        benchlib.table(
            [
                "burst",
                "all started s (pollers, workers)",
                "binding quota as deployed",
                "all started s",
                "read units/s to ask",
                "binding then",
                "all started s then",
            ],
            rows,
        )
    )
    return out
