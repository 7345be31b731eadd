"""Benchmark 3: the scheduler's own CPU cost per trigger (no AWS, no moto).

The poller (``Poller`` minute polls, driven step by step on a ``ManualClock``) and the
worker core (``Worker.process``: claim, run, finish) run against ``MemoryStore`` and
``MemoryQueues`` with a target that answers at once. Every message goes through the same
SQS encoding the cloud path uses (body, group id, dedup id; then the body decoded). The
figure is CPU microseconds per trigger (``time.process_time_ns``, all threads), beside
the bare minimum measured in the same run over the same triggers: one next-slot
computation plus encoding and decoding one message.

The in-memory store and queues stand in for DynamoDB and SQS: the CPU inside their calls is
timed apart (``Metered``; the wrapper's own cost outside its windows, measured on a call that
does nothing, is shown apart too) and is not ours; in the cloud our side of those calls is the item
marshalling, a separate row measured alone (the poller's job document parse, the next timer
packed, each timer unpacked as often as the simulation's bucket queries returned it, the
execution document written twice; the worker parses the job its message carries, in its own
phase), and botocore's request building, a table of its own. Then cProfile names the top
costs with file:line.

Usage: ``python bench/cpu_per_trigger.py [--jobs N] [--minutes M] [--no-json]``
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import os
import pstats
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import benchlib
from cpu_meters import FULL_GC, Metered, overhead_ns

# The Lambda poller's and worker's metrics sink is Powertools' (its namespace from the stack); the
# bench runs that sink too, its EMF lines thrown away (the write to the log is not timed).
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "PunctualBench")
os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "punctual")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")

from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.polling import MinutePoll, Poller, PollerConfig
from punctual.dispatch.queues import DispatchMessage, MemoryQueues, message_for
from punctual.execution import MemoryFailureSink, Worker, WorkerConfig
from punctual.models import Execution, ExecutionStatus, JobSpec
from punctual.runtime import lambda_support
from punctual.runtime.clock import ManualClock
from punctual.security.message_auth import DispatchSigner
from punctual.store.dynamo import DynamoStore
from punctual.store.dynamo.execution_docs import record_attributes

try:  # the pack cache (a store without it unpacks every read: measured the same way)
    from punctual.store.dynamo.timers import _unpacked
except ImportError:  # pragma: no cover - older stores
    _unpacked = None
from punctual.store.memory import MemoryStore
from punctual.timing.schedules import parse_schedule
from punctual.timing.timers import Lane, Timer, TimerKind, TimerLayout, slot_key
from punctual.usecases.jobs import JobService, QueueRouting

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)  # a Monday
QUEUE = "queue://short"
TARGET_US = 100.0
NEAR_REREADS = 8  # a near timer comes back in every poll of its look-back (skew 5 s + 2 polls) + 1
LEAD_S = 10.0
# (share of jobs, schedule): every-minute jobs chain through the near lane (next slot 60 s
# ahead, under the 180 s far threshold), five-minute ones through the far lane.
MIX: list[tuple[float, str]] = [
    (0.5, "rate(1 minute)"),
    (0.3, "cron(* * * * ? *)"),
    (0.2, "cron(0/5 * * * ? *)"),
]
SIGNER = DispatchSigner("bench-dispatch-key-" + "0" * 32)  # messages are signed and verified, as in the cloud


class InstantTarget:
    """A target that succeeds at once: the run costs nothing, so the figure is ours."""

    calls = 0

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        self.calls += 1
        return TargetResult.ok()


@dataclass
class Phases:
    dispatch_ns: int = 0
    transport_ns: int = 0
    worker_ns: int = 0
    # CPU inside the in-memory store's and queues' calls during each phase (in the phase's figure)
    dispatch_store_ns: int = 0
    worker_store_ns: int = 0
    # calls through the meter in each phase: each adds the meter's own overhead (cpu_meters.overhead_ns)
    dispatch_store_calls: int = 0
    worker_store_calls: int = 0
    # CPU in full garbage collections during each phase (FullCollections; in the phase's figure)
    dispatch_gc_ns: int = 0
    transport_gc_ns: int = 0
    worker_gc_ns: int = 0
    timers_read: int = 0  # timers the poller's bucket queries returned (near ones come back each poll)
    wall_ns: int = 0
    triggers: int = 0
    claimed: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    delays_ms: list[float] = field(default_factory=list)


def job_schedules(jobs: int) -> dict[str, str]:
    """job id -> schedule expression, in the mix and order ``build`` registers them."""
    out: dict[str, str] = {}
    for share, expression in MIX:
        for _ in range(round(jobs * share)):
            out[f"job-{len(out):07d}"] = expression
    return out


def build(
    jobs: int, layout: TimerLayout, store: MemoryStore, meter: Metered | None = None
) -> tuple[MemoryQueues, ManualClock, Poller, Worker]:
    """The registered jobs, a poller and a worker; with ``meter`` (wrapping ``store``), the poller
    and the worker reach the store and the queues through it and ``meter.ns`` counts their CPU."""
    clock = ManualClock(T0 - timedelta(minutes=5))
    queues = MemoryQueues(now=clock.now)
    service = JobService(store, queues, clock, layout, QueueRouting((QUEUE,), ()), max_jobs_per_tenant=10**9)
    for index, (job_id, expression) in enumerate(job_schedules(jobs).items()):
        start = T0 + timedelta(seconds=index % 60)  # first slots spread over the first minute
        spec = JobSpec.model_validate(
            {
                "schedule": expression,
                "start_at": start.isoformat(),
                "target": {"type": "http", "url": "https://example.com/hook"},
                "payload": {"n": index},
            }
        )
        service.register("default", spec, job_id=job_id)
    config = PollerConfig(layout=layout, short_queue_urls=(QUEUE,), grace_s=5.0, concurrency=8)
    hot_store: Any = store if meter is None else meter
    hot_queues: Any = queues if meter is None else Metered(queues, into=meter)
    dispatcher = Poller(hot_store, hot_queues, clock, config, metrics=lambda_support.PowertoolsMetrics())
    worker = Worker(
        hot_store,
        hot_queues,
        InstantTarget(),
        clock,
        WorkerConfig(layout=layout, short_queue_urls=(QUEUE,)),
        metrics=lambda_support.PowertoolsMetrics(),  # the Lambda worker's sink
        failures=MemoryFailureSink(),
        signer=SIGNER,  # the claim verifies each message's signature, as in the cloud
    )
    return queues, clock, dispatcher, worker


def transport(messages: list[DispatchMessage]) -> list[DispatchMessage]:
    """What SqsQueues computes per message on send (the signature, the body, the group and
    deduplication ids), and the worker on receive (the message the body holds; the worker's
    claim verifies the signature, in its own phase)."""
    out = []
    for message in messages:
        signed = SIGNER.sign(message)
        body = signed.to_body()
        _ = signed.group_id, signed.dedup_id
        out.append(DispatchMessage.from_body(body))
    return out


def simulate(
    jobs: int,
    minutes: int,
    layout: TimerLayout,
    store: MemoryStore,
    profiler: cProfile.Profile | None = None,
) -> tuple[Phases, list[DispatchMessage]]:
    """Run ``minutes`` poller minutes and work every released message; time each phase, and the
    store's and queues' calls inside it."""
    with contextlib.redirect_stdout(open(os.devnull, "w")):  # the EMF lines of the metrics sink
        return _simulate(jobs, minutes, layout, store, profiler)


def flush_metrics() -> None:
    """Print the metrics the handler prints when it ends (a store without the buffer: Powertools
    prints its own as each metric reaches 100 values, and at the end)."""
    core = getattr(lambda_support, "core_metrics", None)
    if core is not None:
        core.flush()


def _simulate(
    jobs: int,
    minutes: int,
    layout: TimerLayout,
    store: MemoryStore,
    profiler: cProfile.Profile | None,
) -> tuple[Phases, list[DispatchMessage]]:
    meter = Metered(store)
    queues, clock, dispatcher, worker = build(jobs, layout, store, meter)
    pending: list[tuple[datetime, datetime]] = [
        (T0 + timedelta(minutes=k) - timedelta(seconds=LEAD_S), T0 + timedelta(minutes=k))
        for k in range(minutes)
    ]
    clock.set(pending[0][0])
    gc.collect()
    gc.callbacks.append(FULL_GC)
    try:
        return _run(pending, clock, dispatcher, worker, queues, meter, profiler)
    finally:
        gc.callbacks.remove(FULL_GC)


def _run(
    pending: list[tuple[datetime, datetime]],
    clock: ManualClock,
    dispatcher: Poller,
    worker: Worker,
    queues: MemoryQueues,
    meter: Metered,
    profiler: cProfile.Profile | None,
) -> tuple[Phases, list[DispatchMessage]]:
    phases = Phases()
    seen: list[DispatchMessage] = []
    active: list[list[Any]] = []  # [wake, MinutePoll]
    if profiler is not None:
        profiler.enable()
    wall0 = time.perf_counter_ns()
    cpu = time.process_time_ns
    while pending or active:
        now = clock.now()
        t, in_store, in_gc, in_calls = cpu(), meter.ns, FULL_GC.ns, meter.calls
        while pending and pending[0][0] <= now:
            _, minute = pending.pop(0)
            run: MinutePoll = dispatcher.minute_poll(minute)
            run.start()
            active.append([now, run])
        for item in list(active):
            if item[0] <= now:
                wake = item[1].step()
                if wake is None:
                    item[1].finish()
                    active.remove(item)
                else:
                    item[0] = wake
        flush_metrics()  # a poller invocation's end (here more often: errs high)
        phases.dispatch_ns += cpu() - t
        phases.dispatch_store_ns += meter.ns - in_store
        phases.dispatch_store_calls += meter.calls - in_calls
        phases.dispatch_gc_ns += FULL_GC.ns - in_gc
        released = queues.drain(QUEUE)
        if released:
            t, in_gc = cpu(), FULL_GC.ns
            delivered = transport(released)
            phases.transport_ns += cpu() - t
            phases.transport_gc_ns += FULL_GC.ns - in_gc
            t, in_store, in_gc, in_calls = cpu(), meter.ns, FULL_GC.ns, meter.calls
            for message in delivered:
                handled = worker.process(message)
                phases.outcomes[handled.outcome] = phases.outcomes.get(handled.outcome, 0) + 1
            flush_metrics()  # a worker invocation's end
            phases.worker_ns += cpu() - t
            phases.worker_store_ns += meter.ns - in_store
            phases.worker_store_calls += meter.calls - in_calls
            phases.worker_gc_ns += FULL_GC.ns - in_gc
            phases.triggers += len(delivered)
            seen.extend(delivered)
            for message in delivered:
                released_at = datetime.fromisoformat(message.released_at)
                scheduled = datetime.fromisoformat(message.scheduled_at)
                phases.delays_ms.append((released_at - scheduled).total_seconds() * 1000)
        upcoming = [item[0] for item in active] + [p[0] for p in pending[:1]]
        if not upcoming:
            break
        clock.set(max(min(upcoming), clock.now() + timedelta(milliseconds=1)))
    phases.wall_ns = time.perf_counter_ns() - wall0
    phases.timers_read = meter.timers_read
    if profiler is not None:
        profiler.disable()
    phases.claimed = phases.outcomes.get(ExecutionStatus.SUCCEEDED.value, 0)
    return phases, seen


def bare_minimum(messages: list[DispatchMessage], schedules: dict[str, str]) -> int:
    """CPU ns for the irreducible work of the same triggers: next slot + encode + decode."""
    parsed = {job_id: parse_schedule(expression, "UTC") for job_id, expression in schedules.items()}
    prepared = [(parsed[m.job_id], datetime.fromisoformat(m.scheduled_at), m) for m in messages]
    gc.collect()
    t = time.process_time_ns()
    for schedule, slot, m in prepared:
        nxt = schedule.next_after(slot, anchor=slot)
        message = DispatchMessage(
            tenant=m.tenant,
            job_id=m.job_id,
            slot=slot_key(nxt or slot),
            scheduled_at=m.scheduled_at,
            attempt=1,
            job_version=1,
            released_at=m.released_at,
        )
        DispatchMessage.from_body(message.to_body())
    return time.process_time_ns() - t


PACK_TIMERS = 40  # timers per pack item at 10,000/s (bench/timer_packing.py measured 41.6)
RECORD_PAIRS = 256  # distinct triggers whose execution records the marshalling row writes


def marshalling_ns(samples: int, reads_per_trigger: float) -> dict[str, float]:
    """CPU ns per trigger the DynamoDB store adds in item (de)serialization, measured alone.

    The poller reads the job (BatchGetItem), writes the chain's next timer in a pack of
    :data:`PACK_TIMERS` (BatchWriteItem) and unpacks each timer every time a bucket query
    returns it (``reads_per_trigger``, counted in the simulation: a near timer comes back in
    each poll of its look-back); the worker writes the record twice (claim and finish) and
    reads no job (the message carries it, parsed in the worker's own phase).
    """
    clock = ManualClock(T0)
    store = MemoryStore()
    layout = TimerLayout()
    service = JobService(store, MemoryQueues(now=clock.now), clock, layout, QueueRouting((QUEUE,), ()))
    spec = JobSpec.model_validate(
        {
            "schedule": "rate(1 minute)",
            "target": {"type": "http", "url": "https://example.com/hook"},
            "payload": {"n": 1},
        }
    )
    job, _ = service.register("default", spec, job_id="job-marshal")
    dynamo = DynamoStore(client=None, table_name="bench")
    job_item = {
        "pk": {"S": "job#default#job-marshal"},
        "sk": {"S": "job"},
        **dynamo._job_attrs(job),
    }
    due_ms = int((T0 + timedelta(minutes=5)).timestamp() * 1000)
    timers = [  # one bucket's timers due in one pack window, a few jobs a second
        Timer(
            Lane.FAR,
            7,
            due_ms + (i // 4) * 1000,
            f"job-{i:07d}",
            "default",
            slot_key(T0 + timedelta(minutes=5, seconds=i // 4)),
            1,
            TimerKind.FIRE,
            1,
        )
        for i in range(PACK_TIMERS)
    ]
    [pack] = dynamo._timer_rows(timers)
    # Each trigger's records are its own (its slot, its instants, its owner), written claim then
    # finish as the worker does: the store keeps the last instants' texts by identity, which the
    # same two records written again and again would always find.
    triggers = []
    for i in range(RECORD_PAIRS):
        at = T0 + timedelta(seconds=i)
        started = at + timedelta(microseconds=1_000 + i)
        running = Execution(
            job_id=job.id,
            slot=slot_key(at),
            scheduled_at=at,
            status=ExecutionStatus.RUNNING,
            started_at=started,
            owner=f"{i:032x}",
            lease_until=started + timedelta(minutes=6),
        )
        triggers.append(
            (running, running.ended(ExecutionStatus.SUCCEEDED, started + timedelta(seconds=1), None))
        )
    gc.collect()
    cpu = time.process_time_ns
    t = cpu()
    for _ in range(samples):
        dynamo._job_from_item(job_item)  # poller: BatchGetItem of the job
    job_ns = (cpu() - t) / samples
    t = cpu()
    for i in range(samples):
        running, finished = triggers[i % RECORD_PAIRS]
        record_attributes(running)  # worker: claim PutItem
        record_attributes(finished)  # worker: finish PutItem
    records_ns = (cpu() - t) / samples
    packs = max(samples // PACK_TIMERS, 1)
    t = cpu()
    for _ in range(packs):
        dynamo._timer_rows(timers)  # poller: BatchWriteItem of the next timers
    write_ns = (cpu() - t) / packs / PACK_TIMERS
    unpack = getattr(_unpacked, "__wrapped__", None)  # None: a store without the pack cache
    t = cpu()
    for _ in range(packs):
        if unpack is None:
            DynamoStore._timers_from_pack(pack)  # poller: Query of a bucket
        else:
            unpack(pack["pk"]["S"], pack["tm"]["S"])  # the same, its first read
    first_ns = (cpu() - t) / packs / PACK_TIMERS
    t = cpu()
    for _ in range(packs):
        DynamoStore._timers_from_pack(pack)  # a read again (a near bucket at each poll)
    again_ns = (cpu() - t) / packs / PACK_TIMERS
    out = {
        "job read": job_ns,
        "timer write (packed)": write_ns,
        f"timer reads (1 + {reads_per_trigger - 1:.2f} again, packed)": first_ns
        + again_ns * max(reads_per_trigger - 1, 0.0),
        "execution record writes (x2)": records_ns,
    }
    out["total"] = sum(out.values())
    return out


def sdk_cpu_us(reps: int = 300) -> dict[str, float]:
    """CPU µs botocore spends per request of each kind the hot path makes (build, sign, parse).

    The HTTP exchange is cut short by a ``before-send`` hook that answers with a canned body
    of the right size, so what is timed is the SDK's own work on this machine: it bounds how
    many triggers one poller's CPU can release.
    """
    import hashlib
    import json as jsonlib

    import boto3
    from botocore.awsrequest import AWSResponse
    from moto.core.botocore_stubber import MockRawResponse

    clock = ManualClock(T0)
    layout = TimerLayout()
    service = JobService(
        MemoryStore(), MemoryQueues(now=clock.now), clock, layout, QueueRouting((QUEUE,), ())
    )
    spec = JobSpec.model_validate(
        {
            "schedule": "rate(1 minute)",
            "target": {"type": "http", "url": "https://example.com/hook"},
            "payload": {"n": 1},
        }
    )
    job, _ = service.register("default", spec, job_id="job-0000001")
    dynamo = DynamoStore(client=None, table_name="bench")
    job_item = {"pk": {"S": "job#default#job-0000001"}, "sk": {"S": "job"}, **dynamo._job_attrs(job)}
    timer = layout.make(
        now=T0,
        due=T0 + timedelta(minutes=5),
        job_id=job.id,
        tenant=job.tenant,
        slot=slot_key(T0 + timedelta(minutes=5)),
        attempt=1,
        kind=TimerKind.FIRE,
        job_version=1,
    )
    timer_item = DynamoStore._timer_item(timer)
    message = message_for(job, slot_key(T0), T0, 1, "fire", T0)
    running = Execution(
        job_id=job.id, slot=message.slot, scheduled_at=T0, status=ExecutionStatus.RUNNING, owner="0" * 32
    )
    exec_item = {
        "pk": {"S": "job#default#job-0000001"},
        "sk": {"S": f"exec#{message.slot}"},
        "status": {"S": "RUNNING"},
        "attempt": {"N": "1"},
        **record_attributes(running),
        "expires_at": {"N": "1767225600"},
    }
    bodies = {
        "BatchGetItem": {"Responses": {"bench": [job_item] * 100}, "UnprocessedKeys": {}},
        "BatchWriteItem": {"UnprocessedItems": {}},
        "Query": {"Items": [timer_item] * 100, "Count": 100, "ScannedCount": 100},
        "GetItem": {"Item": job_item},
        "PutItem": {},
        "SendMessageBatch": {
            "Successful": [
                {
                    "Id": str(i),
                    "MessageId": f"m{i}",
                    "MD5OfMessageBody": hashlib.md5(message.to_body().encode()).hexdigest(),
                }
                for i in range(10)
            ],
            "Failed": [],
        },
    }

    def answer(request: Any, **_: Any) -> AWSResponse:
        target = request.headers.get("X-Amz-Target", b"")
        operation = (target.decode() if isinstance(target, bytes) else target).rsplit(".", 1)[-1]
        return AWSResponse(request.url, 200, {}, MockRawResponse(jsonlib.dumps(bodies[operation])))

    session = boto3.session.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
    session.events.register("before-send", answer)
    ddb, sqs = session.client("dynamodb"), session.client("sqs")
    calls: dict[str, Any] = {
        "SendMessageBatch (10)": lambda: sqs.send_message_batch(
            QueueUrl="https://sqs.us-east-1.amazonaws.com/123456789012/q.fifo",
            Entries=[
                {
                    "Id": str(i),
                    "MessageBody": message.to_body(),
                    "MessageGroupId": message.group_id,
                    "MessageDeduplicationId": message.dedup_id,
                }
                for i in range(10)
            ],
        ),
        "BatchWriteItem (25 timers)": lambda: ddb.batch_write_item(
            RequestItems={"bench": [{"PutRequest": {"Item": timer_item}}] * 25}
        ),
        "BatchGetItem (100 jobs)": lambda: ddb.batch_get_item(
            RequestItems={
                "bench": {"Keys": [{"pk": job_item["pk"], "sk": {"S": f"job{i}"}} for i in range(100)]}
            }
        ),
        "Query (100 timers)": lambda: ddb.query(
            TableName="bench",
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": "near#x#1"}},
            ConsistentRead=True,
        ),
        "GetItem (job)": lambda: ddb.get_item(
            TableName="bench", Key={"pk": job_item["pk"], "sk": {"S": "job"}}
        ),
        "PutItem (execution)": lambda: ddb.put_item(
            TableName="bench", Item=exec_item, ConditionExpression="attribute_not_exists(pk)"
        ),
    }
    out = {}
    for name, call in calls.items():
        call()  # warm: model loading, endpoint resolution
        gc.collect()
        t = time.process_time_ns()
        for _ in range(reps):
            call()
        out[name] = (time.process_time_ns() - t) / reps / 1000
    return out


def profile(
    jobs: int, minutes: int, layout: TimerLayout, store: MemoryStore, top: int = 18
) -> list[dict[str, Any]]:
    """cProfile of a smaller run: the functions with the most own time, file:line."""
    profiler = cProfile.Profile()
    phases, _ = simulate(jobs, minutes, layout, store, profiler)
    stats = pstats.Stats(profiler)
    entries = []
    total_tt = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    for (filename, line, func), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        entries.append(
            {
                "where": f"{_short(filename)}:{line}({func})",
                "calls_per_trigger": calls / max(phases.triggers, 1),
                "own_us_per_trigger": tottime * 1e6 / max(phases.triggers, 1),
                "cum_us_per_trigger": cumtime * 1e6 / max(phases.triggers, 1),
                "own_share": tottime / total_tt if total_tt else 0.0,
            }
        )
    by_own = sorted(entries, key=lambda e: e["own_us_per_trigger"], reverse=True)[:top]
    ours = [e for e in entries if e["where"].startswith("punctual/")]
    by_cum = sorted(ours, key=lambda e: e["cum_us_per_trigger"], reverse=True)[:top]
    return [{"by": "own", **e} for e in by_own] + [{"by": "cumulative (punctual)", **e} for e in by_cum]


def _short(filename: str) -> str:
    path = Path(filename)
    parts = path.parts
    for anchor in ("punctual", "pydantic", "pydantic_core", "json", "datetime", "uuid", "zoneinfo"):
        if anchor in parts:
            index = len(parts) - 1 - parts[::-1].index(anchor)
            return "/".join(parts[index:])
    if filename.startswith("~") or filename.startswith("<"):
        return filename
    return "/".join(parts[-2:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=6000)
    parser.add_argument("--minutes", type=int, default=5)
    parser.add_argument("--profile-jobs", type=int, default=3000)
    parser.add_argument("--no-json", action="store_true")
    parser.add_argument(
        "--core-only", action="store_true", help="the CPU table alone (no botocore, cProfile, JSON)"
    )
    args = parser.parse_args()
    # 512 far / 32 near shards (TimerLayout's defaults; the deployed defaults are 256 / 8): more
    # near buckets to poll per trigger than the deployed defaults, so the figure errs high.
    layout = TimerLayout()

    benchlib.heading(f"CPU per trigger: {args.jobs:,} jobs, {args.minutes} poller minutes, in memory")
    # What each call through the store's meter adds outside the window it counts (not the cloud's)
    meter_ns = overhead_ns()
    runs: dict[str, dict[str, float]] = {}
    counts: dict[str, Any] = {}
    messages: list[DispatchMessage] = []
    stores: tuple[tuple[str, bool], ...] = (("memory store", True), ("no-copy store", False))
    for name, copy_items in stores:
        # Each run starts without the previous run's state alive (its store, messages):
        # otherwise every full garbage collection in the second run walks the first's.
        messages = []
        phases, messages = simulate(args.jobs, args.minutes, layout, MemoryStore(copy_items=copy_items))
        n = max(phases.triggers, 1)
        runs[name] = {
            "dispatch": phases.dispatch_ns / n / 1000,
            "transport": phases.transport_ns / n / 1000,
            "worker": phases.worker_ns / n / 1000,
        }
        runs[name]["total"] = sum(runs[name].values())
        if not copy_items:
            store_calls = {
                "dispatch": phases.dispatch_store_ns / n / 1000,
                "transport": 0.0,
                "worker": phases.worker_store_ns / n / 1000,
            }
            store_calls["total"] = sum(store_calls.values())
            full_gc = {
                "dispatch": phases.dispatch_gc_ns / n / 1000,
                "transport": phases.transport_gc_ns / n / 1000,
                "worker": phases.worker_gc_ns / n / 1000,
            }
            full_gc["total"] = sum(full_gc.values())
            meter_us = {
                "dispatch": phases.dispatch_store_calls * meter_ns / n / 1000,
                "transport": 0.0,
                "worker": phases.worker_store_calls * meter_ns / n / 1000,
            }
            meter_us["total"] = sum(meter_us.values())
            runs["store calls"], runs["full GC"], runs["meter"] = store_calls, full_gc, meter_us
            runs["ours"] = {
                phase: runs[name][phase] - store_calls[phase] - full_gc[phase] - meter_us[phase]
                for phase in store_calls
            }
        counts[name] = {
            "triggers": phases.triggers,
            "outcomes": phases.outcomes,
            "wall_s": phases.wall_ns / 1e9,
            "release_delay_ms": benchlib.summary(phases.delays_ms),
            "timers_read_per_trigger": phases.timers_read / n,
        }
    n = counts["no-copy store"]["triggers"]
    bare_us = bare_minimum(messages, job_schedules(args.jobs)) / max(n, 1) / 1000
    reads = counts["no-copy store"]["timers_read_per_trigger"]
    marshal_parts = {part: ns / 1000 for part, ns in marshalling_ns(3000, reads).items()}
    marshal_us = marshal_parts["total"]
    ours = runs["ours"]
    cloud_us = ours["total"] + marshal_us
    columns = ("memory store", "no-copy store", "store calls", "full GC", "meter", "ours")
    labels = {
        "dispatch": "poller: read timers, release, write next timer",
        "transport": "SQS encoding: sign, body, group and dedup id, decode",
        "worker": "worker: claim, run (instant target), finish",
        "total": "all in",
    }
    rows: list[tuple[Any, ...]] = [
        (label, *(runs[c][phase] for c in columns)) for phase, label in labels.items()
    ]
    rows += [
        ("+ DynamoDB item marshalling (measured alone)", None, marshal_us, None, None, None, marshal_us),
        (
            "our code as the cloud runs it",
            None,
            runs["no-copy store"]["total"] + marshal_us,
            None,
            None,
            None,
            cloud_us,
        ),
        ("bare minimum: next slot + encode + decode", bare_us, bare_us, None, None, None, bare_us),
    ]
    print(benchlib.table(["CPU µs per trigger", *columns], rows))
    print()
    print(benchlib.table(["DynamoDB item marshalling", "µs per trigger"], list(marshal_parts.items())))
    outcomes = counts["no-copy store"]["outcomes"]
    print(
        f"\n{n:,} triggers per run (outcomes {outcomes}); the memory store deep-copies every read and"
        f" write, the no-copy store does not. 'store calls' is the CPU inside the in-memory store's and"
        f" queues' calls (the stand-ins for DynamoDB and SQS, whose client side is the marshalling row"
        f" and botocore); 'full GC' the CPU in full garbage collections, which walk the run's whole"
        f" heap (the in-memory store keeps every record of the run; a Lambda's heap holds one batch);"
        f" 'meter' the timing wrapper's own CPU outside the windows it counts ({meter_ns / 1000:.2f} µs"
        f" a store or queue call, measured on a call that does nothing); 'ours' is the no-copy run"
        f" without any of the three."
    )
    met = cloud_us <= TARGET_US
    print(
        f"target <= {TARGET_US:.0f} µs per trigger (ours + marshalling): {cloud_us:.0f} µs"
        f" -> {'MET' if met else 'MISSED'}; x{cloud_us / bare_us:.1f} the bare minimum;"
        f" one core: {1e6 / cloud_us:,.0f} triggers/s"
    )

    if args.core_only:
        return
    benchlib.heading("botocore CPU per request (canned answers: build, sign, parse; no network)")
    sdk = sdk_cpu_us()
    print(benchlib.table(["request", "CPU µs"], list(sdk.items())))
    poller_sdk = (
        sdk["SendMessageBatch (10)"] / 10
        + sdk["BatchWriteItem (25 timers)"] / 25
        + sdk["BatchGetItem (100 jobs)"] / 100
        + sdk["Query (100 timers)"] / 100 * NEAR_REREADS
    )
    worker_sdk = 2 * sdk["PutItem (execution)"]  # claim and finish (the job comes with the message)
    print(
        f"per trigger: poller SDK {poller_sdk:.0f} µs (a near timer is read ~{NEAR_REREADS} times),"
        f" worker SDK {worker_sdk:.0f} µs; with the core: poller"
        f" {ours['dispatch'] + marshal_us / 2 + poller_sdk:.0f} µs,"
        f" worker {ours['worker'] + marshal_us / 2 + worker_sdk:.0f} µs"
    )

    benchlib.heading(f"cProfile, no-copy store: {args.profile_jobs:,} jobs, 3 minutes (profiling inflates)")
    top = profile(args.profile_jobs, 3, layout, MemoryStore(copy_items=False))
    views = (("own", "function (own time)"), ("cumulative (punctual)", "punctual function (cumulative)"))
    for by, title in views:
        print(
            benchlib.table(
                [title, "calls/trig", "own µs/trig", "cum µs/trig"],
                [
                    (e["where"], e["calls_per_trigger"], e["own_us_per_trigger"], e["cum_us_per_trigger"])
                    for e in top
                    if e["by"] == by
                ],
                align="lrrr",
            )
        )
        print()
    if not args.no_json:
        benchlib.write_result(
            "cpu_per_trigger",
            {
                "jobs": args.jobs,
                "minutes": args.minutes,
                "mix": MIX,
                "layout": {"shard_count": layout.shard_count, "near_shard_count": layout.near_shard_count},
                "runs": counts,
                "us_per_trigger": {
                    "memory_store": runs["memory store"],
                    "no_copy_store": runs["no-copy store"],
                    "store_calls": runs["store calls"],
                    "full_gc": runs["full GC"],
                    "meter_overhead": runs["meter"],
                    "ours": ours,
                    "dynamo_marshalling": marshal_us,
                    "dynamo_marshalling_parts": marshal_parts,
                    "core_with_marshalling": cloud_us,
                    "bare_minimum": bare_us,
                },
                "overhead_ratio": cloud_us / bare_us,
                "target_us": TARGET_US,
                "target_met": met,
                "profile_top": top,
                "sdk_cpu_us_per_request": sdk,
                "sdk_cpu_us_per_trigger": {"poller": poller_sdk, "worker": worker_sdk},
                "poller_cpu_us_per_trigger": ours["dispatch"] + marshal_us / 2 + poller_sdk,
                "worker_cpu_us_per_trigger": ours["worker"] + marshal_us / 2 + worker_sdk,
                "near_rereads_assumed": NEAR_REREADS,
                "meter_overhead_ns_per_call": meter_ns,
                # CPU figures move with the machine's load: what it was when the run ended (1, 5, 15 min)
                "load_average": list(os.getloadavg()),
            },
        )


if __name__ == "__main__":
    main()
