"""The chain auditor: a Lambda a minute checks its share of the jobs' chains and repairs the broken.

Every ENABLED job is checked once per ``auditPeriodMinutes`` (:mod:`punctual.auditing`): an
EventBridge rule invokes the ``auditor`` function every minute, and each invocation audits the
segments of its minute (the scheduled event's ``time``), so no process is the only checker and a
failed run is retried by Lambda's asynchronous retries (twice, within an hour), its segments
coming round again next period anyway. No Step Functions: a state transition a minute would cost
an idle deployment more than the whole auditor (docs/operations.md, *Chain auditor*).

Its role (least privilege): the table's item actions of ``TABLE_ACTIONS_BY_COMPONENT["auditor"]``
and Query on the audit index only; sending to the work queues (a lost range's ``missed`` alert is
handed to a worker, signed: it reads the dispatch key); PutEvents on the events bus. Its alarms:
``ChainsBroken`` and ``JobsOrphaned`` ≥ 1 in a five-minute window, ``ChainAuditDeferred`` in two
audit periods in a row (a job never judged), the function's errors, and no invocation for five
minutes (the auditor itself stopped: nothing else would say so).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from punctual_cdk import constants as c
from punctual_cdk.components.events import ExecutionEvents
from punctual_cdk.components.functions import LambdaRuntime, PunctualFunction, on_schedule
from punctual_cdk.components.metrics import app_metric
from punctual_cdk.components.queues import SEND_ACTIONS, Queues
from punctual_cdk.components.storage import Storage
from punctual_cdk.config import PunctualConfig

_FIVE_MINUTES = cdk.Duration.minutes(5)


class ChainAuditor(Construct):
    """The auditor function, its rule, its grants and its alarms."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PunctualConfig,
        runtime: LambdaRuntime,
        storage: Storage,
        queues: Queues,
        events_bus: ExecutionEvents,
        environment: dict[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler: PunctualFunction = runtime.function(
            self,
            "Auditor",
            name="auditor",
            description="Punctual chain auditor: checks that every enabled job has a live chain, repairs",
            timeout_s=c.AUDITOR_TIMEOUT_S,
            memory_mb=c.AUDITOR_MEMORY_MB,
            environment=environment,
        )
        role = self.handler.role
        storage.grant_items(role, c.TABLE_ACTIONS_BY_COMPONENT["auditor"])
        storage.grant_audit_index(role)
        storage.grant_dispatch_key(role)  # the missed alerts it hands to workers are signed
        Queues.grant(role, queues.work_queues, SEND_ACTIONS)
        events_bus.grant_put(role)
        self.rule = on_schedule(
            self,
            "EveryMinute",
            self.handler.function,
            description="Punctual: audit this minute's share of the jobs' chains",
            schedule=c.AUDITOR_SCHEDULE,
            max_event_age_s=c.AUDITOR_MAX_EVENT_AGE_S,
            retry_attempts=c.AUDITOR_RETRY_ATTEMPTS,
        )
        # Each job is audited once a period: an orphan is reported once a period, and its alarm goes
        # back to OK five minutes later while the job is still orphaned. So it only alarms: an
        # OK would tell the topic of a recovery that did not happen.
        self.orphans_alarm = self._any_in_five_minutes(
            "JobsOrphaned",
            c.METRIC_JOBS_ORPHANED,
            "The chain auditor found an ENABLED after(...) job whose parent no longer "
            "exists: nothing can dispatch it. Its tenant must change its schedule or delete it (the "
            "auditor's log names it). Raised again at each audit pass while it stays so "
            f"(every auditPeriodMinutes, {config.audit_period_minutes}); no OK is sent between passes.",
        )
        self.alarms: list[cloudwatch.Alarm] = [
            self._any_in_five_minutes(
                "ChainsBroken",
                c.METRIC_CHAINS_BROKEN,
                "The chain auditor found a job whose chain was broken (it stopped firing "
                "while ENABLED) and repaired it from its next slot, its lost slots recorded MISSED "
                "('chain repaired'). Every one is a bug: see the Chain Repaired event and the auditor's log.",
            ),
            self.orphans_alarm,
            self._deferred_alarm(config.audit_period_minutes),
            cloudwatch.Alarm(
                self,
                "AuditorErrors",
                metric=self.handler.function.metric_errors(period=_FIVE_MINUTES, statistic="Sum"),
                threshold=1,
                evaluation_periods=3,
                datapoints_to_alarm=3,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description="The chain auditor failed in three five-minute windows in a row: "
                "broken chains are not being looked for.",
            ),
            cloudwatch.Alarm(
                self,
                "AuditorNotRunning",
                metric=self.handler.function.metric_invocations(
                    period=cdk.Duration.seconds(c.NOT_INVOKED_ALARM_S), statistic="Sum"
                ),
                threshold=1,
                evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.BREACHING,  # no invocation, no data
                alarm_description="The chain auditor was not invoked for five minutes (its EveryMinute "
                "rule disabled or deleted, or its invocations throttled): broken chains are not being "
                "looked for, so a job whose chain breaks stops silently. Check the rule and the function.",
            ),
        ]

    def _deferred_alarm(self, period_minutes: int) -> cloudwatch.Alarm:
        """``ChainAuditDeferred`` in two audit periods in a row: a job is deferred (left unjudged)
        while its shards' pollers are behind, which a lagging minute can make happen once; a job
        deferred at every pass (a shard no poller drains) is never judged, so its broken chain
        would never be found. Each job is audited once a period, so a window of one period holds
        one pass of each; CloudWatch evaluates at most a day, so past 12 h it is one period."""
        periods = 2 if 2 * period_minutes <= c.MAX_ALARM_RANGE_MINUTES else 1
        self.deferred_alarm_period_minutes = period_minutes
        return cloudwatch.Alarm(
            self,
            "ChainAuditDeferred",
            metric=app_metric(c.METRIC_CHAIN_AUDIT_DEFERRED, "Sum").with_(
                period=cdk.Duration.minutes(period_minutes)
            ),
            threshold=1,
            evaluation_periods=periods,
            datapoints_to_alarm=periods,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"The chain auditor deferred jobs in {periods} audit period(s) in a row "
            f"(auditPeriodMinutes, {period_minutes}): their shards' pollers had not drained the minute "
            "of now minus the grace (a shard no poller drains, a watermark stuck), so their chains "
            "are not judged and a broken one is never found. The auditor's log names the jobs; "
            "check the pollers' throttles and errors and the shards' watermarks.",
        )

    def _any_in_five_minutes(self, name: str, metric: str, description: str) -> cloudwatch.Alarm:
        """An alarm on the application metric ``metric``: one or more in a five-minute window."""
        return cloudwatch.Alarm(
            self,
            name,
            metric=app_metric(metric, "Sum").with_(period=_FIVE_MINUTES),
            threshold=1,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )

    def notify(self, topic: sns.ITopic) -> None:
        """Send the alarms (and their recoveries) to the alarm topic."""
        action = cw_actions.SnsAction(topic)
        for alarm in self.alarms:
            alarm.add_alarm_action(action)
            if alarm is not self.orphans_alarm:
                alarm.add_ok_action(action)
