"""The dashboard: fire delay, slots and executions, queues, pollers, the table, workers and the
API, the alarms' states, and predictive scaling and smoothing (see
:mod:`punctual_cdk.components.observability` for what each metric is)."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from punctual_cdk import constants as c
from punctual_cdk.components.functions import PunctualFunction
from punctual_cdk.components.metrics import MINUTE, app_metric, both_lanes_sum
from punctual_cdk.components.queues import Queues
from punctual_cdk.config import PunctualConfig


class DashboardBuilder:
    """Builds the dashboard of one deployment into a scope (the Observability construct)."""

    def __init__(
        self,
        scope: Construct,
        config: PunctualConfig,
        lean_poller: PunctualFunction | None = None,
        burst_service: ecs.FargateService | None = None,
    ) -> None:
        self._scope = scope
        self._config = config
        self._lean_poller = lean_poller
        self._burst_service = burst_service

    def build(
        self,
        table: dynamodb.ITable,
        queues: Queues,
        poller: PunctualFunction,
        tick: PunctualFunction,
        worker: PunctualFunction,
        api: PunctualFunction,
        state_machines: list[sfn.StateMachine],
        alarms: list[cloudwatch.Alarm],
    ) -> cloudwatch.Dashboard:
        """The dashboard, in the scope it was given (construct id ``Dashboard``); ``state_machines``:
        the every-minute machine, then the burst one when there is one."""

        def graph(title: str, left: list[cloudwatch.IMetric], **kwargs: object) -> cloudwatch.GraphWidget:
            return cloudwatch.GraphWidget(title=title, left=left, width=8, height=6, **kwargs)  # type: ignore[arg-type]

        def per_queue(queue_list: list[sqs.Queue], metric: str) -> list[cloudwatch.IMetric]:
            return [q.metric(metric, period=MINUTE, statistic="Maximum", label=q.node.id) for q in queue_list]

        dashboard = cloudwatch.Dashboard(self._scope, "Dashboard", default_interval=cdk.Duration.hours(3))
        dashboard.add_widgets(
            graph(
                "Fire delay (ms)",
                [
                    app_metric(c.METRIC_FIRE_DELAY_MS, "p50", "p50"),
                    app_metric(c.METRIC_FIRE_DELAY_MS, "p99", "p99"),
                ],
                left_annotations=[
                    cloudwatch.HorizontalAnnotation(value=self._config.fire_delay_alarm_ms, label="alarm")
                ],
            ),
            graph(
                "Slots and executions per minute",
                [
                    app_metric(c.METRIC_SLOTS_RELEASED, "Sum", "slots released"),
                    both_lanes_sum(c.METRIC_EXECUTIONS_SUCCEEDED, "succeeded"),
                    both_lanes_sum(c.METRIC_EXECUTIONS_FAILED, "failed"),
                ],
            ),
            graph(
                "Retries and missed slots per minute",
                [
                    both_lanes_sum(c.METRIC_RETRIES, "retries"),
                    app_metric(c.METRIC_SLOTS_MISSED, "Sum", "missed"),
                ],
            ),
        )
        dashboard.add_widgets(
            graph(
                "Dead-letter queue depth", per_queue(queues.dead_letter, "ApproximateNumberOfMessagesVisible")
            ),
            graph(
                "Oldest message age (s)",
                per_queue([*queues.work_queues, queues.failed], "ApproximateAgeOfOldestMessage"),
            ),
            graph(
                "Messages waiting",
                per_queue(queues.work_queues, "ApproximateNumberOfMessagesVisible"),
            ),
        )
        dashboard.add_widgets(
            graph(
                "Poller errors and throttles",
                [
                    poller.function.metric_errors(period=MINUTE, statistic="Sum", label="errors"),
                    poller.function.metric_throttles(period=MINUTE, statistic="Sum", label="throttles"),
                    *(
                        [
                            self._lean_poller.function.metric_errors(
                                period=MINUTE, statistic="Sum", label="lean errors"
                            ),
                            self._lean_poller.function.metric_throttles(
                                period=MINUTE, statistic="Sum", label="lean throttles"
                            ),
                        ]
                        if self._lean_poller
                        else []
                    ),
                    tick.function.metric_errors(period=MINUTE, statistic="Sum", label="tick errors"),
                ],
            ),
            graph(
                "Poller duration (ms)",
                [
                    poller.function.metric_duration(period=MINUTE, statistic="Maximum", label="max"),
                    poller.function.metric_duration(period=MINUTE, statistic="p50", label="p50"),
                    *(
                        [
                            self._lean_poller.function.metric_duration(
                                period=MINUTE, statistic="Maximum", label="lean max"
                            )
                        ]
                        if self._lean_poller
                        else []
                    ),
                ],
            ),
            graph(
                "Minute executions",
                [
                    machine.metric(name, period=MINUTE, statistic="Sum", label=f"{label}{machine_label}")
                    for machine, machine_label in zip(state_machines, ("", " (burst)"), strict=False)
                    for name, label in (
                        ("ExecutionsStarted", "started"),
                        ("ExecutionsFailed", "failed"),
                        ("ExecutionsTimedOut", "timed out"),
                    )
                ],
            ),
        )
        dashboard.add_widgets(
            graph(
                "DynamoDB throttles",
                [
                    table.metric(name, period=MINUTE, statistic="Sum", label=name)
                    for name in (
                        "ReadThrottleEvents",
                        "WriteThrottleEvents",
                        "ReadKeyRangeThroughputThrottleEvents",
                        "WriteKeyRangeThroughputThrottleEvents",
                    )
                ],
            ),
            graph(
                "Workers and API",
                [
                    worker.function.metric_invocations(
                        period=MINUTE, statistic="Sum", label="worker invocations"
                    ),
                    worker.function.metric_errors(period=MINUTE, statistic="Sum", label="worker errors"),
                    worker.function.metric_throttles(
                        period=MINUTE, statistic="Sum", label="worker throttles"
                    ),
                    api.function.metric_errors(period=MINUTE, statistic="Sum", label="api errors"),
                ],
            ),
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=alarms, width=8, height=6),
        )
        dashboard.add_widgets(*self.scaling_widgets(graph))
        return dashboard

    def scaling_widgets(self, graph: Any) -> list[cloudwatch.IWidget]:
        """Predictive scaling: what the tick asked for and why, what ran, what was smoothed."""
        running: list[cloudwatch.IMetric] = []
        if self._burst_service is not None:
            service = self._burst_service
            running.append(
                cloudwatch.Metric(
                    namespace="ECS/ContainerInsights",
                    metric_name="RunningTaskCount",
                    dimensions_map={
                        "ClusterName": service.cluster.cluster_name,
                        "ServiceName": service.service_name,
                    },
                    statistic="Maximum",
                    period=MINUTE,
                    label="burst tasks running",
                )
            )
        return [
            graph(
                "Predictive scaling: burst workers and event-source concurrency",
                [
                    app_metric(c.METRIC_BURST_WORKERS_DESIRED, "Maximum", "burst workers asked for"),
                    *running,
                ],
                right=[app_metric(c.METRIC_WORKER_CONCURRENCY_DESIRED, "Maximum", "MaximumConcurrency")],
            ),
            graph(
                "Predictive scaling: planned slots and shortfall",
                [
                    app_metric(c.METRIC_BURST_PLANNED_SLOTS, "Maximum", "largest minute in sight"),
                    app_metric(c.METRIC_BURST_SHORTFALL, "Maximum", "slots beyond the bounds"),
                ],
            ),
            graph(
                "Burst smoothing: rate-budget overruns (fired on time past the budget)",
                [both_lanes_sum(c.METRIC_RATE_BUDGET_OVERRUNS, "overruns")],  # pollers, both workers
            ),
            graph(
                "Retries deferred by their tenants' retry rate (maxRetriesPerSecondPerTenant)",
                [app_metric(c.METRIC_RETRIES_DEFERRED, "Sum", "retries deferred")],
            ),
            graph(
                "Runs held at their tenant's cap of runs in flight (maxRunsInFlightPerTenant)",
                [both_lanes_sum(c.METRIC_RUNS_HELD_AT_TENANT_CAP, "runs held")],  # both workers
            ),
        ]
