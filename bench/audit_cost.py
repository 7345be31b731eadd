"""The chain auditor: what checking every job costs, per job and at 10 million jobs, and idle.

1. **Per job.** A deployment's jobs (a mix of schedules: mostly cron and hourly-to-daily rates,
   some minutely and sub-minute, a few ``delay``, ``after`` and ``queue`` jobs) are registered on
   DynamoDB under moto, with few far shards (the audit's segments: 4 by default, so that each
   holds hundreds of jobs; at 10 million in 256 segments each holds 39,000, whose heads share far
   buckets more, so the per-job figures here are an upper bound) and the deployed near lane (8
   shards), their chains' timers where a live chain holds them, and the pollers' watermarks
   current. One full audit runs with every request counted by :mod:`awsmeter` (read units from
   item sizes with DynamoDB's rules: moto reports none); its own CPU time is measured on the same
   jobs in memory, plus parsing each stored job as the DynamoDB store does. A healthy table must
   give no repair.
2. **At 10 million jobs**: read units and CPU per job x 10,000,000 per pass; passes a month at
   the period (``auditPeriodMinutes``: 60 by default, and 360 and 1,440 for comparison); the
   auditor Lambda at 1,024 MB arm64 (its CPU time as measured here, and the Queries at
   ``QUERY_LATENCY_MS`` each, one after the other); the index's storage (its projected copy of
   each job) and its writes (one per job change: never per trigger). Prices from
   ``bench/prices.json``.
3. **Idle**: a run a minute over an empty index (its share of the 256 segments: one Query each)
   for 43,800 minutes: the figure added to the idle month (which counts requests, compute and
   reads, no CloudWatch alarm: the auditor's two, $0.20 a month, are given beside it).

Writes ``bench/results/audit_cost.json``. Figures only: nothing here asserts.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib
from awsmeter import Meter, item_size

os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("AWS_ENDPOINT_URL", None)

TABLE = "punctual-audit-bench"
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
JOBS_AT_SCALE = 10_000_000
MINUTES_PER_MONTH = 43_800
MEMORY_MB = 1024  # infra/constants.py AUDITOR_MEMORY_MB
QUERY_LATENCY_MS = 5.0  # a DynamoDB read from Lambda in the same region (assumed, not measured here)
ALARMS = 4  # ChainsBroken, JobsOrphaned, the auditor's errors and its silence (components/auditing.py)
ALARM_USD_MONTH = 0.10  # a standard-resolution alarm (https://aws.amazon.com/cloudwatch/pricing/)
PERIODS_MIN = (60, 360, 1440)
# The mix: (weight, schedule). Clock schedules dominate, as in the capacity model's 10 M jobs.
MIX = (
    (30, "cron(0 * * * ? *)"),
    (20, "cron(30 2 * * ? *)"),
    (15, "rate(1 hour)"),
    (10, "cron(*/5 * * * ? *)"),
    (8, "rate(1 day)"),
    (6, "rate(1 minute)"),
    (4, "rate(10 seconds)"),
    (3, "delay(10 minutes)"),
    (2, "after({parent})"),
    (2, "cron(0 9 ? * MON-FRI *)"),
)


def _register(jobs: Any, store: Any, clock: Any, count: int, rng: random.Random) -> list[Any]:
    from punctual.models import JobSpec

    weights = [w for w, _ in MIX]
    made: list[Any] = []
    parents: list[str] = []
    for index in range(count):
        schedule = rng.choices([s for _, s in MIX], weights)[0]
        if "{parent}" in schedule:
            if not parents:
                continue
            schedule = schedule.format(parent=rng.choice(parents))
        spec = JobSpec.model_validate(
            {
                "schedule": schedule,
                "target": {"type": "http", "url": "https://example.com/hook"},
                "payload": {
                    "job": "<job_id>",
                    "slot": "<slot>",
                    "report": "daily",
                    "owner": f"team-{index % 40}",
                },
                "overlap": "queue" if index % 50 == 0 else "allow",
                "tags": {"team": f"team-{index % 40}"},
            }
        )
        job, _ = jobs.register("default", spec, job_id=f"job-{index:07d}")
        made.append(job)
        if schedule.startswith("rate(1 hour)"):
            parents.append(job.id)
    return made


def _live_chains(store: Any, layout: Any, made: list[Any], audit_at: datetime, grace_s: float) -> None:
    """Write each chain where a live one holds it at ``audit_at``: a clock job's head timer (as the
    release of the slot before it wrote it), a delay job's last run and the timer its end wrote;
    and the watermarks the pollers would have moved."""
    from punctual.auditing.liveness import ChainKind, chain_kind, head_after
    from punctual.models import Execution, ExecutionStatus
    from punctual.timing.slots import dispatch_instant, fire_timer, next_slot, schedule_of
    from punctual.timing.timers import Lane, minute_of, slot_key

    since = audit_at - timedelta(seconds=grace_s)
    timers = []
    for job in made:
        kind = chain_kind(job)
        if kind is ChainKind.DELAY:
            slot = audit_at - timedelta(minutes=10, seconds=30)
            ended = slot + timedelta(seconds=20)
            run = Execution(
                job_id=job.id,
                tenant=job.tenant,
                slot=slot_key(slot),
                scheduled_at=slot,
                status=ExecutionStatus.SUCCEEDED,
                started_at=slot,
                finished_at=ended,
                job_version=job.version,
            )
            store.save_execution(run, None, 0)
            following = schedule_of(job).next_after(ended)
            timers.append(fire_timer(layout, job, following, ended))
            continue
        if kind is not ChainKind.CLOCK:
            continue
        head = head_after(job, since)
        if head is None:
            continue
        previous = next_slot(job, since - timedelta(days=2))
        written = job.updated_at
        while previous is not None and previous < head:
            written = max(written, dispatch_instant(job, previous))
            previous = next_slot(job, previous)
        timers.append(fire_timer(layout, job, head, written, chained=True))
    for start in range(0, len(timers), 500):
        store.put_timers(timers[start : start + 500])
    for lane, count in ((Lane.FAR, layout.shard_count), (Lane.NEAR, layout.near_shard_count)):
        store.advance_watermarks(lane, list(range(count)), minute_of(audit_at) + timedelta(minutes=1))


def _populated(store: Any, count: int, seed: int, layout: Any, audit_at: datetime, grace_s: float) -> Any:
    """``store`` with the bench's jobs and their live chains; the auditor over it at ``audit_at``."""
    from punctual.auditing import AuditConfig, ChainAuditor, Repairer
    from punctual.dispatch.queues import MemoryQueues, QueueRouting
    from punctual.runtime.clock import ManualClock
    from punctual.usecases.jobs import JobService

    clock = ManualClock(T0)
    queues = MemoryQueues(now=clock.now)
    routing = QueueRouting(("short",), ("long",))
    jobs = JobService(store, queues, clock, layout, routing, max_jobs_per_tenant=10**9)
    made = _register(jobs, store, clock, count, random.Random(seed))
    _live_chains(store, layout, made, audit_at, grace_s)
    clock.set(audit_at)
    config = AuditConfig(layout=layout, period_minutes=1, grace_s=grace_s)
    return ChainAuditor(store, clock, config, Repairer(store, layout, 30))


def measure(count: int, seed: int, segments: int) -> dict[str, Any]:
    import boto3
    from moto import mock_aws

    benchlib.fast_moto_queries()
    benchlib.fast_moto_transactions()
    from punctual.auditing import AuditConfig, ChainAuditor, Repairer
    from punctual.models import Job
    from punctual.runtime.settings import Settings
    from punctual.store.dynamo import DynamoStore, table_definition
    from punctual.store.memory import MemoryStore
    from punctual.timing.timers import TimerLayout

    # Few far shards (segments), so that a segment holds as many jobs as a bench can register: the
    # per-job figures are then an upper bound of those of 10 M jobs in 256 segments (39,000 each),
    # whose heads share far buckets more. The near lane is the deployed one (8 shards).
    defaults = Settings()
    layout = TimerLayout(segments, defaults.near_shard_count, defaults.far_threshold_s)
    grace_s = float(defaults.audit_grace_s)
    audit_at = T0 + timedelta(minutes=47, seconds=13)
    # The auditor's own CPU: the same jobs and chains on the in-memory store (moto's work is not
    # AWS's), each segment's page read from a ready index, plus parsing each job's stored document
    # as the DynamoDB store does.
    memory = MemoryStore(copy_items=False)
    own = _populated(memory, count, seed, layout, audit_at, grace_s)
    pages = {s: memory.audit_page(s, layout.shard_count, 10**9) for s in range(layout.shard_count)}
    memory.audit_page = lambda segment, segments, limit, cursor=None: pages[segment]  # type: ignore[method-assign]
    docs = [job.model_dump_json() for page in pages.values() for job in page.items if isinstance(job, Job)]
    cpu = time.process_time()
    own.audit(range(layout.shard_count))
    for doc in docs:
        Job.model_validate_json(doc)
    cpu_s = time.process_time() - cpu
    with mock_aws():
        meter = Meter()
        session = boto3.session.Session(region_name="us-east-1")
        meter.install(session.events)
        peek = boto3.client("dynamodb", region_name="us-east-1")
        meter.peek = peek
        client = session.client("dynamodb", region_name="us-east-1")
        client.create_table(**table_definition(TABLE))
        store = DynamoStore(client, TABLE, layout)
        auditor = _populated(store, count, seed, layout, audit_at, grace_s)
        meter.reset()
        meter.phase = "audit"
        report = auditor.audit(range(layout.shard_count))
        tallies = meter.snapshot()
        # Idle: the index empty, one run's share of the deployed 256 segments at the default period
        meter.reset()
        client.create_table(**table_definition(TABLE + "-idle"))
        layout = defaults.layout()
        idle_store = DynamoStore(client, TABLE + "-idle", layout)
        idle = ChainAuditor(
            idle_store, auditor.clock, AuditConfig(layout=layout), Repairer(idle_store, layout, 30)
        )
        cpu = time.process_time()
        idle_report = idle.run(audit_at)
        idle_cpu_s = time.process_time() - cpu
        idle_tallies = meter.snapshot()
        doc_bytes = [item_size(i) for i in peek.scan(TableName=TABLE, IndexName="audit")["Items"]]
    reads = sum(t.rru for t in tallies.values())
    calls = sum(t.calls for t in tallies.values())
    by_request = {
        f"{op} {kind}".strip(): {"calls": t.calls, "rru": round(t.rru, 2)}
        for (_, op, kind), t in tallies.items()
    }
    return {
        "jobs": report.jobs,
        "suspects": report.suspects,
        "confirmed_live": report.confirmed_live,
        "repairs": report.broken,
        "deferred": report.deferred,
        "rru_per_job": reads / max(report.jobs, 1),
        "requests_per_job": calls / max(report.jobs, 1),
        "cpu_us_per_job": cpu_s * 1e6 / max(report.jobs, 1),
        "timer_reads": report.timer_reads,
        "requests": by_request,
        "index_item_bytes_avg": sum(doc_bytes) / max(len(doc_bytes), 1),
        "idle_run": {
            "segments": len(idle_report.segments),
            "rru": sum(t.rru for t in idle_tallies.values()),
            "requests": sum(t.calls for t in idle_tallies.values()),
            "cpu_ms": idle_cpu_s * 1000,
        },
    }


def at_scale(measured: dict[str, Any], prices: dict[str, Any]) -> dict[str, Any]:
    rru_usd = benchlib.price(prices, "dynamodb.on_demand_read_per_million") / 1e6
    wru_usd = benchlib.price(prices, "dynamodb.on_demand_write_per_million") / 1e6
    gb_s_usd = benchlib.price(prices, "lambda.arm64_gb_second")
    request_usd = benchlib.price(prices, "lambda.requests_per_million") / 1e6
    storage_usd = benchlib.price(prices, "dynamodb.storage_gb_month")
    per_pass_rru = measured["rru_per_job"] * JOBS_AT_SCALE
    per_pass_s = JOBS_AT_SCALE * (
        measured["cpu_us_per_job"] / 1e6 + measured["requests_per_job"] * QUERY_LATENCY_MS / 1000
    )
    per_pass = {
        "read_units": per_pass_rru,
        "dynamodb_usd": per_pass_rru * rru_usd,
        "lambda_seconds": per_pass_s,
        "lambda_usd": per_pass_s * MEMORY_MB / 1024 * gb_s_usd,
    }
    per_pass["usd"] = per_pass["dynamodb_usd"] + per_pass["lambda_usd"]
    index_gb = JOBS_AT_SCALE * (measured["index_item_bytes_avg"] + 100) / 1e9  # 100 B overhead per item
    fixed = {
        "invocations_usd": MINUTES_PER_MONTH * request_usd,
        "index_storage_usd": index_gb * storage_usd,
        "alarms_usd": ALARMS * ALARM_USD_MONTH,
    }
    months = {}
    for period in PERIODS_MIN:
        passes = MINUTES_PER_MONTH / period
        months[f"every {period} min"] = {
            "passes": passes,
            "usd_per_month": passes * per_pass["usd"] + sum(fixed.values()),
            "run_seconds_each_minute": per_pass_s / period,
        }
    idle = measured["idle_run"]
    idle_run_s = idle["cpu_ms"] / 1000 + idle["requests"] * QUERY_LATENCY_MS / 1000
    idle_month = {
        "dynamodb_usd": MINUTES_PER_MONTH * idle["rru"] * rru_usd,
        "lambda_usd": MINUTES_PER_MONTH * (idle_run_s * MEMORY_MB / 1024 * gb_s_usd + request_usd),
    }
    # As the cost bench's fixed month: requests, compute and reads; CloudWatch alarms are outside
    # it (the stack's other alarms are not counted either), so they are given beside it.
    idle_month["total"] = sum(idle_month.values())
    idle_month["alarms_usd_not_in_total"] = ALARMS * ALARM_USD_MONTH
    return {
        "per_pass": per_pass,
        "fixed_usd_per_month": fixed,
        "index_gb": index_gb,
        "index_write_usd_per_job_change": wru_usd,
        "months": months,
        "idle_usd_per_month": idle_month,
    }


def idle_month_usd() -> float:
    """The auditor's share of an idle month (read by ``bench/cost_per_million.py``): 0 until this
    benchmark has written its result."""
    return benchlib.result_figure("audit_cost", "at_scale", "idle_usd_per_month", "total")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1500)
    parser.add_argument("--segments", type=int, default=4, help="far shards: the audit's segments")
    parser.add_argument("--seed", type=int, default=28)
    args = parser.parse_args()
    prices = benchlib.load_prices()
    benchlib.heading(f"Chain audit of {args.jobs:,} jobs on moto ({args.segments} segments, 8 near shards)")
    measured = measure(args.jobs, args.seed, args.segments)
    measured["segments"] = args.segments
    print(
        benchlib.table(
            ["jobs", "suspects", "repairs", "RRU/job", "requests/job", "CPU µs/job", "index item B"],
            [
                (
                    measured["jobs"],
                    measured["suspects"],
                    measured["repairs"],
                    measured["rru_per_job"],
                    measured["requests_per_job"],
                    measured["cpu_us_per_job"],
                    measured["index_item_bytes_avg"],
                )
            ],
        )
    )
    print(
        benchlib.table(
            ["request", "calls", "RRU"], [(k, v["calls"], v["rru"]) for k, v in measured["requests"].items()]
        )
    )
    scale = at_scale(measured, prices)
    benchlib.heading(f"At {JOBS_AT_SCALE:,} jobs")
    p = scale["per_pass"]
    print(
        f"one pass: {p['read_units']:,.0f} read units (${p['dynamodb_usd']:.2f}), "
        f"{p['lambda_seconds']:,.0f} Lambda-seconds at {MEMORY_MB} MB (${p['lambda_usd']:.2f}): "
        f"${p['usd']:.2f}"
    )
    print(
        benchlib.table(
            ["period", "passes/month", "$ per month", "auditor s per minute"],
            [
                (k, v["passes"], v["usd_per_month"], v["run_seconds_each_minute"])
                for k, v in scale["months"].items()
            ],
        )
    )
    fixed = scale["fixed_usd_per_month"]
    print(
        f"fixed: invocations ${fixed['invocations_usd']:.2f}, "
        f"index storage ${fixed['index_storage_usd']:.2f} "
        f"({scale['index_gb']:.1f} GB), alarms ${fixed['alarms_usd']:.2f}; index write per job change "
        f"${scale['index_write_usd_per_job_change'] * 1e6:.3f} per million changes; per trigger: nothing"
    )
    idle = scale["idle_usd_per_month"]
    benchlib.heading("Idle (no job): a run a minute over an empty index")
    print(
        f"${idle['total']:.3f} a month: reads ${idle['dynamodb_usd']:.3f}, "
        f"Lambda ${idle['lambda_usd']:.3f} ({measured['idle_run']['segments']} segments a run); "
        f"its four alarms ${idle['alarms_usd_not_in_total']:.2f} beside it (the fixed month counts no alarm)"
    )
    benchlib.write_result("audit_cost", {"measured": measured, "at_scale": scale})


if __name__ == "__main__":
    main()
