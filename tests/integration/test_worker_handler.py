"""The worker Lambda handler under moto, with SQS event payloads built from real received messages."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest

from execution_harness import FakeTarget
from factories import job as make_job
from factories import lambda_sqs_event
from punctual.dispatch.queues import DispatchMessage, MessageKind, SqsQueues, message_for
from punctual.execution import Worker, WorkerConfig
from punctual.execution import worker as execution_worker
from punctual.models import ExecutionStatus, Job
from punctual.runtime.clock import SystemClock
from punctual.security.message_auth import DispatchKeyError
from punctual.store.dynamo import DynamoStore, table_definition
from punctual.timing.timers import slot_key

HANDLER = Path(__file__).resolve().parents[2] / "functions" / "worker" / "handler.py"
TABLE = "punctual-worker-test"
REGION = "us-east-1"


@dataclass
class LambdaContext:
    function_name: str = "punctual-worker"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:punctual-worker"
    aws_request_id: str = "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"
    remaining_ms: int = 900_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@dataclass
class Env:
    handler: ModuleType
    sqs: Any
    store: DynamoStore
    queue_url: str
    queue_arn: str
    failed_url: str
    target: FakeTarget


def _load_handler(name: str) -> ModuleType:
    """``functions/worker/handler.py`` imported afresh as module ``name`` (its import-time code runs)."""
    spec = importlib.util.spec_from_file_location(name, HANDLER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def env(aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    dynamodb.create_table(**table_definition(TABLE))
    sqs = boto3.client("sqs", region_name=REGION)
    queue_url = sqs.create_queue(
        QueueName="punctual-short-0.fifo",
        Attributes={"FifoQueue": "true", "VisibilityTimeout": "600"},
    )["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    failed_url = sqs.create_queue(QueueName="punctual-failed")["QueueUrl"]
    monkeypatch.setenv("PUNCTUAL_TABLE_NAME", TABLE)
    monkeypatch.setenv("PUNCTUAL_SHORT_QUEUE_URLS", queue_url)
    monkeypatch.setenv("PUNCTUAL_FAILED_QUEUE_URL", failed_url)
    target = FakeTarget()
    monkeypatch.setattr(execution_worker, "default_invoker", lambda settings, clock: target)
    yield Env(
        _load_handler("worker_handler_under_test"),
        sqs,
        DynamoStore(dynamodb, TABLE),
        queue_url,
        queue_arn,
        failed_url,
        target,
    )


def add_job(env: Env, job_id: str, **overrides: Any) -> Job:
    created = make_job(job_id, now=datetime.now(UTC), **overrides)
    env.store.create_job(created, None, max_jobs=100)
    return created


def message(job: Job, slot: datetime) -> DispatchMessage:
    return message_for(job, slot_key(slot), slot, 1, MessageKind.FIRE, slot)


def sqs_event(env: Env, max_messages: int = 10) -> dict[str, Any]:
    """Receive what the event source mapping would, and shape it as Lambda's SQS event."""
    reply = env.sqs.receive_message(
        QueueUrl=env.queue_url, MaxNumberOfMessages=max_messages, AttributeNames=["All"], WaitTimeSeconds=0
    )
    return lambda_sqs_event(reply.get("Messages", []), env.queue_arn, REGION)


def invoke(env: Env, event: dict[str, Any], context: LambdaContext | None = None) -> dict[str, Any]:
    response: dict[str, Any] = env.handler.handler(event, context or LambdaContext())
    # What the event source mapping does with a partial batch response: delete the others.
    failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
    for record in event["Records"]:
        if record["messageId"] not in failed:
            env.sqs.delete_message(QueueUrl=env.queue_url, ReceiptHandle=record["receiptHandle"])
    return response


def test_a_batch_runs_each_record_once_and_reports_metrics(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given three due slots of two jobs in the short queue
    now = datetime.now(UTC).replace(microsecond=0)
    a, b = add_job(env, "job-a"), add_job(env, "job-b")
    earlier = now - timedelta(minutes=1)
    SqsQueues(env.sqs).send(env.queue_url, [message(a, earlier), message(b, now), message(a, now)])
    # When the handler gets them as one batch
    event = sqs_event(env)
    assert len(event["Records"]) == 3
    response = invoke(env, event)
    # Then every record succeeded, each ran once, and the metrics went out as EMF
    assert response == {"batchItemFailures": []}
    # (each slot of an overlap-allow job is a message group of its own: they run side by side, in
    # either order; only overlap-queue jobs share a group and run in order)
    assert sorted(env.target.calls_for("job-a")) == [(slot_key(earlier), 1), (slot_key(now), 1)]
    assert env.target.calls_for("job-b") == [(slot_key(now), 1)]
    for job in (a, b):
        assert {r.status for r in env.store.list_executions(job.tenant, job.id, 10).items} == {
            ExecutionStatus.SUCCEEDED
        }
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    values = [doc["ExecutionsSucceeded"] for doc in emf if "ExecutionsSucceeded" in doc]
    assert sum(sum(v) if isinstance(v, list) else v for v in values) == 3


def test_a_waiting_record_stops_only_its_own_group(env: Env) -> None:
    # Given job A (overlap queue: one FIFO group) whose slot is running on another worker, a
    # duplicate of that slot's message, the slot after it, and job B
    now = datetime.now(UTC).replace(microsecond=0)
    a = add_job(env, "job-a", overlap="queue", timeout_seconds=600)
    b = add_job(env, "job-b")
    core = Worker(env.store, SqsQueues(env.sqs), env.target, SystemClock(), WorkerConfig(lease_timers=False))
    assert core.claim(message(a, now)).claimed
    later = now + timedelta(seconds=1)
    SqsQueues(env.sqs).send(env.queue_url, [message(a, now), message(a, later), message(b, now)])
    # When one batch holds A's two messages and B's
    event = sqs_event(env)
    ids = {
        json.loads(r["body"])["slot"] + json.loads(r["body"])["job_id"]: r["messageId"]
        for r in event["Records"]
    }
    response = invoke(env, event)
    # Then B ran; A's duplicate waits for the live lease, and the slot behind it in its group is
    # reported failed too (kept in the queue, in order)
    failed = [item["itemIdentifier"] for item in response["batchItemFailures"]]
    assert failed == [ids[slot_key(now) + "job-a"], ids[slot_key(later) + "job-a"]]
    assert env.target.calls_for("job-b") == [(slot_key(now), 1)]
    assert env.target.calls_for("job-a") == []
    # And nothing of group A is deliverable while its first message waits (order kept) ...
    assert sqs_event(env)["Records"] == []
    # ... but once it is visible again, the slot behind it comes along at once (it was not left
    # in flight for the queue's whole visibility timeout)
    first = next(r for r in event["Records"] if r["messageId"] == failed[0])
    env.sqs.change_message_visibility(
        QueueUrl=env.queue_url, ReceiptHandle=first["receiptHandle"], VisibilityTimeout=0
    )
    again = sqs_event(env)
    assert [r["messageId"] for r in again["Records"]] == failed


def test_a_queued_slot_is_recorded_and_acknowledged_not_returned(env: Env) -> None:
    # Given job A (overlap queue) whose previous slot is still running, and job B
    now = datetime.now(UTC).replace(microsecond=0)
    a = add_job(env, "job-a", overlap="queue", timeout_seconds=600)
    b = add_job(env, "job-b")
    config = WorkerConfig(lease_timers=False, short_queue_urls=(env.queue_url,))
    core = Worker(env.store, SqsQueues(env.sqs), env.target, SystemClock(), config)
    running = core.claim(message(a, now - timedelta(minutes=5)))
    assert running.claimed
    later = now + timedelta(seconds=1)
    SqsQueues(env.sqs).send(env.queue_url, [message(a, now), message(a, later), message(b, now)])
    # When one batch holds A's two slots and B's
    response = invoke(env, sqs_event(env))
    # Then nothing is returned to the queue (no receive counts towards the dead-letter queue):
    # A's slots are recorded QUEUED behind the running one, and B ran
    assert response == {"batchItemFailures": []}
    assert env.target.calls_for("job-b") == [(slot_key(now), 1)]
    for slot in (now, later):
        queued = env.store.get_execution(a.tenant, a.id, slot_key(slot))
        assert queued is not None and queued.status is ExecutionStatus.QUEUED
    assert sqs_event(env)["Records"] == []
    # And when the running slot ends, the first queued one is started through the queue
    from punctual.delivery.targets.base import TargetResult

    core.finish(running, TargetResult.ok())
    handed = [json.loads(r["body"]) for r in sqs_event(env)["Records"]]
    assert [(m["slot"], m["kind"]) for m in handed] == [(slot_key(now), "turn")]


def test_final_failure_reaches_the_failed_executions_queue(env: Env) -> None:
    from punctual.delivery.targets.base import TargetResult

    now = datetime.now(UTC).replace(microsecond=0)
    job = add_job(env, "job-f", retry={"max_attempts": 1})
    env.target.results = [TargetResult.permanent("HTTP 400: bad request")]
    SqsQueues(env.sqs).send(env.queue_url, [message(job, now)])
    assert invoke(env, sqs_event(env)) == {"batchItemFailures": []}
    reply = env.sqs.receive_message(QueueUrl=env.failed_url, MaxNumberOfMessages=10)
    [body] = [json.loads(m["Body"]) for m in reply["Messages"]]
    assert (body["job_id"], body["slot"], body["status"], body["error"]) == (
        "job-f",
        slot_key(now),
        "FAILED",
        "HTTP 400: bad request",
    )


def test_a_malformed_record_is_dropped_not_retried_forever(env: Env) -> None:
    env.sqs.send_message(
        QueueUrl=env.queue_url, MessageBody="not json", MessageGroupId="g", MessageDeduplicationId="d"
    )
    assert invoke(env, sqs_event(env)) == {"batchItemFailures": []}
    assert env.target.calls == []


def test_a_run_that_could_outlast_the_invocation_is_not_started(env: Env) -> None:
    # Given a job with a 300 s timeout, delivered to an invocation with 100 s left
    now = datetime.now(UTC).replace(microsecond=0)
    job = add_job(env, "job-long", timeout_seconds=300)
    SqsQueues(env.sqs).send(env.queue_url, [message(job, now)])
    event = sqs_event(env)
    response = invoke(env, event, LambdaContext(remaining_ms=100_000))
    # Then it is handed back untouched, visible at once for the next invocation
    assert [item["itemIdentifier"] for item in response["batchItemFailures"]] == [
        event["Records"][0]["messageId"]
    ]
    assert env.target.calls == []
    assert env.store.get_execution(job.tenant, job.id, slot_key(now)) is None
    assert invoke(env, sqs_event(env)) == {"batchItemFailures": []}
    assert env.target.calls_for(job.id) == [(slot_key(now), 1)]


def test_a_dispatch_message_forged_onto_a_work_queue_is_dropped_and_the_real_one_runs(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    from punctual.security.message_auth import DispatchSigner

    key = "d" * 40
    monkeypatch.setenv("PUNCTUAL_DISPATCH_KEY", key)
    now = datetime.now(UTC).replace(microsecond=0)
    own, victim = add_job(env, "own"), add_job(env, "payroll", tenant="b")
    # Given what another tenant's SQS target could put on a work queue: a dispatch body naming
    # tenant B's job (sent straight to SQS, past every Punctual sender), and a real release
    forged = message(victim, now)
    env.sqs.send_message(
        QueueUrl=env.queue_url,
        MessageBody=forged.to_body(),
        MessageGroupId=forged.group_id,
        MessageDeduplicationId="forged",
    )
    SqsQueues(env.sqs, signer=DispatchSigner(key)).send(env.queue_url, [message(own, now)])
    # When the worker Lambda gets both
    response = invoke(env, sqs_event(env))
    # Then the forged one is dropped (deleted, nothing run or recorded), the real one runs
    assert response == {"batchItemFailures": []}
    assert env.target.calls_for("payroll") == []
    assert env.store.get_execution("b", "payroll", slot_key(now)) is None
    assert env.target.calls_for("own") == [(slot_key(now), 1)]
    assert sqs_event(env)["Records"] == []


def test_lambdas_init_phase_builds_the_worker_before_the_first_batch(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Imported outside Lambda (tests, a local-mode zygote that forks later), nothing is built
    assert env.handler.batch.cache_info().currsize == 0
    # Imported in Lambda's init phase, the worker is built then: the first batch does not pay for
    # its clients between the batch's receipt and its first claim
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand")
    handler = _load_handler("worker_handler_init_under_test")
    assert handler.batch.cache_info().currsize == 1
    built = handler.batch()
    # and that worker is the one the invocation uses
    now = datetime.now(UTC).replace(microsecond=0)
    job = add_job(env, "job-init")
    SqsQueues(env.sqs).send(env.queue_url, [message(job, now)])
    env.handler = handler
    assert invoke(env, sqs_event(env)) == {"batchItemFailures": []}
    assert handler.batch() is built
    assert handler.batch.cache_info().misses == 1
    assert env.target.calls_for("job-init") == [(slot_key(now), 1)]


def test_a_batch_that_finds_no_worker_goes_back_after_its_backoff_not_the_queues_timeout(env: Env) -> None:
    # Given a due slot, and a worker environment that cannot be built (Secrets Manager throttled
    # at its init: the dispatch key unread)
    now = datetime.now(UTC).replace(microsecond=0)
    a = add_job(env, "job-a")
    SqsQueues(env.sqs).send(env.queue_url, [message(a, now)])

    def unreachable() -> Any:
        raise DispatchKeyError("cannot read the dispatch key: ThrottlingException")

    changed: list[dict[str, Any]] = []
    real = env.sqs.change_message_visibility_batch

    def spy(**kwargs: Any) -> Any:
        changed.append(kwargs)
        return real(**kwargs)

    env.handler.batch.cache_clear()
    with pytest.MonkeyPatch.context() as down:
        down.setattr(env.handler, "container", unreachable)
        down.setattr(env.sqs, "change_message_visibility_batch", spy)
        down.setattr(env.handler.aws, "client", lambda service: env.sqs)
        env.handler.init()  # the init phase no longer fails: it logs, and each batch tries again
        # When its first batch arrives
        event = sqs_event(env)
        with pytest.raises(DispatchKeyError):  # the invocation fails (counted in its Errors)
            env.handler.handler(event, LambdaContext())
    # Then the message goes back after its first error backoff, 10 s, not the queue's 600 s
    # (QA25: the batch stayed in flight for the queue's whole visibility timeout)
    [record] = event["Records"]
    entries = [
        (c["QueueUrl"], [(e["ReceiptHandle"], e["VisibilityTimeout"]) for e in c["Entries"]]) for c in changed
    ]
    assert entries == [(env.queue_url, [(record["receiptHandle"], 10)])]
    # And once the key can be read, the next batch builds the worker and runs the slot
    env.sqs.change_message_visibility(
        QueueUrl=env.queue_url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=0
    )
    assert invoke(env, sqs_event(env)) == {"batchItemFailures": []}
    assert env.target.calls_for("job-a") == [(slot_key(now), 1)]
