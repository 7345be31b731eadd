"""The cost benchmark's money: counted requests and modelled durations to dollars.

:class:`Prices` (``bench/prices.json``); each request's price, the Lambda duration a trigger
takes (counted requests x typical in-region latencies, plus CPU), storage, KMS, the poller's
minutes; the idle month of a layout (:func:`idle_month`), the per-trigger summary of a load run
against its idle run (:func:`summarize`), and what events and alerts add
(:func:`events_and_alerts`).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import audit_cost
import benchlib
from awsmeter import Meter, Tally, subtract
from cost_rig import (
    DEFAULT_CPU_US,
    EVENTBRIDGE_ALL_IN_QUOTED,
    HOURS_PER_MONTH,
    INVOCATION_OVERHEAD_MS,
    LAMBDA_CPU_SLOWDOWN_512,
    LATENCY_MS,
    MINUTES_PER_MONTH,
    PLATFORM_LOG_BYTES,
    SUSTAINED_PER_S,
    T0,
    TICK_MS,
    XRAY_SAMPLED_SHARE,
    RunResult,
    run,
)
from cost_scale import LEASE_CALL, per_full_chunk, side_by_side_ms

# --------------------------------------------------------------------------- money


@dataclass
class Prices:
    wru: float
    rru: float
    wcu_hour: float
    rcu_hour: float
    sqs_fifo: float
    sqs_standard: float
    lambda_request: float
    lambda_gb_s: float
    sfn_transition: float
    scheduler: float
    events: float
    kms_request: float
    logs_gb: float
    xray_trace: float
    worker_mb: int
    poller_mb: int
    tick_mb: int

    @classmethod
    def load(cls) -> Prices:
        p = benchlib.load_prices()
        get = benchlib.price
        return cls(
            wru=get(p, "dynamodb.on_demand_write_per_million") / 1e6,
            rru=get(p, "dynamodb.on_demand_read_per_million") / 1e6,
            wcu_hour=get(p, "dynamodb.provisioned_wcu_hour"),
            rcu_hour=get(p, "dynamodb.provisioned_rcu_hour"),
            sqs_fifo=get(p, "sqs.fifo_per_million") / 1e6,
            sqs_standard=get(p, "sqs.standard_per_million") / 1e6,
            lambda_request=get(p, "lambda.requests_per_million") / 1e6,
            lambda_gb_s=get(p, "lambda.arm64_gb_second"),
            sfn_transition=get(p, "stepfunctions.standard_per_thousand_transitions") / 1e3,
            scheduler=get(p, "eventbridge.scheduler_per_million") / 1e6,
            events=get(p, "eventbridge.custom_events_per_million") / 1e6,
            kms_request=get(p, "kms.requests_per_ten_thousand") / 1e4,
            logs_gb=get(p, "cloudwatch.logs_ingestion_per_gb"),
            xray_trace=get(p, "xray.traces_recorded_per_million") / 1e6,
            worker_mb=int(p["deployment"]["worker_memory_mb"]),
            poller_mb=int(p["deployment"]["poller_memory_mb"]),
            tick_mb=int(p["deployment"]["tick_memory_mb"]),
        )


def request_cost(key: tuple[str, str, str], tally: Tally, prices: Prices) -> float:
    """On-demand dollars of the requests under one key."""
    _, operation, kind = key
    if operation.startswith("dynamodb."):
        return tally.wru * prices.wru + tally.rru * prices.rru
    if operation.startswith("sqs."):
        return tally.billed * (prices.sqs_fifo if kind == "fifo" else prices.sqs_standard)
    if operation == "events.PutEvents":
        return tally.billed * prices.events
    return 0.0


def latency_ms(tallies: Mapping[tuple[str, str, str], Tally], phase: str) -> float:
    total = 0.0
    for (p, operation, _), tally in tallies.items():
        if p != phase:
            continue
        service = operation.split(".", 1)[0]
        total += tally.calls * LATENCY_MS.get(operation, LATENCY_MS.get(service, 10.0))
    return total


def cpu_us_per_trigger() -> float:
    """The worker's CPU per trigger at one full vCPU (core, marshalling, botocore), from
    ``cpu_per_trigger.json`` when that benchmark ran first."""
    path = benchlib.RESULTS_DIR / "cpu_per_trigger.json"
    try:
        data = json.loads(path.read_text())
        return float(data["worker_cpu_us_per_trigger"])
    except (OSError, KeyError, ValueError):
        return DEFAULT_CPU_US


# One call per ten messages at 10,000/s (LEASE_CALL: the worker's lease on arrival, one per batch).
BATCHED = ("sqs.SendMessageBatch", "sqs.ReceiveMessage", "sqs.DeleteMessageBatch", LEASE_CALL)


def packing_wru_per_timer() -> float | None:
    """Write units per next timer at 10,000/s, from bench/timer_packing.py's result (if run)."""
    path = benchlib.RESULTS_DIR / "timer_packing.json"
    if not path.exists():
        return None
    value = json.loads(path.read_text()).get("wru_per_timer")
    return float(value) if value else None


def per_trigger_rows(
    added: Mapping[tuple[str, str, str], Tally],
    triggers: int,
    prices: Prices,
    packing: float | None = None,
    group_minutes: int = 0,
) -> list[dict[str, Any]]:
    """One row per (phase, request, item kind): what each trigger adds, measured and at scale.

    At 10,000/s every batch is full: the poller sends ten per SendMessageBatch and the event
    source receives and deletes ten at a time, so those calls cost a tenth of a request each.
    The poller's next timers pack as they do for a poller at that rate (``packing`` write
    units per timer, measured by bench/timer_packing.py; this run's few triggers a second
    pack poorly). The poller's minute-load ledger writes are one per release chunk, full at that
    rate (``cost_scale``). A poller's progress marks are one per (minute, shard group) and
    progress interval, whatever the rate: this run's marks per group-minute (``group_minutes``
    of them) times the groups at 10,000/s, over a minute's triggers at that rate. Everything
    else is per item and does not change with the rate.
    """
    rows = []
    per_chunk = per_full_chunk(added, triggers)
    for key, tally in sorted(added.items()):
        phase, operation, kind = key
        if phase in ("setup", "registration", "done") or (tally.calls == 0 and tally.rru == 0):
            continue
        if phase.endswith("(empty)"):
            continue  # the event source's idle long polls: a fixed cost, counted per month
        usd = request_cost(key, tally, prices) / triggers * 1e6
        calls = tally.calls / triggers
        at_scale = usd * min(1.0, 0.1 / calls) if operation in BATCHED and calls > 0 else usd
        wru_at_scale = tally.wru / triggers
        if (phase, kind) == ("poller", "load"):  # one ledger write per release chunk (and minute)
            wru_at_scale, at_scale = wru_at_scale * per_chunk, at_scale * per_chunk
        if (phase, kind) == ("poller", "progress") and group_minutes:
            share = groups_at(SUSTAINED_PER_S) / group_minutes / (SUSTAINED_PER_S * 60) * triggers
            wru_at_scale, at_scale = wru_at_scale * share, at_scale * share
        if operation == "sqs.GetQueueAttributes":
            # The short queues' waiting counts (the re-send watch's; the catch-up pace's only while
            # a poller catches up) are read per poller and queue, whatever the rate: sustained, the
            # workers claim every message before its check, and the watch reads a queue one period
            # a minute (resend_backlog.QueueBacklogs.sent); at 10,000/s, every group's poller does
            # so over each of the scale profile's short queues, over a minute's triggers. This
            # run's few triggers a second pay the same reads over far fewer.
            at_scale = min(usd, count_reads_per_trigger_at_scale() * prices.sqs_fifo * 1e6)
        if packing and tally.timers and operation == "dynamodb.BatchWriteItem":
            # The poller's next timers, packed as a poller at 10,000/s packs them.
            wru_at_scale = min(wru_at_scale, tally.timers / triggers * packing)
            at_scale = wru_at_scale * prices.wru * 1e6
        rows.append(
            {
                "phase": phase,
                "operation": operation,
                "kind": kind,
                "calls_per_trigger": calls,
                "billed_per_trigger": tally.billed / triggers,
                "wru_per_trigger": tally.wru / triggers,
                "wru_per_trigger_at_scale": wru_at_scale,
                "timers_per_trigger": tally.timers / triggers,
                "rru_per_trigger": tally.rru / triggers,
                "bytes_per_item": tally.payload_bytes / tally.items if tally.items else 0,
                "usd_per_million": usd,
                "usd_per_million_at_scale": at_scale,
            }
        )
    return rows


def storage_per_million(rows: list[dict[str, Any]], prices: Prices) -> dict[str, float]:
    """Storage of what each trigger leaves behind: its execution record for the retention
    period and its timer for a day (TTL), plus DynamoDB's 100 bytes of overhead per item; and its
    continuous backup (the stack's table has point-in-time recovery on, billed on its size)."""
    from punctual.runtime.settings import Settings

    listed = benchlib.load_prices()
    table_gb_month = benchlib.price(listed, "dynamodb.storage_gb_month")
    pitr_gb_month = benchlib.price(listed, "dynamodb.pitr_gb_month")
    gb_month = table_gb_month + pitr_gb_month
    month_days = HOURS_PER_MONTH / 24
    record = max(
        (r["bytes_per_item"] for r in rows if r["kind"] == "exec" and r["wru_per_trigger"]), default=0
    )
    timer = max(
        (r["bytes_per_item"] for r in rows if r["kind"] in ("near", "timer") and r["wru_per_trigger"]),
        default=0,
    )
    retention = Settings().retention_days
    record_gb_month = (record + 100) / 2**30 * retention / month_days
    timer_gb_month = (timer + 100) / 2**30 * 1 / month_days
    return {
        "record_bytes": record,
        "retention_days": retention,
        "usd_per_million": (record_gb_month + timer_gb_month) * gb_month * 1e6,
        "record_only_usd_per_million": record_gb_month * gb_month * 1e6,
        "pitr_usd_per_million": (record_gb_month + timer_gb_month) * pitr_gb_month * 1e6,
    }


def lambda_per_trigger(load: RunResult, prices: Prices, batch: float | None = None) -> dict[str, float]:
    """Worker Lambda requests and GB-seconds per trigger, from the counted requests.

    ``batch``: records per invocation (default: as measured; 10 at scale). The batch's records run
    side by side (``cost_scale.side_by_side_ms``).
    """
    triggers = max(load.triggers, 1)
    io_ms = latency_ms(load.tallies, "worker") / triggers
    lease = latency_ms({k: t for k, t in load.tallies.items() if k[1] == LEASE_CALL}, "worker")
    cpu_ms = cpu_us_per_trigger() / 1000 * LAMBDA_CPU_SLOWDOWN_512 * (512 / prices.worker_mb)
    batch = batch or sum(load.batch_sizes) / max(len(load.batch_sizes), 1)
    record_io_ms = io_ms - lease / triggers
    lease_ms = lease / max(load.invocations, 1)
    per_trigger_ms = side_by_side_ms(record_io_ms, cpu_ms, batch, INVOCATION_OVERHEAD_MS, lease_ms)
    gb_s = per_trigger_ms / 1000 * prices.worker_mb / 1024
    return {
        "invocations_per_trigger": 1 / batch,
        "mean_batch": batch,
        "io_ms_per_trigger": io_ms,
        "cpu_ms_per_trigger": cpu_ms,
        "ms_per_trigger": per_trigger_ms,
        "gb_s_per_trigger": gb_s,
        "usd_per_million": (prices.lambda_request / batch + gb_s * prices.lambda_gb_s) * 1e6,
    }


# Envelope encryption (punctual.security.tenant_keys): a worker process unwraps each tenant's data key once
# per key lifetime, so KMS is billed per worker environment and tenant, not per trigger.
KMS_TENANTS = 1000  # tenants whose jobs one worker environment runs in its life (assumed)
KMS_ENVIRONMENT_LIFE_S = 3600.0  # a worker environment's life (Lambda recycles them; unpublished)


def kms_per_million(worker_ms_per_trigger: float, prices: Prices) -> dict[str, float]:
    """KMS requests and $ per million triggers at 10,000/s: the environments the rate keeps busy,
    each unwrapping every tenant's key once in its life (a call per trigger before the envelope)."""
    environments = SUSTAINED_PER_S * worker_ms_per_trigger / 1000
    per_s = environments * KMS_TENANTS / KMS_ENVIRONMENT_LIFE_S
    per_trigger = per_s / SUSTAINED_PER_S
    usd = prices.kms_request
    return {
        "environments_at_10k": environments,
        "requests_per_s_at_10k": per_s,
        "requests_per_trigger": per_trigger,
        "usd_per_million": per_trigger * usd * 1e6,
        "usd_per_million_one_per_trigger": usd * 1e6,  # what a Decrypt per trigger cost
    }


def logs_and_traces_per_million(load: RunResult, prices: Prices, batch: float) -> dict[str, float]:
    """CloudWatch Logs ingestion and X-Ray traces per million triggers, with ``batch`` records a
    worker invocation: the EMF documents the poller and the worker wrote in the run, and each
    worker invocation's platform lines; the worker invocations the default sampling rule traces
    (its reservoir of one a second is nothing beside 1,000 invocations a second).

    The worker prints its documents once an invocation: their values (a start delay and a run
    duration an attempt) come per trigger, their frame (namespace, dimensions, metric
    definitions, timestamp) per invocation, so the frame is counted per invocation of ``batch``
    records. The poller's documents are counted as the run wrote them (a run's pollers release
    a few hundred slots a minute; at 10,000 a second each document holds its 100 values: fewer
    frames a trigger than counted)."""
    triggers = max(load.triggers, 1)
    poller = load.emf_bytes.get("poller", 0) / triggers
    worker_bytes = load.emf_bytes.get("worker", 0)
    worker_values = load.emf_value_bytes.get("worker", worker_bytes)
    frames_per_invocation = (worker_bytes - worker_values) / max(load.invocations, 1)
    worker = worker_values / triggers + frames_per_invocation / batch
    emf = poller + worker
    platform = PLATFORM_LOG_BYTES / batch
    traces = XRAY_SAMPLED_SHARE / batch
    return {
        "emf_bytes_per_trigger": emf,
        "emf_worker_frame_bytes_per_invocation": frames_per_invocation,
        "platform_log_bytes_per_trigger": platform,
        "logs_usd_per_million": (emf + platform) / 2**30 * prices.logs_gb * 1e6,
        "xray_traces_per_trigger": traces,
        "xray_usd_per_million": traces * prices.xray_trace * 1e6,
    }


# The scale profile's short queues at 10,000/s with 100 ms targets (docs/capacity.md, profile (b):
# queueCount 3; 1 with targets that answer at once)
SCALE_SHORT_QUEUES = 3


def count_reads_per_trigger_at_scale() -> float:
    """``GetQueueAttributes`` calls a trigger at 10,000/s, at most (see :func:`rows`)."""
    from punctual.dispatch.polling.resend import RESEND_AFTER_S
    from punctual.dispatch.polling.resend_backlog import READ_EVERY_S

    a_minute = (RESEND_AFTER_S + 1) / READ_EVERY_S + 1  # one period, read at once then each second
    per_second = groups_at(SUSTAINED_PER_S) * SCALE_SHORT_QUEUES * a_minute / 60
    return per_second / SUSTAINED_PER_S


def groups_at(rate_per_s: float) -> int:
    from punctual.dispatch.tick import group_count_for
    from punctual.runtime.settings import Settings

    return group_count_for(int(rate_per_s * 60), Settings())


def poller_minute_usd(groups: int, prices: Prices, memory_mb: int | None = None) -> dict[str, float]:
    """One minute of pollers and its Step Functions execution."""
    from punctual.runtime.settings import Settings

    s = Settings()
    seconds = s.poller_lead_s + 60 + s.poller_grace_s  # each poller runs its whole minute
    gb_s = groups * seconds * (memory_mb or prices.poller_mb) / 1024
    # Standard bills each state a step enters (infra/components/dispatch.py): Wait, Map, one task
    # per group; an inline Map's iterations are not billed (docs: concepts-transitions). The
    # execution's start is counted too, as a margin.
    transitions = 3 + groups
    return {
        "poller_seconds": groups * seconds,
        "lambda": gb_s * prices.lambda_gb_s + groups * prices.lambda_request,
        "stepfunctions": transitions * prices.sfn_transition,
        "transitions": transitions,
    }


@dataclass(frozen=True)
class IdleLayout:
    """What decides the idle bill: shard counts and the memory of the poller an idle minute gets."""

    label: str
    far_shards: int
    near_shards: int
    poller_mb: int
    tick_mb: int


def default_idle_layout() -> IdleLayout:
    """The deployed defaults: cdk.json's context through infra/config.py, and the tick's own plan
    of an idle minute (which poller it chooses) from punctual.dispatch.tick."""
    import sys

    from punctual.dispatch.tick import LEAN, plan_minute
    from punctual.runtime.settings import Settings
    from punctual.store.memory import MemoryStore

    if str(benchlib.ROOT) not in sys.path:
        sys.path.insert(0, str(benchlib.ROOT))
    from punctual_cdk import constants
    from punctual_cdk.config import PunctualConfig

    context = json.loads((benchlib.ROOT / "cdk.json").read_text())["context"]
    cfg = PunctualConfig.from_context(context.get)
    settings = Settings(
        shard_count=cfg.shard_count,
        near_shard_count=cfg.near_shard_count,
        lean_max_triggers_per_minute=cfg.lean_poller_max_triggers_per_minute,
        shard_groups=cfg.shard_groups,
    )
    chosen = plan_minute(T0, settings, MemoryStore(), now=T0 - timedelta(minutes=2))["poller"]
    memory = cfg.lean_poller_memory_mb if chosen == LEAN else cfg.poller_memory_mb
    return IdleLayout(
        f"defaults ({cfg.shard_count} far / {cfg.near_shard_count} near, {chosen} poller {memory:,} MB)",
        cfg.shard_count,
        cfg.near_shard_count,
        memory,
        constants.TICK_MEMORY_MB,
    )


def console_widget_month() -> float:
    """The dashboard's console widget for a month of the dashboard left open at a 1-minute refresh
    (``bench/console_widget.py`` measures it: one render's queries, read units and CPU); 0 until
    that benchmark has run. It costs nothing while nobody views the dashboard."""
    return benchlib.result_figure("console_widget", "usd_per_month_open_all_month", "total")


def standing_month() -> float:
    """What the default template's standing resources cost a month (``bench/standing_cost.py``
    counts them: the workers' VPC, KMS keys, secrets, alarms, the dashboard); 0 until that
    benchmark has run. They are billed by the hour or month, whatever is due."""
    return benchlib.result_figure("standing_cost", "usd_per_month", "total")


def idle_month(idle: RunResult, prices: Prices, poller_mb: int, tick_mb: int | None = None) -> dict[str, Any]:
    """What a deployment costs a month with nothing due, from an idle run's counted requests."""
    per_minute: dict[str, float] = defaultdict(float)
    lines = []
    for key, tally in idle.tallies.items():
        phase, operation, kind = key
        if not tally.calls and not tally.rru and not tally.wru:
            continue
        if phase in ("setup", "registration", "done", "history"):
            continue
        usd = request_cost(key, tally, prices) / idle.minutes
        if phase.startswith("event source"):
            continue  # the bench's own receive loop; the event source's idle polling is modelled below
        per_minute[f"{phase} {operation} {kind}".strip()] += usd
        lines.append((phase, operation, kind, tally.calls / idle.minutes, tally.rru / idle.minutes, usd))
    minute = poller_minute_usd(1, prices, poller_mb)
    tick_ms = latency_ms(idle.tallies, "tick") / idle.minutes + TICK_MS
    tick_usd = (
        tick_ms / 1000 * (tick_mb or prices.tick_mb) / 1024 * prices.lambda_gb_s + prices.lambda_request
    )
    # Event source: five pollers long-polling 20 s each while idle (services-sqs-scaling: no
    # scale-down to two with maximum concurrency set, which infra sets).
    esm_receives = 5 * 3
    month = {
        "dynamodb_reads_and_writes": sum(per_minute.values()) * MINUTES_PER_MONTH,
        "poller_lambda": minute["lambda"] * MINUTES_PER_MONTH,
        "stepfunctions": minute["stepfunctions"] * MINUTES_PER_MONTH,
        "tick_lambda": tick_usd * MINUTES_PER_MONTH,
        "event_source_idle_polling": esm_receives * prices.sqs_fifo * MINUTES_PER_MONTH,
        "console_widget_dashboard_open": console_widget_month(),
        "chain_auditor": audit_cost.idle_month_usd(),  # its Lambda and reads: bench/audit_cost.py
        "standing_resources": standing_month(),  # VPC, keys, secrets, alarms, dashboard
    }
    month["total"] = sum(month.values())
    lines.sort(key=lambda line: -line[-1])
    return {"usd_per_month": month, "requests_per_minute": lines, "poller_mb": poller_mb}


def summarize(load: RunResult, base: RunResult, prices: Prices) -> dict[str, Any]:
    added = subtract(load.tallies, base.tallies)
    triggers = max(load.triggers, 1)
    packing = packing_wru_per_timer()
    rows = per_trigger_rows(added, triggers, prices, packing, load.minutes * load.groups)
    storage = storage_per_million(rows, prices)
    measured_lambda = lambda_per_trigger(load, prices)
    scale_lambda = lambda_per_trigger(load, prices, batch=10)
    groups = groups_at(SUSTAINED_PER_S)
    minute = poller_minute_usd(groups, prices)
    per_minute_triggers = SUSTAINED_PER_S * 60
    poller_usd = minute["lambda"] / per_minute_triggers * 1e6
    sfn_usd = minute["stepfunctions"] / per_minute_triggers * 1e6
    fixed_share = poller_usd + sfn_usd
    observed = logs_and_traces_per_million(load, prices, measured_lambda["mean_batch"])
    observed_at_scale = logs_and_traces_per_million(load, prices, 10)
    measured = (
        sum(r["usd_per_million"] for r in rows)
        + measured_lambda["usd_per_million"]
        + storage["usd_per_million"]
        + observed["logs_usd_per_million"]
        + observed["xray_usd_per_million"]
    )
    kms = kms_per_million(scale_lambda["ms_per_trigger"], prices)
    at_scale = (
        sum(r["usd_per_million_at_scale"] for r in rows)
        + scale_lambda["usd_per_million"]
        + storage["usd_per_million"]
        + fixed_share
        + kms["usd_per_million"]
        + observed_at_scale["logs_usd_per_million"]
        + observed_at_scale["xray_usd_per_million"]
    )

    measured_wru = sum(r["wru_per_trigger"] for r in rows)
    wru = sum(r["wru_per_trigger_at_scale"] for r in rows)  # what 10,000/s writes per trigger
    rru = sum(r["rru_per_trigger"] for r in rows)
    dynamo_on_demand = (wru * prices.wru + rru * prices.rru) * 1e6
    others = at_scale - dynamo_on_demand
    provisioned = {}
    for utilization in (1.0, 0.7):
        wcu = wru * SUSTAINED_PER_S / utilization
        rcu = rru * SUSTAINED_PER_S / utilization
        hourly = wcu * prices.wcu_hour + rcu * prices.rcu_hour
        per_million = hourly / (SUSTAINED_PER_S * 3600) * 1e6
        provisioned[f"{int(utilization * 100)}%"] = {
            "wcu": wcu,
            "rcu": rcu,
            "dynamodb_usd_per_million": per_million,
            "all_in_usd_per_million": per_million + others,
        }

    # EventBridge Scheduler + the same worker Lambda (one invocation per trigger, one PutItem of
    # the same record, its platform log lines) + that write + the same record's storage.
    write_wru = max(1, math.ceil(storage["record_bytes"] / 1024))
    eb_ms = LATENCY_MS["dynamodb.PutItem"] + INVOCATION_OVERHEAD_MS
    eb_lambda = prices.lambda_request + eb_ms / 1000 * prices.worker_mb / 1024 * prices.lambda_gb_s
    eb_lambda += PLATFORM_LOG_BYTES / 2**30 * prices.logs_gb
    eventbridge_all_in = (prices.scheduler + eb_lambda + write_wru * prices.wru) * 1e6 + storage[
        "record_only_usd_per_million"
    ]

    return {
        "triggers": load.triggers,
        "rows": rows,
        "storage": storage,
        "worker_lambda_measured": measured_lambda,
        "worker_lambda_at_scale": scale_lambda,
        "groups_at_10k": groups,
        "kms_at_10k": kms,
        "logs_and_traces_at_10k": observed_at_scale,
        "poller_lambda_usd_per_million_at_10k": poller_usd,
        "stepfunctions_usd_per_million_at_10k": sfn_usd,
        "measured_usd_per_million": measured,
        "on_demand_usd_per_million": at_scale,
        "dynamodb_units_per_trigger": {"wru": wru, "rru": rru, "wru_in_this_run": measured_wru},
        "timer_packing_wru_per_timer_at_10k": packing,
        "dynamodb_on_demand_usd_per_million": dynamo_on_demand,
        "provisioned_at_10k": provisioned,
        "eventbridge_scheduler_usd_per_million": prices.scheduler * 1e6,
        "eventbridge_all_in_usd_per_million": eventbridge_all_in,
        "eventbridge_all_in_quoted": EVENTBRIDGE_ALL_IN_QUOTED,
    }


def events_and_alerts(meter: Meter, prices: Prices, jobs: int, minutes: int) -> dict[str, Any]:
    """What execution events and alert rules add per trigger (see the module docstring)."""
    small = (16, 4)
    without = run(meter, "failing, events off", jobs, minutes, *small, failing_every=10)
    with_both = run(
        meter, "failing, events and alerts", jobs, minutes, *small, failing_every=10, events=True, alerts=True
    )
    triggers = max(with_both.triggers, 1)
    base = max(without.triggers, 1)
    events_usd = alerts_usd = 0.0
    entries = calls = 0.0
    for key, tally in with_both.tallies.items():
        phase, operation, _ = key
        if phase in ("setup", "registration", "done") or phase.endswith("(empty)"):
            continue
        usd = request_cost(key, tally, prices) / triggers * 1e6
        before = without.tallies.get(key)
        usd_before = request_cost(key, before, prices) / base * 1e6 if before is not None else 0.0
        if operation == "events.PutEvents":
            events_usd += usd
            entries += tally.items / triggers
            calls += tally.calls / triggers
        elif operation.startswith("dynamodb.") and phase == "worker":
            alerts_usd += usd - usd_before
    # The worker Lambda's extra duration: PutEvents calls and the alert writes' round trips.
    gb_s_usd = prices.worker_mb / 1024 * prices.lambda_gb_s
    extra_ms = (latency_ms(with_both.tallies, "worker") / triggers) - (
        latency_ms(without.tallies, "worker") / base
    )
    events_ms = calls * LATENCY_MS["events"]
    events_lambda = events_ms / 1000 * gb_s_usd * 1e6
    alerts_lambda = max(0.0, extra_ms - events_ms) / 1000 * gb_s_usd * 1e6
    alerts_per_trigger = with_both.alerts / triggers
    alerts_total = alerts_usd + alerts_lambda
    return {
        "triggers": with_both.triggers,
        "failing_share": 0.1,
        "event_entries_per_trigger": entries,
        "put_events_calls_per_trigger": calls,
        "events_usd_per_million": events_usd + events_lambda,
        "events_put_usd_per_million": events_usd,
        "events_lambda_usd_per_million": events_lambda,
        "alerts_raised": with_both.alerts,
        "alerts_per_trigger": alerts_per_trigger,
        "alerts_usd_per_million_triggers": alerts_total,
        "alerts_usd_per_million_alerts": alerts_total / alerts_per_trigger if alerts_per_trigger else None,
        "sns_publish_usd_per_million_alerts": benchlib.price(
            benchlib.load_prices(), "sns.publish_per_million"
        ),
    }


def print_events_and_alerts(figures: dict[str, Any]) -> None:
    per_alert = figures["alerts_usd_per_million_alerts"]
    rows = [
        (
            f"execution events: {figures['event_entries_per_trigger']:.2f} events,"
            f" {figures['put_events_calls_per_trigger']:.2f} PutEvents calls a trigger",
            figures["events_usd_per_million"],
        ),
        ("  of which EventBridge ($1.00 per million events)", figures["events_put_usd_per_million"]),
        ("  of which worker Lambda time (PutEvents round trips)", figures["events_lambda_usd_per_million"]),
        (
            f"alerts: 10 % of jobs failing every other minute ({figures['alerts_raised']} alerts,"
            f" {figures['alerts_per_trigger']:.3f} a trigger)",
            figures["alerts_usd_per_million_triggers"],
        ),
        ("jobs without alert rules (no store operation)", 0.0),
    ]
    print(benchlib.table(["$ per million triggers", "$/M"], rows))
    if per_alert is not None:
        print(
            f"one million alerts raised cost ${per_alert:.2f} in writes and Lambda time (+ the target:"
            f" SNS ${figures['sns_publish_usd_per_million_alerts']:.2f}/M publishes; webhooks free)"
        )


def leaner(rows: list[dict[str, Any]], prices: Prices) -> list[tuple[str, float]]:
    """What a leaner record or a skipped request would save, $ per million triggers."""
    out = []
    for r in rows:
        if r["wru_per_trigger"] and r["bytes_per_item"] > 1024:
            ideal = r["calls_per_trigger"] * 1.0  # one write unit per write if the item fit in 1 KB
            if r["operation"].endswith("BatchWriteItem") or r["operation"].endswith("PutItem"):
                ideal = r["wru_per_trigger"] / math.ceil(r["bytes_per_item"] / 1024)
            saved = (r["wru_per_trigger"] - ideal) * prices.wru * 1e6
            if saved > 0.0005:
                out.append(
                    (
                        f"{r['phase']} {r['operation']} {r['kind']}: {r['bytes_per_item']:,.0f} B items"
                        " -> under 1 KB",
                        saved,
                    )
                )
    return out
