"""Functions and roles: the runtime contract (handlers, environment, runtime) and least privilege."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cdk_helpers import (
    REPO_ROOT,
    Synth,
    actions_on,
    as_list,
    join_parts,
    missing_handlers,
    role_statements,
    statements_by_role,
)

CONTRACT_ENVIRONMENT = {
    "PUNCTUAL_TABLE_NAME",
    "PUNCTUAL_SHORT_QUEUE_URLS",
    "PUNCTUAL_LONG_QUEUE_URLS",
    "PUNCTUAL_FAILED_QUEUE_URL",
    "PUNCTUAL_SHARD_COUNT",
    "PUNCTUAL_NEAR_SHARD_COUNT",
    "PUNCTUAL_FAR_THRESHOLD_S",
    "PUNCTUAL_POLL_INTERVAL_MS",
    "PUNCTUAL_RETENTION_DAYS",
    "PUNCTUAL_TARGET_ALLOW_CIDRS",
    "PUNCTUAL_MAX_JOBS_PER_TENANT",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "LOG_LEVEL",
}
# Actions that AWS authorises only on Resource "*", and why; nothing else may use "*".
STAR_RESOURCE_ALLOWED = {
    "xray:PutTraceSegments": "X-Ray has no resource-level permissions",
    "xray:PutTelemetryRecords": "X-Ray has no resource-level permissions",
    "xray:GetSamplingRules": "X-Ray has no resource-level permissions",
    "xray:GetSamplingTargets": "X-Ray has no resource-level permissions",
    "logs:CreateLogDelivery": "vended log delivery (Step Functions logging)",
    "logs:GetLogDelivery": "vended log delivery (Step Functions logging)",
    "logs:UpdateLogDelivery": "vended log delivery (Step Functions logging)",
    "logs:DeleteLogDelivery": "vended log delivery (Step Functions logging)",
    "logs:ListLogDeliveries": "vended log delivery (Step Functions logging)",
    "logs:PutResourcePolicy": "vended log delivery (Step Functions logging)",
    "logs:DescribeResourcePolicies": "vended log delivery (Step Functions logging)",
    "logs:DescribeLogGroups": "vended log delivery (Step Functions logging)",
    "ecr:GetAuthorizationToken": "ECR login has no resource-level permissions",
    "application-autoscaling:DescribeScalableTargets": "Application Auto Scaling reads have no resource-level permissions",
}


def _functions(synth: Synth) -> dict[str, dict[str, Any]]:
    stack = synth.stack
    return {
        name: synth.resources[synth.logical_id(fn.function)]
        for name, fn in {
            "api": stack.api.handler,
            "poller": stack.dispatch.poller,
            "worker": stack.workers.worker,
            "tick": stack.dispatch.tick,
        }.items()
    }


def test_every_function_follows_the_runtime_contract(default_synth: Synth) -> None:
    layer = next(iter(default_synth.of_type("AWS::Lambda::LayerVersion")))
    for name, function in _functions(default_synth).items():
        props = function["Properties"]
        assert props["Handler"] == "handler.handler", name
        assert props["Runtime"] == "python3.14", name
        assert props["Architectures"] == ["arm64"], name
        assert props["TracingConfig"] == {"Mode": "Active"}, name
        assert props["Layers"] == [{"Ref": layer}], name
        assert "LogGroup" in props["LoggingConfig"], name
        variables = props["Environment"]["Variables"]
        assert set(variables) >= CONTRACT_ENVIRONMENT, name
        assert variables["POWERTOOLS_SERVICE_NAME"] == "punctual"
        assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "Punctual"
        assert variables["PUNCTUAL_SHARD_COUNT"] == "256"


def _files(folder: Path) -> set[str]:
    return {
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def test_each_function_ships_exactly_its_own_folder(default_synth: Synth) -> None:
    for name, function in _functions(default_synth).items():
        staged = default_synth.outdir / function["Metadata"]["aws:asset:path"]

        assert _files(staged) == _files(Path(default_synth.stack.config.functions_dir) / name), name
    tick = _functions(default_synth)["tick"]
    assert (default_synth.outdir / tick["Metadata"]["aws:asset:path"] / "handler.py").is_file()


def test_every_function_has_its_handler_written() -> None:
    """The contract: functions/<name>/handler.py defines ``handler`` (others write them)."""
    assert missing_handlers() == []
    for name in ("api", "poller", "worker", "tick"):
        assert "def handler(" in (REPO_ROOT / "functions" / name / "handler.py").read_text(), name


def test_timeouts_fit_each_role(default_synth: Synth) -> None:
    timeouts = {name: f["Properties"]["Timeout"] for name, f in _functions(default_synth).items()}

    assert timeouts["poller"] == 120  # starts before its minute, runs ~70-80 s
    assert timeouts["worker"] == 900  # the longest short job
    assert timeouts["api"] <= 29  # API Gateway's integration timeout
    assert timeouts["tick"] <= 30


def test_only_the_tick_knows_the_state_machine(default_synth: Synth) -> None:
    machine = default_synth.logical_id(default_synth.stack.dispatch.state_machine)
    for name, function in _functions(default_synth).items():
        variables = function["Properties"]["Environment"]["Variables"]
        if name == "tick":
            assert variables["PUNCTUAL_STATE_MACHINE_ARN"] == {"Ref": machine}
            assert variables["PUNCTUAL_SHARD_GROUPS"] == "1"
        else:
            assert "PUNCTUAL_STATE_MACHINE_ARN" not in variables


def test_each_function_has_its_own_role(default_synth: Synth) -> None:
    roles = [join_parts(f["Properties"]["Role"]) for f in _functions(default_synth).values()]

    assert len(set(roles)) == 4
    task_role = f"<{default_synth.logical_id(default_synth.stack.workers.task_definition.task_role)}.Arn>"
    for role in [*roles, task_role]:
        logical_id = role.strip("<>").removesuffix(".Arn")
        if "ManagedPolicyArns" in default_synth.resources[logical_id]["Properties"]:
            pytest.fail(f"{logical_id} uses a managed policy; grant per resource instead")


def _table(synth: Synth) -> str:
    return f"<{synth.logical_id(synth.stack.storage.table)}.Arn>"


def _queue_arns(synth: Synth, queues: list[Any]) -> set[str]:
    return {f"<{synth.logical_id(q)}.Arn>" for q in queues}


# The poller and the workers: reads, writes and batches, never DeleteItem or ConditionCheckItem.
HOT_PATH_TABLE_ACTIONS = {
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:BatchWriteItem",
}
# Both delete a job whose last slot ended (a worker's) or was recorded unrun (the poller's) when it
# asked for that (delete_after_completion): off the hot path.
POLLER_TABLE_ACTIONS = WORKER_TABLE_ACTIONS = HOT_PATH_TABLE_ACTIONS | {"dynamodb:DeleteItem"}


def test_tick_may_start_executions_and_read_the_table_only(default_synth: Synth) -> None:
    granted = actions_on(role_statements(default_synth, default_synth.stack.dispatch.tick.role))
    machine = f"<{default_synth.logical_id(default_synth.stack.dispatch.state_machine)}>"

    assert granted["states:StartExecution"] == {machine}
    dynamodb = {a for a in granted if a.startswith("dynamodb:")}
    assert dynamodb == {"dynamodb:BatchGetItem", "dynamodb:Query"}  # its store records no layout
    # Predictive scaling: the short queues' depth, read only (test_infra_predictive_scaling.py)
    assert {a for a in granted if a.startswith("sqs:")} == {"sqs:GetQueueAttributes"}


def test_poller_sends_to_the_lanes_and_writes_the_table(default_synth: Synth) -> None:
    queues = default_synth.stack.queues
    granted = actions_on(role_statements(default_synth, default_synth.stack.dispatch.poller.role))

    assert granted["sqs:SendMessage"] == _queue_arns(default_synth, [*queues.work_queues, queues.failed])
    # and reads the short lane's depth (only): the backlog it paces catch-up by (catchup_pace.py)
    assert granted["sqs:GetQueueAttributes"] == _queue_arns(default_synth, queues.short)
    assert {a for a in granted if a.startswith("sqs:")} == {"sqs:SendMessage", "sqs:GetQueueAttributes"}
    assert {a for a in granted if a.startswith("dynamodb:")} == POLLER_TABLE_ACTIONS
    for action in POLLER_TABLE_ACTIONS:
        assert granted[action] == {_table(default_synth)}  # no index ARN, no wildcard
    assert not any(a.startswith(("kms:", "lambda:")) for a in granted)
    # Step Functions: only the relay's (group 0's pollers start the next minute when no tick did,
    # and re-plan it as the tick would): the minute machine and its executions, nothing else
    machines = {f"<{default_synth.logical_id(m)}>" for m in default_synth.stack.dispatch.state_machines}
    states = {a: r for a, r in granted.items() if a.startswith("states:")}
    assert set(states) == {"states:StartExecution", "states:DescribeExecution", "states:StopExecution"}
    assert states["states:StartExecution"] == machines
    assert all(r.endswith(":*") and ":execution:" in r for r in states["states:StopExecution"])


def test_worker_lambda_consumes_only_the_short_queues(default_synth: Synth) -> None:
    queues = default_synth.stack.queues
    granted = actions_on(role_statements(default_synth, default_synth.stack.workers.worker.role))

    assert granted["sqs:ReceiveMessage"] == _queue_arns(default_synth, queues.short)
    assert granted["sqs:DeleteMessage"] == _queue_arns(default_synth, queues.short)
    assert granted["sqs:SendMessage"] == _queue_arns(default_synth, [*queues.work_queues, queues.failed])
    secrets = f"<{default_synth.logical_id(default_synth.stack.storage.secrets_key)}.Arn>"
    assert granted["kms:Decrypt"] == {secrets}
    assert "kms:Encrypt" not in granted
    # No target permissions without targetArnPatterns: HTTP targets need none. (Its own execution
    # events go to the one events bus: not a target.)
    assert granted["events:PutEvents"] == {
        f"<{default_synth.logical_id(default_synth.stack.events.bus)}.Arn>"
    }
    assert not any(
        a.startswith(("lambda:", "sns:", "events:", "states:", "ecs:", "iam:")) and a != "events:PutEvents"
        for a in granted
    )


def test_ecs_task_consumes_only_the_long_queues(default_synth: Synth) -> None:
    queues = default_synth.stack.queues
    task_role = default_synth.stack.workers.task_definition.task_role
    granted = actions_on(role_statements(default_synth, task_role))

    assert granted["sqs:ReceiveMessage"] == _queue_arns(default_synth, queues.long)
    assert granted["sqs:ChangeMessageVisibility"] == _queue_arns(default_synth, queues.long)
    assert {a for a in granted if a.startswith("dynamodb:")} == WORKER_TABLE_ACTIONS


def test_api_encrypts_secrets_and_sends_run_now_slots_only(default_synth: Synth) -> None:
    granted = actions_on(role_statements(default_synth, default_synth.stack.api.handler.role))
    secrets = f"<{default_synth.logical_id(default_synth.stack.storage.secrets_key)}.Arn>"

    assert granted["kms:Encrypt"] == {secrets}
    # It decrypts only its own idempotent replies and the tenants' data keys (to seal new
    # secrets under them): never a job's webhook secret.
    decrypts = [
        s
        for s in role_statements(default_synth, default_synth.stack.api.handler.role)
        if "kms:Decrypt" in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    ]
    assert [s["Condition"]["StringEquals"] for s in decrypts] == [
        {"kms:EncryptionContext:purpose": "punctual-tenant-data-key"},
        {"kms:EncryptionContext:purpose": "punctual-idempotent-reply"},
    ]
    assert granted["sqs:SendMessage"] == _queue_arns(default_synth, default_synth.stack.queues.work_queues)
    assert {a for a in granted if a.startswith("sqs:")} == {"sqs:SendMessage"}


def test_target_permissions_are_exactly_the_context_patterns(custom_synth: Synth) -> None:
    patterns = set(custom_synth.stack.config.target_arn_patterns)
    role = custom_synth.stack.target_role.role
    statements = [s for s in role_statements(custom_synth, role) if s.get("Sid", "").startswith("Targets")]
    granted = actions_on(statements)

    assert granted == {
        "lambda:InvokeFunction": {"arn:aws:lambda:eu-west-1:123456789012:function:team-*"},
        "sqs:SendMessage": {"arn:aws:sqs:eu-west-1:123456789012:orders"},
        "states:StartExecution": {"arn:aws:states:eu-west-1:123456789012:stateMachine:nightly-*"},
        "ecs:RunTask": {"arn:aws:ecs:eu-west-1:123456789012:task-definition/report:*"},
        "ecs:DescribeTasks": {"arn:aws:ecs:eu-west-1:123456789012:task/reports/*"},
        "ecs:StopTask": {"arn:aws:ecs:eu-west-1:123456789012:task/reports/*"},
        "iam:PassRole": {"arn:aws:iam::123456789012:role/report-task-*"},
    }
    assert set().union(*granted.values()) == patterns
    pass_role = next(s for s in statements if s["Action"] == "iam:PassRole")
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}
    # Only the target role holds them: no component's own role reaches targets (the workers
    # assume the target role; the poller and the API never call targets).
    stack = custom_synth.stack
    for own in (*stack.workers.roles, stack.dispatch.poller.role, stack.api.handler.role):
        assert not any(s.get("Sid", "").startswith("Targets") for s in role_statements(custom_synth, own))


def test_no_policy_grants_star_except_where_aws_requires_it(any_synth: Synth) -> None:
    star_ack = "AwsSolutions::AwsSolutions-IAM5[Resource::*]"
    roles = any_synth.of_type("AWS::IAM::Role")
    for logical_id, statements in statements_by_role(any_synth).items():
        for statement in statements:
            if statement.get("Effect", "Allow") != "Allow":
                continue
            actions = as_list(statement["Action"])
            assert "*" not in actions, logical_id
            assert not any(a.endswith(":*") for a in actions), (logical_id, actions)
            if "*" not in as_list(statement["Resource"]):
                continue
            unexplained = [a for a in actions if a not in STAR_RESOURCE_ALLOWED]
            assert not unexplained, (logical_id, unexplained)
            if logical_id.startswith("CustomVpcRestrictDefaultSG"):
                continue  # CDK's own custom-resource provider: not a role this app writes
            # ...and the role (or a construct above it) acknowledges it in cdk-nag, with a reason.
            path = "/" + roles[logical_id]["Metadata"]["aws:cdk:path"].removesuffix("/Resource")
            reasons = [
                rules[star_ack]
                for ack_path, rules in any_synth.acknowledged.items()
                if star_ack in rules and (path == ack_path or path.startswith(ack_path + "/"))
            ]
            assert reasons and all(len(r) > 40 for r in reasons), (logical_id, path)


def test_only_the_senders_and_verifiers_of_dispatch_messages_read_the_dispatch_key(
    default_synth: Synth,
) -> None:
    stack = default_synth.stack
    key = f"<{default_synth.logical_id(stack.storage.dispatch_key)}>"
    readers = {
        "poller": stack.dispatch.poller.role,
        "lean poller": stack.dispatch.lean_poller.role,
        "worker": stack.workers.worker.role,
        "ecs task": stack.workers.task_definition.task_role,
        "api": stack.api.handler.role,
    }
    for name, role in readers.items():
        granted = actions_on(role_statements(default_synth, role))
        assert key in granted.get("secretsmanager:GetSecretValue", set()), name
    tick = actions_on(role_statements(default_synth, stack.dispatch.tick.role))
    assert not any(a.startswith("secretsmanager:") for a in tick)
    # Every function is told where the key is (the tick holds no grant: it sends no message)
    for function in default_synth.of_type("AWS::Lambda::Function").values():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        if "PUNCTUAL_TABLE_NAME" in variables:
            assert join_parts(variables["PUNCTUAL_DISPATCH_KEY_SECRET_ARN"]) == key
