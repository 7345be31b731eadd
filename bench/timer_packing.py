"""What a next-slot timer costs to write at 10,000 triggers per second (no AWS, no moto).

The poller writes the next timers of each release together, and the DynamoDB store packs
those that share a bucket and a due window into one item (``DynamoStore._timer_rows``).
How well they pack depends on how many timers one release holds, which depends on the
rate per poller: the cost benchmark's small moto run (a few triggers a second) packs
poorly, a poller at 10,000/s packs well. This benchmark runs the real ``Poller`` of
ONE shard group of a 10,000/s deployment (shard counts and group count from cdk.json)
against the in-memory store on a simulated clock, and prices every ``put_timers`` call
as the DynamoDB items it would write: write units per next timer, bytes per packed entry.

The workload is the cost benchmark's mix (every five minutes at :00, rate(1 minute) with
first slots spread over the minute, every minute at :00) over 100 tenants named by IAM
role ARNs, scaled so the group releases ``rate / groups`` triggers per second.

Usage: ``python bench/timer_packing.py [--rate 10000] [--minutes 2] [--no-json]``
"""

from __future__ import annotations

import argparse
import json
import math
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import awsmeter
import benchlib

from punctual.dispatch.polling import MinutePoll, Poller, PollerConfig
from punctual.dispatch.queues import MemoryQueues
from punctual.models import JobSpec
from punctual.runtime.clock import ManualClock
from punctual.store.dynamo import DynamoStore
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerLayout, shard_of
from punctual.usecases.jobs import JobService, QueueRouting

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
QUEUE = "queue://short"
LEAD_S = 10.0
MIX = benchlib.COST_MIX
TRIGGERS_PER_JOB_MINUTE = 0.5 / 5 + 0.3 + 0.2
TENANTS = 100  # IAM role ARNs: a pack lists each of its tenants once


class PricedStore(MemoryStore):
    """The in-memory store, pricing each ``put_timers`` as DynamoDB items once armed."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.dynamo = DynamoStore(None, "priced")
        self.calls = self.timers = self.items = self.packs = self.wru = self.packed_bytes = 0
        self.packed_entries = 0

    def put_timers(self, timers: Any) -> None:
        if self.armed and timers:
            self.calls += 1
            self.timers += len(timers)
            for item in self.dynamo._timer_rows(timers):
                size = awsmeter.item_size(item)
                self.items += 1
                self.wru += awsmeter.write_units(size)
                if "tm" in item:
                    self.packs += 1
                    self.packed_bytes += size
                    self.packed_entries += int(item["n"]["N"])
        super().put_timers(timers)


def deployment() -> dict[str, int]:
    context = json.loads((benchlib.ROOT / "cdk.json").read_text())["context"]
    return {
        "far": int(context["shardCount"]),
        "near": int(context["nearShardCount"]),
        "per_poller_minute": int(context.get("triggersPerPollerMinute", 60_000)),
        "max_groups": int(context["maxShardGroups"]),
    }


def tenant_of(index: int) -> str:
    return f"arn:aws:iam::123456789012:role/team-{index % TENANTS:03d}"


def group_jobs(count: int, far: int, groups: int) -> list[str]:
    """``count`` job ids whose far shard (with the tenant each is registered under) falls in
    group 0 of ``groups``."""
    out: list[str] = []
    n = 0
    while len(out) < count:
        job_id = f"job-{n:08d}"
        n += 1
        if shard_of(tenant_of(len(out)), job_id, far) % groups == 0:
            out.append(job_id)
    return out


def run(rate: float, minutes: int) -> dict[str, Any]:
    dep = deployment()
    groups = min(dep["max_groups"], max(1, math.ceil(rate * 60 / dep["per_poller_minute"])))
    per_group = rate / groups
    job_count = round(per_group * 60 / TRIGGERS_PER_JOB_MINUTE)
    layout = TimerLayout(shard_count=dep["far"], near_shard_count=dep["near"], far_threshold_s=180)
    store = PricedStore()
    clock = ManualClock(T0 - timedelta(minutes=5))
    queues = MemoryQueues(now=clock.now)
    service = JobService(store, queues, clock, layout, QueueRouting((QUEUE,), ()), max_jobs_per_tenant=10**9)
    started = time.perf_counter()
    ids = group_jobs(job_count, dep["far"], groups)
    for index, job_id in enumerate(ids):
        share = index / len(ids)
        expression = (
            MIX[0][1] if share < MIX[0][0] else MIX[1][1] if share < MIX[0][0] + MIX[1][0] else MIX[2][1]
        )
        spec = JobSpec.model_validate(
            {
                "schedule": expression,
                "start_at": (T0 + timedelta(seconds=index % 60)).isoformat(),
                "target": {"type": "http", "url": "https://example.com/hook"},
            }
        )
        service.register(tenant_of(index), spec, job_id=job_id)
    registered_s = time.perf_counter() - started
    dispatcher = Poller(store, queues, clock, PollerConfig(layout=layout, short_queue_urls=(QUEUE,)))
    store.armed = True
    released = 0
    for k in range(minutes):
        minute = T0 + timedelta(minutes=k)
        clock.set(minute - timedelta(seconds=LEAD_S))
        run_: MinutePoll = dispatcher.minute_poll(minute, group=0, group_count=groups)
        run_.start()
        while (wake := run_.step()) is not None:
            released += len(queues.drain(QUEUE))
            clock.set(max(wake, clock.now() + timedelta(milliseconds=1)))
        run_.finish()
        released += len(queues.drain(QUEUE))
    wall = time.perf_counter() - started
    return {
        "rate": rate,
        "groups": groups,
        "group_rate_per_s": per_group,
        "shards": {"far": dep["far"], "near": dep["near"]},
        "jobs_in_group": len(ids),
        "minutes": minutes,
        "released": released,
        "put_timers_calls": store.calls,
        "next_timers": store.timers,
        "items": store.items,
        "packs": store.packs,
        "timers_per_item": store.timers / store.items if store.items else None,
        "wru": store.wru,
        "wru_per_timer": store.wru / store.timers if store.timers else None,
        "bytes_per_packed_entry": store.packed_bytes / store.packed_entries if store.packed_entries else None,
        "registration_s": registered_s,
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=10_000)
    parser.add_argument("--minutes", type=int, default=2)
    parser.add_argument("--no-json", action="store_true")
    args = parser.parse_args()
    benchlib.heading("Timer writes per trigger at scale (real Poller, in-memory store, priced as DynamoDB)")
    result = run(args.rate, args.minutes)
    print(
        benchlib.table(
            ["figure", "value"],
            [
                [
                    "deployment rate / groups / one group's rate",
                    f"{args.rate:,.0f}/s / {result['groups']} / {result['group_rate_per_s']:,.0f}/s",
                ],
                ["far / near shards", f"{result['shards']['far']} / {result['shards']['near']}"],
                [
                    "jobs in the group / released in the run",
                    f"{result['jobs_in_group']:,} / {result['released']:,}",
                ],
                [
                    "next timers written / items / packs",
                    f"{result['next_timers']:,} / {result['items']:,} / {result['packs']:,}",
                ],
                ["timers per item", result["timers_per_item"]],
                ["write units per next timer (a row alone: 1)", result["wru_per_timer"]],
                ["bytes per packed entry", result["bytes_per_packed_entry"]],
                ["wall (registration)", f"{result['wall_s']:.1f} s ({result['registration_s']:.1f} s)"],
            ],
        )
    )
    if not args.no_json:
        path = benchlib.write_result(
            "timer_packing",
            {
                "benchmark": "timer_packing",
                "date": benchlib.now_iso(),
                "machine": benchlib.machine(),
                **result,
            },
        )
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
