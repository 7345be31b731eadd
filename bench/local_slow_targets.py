"""One tenant's slow targets beside another tenant's fast jobs, in local mode: do the fast slots
still start on time?

A Lambda batch holds its execution environment until its slowest message is done, and the SQS
event source mapping adds environments while messages wait. Local mode has two standing worker
processes; its supervisor scales as the event source does (:class:`local.scaling.ReactiveWorkers`,
``--event-source-workers``, 2 by default). A newcomer's run found, before it did, two jobs whose
webhook took 8 s holding every tenant's slots 5-10 s late.

For each way (the event source's scaling off, ``--event-source-workers 0``, then on), this starts
local mode (no demo) and registers, in tenant ``slow``, three ``rate(3 seconds)`` jobs whose webhook
answers after 8 s (overlap ``skip``, overlap ``queue``, and ``timeout_seconds: 2``), and in tenant
``fast`` six ``rate(2 seconds)`` jobs whose webhook answers at once; after ``--seconds`` it reads
the fast jobs' records and prints how late each slot started (its first attempt's start less its
instant; slots of the first 15 s left out while the workers warm). The machine is shared: the
figures are the point, not a timing assertion.

Usage: ``python bench/local_slow_targets.py [--seconds 100] [--only off|on] [--no-json]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import benchlib

from local.harness import running

SLOW = {
    "slowskip": {"overlap": "skip"},
    "slowqueue": {"overlap": "queue"},
    "slowtimeout": {"timeout_seconds": 2},
}
FAST_JOBS = 6
WARM_S = 15.0


def _instant(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def measure(seconds: float, scaling: bool, most: int | None = None) -> dict[str, Any]:
    extra = ["--no-demo", "--event-source-workers", str(most if scaling and most is not None else 0)]
    if scaling and most is None:
        extra = extra[:1]  # local mode's default
    with (
        tempfile.TemporaryDirectory(prefix="slow-targets-") as state,
        running(Path(state), *extra, tenant="fast") as local,
    ):
        for name, policy in SLOW.items():
            spec = {
                "name": name,
                "schedule": "rate(3 seconds)",
                "target": {"type": "http", "url": local.hook(name) + "?delay=8"},
            }
            status, body = local.api("POST", "/v1/jobs", {**spec, **policy}, tenant="slow")
            assert status == 201, body
        fast = []
        for index in range(FAST_JOBS):
            spec = {
                "name": f"fast{index}",
                "schedule": "rate(2 seconds)",
                "target": {"type": "http", "url": local.hook(f"fast{index}")},
            }
            status, body = local.api("POST", "/v1/jobs", spec)
            assert status == 201, body
            fast.append(body["id"])
        began = time.time()
        time.sleep(seconds)
        delays: list[float] = []
        for job_id in fast:
            status, page = local.api("GET", f"/v1/jobs/{job_id}/executions?limit=100")
            for record in page["items"] if status == 200 else []:
                if record.get("started_at") and _instant(record["scheduled_at"]) >= began + WARM_S:
                    delays.append(_instant(record["started_at"]) - _instant(record["scheduled_at"]))
        added = local.log().count("one more worker")
    delays.sort()
    count = len(delays)
    return {
        "event_source_scaling": scaling,
        "slots": count,
        "p50_s": statistics.median(delays) if delays else None,
        "p99_s": delays[max(0, int(count * 0.99) - 1)] if delays else None,
        "max_s": delays[-1] if delays else None,
        "over_1s": sum(1 for d in delays if d > 1.0),
        "workers_added": added,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=100.0)
    parser.add_argument("--only", choices=("off", "on"), help="one way only")
    parser.add_argument("--most", type=int, help="--event-source-workers when on (default: local mode's)")
    parser.add_argument("--no-json", action="store_true")
    args = parser.parse_args()
    ways = [w for w in ("off", "on") if args.only in (None, w)]
    results = {way: measure(args.seconds, way == "on", args.most) for way in ways}
    benchlib.heading("Fast jobs beside another tenant's 8 s webhooks: slot start delay")
    rows = [
        (way, r["slots"], r["p50_s"], r["p99_s"], r["max_s"], r["over_1s"], r["workers_added"])
        for way, r in results.items()
    ]
    print(
        benchlib.table(
            ["event source scaling", "slots", "p50 s", "p99 s", "max s", "> 1 s", "workers added"], rows
        )
    )
    if not args.no_json:
        benchlib.write_result("local_slow_targets", {"date": datetime.now(UTC).isoformat(), **results})


if __name__ == "__main__":
    main()
