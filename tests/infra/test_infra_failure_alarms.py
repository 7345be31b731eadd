"""QA24: failures the runtime counted and no alarm heard now alarm (components/failure_alarms.py).

Each test drives the code that writes the count where it is cheap to, through the sinks each
service writes with (the Lambda functions' EMF buffer, with their synthesised environment, and
the ECS worker's), and checks the synthesised alarm reads exactly those metrics.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from audit_harness import AuditRig
from cdk_helpers import Emitted, Synth, alarmed_metrics, emitted_metrics, join_parts

from factories import job, spec
from punctual.api.problems import _busy, _internal, _misconfigured, _unanswered, failed_here
from punctual.delivery.notifications import EventCopies
from punctual.delivery.notifications.events import Event
from punctual.dispatch.budget_reservations import SharedBudgetLedger
from punctual.execution.worker_service import EmfMetrics
from punctual.runtime.clock import ManualClock
from punctual.runtime.emf import EmfBuffer
from punctual.security.boundary import Refusal
from punctual.store.base import LayoutMismatchError
from punctual.store.memory import MemoryStore


def _alarms(synth: Synth) -> dict[str, dict[str, Any]]:
    """The alarms to the topic, by logical id."""
    topic = {"Ref": synth.logical_id(synth.stack.observability.topic)}
    return {
        logical_id: alarm["Properties"]
        for logical_id, alarm in synth.of_type("AWS::CloudWatch::Alarm").items()
        if topic in alarm["Properties"].get("AlarmActions", [])
    }


def _alarm(synth: Synth, name: str) -> dict[str, Any]:
    (alarm,) = [a for key, a in _alarms(synth).items() if key.startswith(f"Observability{name}")]
    return alarm


_alarmed = alarmed_metrics


def _lambda_metrics(alarm: dict[str, Any]) -> set[tuple[str, str]]:
    """(metric name, function) of each AWS/Lambda metric ``alarm`` reads."""
    stats = [m["MetricStat"] for m in alarm["Metrics"] if "MetricStat" in m]
    return {
        (s["Metric"]["MetricName"], join_parts(s["Metric"]["Dimensions"][0]["Value"]))
        for s in stats
        if s["Metric"]["Namespace"] == "AWS/Lambda" and s["Stat"] == "Sum"
    }


def _emitted(lines: list[str]) -> Emitted:
    return emitted_metrics([json.loads(line) for line in lines])


def _both_lanes(synth: Synth, capsys: pytest.CaptureFixture[str], drive: Callable[[Any], None]) -> Emitted:
    """What ``drive(sink)`` writes through a Lambda function's sink (the worker's environment:
    the pollers' is the same) and through the ECS worker's."""
    worker = synth.resources[synth.logical_id(synth.stack.workers.worker.function)]
    env = worker["Properties"]["Environment"]["Variables"]
    lines: list[str] = []
    lambda_sink = EmfBuffer(
        env["POWERTOOLS_METRICS_NAMESPACE"], env["POWERTOOLS_SERVICE_NAME"], write=lines.append
    )
    ecs_sink = EmfMetrics(env["POWERTOOLS_METRICS_NAMESPACE"])  # as the ECS worker's main() makes it
    capsys.readouterr()
    for sink in (lambda_sink, ecs_sink):
        drive(sink)
        sink.flush()
    return _emitted(lines + capsys.readouterr().out.splitlines())


def _five_minutes_any(alarm: dict[str, Any]) -> None:
    periods = {m["MetricStat"]["Period"] for m in alarm["Metrics"] if "MetricStat" in m}
    assert periods == {300}
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert (alarm["EvaluationPeriods"], alarm["TreatMissingData"]) == (1, "notBreaching")
    assert alarm["OKActions"] and alarm["AlarmDescription"]


class _Unreachable:
    """A client factory whose every client fails (the tenant's role cannot be assumed)."""

    default_role_arn = ""

    def __call__(self, *args: object, **kwargs: object) -> Any:
        raise RuntimeError("AccessDenied: sts:AssumeRole")


class _Refusing:
    """A tenant boundary that refuses every bus."""

    def refusal(self, callee: object) -> Refusal:
        return Refusal("events_bus", "the scheduler's own bus")


def test_event_copies_failed_or_refused_raise_an_alarm(
    default_synth: Synth, capsys: pytest.CaptureFixture[str]
) -> None:
    # QA24: a tenant's copy of its events that failed or was refused was counted, never alarmed
    target = {"type": "eventbridge", "event_bus_arn": "arn:aws:events:us-east-1:111122223333:event-bus/t"}
    owner = job("nightly", tenant="AROATENANTEXAMPLE0001", events_bus=target)
    event = Event("Execution Status Change", {"status": "FAILED"}, datetime.now(UTC))

    def drive(sink: Any) -> None:
        for boundary in (_Refusing(), None):
            copies = EventCopies(_Unreachable(), boundary or _Passing(), sink)  # type: ignore[arg-type]
            copies.add(owner, event)
            copies.flush()

    emitted = _both_lanes(default_synth, capsys, drive)
    alarm = _alarm(default_synth, "EventCopiesNotDelivered")
    assert {name for _, name, _ in emitted} == {"EventCopiesFailed", "EventCopiesRefused"}
    assert emitted == _alarmed(alarm)
    _five_minutes_any(alarm)


class _Passing:
    def refusal(self, callee: object) -> None:
        return None


class _FailingReservations(MemoryStore):
    def budget_reservations(self, *args: object, **kwargs: object) -> Any:
        raise RuntimeError("ProvisionedThroughputExceededException")


def test_rate_budget_store_errors_raise_an_alarm(
    default_synth: Synth, capsys: pytest.CaptureFixture[str]
) -> None:
    # QA24: a budget placed by each process alone (the store failing) was counted, never alarmed
    due = datetime(2027, 1, 1, tzinfo=UTC)

    def drive(sink: Any) -> None:
        SharedBudgetLedger(_FailingReservations(), metrics=sink).place_shared("acme", "h", "j/s", 5, due, 10)

    emitted = _both_lanes(default_synth, capsys, drive)
    alarm = _alarm(default_synth, "RateBudgetStoreErrors")
    assert {name for _, name, _ in emitted} == {"RateBudgetStoreErrors"}
    assert emitted == _alarmed(alarm)
    _five_minutes_any(alarm)


@pytest.mark.parametrize("name", ["LeasesLost", "AlertsFailed", "ChildRecordsFailed"])
def test_worker_failure_counts_raise_an_alarm_on_either_lane(
    default_synth: Synth, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    # QA24: a lease lost (a run stopped, its target maybe called twice), an alert rule not
    # delivered, an after() child's unrun slot left without a record: counted, never alarmed
    emitted = _both_lanes(default_synth, capsys, lambda sink: sink.add(name, 1))
    alarm = _alarm(default_synth, name)
    assert emitted == _alarmed(alarm)
    assert len(emitted) == 2  # the Lambda functions' service and the ECS worker's
    _five_minutes_any(alarm)


def test_the_api_alarms_on_its_own_failures_not_on_busy(default_synth: Synth) -> None:
    # QA24: nothing alarmed on the API's failures; Api5xx lumps its 500s with the deliberate 503
    # "busy" (storage throttled or unreached), so the handler counts ApiFailures apart
    for response, failed in (
        (_internal(), True),
        (_misconfigured(LayoutMismatchError("shards")), True),
        (_busy("storage is throttling requests; retry shortly"), False),
        (_unanswered(RuntimeError("read timeout")), False),  # type: ignore[arg-type]
    ):
        assert failed_here(response.status_code, response.body) is failed, response.body
    api = default_synth.logical_id(default_synth.stack.api.handler.function)
    env = default_synth.resources[api]["Properties"]["Environment"]["Variables"]
    alarm = _alarm(default_synth, "ApiFailures")

    assert _alarmed(alarm) == {
        (
            env["POWERTOOLS_METRICS_NAMESPACE"],
            "ApiFailures",
            frozenset({("service", env["POWERTOOLS_SERVICE_NAME"])}),
        )
    }
    assert _lambda_metrics(alarm) == {("Errors", f"<{api}>")}  # a crash or time-out: never answered
    _five_minutes_any(alarm)


def test_a_throttled_poller_raises_an_alarm(default_synth: Synth) -> None:
    # QA24: one group whose poller cannot be invoked stops its jobs while the other groups run,
    # so NoPollerInvoked (no poller at all) never fires: the pollers' throttles alarm
    dispatch = default_synth.stack.dispatch
    assert dispatch.lean_poller is not None
    pollers = {f"<{default_synth.logical_id(f.function)}>" for f in (dispatch.poller, dispatch.lean_poller)}
    alarm = _alarm(default_synth, "PollersThrottled")

    assert _lambda_metrics(alarm) == {("Throttles", poller) for poller in pollers}
    _five_minutes_any(alarm)


def test_a_throttled_api_raises_an_alarm(any_synth: Synth) -> None:
    # The api function's reserved concurrency full: API Gateway answers 500 without the handler
    # running, so ApiFailures (the handler's count and the function's Errors) never hears it
    api = f"<{any_synth.logical_id(any_synth.stack.api.handler.function)}>"
    alarm = _alarm(any_synth, "ApiThrottled")

    assert _lambda_metrics(alarm) == {("Throttles", api)}
    _five_minutes_any(alarm)


def test_a_job_deferred_at_every_audit_pass_raises_an_alarm(any_synth: Synth, t0: datetime) -> None:
    # QA24: a job whose shards' pollers stay behind is deferred at every pass, never judged, and
    # ChainAuditDeferred was counted with no alarm; one deferral (a lagging minute) is not alarmed
    auditor = any_synth.logical_id(any_synth.stack.auditor.handler.function)
    env = any_synth.resources[auditor]["Properties"]["Environment"]["Variables"]
    lines: list[str] = []
    rig = AuditRig(MemoryStore(), ManualClock(t0))
    rig.jobs.register("default", spec("rate(1 minute)"), job_id="job")
    rig.run(2)
    rig.auditor.metrics = sink = EmfBuffer(
        env["POWERTOOLS_METRICS_NAMESPACE"], env["POWERTOOLS_SERVICE_NAME"], write=lines.append
    )
    for _ in range(6):  # no poller runs: the chain waits in buckets not drained yet
        rig.clock.advance(60)
        rig.audit()
    sink.flush()
    (alarm,) = [a for key, a in _alarms(any_synth).items() if "ChainAuditDeferred" in key]
    (query,) = alarm["Metrics"]

    assert ("Punctual", "ChainAuditDeferred", frozenset({("service", "punctual")})) in _emitted(lines)
    assert _alarmed(alarm) == {e for e in _emitted(lines) if e[1] == "ChainAuditDeferred"}
    period = any_synth.stack.auditor.deferred_alarm_period_minutes
    assert (query["MetricStat"]["Period"], query["MetricStat"]["Stat"]) == (period * 60, "Sum")
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (2, 2)  # once is a lagging minute
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert alarm["TreatMissingData"] == "notBreaching"


def test_a_late_start_raises_an_alarm_on_either_lane(
    default_synth: Synth, capsys: pytest.CaptureFixture[str], t0: datetime
) -> None:
    # QA25: FireDelayP99 reads the pollers' release; a slot released on time that waits for a
    # worker (a lane full of runs that hang to their timeout) raised nothing.
    from execution_harness import Rig

    rig = Rig(MemoryStore(), ManualClock(t0))
    late = rig.add_job(schedule="rate(1 hour)")
    rig.clock.advance(12)
    rig.worker().claim(rig.message(late, t0))  # started 12 s after its instant
    [(name, delays)] = [(n, v) for n, v in rig.metrics.values.items() if n == "StartDelayMs"]
    assert delays == [12_000.0]
    emitted = _both_lanes(default_synth, capsys, lambda sink: sink.add(name, 12_000.0, "Milliseconds"))
    alarm = _alarm(default_synth, "StartDelayP99")
    assert emitted == _alarmed(alarm) and len(emitted) == 2
    stats = {m["MetricStat"]["Stat"] for m in alarm["Metrics"] if "MetricStat" in m}
    [expression] = [m["Expression"] for m in alarm["Metrics"] if "Expression" in m]
    assert stats == {"p99"} and expression.startswith("MAX([")  # the later lane's p99
    assert alarm["Threshold"] == 10_000 and alarm["ComparisonOperator"] == "GreaterThanThreshold"
