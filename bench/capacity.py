"""The capacity model: 10 million jobs at 10,000 triggers per second, and a 600,000-slot burst.

From the requests a trigger makes (``cost_per_million.json``), the CPU they take
(``cpu_per_trigger.json``) and the published AWS limits below (each with its source), this
computes for a sustained rate and for a top-of-minute burst: the shard groups (pollers),
queues, worker concurrency and DynamoDB throughput needed, the headroom at every limit, the
first limit that breaks and at what rate, and the burst's fire-delay distribution (a fluid
model of the drain: messages x time per message / concurrency, with Lambda's scaling rate).

Everything here is arithmetic on explicit inputs (``tests/unit/test_capacity.py`` checks
it); nothing is measured. Run ``python bench/capacity.py`` after the CPU and cost benchmarks.
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
        " or pre-set warm throughput)",
        f"same page; warm throughput: docs.aws.amazon.com/amazondynamodb/latest/developerguide/"
        f"warm-throughput-scenarios.html (read {CHECKED})",
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
        f"docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html (read {CHECKED})",
        adjustable=True,
    ),
    "lambda_scaling_rate": Limit(
        1000,
        "new execution environments per 10 s per function",
        f"docs.aws.amazon.com/lambda/latest/dg/scaling-behavior.html (read {CHECKED})",
    ),
    "lambda_esm_max_concurrency": Limit(
        1000,
        "MaximumConcurrency of one SQS event source (2-1,000); FIFO: at most one per active message group",
        f"docs.aws.amazon.com/AWSCloudFormation/.../aws-properties-lambda-eventsourcemapping-scalingconfig"
        f" and services-sqs-scaling.html (read {CHECKED})",
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
    "apigw_account_rps": Limit(
        10_000,
        "requests/s per account and region across APIs (burst 5,000)",
        f"docs.aws.amazon.com/apigateway/latest/developerguide/limits.html (read {CHECKED})",
        adjustable=True,
    ),
}

# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Deployment:
    """The settings that decide capacity (defaults: infra/constants.py and punctual.settings)."""

    shard_count: int = 512
    near_shard_count: int = 32
    queue_count: int = 1
    worker_max_concurrency: int = 200  # per queue (event source MaximumConcurrency)
    account_concurrency: int = 1000
    max_shard_groups: int = 40
    triggers_per_poller_minute: int = 60_000
    batch_size: int = 10
    poller_memory_mb: int = 1024
    worker_memory_mb: int = 512
    poller_minute_s: float = 75.0  # lead 10 s + minute + grace 5 s
    poll_interval_s: float = 1.0
    near_lookback_s: float = 7.0  # skew 5 s + two poll intervals
    table_wru: float = 40_000
    table_rru: float = 40_000
    warm_wru: float | None = None  # pre-set warm throughput (None: what the table has reached)
    prewarmed_workers: int = 0  # provisioned concurrency ahead of a burst


@dataclass(frozen=True)
class PerTrigger:
    """What one trigger costs, measured by the CPU and cost benchmarks (defaults: their figures)."""

    wru: float = 3.0  # next timer 1 + claim 1 + finish 1
    rru: float = 1.18
    timer_bytes: float = 182.0
    poller_cpu_us_near: float = 660.0  # core + marshalling + botocore, a near-lane timer
    poller_cpu_us_far: float = 390.0  # a far-lane timer is read once, not ~8 times
    worker_cpu_us: float = 1006.0
    worker_io_ms: float = 16.0  # GetItem + two PutItem at typical latencies
    target_ms: float = 0.0  # the job's own run time (0: the scheduler's overhead alone)
    near_share: float = 0.5  # share of triggers whose next timer is in the near lane

    @property
    def poller_cpu_us(self) -> float:
        return self.near_share * self.poller_cpu_us_near + (1 - self.near_share) * self.poller_cpu_us_far


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
        per = replace(
            per,
            poller_cpu_us_near=float(cpu["poller_cpu_us_per_trigger"]),
            poller_cpu_us_far=core + fixed + sdk["Query (100 timers)"] / 100,
            worker_cpu_us=float(cpu["worker_cpu_us_per_trigger"]),
        )
    except (OSError, KeyError, ValueError):
        pass
    try:
        cost = json.loads((benchlib.RESULTS_DIR / "cost_per_million.json").read_text())
        units = cost["summary"]["dynamodb_units_per_trigger"]
        io_ms = cost["summary"]["worker_lambda_at_scale"]["io_ms_per_trigger"]
        per = replace(per, wru=float(units["wru"]), rru=float(units["rru"]), worker_io_ms=float(io_ms))
    except (OSError, KeyError, ValueError):
        pass
    return per


# --------------------------------------------------------------------------- arithmetic


def vcpu(memory_mb: float) -> float:
    """Lambda's CPU share: one vCPU per 1,769 MB."""
    return memory_mb / LIMITS["lambda_vcpu_mb"].value


def poller_rate(d: Deployment, p: PerTrigger, lane: str = "mixed") -> float:
    """Triggers per second one poller releases when its CPU is the bound (it is: see the CPU bench).

    ``lane``: "far" (a top-of-minute burst: read once a minute), "near" (re-read every poll of
    the look-back) or "mixed" (the sustained share).
    """
    cpu = {"far": p.poller_cpu_us_far, "near": p.poller_cpu_us_near}.get(lane, p.poller_cpu_us)
    return vcpu(d.poller_memory_mb) * 1e6 / cpu


def worker_seconds(d: Deployment, p: PerTrigger) -> float:
    """Seconds one worker environment spends per message: I/O, CPU at its share, the target."""
    return p.worker_io_ms / 1000 + p.worker_cpu_us / 1e6 / vcpu(d.worker_memory_mb) + p.target_ms / 1000


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
    lim = LIMITS
    return [
        Check("DynamoDB table writes", rate * p.wru, d.table_wru, "WRU/s", lim["dynamodb_table_wru"].source),
        Check("DynamoDB table reads", rate * p.rru, d.table_rru, "RRU/s", lim["dynamodb_table_rru"].source),
        Check(
            "far bucket partition writes (next timers of one minute)",
            rate / d.shard_count,
            lim["dynamodb_partition_wcu"].value,
            "WRU/s per key",
            lim["dynamodb_partition_wcu"].source,
        ),
        Check(
            "near bucket partition writes",
            near_per_shard,
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
            "measured CPU per trigger (bench/cpu_per_trigger.py) at the poller's vCPU share",
        ),
        Check(
            "Step Functions inline Map (shard groups)",
            groups,
            lim["sfn_inline_map_concurrency"].value,
            "concurrent pollers",
            lim["sfn_inline_map_concurrency"].source,
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
            "queue_count x event-source MaximumConcurrency (infra/constants.py), within the account quota",
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


# --------------------------------------------------------------------------- the burst


@dataclass
class Burst:
    slots: int
    groups: int
    release_rate: float  # slots/s all pollers together
    release_s: float
    message_s: float  # worker seconds per message
    max_concurrency: int
    start_concurrency: int
    started_by_s: float  # when the last slot started
    p50_s: float
    p90_s: float
    p99_s: float
    peak_start_rate: float
    peak_wru: float
    far_key_wru: float  # next-timer writes per far bucket key during the release
    curve: list[tuple[float, int]] = field(default_factory=list)


def drain_seconds(messages: float, message_s: float, concurrency: float) -> float:
    """The issue's estimate: messages x time per batch / (concurrency x batch size)."""
    return messages * message_s / concurrency


def simulate_burst(
    slots: int, d: Deployment, p: PerTrigger, groups: int | None = None, dt: float = 0.01
) -> Burst:
    """Fluid model of a burst: pollers release at their rate; workers start messages as fast as
    their concurrency allows, that concurrency growing at Lambda's scaling rate from the warm
    (or provisioned) environments. Slot k's fire delay is when the k-th start happens."""
    groups = groups or groups_for(slots / 60, d)
    release_rate = groups * poller_rate(d, p, "far")
    message_s = worker_seconds(d, p)
    cap = worker_concurrency_cap(d)
    start = min(cap, max(d.prewarmed_workers, 5))  # an idle SQS event source keeps ~5 going
    ramp = LIMITS["lambda_scaling_rate"].value / 10  # environments per second
    quantiles = {0.5: None, 0.9: None, 0.99: None}
    released = started = 0.0
    t = 0.0
    concurrency = float(start)
    peak = 0.0
    curve: list[tuple[float, int]] = []
    while started < slots and t < 3600:
        t += dt
        released = min(slots, release_rate * t)
        concurrency = min(cap, concurrency + ramp * dt)
        step = min(released - started, concurrency / message_s * dt)
        started += step
        peak = max(peak, step / dt)
        for q in quantiles:
            if quantiles[q] is None and started >= q * slots:
                quantiles[q] = t
        if not curve or t - curve[-1][0] >= 1.0:
            curve.append((round(t, 2), int(started)))
    curve.append((round(t, 2), int(started)))
    release_s = slots / release_rate
    return Burst(
        slots=slots,
        groups=groups,
        release_rate=release_rate,
        release_s=release_s,
        message_s=message_s,
        max_concurrency=cap,
        start_concurrency=start,
        started_by_s=t,
        p50_s=quantiles[0.5] or t,
        p90_s=quantiles[0.9] or t,
        p99_s=quantiles[0.99] or t,
        peak_start_rate=peak,
        # a start writes its claim, its release wrote the next timer, and with a short target
        # the finish follows within milliseconds: all three land in the same seconds
        peak_wru=peak * p.wru,
        far_key_wru=slots / d.shard_count / release_s,
        curve=curve,
    )


def burst_settings(
    slots: int, d: Deployment, p: PerTrigger, p99_s: float = 5.0, all_s: float = 10.0
) -> Deployment:
    """The fewest workers (pre-warmed) and pollers for which the burst meets both targets."""
    need_groups = math.ceil(slots / (poller_rate(d, p, "far") * p99_s * 0.5))  # release within half the p99
    best = d
    for concurrency in range(100, 50_001, 100):
        queues = max(d.queue_count, math.ceil(concurrency / LIMITS["lambda_esm_max_concurrency"].value))
        trial = replace(
            d,
            queue_count=queues,
            worker_max_concurrency=math.ceil(concurrency / queues),
            account_concurrency=max(d.account_concurrency, concurrency + 2 * need_groups + 100),
            prewarmed_workers=concurrency,
            max_shard_groups=max(d.max_shard_groups, need_groups),
        )
        result = simulate_burst(slots, trial, p, groups=need_groups, dt=0.02)
        if result.p99_s <= p99_s and result.started_by_s <= all_s:
            best = trial
            break
    return best


# --------------------------------------------------------------------------- report


def check_rows(checks: list[Check]) -> list[tuple[Any, ...]]:
    return [(c.name, c.demand, c.limit, c.unit, c.headroom) for c in checks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rate", type=float, default=10_000)
    parser.add_argument("--jobs", type=int, default=10_000_000)
    parser.add_argument("--burst", type=int, default=600_000)
    parser.add_argument("--target-ms", type=float, default=0.0, help="the jobs' own run time")
    parser.add_argument("--no-json", action="store_true")
    args = parser.parse_args()

    per = replace(load_measured(), target_ms=args.target_ms)
    defaults = Deployment()
    rate = args.rate
    benchlib.heading(f"Capacity at {rate:,.0f} triggers/s, {args.jobs:,} jobs, default settings")
    print(
        f"per trigger: {per.wru:.2f} WRU, {per.rru:.2f} RRU; poller CPU {per.poller_cpu_us:.0f} µs"
        f" ({poller_rate(defaults, per):,.0f}/s per poller at {defaults.poller_memory_mb} MB);"
        f" worker {worker_seconds(defaults, per) * 1000:.1f} ms a message (target {per.target_ms:.0f} ms)"
    )
    checks = sustained_checks(rate, defaults, per)
    print(benchlib.table(["limit", "demand", "limit", "unit", "headroom"], check_rows(checks), align="lrrlr"))
    broken = first_break(checks, rate)
    if broken:
        print(f"first limit reached: {broken[0].name}, at {broken[1]:,.0f} triggers/s")
    short = [c for c in checks if c.headroom < 2]

    # The settings that give 2x everywhere at this rate.
    concurrency = math.ceil(2 * rate * worker_seconds(defaults, per))
    queues = max(1, math.ceil(concurrency / LIMITS["lambda_esm_max_concurrency"].value))
    per_poller_minute = int(poller_rate(defaults, per) * 60 / 2)
    tuned = replace(
        defaults,
        queue_count=queues,
        worker_max_concurrency=math.ceil(concurrency / queues),
        account_concurrency=max(
            1000, math.ceil((concurrency + 2 * groups_for(rate, defaults) * 2) * 1.0 / 0.9)
        ),
        triggers_per_poller_minute=per_poller_minute,
        table_wru=max(defaults.table_wru, math.ceil(2 * rate * per.wru / 1000) * 1000),
        table_rru=max(defaults.table_rru, math.ceil(2 * rate * per.rru / 1000) * 1000),
    )
    tuned = replace(
        tuned, account_concurrency=max(tuned.account_concurrency, concurrency + 4 * groups_for(rate, tuned))
    )
    tuned_checks = sustained_checks(rate, tuned, per)
    print(
        f"\nSettings for >= 2x headroom at {rate:,.0f}/s: queue_count {tuned.queue_count},"
        f" worker max concurrency {tuned.worker_max_concurrency} per queue, account concurrency"
        f" {tuned.account_concurrency:,}, triggers_per_poller_minute {tuned.triggers_per_poller_minute:,}"
        f" ({groups_for(rate, tuned)} groups), table quotas {tuned.table_wru:,.0f} WRU"
        f" / {tuned.table_rru:,.0f} RRU"
    )
    print(
        benchlib.table(
            ["limit", "demand", "limit", "unit", "headroom"], check_rows(tuned_checks), align="lrrlr"
        )
    )
    tuned_break = first_break(tuned_checks, rate)
    if tuned_break:
        print(f"first limit reached: {tuned_break[0].name}, at {tuned_break[1]:,.0f} triggers/s")

    benchlib.heading(f"A {args.burst:,}-slot top-of-minute burst")
    rows = []
    bursts = {}
    for label, deployment, groups in (
        ("defaults, cold workers", defaults, None),
        (
            "defaults, workers pre-warmed",
            replace(defaults, prewarmed_workers=worker_concurrency_cap(defaults)),
            None,
        ),
    ):
        b = simulate_burst(args.burst, deployment, per, groups)
        bursts[label] = b
    needed = burst_settings(args.burst, defaults, per)
    need_groups = math.ceil(args.burst / (poller_rate(defaults, per, "far") * 2.5))
    bursts["same pollers and workers, not pre-warmed"] = simulate_burst(
        args.burst, replace(needed, prewarmed_workers=0), per, groups=need_groups
    )
    bursts["settings that meet it (pre-warmed)"] = simulate_burst(args.burst, needed, per, groups=need_groups)
    for label, b in bursts.items():
        rows.append(
            (
                label,
                b.groups,
                b.release_s,
                b.max_concurrency,
                b.p50_s,
                b.p90_s,
                b.p99_s,
                b.started_by_s,
                b.peak_wru,
                b.far_key_wru,
            )
        )
    print(
        benchlib.table(
            [
                "scenario",
                "pollers",
                "release s",
                "workers",
                "p50 s",
                "p90 s",
                "p99 s",
                "all s",
                "peak WRU/s",
                "WRU/s/key",
            ],
            rows,
        )
    )
    cap = worker_concurrency_cap(defaults)
    message_ms = worker_seconds(defaults, per) * 1000
    print(
        f"drain estimate at defaults: {args.burst:,} x {message_ms:.1f} ms / {cap}"
        f" = {drain_seconds(args.burst, message_ms / 1000, cap):.0f} s"
    )
    print(
        f"meeting it takes: {need_groups} pollers"
        f" (inline Map allows {LIMITS['sfn_inline_map_concurrency'].value:.0f}),"
        f" {needed.queue_count} queues x {needed.worker_max_concurrency} workers pre-warmed"
        f" (Lambda adds 1,000 environments per 10 s), DynamoDB warm throughput"
        f" >= {bursts['settings that meet it (pre-warmed)'].peak_wru:,.0f} WRU/s"
    )
    verdicts = {
        "headroom_2x_defaults": not short,
        "headroom_2x_tuned": all(c.headroom >= 2 for c in tuned_checks),
        "burst_defaults_all_within_10s": bursts["defaults, cold workers"].started_by_s <= 10,
        "burst_defaults_p99_within_5s": bursts["defaults, cold workers"].p99_s <= 5,
    }
    print("targets:", ", ".join(f"{k} {'MET' if v else 'MISSED'}" for k, v in verdicts.items()))
    if not args.no_json:
        benchlib.write_result(
            "capacity",
            {
                "rate": rate,
                "jobs": args.jobs,
                "per_trigger": asdict(per),
                "limits": {k: asdict(v) for k, v in LIMITS.items()},
                "defaults": asdict(defaults),
                "checks_defaults": [{**asdict(c), "headroom": c.headroom} for c in checks],
                "first_break_defaults": {"limit": broken[0].name, "rate": broken[1]} if broken else None,
                "tuned": asdict(tuned),
                "checks_tuned": [{**asdict(c), "headroom": c.headroom} for c in tuned_checks],
                "first_break_tuned": {"limit": tuned_break[0].name, "rate": tuned_break[1]}
                if tuned_break
                else None,
                "bursts": {k: asdict(v) for k, v in bursts.items()},
                "burst_settings": asdict(needed),
                "verdicts": verdicts,
            },
        )


if __name__ == "__main__":
    main()
