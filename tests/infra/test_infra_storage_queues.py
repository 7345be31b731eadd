"""The table and the queues: keys, TTL, recovery, FIFO high throughput, dead-letter queues, TLS."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match
from cdk_helpers import Synth, as_list, join_parts


def test_one_table_keyed_pk_sk_with_ttl_pitr_and_only_the_sparse_audit_index(default_synth: Synth) -> None:
    tables = default_synth.of_type("AWS::DynamoDB::Table")
    assert len(tables) == 1
    table = next(iter(tables.values()))

    props = table["Properties"]
    assert props["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert props["AttributeDefinitions"] == [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
        {"AttributeName": "aseg", "AttributeType": "N"},  # the audit index's key: job items only
    ]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["SSESpecification"]["SSEEnabled"] is True
    # One index, the chain auditor's (tests/infra/test_infra_auditor.py), sparse: no timer or
    # execution record carries its key, so the hot path never writes it.
    assert [i["IndexName"] for i in props["GlobalSecondaryIndexes"]] == ["audit"]
    assert "LocalSecondaryIndexes" not in props
    # The jobs outlive a `cdk destroy` by default.
    assert props["DeletionProtectionEnabled"] is True
    assert table["DeletionPolicy"] == "Retain"


def test_provisioned_table_scales_and_can_use_a_customer_key(custom_synth: Synth) -> None:
    table = next(iter(custom_synth.of_type("AWS::DynamoDB::Table").values()))
    props = table["Properties"]

    assert props["SSESpecification"]["SSEType"] == "KMS"
    assert join_parts(props["SSESpecification"]["KMSMasterKeyId"]).startswith("<StorageTableKey")
    assert props["WarmThroughput"] == {"ReadUnitsPerSecond": 15000, "WriteUnitsPerSecond": 5000}
    assert props["DeletionProtectionEnabled"] is False
    assert table["DeletionPolicy"] == "Delete"
    dimensions = {
        t["Properties"]["ScalableDimension"]
        for t in custom_synth.of_type("AWS::ApplicationAutoScaling::ScalableTarget").values()
        if t["Properties"]["ServiceNamespace"] == "dynamodb"
    }
    assert dimensions == {
        "dynamodb:table:ReadCapacityUnits",
        "dynamodb:table:WriteCapacityUnits",
        "dynamodb:index:ReadCapacityUnits",  # the audit index
        "dynamodb:index:WriteCapacityUnits",
    }


def _queues(synth: Synth) -> dict[str, dict]:
    return synth.of_type("AWS::SQS::Queue")


def test_work_queues_are_high_throughput_fifo_with_a_fifo_dlq(any_synth: Synth) -> None:
    queues = _queues(any_synth)
    count = any_synth.stack.config.queue_count
    work = {k: v for k, v in queues.items() if "RedrivePolicy" in v["Properties"]}

    assert len(work) == 2 * count  # short and long
    for queue in work.values():
        props = queue["Properties"]
        assert props["FifoQueue"] is True
        assert props["DeduplicationScope"] == "messageGroup"
        assert props["FifoThroughputLimit"] == "perMessageGroupId"
        assert props["ContentBasedDeduplication"] is False  # the poller sets job+slot+attempt
        redrive = props["RedrivePolicy"]
        assert redrive["maxReceiveCount"] == any_synth.stack.config.max_receive_count
        dlq = queues[redrive["deadLetterTargetArn"]["Fn::GetAtt"][0]]
        assert dlq["Properties"]["FifoQueue"] is True


def test_failed_executions_queue_is_a_standard_queue(default_synth: Synth) -> None:
    failed = default_synth.logical_id(default_synth.stack.queues.failed)
    props = _queues(default_synth)[failed]["Properties"]

    assert "FifoQueue" not in props


def test_every_queue_is_encrypted_and_refuses_plain_http(any_synth: Synth) -> None:
    queues = _queues(any_synth)
    for queue in queues.values():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True

    tls_only: set[str] = set()
    for policy in any_synth.of_type("AWS::SQS::QueuePolicy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Deny" and statement["Condition"] == {
                "Bool": {"aws:SecureTransport": "false"}
            }:
                tls_only.update(q["Ref"] for q in policy["Properties"]["Queues"])
    assert tls_only == set(queues)


def test_short_queue_visibility_outlasts_the_worker_timeout_by_a_minute(default_synth: Synth) -> None:
    # The visibility is the Lambda worker's lease: long enough for any invocation, short
    # enough that a crashed one's slot is taken over within minutes (the claim absorbs a
    # second delivery).
    worker = default_synth.resources[default_synth.logical_id(default_synth.stack.workers.worker.function)]
    timeout_s = worker["Properties"]["Timeout"]

    for queue in default_synth.stack.queues.short:
        props = default_synth.resources[default_synth.logical_id(queue)]["Properties"]
        assert props["VisibilityTimeout"] == timeout_s + 60
    assert timeout_s == 900


def test_queue_count_from_context_reaches_the_environment(custom_synth: Synth) -> None:
    custom_synth.template.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "Environment": {
                "Variables": Match.object_like(
                    {
                        "PUNCTUAL_SHORT_QUEUE_URLS": {
                            "Fn::Join": [",", [{"Ref": Match.any_value()}, {"Ref": Match.any_value()}]]
                        }
                    }
                )
            }
        },
    )


def test_the_most_queues_the_context_allows_synthesise(tmp_path_factory: pytest.TempPathFactory) -> None:
    """QA27: queueCount 5 to 10 (its documented range; docs/capacity.md's Lambda path asks for 10)
    stopped the synth with CDK's TooManyMetricsInMathExpression, a traceback naming no key: the ECS
    workers' scale-in alarm added each long queue's waiting and in-flight messages and the detached
    runs, 2 x queueCount + 1 metrics, and CloudWatch takes at most 10 in an alarm. The short lane has
    queueCount queues (its throughput); the long lane (long jobs, a few a second) at most 4. Past
    that, from 6, cdk-nag failed on the target role: its one Deny statement outgrew the inline policy
    and CDK moved it whole to a managed policy, leaving an inline policy nag could not read."""
    from cdk_helpers import role_statements, synthesise

    from punctual_cdk import constants as c

    synth = synthesise(tmp_path_factory.mktemp("cdk-ten-queues"), {"queueCount": c.MAX_QUEUE_COUNT})
    queues = synth.stack.queues
    assert len(queues.short) == c.MAX_QUEUE_COUNT
    assert len(queues.long) == c.MAX_LONG_QUEUE_COUNT
    for alarm in synth.of_type("AWS::CloudWatch::Alarm").values():
        assert len([m for m in alarm["Properties"].get("Metrics", []) if "MetricStat" in m]) <= 10
    # ... and the scale-in alarm still watches every long queue
    (scale_in,) = [
        a for a in synth.of_type("AWS::CloudWatch::Alarm").values() if "ScaleInWhenIdle" in json.dumps(a)
    ]
    watched = {
        json.dumps(m["MetricStat"]["Metric"]["Dimensions"])
        for m in scale_in["Properties"]["Metrics"]
        if "MetricStat" in m and m["MetricStat"]["Metric"]["Namespace"] == "AWS/SQS"
    }
    assert watched == {
        json.dumps([{"Name": "QueueName", "Value": {"Fn::GetAtt": [synth.logical_id(q), "QueueName"]}}])
        for q in queues.long
    }
    # ... and the target role is still denied every queue (its statements split, some moved)
    denied = {
        join_parts(r)
        for s in role_statements(synth, synth.stack.target_role.role)
        if s.get("Effect") == "Deny"
        for r in as_list(s["Resource"])
    }
    assert {f"<{synth.logical_id(q)}.Arn>" for q in [*queues.work_queues, *queues.dead_letter]} <= denied
