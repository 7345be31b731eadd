"""The capacity model: 10 million jobs at 10,000 triggers per second, and a 600,000-slot burst.

From the requests a trigger makes (``cost_per_million.json``), the CPU they take
(``cpu_per_trigger.json``) and the published AWS limits below (each with its source), this
computes, for three settings profiles (the defaults, a "scale" profile and a "burst-ready"
profile): the shard groups (pollers), queues, worker concurrency and DynamoDB throughput
needed, the headroom at every limit, the first limit that breaks and at what rate, the
fire-delay distribution of a top-of-minute burst, and what each profile costs a month.

The burst is a fluid model: pollers release at their CPU-bound rate; workers start messages as
fast as the capacity that exists at each instant allows (drain ≈ messages x time per message ÷
concurrency), that capacity growing at the published ramps: an SQS event source adds 300
concurrent invokes a minute, a function 1,000 environments per 10 s (each one cold for a
second), and standing ECS tasks or provisioned environments are there from the start.

Everything here is arithmetic on explicit inputs and stated assumptions (``ASSUMPTIONS``;
``tests/unit/test_capacity.py`` checks it); nothing is measured here. The per-trigger figures
are read from ``bench/results`` each run, so a leaner trigger moves every figure. Run
``python bench/capacity.py`` after the CPU and cost benchmarks.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import benchlib

# --------------------------------------------------------------------------- published limits


@dataclass(frozen=True)
class Limit:
    value: float
    unit: str
    source: str
    adjustable: bool = False


CHECKED = "2026-11-30"
SQS_SCALING = "docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html"
LIMITS: dict[str, Limit] = {
    "dynamodb_partition_wcu": Limit(
        1000,
        "write units/s per partition",
        "docs.aws.amazon.com/amazondynamodb/latest/developerguide/TroubleshootingThrottlingOnDemand.html"
        f" (read {CHECKED})",
    ),
    "dynamodb_partition_rcu": Limit(
        3000,
        "read units/s per partition",
        f"same page (read {CHECKED})",
    ),
    "dynamodb_table_wru": Limit(
        40_000,
        "write request units/s per on-demand table (default quota)",
        f"repost.aws/knowledge-center/on-demand-table-throttling-dynamodb (read {CHECKED})",
        adjustable=True,
    ),
    "dynamodb_table_rru": Limit(
        40_000,
        "read request units/s per on-demand table (default quota)",
        f"same page (read {CHECKED})",
        adjustable=True,
    ),
    "dynamodb_new_table_wru": Limit(
        4000,
        "write units/s a new on-demand table takes at once (then double the previous peak per 30 min,"
        " or pre-set warm throughput, which is kept once set)",
        f"same page; docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput.html"
        f" (read {CHECKED})",
        adjustable=True,
    ),
    "sqs_fifo_tps": Limit(
        70_000,
        "transactions/s per API action per high-throughput FIFO queue, us-east-1 (x10 messages batched)",
        "docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html;"
        " figure as published by a public guide quoting it (70,000 TPS / 700,000 msgs/s), unverified here",
    ),
    "sqs_fifo_in_flight": Limit(
        120_000,
        "in-flight messages per FIFO queue",
        "SQS quotas page, raised from 20,000 in November 2024; as published, unverified here",
    ),
    "lambda_account_concurrency": Limit(
        1000,
        "concurrent executions per account and region (default quota)",
        f"{SQS_SCALING} (read {CHECKED})",
        adjustable=True,
    ),
    "lambda_scaling_rate": Limit(
        1000,
        "new execution environments per 10 s per function (each function scales on its own)",
        f"docs.aws.amazon.com/lambda/latest/dg/scaling-behavior.html (read {CHECKED})",
    ),
    "lambda_esm_max_concurrency": Limit(
        1000,
        "MaximumConcurrency of one SQS event source (2-1,000); FIFO: at most one per active message group",
        f"docs.aws.amazon.com/lambda/latest/dg/API_ScalingConfig.html and {SQS_SCALING} (read {CHECKED})",
    ),
    "lambda_esm_start": Limit(
        5,
        "concurrent invokes an SQS event source starts with when messages appear",
        f"{SQS_SCALING} (read {CHECKED})",
    ),
    "lambda_esm_ramp_per_min": Limit(
        300,
        "more concurrent invokes per minute per SQS event source, standard mode (stated for standard"
        " queues; the page gives no other rate for FIFO, so the model applies it to FIFO too)",
        f"{SQS_SCALING} (read {CHECKED})",
    ),
    "lambda_esm_provisioned_ramp_per_min": Limit(
        1000,
        "concurrent executions added per minute by an SQS event source in provisioned mode (up to 20,000);"
        " MinimumPollers 2-200, MaximumPollers 2-2,000 per event source",
        "aws.amazon.com/blogs/aws/aws-lambda-enhances-sqs-processing-with-new-provisioned-mode-3x-faster-"
        "scaling-16x-higher-capacity; docs.aws.amazon.com/lambda/latest/api/API_ProvisionedPollerConfig.html"
        f" (read {CHECKED}); FIFO support not stated there: unverified here",
    ),
    "lambda_esm_invokes_per_poller": Limit(
        10,
        "concurrent invokes one provisioned SQS event poller drives",
        "as recalled from the provisioned-mode section of services-sqs-scaling.html; unverified here",
    ),
    "lambda_vcpu_mb": Limit(
        1769,
        "MB of function memory per full vCPU",
        "docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html;"
        " as widely published, unverified here",
    ),
    "sfn_inline_map_concurrency": Limit(
        40,
        "concurrent iterations of an inline Map state",
        f"docs.aws.amazon.com/step-functions/latest/dg/state-map-inline.html (read {CHECKED})",
    ),
    "sfn_distributed_map_concurrency": Limit(
        10_000,
        "concurrent child workflow executions of a Distributed Map state (not used: see map_limit_for)",
        "docs.aws.amazon.com/step-functions/latest/dg/state-map-distributed.html;"
        " as published, unverified here",
    ),
    "fargate_launch_burst": Limit(
        100,
        "Fargate on-demand task launches at once (token bucket, per account and region)",
        "docs.aws.amazon.com/AmazonECS/latest/developerguide/throttling.html (read 2026-12-01)",
    ),
    "fargate_launch_rate": Limit(
        20,
        "Fargate on-demand task launches a second, sustained (the same bucket's refill)",
        "same page (read 2026-12-01)",
    ),
    "apigw_account_rps": Limit(
        10_000,
        "requests/s per account and region across APIs (burst 5,000)",
        f"docs.aws.amazon.com/apigateway/latest/developerguide/limits.html (read {CHECKED})",
        adjustable=True,
    ),
}

# Prices bench/prices.json does not carry (us-east-1, arm64), with where they come from.
EXTRA_PRICES: dict[str, tuple[float, str]] = {
    "lambda_provisioned_gb_s": (
        0.0000033334,
        "Lambda provisioned concurrency, arm64, per GB-second kept warm: aws.amazon.com/lambda/pricing/;"
        " as widely published, unverified here",
    ),
    "fargate_vcpu_hour": (
        0.03238,
        "Fargate Linux/ARM per vCPU-hour: aws.amazon.com/fargate/pricing/;"
        " as widely published, unverified here",
    ),
    "fargate_gb_hour": (
        0.00356,
        "Fargate Linux/ARM per GB-hour: same page; as widely published, unverified here",
    ),
}

# What the model takes as given where nothing measured or published says more.
ASSUMPTIONS: dict[str, tuple[float, str]] = {
    "cold_start_s": (
        1.0,
        "a new worker environment's init (Python, boto3, Powertools, the layer) before its first message",
    ),
    "ecs_cpu_efficiency": (
        0.8,
        "share of one vCPU an ECS worker process turns into work with 32 threads under the GIL",
    ),
    "ecs_lease_wru": (
        1.0,
        "an ECS worker writes a backstop LEASE timer per execution: one more write, due past the far"
        " threshold (its lease itself is 8 s, renewed on the record and the message), so into a far shard",
    ),
    "burst_margin": (
        0.9,
        "the burst-ready search aims at 90 % of each target (4.5 s p99, 9 s all started) for what the"
        " fluid model leaves out: a batch's tenth message starts 9 messages after its first (~0.2 s),"
        " pollers start a few hundred ms apart",
    ),
    "fargate_start_s": (
        60.0,
        "from UpdateService to a burst task long-polling: Fargate placement, ENI, pull of the ~200 MB"
        " worker image, interpreter start (no published figure; commonly reported 30-60 s)",
    ),
    "fargate_stop_s": (
        10.0,
        "from the scale-back to a burst task's end: an idle worker drains at once after SIGTERM",
    ),
    "tick_s": (
        2.0,
        "when in its minute the tick runs (EventBridge's every-minute rule fires in the first seconds)",
    ),
    "sqs_send_ms": (10.0, "SendMessageBatch latency (bench/cost_per_million.py's assumption, read from it)"),
    "batch_get_ms": (8.0, "BatchGetItem latency (same)"),
    "batch_write_ms": (10.0, "BatchWriteItem latency (same)"),
}


def assumed(name: str) -> float:
    return ASSUMPTIONS[name][0]


SECONDS_A_MONTH = 86_400 * 365 / 12
MINUTES_A_MONTH = SECONDS_A_MONTH / 60
DEPLOYABLE_MAX_QUEUES = 10  # infra/constants.py MAX_QUEUE_COUNT
DEPLOYABLE_MAX_GROUPS = 256  # infra/constants.py MAX_SHARD_GROUPS (a Parallel of 7 inline Maps)

# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Deployment:
    """The settings that decide capacity (defaults: infra/constants.py, cdk.json, punctual.settings)."""

    shard_count: int = 512
    near_shard_count: int = 32
    queue_count: int = 1
    worker_functions: int = 1  # one worker function drains every short queue (per-queue: not deployable)
    worker_max_concurrency: int = 200  # per queue (event source MaximumConcurrency)
    account_concurrency: int = 1000  # a Service Quotas request, not a cdk.json key
    max_shard_groups: int = 40
    triggers_per_poller_minute: int = 60_000
    batch_size: int = 10
    send_concurrency: int = 8  # the poller's release threads (punctual.settings.queue_send_concurrency)
    poller_memory_mb: int = 1024
    worker_memory_mb: int = 512
    poller_minute_s: float = 75.0  # lead 10 s + minute + grace 5 s
    poll_interval_s: float = 1.0
    near_lookback_s: float = 7.0  # skew 5 s + two poll intervals
    table_wru: float = 40_000  # the table quota (Service Quotas)
    table_rru: float = 40_000
    warm_wru: float = 0  # pre-set warm throughput (cdk.json tableWarmWriteUnitsPerSecond; 0: none)
    warm_rru: float = 0
    prewarmed_workers: int = 0  # provisioned concurrency across the worker functions
    esm_mode: str = "standard"  # or "provisioned" (MinimumPollers held)
    esm_min_pollers: int = 0  # per event source, provisioned mode
    ecs_burst_tasks: int = 0  # standing ECS worker tasks that also drain the short queues
    ecs_task_vcpu: float = 1.0
    ecs_task_gb: float = 2.0
    ecs_threads: int = 32
    poller_billed_s: float = 80.0  # what a poller is billed a minute (cost bench: lead and grace included)
    # Where the ECS workers' LEASE timers go: "far" (a backstop due past the far threshold, as the
    # workers write it since issue 30) or "near" (a LEASE timer at the lease's end: the old design)
    lease_lane: str = "far"


CDK_CONTEXT_KEYS = {
    "shard_count": "shardCount",
    "near_shard_count": "nearShardCount",
    "queue_count": "queueCount",
    "worker_max_concurrency": "workerMaxConcurrency",
    "max_shard_groups": "maxShardGroups",
    "triggers_per_poller_minute": "triggersPerPollerMinute",
    "ecs_burst_tasks": "ecsBurstTasks",
    "ecs_threads": "ecsBurstConcurrency",
    "poller_memory_mb": "pollerMemoryMb",
    "worker_memory_mb": "workerMemoryMb",
    "batch_size": "workerBatchSize",
    "warm_wru": "tableWarmWriteUnitsPerSecond",
    "warm_rru": "tableWarmReadUnitsPerSecond",
}


def deployed_defaults() -> Deployment:
    """The defaults as cdk.json has them now (the dataclass's where a key is missing)."""
    try:
        context = json.loads((benchlib.ROOT / "cdk.json").read_text())["context"]
    except (OSError, KeyError, ValueError):
        return Deployment()
    found = {attr: int(context[key]) for attr, key in CDK_CONTEXT_KEYS.items() if key in context}
    return replace(Deployment(), **found)


@dataclass(frozen=True)
class PerTrigger:
    """What one trigger costs, measured by the CPU and cost benchmarks (defaults: their figures)."""

    timer_wru: float = 1.0  # the poller's next-timer write (packing timers makes this < 1)
    exec_wru: float = 2.0  # the worker's claim and finish
    rru: float = 1.18
    timer_bytes: float = 182.0
    poller_cpu_us_near: float = 660.0  # core + marshalling + botocore, a near-lane timer
    poller_cpu_us_far: float = 390.0  # a far-lane timer is read once, not ~8 times
    far_query_cpu_us: float = 36.0  # of which the far Query, done a minute ahead
    worker_cpu_us: float = 1006.0
    put_item_cpu_us: float = 305.0  # botocore's CPU for one PutItem (an ECS worker's LEASE timer)
    worker_io_ms: float = 16.0  # GetItem + two PutItem at typical latencies
    target_ms: float = 0.0  # the job's own run time (0: the scheduler's overhead alone)
    near_share: float = 0.5  # share of triggers whose next timer is in the near lane

    @property
    def wru(self) -> float:
        return self.timer_wru + self.exec_wru

    @property
    def poller_cpu_us(self) -> float:
        return self.near_share * self.poller_cpu_us_near + (1 - self.near_share) * self.poller_cpu_us_far

    @property
    def release_cpu_us(self) -> float:
        """Poller CPU per slot at its instant: the far lane's Query was done a minute ahead."""
        far = self.poller_cpu_us_far - self.far_query_cpu_us
        return self.near_share * self.poller_cpu_us_near + (1 - self.near_share) * far


def load_measured() -> PerTrigger:
    """The benchmarks' figures where they ran; the defaults otherwise."""
    per = PerTrigger()
    try:
        cpu = json.loads((benchlib.RESULTS_DIR / "cpu_per_trigger.json").read_text())
        sdk = cpu["sdk_cpu_us_per_request"]
        core = (
            cpu["us_per_trigger"]["no_copy_store"]["dispatch"]
            + cpu["us_per_trigger"]["dynamo_marshalling"] / 2
        )
        fixed = sdk["SendMessageBatch (10)"] / 10 + sdk["BatchWriteItem (25 timers)"] / 25
        fixed += sdk["BatchGetItem (100 jobs)"] / 100
        query = sdk["Query (100 timers)"] / 100
        per = replace(
            per,
            poller_cpu_us_near=float(cpu["poller_cpu_us_per_trigger"]),
            poller_cpu_us_far=core + fixed + query,
            far_query_cpu_us=query,
            worker_cpu_us=float(cpu["worker_cpu_us_per_trigger"]),
            put_item_cpu_us=float(sdk.get("PutItem (execution)", per.put_item_cpu_us)),
        )
    except (OSError, KeyError, ValueError):
        pass
    try:
        cost = json.loads((benchlib.RESULTS_DIR / "cost_per_million.json").read_text())
        summary = cost["summary"]
        units = summary["dynamodb_units_per_trigger"]
        io_ms = summary["worker_lambda_at_scale"]["io_ms_per_trigger"]
        # The poller's writes are the next timers; every other write is the worker's.
        timer = sum(
            r.get("wru_per_trigger_at_scale", r["wru_per_trigger"])
            for r in summary.get("rows", [])
            if r["phase"] == "poller"
        )
        timer = timer if summary.get("rows") else per.timer_wru
        per = replace(
            per,
            timer_wru=float(timer),
            exec_wru=float(units["wru"]) - float(timer),
            rru=float(units["rru"]),
            worker_io_ms=float(io_ms),
        )
    except (OSError, KeyError, ValueError, TypeError):
        pass
    return per


def load_cost() -> dict[str, Any]:
    try:
        return dict(json.loads((benchlib.RESULTS_DIR / "cost_per_million.json").read_text()))
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------------- arithmetic


def vcpu(memory_mb: float) -> float:
    """Lambda's CPU share: one vCPU per 1,769 MB."""
    return memory_mb / LIMITS["lambda_vcpu_mb"].value


def python_vcpu(memory_mb: float) -> float:
    """What one Python process uses of it: at most one vCPU (the GIL), whatever the memory."""
    return min(1.0, vcpu(memory_mb))


def poller_rate(d: Deployment, p: PerTrigger, lane: str = "mixed") -> float:
    """Triggers per second one poller handles when its CPU is the bound (it is: see the CPU bench).

    ``lane``: "far" (read once a minute), "near" (re-read every poll of the look-back),
    "mixed" (the sustained share) or "release" (at a burst's instant: the far Query was done
    a minute ahead).
    """
    cpu = {
        "far": p.poller_cpu_us_far,
        "near": p.poller_cpu_us_near,
        "release": p.release_cpu_us,
    }.get(lane, p.poller_cpu_us)
    return python_vcpu(d.poller_memory_mb) * 1e6 / cpu


def poller_io_rate(d: Deployment) -> float:
    """The poller's I/O bound: each release thread handles a chunk of 100 slots with one
    BatchGetItem, ten SendMessageBatch and four BatchWriteItem one after another."""
    chunk_s = (assumed("batch_get_ms") + 10 * assumed("sqs_send_ms") + 4 * assumed("batch_write_ms")) / 1000
    return d.send_concurrency * 100 / chunk_s


def release_rate(d: Deployment, p: PerTrigger) -> float:
    """Slots per second one poller releases at a burst's instant: CPU or I/O, whichever binds."""
    return min(poller_rate(d, p, "release"), poller_io_rate(d))


def worker_seconds(d: Deployment, p: PerTrigger) -> float:
    """Seconds one worker environment spends per message: I/O, CPU at its share, the target."""
    return (
        p.worker_io_ms / 1000 + p.worker_cpu_us / 1e6 / python_vcpu(d.worker_memory_mb) + p.target_ms / 1000
    )


def ecs_task_rate(d: Deployment, p: PerTrigger) -> float:
    """Messages per second one standing ECS worker task starts: its CPU (one Python process,
    plus the LEASE timer write) or its threads over the I/O, whichever binds."""
    cpu_s = (p.worker_cpu_us + p.put_item_cpu_us) / 1e6
    by_cpu = min(1.0, d.ecs_task_vcpu) * assumed("ecs_cpu_efficiency") / cpu_s
    by_io = d.ecs_threads / (p.worker_io_ms / 1000 + p.target_ms / 1000)
    return min(by_cpu, by_io)


def ecs_share(rate: float, d: Deployment, p: PerTrigger) -> float:
    """Share of a sustained ``rate`` the standing ECS tasks take: they long-poll the same short
    queues all the time, so the model gives them all they can start (an upper bound)."""
    if not d.ecs_burst_tasks or rate <= 0:
        return 0.0
    return min(1.0, d.ecs_burst_tasks * ecs_task_rate(d, p) / rate)


def groups_for(rate_per_s: float, d: Deployment) -> int:
    """Shard groups the tick plans for a minute of this load (punctual.tick.group_count_for)."""
    needed = math.ceil(rate_per_s * 60 / d.triggers_per_poller_minute) if rate_per_s else 0
    return min(max(1, needed), d.max_shard_groups, d.shard_count)


def worker_concurrency_cap(d: Deployment) -> int:
    return min(d.queue_count * d.worker_max_concurrency, d.account_concurrency)


def query_read_units(items: float, item_bytes: float) -> float:
    """Strongly consistent read units of one Query returning ``items`` items."""
    return max(1.0, math.ceil(items * item_bytes / 4096))


@dataclass
class Check:
    name: str
    demand: float
    limit: float
    unit: str
    source: str
    scales_with_rate: bool = True

    @property
    def headroom(self) -> float:
        return self.limit / self.demand if self.demand > 0 else math.inf

    def breaks_at(self, rate: float) -> float | None:
        """The rate at which this limit is reached (when demand grows with the rate)."""
        return rate * self.headroom if self.scales_with_rate and self.demand > 0 else None


def map_slices(max_groups: int) -> int:
    """Inline Maps the minute state machine runs side by side for ``maxShardGroups`` (dispatch.py)."""
    return math.ceil(max_groups / LIMITS["sfn_inline_map_concurrency"].value)


def map_limit_for(pollers: int) -> Limit:
    """The most pollers the minute state machine that runs this many can run: one inline Map's 40
    up to 40; beyond, a Parallel state of ceil(maxShardGroups / 40) inline Maps, which the app
    builds up to maxShardGroups 256 (infra/components/dispatch.py; chosen over a Distributed Map)."""
    inline = LIMITS["sfn_inline_map_concurrency"]
    if map_slices(pollers) <= 1:
        return inline
    return Limit(
        DEPLOYABLE_MAX_GROUPS,
        f"pollers a minute in a Parallel state of up to {map_slices(DEPLOYABLE_MAX_GROUPS)} inline Maps"
        f" ({inline.value:.0f} each; maxShardGroups <= {DEPLOYABLE_MAX_GROUPS}, infra/constants.py)",
        inline.source,
    )


def sustained_checks(rate: float, d: Deployment, p: PerTrigger) -> list[Check]:
    """Every limit a sustained ``rate`` (triggers/s) meets, with demand and headroom."""
    groups = groups_for(rate, d)
    near_per_shard = rate * p.near_share / d.near_shard_count
    near_query_items = near_per_shard * (d.near_lookback_s + d.poll_interval_s)
    overlap = d.poller_minute_s / 60  # consecutive minutes' pollers overlap
    near_rcu = query_read_units(near_query_items, p.timer_bytes) / d.poll_interval_s * overlap
    concurrency = rate * worker_seconds(d, p)
    pollers = math.ceil(groups * overlap)
    sends = rate / d.batch_size / d.queue_count
    lease = assumed("ecs_lease_wru") * ecs_share(rate, d, p)  # LEASE timers of ECS-started triggers
    lim = LIMITS
    map_limit = map_limit_for(d.max_shard_groups)
    return [
        Check(
            "DynamoDB table writes",
            rate * (p.wru + lease),
            d.table_wru,
            "WRU/s",
            lim["dynamodb_table_wru"].source,
        ),
        Check("DynamoDB table reads", rate * p.rru, d.table_rru, "RRU/s", lim["dynamodb_table_rru"].source),
        Check(
            "far bucket partition writes (next timers of one minute)",
            rate * p.timer_wru / d.shard_count,
            lim["dynamodb_partition_wcu"].value,
            "WRU/s per key",
            lim["dynamodb_partition_wcu"].source,
        ),
        Check(
            "near bucket partition writes",
            (near_per_shard * p.timer_wru + rate * lease / d.near_shard_count),
            lim["dynamodb_partition_wcu"].value,
            "WRU/s per key",
            lim["dynamodb_partition_wcu"].source,
        ),
        Check(
            "near bucket partition reads (look-back re-reads)",
            near_rcu,
            lim["dynamodb_partition_rcu"].value,
            "RCU/s per key",
            lim["dynamodb_partition_rcu"].source,
        ),
        Check(
            f"poller release rate ({groups} groups planned x {poller_rate(d, p):,.0f}/s)",
            rate,
            groups * poller_rate(d, p),
            "triggers/s",
            "measured CPU per trigger (bench/cpu_per_trigger.py) at the poller's vCPU share (at most one)",
        ),
        Check(
            "Step Functions Map (shard groups)",
            groups,
            map_limit.value,
            "concurrent pollers",
            map_limit.source,
        ),
        Check(
            "SQS FIFO SendMessageBatch per queue",
            sends,
            lim["sqs_fifo_tps"].value,
            "TPS",
            lim["sqs_fifo_tps"].source,
        ),
        Check(
            "SQS FIFO ReceiveMessage + DeleteMessageBatch per queue",
            sends,
            lim["sqs_fifo_tps"].value,
            "TPS each",
            lim["sqs_fifo_tps"].source,
        ),
        Check(
            "SQS FIFO in-flight messages per queue",
            min(concurrency / d.queue_count, d.worker_max_concurrency) * d.batch_size,
            lim["sqs_fifo_in_flight"].value,
            "messages",
            lim["sqs_fifo_in_flight"].source,
        ),
        Check(
            f"worker concurrency ({worker_seconds(d, p) * 1000:.1f} ms a message)",
            concurrency,
            worker_concurrency_cap(d),
            "environments",
            "queueCount x workerMaxConcurrency (event-source MaximumConcurrency), within the account quota",
        ),
        Check(
            "Lambda account concurrency (workers + pollers)",
            concurrency + pollers,
            d.account_concurrency,
            "environments",
            lim["lambda_account_concurrency"].source,
        ),
    ]


def first_break(checks: list[Check], rate: float) -> tuple[Check, float] | None:
    """The limit reached first as the rate grows, and the rate at which it is reached."""
    candidates = [(c, c.breaks_at(rate)) for c in checks if c.breaks_at(rate) is not None]
    if not candidates:
        return None
    check, at = min(candidates, key=lambda pair: pair[1])  # type: ignore[arg-type,return-value]
    return check, float(at)  # type: ignore[arg-type]


def least(checks: list[Check]) -> Check:
    return min(checks, key=lambda c: c.headroom)


def _round_up(value: float, step: float) -> float:
    return math.ceil(value / step) * step


def scale_settings(rate: float, d: Deployment, p: PerTrigger, target: float = 2.0) -> Deployment:
    """The smallest change to ``d`` that gives ``target`` headroom at every sustained limit.

    In order of preference: settings cdk.json already has (event-source concurrency, queues,
    poller memory up to one vCPU, near shards, warm throughput), then account quotas (table
    throughput, Lambda concurrency: Service Quotas requests), then a lower
    triggers_per_poller_minute (more pollers per minute: not a cdk.json key yet).
    """
    workers = target * rate * worker_seconds(d, p)
    queues = max(d.queue_count, math.ceil(workers / LIMITS["lambda_esm_max_concurrency"].value))
    tuned = replace(d, queue_count=queues, worker_max_concurrency=max(2, math.ceil(workers / queues)))
    for memory in sorted({d.poller_memory_mb, max(d.poller_memory_mb, int(LIMITS["lambda_vcpu_mb"].value))}):
        tuned = replace(tuned, poller_memory_mb=memory)
        if groups_for(rate, tuned) * poller_rate(tuned, p) >= target * rate:
            break
    else:
        per_minute = int(poller_rate(tuned, p) * 60 / target)
        tuned = replace(tuned, triggers_per_poller_minute=per_minute)
    near_keys = target * rate * p.near_share * p.timer_wru / LIMITS["dynamodb_partition_wcu"].value
    tuned = replace(tuned, near_shard_count=int(max(d.near_shard_count, _round_up(near_keys, 8))))
    far_keys = target * rate * p.timer_wru / LIMITS["dynamodb_partition_wcu"].value
    tuned = replace(tuned, shard_count=int(max(d.shard_count, _round_up(far_keys, 64))))
    wru = max(d.table_wru, _round_up(target * rate * p.wru, 1000))
    rru = max(d.table_rru, _round_up(target * rate * p.rru, 1000))
    tuned = replace(tuned, table_wru=wru, table_rru=rru, warm_wru=wru, warm_rru=rru)
    groups = groups_for(rate, tuned)
    environments = rate * worker_seconds(tuned, p) + math.ceil(groups * tuned.poller_minute_s / 60)
    return replace(
        tuned,
        account_concurrency=int(max(d.account_concurrency, _round_up(target * environments, 100))),
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
    cap = min(d.queue_count * d.worker_max_concurrency, d.account_concurrency - pollers)
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


def burst_checks(b: Burst, d: Deployment) -> list[Check]:
    """The limits a burst meets while it is released and started."""
    lim = LIMITS
    warm = max(d.warm_wru, lim["dynamodb_new_table_wru"].value)
    map_limit = map_limit_for(b.groups)
    return [
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
    table quota and warm throughput for its write peak, and triggers_per_poller_minute so
    that the tick plans those pollers for a minute of that load. Returns the settings and the
    pollers per burst minute."""
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
            account_concurrency=max(d.account_concurrency, int(_round_up(n + 2 * groups, 100))),
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
    wru = _round_up(b.peak_wru, 10_000)
    near_shards = int(max(ready.near_shard_count, _round_up(near, 32)))
    ready = replace(
        ready,
        near_shard_count=near_shards,
        # infra/config.py: nearShardCount may not exceed shardCount
        shard_count=int(max(ready.shard_count, _round_up(far, 64), near_shards)),
        table_wru=max(ready.table_wru, wru),
        warm_wru=max(ready.warm_wru, wru),
        max_shard_groups=max(ready.max_shard_groups, groups),
        # the tick plans a minute's pollers from its load: this many a poller gives ``groups``
        triggers_per_poller_minute=min(ready.triggers_per_poller_minute, _per_poller(slots, groups)),
    )
    return ready, groups


# --------------------------------------------------------------------------- predictive scaling


def predictive_settings(ready: Deployment, groups: int, defaults: Deployment) -> Deployment:
    """The burst-ready settings without standing capacity: the burst tasks are started ahead of
    a planned burst by the tick (punctual.scaling) and stopped after it; pollers stay at the
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
    :func:`punctual.scaling.plan_capacity`), when each part is ready, the burst itself, what one
    burst costs, and what the deployment costs a month while idle."""
    from datetime import UTC, datetime, timedelta

    from punctual.scaling import CapacityProfile, need_for, plan_capacity

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
        "table_wru": _round_up(burst.peak_wru, 10_000),  # quota and warm throughput the burst needs
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


# --------------------------------------------------------------------------- report


def check_rows(checks: list[Check]) -> list[tuple[Any, ...]]:
    return [(c.name, c.demand, c.limit, c.unit, c.headroom) for c in checks]


def check_json(checks: list[Check]) -> list[dict[str, Any]]:
    return [{**asdict(c), "headroom": c.headroom} for c in checks]


def burst_json(b: Burst) -> dict[str, Any]:
    return asdict(b)


def profile_summary(
    name: str,
    d: Deployment,
    rate: float,
    checks: list[Check],
    burst: Burst,
    groups: int,
    cost: dict[str, float | None],
) -> dict[str, Any]:
    low = least(checks)
    brk = first_break(checks, rate)
    bchecks = burst_checks(burst, d)
    return {
        "name": name,
        "settings": asdict(d),
        "least_headroom": low.headroom,
        "least_headroom_limit": low.name,
        "first_break": {"limit": brk[0].name, "rate": brk[1]} if brk else None,
        "headroom_2x": all(c.headroom >= 2 for c in checks),
        "burst": {k: v for k, v in asdict(burst).items() if k != "curve"},
        "burst_checks": check_json(bchecks),
        "burst_limits_hold": all(c.headroom >= 1 for c in bchecks),
        "burst_met": burst.started_by_s <= 10 and burst.p99_s <= 5,
        "pollers_per_minute": groups,
        "usd_per_month": cost,
        "deploy": deployability(d, groups, deployed_defaults()),
    }


def print_profile(title: str, summary: dict[str, Any], checks: list[Check]) -> None:
    benchlib.heading(title)
    print(benchlib.table(["limit", "demand", "limit", "unit", "headroom"], check_rows(checks), align="lrrlr"))
    brk = summary["first_break"]
    print(
        f"least headroom {summary['least_headroom']:.2f}x ({summary['least_headroom_limit']});"
        f" first limit reached: {brk['limit']} at {brk['rate']:,.0f} triggers/s"
        if brk
        else "no limit scales with the rate"
    )
    deploy = summary["deploy"]
    print(f"cdk.json context: {json.dumps(deploy['context']) if deploy['context'] else '(defaults)'}")
    for quota in deploy["quotas"]:
        print(f"quota request: {quota}")
    for note in deploy.get("notes", []):
        print(f"note: {note}")
    for change in deploy["not_deployable"]:
        print(f"NOT DEPLOYABLE YET: {change}")
    cost = summary["usd_per_month"]
    print("$ a month: " + ", ".join(f"{k} {'?' if v is None else f'{v:,.0f}'}" for k, v in cost.items()))


PRED = "predictive: burst tasks started ahead by the tick"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rate", type=float, default=10_000)
    parser.add_argument("--jobs", type=int, default=10_000_000)
    parser.add_argument("--burst", type=int, default=600_000)
    parser.add_argument("--target-ms", type=float, default=0.0, help="the jobs' own run time")
    parser.add_argument("--no-json", action="store_true")
    args = parser.parse_args()

    per = replace(load_measured(), target_ms=args.target_ms)
    cost_results = load_cost()
    prices = benchlib.load_prices()
    latency = cost_results.get("assumptions", {}).get("latency_ms", {})
    for key, op in (
        ("sqs_send_ms", "sqs"),
        ("batch_get_ms", "dynamodb.BatchGetItem"),
        ("batch_write_ms", "dynamodb.BatchWriteItem"),
    ):
        if op in latency:
            ASSUMPTIONS[key] = (float(latency[op]), ASSUMPTIONS[key][1])
    rate = args.rate
    defaults = deployed_defaults()
    print(
        f"per trigger: {per.timer_wru:.2f} timer WRU + {per.exec_wru:.2f} execution WRU, {per.rru:.2f} RRU;"
        f" poller CPU {per.poller_cpu_us:.0f} µs mixed, {per.release_cpu_us:.0f} µs at a burst's instant;"
        f" worker {worker_seconds(defaults, per) * 1000:.1f} ms a message at {defaults.worker_memory_mb} MB"
        f" (target {per.target_ms:.0f} ms); an ECS task starts {ecs_task_rate(defaults, per):,.0f} messages/s"
    )

    def evaluate(name: str, d: Deployment, groups: int) -> tuple[dict[str, Any], list[Check], Burst]:
        """One profile: its sustained checks, its burst (``groups`` pollers), its monthly cost."""
        checks = sustained_checks(rate, d, per)
        burst = simulate_burst(args.burst, d, per, groups)
        cost = monthly_cost(d, per, rate, groups, cost_results, prices)
        return profile_summary(name, d, rate, checks, burst, groups, cost), checks, burst

    # (a) the defaults, (b) the scale profile: >= 2x at every sustained limit
    summary_default, checks, burst_default = evaluate("defaults", defaults, groups_for(rate, defaults))
    print_profile(f"(a) defaults at {rate:,.0f} triggers/s, {args.jobs:,} jobs", summary_default, checks)
    scale = scale_settings(rate, defaults, per)
    summary_scale, scale_checks, burst_scale = evaluate("scale", scale, groups_for(rate, scale))
    print_profile(f"(b) scale profile: >= 2x headroom at {rate:,.0f}/s", summary_scale, scale_checks)

    # (c) burst-ready: standing ECS workers, and the Lambda-only alternative
    bursts: dict[str, Burst] = {
        "defaults, cold workers": burst_default,
        "scale profile, from idle": burst_scale,
        "scale profile, its workers pre-warmed (standard event sources)": simulate_burst(
            args.burst, replace(scale, prewarmed_workers=worker_concurrency_cap(scale)), per
        ),
    }
    found = burst_ready_settings(args.burst, scale, per, "ecs")
    summary_ready: dict[str, Any] | None = None
    ready_checks: list[Check] = []
    if found:
        summary_ready, ready_checks, bursts["burst-ready: standing ECS workers"] = evaluate(
            "burst-ready (ECS)", *found
        )
        title = f"(c) burst-ready profile: a {args.burst:,}-slot minute every minute"
        print_profile(title, summary_ready, ready_checks)
    found_lambda = burst_ready_settings(args.burst, scale, per, "lambda")
    summary_lambda: dict[str, Any] | None = None
    if found_lambda:
        label = "burst-ready alternative: provisioned Lambda, a function per queue"
        summary_lambda, alt_checks, bursts[label] = evaluate("burst-ready (Lambda)", *found_lambda)
        print_profile("(c') burst-ready alternative: Lambda only", summary_lambda, alt_checks)

    # (d) predictive: the burst-ready capacity started ahead of a planned burst, none standing
    summary_pred: dict[str, Any] | None = None
    predicted: dict[str, Any] | None = None
    if found:
        pred = predictive_settings(found[0], found[1], defaults)
        predicted = predictive_burst(args.burst, pred, per, cost_results, prices)
        wru = max(pred.table_wru, predicted["table_wru"])
        pred = replace(
            pred,
            max_shard_groups=max(pred.max_shard_groups, predicted["pollers"]),
            table_wru=wru,
            warm_wru=wru,
        )
        summary_pred, pred_checks, _ = evaluate("predictive", pred, groups_for(rate, pred))
        summary_pred["deploy"]["context"].update(
            {
                "ecsBurstTasks": 0,
                "ecsBurstTasksMax": predicted["burst_tasks"],
                "burstTriggersPerPoller": predicted["burst_triggers_per_poller"],
                "burstLatenessTargetS": predicted["lateness_target_s"],
            }
        )
        print_profile(
            f"(d) predictive scaling: a {args.burst:,}-slot minute now and then, nothing standing",
            summary_pred,
            pred_checks,
        )
        b = predicted["burst"]
        bursts[PRED] = simulate_burst(
            args.burst,
            replace(pred, ecs_burst_tasks=predicted["burst_tasks"]),
            per,
            predicted["pollers"],
        )
        print(
            f"burst: {predicted['burst_tasks']} tasks and {predicted['pollers']} pollers;"
            f" p99 {b['p99_s']:.2f} s,"
            f" all started {b['started_by_s']:.2f} s ({'MET' if predicted['met'] else 'MISSED'});"
            f" far key {predicted['far_key_wru']:,.0f} WRU/s, near key {predicted['near_key_wru']:,.0f} WRU/s"
        )
        print("time line of the burst minute (s from its instant):")
        for what, at in predicted["timeline"]:
            print(f"  {at:+8.2f}  {what}")
        cost_line = ", ".join(f"{k} ${v:,.3f}" for k, v in predicted["usd_per_burst"].items())
        print(
            f"$ per burst: {cost_line};"
            f" the triggers' own traffic ${predicted['usd_per_burst_triggers'] or 0:,.2f}"
        )
        idle_line = ", ".join(
            f"{k} ${v:,.2f}" for k, v in predicted["idle_usd_per_month"].items() if v is not None
        )
        print(f"$ a month idle: {idle_line}")

    benchlib.heading(f"A {args.burst:,}-slot top-of-minute burst")
    rows = []
    for label, b in bursts.items():
        rows.append(
            (
                label,
                b.groups,
                b.release_s,
                b.start_concurrency,
                b.max_concurrency,
                b.ecs_rate,
                b.p50_s,
                b.p90_s,
                b.p99_s,
                b.started_by_s,
                b.peak_wru,
                b.near_key_wru,
            )
        )
    print(
        benchlib.table(
            [
                "scenario",
                "pollers",
                "release s",
                "Lambda at 0",
                "Lambda max",
                "ECS msgs/s",
                "p50 s",
                "p90 s",
                "p99 s",
                "all s",
                "peak WRU/s",
                "near WRU/s/key",
            ],
            rows,
        )
    )
    message_s = worker_seconds(defaults, per)
    cap = worker_concurrency_cap(defaults)
    print(
        f"drain estimate at defaults: {args.burst:,} x {message_s * 1000:.1f} ms / {cap}"
        f" = {drain_seconds(args.burst, message_s, cap):.0f} s (at full concurrency; the event source"
        f" adds {LIMITS['lambda_esm_ramp_per_min'].value:.0f} concurrent invokes a minute from"
        f" {LIMITS['lambda_esm_start'].value:.0f})"
    )
    for title, summary in (("burst-ready (ECS)", summary_ready), ("burst-ready (Lambda)", summary_lambda)):
        if summary:
            for c in summary["burst_checks"]:
                print(
                    f"{title} burst check: {c['name']}: {c['demand']:,.0f} of {c['limit']:,.0f}"
                    f" ({c['headroom']:.2f}x)"
                )

    import quotas  # it reads this module's limits and model: imported once both exist

    quota_ledger = quotas.report(  # every quota with its source; each burst under all of them
        rate,
        defaults,
        per,
        {"defaults": (burst_default, defaults), **({"predictive": (bursts[PRED], pred)} if found else {})},
    )
    verdicts = {
        "headroom_2x_defaults": summary_default["headroom_2x"],
        "headroom_2x_tuned": summary_scale["headroom_2x"],
        "headroom_2x_scale_deployable_by_cdk_json": summary_scale["headroom_2x"]
        and not summary_scale["deploy"]["not_deployable"],
        "burst_defaults_all_within_10s": burst_default.started_by_s <= 10,
        "burst_defaults_p99_within_5s": burst_default.p99_s <= 5,
        "burst_ready_met": bool(summary_ready and summary_ready["burst_met"]),
        "burst_ready_limits_hold": bool(summary_ready and summary_ready["burst_limits_hold"]),
        "burst_ready_deployable_by_cdk_json": bool(
            summary_ready and not summary_ready["deploy"]["not_deployable"]
        ),
        "predictive_burst_met": bool(predicted and predicted["met"]),
        "predictive_idle_within_15_usd": bool(predicted and predicted["idle_usd_per_month"]["total"] <= 15.0),
        "predictive_sustained_headroom_2x": bool(summary_pred and summary_pred["headroom_2x"]),
    }
    print("targets:", ", ".join(f"{k} {'MET' if v else 'MISSED'}" for k, v in verdicts.items()))
    if not args.no_json:
        profiles = {"defaults": summary_default, "scale": summary_scale}
        if summary_ready:
            profiles["burst_ready"] = summary_ready
        if summary_lambda:
            profiles["burst_ready_lambda"] = summary_lambda
        if summary_pred:
            profiles["predictive"] = summary_pred
        benchlib.write_result(
            "capacity",
            {
                "rate": rate,
                "jobs": args.jobs,
                "burst_slots": args.burst,
                "per_trigger": {
                    **asdict(per),
                    "wru": per.wru,
                    "poller_cpu_us": per.poller_cpu_us,
                    "release_cpu_us": per.release_cpu_us,
                },
                "limits": {k: asdict(v) for k, v in LIMITS.items()},
                "extra_prices": {k: {"usd": v, "source": s} for k, (v, s) in EXTRA_PRICES.items()},
                "assumptions": {k: {"value": v, "why": w} for k, (v, w) in ASSUMPTIONS.items()},
                "defaults": asdict(defaults),
                "checks_defaults": check_json(checks),
                "first_break_defaults": summary_default["first_break"],
                "tuned": asdict(scale),
                "checks_tuned": check_json(scale_checks),
                "first_break_tuned": summary_scale["first_break"],
                "checks_burst_ready": check_json(ready_checks),
                "bursts": {k: burst_json(v) for k, v in bursts.items()},
                "burst_settings": asdict(found[0]) if found else None,
                "profiles": profiles,
                "predictive_burst": predicted,
                "quotas": quota_ledger,
                "verdicts": verdicts,
            },
        )


if __name__ == "__main__":
    main()
