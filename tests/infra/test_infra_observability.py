"""Alarms reach an encrypted topic; the dashboard shows what an operator needs first."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from cdk_helpers import Synth, alarmed_metrics, emitted_metrics, join_parts

from punctual.delivery.notifications.events import Event, EventPublisher
from punctual.dispatch.ecs_lane import EcsLaneReadiness, MemoryScalableTarget
from punctual.execution.worker_service import EmfMetrics
from punctual.runtime.emf import EmfBuffer
from punctual.store.memory import MemoryStore


def _alarms(synth: Synth) -> dict[str, dict[str, Any]]:
    """The app's alarms, by logical id (scaling alarms excluded)."""
    topic = synth.logical_id(synth.stack.observability.topic)
    return {
        logical_id: alarm["Properties"]
        for logical_id, alarm in synth.of_type("AWS::CloudWatch::Alarm").items()
        if {"Ref": topic} in alarm["Properties"].get("AlarmActions", [])
    }


def _metric_names(alarm: dict[str, Any]) -> set[str]:
    if "MetricName" in alarm:
        return {alarm["MetricName"]}
    return {m["MetricStat"]["Metric"]["MetricName"] for m in alarm["Metrics"] if "MetricStat" in m}


def test_every_dead_letter_queue_alarms_on_its_first_message(any_synth: Synth) -> None:
    dlqs = {f"<{any_synth.logical_id(q)}.QueueName>" for q in any_synth.stack.queues.dead_letter}
    alarmed = {
        join_parts(alarm["Dimensions"][0]["Value"])
        for alarm in _alarms(any_synth).values()
        if alarm.get("MetricName") == "ApproximateNumberOfMessagesVisible"
        and alarm["Threshold"] == 1
        and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    }

    assert alarmed == dlqs


def test_fire_delay_p99_alarm_at_ten_seconds(default_synth: Synth) -> None:
    (alarm,) = [a for a in _alarms(default_synth).values() if _metric_names(a) == {"FireDelayMs"}]
    (query,) = alarm["Metrics"]
    stat = query["MetricStat"]

    assert stat["Metric"]["Namespace"] == "Punctual"
    assert stat["Stat"] == "p99"
    assert stat["Metric"]["Dimensions"] == [{"Name": "service", "Value": "punctual"}]  # Powertools' dimension
    assert alarm["Threshold"] == 10_000
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"


def test_dispatch_alarms_cover_poller_tick_and_missing_minutes(default_synth: Synth) -> None:
    alarms = _alarms(default_synth).values()
    poller = default_synth.logical_id(default_synth.stack.dispatch.poller.function)
    tick = default_synth.logical_id(default_synth.stack.dispatch.tick.function)

    auditor = default_synth.logical_id(default_synth.stack.auditor.handler.function)
    errors = {join_parts(a["Dimensions"][0]["Value"]) for a in alarms if a.get("MetricName") == "Errors"}
    assert errors == {f"<{tick}>", f"<{auditor}>"}  # (the auditor's: tests/infra/test_infra_auditor.py)
    # One alarm for both poller functions: the standard and the lean one, summed.
    assert default_synth.stack.dispatch.lean_poller is not None
    lean = default_synth.logical_id(default_synth.stack.dispatch.lean_poller.function)
    (pollers,) = [a for a in alarms if "Metrics" in a and _metric_names(a) == {"Errors"}]
    summed = {
        join_parts(m["MetricStat"]["Metric"]["Dimensions"][0]["Value"])
        for m in pollers["Metrics"]
        if "MetricStat" in m
    }
    assert summed == {f"<{poller}>", f"<{lean}>"}
    (no_minute,) = [a for a in alarms if a.get("MetricName") == "ExecutionsStarted"]
    assert no_minute["ComparisonOperator"] == "LessThanThreshold"
    assert no_minute["TreatMissingData"] == "breaching"  # silence means no poller at all
    assert {"ExecutionsFailed", "ExecutionsTimedOut"} in [_metric_names(a) for a in alarms]


def test_pollers_that_are_not_invoked_at_all_raise_an_alarm(default_synth: Synth) -> None:
    # QA24: a minute whose pollers cannot be invoked (throttled past their reserved concurrency,
    # the invoke refused) succeeds: GroupFailed catches each group so the others run
    # (test_state_machine_runs.py), and a poller never invoked counts no Lambda error. Nothing was
    # released and no alarm heard it.
    dispatch = default_synth.stack.dispatch
    assert dispatch.lean_poller is not None
    pollers = {f"<{default_synth.logical_id(f.function)}>" for f in (dispatch.poller, dispatch.lean_poller)}
    (silent,) = [
        a for a in _alarms(default_synth).values() if "Metrics" in a and _metric_names(a) == {"Invocations"}
    ]
    stats = [m["MetricStat"] for m in silent["Metrics"] if "MetricStat" in m]

    assert {join_parts(s["Metric"]["Dimensions"][0]["Value"]) for s in stats} == pollers
    assert {(s["Metric"]["Namespace"], s["Stat"], s["Period"]) for s in stats} == {("AWS/Lambda", "Sum", 300)}
    assert [m["Expression"] for m in silent["Metrics"] if "Expression" in m] == [
        "FILL(standard, 0) + FILL(lean, 0)"
    ]
    assert (silent["Threshold"], silent["ComparisonOperator"]) == (1, "LessThanThreshold")
    assert silent["TreatMissingData"] == "breaching"  # no invocation is no data


def test_a_tick_that_is_not_invoked_at_all_raises_an_alarm(any_synth: Synth) -> None:
    # QA24: a tick whose rule is disabled (or whose invocations are throttled) neither errs nor
    # leaves a minute unstarted (each minute's pollers relay the next one), so no alarm heard it
    # stop while nothing sized the pollers, scaled for bursts or readied the ECS lane.
    tick = {"Ref": any_synth.logical_id(any_synth.stack.dispatch.tick.function)}
    (silent,) = [
        a
        for a in _alarms(any_synth).values()
        if a.get("MetricName") == "Invocations"
        and a["Dimensions"] == [{"Name": "FunctionName", "Value": tick}]
    ]

    assert (silent["Namespace"], silent["Statistic"], silent["Period"]) == ("AWS/Lambda", "Sum", 300)
    assert (silent["Threshold"], silent["ComparisonOperator"]) == (1, "LessThanThreshold")
    assert silent["TreatMissingData"] == "breaching"  # no invocation is no data


def _state_machine_metrics(synth: Synth, alarm: dict[str, Any]) -> set[tuple[str, str]]:
    """(metric name, state machine logical id) of each AWS/States metric the alarm reads."""
    stats = [m["MetricStat"] for m in alarm.get("Metrics", []) if "MetricStat" in m]
    if "MetricName" in alarm:
        stats.append({"Metric": alarm})
    return {
        (s["Metric"]["MetricName"], join_parts(s["Metric"]["Dimensions"][0]["Value"]))
        for s in stats
        if s["Metric"]["Namespace"] == "AWS/States"
    }


def test_a_minute_execution_that_timed_out_alarms_like_a_failed_one(any_synth: Synth) -> None:
    # QA24: the alarm said "failed, timed out or was aborted" but read ExecutionsFailed alone; a
    # minute that ran into the machine's timeout (600 s) counts in ExecutionsTimedOut only.
    (alarm,) = [a for key, a in _alarms(any_synth).items() if "MinuteExecutionFailed" in key]
    machines = {f"<{any_synth.logical_id(m)}>" for m in any_synth.stack.dispatch.state_machines}

    assert _state_machine_metrics(any_synth, alarm) == {
        (name, machine) for name in ("ExecutionsFailed", "ExecutionsTimedOut") for machine in machines
    }
    assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_no_minute_started_counts_the_minutes_of_the_burst_machine(burst_synth: Synth) -> None:
    # QA24: a minute of more than 40 groups starts on the burst machine only; the alarm read the
    # every-minute machine alone, so five minutes of sustained burst load paged "no poller is
    # running" while every minute ran.
    (alarm,) = [a for key, a in _alarms(burst_synth).items() if "NoMinuteStarted" in key]
    machines = {f"<{burst_synth.logical_id(m)}>" for m in burst_synth.stack.dispatch.state_machines}

    assert len(machines) == 2
    assert _state_machine_metrics(burst_synth, alarm) == {("ExecutionsStarted", m) for m in machines}
    assert {m.get("Expression") for m in alarm["Metrics"]} == {None, "FILL(started0, 0) + FILL(started1, 0)"}
    assert alarm["ComparisonOperator"] == "LessThanThreshold" and alarm["TreatMissingData"] == "breaching"


def test_oldest_message_age_alarm_per_work_queue(any_synth: Synth) -> None:
    queues = {f"<{any_synth.logical_id(q)}.QueueName>" for q in any_synth.stack.queues.work_queues}
    alarmed = {
        join_parts(a["Dimensions"][0]["Value"])
        for a in _alarms(any_synth).values()
        if a.get("MetricName") == "ApproximateAgeOfOldestMessage"
    }

    assert alarmed == queues


def test_table_throttle_alarms_include_key_range_throttling(default_synth: Synth) -> None:
    names = [_metric_names(a) for a in _alarms(default_synth).values() if "Metrics" in a]

    assert {"ReadThrottleEvents", "WriteThrottleEvents"} in names
    assert {"ReadKeyRangeThroughputThrottleEvents", "WriteKeyRangeThroughputThrottleEvents"} in names


def test_alarms_notify_on_alarm_and_on_recovery(any_synth: Synth) -> None:
    topic = {"Ref": any_synth.logical_id(any_synth.stack.observability.topic)}
    orphans = any_synth.logical_id(any_synth.stack.auditor.orphans_alarm)  # (test_infra_auditor.py)
    for logical_id, alarm in _alarms(any_synth).items():
        assert alarm.get("OKActions") == ([topic] if logical_id != orphans else None)
        assert alarm["AlarmDescription"]


def test_alarm_topic_is_encrypted_tls_only_and_subscribed_from_context(custom_synth: Synth) -> None:
    (topic,) = custom_synth.of_type("AWS::SNS::Topic").values()
    key = custom_synth.logical_id(custom_synth.stack.observability.topic_key)
    assert topic["Properties"]["KmsMasterKeyId"] == {"Fn::GetAtt": [key, "Arn"]}

    (policy,) = custom_synth.of_type("AWS::SNS::TopicPolicy").values()
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    )
    # CloudWatch may use the key, or alarms could not publish to the encrypted topic.
    key_statements = custom_synth.resources[key]["Properties"]["KeyPolicy"]["Statement"]
    assert any(s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"} for s in key_statements)

    emails = {
        s["Properties"]["Endpoint"]
        for s in custom_synth.of_type("AWS::SNS::Subscription").values()
        if s["Properties"]["Protocol"] == "email"
    }
    assert emails == {"ops@example.com", "oncall@example.com"}


def test_dashboard_shows_the_scheduler_metrics(default_synth: Synth) -> None:
    (dashboard,) = default_synth.of_type("AWS::CloudWatch::Dashboard").values()
    body = join_parts(dashboard["Properties"]["DashboardBody"])

    assert '"service","punctual-ecs-worker"' in body  # the ECS lane's executions count too
    for needle in (
        "FireDelayMs",
        "p50",
        "p99",
        "SlotsReleased",
        "ExecutionsSucceeded",
        "ExecutionsFailed",
        "Retries",
        "SlotsMissed",
        "ApproximateAgeOfOldestMessage",
        "ApproximateNumberOfMessagesVisible",
        "WriteKeyRangeThroughputThrottleEvents",
        "Duration",
        "Errors",
        "ExecutionsStarted",
    ):
        assert needle in body, needle


def test_the_dashboard_shows_every_alarm_and_every_minute_machine(burst_synth: Synth) -> None:
    # QA24: the alarm widget left out the chain auditor's alarms (ChainsBroken: a job that had
    # stopped), "Minute executions" the burst machine's minutes and timed-out ones, and the rate
    # budget's overruns the ECS workers' (after() children they dispatch).
    (dashboard,) = burst_synth.of_type("AWS::CloudWatch::Dashboard").values()
    body = json.loads(join_parts(dashboard["Properties"]["DashboardBody"]))
    widgets = {w["properties"].get("title"): w["properties"] for w in body["widgets"]}

    shown = set(widgets["Alarms"]["alarms"])
    for alarm in [*burst_synth.stack.auditor.alarms, *burst_synth.stack.observability.alarms]:
        assert f"<{burst_synth.logical_id(alarm)}.Arn>" in shown, alarm.node.id
    minutes = {
        (line[1], line[3]) for line in widgets["Minute executions"]["metrics"] if line[0] == "AWS/States"
    }
    machines = [f"<{burst_synth.logical_id(m)}>" for m in burst_synth.stack.dispatch.state_machines]
    assert minutes == {
        (name, machine)
        for name in ("ExecutionsStarted", "ExecutionsFailed", "ExecutionsTimedOut")
        for machine in machines
    }
    overruns = json.dumps(widgets[next(t for t in widgets if t and t.startswith("Burst smoothing"))])
    assert '"punctual-ecs-worker"' in overruns and '"RateBudgetOverruns"' in overruns
    # A tenant's runs held at its cap of runs in flight: the Lambda workers' and the ECS workers'
    held = json.dumps(widgets[next(t for t in widgets if t and t.startswith("Runs held at their tenant"))])
    assert '"punctual-ecs-worker"' in held and '"RunsHeldAtTenantCap"' in held


def test_a_forged_dispatch_message_on_either_lane_raises_an_alarm(default_synth: Synth) -> None:
    (alarm,) = [
        a for a in _alarms(default_synth).values() if "ForgedMessages" in json.dumps(a.get("Metrics", []))
    ]
    names = {m["MetricStat"]["Metric"]["MetricName"] for m in alarm["Metrics"] if "MetricStat" in m}
    services = {
        d["Value"]
        for m in alarm["Metrics"]
        if "MetricStat" in m
        for d in m["MetricStat"]["Metric"]["Dimensions"]
    }
    assert names == {"ForgedMessages"} and len(services) == 2  # the Lambda worker and the ECS worker
    assert alarm["Threshold"] == 1 and alarm["AlarmActions"]


def test_an_undeliverable_dead_letter_or_alert_alarms(default_synth: Synth) -> None:
    # QA23: both were counted (DeadLettersFailed by both workers, AlertsUndelivered by the poller)
    # with nothing to alarm on; the first one alarms now
    alarms = _alarms(default_synth).values()
    for name in ("DeadLettersFailed", "AlertsUndelivered"):
        (alarm,) = [a for a in alarms if _metric_names(a) == {name}]
        assert alarm["Threshold"] == 1, name
        assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold", name


class _RefusingBus:
    """An events sink whose every PutEvents fails (a throttle past the quota, a changed policy)."""

    def put(self, events: object) -> int:
        raise RuntimeError("ThrottlingException")


_emitted, _alarmed = emitted_metrics, alarmed_metrics


def test_events_dropped_from_the_bus_raise_an_alarm_on_either_lane(
    default_synth: Synth, capsys: pytest.CaptureFixture[str]
) -> None:
    # QA24: a PutEvents that still failed after its retry dropped the events, counted EventsFailed
    # and nothing alarmed: rules routing failures off the bus went quiet unheard.
    worker = default_synth.resources[default_synth.logical_id(default_synth.stack.workers.worker.function)]
    lambda_env = worker["Properties"]["Environment"]["Variables"]
    lambda_docs: list[dict[str, Any]] = []
    lambda_sink = EmfBuffer(
        lambda_env["POWERTOOLS_METRICS_NAMESPACE"],
        lambda_env["POWERTOOLS_SERVICE_NAME"],
        write=lambda line: lambda_docs.append(json.loads(line)),
    )
    ecs_sink = EmfMetrics(lambda_env["POWERTOOLS_METRICS_NAMESPACE"])  # as the ECS worker's main() makes it
    event = Event("Execution Status Change", {"status": "FAILED"}, datetime.now(UTC))
    for sink in (lambda_sink, ecs_sink):
        EventPublisher(_RefusingBus(), sink).publish([event])
        sink.flush()
    ecs_docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    (alarm,) = [a for a in _alarms(default_synth).values() if _metric_names(a) == {"EventsFailed"}]
    assert _emitted(lambda_docs) | _emitted(ecs_docs) == _alarmed(alarm)
    assert len(_alarmed(alarm)) == 2  # the two lanes' service dimensions
    assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["TreatMissingData"] == "notBreaching"  # written only when some were dropped


class _RefusedTarget(MemoryScalableTarget):
    """The ECS worker service's scalable target, as Application Auto Scaling refuses it."""

    def min_capacity(self) -> int | None:
        raise RuntimeError("AccessDeniedException: application-autoscaling:DescribeScalableTargets")


def test_a_tick_that_cannot_ready_the_ecs_lane_raises_an_alarm(any_synth: Synth) -> None:
    # QA24: the tick logged and counted EcsLaneErrors and nothing alarmed: with the minimum never
    # raised, every ECS-lane slot started two to three minutes late, unheard.
    tick = any_synth.resources[any_synth.logical_id(any_synth.stack.dispatch.tick.function)]
    env = tick["Properties"]["Environment"]["Variables"]
    assert "PUNCTUAL_ECS_SERVICE_RESOURCE_ID" in env  # the tick readies the lane in every shape
    documents: list[dict[str, Any]] = []
    sink = EmfBuffer(
        env["POWERTOOLS_METRICS_NAMESPACE"],
        env["POWERTOOLS_SERVICE_NAME"],
        write=lambda line: documents.append(json.loads(line)),
    )
    minimum, ready = int(env["PUNCTUAL_ECS_MIN_TASKS"]), int(env["PUNCTUAL_ECS_READY_TASKS"])
    readiness = EcsLaneReadiness(MemoryStore(), _RefusedTarget(), minimum, ready, 150, sink)
    assert readiness.on_tick(datetime(2027, 1, 1, tzinfo=UTC)) is None  # logged, left to the next tick
    sink.flush()

    (alarm,) = [a for a in _alarms(any_synth).values() if _metric_names(a) == {"EcsLaneErrors"}]
    assert _emitted(documents) == _alarmed(alarm)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert alarm["EvaluationPeriods"] == 3 and alarm["TreatMissingData"] == "notBreaching"


def test_slots_not_run_for_a_missing_calendar_raise_an_alarm_on_either_lane(default_synth: Synth) -> None:
    # QA24: a job whose exclusion calendar is gone has every slot recorded MISSED, not run (the
    # poller's release, a worker's after() child): it has stopped, and only a counter said so.
    (alarm,) = [a for a in _alarms(default_synth).values() if _metric_names(a) == {"SlotsCalendarMissing"}]

    assert _alarmed(alarm) == {
        ("Punctual", "SlotsCalendarMissing", frozenset({("service", service)}))
        for service in ("punctual", "punctual-ecs-worker")  # the pollers and Lambda workers; ECS workers
    }
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert alarm["TreatMissingData"] == "notBreaching"
