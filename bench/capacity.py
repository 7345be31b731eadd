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

The model lives beside this report, one module per part: ``capacity_limits`` (published limits,
prices, assumptions), ``capacity_model`` (settings, per-trigger figures, sustained rates and
checks), ``capacity_burst`` (the burst and its predictive variant), ``capacity_deploy`` (monthly
cost, what a profile takes to deploy); ``quotas`` is the quota ledger printed beside them. This
module reads the inputs, runs the profiles and prints and records the report.

Everything here is arithmetic on explicit inputs and stated assumptions (``ASSUMPTIONS``;
``tests/unit/test_capacity.py`` checks it); nothing is measured here. The per-trigger figures
are read from ``bench/results`` each run, so a leaner trigger moves every figure. Run
``python bench/capacity.py`` after the CPU and cost benchmarks.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from typing import Any

import benchlib
import capacity_regions
import quotas
from capacity_burst import (
    Burst,
    burst_checks,
    burst_ready_settings,
    drain_seconds,
    predictive_burst,
    predictive_settings,
    simulate_burst,
)
from capacity_deploy import deployability, monthly_cost
from capacity_limits import ASSUMPTIONS, EXTRA_PRICES, LIMITS
from capacity_model import (
    Check,
    Deployment,
    PerTrigger,
    deployed_defaults,
    ecs_task_rate,
    first_break,
    groups_for,
    least,
    load_cost,
    load_measured,
    scale_settings,
    sustained_checks,
    worker_concurrency_cap,
    worker_seconds,
)

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
    p: PerTrigger,
) -> dict[str, Any]:
    low = least(checks)
    brk = first_break(checks, rate)
    bchecks = burst_checks(burst, d, p)
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
        return profile_summary(name, d, rate, checks, burst, groups, cost, per), checks, burst

    # (a) the defaults, (b) the scale profile: >= 2x at every sustained limit
    summary_default, checks, burst_default = evaluate("defaults", defaults, groups_for(rate, defaults))
    print_profile(f"(a) defaults at {rate:,.0f} triggers/s, {args.jobs:,} jobs", summary_default, checks)
    scale = scale_settings(rate, defaults, per)
    summary_scale, scale_checks, burst_scale = evaluate("scale", scale, groups_for(rate, scale))
    print_profile(f"(b) scale profile: >= 2x headroom at {rate:,.0f}/s", summary_scale, scale_checks)
    regions = capacity_regions.report(rate, scale, per)  # the scale profile in every Region (issue 35)

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
        rru = max(pred.table_rru, predicted["table_rru"])
        pred = replace(
            pred,
            max_shard_groups=max(pred.max_shard_groups, predicted["pollers"]),
            table_wru=wru,
            warm_wru=wru,
            table_rru=rru,
            warm_rru=rru,
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
                "multi_region": regions,
                "quotas": quota_ledger,
                "verdicts": verdicts,
            },
        )


if __name__ == "__main__":
    main()
