"""The tick sizes the workers for the minutes it sees (predictive scaling), and the AWS actuator
changes only the worker event-source mappings and the burst service (moto)."""

from __future__ import annotations

import io
import json
import logging
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import boto3
import pytest

from punctual.dispatch.scaling import CapacityProfile, MemoryActuator, need_for, plan_capacity
from punctual.dispatch.scaling_aws import AwsActuator
from punctual.dispatch.tick import Tick
from punctual.runtime.observability import RecordingMetrics
from punctual.runtime.settings import Settings
from punctual.store.loads import MinuteLoad
from punctual.timing.timers import Lane

M = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)  # the burst minute


class _Sfn:
    exceptions = boto3.client("stepfunctions", region_name="us-east-1").exceptions

    def __init__(self) -> None:
        self.names: list[str] = []

    def start_execution(self, **params: str) -> dict[str, str]:
        self.names.append(params["name"])
        return {"executionArn": params["name"]}


class _Store:
    """Timers per (lane, minute), spread evenly over the shards, all due at the minute's start
    or (``spread_s``) evenly over its first seconds; nothing behind."""

    def __init__(
        self, settings: Settings, loads: dict[tuple[Lane, datetime], int], spread_s: float = 0.0
    ) -> None:
        self.settings = settings
        self.loads = loads
        self.spread_s = spread_s
        self.ledger: dict[datetime, MinuteLoad] = {}

    def get_minute_load(self, minute: datetime) -> MinuteLoad:
        return self.ledger.get(minute, MinuteLoad())

    def count_timers(self, lane: Lane, minute: datetime, shard: int) -> int:
        shards = self.settings.shard_count if lane is Lane.FAR else self.settings.near_shard_count
        return self.loads.get((lane, minute), 0) // shards

    def query_timers(self, lane: Lane, minute: datetime, shard: int) -> list[Any]:
        count = self.count_timers(lane, minute, shard)
        start_ms = int(minute.timestamp() * 1000)
        return [
            SimpleNamespace(due_ms=start_ms + int(i * self.spread_s * 1000 / count)) for i in range(count)
        ]

    def get_watermarks(self, lane: Lane, shards: list[int]) -> dict[int, datetime]:
        return {}


SETTINGS = Settings(
    shard_count=16,
    near_shard_count=4,
    load_sample_shards=16,
    burst_head_sample_shards=1,  # a burst's timers are read from one shard (the fake has them even)
    burst_workers_max=300,
    worker_event_source_mappings=["uuid-1"],
    state_machine_arn="arn:aws:states:us-east-1:123456789012:stateMachine:m",
)


def _tick(
    loads: dict[tuple[Lane, datetime], int],
    actuator: Any,
    remembered: dict[datetime, tuple[int, int]] | None = None,
    spread_s: float = 0.0,
) -> tuple[Tick, _Sfn, RecordingMetrics]:
    sfn, metrics = _Sfn(), RecordingMetrics()
    store = _Store(SETTINGS, loads, spread_s)
    return Tick(SETTINGS, sfn, store, actuator, metrics, remembered), sfn, metrics  # type: ignore[arg-type]


def test_the_tick_scales_for_a_far_burst_two_minutes_ahead_and_back_after_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given 600,000 far timers due at M, and an actuator at the standing figures
    loads = {(Lane.FAR, M): 600_000}
    actuator = MemoryActuator(burst_workers=0, max_concurrency=400)
    wanted = need_for(600_000, CapacityProfile.from_settings(SETTINGS), M).burst_workers

    # When the tick of three minutes before runs, nothing changes (the next tick leaves the lead)
    tick, _, _ = _tick(loads, actuator)
    tick.start_minutes(M - timedelta(minutes=3) + timedelta(seconds=2))
    assert actuator.burst_workers == 0

    # When the tick of two minutes before runs
    tick, sfn, metrics = _tick(loads, actuator)
    with caplog.at_level(logging.INFO, logger="punctual.dispatch.tick"):
        started = tick.start_minutes(M - timedelta(minutes=2) + timedelta(seconds=2))

    # Then the minutes start as before (its own too: no earlier tick started it here), and the
    # burst workers are asked for
    assert started == sfn.names == ["m-20261201T1158", "m-20261201T1159", "m-20261201T1200"]
    assert actuator.burst_workers == wanted > 0
    assert metrics.values["BurstWorkersDesired"] == [wanted]
    assert metrics.values["BurstPlannedSlots"] == [600_000]
    assert metrics.values["BurstShortfall"] == [0]
    # ... and the decision is one structured record naming the minute that drives it
    # (this tick's; the log may also hold the tick before, once Powertools set the loggers' level)
    records = [r.scaling_decision for r in caplog.records if hasattr(r, "scaling_decision")]
    (record,) = {
        json.dumps(r, sort_keys=True): r for r in records if r["decided_at"] == "2026-12-01T11:58:02Z"
    }.values()
    assert record["scaled"] is True and record["changed"] == [f"burst workers 0 -> {wanted}"]
    assert [m["minute"] for m in record["minutes"] if m["driving"]] == ["2026-12-01T12:00:00Z"]

    # When the tick during the minute runs: held
    _tick(loads, actuator)[0].start_minutes(M + timedelta(seconds=2))
    assert actuator.burst_workers == wanted
    # When the tick after it runs with the queues drained: back to standing
    _tick(loads, actuator)[0].start_minutes(M + timedelta(minutes=1, seconds=2))
    assert actuator.burst_workers == 0


def test_a_sustained_minute_raises_no_burst_worker_but_a_burst_of_its_size_does() -> None:
    # Given 10,000 slots a second for minutes on end (600,000 a minute, spread over each minute)
    sustained = {(Lane.FAR, M + timedelta(minutes=k)): 600_000 for k in range(-4, 3)}
    remembered: dict[datetime, tuple[int, int]] = {}
    actuator = MemoryActuator()
    for k in (-3, -2, -1, 0):
        _tick(sustained, actuator, remembered, spread_s=60)[0].start_minutes(
            M + timedelta(minutes=k, seconds=2)
        )
        # Then no burst worker is asked for: the warm event sources start each slot within the target
        assert actuator.burst_workers == 0
    # But the same 600,000 due at the top of a minute after quiet minutes asks for them
    burst = MemoryActuator()
    _tick({(Lane.FAR, M): 600_000}, burst)[0].start_minutes(M - timedelta(minutes=2) + timedelta(seconds=2))
    assert burst.burst_workers > 0


class _InputSfn(_Sfn):
    def __init__(self) -> None:
        super().__init__()
        self.inputs: dict[str, dict[str, Any]] = {}

    def start_execution(self, **params: str) -> dict[str, str]:
        self.inputs[params["name"]] = json.loads(params["input"])
        return super().start_execution(**params)


def test_a_burst_minute_gets_the_pollers_that_release_it_within_the_target() -> None:
    # Given pollers sized for bursts (13,044 slots each) beside the sustained 30,000 a minute
    settings = SETTINGS.model_copy(
        update={"shard_count": 64, "load_sample_shards": 64, "max_shard_groups": 80, "group_slices": 2}
    )
    settings = settings.model_copy(update={"burst_triggers_per_poller": 13_044, "burst_workers_max": 0})
    loads = {(Lane.FAR, M + timedelta(minutes=k)): 600_000 for k in (-2, -1, 0)}
    sfn = _InputSfn()

    # ... the minutes before M sustained (spread over each), M a top-of-minute burst
    class SpreadBefore(_Store):
        def query_timers(self, lane: Lane, minute: datetime, shard: int) -> Iterator[Any]:
            self.spread_s = 0.0 if minute == M else 60.0
            return super().query_timers(lane, minute, shard)

    tick = Tick(settings, sfn, SpreadBefore(settings, loads), None, RecordingMetrics())  # type: ignore[arg-type]
    tick.start_minutes(M - timedelta(minutes=2) + timedelta(seconds=2))
    burst, sustained = sfn.inputs["m-20261201T1200"], sfn.inputs["m-20261201T1159"]
    # Then the burst minute gets ceil(600,000 / 13,044) = 46 pollers, split over the two Maps
    assert len(burst["groups"]) == 46 and burst["burst_slots"] == 600_000
    assert [len(part) for part in burst["group_slices"]] == [23, 23]
    assert {g["group_count"] for g in burst["groups"]} == {46} and burst["poller"] == "standard"
    # and the sustained minute keeps its 20 (600,000 / 30,000)
    assert len(sustained["groups"]) == 20 and "burst_slots" not in sustained


class _TwoMachines(_InputSfn):
    """Step Functions with executions per machine: StartExecution and DescribeExecution."""

    def __init__(self, existing: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        super().__init__()
        self.executions = set(existing)
        self.machine_of: dict[str, str] = {}
        self.described: list[str] = []

    def start_execution(self, **params: str) -> dict[str, str]:
        self.machine_of[params["name"]] = params["stateMachineArn"]
        self.executions.add(
            params["stateMachineArn"].replace(":stateMachine:", ":execution:") + ":" + params["name"]
        )
        return super().start_execution(**params)

    def describe_execution(self, executionArn: str) -> dict[str, str]:
        self.described.append(executionArn)
        if executionArn not in self.executions:
            raise self.exceptions.ExecutionDoesNotExist({"Error": {"Code": "ExecutionDoesNotExist"}}, "x")
        return {"executionArn": executionArn}


STANDARD_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:minutes"
BURST_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:burst-minutes"


def _two_machine_tick(sfn: _TwoMachines) -> Tick:
    settings = SETTINGS.model_copy(
        update={
            "shard_count": 64,
            "load_sample_shards": 64,
            "max_shard_groups": 80,
            "group_slices": 2,
            "burst_triggers_per_poller": 13_044,
            "burst_workers_max": 0,
            "state_machine_arn": STANDARD_MACHINE,
            "burst_state_machine_arn": BURST_MACHINE,
        }
    )
    store = _Store(settings, {(Lane.FAR, M): 600_000})
    return Tick(settings, sfn, store, None, RecordingMetrics())  # type: ignore[arg-type]


def test_a_burst_minute_runs_on_the_burst_machine_and_the_others_on_the_single_map() -> None:
    sfn = _TwoMachines()
    _two_machine_tick(sfn).start_minutes(M - timedelta(minutes=2) + timedelta(seconds=2))
    assert sfn.machine_of == {
        "m-20261201T1158": STANDARD_MACHINE,
        "m-20261201T1159": STANDARD_MACHINE,
        "m-20261201T1200": BURST_MACHINE,
    }
    # Each minute was looked for on both machines first
    assert sfn.described == [
        f"arn:aws:states:us-east-1:123456789012:execution:{machine}:m-20261201T{minute}"
        for minute in ("1158", "1159", "1200")
        for machine in ("minutes", "burst-minutes")
    ]


def test_a_minute_started_on_one_machine_is_never_started_on_the_other() -> None:
    # Given the burst minute already started on the single Map (an earlier tick saw fewer groups)
    sfn = _TwoMachines({"arn:aws:states:us-east-1:123456789012:execution:minutes:m-20261201T1200"})
    started = _two_machine_tick(sfn).start_minutes(M - timedelta(minutes=1) + timedelta(seconds=2))
    # Then this tick does not start it again on the burst machine (only its own and the next)
    assert started == ["m-20261201T1159", "m-20261201T1201"]
    assert sfn.machine_of == {"m-20261201T1159": STANDARD_MACHINE, "m-20261201T1201": STANDARD_MACHINE}


def test_near_slots_the_ledger_forecasts_for_a_coming_minute_count() -> None:
    actuator = MemoryActuator()
    tick, _, _ = _tick({}, actuator)
    tick.store.ledger[M] = MinuteLoad(100_000, 100_000)  # type: ignore[union-attr]
    tick.start_minutes(M - timedelta(seconds=50))
    assert (
        actuator.burst_workers == need_for(100_000, CapacityProfile.from_settings(SETTINGS), M).burst_workers
    )


class _CountingBacklog(MemoryActuator):
    reads = 0

    def backlog(self) -> int:
        self.reads += 1
        return super().backlog()


def test_a_backlog_after_a_burst_holds_the_burst_workers_and_an_idle_tick_reads_no_queue() -> None:
    # Given a warm tick process that counted a 600,000-slot minute M, still draining after it
    remembered: dict[datetime, tuple[int, int]] = {}
    actuator = _CountingBacklog(queued=200_000)
    loads = {(Lane.FAR, M): 600_000}
    _tick(loads, actuator, remembered)[0].start_minutes(M - timedelta(seconds=58))
    # When the tick after the minute runs, the queues still hold 200,000 messages: held
    _tick({}, actuator, remembered)[0].start_minutes(M + timedelta(minutes=1, seconds=2))
    assert (
        actuator.burst_workers == need_for(200_000, CapacityProfile.from_settings(SETTINGS), M).burst_workers
    )
    # When they are drained: back to standing
    actuator.queued = 0
    _tick({}, actuator, remembered)[0].start_minutes(M + timedelta(minutes=2, seconds=2))
    assert actuator.burst_workers == 0
    reads = actuator.reads
    # An idle process (nothing counted in the last minutes) never reads the queues' depth
    idle = _CountingBacklog()
    _tick({}, idle)[0].start_minutes(M + timedelta(minutes=30))
    assert idle.reads == 0 and reads == 3


def test_a_failing_actuator_never_stops_the_minutes() -> None:
    class Broken(MemoryActuator):
        def apply(self, decision: Any) -> list[str]:
            raise RuntimeError("ECS is unavailable")

    tick, _, metrics = _tick({(Lane.FAR, M): 600_000}, Broken())
    assert tick.start_minutes(M - timedelta(minutes=2)) == [
        "m-20261201T1158",
        "m-20261201T1159",
        "m-20261201T1200",
    ]
    assert "BurstWorkersDesired" not in metrics.values


def test_no_actuator_no_scaling() -> None:
    tick, _, metrics = _tick({(Lane.FAR, M): 600_000}, None)
    tick.start_minutes(M - timedelta(minutes=2))
    assert tick.sight(M, {}) is None and not metrics.values


# --------------------------------------------------------------------------- the AWS actuator


def _function_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return None\n")
    return buffer.getvalue()


class _StubEcs:
    """The burst service as ECS answers DescribeServices and UpdateService (desired count only)."""

    cluster = "arn:aws:ecs:us-east-1:123456789012:cluster/workers"
    service = "arn:aws:ecs:us-east-1:123456789012:service/workers/burst"

    def __init__(self) -> None:
        self.desired = 0
        self.updates: list[dict[str, Any]] = []

    def describe_services(self, *, cluster: str, services: list[str]) -> dict[str, Any]:
        assert (cluster, services) == (self.cluster, [self.service])
        return {"services": [{"serviceArn": self.service, "desiredCount": self.desired}], "failures": []}

    def update_service(self, *, cluster: str, service: str, desiredCount: int) -> dict[str, Any]:
        assert (cluster, service) == (self.cluster, self.service)
        self.updates.append({"desiredCount": desiredCount})
        self.desired = desiredCount
        return {"service": {"serviceArn": service, "desiredCount": desiredCount}}


@pytest.fixture
def deployment(aws: None) -> Any:
    if True:
        iam = boto3.client("iam", region_name="us-east-1")
        role = iam.create_role(
            RoleName="worker",
            AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
        )["Role"]["Arn"]
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue = sqs.create_queue(QueueName="short.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        lam = boto3.client("lambda", region_name="us-east-1")
        lam.create_function(
            FunctionName="worker",
            Runtime="python3.12",
            Role=role,
            Handler="handler.handler",
            Code={"ZipFile": _function_zip()},
        )
        mapping = lam.create_event_source_mapping(
            EventSourceArn=arn, FunctionName="worker", BatchSize=10, ScalingConfig={"MaximumConcurrency": 400}
        )["UUID"]
        # ECS through a stub: moto's ECS backend takes seconds to start, and the calls are two.
        ecs = _StubEcs()
        cluster, service = ecs.cluster, ecs.service
        settings = Settings(
            short_queue_urls=[queue],
            worker_event_source_mappings=[mapping],
            burst_service=service,
            burst_cluster=cluster,
            burst_workers_max=300,
        )
        yield settings, lam, ecs, sqs, mapping


def test_the_aws_actuator_applies_a_decision_and_reads_the_backlog(deployment: Any) -> None:
    settings, lam, ecs, sqs, mapping = deployment
    actuator = AwsActuator(settings, lam, ecs, sqs)
    sqs.send_message(
        QueueUrl=settings.short_queue_urls[0], MessageBody="x", MessageGroupId="g", MessageDeduplicationId="1"
    )
    assert actuator.backlog() == 1

    profile = CapacityProfile.from_settings(settings)
    up = plan_capacity(M - timedelta(minutes=2), {M: 2_000_000}, 0, profile)
    assert actuator.apply(up) == [
        f"event source {mapping} MaximumConcurrency 400 -> {up.max_concurrency}",
        f"burst service desired tasks 0 -> {up.burst_workers}",
    ]
    assert lam.get_event_source_mapping(UUID=mapping)["ScalingConfig"]["MaximumConcurrency"] == 644
    assert ecs.desired == up.burst_workers == 300
    # The same decision again changes nothing
    assert actuator.apply(up) == []
    assert ecs.updates == [{"desiredCount": 300}]
    # Scaling back
    down = plan_capacity(M + timedelta(minutes=1), {M: 2_000_000}, 0, profile)
    assert len(actuator.apply(down)) == 2
    assert lam.get_event_source_mapping(UUID=mapping)["ScalingConfig"]["MaximumConcurrency"] == 400
    assert ecs.desired == 0
