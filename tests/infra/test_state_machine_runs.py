"""The synthesised minute state machine, run by moto's ASL interpreter against the real poller.

The definition comes from the template (``default_synth``); moto executes it
(``execute_state_machine``), and its Lambda service runs ``functions/poller/handler.py``
in-process for each invocation, as the runtime would, turning an exception into a function
error (``x-amz-function-error: Unhandled`` and an ``errorType`` payload). So these tests show
what the deployed retriers and Catch do with a poller that crashes: they fail if the poller task
is retried only on Lambda service errors.

The poller runs in real time until its minute + 60 s + grace, so its clock is moved
(``PUNCTUAL_CLOCK_OFFSET_S``) to a few seconds before the end of its minute, with a 1 s grace.
The retriers' waits are recorded, not slept: the recorded values are what the interpreter
computed from ``IntervalSeconds``, ``BackoffRate`` and ``MaxDelaySeconds``.
"""

from __future__ import annotations

import io
import json
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from cdk_helpers import Synth

from factories import load_handler, spec
from local.component import LambdaContext
from local.retriers import retrier_for, retriers_from
from punctual.dispatch.queues import SqsQueues
from punctual.dispatch.tick import plan_minute
from punctual.runtime import aws
from punctual.runtime.clock import ManualClock
from punctual.runtime.settings import Settings
from punctual.store.dynamo import DynamoStore, table_definition
from punctual.timing.timers import Lane, minute_of, shard_of, slot_key
from punctual.usecases.jobs import JobService, QueueRouting

MOTO_CONFIG: Any = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
TABLE = "punctual"
POLLER = "punctual-poller"
EXECUTION_DEADLINE_S = 120  # a hang guard, not a timing assertion


class ProcessDied(BaseException):
    """The poller's process died in the middle of its minute (killed, out of memory).

    A BaseException, so that nothing in the poller catches it on the way out, as nothing
    catches a SIGKILL.
    """

    error_type = "Runtime.ExitError"


def render(value: Any, refs: dict[str, str]) -> str:
    """The text of an ``Fn::Join``, each ``Ref`` replaced by its value in ``refs``."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(render(part, refs) for part in parts)
    if "Ref" in value:
        return refs[value["Ref"]]
    raise AssertionError(f"the definition references {value}: give the test its value")


def state_machine_definition(synth: Synth) -> str:
    (machine,) = synth.of_type("AWS::StepFunctions::StateMachine").values()
    return render(machine["Properties"]["DefinitionString"], {"AWS::Partition": "aws"})


@dataclass
class FakeLambda:
    """Moto's Lambda service with the real poller behind it.

    ``crash(event, attempt)`` may raise, standing in for a poller that fails on its
    ``attempt``-th invocation (1-based) for that group. A group's second poller (``replica`` 1)
    counts as group ``100 + group``.
    """

    handler: Callable[[dict[str, Any], Any], Any]
    crash: Callable[[dict[str, Any], int], None] = lambda event, attempt: None
    attempts: dict[int, int] = field(default_factory=dict)  # group -> invocations
    outcomes: list[tuple[int, str]] = field(default_factory=list)  # (group, "ok" or the errorType)
    current: dict[int, int] = field(default_factory=dict)  # group -> the attempt now running
    lock: threading.Lock = field(default_factory=threading.Lock)

    def invoke(self, function_name: str, body: Any, response_headers: dict[str, str]) -> bytes:
        event = json.loads(body)
        group = int(event["group"]) + 100 * int(event.get("replica", 0))
        with self.lock:
            attempt = self.current[group] = self.attempts[group] = self.attempts.get(group, 0) + 1
        context = LambdaContext(function_name.rsplit(":", 1)[-1], timeout_s=120, memory_limit_in_mb=1024)
        try:
            self.crash(event, attempt)
            result = self.handler(event, context)
        except (Exception, ProcessDied) as exc:
            error_type = getattr(exc, "error_type", type(exc).__name__)
            with self.lock:
                self.outcomes.append((group, error_type))
            response_headers["x-amz-function-error"] = "Unhandled"
            return json.dumps({"errorType": error_type, "errorMessage": str(exc)}).encode()
        with self.lock:
            self.outcomes.append((group, "ok"))
        return json.dumps(result).encode()


@dataclass
class Rig:
    """moto with the table, the short queue, the poller function and the minute state machine."""

    sfn: Any
    sqs: Any
    queue_url: str
    machine_arn: str
    function_arn: str
    jobs: JobService
    waits_s: list[float]  # what the retriers asked to wait, in order
    monkeypatch: pytest.MonkeyPatch

    def serve(self, fake: FakeLambda) -> None:
        from moto.awslambda_simple.models import LambdaSimpleBackend

        def invoke(
            backend: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any
        ) -> bytes:
            return fake.invoke(function_name, body, response_headers)

        self.monkeypatch.setattr(LambdaSimpleBackend, "invoke", invoke)

    def register_at(self, job_id: str, slot: datetime) -> str:
        self.jobs.register("default", spec(f"at({slot.strftime('%Y-%m-%dT%H:%M:%S')})"), job_id=job_id)
        return slot_key(slot)

    def run_minute(self, minute: datetime, groups: int, replicas: int = 1) -> dict[str, Any]:
        """Start the minute's execution as the tick does, with ``start_at`` = now; wait for its end."""
        settings = Settings.from_env().model_copy(
            update={"shard_groups": groups, "poller_replicas": replicas}
        )
        plan = plan_minute(minute, settings)
        plan["start_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        plan["poller_function"] = self.function_arn
        name = f"m-{minute:%Y%m%dT%H%M}"
        arn = self.sfn.start_execution(stateMachineArn=self.machine_arn, name=name, input=json.dumps(plan))[
            "executionArn"
        ]
        deadline = time.monotonic() + EXECUTION_DEADLINE_S
        while (described := self.sfn.describe_execution(executionArn=arn))["status"] == "RUNNING":
            assert time.monotonic() < deadline, "the minute's execution did not end"
            time.sleep(0.2)
        events = self.sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
        entered = [
            e["stateEnteredEventDetails"]["name"]
            for e in events
            if "stateEnteredEventDetails" in e and e["type"].endswith("StateEntered")
        ]
        return {"status": described["status"], "entered": entered}

    def released(self) -> dict[str, set[str]]:
        """job id -> the slots in the short queue."""
        found: dict[str, set[str]] = {}
        while True:
            reply = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
            if not reply.get("Messages"):
                return found
            for message in reply["Messages"]:
                body = json.loads(message["Body"])
                found.setdefault(body["job_id"], set()).add(body["slot"])


@pytest.fixture
def rig(default_synth: Synth, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    from moto import mock_aws
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    definition = state_machine_definition(default_synth)
    waits_s: list[float] = []
    monkeypatch.setattr(retrier_decl, "time", SimpleNamespace(sleep=waits_s.append))
    aws.reset()
    with mock_aws(config=MOTO_CONFIG):
        ddb = boto3.client("dynamodb")
        ddb.create_table(**table_definition(TABLE))
        sqs = boto3.client("sqs")
        url = sqs.create_queue(QueueName="short.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        for name, value in {
            "PUNCTUAL_TABLE_NAME": TABLE,
            "PUNCTUAL_SHORT_QUEUE_URLS": url,
            "PUNCTUAL_SHARD_COUNT": "4",
            "PUNCTUAL_NEAR_SHARD_COUNT": "2",
            "PUNCTUAL_POLLER_GRACE_S": "1",
            "PUNCTUAL_POLL_INTERVAL_MS": "250",
            "PUNCTUAL_UNCLAIMED_RESEND_S": "0",  # no workers here: nothing would ever be claimed
        }.items():
            monkeypatch.setenv(name, value)
        iam = boto3.client("iam")
        role = iam.create_role(RoleName="punctual-test", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        code = io.BytesIO()
        with zipfile.ZipFile(code, "w") as archive:
            archive.writestr("handler.py", "def handler(event, context):\n    raise NotImplementedError\n")
        function_arn = boto3.client("lambda").create_function(
            FunctionName=POLLER,
            Runtime="python3.12",
            Role=role,
            Handler="handler.handler",
            Code={"ZipFile": code.getvalue()},
            Timeout=120,
        )["FunctionArn"]
        sfn = boto3.client("stepfunctions")
        machine_arn = sfn.create_state_machine(name="punctual-minutes", definition=definition, roleArn=role)[
            "stateMachineArn"
        ]
        settings = Settings.from_env()
        now = datetime.now(UTC)
        jobs = JobService(
            DynamoStore(ddb, TABLE),
            SqsQueues(sqs),
            ManualClock(minute_of(now) - timedelta(minutes=5)),  # far timers, written ahead
            settings.layout(),
            QueueRouting((url,)),
        )
        yield Rig(sfn, sqs, url, machine_arn, function_arn, jobs, waits_s, monkeypatch)
    aws.reset()


def poller_clock_at(monkeypatch: pytest.MonkeyPatch, instant: datetime) -> None:
    """Make the poller's clock read ``instant`` now (it runs in real time from there)."""
    offset = (instant - datetime.now(UTC)).total_seconds()
    monkeypatch.setenv("PUNCTUAL_CLOCK_OFFSET_S", f"{offset:.3f}")


def test_a_poller_that_dies_mid_minute_is_retried_and_the_minute_completes(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given three one-time jobs due near the end of the current minute, and a poller whose clock
    # reads 53 s into it: the first slot is due at once, the other two a few seconds later
    minute = minute_of(datetime.now(UTC))
    slots = {
        rig.register_at(f"job-{n}", minute + timedelta(seconds=second)): f"job-{n}"
        for n, second in enumerate((50, 56, 58))
    }
    late = {slot for slot in slots if slot >= slot_key(minute + timedelta(seconds=55))}

    # ... whose process dies on its first invocation when it is about to release a late slot
    def die_on_a_late_slot(params: dict[str, Any], **_: Any) -> None:
        sending = {json.loads(entry["MessageBody"])["slot"] for entry in params["Entries"]}
        if fake.current.get(0) == 1 and sending & late:
            raise ProcessDied("killed while releasing " + ", ".join(sorted(sending)))

    aws.client("sqs").meta.events.register("before-parameter-build.sqs.SendMessageBatch", die_on_a_late_slot)
    fake = FakeLambda(load_handler("poller").handler)
    rig.serve(fake)
    poller_clock_at(monkeypatch, minute + timedelta(seconds=53))

    # When the minute's execution runs
    run = rig.run_minute(minute, groups=1)

    # Then the first invocation died, the task retried it after the catch-all's first wait,
    # and the retry ran the minute to its end
    assert fake.outcomes == [(0, "Runtime.ExitError"), (0, "ok")], "the first poller must die, once"
    assert rig.waits_s == [1]
    assert run["status"] == "SUCCEEDED"
    assert "GroupFailed" not in run["entered"]
    assert run["entered"].count("PollShardGroup") == 1  # retries stay inside the one task state
    # ... and every slot of the minute reached the queue (the late ones through the retry)
    assert rig.released() == {job: {slot} for slot, job in slots.items()}


def test_a_poller_that_always_fails_is_caught_after_its_retries_and_the_other_group_completes(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, default_synth: Synth
) -> None:
    # Given two groups, each with a job due in the minute, and a poller clock near its end
    minute = minute_of(datetime.now(UTC))
    layout = Settings.from_env().layout()
    by_group = {
        group: next(
            f"job-{n}"
            for n in range(100)
            if shard_of("default", f"job-{n}", 4) in layout.shards_of_group(Lane.FAR, group, 2)
        )
        for group in (0, 1)
    }
    slot = rig.register_at(by_group[0], minute + timedelta(seconds=50))
    rig.register_at(by_group[1], minute + timedelta(seconds=50))

    # ... and group 0's poller fails on every invocation (the handler raises)
    def group_0_raises(event: dict[str, Any], attempt: int) -> None:
        if event["group"] == 0:
            raise RuntimeError(f"poller bug (attempt {attempt})")

    fake = FakeLambda(load_handler("poller").handler, crash=group_0_raises)
    rig.serve(fake)
    poller_clock_at(monkeypatch, minute + timedelta(seconds=57))

    # When the minute's execution runs
    run = rig.run_minute(minute, groups=2)

    # Then group 0 was retried with the catch-all's schedule (1, 1.5, then at most
    # MaxDelaySeconds), then caught: GroupFailed, while group 1's poller released its slot
    # (local mode's reading of the same retrier: local/retriers.py computes what moto waited)
    definition = json.loads(state_machine_definition(default_synth))
    processor = definition["States"]["PollGroups"]["ItemProcessor"]
    retrier = retrier_for(retriers_from(processor["States"][processor["StartAt"]]["Retry"]), "RuntimeError")
    assert retrier is not None and retrier.errors == ("States.ALL",)
    schedule = retrier.delays_s()
    assert schedule[:5] == [1, 1.5, 2, 2, 2]
    assert fake.attempts == {0: 1 + len(schedule), 1: 1}
    assert rig.waits_s == schedule
    assert set(fake.outcomes) == {(0, "RuntimeError"), (1, "ok")}
    assert run["status"] == "SUCCEEDED"
    assert run["entered"].count("GroupFailed") == 1
    assert rig.released() == {by_group[1]: {slot}}  # group 0's slot waits for a later poller


def test_a_group_whose_first_poller_never_runs_is_released_by_its_second(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given three minutely jobs due near the end of the minute, one group, which the tick's plan
    # gives two pollers (a minute on the standard poller)
    minute = minute_of(datetime.now(UTC))
    slots = {}
    for n, second in enumerate((55, 56, 58)):
        start = minute + timedelta(seconds=second)
        rig.jobs.register("default", spec("rate(1 minute)", start_at=start.isoformat()), job_id=f"job-{n}")
        slots[slot_key(start)] = f"job-{n}"

    # ... and the first poller's process dies as soon as it starts, on every invocation (a bad
    # host, a crash loop: mid-minute kills are tests/unit/test_poller_replicas.py's, in virtual time)
    def first_always_dies(event: dict[str, Any], attempt: int) -> None:
        if not event.get("replica"):
            raise ProcessDied(f"the first poller died (attempt {attempt})")

    fake = FakeLambda(load_handler("poller").handler, crash=first_always_dies)
    rig.serve(fake)
    poller_clock_at(monkeypatch, minute + timedelta(seconds=53))

    # When the minute's execution runs with the tick's plan
    run = rig.run_minute(minute, groups=1, replicas=2)

    # Then the first poller was retried and finally caught, while the second ran the minute to its
    # end: every slot reached the queue, and the minute succeeded
    assert {outcome for group, outcome in fake.outcomes if group == 0} == {"Runtime.ExitError"}
    assert fake.outcomes.count((100, "ok")) == 1 and fake.attempts[100] == 1
    assert run["status"] == "SUCCEEDED" and run["entered"].count("GroupFailed") == 1
    assert rig.released() == {job: {slot} for slot, job in slots.items()}
