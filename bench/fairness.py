"""Fairness between tenants under a burst (issue 31), in local mode (real processes on moto).

One tenant (``big``) has 5,000 jobs whose slot is one instant; another (``small``) has 20 jobs
due at the same instant. The poller releases the instant's slots one tenant at a time
(``punctual/dispatch/polling/fairness.py``), so the small tenant's slots go out in the first chunk and
are not pushed behind the burst. Printed: each tenant's slot -> receipt delay (when the local
webhook receiver got the slot's first request) p50 / p90 / p99 / max, and when the burst's last
slot ran. Target: the small tenant's p99 at most 1 s.

The big tenant's jobs are written through the job service straight into local mode's table (the
same registration code the API runs): through the API, the tenant's request quota
(``apiRequestsPerMinutePerTenant``, 1,200 a minute) would spread 5,000 registrations over four
minutes. The small tenant registers through the API. Both use the recurring ``rate(1 day)``
schedule from the instant, the first second of a minute, as a top-of-minute cron burst does.

Usage: ``python bench/fairness.py [--big 5000] [--small 20] [--workers 3] [--small-only] [--log-level DEBUG]``
(``--small-only`` stops once the small tenant's slots are in, for iterations; ``DEBUG`` logs the
release's chunks and the workers' batches, timed, in ``<state>/up.out``).
"""

from __future__ import annotations

import argparse
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import benchlib

from local import harness
from local.harness import LocalMode

PAYLOAD = {"job": "<job_id>", "slot": "<slot>", "attempt": "<attempt>"}
SMALL_TARGET_P99_S = 1.0
# Between the end of registration and the instant: past the far-lane threshold (180 s), so every
# timer of the burst is in its minute's far bucket, read once before the minute, as a top-of-minute
# cron burst registered ahead is (a burst registered inside the near lane is bench/local_scale.py's)
MARGIN_S = 200.0
REGISTER_THREADS = 8
WARM_UP = 200  # registrations that measure the rate the instant is chosen from


def _spec(local: LocalMode, hook: str, slot: datetime) -> dict[str, Any]:
    return {
        "name": hook,
        "schedule": "rate(1 day)",
        "start_at": slot.isoformat(),
        "target": {"type": "http", "url": local.hook(hook)},
        "payload": PAYLOAD,
        "timeout_seconds": 30,
    }


def register_direct(local: LocalMode, tenant: str, spec: dict[str, Any], count: int) -> float:
    """``count`` jobs of ``tenant`` through the job service on local mode's table; seconds taken."""
    import json

    import boto3

    from punctual.dispatch.queues import MemoryQueues
    from punctual.models import JobSpec
    from punctual.runtime.clock import SystemClock
    from punctual.runtime.settings import Settings
    from punctual.store.dynamo import DynamoStore
    from punctual.usecases.jobs import JobService

    deployment = json.loads((local.state / "run" / "deployment.json").read_text())
    session = boto3.session.Session(
        aws_access_key_id="local", aws_secret_access_key="local", region_name="us-east-1"
    )
    settings = Settings(
        table_name=deployment["table_name"],
        short_queue_urls=deployment["short_queue_urls"],
        long_queue_urls=deployment["long_queue_urls"],
        shard_count=4,  # local mode's (punctual-local --shards, --near-shards)
        near_shard_count=2,
    )
    store = DynamoStore(
        session.client("dynamodb", endpoint_url=local.aws_url), settings.table_name, settings.layout()
    )
    clock = SystemClock()
    service = JobService(
        store,
        MemoryQueues(now=clock.now),
        clock,
        settings.layout(),
        settings.routing(),
        allow_cidrs=("127.0.0.0/8",),  # the local receiver, as local mode's API allows it
    )
    model = JobSpec.model_validate(spec)
    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=REGISTER_THREADS) as pool:
        list(pool.map(lambda _: service.register(tenant, model), range(count)))
    return time.perf_counter() - began


def register_api(local: LocalMode, tenant: str, spec: dict[str, Any], count: int) -> None:
    for _ in range(count):
        status, body = local.api("POST", "/v1/jobs", spec, tenant=tenant)
        if status != 201:
            raise RuntimeError(f"registration refused ({status}): {body}")


def delays(records: list[dict[str, Any]], hook: str, slot: datetime) -> list[float]:
    """slot -> first receipt of each job's slot, seconds."""
    first: dict[str, float] = {}
    for r in records:
        if r.get("name") == hook:
            first[r["job"]] = min(first.get(r["job"], r["arrived"]), r["arrived"])
    return [arrived - slot.timestamp() for arrived in first.values()]


def run(local: LocalMode, big: int, small: int, small_only: bool = False) -> dict[str, Any]:
    since = len(local.records())
    # The registration rate on this machine, from jobs that fire long after the run.
    later = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    sample_s = register_direct(local, "big", _spec(local, "fair-later", later), WARM_UP)
    rate = WARM_UP / sample_s
    # The instant is a minute's first second, as a cron burst's is (``cron(0 * * * ? *)``).
    ready = datetime.now(UTC) + timedelta(seconds=big / rate * 1.4 + MARGIN_S)
    slot = ready.replace(second=0, microsecond=0) + timedelta(minutes=1)
    registered_s = register_direct(local, "big", _spec(local, "fair-big", slot), big)
    register_api(local, "small", _spec(local, "fair-small", slot), small)
    load_before = load_average()
    late = (datetime.now(UTC) - slot).total_seconds()
    if late > 0:
        raise RuntimeError(f"registration ended {late:.1f} s after the instant: raise MARGIN_S")

    def arrived() -> list[dict[str, Any]] | None:
        records = local.records(since)
        if small_only:  # an iteration: the small tenant's slots (and the burst's before them) are in
            done = {r["job"] for r in records if r.get("name") == "fair-small"}
            return records if len(done) >= small else None
        done = {r["job"] for r in records if r.get("name") in ("fair-big", "fair-small")}
        return records if len(done) >= big + small else None

    records = local.wait(arrived, timeout_s=max(300.0, big * 0.2), what="every burst slot", interval_s=2.0)
    small_s = delays(records, "fair-small", slot)
    big_s = delays(records, "fair-big", slot)
    # What the order alone did, whatever the machine's load: when the first slot of either tenant
    # arrived (the release's own lateness), and how many of the burst's slots arrived before the
    # small tenant's last one (without fairness: all 5,000).
    first_any = min([*small_s, *big_s])
    return {
        "first_slot_s": first_any,
        "small_after_first_slot_s": benchlib.summary([d - first_any for d in small_s]),
        "big_before_small_last": sum(1 for d in big_s if d < max(small_s)),
        "big_jobs": big,
        "small_jobs": small,
        "big_registered_per_s": big / registered_s,
        "small_slot_to_receipt_s": benchlib.summary(small_s),
        "big_slot_to_receipt_s": benchlib.summary(big_s),
        "big_last_ran_s": max(big_s),
        "small_last_ran_s": max(small_s),
        # The machine is shared: the 1-minute load average when registration ended (the instant
        # is minutes later) and once the slots were in.
        "load_average_1m": {"registered": load_before, "end": load_average()},
    }


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def fmt(summary: dict[str, float | None]) -> str:
    values = [summary.get(k) for k in ("p50", "p90", "p99", "max")]
    return " / ".join(f"{v * 1000:,.0f}" if v is not None else "-" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--big", type=int, default=5000, help="the big tenant's slots at the instant")
    parser.add_argument("--small", type=int, default=20, help="the small tenant's slots at the instant")
    parser.add_argument("--workers", type=int, default=3, help="worker processes (punctual-local --workers)")
    parser.add_argument("--state-dir", default="", help="local mode's state (default .local/bench-fairness)")
    parser.add_argument("--no-json", action="store_true")
    parser.add_argument(
        "--small-only",
        action="store_true",
        help="stop once the small tenant's slots are in (for iterations: the burst's figures are"
        " partial, nothing is written)",
    )
    parser.add_argument(
        "--log-level",
        choices=("DEBUG", "INFO"),
        default="INFO",
        help="local mode's log level (DEBUG: the release's chunks and the workers' batches, timed)",
    )
    args = parser.parse_args()
    began = time.perf_counter()
    flags = ("--no-demo", "--workers", str(args.workers), "--log-level", args.log_level)
    benchlib.heading(f"Fairness: {args.big:,} slots of one tenant and {args.small} of another at one instant")
    # Local mode's state (its logs among it) stays in .local/bench-fairness for a look afterwards.
    state = Path(args.state_dir) if args.state_dir else benchlib.ROOT / ".local" / "bench-fairness"
    shutil.rmtree(state, ignore_errors=True)
    with harness.running(state, *flags, tenant="small") as local:
        result = run(local, args.big, args.small, args.small_only)
    result["workers"] = args.workers
    result["wall_s"] = time.perf_counter() - began
    p99 = result["small_slot_to_receipt_s"]["p99"]
    result["verdicts"] = {"small_tenant_p99_le_1s": p99 is not None and p99 <= SMALL_TARGET_P99_S}
    print(
        benchlib.table(
            ["tenant", "slots", "slot->receipt ms p50/p90/p99/max", "last ran s"],
            [
                (
                    "small",
                    args.small,
                    fmt(result["small_slot_to_receipt_s"]),
                    f"{result['small_last_ran_s']:.2f}",
                ),
                ("big", args.big, fmt(result["big_slot_to_receipt_s"]), f"{result['big_last_ran_s']:.2f}"),
            ],
            align="lrlr",
        )
    )
    after = fmt(result["small_after_first_slot_s"]).split(" / ")[2]
    print(
        f"the first slot of either arrived {result['first_slot_s']:.2f} s after the instant; the small"
        f" tenant's p99 from then {after} ms; {result['big_before_small_last']:,} of the burst's"
        f" {args.big:,} slots arrived before its last"
    )
    print(
        "target: small tenant's p99 <= 1 s:",
        "MET" if result["verdicts"]["small_tenant_p99_le_1s"] else "MISSED",
    )
    print(f"({result['wall_s']:.0f} s)")
    loads = result["load_average_1m"]
    print(f"1-minute load average: {loads['registered']:.1f} when registered, {loads['end']:.1f} at the end")
    if not args.no_json and not args.small_only:
        benchlib.write_result("fairness", result)


if __name__ == "__main__":
    main()
