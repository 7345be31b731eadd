"""Every minute gets its pollers whatever happens to one tick (issue 30, point 2).

A fake Step Functions keeps executions by name (Standard: unique per state machine), so a minute
"has pollers" exactly when its execution exists. Ticks throttled, late, lost and with skewed
clocks are played over simulated time, with and without the second path (group 0's pollers
starting the next minute, :func:`punctual.runtime.composition.relay_next`, here through
:meth:`Tick.start_minutes` with the next minute, as it does).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from punctual.dispatch.burst_sight import execution_name
from punctual.dispatch.scaling import MemoryActuator
from punctual.dispatch.tick import Tick
from punctual.runtime.observability import RecordingMetrics
from punctual.runtime.settings import Settings

MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:minutes"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SETTINGS = Settings(state_machine_arn=MACHINE, shard_count=16, near_shard_count=4, load_sample_shards=16)


class Sfn:
    """Executions by name; StartExecution of a name in ``throttled`` answers ThrottlingException."""

    exceptions = boto3.client("stepfunctions", region_name="us-east-1").exceptions

    def __init__(self) -> None:
        self.executions: dict[str, dict[str, Any]] = {}
        self.throttled: set[str] = set()
        self.starts = 0

    def start_execution(self, stateMachineArn: str, name: str, input: str) -> dict[str, str]:
        self.starts += 1
        if name in self.throttled:
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "StartExecution"
            )
        if name in self.executions:
            raise self.exceptions.ExecutionAlreadyExists({"Error": {"Code": "ExecutionAlreadyExists"}}, "x")
        self.executions[name] = {"machine": stateMachineArn, "input": input}
        return {"executionArn": f"{stateMachineArn}:{name}"}

    def describe_execution(self, executionArn: str) -> dict[str, str]:
        name = executionArn.rsplit(":", 1)[-1]
        if name not in self.executions:
            raise self.exceptions.ExecutionDoesNotExist({"Error": {"Code": "ExecutionDoesNotExist"}}, "x")
        return {"executionArn": executionArn, "status": "RUNNING"}


class Store:
    """An idle deployment: nothing due anywhere, every watermark current."""

    def count_timers(self, *args: object) -> int:
        return 0

    def get_watermarks(self, *args: object) -> dict[int, datetime]:
        return {}


def tick(sfn: Sfn, actuator: MemoryActuator | None = None, metrics: RecordingMetrics | None = None) -> Tick:
    return Tick(SETTINGS, sfn, Store(), actuator, metrics)  # type: ignore[arg-type]


def minutes(start: datetime, count: int) -> list[str]:
    return [execution_name(start + timedelta(minutes=k)) for k in range(count)]


def test_a_throttled_start_fails_its_minute_only_and_is_still_raised() -> None:
    # Given a tick a few seconds into 12:00 whose StartExecution of 12:01 is throttled
    sfn = Sfn()
    sfn.throttled = {execution_name(T0 + timedelta(minutes=1))}
    actuator, metrics = MemoryActuator(), RecordingMetrics()
    # When it runs, Then the error is raised (the alarm counts it, EventBridge retries the tick) ...
    with pytest.raises(ClientError):
        tick(sfn, actuator, metrics).start_minutes(T0 + timedelta(seconds=3))
    # ... but the other minutes started, and the scaling ran
    assert sorted(sfn.executions) == [execution_name(T0), execution_name(T0 + timedelta(minutes=2))]
    assert metrics.values["BurstWorkersDesired"] == [0]
    assert metrics.values["MinuteStartFailures"] == [1]
    # And the next tick starts the minute that was throttled
    sfn.throttled = set()
    tick(sfn).start_minutes(T0 + timedelta(minutes=1, seconds=2))
    assert execution_name(T0 + timedelta(minutes=1)) in sfn.executions


def test_a_tick_late_by_more_than_its_lookahead_starts_the_current_minute() -> None:
    # Given ticks that stopped at 12:00 and a tick three and a half minutes later
    sfn = Sfn()
    tick(sfn).start_minutes(T0 + timedelta(seconds=1))
    started = tick(sfn).start_minutes(T0 + timedelta(minutes=3, seconds=30))
    # Then that tick starts its own minute (late, but not never) and the coming ones
    assert started == minutes(T0 + timedelta(minutes=3), 3)


def test_a_minute_that_exists_is_not_planned_again() -> None:
    # Given every minute a tick would start already running
    sfn = Sfn()
    tick(sfn).start_minutes(T0 + timedelta(seconds=1))
    starts = sfn.starts

    class Counting(Store):
        reads = 0

        def count_timers(self, *args: object) -> int:
            Counting.reads += 1
            return 0

    # When the same tick runs again (a doubled EventBridge delivery)
    again = Tick(SETTINGS, sfn, Counting(), None)  # type: ignore[arg-type]
    assert again.start_minutes(T0 + timedelta(seconds=2)) == []
    # Then it only looked: no StartExecution, no read of the table
    assert sfn.starts == starts and Counting.reads == 0


def _play(ticks: list[datetime], relay: bool, until: datetime, lead_s: int = 10) -> Sfn:
    """Play ticks at ``ticks`` (the instants their clocks read); with ``relay``, each started
    minute's pollers start the next minute when they start (``lead_s`` before their minute)."""
    sfn = Sfn()
    events: list[tuple[datetime, str, Any]] = [(at, "tick", at) for at in ticks]
    while events:
        events.sort(key=lambda e: e[0])
        at, kind, what = events.pop(0)
        if at > until:
            break
        before = set(sfn.executions)
        if kind == "tick":
            tick(sfn).start_minutes(what)
        else:  # the pollers of ``what`` start: they make sure of the minute after theirs
            tick(sfn).start_minutes(at, minutes=[what + timedelta(minutes=1)])
        if relay:
            for name in set(sfn.executions) - before:
                minute = datetime.strptime(name, "m-%Y%m%dT%H%M").replace(tzinfo=UTC)
                events.append((max(at, minute - timedelta(seconds=lead_s)), "pollers", minute))
    return sfn


def test_skewed_and_lost_ticks_leave_a_minute_without_pollers_unless_pollers_relay() -> None:
    # Given an hour of ticks whose clocks are 35 s ahead or behind at random, a third of them lost,
    # and two runs of lost ticks in a row
    rng = random.Random(30)
    ticks = [
        T0 + timedelta(minutes=k, seconds=rng.choice((-35, 35)))
        for k in range(60)
        if rng.random() > 0.33 and k not in (20, 21, 22, 40, 41, 42)
    ]
    hour = minutes(T0 + timedelta(minutes=1), 58)
    # Then without the second path some minute has no execution at all ...
    alone = _play(ticks, relay=False, until=T0 + timedelta(minutes=60))
    assert set(hour) - set(alone.executions)
    # ... and with group 0's pollers starting the next minute, every minute has one
    relayed = _play(ticks, relay=True, until=T0 + timedelta(minutes=60))
    assert set(hour) <= set(relayed.executions)


def test_once_started_the_minutes_go_on_with_no_tick_at_all() -> None:
    # Given one tick, then none for an hour (the tick's rule disabled, its function broken)
    sfn = _play([T0 + timedelta(seconds=1)], relay=True, until=T0 + timedelta(minutes=60))
    # Then every minute of the hour was started by the pollers of the minute before it
    assert set(minutes(T0, 60)) <= set(sfn.executions)
