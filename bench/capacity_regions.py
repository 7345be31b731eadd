"""The capacity model's multi-Region profile (issue 35): two Regions and a witness, or three Regions,
over one DynamoDB global table with multi-Region strong consistency (MRSC).

The design it models is docs/multi-region.md's, section 2: **every Region releases every slot**
to its own queues and **the claim keeps one run**. So, with ``R`` Regions running the scheduler
and ``B`` replicas that apply every write (R = B = 2 with a witness, 3 without):

* **replicated writes**: every write is applied in every replica, so each replica Region's table
  takes every Region's writes: the next timer R times (each Region's poller writes the same item),
  the winner's claim and finish once, and the R - 1 claims that lose (a conditional write whose
  condition fails still consumes a write unit; counted in every replica, as the cost model does:
  conservative). That is the table write quota *per Region* and the partition limit per timer key;
* **reads stay local**: each Region reads what one Region reads (its poller reads every timer and
  job; its workers read nothing more, the job rides in the message), against its own table quota;
* **extra sends and receives**: each Region's queue takes every slot, so the sends, receives,
  deletes and visibility changes per queue are one Region's, and the total over the Regions is R
  times (FIFO deduplication is per queue: it cannot merge them);
* **cross-Region latency on the claim**: an MRSC write returns once another Region has it (F7 of
  docs/multi-region.md), so the claim and the finish each wait a cross-Region round trip (F12: AWS
  publishes no figure; ``bench/multi_region_cost.py``'s assumption, 30 ms in one Region set, 12 ms
  between us-east-1 and us-east-2). The claim is on the way to the target: the fire delay grows by
  one round trip; each worker environment is busy longer, so each Region needs more of them (its
  own account concurrency quota);
* the witness applies the writes for the quorum but serves nothing: it has no table quota to meet.

The per-trigger counts are those ``bench/cost_per_million.py`` measured (``bench/results``, the
"at scale" figures: :class:`RegionCounts`); the limits are :mod:`capacity_limits`'s, each with its
source, and apply per Region (a table's throughput quota is per table and Region; Lambda's account
concurrency per account and Region; an SQS queue lives in one Region).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import benchlib
from capacity_limits import LIMITS
from capacity_model import (
    Check,
    Deployment,
    PerTrigger,
    dispatch_concurrency,
    groups_for,
    least,
    worker_concurrency_cap,
    worker_seconds,
)

MRSC_RTT_MS = 30.0  # bench/multi_region_cost.py's assumed round trip inside one Region set
NEAR_RTT_MS = 12.0  # us-east-1 and us-east-2 (the same bench's near case)
MRSC_SOURCE = (
    "docs/multi-region.md F7 (an MRSC write returns once replicated to another Region) and F12 (no"
    " published latency: the round trip is an assumption)"
)
LOSER_CPU_SHARE = 0.3  # of the winner's CPU: parse, verify, one claim, drop (multi_region_cost.py)
SQS_ACTIONS = (
    "sqs.SendMessageBatch",
    "sqs.ReceiveMessage",
    "sqs.DeleteMessageBatch",
    "sqs.ChangeMessageVisibilityBatch",
)


@dataclass(frozen=True)
class RegionProfile:
    name: str
    regions: int  # R: Regions running the scheduler, each releasing every slot
    replicas: int  # B: replicas applying every write (a witness applies none it is billed for)
    witness: bool = False


REGION_PROFILES = (
    RegionProfile("one Region", 1, 1),
    RegionProfile("2 Regions + witness", 2, 2, witness=True),
    RegionProfile("3 Regions", 3, 3),
)


@dataclass(frozen=True)
class RegionCounts:
    """What one trigger costs in one Region, as the cost bench counted it at scale."""

    timer_wru: float  # the poller's writes: next timers (packed), progress and load marks
    exec_wru: float  # the worker's claim and finish
    rru: float  # the poller's reads (timers, jobs, execution records)
    sqs_calls: dict[str, float]  # calls per trigger of each SQS action (batches)
    claim_ms: float  # a single-Region PutItem's latency (the cost bench's assumption)

    @classmethod
    def from_cost(cls, cost: dict[str, Any], fallback: PerTrigger) -> RegionCounts:
        """From ``cost_per_million.json`` (its summary rows); ``fallback``'s figures where absent."""
        rows = cost.get("summary", {}).get("rows", [])
        if not rows:
            return cls(fallback.timer_wru, fallback.exec_wru, fallback.rru, {}, 6.0)

        def wru(phase: str) -> float:
            return sum(
                r.get("wru_per_trigger_at_scale", r["wru_per_trigger"]) for r in rows if r["phase"] == phase
            )

        reads = sum(r["rru_per_trigger"] for r in rows if r["phase"] in ("poller", "tick", "worker"))
        calls = {a: sum(r["calls_per_trigger"] for r in rows if r["operation"] == a) for a in SQS_ACTIONS}
        latency = cost.get("assumptions", {}).get("latency_ms", {})
        return cls(wru("poller"), wru("worker"), reads, calls, float(latency.get("dynamodb.PutItem", 6.0)))


def replica_wru_per_trigger(c: RegionCounts, profile: RegionProfile) -> float:
    """Write units each replica applies per trigger: every Region's next timer, the winner's claim
    and finish, the losing claims (module docstring)."""
    r = profile.regions
    return r * c.timer_wru + c.exec_wru + (r - 1) * 1.0


def sends_per_trigger(c: RegionCounts, profile: RegionProfile, d: Deployment) -> float:
    """SendMessageBatch calls per trigger over all Regions (one Region's each, R of them)."""
    per_region = c.sqs_calls.get("sqs.SendMessageBatch") or 1 / d.batch_size
    return profile.regions * per_region


def claim_ms(c: RegionCounts, profile: RegionProfile, rtt_ms: float) -> float:
    """The claim's latency: a conditional put, plus a cross-Region round trip under MRSC."""
    return c.claim_ms + (rtt_ms if profile.regions > 1 else 0.0)


def worker_seconds_per_slot(
    d: Deployment, p: PerTrigger, c: RegionCounts, profile: RegionProfile, rtt_ms: float
) -> float:
    """Worker time one Region spends per slot: it wins 1/R of them (the whole run, its claim and
    finish each a round trip longer) and loses the rest (a claim and a drop)."""
    r = profile.regions
    if r == 1:
        return worker_seconds(d, p)
    won = worker_seconds(d, p) + 2 * rtt_ms / 1000
    cpu_share = min(1.0, d.worker_memory_mb / LIMITS["lambda_vcpu_mb"].value)
    lost = claim_ms(c, profile, rtt_ms) / 1000 + LOSER_CPU_SHARE * p.worker_cpu_us / 1e6 / cpu_share
    return won / r + lost * (r - 1) / r


def regional_checks(
    rate: float, d: Deployment, p: PerTrigger, c: RegionCounts, profile: RegionProfile, rtt_ms: float
) -> list[Check]:
    """The limits one Region meets at ``rate`` triggers/s (every Region meets the same)."""
    r = profile.regions
    lim = LIMITS
    concurrency = rate * worker_seconds_per_slot(d, p, c, profile, rtt_ms)
    pollers = math.ceil(groups_for(rate, d) * d.poller_minute_s / 60)
    sends = rate * (c.sqs_calls.get("sqs.SendMessageBatch") or 1 / d.batch_size) / d.queue_count
    receives = rate * (c.sqs_calls.get("sqs.ReceiveMessage") or 1 / d.batch_size) / d.queue_count
    near_key = rate * p.near_share / d.near_shard_count * r * c.timer_wru
    return [
        Check(
            f"table writes per replica ({r} Region(s) x next timer, claims, finish)",
            rate * replica_wru_per_trigger(c, profile),
            d.table_wru,
            "WRU/s",
            lim["dynamodb_table_wru"].source + "; per table and Region (each replica)",
        ),
        Check(
            "table reads per Region (local)",
            rate * c.rru,
            d.table_rru,
            "RRU/s",
            lim["dynamodb_table_rru"].source,
        ),
        Check(
            "far timer key writes (every Region writes each next timer)",
            rate * r * c.timer_wru / d.shard_count,
            lim["dynamodb_partition_wcu"].value,
            "WRU/s per key",
            lim["dynamodb_partition_wcu"].source,
        ),
        Check(
            "near timer key writes (every Region writes each next timer)",
            near_key,
            lim["dynamodb_partition_wcu"].value,
            "WRU/s per key",
            lim["dynamodb_partition_wcu"].source,
        ),
        Check(
            "SQS FIFO SendMessageBatch per queue (each Region's queue takes every slot)",
            sends,
            lim["sqs_fifo_tps"].value,
            "TPS",
            lim["sqs_fifo_tps"].source,
        ),
        Check(
            "SQS FIFO ReceiveMessage per queue",
            receives,
            lim["sqs_fifo_tps"].value,
            "TPS",
            lim["sqs_fifo_tps"].source,
        ),
        Check(
            f"worker concurrency per Region ({concurrency / rate * 1000:.1f} ms a slot)",
            concurrency,
            worker_concurrency_cap(d),
            "environments",
            "queueCount x workerMaxConcurrency (event-source MaximumConcurrency), within the account quota",
        ),
        Check(
            f"Lambda account concurrency per Region (workers {concurrency:,.0f} + pollers {pollers};"
            " the API reserves its own)",
            concurrency + pollers,
            dispatch_concurrency(d),
            "environments",
            lim["lambda_account_concurrency"].source,
        ),
    ]


@dataclass(frozen=True)
class RegionFigures:
    profile: RegionProfile
    replica_wru_per_trigger: float
    sends_per_trigger_all_regions: float
    receives_per_trigger_all_regions: float
    sqs_calls_per_trigger_all_regions: float
    claims_per_slot: int
    losing_claims_per_slot: int
    claim_ms: float
    worker_ms_per_slot_per_region: float
    checks: list[Check]

    @property
    def least(self) -> Check:
        return least(self.checks)


def region_figures(
    rate: float, d: Deployment, p: PerTrigger, c: RegionCounts, profile: RegionProfile, rtt_ms: float
) -> RegionFigures:
    r = profile.regions
    receives = r * (c.sqs_calls.get("sqs.ReceiveMessage") or 1 / d.batch_size)
    all_sqs = r * sum(c.sqs_calls.values()) if c.sqs_calls else r * 4 / d.batch_size
    return RegionFigures(
        profile,
        replica_wru_per_trigger(c, profile),
        sends_per_trigger(c, profile, d),
        receives,
        all_sqs,
        r,
        r - 1,
        claim_ms(c, profile, rtt_ms),
        worker_seconds_per_slot(d, p, c, profile, rtt_ms) * 1000,
        regional_checks(rate, d, p, c, profile, rtt_ms),
    )


def two_x(check: Check) -> float:
    """The limit that gives 2x headroom at this demand (rounded up: to a hundred environments, a
    thousand units)."""
    step = 100 if check.unit == "environments" else 1000
    return math.ceil(2 * check.demand / step) * step


def load_counts(fallback: PerTrigger) -> RegionCounts:
    try:
        cost = json.loads((benchlib.RESULTS_DIR / "cost_per_million.json").read_text())
    except (OSError, ValueError):
        cost = {}
    return RegionCounts.from_cost(cost, fallback)


def report(rate: float, d: Deployment, p: PerTrigger, rtt_ms: float = MRSC_RTT_MS) -> list[dict[str, Any]]:
    """Print the multi-Region profiles at ``rate`` (bench/capacity.py) and answer them as JSON."""
    counts = load_counts(p)
    benchlib.heading(f"Multi-Region profiles at {rate:,.0f} triggers/s (docs/multi-region.md)")
    print(
        f"per trigger in one Region (cost bench, at scale): {counts.timer_wru:.3f} poller WRU,"
        f" {counts.exec_wru:.2f} claim+finish WRU, {counts.rru:.2f} RRU,"
        f" {sum(counts.sqs_calls.values()):.3f} SQS calls; cross-Region round trip {rtt_ms:g} ms"
        f" ({MRSC_SOURCE})"
    )
    out = []
    for profile in REGION_PROFILES:
        f = region_figures(rate, d, p, counts, profile, rtt_ms)
        print(
            f"{profile.name}: each replica applies {f.replica_wru_per_trigger:.2f} WRU a trigger"
            f" ({rate * f.replica_wru_per_trigger:,.0f} WRU/s); {f.claims_per_slot} claim(s) a slot,"
            f" {f.losing_claims_per_slot} losing; SQS calls {f.sqs_calls_per_trigger_all_regions:.2f} a"
            f" trigger over the Regions (sends {f.sends_per_trigger_all_regions:.3f}); claim"
            f" {f.claim_ms:.0f} ms; worker {f.worker_ms_per_slot_per_region:.1f} ms a slot per Region"
        )
        rows = [(c.name, c.demand, c.limit, c.unit, c.headroom) for c in f.checks]
        print(
            benchlib.table(["limit (per Region)", "demand", "limit", "unit", "headroom"], rows, align="lrrlr")
        )
        print(f"  least headroom: {f.least.name}: {f.least.headroom:.2f}x")
        for c in f.checks:
            if c.headroom < 2:
                print(f"  for 2x: {c.name} needs {two_x(c):,.0f} {c.unit} (cdk.json, or a quota request)")
        out.append(
            {
                "profile": profile.name,
                "regions": profile.regions,
                "replicas": profile.replicas,
                "witness": profile.witness,
                "replica_wru_per_trigger": f.replica_wru_per_trigger,
                "sends_per_trigger_all_regions": f.sends_per_trigger_all_regions,
                "sqs_calls_per_trigger_all_regions": f.sqs_calls_per_trigger_all_regions,
                "claim_ms": f.claim_ms,
                "worker_ms_per_slot_per_region": f.worker_ms_per_slot_per_region,
                "checks": [
                    {"name": c.name, "demand": c.demand, "limit": c.limit, "headroom": c.headroom}
                    for c in f.checks
                ],
                "least_headroom": f.least.headroom,
                "table_wru_for_2x": two_x(f.checks[0]),
            }
        )
    return out
