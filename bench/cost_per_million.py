"""Benchmark 4: dollars per million triggers, all in, from counted requests.

The real poller (``Container.poller``), the real worker (``Container.worker``
with an instant target, fed the way the Lambda SQS event source feeds it: receive ten,
process, delete in a batch), the tick (``functions/tick``) and history reads run against
moto in-process (``mock_aws``) on a ``ManualClock``. A boto3 hook counts every request,
and the capacity DynamoDB would bill is computed from item sizes (``awsmeter``).

Three runs:

* **idle, default layout** (the shard counts and poller memory of ``cdk.json``, and the poller
  the tick's plan gives an idle minute) and **idle, previous defaults** (512 far / 32 near, 1,024
  MB): what the tick, the pollers and the near-lane polling cost per month with nothing due;
* **idle, small layout** and **load, small layout**: the load run minus the idle run of
  the same layout, divided by the triggers, is what each trigger adds (the small layout
  keeps moto fast; what a trigger adds does not depend on the shard count, the fixed
  polling does, and that is measured at the defaults).

Prices come from ``bench/prices.json``. Lambda duration is modelled from the counted
requests and typical in-region latencies (stated below), with the target's own run time
left out on both sides of the comparison (it is the same Lambda either way).

**Events and alerts** (issue 19) are priced apart, by two more load runs of the same layout with
a tenth of the jobs failing every other minute (one attempt each): one with execution events off
and no alert rules, one with events on (PutEvents, $1.00 per million events) and a rule on
``failed`` and ``recovered`` on each failing job. Their difference per trigger is what events and
alerts add; the main figures above run with events off, as a deployment with ``eventsEnabled``
false does (the default, ``eventsStatusChanges`` ``problems``, publishes a change that is not an
attempt's RUNNING or SUCCEEDED: none while every run succeeds; the events run publishes all).

The rig that runs and counts is ``cost_rig``, the arithmetic from counts to dollars is
``cost_money``; this module runs the layouts, prints the breakdown and records the figures.

Usage: ``python bench/cost_per_million.py [--jobs N] [--minutes M] [--no-json]``
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import benchlib
from awsmeter import Meter
from cost_money import (
    IdleLayout,
    Prices,
    cpu_us_per_trigger,
    default_idle_layout,
    events_and_alerts,
    idle_month,
    leaner,
    print_events_and_alerts,
    summarize,
)
from cost_rig import (
    EVENTBRIDGE_ALL_IN_QUOTED,
    HISTORY_PAGE,
    INVOCATION_OVERHEAD_MS,
    LATENCY_MS,
    MINUTES_PER_MONTH,
    MIX,
    TARGETS,
    run,
)

# --------------------------------------------------------------------------- printing


def print_breakdown(summary: dict[str, Any]) -> None:
    rows = summary["rows"]
    table_rows: list[tuple[Any, ...]] = [
        (
            f"{r['phase']}: {r['operation'].split('.', 1)[1]} {r['kind']}",
            r["calls_per_trigger"],
            r["wru_per_trigger"],
            r["rru_per_trigger"],
            r["bytes_per_item"] or None,
            r["usd_per_million"],
            r["usd_per_million_at_scale"],
        )
        for r in sorted(rows, key=lambda r: -r["usd_per_million_at_scale"])
    ]
    wm, ws = summary["worker_lambda_measured"], summary["worker_lambda_at_scale"]
    table_rows.append(
        (
            f"worker Lambda: batch {wm['mean_batch']:.1f} (10 at scale), {ws['ms_per_trigger']:.1f} ms each",
            wm["invocations_per_trigger"],
            None,
            None,
            None,
            wm["usd_per_million"],
            ws["usd_per_million"],
        )
    )
    st = summary["storage"]
    table_rows.append(
        (
            f"storage: record {st['record_bytes']:.0f} B kept {st['retention_days']} days, timer 1 day",
            None,
            None,
            None,
            None,
            st["usd_per_million"],
            st["usd_per_million"],
        )
    )
    table_rows.append(
        (
            f"poller Lambda ({summary['groups_at_10k']} groups at 10,000/s)",
            None,
            None,
            None,
            None,
            None,
            summary["poller_lambda_usd_per_million_at_10k"],
        )
    )
    kms = summary["kms_at_10k"]
    table_rows.append(
        (
            f"KMS Decrypt: each tenant's data key once per worker environment"
            f" ({kms['requests_per_s_at_10k']:.0f}/s;"
            f" one a trigger: ${kms['usd_per_million_one_per_trigger']:.2f})",
            kms["requests_per_trigger"],
            None,
            None,
            None,
            None,
            kms["usd_per_million"],
        )
    )
    observed = summary["logs_and_traces_at_10k"]
    table_rows.append(
        (
            f"CloudWatch Logs: EMF {observed['emf_bytes_per_trigger']:.0f} B + platform lines"
            f" {observed['platform_log_bytes_per_trigger']:.0f} B a trigger; X-Ray: 5 % of invocations",
            None,
            None,
            None,
            None,
            None,
            observed["logs_usd_per_million"] + observed["xray_usd_per_million"],
        )
    )
    table_rows.append(
        (
            "Step Functions (at 10,000/s)",
            None,
            None,
            None,
            None,
            None,
            summary["stepfunctions_usd_per_million_at_10k"],
        )
    )
    table_rows.append(
        (
            "all in, on-demand",
            None,
            None,
            None,
            None,
            summary["measured_usd_per_million"],
            summary["on_demand_usd_per_million"],
        )
    )
    print(
        benchlib.table(
            ["per trigger: phase, request, item", "calls", "WRU", "RRU", "B/item", "$/M run", "$/M 10k/s"],
            table_rows,
            align="lrrrrrr",
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=800)
    parser.add_argument("--minutes", type=int, default=5)
    parser.add_argument("--idle-minutes", type=int, default=1)
    parser.add_argument("--no-json", action="store_true")
    args = parser.parse_args()
    import logging

    logging.getLogger("punctual").setLevel(logging.WARNING)
    prices = Prices.load()
    meter = Meter()

    benchlib.heading("Cost per million triggers (moto in-process, counted requests)")
    started = time.perf_counter()
    small = (16, 4)
    base = run(meter, "idle small", 0, args.minutes, *small)
    load = run(meter, "load small", args.jobs, args.minutes, *small)
    summary = summarize(load, base, prices)
    print(
        f"{load.triggers:,} triggers from {load.registered:,} jobs in {args.minutes} poller minutes"
        f" (layout {small[0]} far / {small[1]} near shards; moto wall {load.wall_s:.0f} s);"
        f" mean worker batch {summary['worker_lambda_measured']['mean_batch']:.1f}\n"
    )
    print_breakdown(summary)
    on_demand = summary["on_demand_usd_per_million"]
    prov = summary["provisioned_at_10k"]
    print()
    comparison = [
        (
            "Punctual, on-demand DynamoDB, full batches (10,000/s)",
            on_demand,
            TARGETS["on_demand_per_million"],
        ),
        ("Punctual, on-demand, batches as in this run", summary["measured_usd_per_million"], None),
        ("Punctual, provisioned at 10,000/s, 100 % used", prov["100%"]["all_in_usd_per_million"], None),
        (
            "Punctual, provisioned at 10,000/s, 70 % target",
            prov["70%"]["all_in_usd_per_million"],
            TARGETS["provisioned_per_million"],
        ),
        (
            "EventBridge Scheduler alone (runs and records nothing)",
            summary["eventbridge_scheduler_usd_per_million"],
            None,
        ),
        (
            "EventBridge Scheduler + same worker Lambda + one write",
            summary["eventbridge_all_in_usd_per_million"],
            None,
        ),
        ("  (the issue's figure for the same)", EVENTBRIDGE_ALL_IN_QUOTED, None),
    ]
    print(benchlib.table(["$ per million triggers", "$/M", "target"], comparison))
    units = summary["dynamodb_units_per_trigger"]
    print(
        f"\nDynamoDB per trigger: {units['wru']:.2f} WRU, {units['rru']:.2f} RRU"
        f" = ${summary['dynamodb_on_demand_usd_per_million']:.3f}/M on demand;"
        f" provisioned at 10,000/s needs {prov['70%']['wcu']:,.0f} WCU and {prov['70%']['rcu']:,.0f} RCU"
        " at 70 %"
    )
    savings = leaner(summary["rows"], prices)
    if savings:
        print("\nWhat a leaner record would save:")
        for text, usd in savings:
            print(f"  {text}: ${usd:.3f}/M")

    benchlib.heading("Execution events and alerts (issue 19), what they add per trigger")
    notify = events_and_alerts(meter, prices, max(100, args.jobs // 4), max(3, args.minutes - 2))
    print_events_and_alerts(notify)

    benchlib.heading("Fixed cost with nothing due (idle runs, counted per minute, x 43,800 minutes)")
    idles = {}
    layouts = (
        default_idle_layout(),
        IdleLayout("previous defaults (512 far / 32 near, poller 1,024 MB)", 512, 32, 1024, prices.tick_mb),
    )
    for layout in layouts:
        idle = run(
            meter,
            f"idle {layout.label}",
            0,
            args.idle_minutes + 2,
            layout.far_shards,
            layout.near_shards,
            steady=True,
        )
        idles[layout.label] = {
            **idle_month(idle, prices, layout.poller_mb, layout.tick_mb),
            "far_shards": layout.far_shards,
            "near_shards": layout.near_shards,
        }
    headers = ["$ per month", *idles.keys()]
    keys = list(next(iter(idles.values()))["usd_per_month"])
    print(benchlib.table(headers, [(k, *(v["usd_per_month"][k] for v in idles.values())) for k in keys]))
    default_idle = next(iter(idles.values()))["usd_per_month"]["total"]
    previous_idle = list(idles.values())[1]["usd_per_month"]["total"]
    print(
        f"target <= ${TARGETS['idle_per_month']:.0f}/month:"
        f" defaults ${default_idle:.2f} (previous defaults ${previous_idle:.2f})"
    )
    for label, idle in idles.items():
        print(f"\nrequests per idle minute, {label}:")
        print(
            benchlib.table(
                ["phase", "request", "item", "calls", "RRU", "$/month"],
                [(*line[:5], line[5] * MINUTES_PER_MONTH) for line in idle["requests_per_minute"]],
                align="lllrrr",
            )
        )
    elapsed = time.perf_counter() - started
    print(f"\n({elapsed:.0f} s)")

    verdicts = {
        "on_demand_per_million": on_demand <= TARGETS["on_demand_per_million"],
        "provisioned_per_million": prov["70%"]["all_in_usd_per_million"]
        <= TARGETS["provisioned_per_million"],
        "idle_per_month_defaults": default_idle <= TARGETS["idle_per_month"],
    }
    print("targets:", ", ".join(f"{k} {'MET' if v else 'MISSED'}" for k, v in verdicts.items()))
    if not args.no_json:
        benchlib.write_result(
            "cost_per_million",
            {
                "jobs": args.jobs,
                "minutes": args.minutes,
                "mix": MIX,
                "layout": {"far_shards": small[0], "near_shards": small[1]},
                "assumptions": {
                    "latency_ms": LATENCY_MS,
                    "invocation_overhead_ms": INVOCATION_OVERHEAD_MS,
                    "cpu_us_per_trigger": cpu_us_per_trigger(),
                    "history_page": HISTORY_PAGE,
                    "target_run_time": "excluded on both sides",
                    "empty_query": "at least one read unit per Query, even when it finds nothing",
                },
                "summary": summary,
                "events_and_alerts": notify,
                "leaner_record_savings": savings,
                "idle": idles,
                "targets": TARGETS,
                "verdicts": verdicts,
                "wall_s": elapsed,
            },
        )


if __name__ == "__main__":
    main()
