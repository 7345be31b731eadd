"""The chain auditor in the stack (issue 28): its index, its function and schedule, its role
(least privilege: the index's ARN only, no wildcard), its alarms."""

from __future__ import annotations

from cdk_helpers import Synth, actions_on, as_list, join_parts, role_statements

from punctual.store.dynamo import schema, table_definition
from punctual_cdk import constants as c


def _table(synth: Synth) -> dict:
    (table,) = synth.of_type("AWS::DynamoDB::Table").values()
    return table["Properties"]


def test_the_audit_index_is_the_one_the_runtime_queries(any_synth: Synth) -> None:
    props = _table(any_synth)
    (index,) = props["GlobalSecondaryIndexes"]
    # The template's index, the runtime's schema, and the CreateTable that tests and local mode use agree
    (local,) = table_definition("t")["GlobalSecondaryIndexes"]
    assert index["IndexName"] == schema.AUDIT_INDEX == local["IndexName"] == c.AUDIT_INDEX_NAME
    assert (
        index["KeySchema"]
        == local["KeySchema"]
        == [
            {"AttributeName": schema.AUDIT_SEGMENT, "KeyType": "HASH"},
            {"AttributeName": "pk", "KeyType": "RANGE"},
        ]
    )
    assert index["Projection"]["ProjectionType"] == "INCLUDE"
    assert sorted(index["Projection"]["NonKeyAttributes"]) == sorted(schema.AUDIT_PROJECTION)
    types = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
    assert types[schema.AUDIT_SEGMENT] == "N"


def test_a_provisioned_table_scales_the_audit_index_too(custom_synth: Synth) -> None:
    (index,) = _table(custom_synth)["GlobalSecondaryIndexes"]
    assert index["ProvisionedThroughput"]["ReadCapacityUnits"] >= 1
    targets = [
        t["Properties"]["ScalableDimension"]
        for t in custom_synth.of_type("AWS::ApplicationAutoScaling::ScalableTarget").values()
        if "index" in join_parts(t["Properties"]["ResourceId"])
    ]
    assert sorted(targets) == ["dynamodb:index:ReadCapacityUnits", "dynamodb:index:WriteCapacityUnits"]


def test_the_auditor_runs_every_minute_retried_and_bounded(default_synth: Synth) -> None:
    function = default_synth.resources[default_synth.logical_id(default_synth.stack.auditor.handler.function)]
    props = function["Properties"]
    assert props["Timeout"] == c.AUDITOR_TIMEOUT_S and props["MemorySize"] == c.AUDITOR_MEMORY_MB
    variables = props["Environment"]["Variables"]
    assert variables["PUNCTUAL_AUDIT_PERIOD_MINUTES"] == "60"
    assert variables["PUNCTUAL_AUDIT_GRACE_S"] == "300"
    arn = {"Fn::GetAtt": [default_synth.logical_id(default_synth.stack.auditor.handler.function), "Arn"]}
    (rule,) = [
        r
        for r in default_synth.of_type("AWS::Events::Rule").values()
        if r["Properties"]["Targets"][0]["Arn"] == arn
    ]
    assert rule["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    (target,) = rule["Properties"]["Targets"]
    assert target["RetryPolicy"] == {
        "MaximumEventAgeInSeconds": c.AUDITOR_MAX_EVENT_AGE_S,
        "MaximumRetryAttempts": c.AUDITOR_RETRY_ATTEMPTS,
    }


def test_the_auditor_may_query_the_audit_index_and_no_other(any_synth: Synth) -> None:
    granted = actions_on(role_statements(any_synth, any_synth.stack.auditor.handler.role))
    table = f"<{any_synth.logical_id(any_synth.stack.storage.table)}.Arn>"
    assert granted["dynamodb:Query"] == {table, f"{table}/index/{c.AUDIT_INDEX_NAME}"}
    for action, resources in granted.items():
        assert all("*" not in r for r in resources if not action.startswith("xray:")), action
    # no other role may read the index
    for name in ("api", "worker", "tick"):
        role = {
            "api": any_synth.stack.api.handler.role,
            "worker": any_synth.stack.workers.worker.role,
            "tick": any_synth.stack.dispatch.tick.role,
        }[name]
        resources = actions_on(role_statements(any_synth, role)).get("dynamodb:Query", set())
        assert not [r for r in resources if "/index/" in r], name


def test_a_broken_chain_raises_an_alarm_to_the_topic(any_synth: Synth) -> None:
    topic = {"Ref": any_synth.logical_id(any_synth.stack.observability.topic)}
    alarms = [a["Properties"] for a in any_synth.of_type("AWS::CloudWatch::Alarm").values()]

    def metric_of(alarm: dict) -> dict:
        if "Metrics" in alarm:  # a labelled metric, or a math expression over several
            stats = [m for m in alarm["Metrics"] if "MetricStat" in m]
            if len(alarm["Metrics"]) != 1 or not stats:
                return {}
            return dict(stats[0]["MetricStat"]["Metric"], Stat=stats[0]["MetricStat"]["Stat"])
        return alarm

    (broken,) = [a for a in alarms if metric_of(a).get("MetricName") == c.METRIC_CHAINS_BROKEN]
    metric = metric_of(broken)
    assert metric["Namespace"] == c.METRICS_NAMESPACE and metric["Stat"] == "Sum"
    assert {d["Name"]: d["Value"] for d in metric["Dimensions"]} == c.METRIC_DIMENSIONS
    assert (broken["Threshold"], broken["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert broken["TreatMissingData"] == "notBreaching"
    assert as_list(broken["AlarmActions"]) == [topic] and as_list(broken["OKActions"]) == [topic]
    errors = [
        a
        for a in alarms
        if a.get("Namespace") == "AWS/Lambda"
        and a["MetricName"] == "Errors"
        and a["Dimensions"][0]["Value"]
        == {"Ref": any_synth.logical_id(any_synth.stack.auditor.handler.function)}
    ]
    assert len(errors) == 1 and errors[0]["AlarmActions"] == [topic]


def test_an_auditor_that_is_not_invoked_at_all_raises_an_alarm(any_synth: Synth) -> None:
    # QA24: with its rule disabled or deleted (or its invocations throttled) the auditor neither
    # errs nor emits a metric, so no alarm heard it stop: jobs' broken chains went unlooked for.
    auditor = {"Ref": any_synth.logical_id(any_synth.stack.auditor.handler.function)}
    (silent,) = [
        a["Properties"]
        for a in any_synth.of_type("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == "Invocations"
        and a["Properties"]["Dimensions"] == [{"Name": "FunctionName", "Value": auditor}]
    ]

    assert (silent["Namespace"], silent["Statistic"], silent["Period"]) == ("AWS/Lambda", "Sum", 300)
    assert (silent["Threshold"], silent["ComparisonOperator"]) == (1, "LessThanThreshold")
    assert silent["TreatMissingData"] == "breaching"  # no invocation is no data
    topic = {"Ref": any_synth.logical_id(any_synth.stack.observability.topic)}
    assert as_list(silent["AlarmActions"]) == [topic] and as_list(silent["OKActions"]) == [topic]


def test_the_auditor_is_an_own_resource_no_target_may_name(default_synth: Synth) -> None:
    arn = f"<{default_synth.logical_id(default_synth.stack.auditor.handler.function)}.Arn>"
    assert arn in {join_parts(a) for a in default_synth.stack.own_resource_arns()} or arn in set(
        join_parts(default_synth.stack.resolve(a)) for a in default_synth.stack.own_resource_arns()
    )


def test_an_orphaned_job_alarm_sends_no_ok_between_audit_passes(any_synth: Synth) -> None:
    # QA24: a job is audited once a period (an hour by default), so JobsOrphaned is counted once an
    # hour and its five-minute alarm fell back to OK five minutes after each ALARM, telling the
    # topic "recovered" while the job still could not fire.
    topic = {"Ref": any_synth.logical_id(any_synth.stack.observability.topic)}
    alarms = any_synth.of_type("AWS::CloudWatch::Alarm")

    def named(alarm: dict) -> set[str]:
        return {
            m["MetricStat"]["Metric"]["MetricName"] for m in alarm.get("Metrics", []) if "MetricStat" in m
        }

    (orphans,) = [
        a["Properties"] for a in alarms.values() if named(a["Properties"]) == {c.METRIC_JOBS_ORPHANED}
    ]
    broken = [a["Properties"] for a in alarms.values() if named(a["Properties"]) == {c.METRIC_CHAINS_BROKEN}]

    assert as_list(orphans["AlarmActions"]) == [topic] and "OKActions" not in orphans
    assert [as_list(b["OKActions"]) for b in broken] == [[topic]]  # a repaired chain does recover
