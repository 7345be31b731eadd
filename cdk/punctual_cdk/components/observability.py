"""Observability: the dashboard and the alarms, which notify an encrypted SNS topic.

The runtime writes EMF metrics in namespace ``Punctual``: ``FireDelayMs`` (scheduled instant →
release, counted when a slot is sent, not per re-read), ``SlotsReleased``, ``SlotsMissed``
(slots recorded MISSED) from the poller, and ``ExecutionsSucceeded``,
``ExecutionsFailed``, ``Retries`` from the workers. Lambda functions write them with Powertools
(dimension ``service=punctual``), the ECS worker itself (``service=punctual-ecs-worker``); the
dashboard adds the two lanes. The rest comes from
the services: queue depth and age, Lambda errors and durations, DynamoDB throttles, state
machine executions.

Alarms (all to the topic; e-mail subscribers from context ``alarmEmails``):

* a dead-letter queue holds a message;
* fire delay p99 over ``fireDelayAlarmMs`` (10 s by default: the design's "never over 10 s");
* a poller failed, or none was invoked for five minutes (a minute whose pollers cannot be invoked
  still succeeds); the tick failed twice in a row, or was not invoked for five minutes (the
  pollers' relay keeps the minutes going without it); a minute's execution failed or timed out; no
  minute execution started, on either state machine, for five minutes (no poller is running at all);
* a count that must stay at 0 is not: ``ForgedMessages``, ``DeadLettersFailed``,
  ``EventsFailed`` (events dropped from the bus), ``SlotsCalendarMissing`` (a job's slots not run:
  its calendar is gone), ``AlertsUndelivered``; in five minutes (``components/failure_alarms.py``):
  ``LeasesLost``, ``AlertsFailed``, ``ChildRecordsFailed``, ``RateBudgetStoreErrors``,
  ``EventCopiesNotDelivered``, the API's own failures (``ApiFailures``: 500s, the 503
  ``misconfigured``, the function's errors) and the pollers' throttles (``PollersThrottled``: one
  group whose poller cannot be invoked stops its jobs while ``NoPollerInvoked`` stays quiet);
* a work queue's oldest message is older than its lane's threshold;
* the tick failed to ready the ECS lane (``EcsLaneErrors``) three minutes in a row;
* the table throttled a request, or throttled a key range (a hot partition: the shard count
  is too small for the load);
* with standing burst workers (``ecsBurstTasks``), fewer of them ran than asked for, five
  minutes in a row (Container Insights' ``RunningTaskCount``): a burst would start late.

The last row shows predictive scaling (the tick's ``BurstWorkersDesired``,
``WorkerConcurrencyDesired``, ``BurstPlannedSlots``, ``BurstShortfall``, beside the burst
service's running tasks) and burst smoothing's ``RateBudgetOverruns``.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from punctual_cdk import constants as c
from punctual_cdk.components.dashboard import DashboardBuilder
from punctual_cdk.components.failure_alarms import failure_alarms
from punctual_cdk.components.functions import PunctualFunction
from punctual_cdk.components.metrics import MINUTE, app_metric, both_lanes_sum
from punctual_cdk.components.queues import Queues
from punctual_cdk.config import PunctualConfig


class Observability(Construct):
    """The alarm topic, the alarms and the dashboard (which shows ``shown_alarms`` too: the alarms
    made beside it, the chain auditor's)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PunctualConfig,
        table: dynamodb.ITable,
        queues: Queues,
        poller: PunctualFunction,
        tick: PunctualFunction,
        worker: PunctualFunction,
        api: PunctualFunction,
        state_machine: sfn.StateMachine,
        lean_poller: PunctualFunction | None = None,
        burst_service: ecs.FargateService | None = None,
        burst_state_machine: sfn.StateMachine | None = None,
        shown_alarms: Sequence[cloudwatch.Alarm] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        self._lean_poller = lean_poller
        self._burst_state_machine = burst_state_machine
        self.alarms: list[cloudwatch.Alarm] = []

        # CloudWatch publishes to an encrypted topic only if the key lets it: an AWS-managed SNS
        # key does not, so the topic has its own key with a statement for CloudWatch.
        self.topic_key = kms.Key(
            self,
            "AlarmTopicKey",
            description="Punctual: encrypts the alarm topic",
            enable_key_rotation=True,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        self.topic_key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarmsToPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=["*"],  # in a key policy, "*" means this key
                conditions={"StringEquals": {"aws:SourceAccount": cdk.Aws.ACCOUNT_ID}},
            )
        )
        self.topic = sns.Topic(
            self,
            "AlarmTopic",
            display_name="Punctual alarms",
            master_key=self.topic_key,
            enforce_ssl=True,
        )
        for email in config.alarm_emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))

        self._alarms(table, queues, poller, tick, state_machine)
        failure_alarms(
            self._alarm, api, lambda name, period, label: self._pollers(poller, name, period, label)
        )
        if config.ecs_ready_tasks > config.ecs_min_tasks:  # the tick readies the ECS lane
            self._alarm(
                "EcsLaneNotReadied",
                metric=app_metric(c.METRIC_ECS_LANE_ERRORS, "Sum"),
                threshold=1,
                evaluation_periods=c.ECS_LANE_ERROR_ALARM_PERIODS,
                description=f"The tick failed to set the ECS worker service's minimum (ecsReadyTasks) "
                f"{c.ECS_LANE_ERROR_ALARM_PERIODS} minutes in a row: ECS-lane (runtime: ecs) slots find "
                "no task running and start two to three minutes late. The tick's log names the error "
                "(Application Auto Scaling refused or throttled, the service's scalable target gone).",
            )
        if burst_service is not None and config.ecs_burst_tasks > 0:  # standing ones to miss
            self._burst_alarm(burst_service)
        machines = [m for m in (state_machine, burst_state_machine) if m is not None]
        self.dashboard = DashboardBuilder(self, config, lean_poller, burst_service).build(
            table, queues, poller, tick, worker, api, machines, [*self.alarms, *shown_alarms]
        )

    # --- alarms ------------------------------------------------------------------------------------
    def _alarm(
        self,
        construct_id: str,
        *,
        metric: cloudwatch.IMetric,
        threshold: float,
        description: str,
        evaluation_periods: int = 1,
        datapoints_to_alarm: int | None = None,
        comparison: cloudwatch.ComparisonOperator = (
            cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
        ),
        missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
    ) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            metric=metric,
            threshold=threshold,
            evaluation_periods=evaluation_periods,
            datapoints_to_alarm=datapoints_to_alarm,
            comparison_operator=comparison,
            treat_missing_data=missing,
            alarm_description=description,
        )
        action = cw_actions.SnsAction(self.topic)
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
        self.alarms.append(alarm)
        return alarm

    def _silent(self, construct_id: str, metric: cloudwatch.IMetric, *, description: str) -> None:
        """An alarm on something that happens every minute: none in the metric's period, or no data
        at all (a metric nothing wrote), alarms."""
        self._alarm(
            construct_id,
            metric=metric,
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            threshold=1,
            missing=cloudwatch.TreatMissingData.BREACHING,
            description=description,
        )

    def _alarms(
        self,
        table: dynamodb.ITable,
        queues: Queues,
        poller: PunctualFunction,
        tick: PunctualFunction,
        state_machine: sfn.StateMachine,
    ) -> None:
        for dlq in queues.dead_letter:
            self._alarm(
                f"{dlq.node.id}Depth",
                metric=dlq.metric_approximate_number_of_messages_visible(period=MINUTE, statistic="Maximum"),
                threshold=1,
                description=f"A message reached dead-letter queue {dlq.node.id}: it failed "
                f"{self._config.max_receive_count} deliveries. Inspect it, fix, then redrive.",
            )
        # Counts that must stay at 0: the first one alarms (the log names the job and the slot)
        for name, metric, description in (
            (
                "ForgedMessages",
                both_lanes_sum(c.METRIC_FORGED_MESSAGES, "forged messages"),
                "A worker dropped a dispatch message without a valid signature: something outside the"
                " scheduler wrote to a work queue (look for an SQS target or a principal with"
                " sqs:SendMessage on Punctual's queues).",
            ),
            (
                "DeadLettersFailed",
                both_lanes_sum(c.METRIC_DEAD_LETTERS_FAILED, "dead letters not sent"),
                "A finally failed slot's event could not be sent to its job's dead-letter queue (the"
                " queue is gone, or the job's role may not send to it): the worker's log names it.",
            ),
            (
                "EventsFailed",
                both_lanes_sum(c.METRIC_EVENTS_FAILED, "events not sent"),
                "Events were dropped from the stack's events bus: a PutEvents call still failed after"
                " one more try (throttled past the account's PutEvents quota, or the bus or its policy"
                " changed). Rules that route them (failure notifications) missed them; the sender's log"
                " names the error.",
            ),
            (
                "SlotsCalendarMissing",
                both_lanes_sum(c.METRIC_SLOTS_CALENDAR_MISSING, "slots not run: calendar missing"),
                "A job names an exclusion calendar that is gone (a table restored in part, an item"
                " deleted by hand): each of its slots is recorded MISSED, not run, until the calendar"
                " is created again (PUT with its days). The log names the job and the calendar.",
            ),
            (
                "AlertsUndelivered",
                app_metric(c.METRIC_ALERTS_UNDELIVERED, "Sum"),
                "An alert could not be delivered: its worker died while sending it and its job was"
                " deleted meanwhile (its rules went with it); the poller's log names it.",
            ),
        ):
            self._alarm(name, metric=metric, threshold=1, description=description)
        self._alarm(
            "FireDelayP99",
            metric=app_metric(c.METRIC_FIRE_DELAY_MS, "p99"),
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            threshold=self._config.fire_delay_alarm_ms,
            evaluation_periods=3,
            datapoints_to_alarm=2,
            description=f"Fire delay p99 above {self._config.fire_delay_alarm_ms} ms in 2 of 3 minutes: "
            "slots are released late (poller overloaded, throttled, or too few shard groups).",
        )
        self._alarm(
            "StartDelayP99",
            metric=cloudwatch.MathExpression(
                expression="MAX([FILL(lambda_lane, 0), FILL(ecs_lane, 0)])",  # the later lane's
                using_metrics={
                    "lambda_lane": app_metric(c.METRIC_START_DELAY_MS, "p99"),
                    "ecs_lane": app_metric(c.METRIC_START_DELAY_MS, "p99", service=c.ECS_METRICS_SERVICE),
                },
                label="start delay p99 (the later lane)",
                period=MINUTE,
            ),
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            threshold=self._config.fire_delay_alarm_ms,
            evaluation_periods=3,
            datapoints_to_alarm=2,
            description=f"Start delay p99 above {self._config.fire_delay_alarm_ms} ms in 2 of 3 minutes "
            "on a lane: slots are released on time (else FireDelayP99 says so) but start late, "
            "waiting for a worker (the lane's concurrency full: runs that hang to their timeout, "
            "too few ECS tasks, a worker failing or throttled).",
        )
        self._alarm(
            "PollerErrors",
            metric=self._pollers(poller, "Errors", MINUTE, "poller errors"),
            threshold=1,
            description="A poller invocation failed: its shard group's slots may be released late.",
        )
        self._silent(
            "NoPollerInvoked",
            self._pollers(
                poller, "Invocations", cdk.Duration.seconds(c.NOT_INVOKED_ALARM_S), "poller invocations"
            ),
            description="No poller was invoked for five minutes although minutes may start: nothing is "
            "released. A minute whose pollers cannot be invoked (throttled past their reserved "
            "concurrency, the state machine's role refused, the function gone) still succeeds: each "
            "group's failure is caught so the others run, and a poller never invoked counts no error. "
            "Check the minute executions' history and the pollers' throttles.",
        )
        self._alarm(
            "TickErrors",
            metric=tick.function.metric_errors(period=MINUTE, statistic="Sum"),
            threshold=1,
            evaluation_periods=c.TICK_ERROR_ALARM_PERIODS,
            description="The tick failed two minutes in a row: the coming minutes may have no poller.",
        )
        self._silent(
            "TickNotRunning",
            tick.function.metric_invocations(
                period=cdk.Duration.seconds(c.NOT_INVOKED_ALARM_S), statistic="Sum"
            ),
            description="The tick was not invoked for five minutes (its EveryMinute rule disabled or "
            "deleted, or its invocations throttled). Each minute's pollers still start the next one, "
            "so slots fire, but nothing sizes the minutes' pollers, scales the workers for a burst or "
            "readies the ECS lane. Check the tick rule and the function's concurrency.",
        )
        self._alarm(
            "MinuteExecutionFailed",
            metric=self._minutes(state_machine, ("ExecutionsFailed", "ExecutionsTimedOut"), MINUTE),
            threshold=1,
            description="A minute's state machine execution failed or timed out: its pollers may have"
            " stopped before the minute's slots were released. (Aborted ones are not counted: the tick"
            " stops a waiting minute to start it again with more pollers.)",
        )
        self._silent(
            "NoMinuteStarted",
            self._minutes(
                state_machine, ("ExecutionsStarted",), cdk.Duration.seconds(c.NO_MINUTE_STARTED_ALARM_S)
            ),
            description="No minute execution started for five minutes: no poller is running, "
            "nothing is being dispatched. Check the tick rule and function.",
        )
        for queue, age_s in [
            *((q, c.SHORT_QUEUE_AGE_ALARM_S) for q in queues.short),
            *((q, c.LONG_QUEUE_AGE_ALARM_S) for q in queues.long),
        ]:
            self._alarm(
                f"{queue.node.id}OldestMessageAge",
                metric=queue.metric_approximate_age_of_oldest_message(period=MINUTE, statistic="Maximum"),
                comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                threshold=age_s,
                evaluation_periods=3,
                datapoints_to_alarm=2,
                description=f"Queue {queue.node.id}: a message has waited over {age_s} s; "
                "workers are too few or failing.",
            )
        self._alarm(
            "TableThrottled",
            metric=self._table_metric_sum(table, ("ReadThrottleEvents", "WriteThrottleEvents"), "t"),
            threshold=c.TABLE_THROTTLE_ALARM_EVENTS,
            description="The table throttled requests: raise provisioned capacity or warm throughput.",
        )
        self._alarm(
            "TableKeyRangeThrottled",
            metric=self._table_metric_sum(
                table,
                ("ReadKeyRangeThroughputThrottleEvents", "WriteKeyRangeThroughputThrottleEvents"),
                "k",
            ),
            threshold=c.TABLE_THROTTLE_ALARM_EVENTS,
            description="A key range (partition) of the table was throttled: a hot shard; raise "
            "shardCount or warm throughput.",
        )

    def _pollers(
        self, poller: PunctualFunction, name: str, period: cdk.Duration, label: str
    ) -> cloudwatch.IMetric:
        """The Lambda metric ``name`` of the poller functions, the standard and the lean one summed."""
        standard = poller.function.metric(name, period=period, statistic="Sum")
        if self._lean_poller is None:
            return standard
        return cloudwatch.MathExpression(
            expression="FILL(standard, 0) + FILL(lean, 0)",  # a function idle all period has no data
            using_metrics={
                "standard": standard,
                "lean": self._lean_poller.function.metric(name, period=period, statistic="Sum"),
            },
            label=f"{label} (standard + lean)",
            period=period,
        )

    def _minutes(
        self, state_machine: sfn.StateMachine, names: tuple[str, ...], period: cdk.Duration
    ) -> cloudwatch.IMetric:
        """The minute executions' ``names`` (AWS/States) summed, on the burst machine too when there
        is one: a minute of more than 40 groups runs there, not on the every-minute machine."""
        machines = [m for m in (state_machine, self._burst_state_machine) if m is not None]
        kinds = {name: name.removeprefix("Executions").lower() for name in names}  # ids and label
        using = {
            f"{kinds[name]}{i}": machine.metric(name, period=period, statistic="Sum")
            for name in names
            for i, machine in enumerate(machines)
        }
        if len(using) == 1:
            return next(iter(using.values()))
        both = " (both machines)" if len(machines) > 1 else ""
        return cloudwatch.MathExpression(
            expression=" + ".join(f"FILL({key}, 0)" for key in using),  # an idle metric has no data
            using_metrics=using,
            label=f"Minute executions {' or '.join(kinds.values())}{both}",
            period=period,
        )

    def _burst_alarm(self, service: ecs.FargateService) -> None:
        """The standing burst workers are the burst's capacity: alarm when some are missing."""
        running = cloudwatch.Metric(
            namespace="ECS/ContainerInsights",
            metric_name="RunningTaskCount",
            dimensions_map={"ClusterName": service.cluster.cluster_name, "ServiceName": service.service_name},
            statistic="Minimum",
            period=MINUTE,
        )
        self._alarm(
            "BurstWorkersShort",
            metric=running,
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            threshold=self._config.ecs_burst_tasks,
            evaluation_periods=c.ECS_BURST_SHORT_ALARM_PERIODS,
            # Container Insights reports the service every minute: no data means no report at all.
            missing=cloudwatch.TreatMissingData.BREACHING,
            description=f"Fewer than {self._config.ecs_burst_tasks} burst workers (ecsBurstTasks) ran for "
            f"{c.ECS_BURST_SHORT_ALARM_PERIODS} minutes: a top-of-minute burst would drain late. "
            "Check the service's events (task failures, Fargate capacity, the account's task quota).",
        )

    @staticmethod
    def _table_metric_sum(
        table: dynamodb.ITable, names: tuple[str, ...], prefix: str
    ) -> cloudwatch.MathExpression:
        using = {
            f"{prefix}{i}": table.metric(name, period=MINUTE, statistic="Sum") for i, name in enumerate(names)
        }
        # FILL(…, 0): a throttle metric only exists while throttling happens.
        return cloudwatch.MathExpression(
            expression=" + ".join(f"FILL({key}, 0)" for key in using),
            using_metrics=using,
            label=" + ".join(names),
            period=MINUTE,
        )
