"""The cost benchmark's rig: the real poller, worker and tick against moto in-process on a
ManualClock, every AWS request counted (``awsmeter``).

:func:`embedded_aws` builds the table, queues and event bus under ``mock_aws`` with the meter
hooked in; :func:`run` creates the jobs, drives the minutes (tick, pollers, workers fed the way
the SQS event source feeds them, history reads) and answers a :class:`RunResult` with the
request tallies per phase. The constants here (table, queues, latencies, overheads) are the
benchmark's stated inputs, printed beside its figures.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

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
# What CloudWatch Logs ingests besides the EMF documents the rig counts: START, END and REPORT
# lines per invocation (bench/console_widget.py's figure; a traced REPORT line is longer).
PLATFORM_LOG_BYTES = 350
# X-Ray: every function traces actively (Tracing.ACTIVE) under the default sampling rule, a
# reservoir of one invocation a second and 5 % of the rest (docs.aws.amazon.com/xray/latest/
# devguide/xray-console-sampling.html, as published: unverified here).
XRAY_SAMPLED_SHARE = 0.05
LAMBDA_CPU_SLOWDOWN_512 = 1769 / 512  # a full vCPU at 1,769 MB; 512 MB gets ~29 % of one
DEFAULT_CPU_US = 1000.0  # worker core + botocore, if bench/results/cpu_per_trigger.json is absent
TICK_MS = 50.0  # the tick's own work besides its requests

MIX = benchlib.COST_MIX


class InstantTarget:
    """Answers at once: a job ``fail-*`` fails in even minutes (alerts are always delivered)."""

    def invoke(self, target: Any, payload: Any, ctx: Any) -> Any:
        from punctual.delivery.targets.base import TargetResult

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
    emf_bytes: dict[str, int] = field(default_factory=dict)  # EMF documents written, by phase
    # Of those bytes, the metric values' text (a document's values grow with the triggers it holds;
    # the rest, the document's frame, comes once a document), and the documents written
    emf_value_bytes: dict[str, int] = field(default_factory=dict)
    emf_documents: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------- the AWS rig


@contextmanager
def embedded_aws(
    meter: Meter, shard_count: int, near_shard_count: int, events: bool = False
) -> Iterator[dict[str, Any]]:
    """moto in-process with the table, the queues and a state machine; every client hooked."""
    import boto3
    from moto import mock_aws

    from punctual.runtime import aws
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
            "PUNCTUAL_EVENTS_STATUS_CHANGES": "all",  # the events run prices every change
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


def emf_value_bytes(line: str) -> int:
    """The characters of an EMF document's metric values (each metric's value or value list, as
    the document writes it): the part of the document that grows with what it counts."""
    document = json.loads(line)
    names = [m["Name"] for group in document["_aws"]["CloudWatchMetrics"] for m in group["Metrics"]]
    return sum(len(json.dumps(document[name], separators=(",", ":"))) for name in names if name in document)


def emf_counter(result: RunResult, phase: str) -> Any:
    """The Lambda's metrics sink (EMF documents, as the handlers print them), its documents'
    bytes counted into ``result.emf_bytes[phase]`` instead of printed."""
    from punctual.runtime.emf import EmfBuffer

    result.emf_bytes[phase] = result.emf_value_bytes[phase] = result.emf_documents[phase] = 0

    def write(line: str) -> None:
        result.emf_bytes[phase] += len(line) + 1
        result.emf_documents[phase] += 1
        result.emf_value_bytes[phase] += emf_value_bytes(line)

    return EmfBuffer("Punctual", "punctual", write=write)


def load_tick() -> Any:
    """The tick as its Lambda builds it (the composition root), from the environment."""
    from punctual.runtime.composition import Container
    from punctual.runtime.settings import Settings

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

    from punctual.dispatch.queues import SqsQueues
    from punctual.execution.batch import LambdaBatch
    from punctual.execution.keeper import LeaseKeeper
    from punctual.models import JobSpec
    from punctual.runtime.clock import ManualClock
    from punctual.runtime.composition import Container
    from punctual.runtime.settings import Settings
    from punctual.usecases.jobs import JobService, QueueRouting

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
        result = RunResult(name, minutes, {}, registered=len(specs))
        poller_metrics, worker_metrics = (emf_counter(result, phase) for phase in ("poller", "worker"))
        dispatcher = built.poller(poller_metrics)
        worker = built.worker(lease_timers=False, invoker=InstantTarget(), metrics=worker_metrics)
        tick = load_tick()
        esm = boto3.client("sqs")

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
                worker_metrics.flush()  # as the handler's log_metrics does, once an invocation
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
                        poller_metrics.flush()  # the poller's invocation ends with its minute
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
