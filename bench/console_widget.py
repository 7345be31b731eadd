"""The console widget: what one render reads and costs, and paging through 10,000 jobs.

1. **One render** of a full page (20 jobs, each with more history than the 30 slots read):
   DynamoDB requests and read units counted by :mod:`awsmeter` on moto, the renderer's own CPU
   time (the same page rendered from the in-memory store, so moto's work is not counted), and
   the HTML size.
2. **Paging at 10,000 jobs**: the widget's *Next page* action followed from the first page to
   the last, on the in-memory store and on DynamoDB under moto: pages, jobs seen (each once, in
   order), render time of the first and last pages.
3. **Cost** of the widget Lambda (256 MB, arm64) per render and per month for a dashboard left
   open all month at a 1-minute auto-refresh, which is the figure added to the idle cost:
   request + duration (own CPU plus the sequential Queries at ``QUERY_LATENCY_MS`` each, as on
   AWS; moto's own latency is not AWS's) + read units (on-demand) + the platform's log lines.
   Nothing runs while nobody looks at the dashboard.

Writes ``bench/results/console_widget.json``. Figures only: nothing here asserts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib
from awsmeter import Meter

os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("AWS_ENDPOINT_URL", None)

TABLE = "punctual-console-bench"
ARN = "arn:aws:lambda:us-east-1:123456789012:function:punctual-console"
MEMORY_MB = 256  # infra/components/console.py
QUERY_LATENCY_MS = 10.0  # a DynamoDB Query from Lambda in the same region (assumed, not measured here)
LOG_BYTES_PER_INVOCATION = 350  # START, END and REPORT lines (the function logs nothing else)
LOGS_USD_PER_GB = 0.50  # CloudWatch Logs ingestion, standard class
REFRESH_S = 60
MINUTES_PER_MONTH = 43_800


def _jobs(store: Any, count: int, t0: datetime) -> list[str]:
    from punctual.models import Job

    base = Job.model_validate(
        {
            "id": "template",
            "schedule": "rate(1 minute)",
            "target": {"type": "http", "url": "https://example.com/hook"},
            "created_at": t0,
            "updated_at": t0,
            "anchor": t0,
            "next_fire_at": t0 + timedelta(seconds=30),
        }
    )
    ids = [f"job-{index:05d}" for index in range(count)]
    for index, job_id in enumerate(ids):
        tags = {"team": "data"} if index % 7 == 0 else {}
        store.create_job(
            base.model_copy(update={"id": job_id, "name": f"job {index}", "tags": tags}), None, 10**6
        )
    return ids


def _history(store: Any, job_ids: list[str], t0: datetime, slots: int) -> None:
    from punctual.models import Execution, ExecutionStatus

    for job_id in job_ids:
        for index in range(slots):
            scheduled = t0 - timedelta(minutes=slots - index)
            failed = index % 9 == 0
            store.save_execution(
                Execution(
                    job_id=job_id,
                    slot=scheduled.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    scheduled_at=scheduled,
                    status=ExecutionStatus.FAILED if failed else ExecutionStatus.SUCCEEDED,
                    started_at=scheduled + timedelta(milliseconds=40 + index * 7),
                    finished_at=scheduled + timedelta(seconds=1),
                    error="HTTP 500 Internal Server Error from https://hooks.example.com/x"
                    if failed
                    else None,
                ),
                None,
                0,
            )


def _walk(store: Any, settings: Any, params: dict[str, Any]) -> dict[str, Any]:
    from console_html import action_params, has_control, parse

    from punctual.console import service

    service.use_services(service.ConsoleServices(store, settings))
    seen: list[str] = []
    times: list[float] = []
    event: dict[str, Any] = {"widgetContext": {"params": params}}
    try:
        while True:
            started = time.perf_counter()
            html = service.widget_html(event, ARN)
            times.append(time.perf_counter() - started)
            rows = parse(html).tables["pc-jobs"].row_attrs
            seen += [row["data-job-id"] for row in rows if "data-job-id" in row]
            if not has_control(html, "Next page"):
                break
            event = {"widgetContext": {"params": params}, **action_params(html, "Next page")}
    finally:
        service.use_services(None)
    return {
        "pages": len(times),
        "jobs_seen": len(seen),
        "distinct": len(set(seen)),
        "in_order": seen == sorted(seen),
        "seen": seen,
        "first_page_ms": times[0] * 1000,
        "last_page_ms": times[-1] * 1000,
        "median_page_ms": statistics.median(times) * 1000,
        "total_s": sum(times),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--renders", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(benchlib.ROOT / "tests"))

    import boto3
    from moto import mock_aws

    from punctual.console import service
    from punctual.console.widget import ConsoleSettings
    from punctual.store.dynamo import DynamoStore, table_definition
    from punctual.store.memory import MemoryStore

    t0 = datetime.now(UTC).replace(microsecond=0)
    settings = ConsoleSettings(page_size=20, history_limit=30)
    prices = benchlib.load_prices()
    usd_request = benchlib.price(prices, "lambda.requests_per_million") / 1e6
    usd_gb_s = benchlib.price(prices, "lambda.arm64_gb_second")
    usd_rru = benchlib.price(prices, "dynamodb.on_demand_read_per_million") / 1e6

    benchlib.heading(
        f"Console widget: one render, paging through {args.jobs:,} jobs ({benchlib.machine_line()})"
    )
    memory = MemoryStore()
    ids = _jobs(memory, args.jobs, t0)
    _history(memory, ids[:40], t0, 40)

    # 1. One render: the renderer's own CPU (in-memory store) ...
    service.use_services(service.ConsoleServices(memory, settings))
    cpu: list[float] = []
    html = ""
    for _ in range(args.renders):
        started = time.process_time()
        html = service.widget_html({"widgetContext": {"params": {"tenant": "default"}}}, ARN, now=t0)
        cpu.append(time.process_time() - started)
    service.use_services(None)
    own_cpu_ms = statistics.median(cpu) * 1000
    memory_walk = _walk(memory, settings, {"tenant": "default"})
    memory_tagged = _walk(memory, settings, {"tenant": "default", "tag": "team=data"})

    # Local mode's moto patches: a Query reads one partition, a transaction snapshots only its
    # items, and moto keeps no copy of every item it ever made (see local/motopatch.py).
    from local import motopatch

    motopatch.apply()
    walked = f"{memory_walk['pages']} pages in {memory_walk['total_s']:.1f} s"
    print(f"in-memory store: walked {walked}", flush=True)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(**table_definition(TABLE))
        dynamo = DynamoStore(client, TABLE)
        started = time.perf_counter()
        _jobs(dynamo, args.jobs, t0)
        _history(dynamo, ids[:40], t0, 40)
        setup_s = time.perf_counter() - started
        # ... and what it reads from DynamoDB
        meter = Meter(phase="render")
        meter.install(client.meta.events)
        service.use_services(service.ConsoleServices(dynamo, settings))
        service.widget_html({"widgetContext": {"params": {"tenant": "default"}}}, ARN, now=t0)
        service.use_services(None)
        tallies = meter.snapshot()
        queries = sum(t.calls for (_, op, _), t in tallies.items() if op == "dynamodb.Query")
        rru = sum(t.rru for t in tallies.values())
        meter.phase = "walk"
        print(f"moto: {args.jobs:,} jobs registered in {setup_s:.0f} s", flush=True)
        dynamo_walk = _walk(dynamo, settings, {"tenant": "default"})
    motopatch.revert()

    duration_ms = own_cpu_ms + queries * QUERY_LATENCY_MS
    per_render = {
        "lambda_request": usd_request,
        "lambda_duration": MEMORY_MB / 1024 * duration_ms / 1000 * usd_gb_s,
        "dynamodb_reads": rru * usd_rru,
        "logs": LOG_BYTES_PER_INVOCATION / 1e9 * LOGS_USD_PER_GB,
    }
    per_render["total"] = sum(per_render.values())
    renders_per_month = MINUTES_PER_MONTH * 60 / REFRESH_S
    month = {k: v * renders_per_month for k, v in per_render.items()}

    print(
        benchlib.table(
            ["one render (page of 20 jobs, 30 slots read each)", "figure"],
            [
                ("DynamoDB Query requests", queries),
                ("read units (strongly consistent, counted from item sizes)", f"{rru:.1f}"),
                ("renderer's own CPU, median of renders (ms)", f"{own_cpu_ms:.1f}"),
                (
                    f"estimated Lambda duration: CPU + {queries} x {QUERY_LATENCY_MS:.0f} ms (ms)",
                    f"{duration_ms:.0f}",
                ),
                ("HTML returned (bytes)", len(html.encode())),
                ("$ per render", f"{per_render['total']:.8f}"),
                (
                    f"$ per month, dashboard open all month, refresh every {REFRESH_S} s",
                    f"{month['total']:.2f}",
                ),
            ],
        )
    )
    rows = []
    for label, walk in (
        ("in-memory store", memory_walk),
        ("in-memory store, tag team=data", memory_tagged),
        ("DynamoDB (moto, in-process)", dynamo_walk),
    ):
        rows.append(
            (
                label,
                walk["pages"],
                f"{walk['jobs_seen']:,} ({walk['distinct']:,} distinct, "
                + ("in order)" if walk["in_order"] else "OUT OF ORDER)"),
                f"{walk['first_page_ms']:.0f}",
                f"{walk['last_page_ms']:.0f}",
                f"{walk['median_page_ms']:.0f}",
                f"{walk['total_s']:.1f}",
            )
        )
    print()
    print(
        benchlib.table(
            [
                "paging, 20 jobs a page",
                "pages",
                "jobs seen",
                "first page ms",
                "last page ms",
                "median ms",
                "total s",
            ],
            rows,
        )
    )
    print(f"\n(moto setup: {args.jobs:,} jobs and 1,600 executions registered in {setup_s:.0f} s)")
    for walk in (memory_walk, memory_tagged, dynamo_walk):
        walk.pop("seen")
    benchlib.write_result(
        "console_widget",
        {
            "jobs": args.jobs,
            "page_size": settings.page_size,
            "history_limit": settings.history_limit,
            "render": {
                "queries": queries,
                "rru": rru,
                "own_cpu_ms": own_cpu_ms,
                "estimated_duration_ms": duration_ms,
                "html_bytes": len(html.encode()),
                "query_latency_ms_assumed": QUERY_LATENCY_MS,
            },
            "usd_per_render": per_render,
            "refresh_s": REFRESH_S,
            "usd_per_month_open_all_month": month,
            "paging": {"memory": memory_walk, "memory_tag": memory_tagged, "dynamodb_moto": dynamo_walk},
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
