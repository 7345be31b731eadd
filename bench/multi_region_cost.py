"""Dollars per million triggers of the multi-Region profile, beside one Region (issue 35).

A model, not a second measurement: it takes the per-trigger request counts and item sizes that
``bench/cost_per_million.py`` measured against moto (``bench/results/cost_per_million.json``,
the "at scale" figures of one Region at 10,000 triggers a second) and the prices of
``bench/prices.json``, and applies what the multi-Region profile changes (docs/multi-region.md,
sections 2 and 6). ``R`` Regions run the scheduler (every one releases every slot); ``B``
replicas bill each write (two replicas and a witness: R = B = 2; three replicas: R = B = 3):

* **the poller's work, R times**: every Region reads the same timers and jobs (``R`` x the read
  units) and writes the same next timers (``R x B`` x the write units: each Region's write is a
  replicated write in every replica Region);
* **R sends, receives and deletes** per slot (FIFO deduplication is per queue), **R worker
  invocations**, and **R - 1 claims that lose**: a conditional put whose condition fails still
  consumes a write unit (counted as replicated too: conservative); each losing worker reads the
  job and makes its claim, then drops the message;
* the winner's claim and finish, B replicated writes each; history reads once (one Region);
* **cross-Region latency**: each MRSC write and strongly consistent read waits a round trip to
  another Region of the set (``MRSC_RTT_MS``, an assumption: AWS publishes no figure), which
  lengthens every worker invocation's billed duration;
* the pollers (one set per Region, billed by the minute) and the per-minute state machines, R
  times; record storage in B replicas;
* **no TTL on MRSC** (F9): timers stay unless a sweeper deletes them; the table prints both the
  sweeper's cost (one replicated delete per timer) and what keeping them costs per month.

Assumptions, stated where they enter: the witness bills no writes or storage; a replicated write
unit costs what a write unit costs (``prices.json``'s on-demand write price; the DynamoDB pricing
page's replicated write request unit for global tables); MRSC's strongly consistent reads cost
what single-Region ones do. Quotas the profile meets twice: every Region's SQS FIFO throughput
(each queue takes every slot) and every replica Region's table write throughput (each receives
every Region's writes), see docs/capacity.md.

Usage: ``python bench/multi_region_cost.py [--rtt-ms 30] [--no-json]``
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MEASURED = HERE / "results" / "cost_per_million.json"
PRICES = HERE / "prices.json"
OUT = HERE / "results" / "multi_region_cost.json"
MRSC_RTT_MS = 30.0  # assumed cross-Region round trip inside one MRSC Region set (an assumption)
ITEM_OVERHEAD_BYTES = 100  # DynamoDB bills each item's storage with 100 bytes of overhead
GB = 1024**3
LOSER_CALLS = ("dynamodb.GetItem", "dynamodb.PutItem")  # a losing worker reads the job and claims
LOSER_CPU_SHARE = 0.3  # of the winner's CPU time: parse, verify, one claim, drop (no target call)


@dataclass(frozen=True)
class Profile:
    name: str
    regions: int  # R: Regions running the scheduler
    replicas: int  # B: replicas billed for each write


PROFILES = (
    Profile("one Region (today)", 1, 1),
    Profile("2 Regions + witness", 2, 2),
    Profile("3 Regions", 3, 3),
)


@dataclass
class Figures:
    profile: str
    dynamodb: float
    sqs: float
    lambda_usd: float
    stepfunctions: float
    storage: float
    total: float
    timer_sweeper: float  # one replicated delete per timer (MRSC has no TTL)
    timers_kept_per_month: float  # or: keeping them, per month they are kept


def _prices() -> dict[str, Any]:
    return dict(json.loads(PRICES.read_text()))


def model(measured: dict[str, Any], prices: dict[str, Any], profile: Profile, rtt_ms: float) -> Figures:
    """One profile's dollars per million triggers (module docstring)."""
    summary = measured["summary"]
    r, b = profile.regions, profile.replicas
    ddb = prices["dynamodb"]
    wru_usd = ddb["on_demand_write_per_million"]["usd"]  # per million units = per unit x 1e6
    dynamodb = sqs = 0.0
    for row in summary["rows"]:
        operation, phase = row["operation"], row["phase"]
        copies = 1 if phase == "history" else r  # users read history in one Region
        usd = row["usd_per_million_at_scale"]
        if operation.startswith("sqs."):
            sqs += usd * copies
            continue
        writes = row["wru_per_trigger_at_scale"] * wru_usd
        reads = usd - writes  # the row's dollars are its write units' and its read units'
        dynamodb += writes * b * (1 if phase == "worker" else copies)  # the worker's: the winner's
        dynamodb += reads * copies
    losers = r - 1
    dynamodb += losers * b * wru_usd  # the losing claims, 1 write unit each (their job reads: R x above)

    worker = summary["worker_lambda_at_scale"]
    lam = prices["lambda"]
    request_usd = lam["requests_per_million"]["usd"]
    gb = worker["gb_s_per_trigger"] / (worker["ms_per_trigger"] / 1000.0)  # the function's memory
    gb_s_usd = lam["arm64_gb_second"]["usd"] * 1e6  # per million GB-s
    latency = measured["assumptions"]["latency_ms"]
    winner_calls = sum(x["calls_per_trigger"] for x in summary["rows"] if x["phase"] == "worker")
    extra_ms = rtt_ms * winner_calls if r > 1 else 0.0
    winner_ms = worker["ms_per_trigger"] + extra_ms
    loser_ms = (
        sum(latency[c] for c in LOSER_CALLS)
        + len(LOSER_CALLS) * rtt_ms
        + measured["assumptions"]["invocation_overhead_ms"] / worker["mean_batch"]
        + LOSER_CPU_SHARE * worker["cpu_ms_per_trigger"]
    )
    lambda_usd = r * worker["invocations_per_trigger"] * request_usd
    lambda_usd += (winner_ms + losers * loser_ms) / 1000.0 * gb * gb_s_usd
    lambda_usd += r * summary["poller_lambda_usd_per_million_at_10k"]
    stepfunctions = r * summary["stepfunctions_usd_per_million_at_10k"]
    storage = b * summary["storage"]["usd_per_million"]

    timer_rows = [x for x in summary["rows"] if x["timers_per_trigger"] > 0]
    timers = sum(x["timers_per_trigger"] for x in timer_rows)
    timer_bytes = sum(x["bytes_per_item"] * x["timers_per_trigger"] for x in timer_rows) / max(timers, 1e-9)
    if r == 1:  # TTL deletes them for free
        sweeper = kept = 0.0
    else:
        sweeper = timers * b * wru_usd
        gb_month = ddb["storage_gb_month"]["usd"]
        kept = timers * 1e6 * (timer_bytes + ITEM_OVERHEAD_BYTES) / GB * gb_month * b
    total = dynamodb + sqs + lambda_usd + stepfunctions + storage
    return Figures(profile.name, dynamodb, sqs, lambda_usd, stepfunctions, storage, total, sweeper, kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rtt-ms", type=float, default=MRSC_RTT_MS, help="cross-Region round trip (30)")
    parser.add_argument("--no-json", action="store_true", help="do not write bench/results/")
    args = parser.parse_args()
    measured = json.loads(MEASURED.read_text())
    prices = _prices()
    rows = [model(measured, prices, p, args.rtt_ms) for p in PROFILES]
    check = measured["summary"]["on_demand_usd_per_million"]
    print(
        f"multi-Region cost per million triggers (on demand, {prices['region']} prices, from"
        f" {MEASURED.name} of {measured.get('date', '?')}; cross-Region round trip {args.rtt_ms:g} ms)"
    )
    print(f"  one Region reproduces the measured ${check:.3f} as ${rows[0].total:.3f}")
    header = (
        f"  {'profile':22} {'DynamoDB':>9} {'SQS':>7} {'Lambda':>7} {'SFN':>6} {'storage':>8}"
        f" {'total':>7} {'x one':>6} {'+sweeper':>9} {'or kept/mo':>10}"
    )
    print(header)
    for f in rows:
        print(
            f"  {f.profile:22} {f.dynamodb:9.3f} {f.sqs:7.3f} {f.lambda_usd:7.3f} {f.stepfunctions:6.3f}"
            f" {f.storage:8.3f} {f.total:7.3f} {f.total / rows[0].total:6.2f} {f.timer_sweeper:9.3f}"
            f" {f.timers_kept_per_month:10.4f}"
        )
    print(
        "  (+sweeper: deleting each timer, one replicated write, as MRSC has no TTL; or kept/mo: what"
        " keeping them costs per month kept)"
    )
    if not args.no_json:
        OUT.write_text(
            json.dumps(
                {
                    "benchmark": "multi_region_cost",
                    "source": MEASURED.name,
                    "source_date": measured.get("date"),
                    "rtt_ms": args.rtt_ms,
                    "profiles": [asdict(p) for p in PROFILES],
                    "usd_per_million": [asdict(f) for f in rows],
                },
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
