"""Workers (SQS event source, ECS service, VPC) and the IAM-authorised REST API."""

from __future__ import annotations

import json

from cdk_helpers import Synth, join_parts


def test_worker_lambda_reads_each_short_queue_with_partial_batch_responses(any_synth: Synth) -> None:
    stack = any_synth.stack
    mappings = any_synth.of_type("AWS::Lambda::EventSourceMapping")
    worker = any_synth.logical_id(stack.workers.worker.function)

    assert {join_parts(m["Properties"]["EventSourceArn"]) for m in mappings.values()} == {
        f"<{any_synth.logical_id(q)}.Arn>" for q in stack.queues.short
    }
    for mapping in mappings.values():
        props = mapping["Properties"]
        assert props["FunctionName"] == {"Ref": worker}
        assert props["BatchSize"] == stack.config.worker_batch_size
        assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert props["ScalingConfig"] == {"MaximumConcurrency": stack.config.worker_max_concurrency}


def _container(synth: Synth) -> dict:
    (task,) = synth.of_type("AWS::ECS::TaskDefinition").values()
    (container,) = task["Properties"]["ContainerDefinitions"]
    return container


def test_ecs_worker_drains_on_sigterm_and_logs(default_synth: Synth) -> None:
    container = _container(default_synth)

    assert container["StopTimeout"] == 120
    env = {e["Name"]: e["Value"] for e in container["Environment"]}
    # the drain (grace, then stopped runs returning) ends before ECS kills the task
    assert int(env["PUNCTUAL_WORKER_GRACE_S"]) + int(env["PUNCTUAL_WORKER_STOP_S"]) < container["StopTimeout"]
    assert container["LogConfiguration"]["LogDriver"] == "awslogs"
    variables = {e["Name"] for e in container["Environment"]}
    assert {"PUNCTUAL_TABLE_NAME", "PUNCTUAL_LONG_QUEUE_URLS", "POWERTOOLS_SERVICE_NAME"} <= variables
    (cluster,) = default_synth.of_type("AWS::ECS::Cluster").values()
    assert {"Name": "containerInsights", "Value": "enabled"} in cluster["Properties"]["ClusterSettings"]


def test_ecs_image_is_staged_from_the_worker_dockerfile_with_a_small_context(default_synth: Synth) -> None:
    assets = json.loads((default_synth.outdir / f"{default_synth.stack.artifact_id}.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    context = default_synth.outdir / image["source"]["directory"]

    assert image["source"]["dockerFile"] == "functions/ecs_worker/Dockerfile"
    staged = {str(p.relative_to(context)) for p in context.rglob("*") if p.is_file()}
    assert "requirements.txt" in staged and "functions/ecs_worker/Dockerfile" in staged
    assert any(p.startswith("layers/core/python/punctual/") for p in staged)
    assert not any(p.startswith((".venv", ".git/", "cdk.out", "build/", "tests/")) for p in staged)


def test_ecs_service_runs_privately_and_scales_on_the_long_queues(default_synth: Synth) -> None:
    (service,) = default_synth.of_type("AWS::ECS::Service").values()
    network = service["Properties"]["NetworkConfiguration"]["AwsvpcConfiguration"]
    assert network["AssignPublicIp"] == "DISABLED"

    policies = default_synth.of_type("AWS::ApplicationAutoScaling::ScalingPolicy")
    adjustments = {
        p["Properties"]["StepScalingPolicyConfiguration"]["AdjustmentType"]: p["Properties"][
            "StepScalingPolicyConfiguration"
        ]["StepAdjustments"]
        for p in policies.values()
    }
    assert all(step["ScalingAdjustment"] > 0 for step in adjustments["ChangeInCapacity"])  # out
    assert adjustments["PercentChangeInCapacity"] == [
        {"MetricIntervalUpperBound": 0, "ScalingAdjustment": -100}
    ]

    # Scale-in looks at messages waiting *and in flight*: a running job keeps its task.
    long_queues = {default_synth.logical_id(q) for q in default_synth.stack.queues.long}
    scaling_alarms = [
        a["Properties"]
        for a in default_synth.of_type("AWS::CloudWatch::Alarm").values()
        if any("Policy" in join_parts(action) for action in a["Properties"].get("AlarmActions", []))
    ]
    seen: dict[str, set[str]] = {}
    for alarm in scaling_alarms:
        names = {
            m["MetricStat"]["Metric"]["MetricName"]
            for m in alarm["Metrics"]
            if "MetricStat" in m
            and {join_parts(d["Value"]) for d in m["MetricStat"]["Metric"]["Dimensions"]}
            <= {f"<{q}.QueueName>" for q in long_queues}
        }
        seen[alarm["ComparisonOperator"]] = names
    assert seen["GreaterThanOrEqualToThreshold"] == {"ApproximateNumberOfMessagesVisible"}
    assert seen["LessThanOrEqualToThreshold"] == {
        "ApproximateNumberOfMessagesVisible",
        "ApproximateNumberOfMessagesNotVisible",
    }
    # ...and the runs past SQS's 12-hour visibility cap, whose messages are no longer in flight
    # (the tasks holding them report them): a run of days keeps its task too.
    [scale_in] = [a for a in scaling_alarms if a["ComparisonOperator"] == "LessThanOrEqualToThreshold"]
    detached = [
        m
        for m in scale_in["Metrics"]
        if m.get("MetricStat", {}).get("Metric", {}).get("MetricName") == "RunsDetached"
    ]
    assert [m["MetricStat"]["Stat"] for m in detached] == ["Maximum"]
    dimensions = {d["Name"]: d["Value"] for d in detached[0]["MetricStat"]["Metric"]["Dimensions"]}
    assert dimensions == {"service": "punctual-ecs-worker"}
    [expression] = [m["Expression"] for m in scale_in["Metrics"] if "Expression" in m]
    assert f"FILL({detached[0]['Id']}, 0)" in expression


def test_vpc_has_private_subnets_flow_logs_and_endpoints(default_synth: Synth) -> None:
    endpoints = default_synth.of_type("AWS::EC2::VPCEndpoint").values()
    services = {join_parts(e["Properties"]["ServiceName"]).rsplit(".", 1)[-1] for e in endpoints}
    kinds = {e["Properties"].get("VpcEndpointType", "Gateway") for e in endpoints}

    assert {"dynamodb", "s3", "sqs", "logs", "api", "dkr", "sts", "kms"} <= services
    assert kinds == {"Gateway", "Interface"}
    assert len(default_synth.of_type("AWS::EC2::FlowLog")) == 1
    assert len(default_synth.of_type("AWS::EC2::NatGateway")) == default_synth.stack.config.nat_gateways


def test_every_api_method_requires_iam_and_validates(any_synth: Synth) -> None:
    methods = any_synth.of_type("AWS::ApiGateway::Method")
    api_function = any_synth.logical_id(any_synth.stack.api.handler.function)

    assert len(methods) == 2  # "/" and "/{proxy+}", proxied to the api function
    for method in methods.values():
        props = method["Properties"]
        assert props["AuthorizationType"] == "AWS_IAM"
        assert "RequestValidatorId" in props
        assert props["Integration"]["Type"] == "AWS_PROXY"
        assert f"<{api_function}.Arn>" in join_parts(props["Integration"]["Uri"])
    (validator,) = any_synth.of_type("AWS::ApiGateway::RequestValidator").values()
    assert validator["Properties"]["ValidateRequestBody"] is True
    assert validator["Properties"]["ValidateRequestParameters"] is True


def test_api_stage_logs_traces_and_throttles(any_synth: Synth) -> None:
    (stage,) = any_synth.of_type("AWS::ApiGateway::Stage").values()
    props = stage["Properties"]
    config = any_synth.stack.config

    assert "DestinationArn" in props["AccessLogSetting"] and "Format" in props["AccessLogSetting"]
    assert props["TracingEnabled"] is True
    (settings,) = props["MethodSettings"]
    assert settings["HttpMethod"] == "*" and settings["ResourcePath"] == "/*"
    assert settings["ThrottlingRateLimit"] == config.api_throttle_rate_per_s
    assert settings["ThrottlingBurstLimit"] == config.api_throttle_burst
    assert settings["LoggingLevel"] == "ERROR"
    assert settings["DataTraceEnabled"] is False


ACCOUNT_CONCURRENCY = 1000  # Lambda's default account quota
UNRESERVED_MINIMUM = 100  # what Lambda keeps unreserved: a reservation may not take it


def test_api_traffic_cannot_take_the_workers_concurrency(any_synth: Synth) -> None:
    # The brief's known gap: the api function had no reserved concurrency, so API traffic (its
    # stage lets 100 requests a second and bursts of 200 in, each up to 29 s) could take the
    # account's whole Lambda concurrency, and the workers and pollers were throttled: slots late
    api = any_synth.logical_id(any_synth.stack.api.handler.function)
    config = any_synth.stack.config
    reserved = any_synth.resources[api]["Properties"].get("ReservedConcurrentExecutions")

    assert reserved == config.api_reserved_concurrency > 0
    assert config.stack_name != "PunctualCustom" or reserved == 50  # the context's, read as text
    # And in the default deployment, what is left in a default account holds what the workers'
    # event sources may run at once, and two overlapping minutes of the most pollers
    if config.stack_name == "Punctual":
        workers = sum(
            m["Properties"]["ScalingConfig"]["MaximumConcurrency"]
            for m in any_synth.of_type("AWS::Lambda::EventSourceMapping").values()
        )
        pollers = 2 * config.pollers_per_minute
        assert reserved + workers + pollers <= ACCOUNT_CONCURRENCY - UNRESERVED_MINIMUM


def test_web_acl_from_context_is_associated_with_the_stage(custom_synth: Synth) -> None:
    (association,) = custom_synth.of_type("AWS::WAFv2::WebACLAssociation").values()

    assert association["Properties"]["WebACLArn"] == custom_synth.stack.config.api_web_acl_arn


def test_a_request_the_web_acl_blocks_is_not_answered_as_an_api_that_does_not_exist(any_synth: Synth) -> None:
    """QA28: a request AWS WAF blocks got API Gateway's default WAF_FILTERED answer, 403
    {"message": "Forbidden"}: the very answer of an API id API Gateway does not have, which the job
    provider takes as "the scheduler is gone" on a delete. A stack delete whose job deletes the web
    ACL blocked (a rate rule) succeeded and left those jobs firing, no stack's. The API answers a
    block with a message of its own, so a blocked delete fails instead."""
    import json

    from punctual_cdk.provider import handler as provider

    (response,) = [
        r["Properties"]
        for r in any_synth.of_type("AWS::ApiGateway::GatewayResponse").values()
        if r["Properties"]["ResponseType"] == "WAF_FILTERED"
    ]
    assert response["StatusCode"] == "403"
    body = json.loads(response["ResponseTemplates"]["application/json"])
    assert body != provider._NO_SUCH_API and "web ACL" in body["message"]
