"""The capacity model's sustained arithmetic: a deployment's settings, the per-trigger figures, the
rates each component reaches, and the checks of a sustained rate against every limit.

:class:`Deployment` is a settings profile (the deployed defaults read from ``cdk.json``);
:class:`PerTrigger` the requests and CPU one trigger takes (read from ``bench/results``). From
them: the poller's, release's and worker's rates, the shard groups a rate needs, the
:class:`Check` of each limit at a rate (:func:`sustained_checks`), the first that breaks, and
the settings that carry a rate with 2x headroom (:func:`scale_settings`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

import benchlib
from capacity_limits import DEPLOYABLE_MAX_GROUPS, LIMITS, Limit, assumed

# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Deployment:
    """The settings that decide capacity (defaults: infra/constants.py, cdk.json and
    punctual.runtime.settings)."""

    shard_count: int = 512
    near_shard_count: int = 32
    queue_count: int = 1
    worker_functions: int = 1  # one worker function drains every short queue (per-queue: not deployable)
    worker_max_concurrency: int = 200  # per queue (event source MaximumConcurrency)
    account_concurrency: int = 1000  # a Service Quotas request, not a cdk.json key
    api_reserved_concurrency: int = 100  # the api function's reservation (cdk.json apiReservedConcurrency)
    max_shard_groups: int = 40
    triggers_per_poller_minute: int = 60_000
    batch_size: int = 10
    # the poller's release threads (punctual.runtime.settings.queue_send_concurrency)
    send_concurrency: int = 8
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
    "api_reserved_concurrency": "apiReservedConcurrency",
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
        measured = cpu["us_per_trigger"]
        core = (
            measured.get("ours", measured["no_copy_store"])["dispatch"]
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
    """Shard groups the tick plans for a minute of this load (punctual.dispatch.tick.group_count_for)."""
    needed = math.ceil(rate_per_s * 60 / d.triggers_per_poller_minute) if rate_per_s else 0
    return min(max(1, needed), d.max_shard_groups, d.shard_count)


def dispatch_concurrency(d: Deployment) -> int:
    """The account's Lambda concurrency left to the workers and pollers: the API reserves its own."""
    return d.account_concurrency - d.api_reserved_concurrency


def worker_concurrency_cap(d: Deployment) -> int:
    return min(d.queue_count * d.worker_max_concurrency, dispatch_concurrency(d))


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
            "Lambda account concurrency (workers + pollers; the API reserves its own)",
            concurrency + pollers,
            dispatch_concurrency(d),
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


def round_up(value: float, step: float) -> float:
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
    tuned = replace(tuned, near_shard_count=int(max(d.near_shard_count, round_up(near_keys, 8))))
    far_keys = target * rate * p.timer_wru / LIMITS["dynamodb_partition_wcu"].value
    tuned = replace(tuned, shard_count=int(max(d.shard_count, round_up(far_keys, 64))))
    wru = max(d.table_wru, round_up(target * rate * p.wru, 1000))
    rru = max(d.table_rru, round_up(target * rate * p.rru, 1000))
    tuned = replace(tuned, table_wru=wru, table_rru=rru, warm_wru=wru, warm_rru=rru)
    groups = groups_for(rate, tuned)
    environments = rate * worker_seconds(tuned, p) + math.ceil(groups * tuned.poller_minute_s / 60)
    return replace(
        tuned,
        account_concurrency=int(
            max(d.account_concurrency, round_up(target * environments + d.api_reserved_concurrency, 100))
        ),
    )
