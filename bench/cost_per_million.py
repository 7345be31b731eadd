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
false does.

Usage: ``python bench/cost_per_million.py [--jobs N] [--minutes M] [--no-json]``
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import audit_cost
import benchlib
from awsmeter import Meter, Tally, subtract

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
TABLE = "punctual-bench"
ACCOUNT = "123456789012"
SHORT_QUEUE = "punctual-short.fifo"
FAILED_QUEUE = "punctual-failed"
HOURS_PER_MONTH = 730  # AWS's billing convention
MINUTES_PER_MONTH = HOURS_PER_MONTH * 60
SUSTAINED_PER_S = 10_000
HISTORY_PAGE = 20  # a history read returns this many records; every record is read once
TARGETS = {"on_demand_per_million": 2.00, "provisioned_per_million": 1.00, "idle_per_month": 15.00}
EVENTBRIDGE_ALL_IN_QUOTED = 2.03  # the figure for Scheduler + worker Lambda + one write

# Typical in-region latencies (ms) used only to model Lambda duration. Assumptions, not
# measurements: DynamoDB answers single-item requests in single-digit milliseconds.
LATENCY_MS = {
    "dynamodb.GetItem": 4.0,
    "dynamodb.PutItem": 6.0,
    "dynamodb.UpdateItem": 6.0,
    "dynamodb.DeleteItem": 6.0,
    "dynamodb.Query": 6.0,
    "dynamodb.BatchGetItem": 8.0,
    "dynamodb.BatchWriteItem": 10.0,
    "dynamodb.TransactWriteItems": 12.0,
    "sqs": 10.0,
    "stepfunctions": 15.0,
    "events": 15.0,
}
INVOCATION_OVERHEAD_MS = 3.0  # Powertools decorators, event parsing, batch bookkeeping
LAMBDA_CPU_SLOWDOWN_512 = 1769 / 512  # a full vCPU at 1,769 MB; 512 MB gets ~29 % of one
DEFAULT_CPU_US = 1000.0  # worker core + botocore, if bench/results/cpu_per_trigger.json is absent
TICK_MS = 50.0  # the tick's own work besides its requests

MIX = benchlib.COST_MIX


class InstantTarget:
    """Answers at once: a job ``fail-*`` fails in even minutes (alerts are always delivered)."""

    def invoke(self, target: Any, payload: Any, ctx: Any) -> Any:
        from punctual.targets.base import TargetResult

        failing = ctx.job_id.startswith("fail-") and "#alert-" not in ctx.slot
        if failing and int(ctx.slot[14:16]) % 2 == 0:
            return TargetResult.permanent("HTTP 500")
        return TargetResult.ok()


@dataclass
class RunResult:
    name: str
    minutes: int
    tallies: dict[tuple[str, str, str], Tally]
    triggers: int = 0
    invocations: int = 0
    batch_sizes: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    registered: int = 0
    groups: int = 1
    alerts: int = 0  # alerts raised (the events-and-alerts runs)


# --------------------------------------------------------------------------- the AWS rig


@contextmanager
def embedded_aws(
    meter: Meter, shard_count: int, near_shard_count: int, events: bool = False
) -> Iterator[dict[str, Any]]:
    """moto in-process with the table, the queues and a state machine; every client hooked."""
    import boto3
    from moto import mock_aws

    from punctual import aws
    from punctual.store.dynamo import table_definition

    benchlib.fast_moto_queries()
    benchlib.fast_moto_transactions()
    with mock_aws():
        boto3.setup_default_session(region_name="us-east-1")
        meter.peek = boto3.session.Session(region_name="us-east-1").client("dynamodb")  # not hooked
        meter.peek_item = moto_item
        meter.install(boto3.DEFAULT_SESSION.events)
        aws.reset()
        meter.phase = "setup"
        boto3.client("dynamodb").create_table(**table_definition(TABLE))
        sqs = boto3.client("sqs")
        short = sqs.create_queue(
            QueueName=SHORT_QUEUE,
            Attributes={
                "FifoQueue": "true",
                "DeduplicationScope": "messageGroup",
                "FifoThroughputLimit": "perMessageGroupId",
                "VisibilityTimeout": "900",
            },
        )["QueueUrl"]
        failed = sqs.create_queue(QueueName=FAILED_QUEUE)["QueueUrl"]
        iam = boto3.client("iam")
        role = iam.create_role(RoleName="sfn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        machine = boto3.client("stepfunctions").create_state_machine(
            name="minutes",
            definition=json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}),
            roleArn=role,
        )["stateMachineArn"]
        env = {
            "PUNCTUAL_TABLE_NAME": TABLE,
            "PUNCTUAL_SHORT_QUEUE_URLS": short,
            "PUNCTUAL_FAILED_QUEUE_URL": failed,
            "PUNCTUAL_SHARD_COUNT": str(shard_count),
            "PUNCTUAL_NEAR_SHARD_COUNT": str(near_shard_count),
            "PUNCTUAL_STATE_MACHINE_ARN": machine,
            "PUNCTUAL_EVENTS_ENABLED": "true" if events else "false",  # to the default bus
        }
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield {"short": short, "failed": failed, "arn": f"arn:aws:sqs:us-east-1:{ACCOUNT}:{SHORT_QUEUE}"}
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            aws.reset()


def moto_item(table: str, key: dict[str, Any]) -> dict[str, Any] | None:
    """An item as moto holds it, in wire format, without a request (for sizing writes)."""
    from moto.dynamodb.models import dynamodb_backends

    item = dynamodb_backends[ACCOUNT]["us-east-1"].get_item(table, key)
    return item.to_json()["Attributes"] if item is not None else None


def load_tick() -> Any:
    """The tick as its Lambda builds it (the composition root), from the environment."""
    from punctual.composition import Container
    from punctual.settings import Settings

    return Container(Settings.from_env()).tick()


def job_specs(jobs: int, failing_every: int = 0) -> list[tuple[str, str]]:
    """The mix's jobs; with ``failing_every`` n, every n-th is a ``fail-*`` job."""
    out: list[tuple[str, str]] = []
    for share, expression in MIX:
        start = len(out)
        out.extend((f"job-{start + i:06d}", expression) for i in range(round(jobs * share)))
    if failing_every:
        out = [(f"fail-{j[4:]}" if i % failing_every == 0 else j, e) for i, (j, e) in enumerate(out)]
    return out


def run(
    meter: Meter,
    name: str,
    jobs: int,
    minutes: int,
    shard_count: int,
    near_shard_count: int,
    steady: bool = False,
    *,
    failing_every: int = 0,
    events: bool = False,
    alerts: bool = False,
) -> RunResult:
    """Register ``jobs``, run ``minutes`` poller minutes with the tick and the worker, read history.

    ``steady``: count only whole minutes in steady state, from the start of the second minute's
    poller to the start of the last one's (the first poller of a fresh table drains the minute
    before it, a one-off; the last one's tail would be cut short).

    ``failing_every``: every n-th job fails in even minutes (one attempt); ``events``: execution
    events on; ``alerts``: those jobs carry a rule on ``failed`` and ``recovered``.
    """
    import boto3

    from punctual.clock import ManualClock
    from punctual.composition import Container
    from punctual.execution.batch import LambdaBatch
    from punctual.execution.keeper import LeaseKeeper
    from punctual.jobs import JobService, QueueRouting
    from punctual.models import JobSpec
    from punctual.observability import NullMetrics
    from punctual.queues import SqsQueues
    from punctual.settings import Settings

    meter.reset()
    with embedded_aws(meter, shard_count, near_shard_count, events) as rig:
        settings = Settings.from_env()
        clock = ManualClock(T0 - timedelta(minutes=5))
        built = Container(settings, clock)
        store = built.store
        meter.phase = "registration"
        service = JobService(
            store,
            SqsQueues(boto3.client("sqs")),
            clock,
            settings.layout(),
            QueueRouting(tuple(settings.short_queue_urls), ()),
            max_jobs_per_tenant=10**9,
        )
        specs = job_specs(jobs, failing_every)
        hook = {"type": "http", "url": "https://example.com/hook"}
        for index, (job_id, expression) in enumerate(specs):
            fields: dict[str, Any] = {
                "schedule": expression,
                "start_at": (T0 + timedelta(seconds=index % 60)).isoformat(),
                "target": hook,
                "payload": {"report": "daily", "n": index},
            }
            if job_id.startswith("fail-"):
                fields["retry"] = {"max_attempts": 1}
                if alerts:
                    fields["alerts"] = [{"on": ["failed", "recovered"], "target": hook}]
            service.register("default", JobSpec.model_validate(fields), job_id=job_id)
        dispatcher = built.poller(NullMetrics())
        worker = built.worker(lease_timers=False, invoker=InstantTarget(), metrics=NullMetrics())
        tick = load_tick()
        esm = boto3.client("sqs")
        result = RunResult(name, minutes, {}, registered=len(specs))

        def drain() -> None:
            while True:
                meter.phase = "event source"
                reply = esm.receive_message(
                    QueueUrl=rig["short"],
                    MaxNumberOfMessages=10,
                    VisibilityTimeout=900,
                    MessageSystemAttributeNames=["All"],
                )
                messages = reply.get("Messages", [])
                if not messages:
                    return
                meter.phase = "worker"
                result.invocations += 1
                result.batch_sizes.append(len(messages))
                done = []
                with worker.notifier.batched():  # as the worker handler runs a batch
                    handle_batch(messages, done)
                result.triggers += len(done)
                if done:
                    meter.phase = "event source"
                    esm.delete_message_batch(
                        QueueUrl=rig["short"],
                        Entries=[
                            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)
                        ],
                    )

        # The worker handler's batch (the lease on arrival, groups side by side), its keeper stepped
        # by nothing here: runs take no time, so no lease is ever renewed.
        batch = LambdaBatch(worker, type("Still", (LeaseKeeper,), {"start": lambda self: self})(worker))

        def handle_batch(messages: list[dict[str, Any]], done: list[dict[str, Any]]) -> None:
            records = [
                {
                    "messageId": message["MessageId"],
                    "receiptHandle": message["ReceiptHandle"],
                    "body": message["Body"],
                    "attributes": message.get("Attributes", {}),
                    "eventSourceARN": rig["arn"],
                }
                for message in messages
            ]
            failed = {
                f["itemIdentifier"]
                for f in batch.handle({"Records": records}, lambda: 900.0)["batchItemFailures"]
            }
            done.extend(m for m in messages if m["MessageId"] not in failed)

        window: list[dict[tuple[str, str, str], Tally]] = []
        started_runs = 0
        lead = timedelta(seconds=settings.poller_lead_s)
        pending = [(T0 + timedelta(minutes=k) - lead, T0 + timedelta(minutes=k)) for k in range(minutes)]
        ticks = [T0 + timedelta(minutes=k) - timedelta(minutes=1) for k in range(minutes)]
        active: list[list[Any]] = []
        clock.set(min(pending[0][0], ticks[0]))
        began = time.perf_counter()
        while pending or active:
            now = clock.now()
            while ticks and ticks[0] <= now:
                ticks.pop(0)
                meter.phase = "tick"
                tick.start_minutes(now)
            meter.phase = "poller"
            while pending and pending[0][0] <= now:
                _, minute = pending.pop(0)
                started_runs += 1
                if steady and started_runs in (2, minutes):
                    window.append(meter.snapshot())
                meter.phase = "poller"
                minute_run = dispatcher.minute_poll(minute)
                minute_run.start()
                active.append([now, minute_run])
            for item in list(active):
                if item[0] <= now:
                    meter.phase = "poller"
                    wake = item[1].step()
                    if wake is None:
                        item[1].finish()
                        active.remove(item)
                    else:
                        item[0] = wake
            drain()
            upcoming = [item[0] for item in active] + [p[0] for p in pending[:1]] + ticks[:1]
            if not upcoming:
                break
            clock.set(max(min(upcoming), clock.now() + timedelta(milliseconds=1)))
        result.wall_s = time.perf_counter() - began

        if steady:
            result.tallies = subtract(window[1], window[0])
            result.minutes = minutes - 2
            return result
        meter.phase = "history"
        pages = math.ceil(result.triggers / HISTORY_PAGE)
        ids = [job_id for job_id, _ in specs] or []
        for page in range(pages if ids else 0):
            store.list_executions("default", ids[page % len(ids)], limit=HISTORY_PAGE)
        meter.phase = "done"
        result.alerts = sum(
            len(store.list_alerts("default", job_id, 1000))
            for job_id, _ in specs
            if job_id.startswith("fail-")
        )
        result.tallies = meter.snapshot()
    return result


# --------------------------------------------------------------------------- money


@dataclass
class Prices:
    wru: float
    rru: float
    wcu_hour: float
    rcu_hour: float
    sqs_fifo: float
    sqs_standard: float
    lambda_request: float
    lambda_gb_s: float
    sfn_transition: float
    scheduler: float
    events: float
    kms_request: float
    worker_mb: int
    poller_mb: int
    tick_mb: int

    @classmethod
    def load(cls) -> Prices:
        p = benchlib.load_prices()
        get = benchlib.price
        return cls(
            wru=get(p, "dynamodb.on_demand_write_per_million") / 1e6,
            rru=get(p, "dynamodb.on_demand_read_per_million") / 1e6,
            wcu_hour=get(p, "dynamodb.provisioned_wcu_hour"),
            rcu_hour=get(p, "dynamodb.provisioned_rcu_hour"),
            sqs_fifo=get(p, "sqs.fifo_per_million") / 1e6,
            sqs_standard=get(p, "sqs.standard_per_million") / 1e6,
            lambda_request=get(p, "lambda.requests_per_million") / 1e6,
            lambda_gb_s=get(p, "lambda.arm64_gb_second"),
            sfn_transition=get(p, "stepfunctions.standard_per_thousand_transitions") / 1e3,
            scheduler=get(p, "eventbridge.scheduler_per_million") / 1e6,
            events=get(p, "eventbridge.custom_events_per_million") / 1e6,
            kms_request=get(p, "kms.requests_per_ten_thousand") / 1e4,
            worker_mb=int(p["deployment"]["worker_memory_mb"]),
            poller_mb=int(p["deployment"]["poller_memory_mb"]),
            tick_mb=int(p["deployment"]["tick_memory_mb"]),
        )


def request_cost(key: tuple[str, str, str], tally: Tally, prices: Prices) -> float:
    """On-demand dollars of the requests under one key."""
    _, operation, kind = key
    if operation.startswith("dynamodb."):
        return tally.wru * prices.wru + tally.rru * prices.rru
    if operation.startswith("sqs."):
        return tally.billed * (prices.sqs_fifo if kind == "fifo" else prices.sqs_standard)
    if operation == "events.PutEvents":
        return tally.billed * prices.events
    return 0.0


def latency_ms(tallies: Mapping[tuple[str, str, str], Tally], phase: str) -> float:
    total = 0.0
    for (p, operation, _), tally in tallies.items():
        if p != phase:
            continue
        service = operation.split(".", 1)[0]
        total += tally.calls * LATENCY_MS.get(operation, LATENCY_MS.get(service, 10.0))
    return total


def cpu_us_per_trigger() -> float:
    """The worker's CPU per trigger at one full vCPU (core, marshalling, botocore), from
    ``cpu_per_trigger.json`` when that benchmark ran first."""
    path = benchlib.RESULTS_DIR / "cpu_per_trigger.json"
    try:
        data = json.loads(path.read_text())
        return float(data["worker_cpu_us_per_trigger"])
    except (OSError, KeyError, ValueError):
        return DEFAULT_CPU_US


BATCHED = ("sqs.SendMessageBatch", "sqs.ReceiveMessage", "sqs.DeleteMessageBatch")


def packing_wru_per_timer() -> float | None:
    """Write units per next timer at 10,000/s, from bench/timer_packing.py's result (if run)."""
    path = benchlib.RESULTS_DIR / "timer_packing.json"
    if not path.exists():
        return None
    value = json.loads(path.read_text()).get("wru_per_timer")
    return float(value) if value else None


def per_trigger_rows(
    added: Mapping[tuple[str, str, str], Tally], triggers: int, prices: Prices, packing: float | None = None
) -> list[dict[str, Any]]:
    """One row per (phase, request, item kind): what each trigger adds, measured and at scale.

    At 10,000/s every batch is full: the poller sends ten per SendMessageBatch and the event
    source receives and deletes ten at a time, so those calls cost a tenth of a request each.
    The poller's next timers pack as they do for a poller at that rate (``packing`` write
    units per timer, measured by bench/timer_packing.py; this run's few triggers a second
    pack poorly). Everything else is per item and does not change with the rate.
    """
    rows = []
    for key, tally in sorted(added.items()):
        phase, operation, kind = key
        if phase in ("setup", "registration", "done") or (tally.calls == 0 and tally.rru == 0):
            continue
        if phase.endswith("(empty)"):
            continue  # the event source's idle long polls: a fixed cost, counted per month
        usd = request_cost(key, tally, prices) / triggers * 1e6
        calls = tally.calls / triggers
        at_scale = usd * min(1.0, 0.1 / calls) if operation in BATCHED and calls > 0 else usd
        wru_at_scale = tally.wru / triggers
        if packing and tally.timers and operation == "dynamodb.BatchWriteItem":
            # The poller's next timers, packed as a poller at 10,000/s packs them.
            wru_at_scale = min(wru_at_scale, tally.timers / triggers * packing)
            at_scale = wru_at_scale * prices.wru * 1e6
        rows.append(
            {
                "phase": phase,
                "operation": operation,
                "kind": kind,
                "calls_per_trigger": calls,
                "billed_per_trigger": tally.billed / triggers,
                "wru_per_trigger": tally.wru / triggers,
                "wru_per_trigger_at_scale": wru_at_scale,
                "timers_per_trigger": tally.timers / triggers,
                "rru_per_trigger": tally.rru / triggers,
                "bytes_per_item": tally.payload_bytes / tally.items if tally.items else 0,
                "usd_per_million": usd,
                "usd_per_million_at_scale": at_scale,
            }
        )
    return rows


def storage_per_million(rows: list[dict[str, Any]], prices: Prices) -> dict[str, float]:
    """Storage of what each trigger leaves behind: its execution record for the retention
    period and its timer for a day (TTL), plus DynamoDB's 100 bytes of overhead per item."""
    from punctual.settings import Settings

    gb_month = benchlib.price(benchlib.load_prices(), "dynamodb.storage_gb_month")
    month_days = HOURS_PER_MONTH / 24
    record = max(
        (r["bytes_per_item"] for r in rows if r["kind"] == "exec" and r["wru_per_trigger"]), default=0
    )
    timer = max(
        (r["bytes_per_item"] for r in rows if r["kind"] in ("near", "timer") and r["wru_per_trigger"]),
        default=0,
    )
    retention = Settings().retention_days
    record_gb_month = (record + 100) / 2**30 * retention / month_days
    timer_gb_month = (timer + 100) / 2**30 * 1 / month_days
    return {
        "record_bytes": record,
        "retention_days": retention,
        "usd_per_million": (record_gb_month + timer_gb_month) * gb_month * 1e6,
        "record_only_usd_per_million": record_gb_month * gb_month * 1e6,
    }


def lambda_per_trigger(load: RunResult, prices: Prices, batch: float | None = None) -> dict[str, float]:
    """Worker Lambda requests and GB-seconds per trigger, from the counted requests.

    ``batch``: records per invocation (default: as measured; 10 at scale).
    """
    triggers = max(load.triggers, 1)
    io_ms = latency_ms(load.tallies, "worker") / triggers
    cpu_ms = cpu_us_per_trigger() / 1000 * LAMBDA_CPU_SLOWDOWN_512 * (512 / prices.worker_mb)
    batch = batch or sum(load.batch_sizes) / max(len(load.batch_sizes), 1)
    per_trigger_ms = io_ms + cpu_ms + INVOCATION_OVERHEAD_MS / batch
    gb_s = per_trigger_ms / 1000 * prices.worker_mb / 1024
    return {
        "invocations_per_trigger": 1 / batch,
        "mean_batch": batch,
        "io_ms_per_trigger": io_ms,
        "cpu_ms_per_trigger": cpu_ms,
        "ms_per_trigger": per_trigger_ms,
        "gb_s_per_trigger": gb_s,
        "usd_per_million": (prices.lambda_request / batch + gb_s * prices.lambda_gb_s) * 1e6,
    }


# Envelope encryption (punctual.tenant_keys): a worker process unwraps each tenant's data key once
# per key lifetime, so KMS is billed per worker environment and tenant, not per trigger.
KMS_TENANTS = 1000  # tenants whose jobs one worker environment runs in its life (assumed)
KMS_ENVIRONMENT_LIFE_S = 3600.0  # a worker environment's life (Lambda recycles them; unpublished)


def kms_per_million(worker_ms_per_trigger: float, prices: Prices) -> dict[str, float]:
    """KMS requests and $ per million triggers at 10,000/s: the environments the rate keeps busy,
    each unwrapping every tenant's key once in its life (a call per trigger before the envelope)."""
    environments = SUSTAINED_PER_S * worker_ms_per_trigger / 1000
    per_s = environments * KMS_TENANTS / KMS_ENVIRONMENT_LIFE_S
    per_trigger = per_s / SUSTAINED_PER_S
    usd = prices.kms_request
    return {
        "environments_at_10k": environments,
        "requests_per_s_at_10k": per_s,
        "requests_per_trigger": per_trigger,
        "usd_per_million": per_trigger * usd * 1e6,
        "usd_per_million_one_per_trigger": usd * 1e6,  # what a Decrypt per trigger cost
    }


def groups_at(rate_per_s: float) -> int:
    from punctual.settings import Settings
    from punctual.tick import group_count_for

    return group_count_for(int(rate_per_s * 60), Settings())


def poller_minute_usd(groups: int, prices: Prices, memory_mb: int | None = None) -> dict[str, float]:
    """One minute of pollers and its Step Functions execution."""
    from punctual.settings import Settings

    s = Settings()
    seconds = s.poller_lead_s + 60 + s.poller_grace_s  # each poller runs its whole minute
    gb_s = groups * seconds * (memory_mb or prices.poller_mb) / 1024
    # Standard bills each state a step enters (infra/components/dispatch.py): Wait, Map, one task
    # per group; an inline Map's iterations are not billed (docs: concepts-transitions). The
    # execution's start is counted too, as a margin.
    transitions = 3 + groups
    return {
        "poller_seconds": groups * seconds,
        "lambda": gb_s * prices.lambda_gb_s + groups * prices.lambda_request,
        "stepfunctions": transitions * prices.sfn_transition,
        "transitions": transitions,
    }


@dataclass(frozen=True)
class IdleLayout:
    """What decides the idle bill: shard counts and the memory of the poller an idle minute gets."""

    label: str
    far_shards: int
    near_shards: int
    poller_mb: int
    tick_mb: int


def default_idle_layout() -> IdleLayout:
    """The deployed defaults: cdk.json's context through infra/config.py, and the tick's own plan
    of an idle minute (which poller it chooses) from punctual.tick."""
    import sys

    from punctual.settings import Settings
    from punctual.store.memory import MemoryStore
    from punctual.tick import LEAN, plan_minute

    if str(benchlib.ROOT) not in sys.path:
        sys.path.insert(0, str(benchlib.ROOT))
    from punctual_cdk import constants
    from punctual_cdk.config import PunctualConfig

    context = json.loads((benchlib.ROOT / "cdk.json").read_text())["context"]
    cfg = PunctualConfig.from_context(context.get)
    settings = Settings(
        shard_count=cfg.shard_count,
        near_shard_count=cfg.near_shard_count,
        lean_max_triggers_per_minute=cfg.lean_poller_max_triggers_per_minute,
        shard_groups=cfg.shard_groups,
    )
    chosen = plan_minute(T0, settings, MemoryStore(), now=T0 - timedelta(minutes=2))["poller"]
    memory = cfg.lean_poller_memory_mb if chosen == LEAN else cfg.poller_memory_mb
    return IdleLayout(
        f"defaults ({cfg.shard_count} far / {cfg.near_shard_count} near, {chosen} poller {memory:,} MB)",
        cfg.shard_count,
        cfg.near_shard_count,
        memory,
        constants.TICK_MEMORY_MB,
    )


def console_widget_month() -> float:
    """The dashboard's console widget for a month of the dashboard left open at a 1-minute refresh
    (``bench/console_widget.py`` measures it: one render's queries, read units and CPU); 0 until
    that benchmark has run. It costs nothing while nobody views the dashboard."""
    path = benchlib.ROOT / "bench" / "results" / "console_widget.json"
    if not path.exists():
        return 0.0
    return float(json.loads(path.read_text())["usd_per_month_open_all_month"]["total"])


def idle_month(idle: RunResult, prices: Prices, poller_mb: int, tick_mb: int | None = None) -> dict[str, Any]:
    """What a deployment costs a month with nothing due, from an idle run's counted requests."""
    per_minute: dict[str, float] = defaultdict(float)
    lines = []
    for key, tally in idle.tallies.items():
        phase, operation, kind = key
        if not tally.calls and not tally.rru and not tally.wru:
            continue
        if phase in ("setup", "registration", "done", "history"):
            continue
        usd = request_cost(key, tally, prices) / idle.minutes
        if phase.startswith("event source"):
            continue  # the bench's own receive loop; the event source's idle polling is modelled below
        per_minute[f"{phase} {operation} {kind}".strip()] += usd
        lines.append((phase, operation, kind, tally.calls / idle.minutes, tally.rru / idle.minutes, usd))
    minute = poller_minute_usd(1, prices, poller_mb)
    tick_ms = latency_ms(idle.tallies, "tick") / idle.minutes + TICK_MS
    tick_usd = (
        tick_ms / 1000 * (tick_mb or prices.tick_mb) / 1024 * prices.lambda_gb_s + prices.lambda_request
    )
    # Event source: five pollers long-polling 20 s each while idle (services-sqs-scaling: no
    # scale-down to two with maximum concurrency set, which infra sets).
    esm_receives = 5 * 3
    month = {
        "dynamodb_reads_and_writes": sum(per_minute.values()) * MINUTES_PER_MONTH,
        "poller_lambda": minute["lambda"] * MINUTES_PER_MONTH,
        "stepfunctions": minute["stepfunctions"] * MINUTES_PER_MONTH,
        "tick_lambda": tick_usd * MINUTES_PER_MONTH,
        "event_source_idle_polling": esm_receives * prices.sqs_fifo * MINUTES_PER_MONTH,
        "console_widget_dashboard_open": console_widget_month(),
        "chain_auditor": audit_cost.idle_month_usd(),  # its Lambda, reads and alarms: bench/audit_cost.py
    }
    month["total"] = sum(month.values())
    lines.sort(key=lambda line: -line[-1])
    return {"usd_per_month": month, "requests_per_minute": lines, "poller_mb": poller_mb}


def summarize(load: RunResult, base: RunResult, prices: Prices) -> dict[str, Any]:
    added = subtract(load.tallies, base.tallies)
    triggers = max(load.triggers, 1)
    packing = packing_wru_per_timer()
    rows = per_trigger_rows(added, triggers, prices, packing)
    storage = storage_per_million(rows, prices)
    measured_lambda = lambda_per_trigger(load, prices)
    scale_lambda = lambda_per_trigger(load, prices, batch=10)
    groups = groups_at(SUSTAINED_PER_S)
    minute = poller_minute_usd(groups, prices)
    per_minute_triggers = SUSTAINED_PER_S * 60
    poller_usd = minute["lambda"] / per_minute_triggers * 1e6
    sfn_usd = minute["stepfunctions"] / per_minute_triggers * 1e6
    fixed_share = poller_usd + sfn_usd
    measured = (
        sum(r["usd_per_million"] for r in rows)
        + measured_lambda["usd_per_million"]
        + storage["usd_per_million"]
    )
    kms = kms_per_million(scale_lambda["ms_per_trigger"], prices)
    at_scale = (
        sum(r["usd_per_million_at_scale"] for r in rows)
        + scale_lambda["usd_per_million"]
        + storage["usd_per_million"]
        + fixed_share
        + kms["usd_per_million"]
    )

    measured_wru = sum(r["wru_per_trigger"] for r in rows)
    wru = sum(r["wru_per_trigger_at_scale"] for r in rows)  # what 10,000/s writes per trigger
    rru = sum(r["rru_per_trigger"] for r in rows)
    dynamo_on_demand = (wru * prices.wru + rru * prices.rru) * 1e6
    others = at_scale - dynamo_on_demand
    provisioned = {}
    for utilization in (1.0, 0.7):
        wcu = wru * SUSTAINED_PER_S / utilization
        rcu = rru * SUSTAINED_PER_S / utilization
        hourly = wcu * prices.wcu_hour + rcu * prices.rcu_hour
        per_million = hourly / (SUSTAINED_PER_S * 3600) * 1e6
        provisioned[f"{int(utilization * 100)}%"] = {
            "wcu": wcu,
            "rcu": rcu,
            "dynamodb_usd_per_million": per_million,
            "all_in_usd_per_million": per_million + others,
        }

    # EventBridge Scheduler + the same worker Lambda (one invocation per trigger, one PutItem of
    # the same record) + that write + the same record's storage.
    write_wru = max(1, math.ceil(storage["record_bytes"] / 1024))
    eb_ms = LATENCY_MS["dynamodb.PutItem"] + INVOCATION_OVERHEAD_MS
    eb_lambda = prices.lambda_request + eb_ms / 1000 * prices.worker_mb / 1024 * prices.lambda_gb_s
    eventbridge_all_in = (prices.scheduler + eb_lambda + write_wru * prices.wru) * 1e6 + storage[
        "record_only_usd_per_million"
    ]

    return {
        "triggers": load.triggers,
        "rows": rows,
        "storage": storage,
        "worker_lambda_measured": measured_lambda,
        "worker_lambda_at_scale": scale_lambda,
        "groups_at_10k": groups,
        "kms_at_10k": kms,
        "poller_lambda_usd_per_million_at_10k": poller_usd,
        "stepfunctions_usd_per_million_at_10k": sfn_usd,
        "measured_usd_per_million": measured,
        "on_demand_usd_per_million": at_scale,
        "dynamodb_units_per_trigger": {"wru": wru, "rru": rru, "wru_in_this_run": measured_wru},
        "timer_packing_wru_per_timer_at_10k": packing,
        "dynamodb_on_demand_usd_per_million": dynamo_on_demand,
        "provisioned_at_10k": provisioned,
        "eventbridge_scheduler_usd_per_million": prices.scheduler * 1e6,
        "eventbridge_all_in_usd_per_million": eventbridge_all_in,
        "eventbridge_all_in_quoted": EVENTBRIDGE_ALL_IN_QUOTED,
    }


def events_and_alerts(meter: Meter, prices: Prices, jobs: int, minutes: int) -> dict[str, Any]:
    """What execution events and alert rules add per trigger (see the module docstring)."""
    small = (16, 4)
    without = run(meter, "failing, events off", jobs, minutes, *small, failing_every=10)
    with_both = run(
        meter, "failing, events and alerts", jobs, minutes, *small, failing_every=10, events=True, alerts=True
    )
    triggers = max(with_both.triggers, 1)
    base = max(without.triggers, 1)
    events_usd = alerts_usd = 0.0
    entries = calls = 0.0
    for key, tally in with_both.tallies.items():
        phase, operation, _ = key
        if phase in ("setup", "registration", "done") or phase.endswith("(empty)"):
            continue
        usd = request_cost(key, tally, prices) / triggers * 1e6
        before = without.tallies.get(key)
        usd_before = request_cost(key, before, prices) / base * 1e6 if before is not None else 0.0
        if operation == "events.PutEvents":
            events_usd += usd
            entries += tally.items / triggers
            calls += tally.calls / triggers
        elif operation.startswith("dynamodb.") and phase == "worker":
            alerts_usd += usd - usd_before
    # The worker Lambda's extra duration: PutEvents calls and the alert writes' round trips.
    gb_s_usd = prices.worker_mb / 1024 * prices.lambda_gb_s
    extra_ms = (latency_ms(with_both.tallies, "worker") / triggers) - (
        latency_ms(without.tallies, "worker") / base
    )
    events_ms = calls * LATENCY_MS["events"]
    events_lambda = events_ms / 1000 * gb_s_usd * 1e6
    alerts_lambda = max(0.0, extra_ms - events_ms) / 1000 * gb_s_usd * 1e6
    alerts_per_trigger = with_both.alerts / triggers
    alerts_total = alerts_usd + alerts_lambda
    return {
        "triggers": with_both.triggers,
        "failing_share": 0.1,
        "event_entries_per_trigger": entries,
        "put_events_calls_per_trigger": calls,
        "events_usd_per_million": events_usd + events_lambda,
        "events_put_usd_per_million": events_usd,
        "events_lambda_usd_per_million": events_lambda,
        "alerts_raised": with_both.alerts,
        "alerts_per_trigger": alerts_per_trigger,
        "alerts_usd_per_million_triggers": alerts_total,
        "alerts_usd_per_million_alerts": alerts_total / alerts_per_trigger if alerts_per_trigger else None,
        "sns_publish_usd_per_million_alerts": benchlib.price(
            benchlib.load_prices(), "sns.publish_per_million"
        ),
    }


def print_events_and_alerts(figures: dict[str, Any]) -> None:
    per_alert = figures["alerts_usd_per_million_alerts"]
    rows = [
        (
            f"execution events: {figures['event_entries_per_trigger']:.2f} events,"
            f" {figures['put_events_calls_per_trigger']:.2f} PutEvents calls a trigger",
            figures["events_usd_per_million"],
        ),
        ("  of which EventBridge ($1.00 per million events)", figures["events_put_usd_per_million"]),
        ("  of which worker Lambda time (PutEvents round trips)", figures["events_lambda_usd_per_million"]),
        (
            f"alerts: 10 % of jobs failing every other minute ({figures['alerts_raised']} alerts,"
            f" {figures['alerts_per_trigger']:.3f} a trigger)",
            figures["alerts_usd_per_million_triggers"],
        ),
        ("jobs without alert rules (no store operation)", 0.0),
    ]
    print(benchlib.table(["$ per million triggers", "$/M"], rows))
    if per_alert is not None:
        print(
            f"one million alerts raised cost ${per_alert:.2f} in writes and Lambda time (+ the target:"
            f" SNS ${figures['sns_publish_usd_per_million_alerts']:.2f}/M publishes; webhooks free)"
        )


def leaner(rows: list[dict[str, Any]], prices: Prices) -> list[tuple[str, float]]:
    """What a leaner record or a skipped request would save, $ per million triggers."""
    out = []
    for r in rows:
        if r["wru_per_trigger"] and r["bytes_per_item"] > 1024:
            ideal = r["calls_per_trigger"] * 1.0  # one write unit per write if the item fit in 1 KB
            if r["operation"].endswith("BatchWriteItem") or r["operation"].endswith("PutItem"):
                ideal = r["wru_per_trigger"] / math.ceil(r["bytes_per_item"] / 1024)
            saved = (r["wru_per_trigger"] - ideal) * prices.wru * 1e6
            if saved > 0.0005:
                out.append(
                    (
                        f"{r['phase']} {r['operation']} {r['kind']}: {r['bytes_per_item']:,.0f} B items"
                        " -> under 1 KB",
                        saved,
                    )
                )
    return out


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
