"""How many slots per second one poller releases against moto in-process, and what bounds it.

Seeds N jobs whose slots all fall in one minute (far lane, every shard), then runs one
poller for that minute on a manual clock (no real waiting: only the work is timed). Counts
every AWS request by operation with boto3 event hooks, and the write/read units one
trigger costs on the dispatch side (computed from item sizes: moto reports no capacity).
Also times the same poller on the in-memory store and queue, to show how much of the time
is moto's.

    .venv/bin/python bench/dispatch_moto.py [--jobs 3000]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.pop("AWS_ENDPOINT_URL", None)

import boto3
from moto import mock_aws

from punctual.dispatch.polling import Poller, PollerConfig
from punctual.dispatch.queues import MemoryQueues, SqsQueues
from punctual.models import JobSpec
from punctual.runtime.clock import ManualClock
from punctual.store.dynamo import DynamoStore, job_pk, table_definition
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerLayout
from punctual.usecases.jobs import JobService, QueueRouting

LAYOUT = TimerLayout(shard_count=16, near_shard_count=1, far_threshold_s=180)
MINUTE = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _seed(count: int) -> tuple[MemoryStore, list]:  # type: ignore[type-arg]
    """Register the jobs on a memory store (fast), return it and the job rows."""
    clock = ManualClock(MINUTE - timedelta(minutes=10))
    store = MemoryStore()
    jobs = JobService(store, MemoryQueues(now=clock.now), clock, LAYOUT, QueueRouting(("q",)))
    made = []
    for i in range(count):
        start = MINUTE + timedelta(seconds=(i * 7919) % 60)
        spec = JobSpec.model_validate(
            {
                "schedule": "rate(1 day)",
                "start_at": start.isoformat(),
                "target": {"type": "http", "url": "https://example.com/hook"},
            }
        )
        made.append(jobs.register("default", spec)[0])
    return store, made


def _run(store, queues, config) -> float:  # type: ignore[no-untyped-def]
    clock = ManualClock(MINUTE - timedelta(seconds=10))
    dispatcher = Poller(store, queues, clock, config)
    started = time.perf_counter()
    report = dispatcher.run_minute(MINUTE)
    elapsed = time.perf_counter() - started
    return elapsed, report  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--json", default="bench/results/dispatch_moto.json")
    args = parser.parse_args(argv)

    memory_store, jobs = _seed(args.jobs)
    timers = [t for bucket in memory_store._buckets.values() for _, t in bucket]
    config = PollerConfig(layout=LAYOUT, short_queue_urls=("q",), poll_interval_s=5)
    mem_elapsed, _ = _run(memory_store, MemoryQueues(now=lambda: MINUTE), config)

    with mock_aws():
        ddb = boto3.client("dynamodb")
        ddb.create_table(**table_definition("bench"))
        sqs = boto3.client("sqs")
        url = sqs.create_queue(QueueName="short.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        store = DynamoStore(ddb, "bench")
        rows = [
            {"pk": {"S": job_pk("default", j.id)}, "sk": {"S": "job"}, **store._job_attrs(j)} for j in jobs
        ]
        for i in range(0, len(rows), 25):
            ddb.batch_write_item(
                RequestItems={"bench": [{"PutRequest": {"Item": r}} for r in rows[i : i + 25]]}
            )
        store.put_timers(timers)

        calls: Counter[str] = Counter()
        units: Counter[str] = Counter()
        durations: Counter[str] = Counter()
        starts: dict[int, float] = {}

        def timed(context, **_):  # type: ignore[no-untyped-def]
            starts[id(context)] = time.perf_counter()

        def before(params, model, **_):  # type: ignore[no-untyped-def]
            calls[model.name] += 1
            if model.name == "BatchWriteItem":
                for reqs in params["RequestItems"].values():
                    for r in reqs:
                        size = len(json.dumps(r["PutRequest"]["Item"]))
                        units["WRU timer writes"] += math.ceil(size / 1024)
            if model.name == "BatchGetItem":
                for req in params["RequestItems"].values():
                    per = 1.0 if req.get("ConsistentRead") else 0.5
                    units["RRU job reads"] += per * len(req["Keys"])  # each job item < 4 KB

        def after(http_response, parsed, context, model, **_):  # type: ignore[no-untyped-def]
            durations[model.name] += time.perf_counter() - starts.pop(id(context), time.perf_counter())
            if model.name == "Query" and parsed.get("Count"):
                size = sum(len(json.dumps(i)) for i in parsed.get("Items", []))
                units["RRU timer queries"] += math.ceil(size / 4096)  # strongly consistent

        for client in (ddb, sqs):
            client.meta.events.register("before-parameter-build", before)
            client.meta.events.register("before-call", timed)
            client.meta.events.register("after-call", after)
        # Workers drain the queue in a real deployment; moto's FIFO send slows down sharply
        # as a queue deepens, so a consumer thread keeps it shallow here too.
        consumer_client = boto3.client("sqs")
        stop = threading.Event()
        drained = [0]

        def consume() -> None:
            while not stop.is_set() or drained[0] < args.jobs:
                got = consumer_client.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get(
                    "Messages", []
                )
                if got:
                    consumer_client.delete_message_batch(
                        QueueUrl=url,
                        Entries=[
                            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)
                        ],
                    )
                    drained[0] += len(got)
                elif stop.is_set():
                    break
                else:
                    time.sleep(0.01)

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        config = PollerConfig(layout=LAYOUT, short_queue_urls=(url,), poll_interval_s=5, concurrency=8)
        moto_elapsed, moto_report = _run(store, SqsQueues(sqs, concurrency=8), config)
        stop.set()
        consumer.join(timeout=120)
        queued = drained[0]

    n = args.jobs
    result = {
        "jobs": n,
        "released_moto": moto_report.released,
        "queued_moto": queued,
        "moto_seconds": round(moto_elapsed, 2),
        "moto_slots_per_s": round(n / moto_elapsed, 1),
        "memory_seconds": round(mem_elapsed, 3),
        "memory_slots_per_s": round(n / mem_elapsed, 1),
        "calls_per_trigger": {k: round(v / n, 4) for k, v in sorted(calls.items())},
        "seconds_in_moto_by_call": {
            k: round(v, 2) for k, v in sorted(durations.items(), key=lambda x: -x[1])
        },
        "units_per_trigger": {k: round(v / n, 3) for k, v in sorted(units.items())},
    }
    print(f"one poller, {n} slots in one minute (far lane, {LAYOUT.shard_count} shards)")
    print(f"  moto in-process : {result['moto_slots_per_s']:>9} slots/s  ({moto_elapsed:.1f} s)")
    print(f"  in-memory       : {result['memory_slots_per_s']:>9} slots/s  ({mem_elapsed:.2f} s)")
    print(f"  released {moto_report.released}, received by the consumer {queued}")
    print("  time inside moto calls:", result["seconds_in_moto_by_call"])
    print("  requests per trigger  :", result["calls_per_trigger"])
    print("  capacity per trigger  :", result["units_per_trigger"])
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
