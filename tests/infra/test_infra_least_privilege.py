"""Issue 16: each role holds exactly what its component's code calls; own resources are never targets.

Three lists must agree, per component:

* the declared one (``infra/constants.py``: ``TABLE_ACTIONS_BY_COMPONENT`` and the queue, KMS,
  SSM, Secrets Manager and STS grants of each construct), as the template holds it;
* the one read from the runtime's code (:mod:`aws_calls`: every adapter method the component's
  modules call, and what each method's boto3 calls and transaction items need).

Logs and X-Ray (the function's own log group, tracing) are the runtime's plumbing, not the
component's calls; they are left out of the comparison.
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_calls import BURST_MACHINE_ACTIONS, BURST_SERVICE_ACTIONS, ECS_LANE_CALLER_ACTIONS
from aws_calls import component_actions as _all_component_actions
from cdk_helpers import (
    Synth,
    actions_on,
    as_list,
    component_roles,
    join_parts,
    role_statements,
    statements_by_role,
)

from punctual_cdk import constants as c

PLUMBING = ("logs:", "xray:")
# What the Lambda service calls as the worker function's role: CDK's SqsEventSource grants the
# event source mapping these (grantConsumeMessages) on the short queues.
SERVICE_ACTIONS = {"worker-lambda": set(c.EVENT_SOURCE_ACTIONS)}


def component_actions(component: str, synth: Synth | None = None) -> dict[str, set[str]]:
    """What the component's code calls, as this deployment shape lets it (no burst service: the
    tick's scaling never reaches ECS)."""
    actions = _all_component_actions(component)
    ecs_lane = synth is not None and synth.stack.config.ecs_ready_tasks > synth.stack.config.ecs_min_tasks
    if synth is not None and synth.stack.workers.burst_service is None:
        for action in BURST_SERVICE_ACTIONS.get(component, frozenset()):
            actions.pop(action, None)
    if ecs_lane:
        for action in ECS_LANE_CALLER_ACTIONS.get(component, frozenset()):
            actions.setdefault(action, {"RegisterScalableTarget: what AWS asks of its caller"})
    elif synth is not None:
        for action in (
            "application-autoscaling:DescribeScalableTargets",
            "application-autoscaling:RegisterScalableTarget",
        ):
            actions.pop(action, None)
    if synth is not None and synth.stack.dispatch.burst_state_machine is None:
        for action in BURST_MACHINE_ACTIONS.get(component, frozenset()):
            actions.pop(action, None)
    return actions


def _roles(synth: Synth) -> dict[str, tuple[str, Any]]:
    """Role name → (component, role)."""
    return component_roles(synth.stack)


def _granted(synth: Synth, role: Any) -> set[str]:
    key = synth.stack.storage.table_key
    # DynamoDB's use of a customer-managed table key happens on the caller's behalf: not a call.
    table_key = {f"<{synth.logical_id(key)}.Arn>"} if key is not None else set()
    return {
        action
        for action, resources in actions_on(role_statements(synth, role)).items()
        if not action.startswith(PLUMBING) and resources - table_key
    }


@pytest.mark.parametrize("component", ["api", "poller", "worker", "tick", "auditor", "console"])
def test_every_declared_action_is_called_by_the_components_code(default_synth: Synth, component: str) -> None:
    from_code = set(component_actions(component, default_synth))
    for name, (owner, role) in _roles(default_synth).items():
        if owner != component:
            continue
        granted = _granted(default_synth, role)
        expected = from_code | SERVICE_ACTIONS.get(name, set())

        # Exactly: nothing granted that the code never calls, nothing called that is not granted.
        assert granted == expected, (name, sorted(granted - expected), sorted(expected - granted))


@pytest.mark.parametrize("variant", ["custom", "burst"])
def test_the_other_deployment_shapes_grant_the_same(request: pytest.FixtureRequest, variant: str) -> None:
    synth: Synth = request.getfixturevalue(f"{variant}_synth")
    for name, (component, role) in _roles(synth).items():
        expected = set(component_actions(component, synth)) | SERVICE_ACTIONS.get(name, set())
        assert _granted(synth, role) == expected, (variant, name)


def test_table_actions_are_the_declared_lists(default_synth: Synth) -> None:
    from punctual_cdk.components.console import CONSOLE_TABLE_ACTIONS

    declared = {**c.TABLE_ACTIONS_BY_COMPONENT, "console": CONSOLE_TABLE_ACTIONS}
    for name, (component, role) in _roles(default_synth).items():
        table = {a for a in _granted(default_synth, role) if a.startswith("dynamodb:")}
        assert table == set(declared[component]), name
    tick = actions_on(role_statements(default_synth, default_synth.stack.dispatch.tick.role))
    assert "dynamodb:DeleteItem" not in tick and "dynamodb:PutItem" not in tick  # reads only


def test_the_code_reading_finds_what_each_adapter_method_needs() -> None:
    """The reading itself: a known method of each kind, so a broken parser cannot pass silently."""
    from aws_calls import adapter_methods

    methods = {name: actions for name, (_, actions) in adapter_methods().items()}
    # a transaction; its calendar uses are items of their own (put for an add, deleted for a drop)
    assert methods["delete_job"] == {"dynamodb:DeleteItem", "dynamodb:UpdateItem", "dynamodb:PutItem"}
    assert methods["send"] == {"sqs:SendMessage"}  # SendMessageBatch is authorised as SendMessage
    assert methods["token_key"] == {"secretsmanager:GetSecretValue"}
    assert "sts:AssumeRole" in methods["Boto3ClientFactory"]
    assert set(component_actions("poller")) >= {"dynamodb:BatchWriteItem", "sqs:SendMessage"}
    assert "dynamodb:DeleteItem" not in component_actions("tick")
    # QA22: the console's calls are read too, precisely: of next_fire it runs owes_now and
    # next_release, not the API's NextFire (whose calendars are one BatchGetItem)
    assert set(component_actions("console")) == {"dynamodb:GetItem", "dynamodb:Query"}


# --------------------------------------------------------------------------- own resources


def _own_arns(synth: Synth) -> set[str]:
    stack = synth.stack
    queues = stack.queues
    constructs = [
        *queues.work_queues,
        *queues.dead_letter,
        queues.failed,
        stack.storage.table,
        stack.api.handler.function,
        *(p.function for p in stack.dispatch.pollers),
        stack.dispatch.tick.function,
        stack.workers.worker.function,
        stack.console.handler.function,
        stack.auditor.handler.function,
        *stack.dispatch.state_machines,
        stack.observability.topic,
        stack.workers.cluster,
        stack.events.bus,
    ]
    rendered = {
        f"arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:task-definition/{t.family}"
        for t in stack.workers.task_definitions
    }
    for construct in constructs:
        logical = synth.logical_id(construct)
        kind = synth.resources[logical]["Type"]
        # GetAtt Arn where the resource has one, Ref where the Ref is the ARN; task definitions by
        # family (every revision).
        if kind in ("AWS::StepFunctions::StateMachine", "AWS::SNS::Topic"):
            rendered.add(f"<{logical}>")
        else:
            rendered.add(f"<{logical}.Arn>")
    return rendered


def test_the_own_resource_list_names_every_queue_function_machine_table_topic_and_task(
    any_synth: Synth,
) -> None:
    parameters = any_synth.of_type("AWS::SSM::Parameter")
    (parameter,) = parameters.values()
    props = parameter["Properties"]
    assert props["Name"] == f"/punctual/{any_synth.stack.stack_name}/own-arns"
    listed = set(join_parts(props["Value"]).split(","))

    # The resources, and every role of the stack (issue 31: none may be a job's execution role).
    roles = {f"<{logical}.Arn>" for logical in any_synth.of_type("AWS::IAM::Role")}
    assert f"<{any_synth.logical_id(any_synth.stack.target_role.role)}.Arn>" in roles
    assert listed == _own_arns(any_synth) | roles


def test_the_target_role_is_denied_every_own_resource(any_synth: Synth) -> None:
    role = any_synth.stack.target_role.role
    statements = role_statements(any_synth, role)
    denies = [s for s in statements if s.get("Effect") == "Deny"]  # (a long list is split)
    resources = {join_parts(r) for deny in denies for r in as_list(deny["Resource"])}
    (actions,) = {frozenset(as_list(deny["Action"])) for deny in denies}

    for arn in _own_arns(any_synth):
        assert arn in resources and f"{arn}:*" in resources, arn
    assert {"sqs:SendMessage", "lambda:InvokeFunction", "states:StartExecution", "ecs:RunTask"} <= actions
    # Nothing but the operator's patterns is allowed.
    allowed = {a for s in statements if s.get("Effect", "Allow") == "Allow" for a in as_list(s["Action"])}
    assert allowed <= {a for actions in c.TARGET_ACTIONS_BY_SERVICE.values() for a in actions} | {
        "ecs:StopTask"
    }


def test_only_the_worker_roles_may_assume_the_target_role(any_synth: Synth) -> None:
    stack = any_synth.stack
    trust = any_synth.resources[any_synth.logical_id(stack.target_role.role)]["Properties"]
    principals = {
        join_parts(p)
        for statement in trust["AssumeRolePolicyDocument"]["Statement"]
        for p in as_list(statement["Principal"]["AWS"])
    }
    assert principals == {f"<{any_synth.logical_id(r)}.Arn>" for r in stack.workers.roles}
    target = f"<{any_synth.logical_id(stack.target_role.role)}.Arn>"
    for role in stack.workers.roles:
        assert target in actions_on(role_statements(any_synth, role))["sts:AssumeRole"]
    for role in (stack.api.handler.role, stack.dispatch.poller.role, stack.dispatch.tick.role):
        assert "sts:AssumeRole" not in actions_on(role_statements(any_synth, role))


# --------------------------------------------------------------------------- execution roles (issue 31)

ASSUME = {"sts:AssumeRole", "sts:TagSession"}


def _assume_statements(synth: Synth, role: Any) -> list[dict[str, Any]]:
    return [s for s in role_statements(synth, role) if ASSUME & set(as_list(s["Action"]))]


def test_workers_assume_only_execution_roles_that_opted_in_and_only_with_an_external_id(
    any_synth: Synth,
) -> None:
    stack, config = any_synth.stack, any_synth.stack.config
    target_role = f"<{any_synth.logical_id(stack.target_role.role)}.Arn>"
    tagged = {f"iam:ResourceTag/{config.execution_role_tag}": "true"}
    opted_in = f"arn:<AWS::Partition>:iam::*:role/{config.execution_role_prefix}*"
    for role in stack.workers.roles:
        statements = _assume_statements(any_synth, role)
        to_target_role = [s for s in statements if join_parts(s["Resource"]) == target_role]
        execution = [s for s in statements if s not in to_target_role]
        assert {a for s in to_target_role for a in as_list(s["Action"])} == ASSUME
        # Exactly two statements for execution roles, each on the opted-in roles and tagged ones only.
        by_action = {as_list(s["Action"])[0]: s for s in execution}
        assert len(execution) == 2 and set(by_action) == ASSUME
        for statement in execution:
            assert len(as_list(statement["Action"])) == 1
            assert join_parts(statement["Resource"]) == opted_in
        assert by_action["sts:AssumeRole"]["Condition"] == {
            "StringEquals": tagged,
            "Null": {"sts:ExternalId": "false"},
        }
        assert by_action["sts:TagSession"]["Condition"] == {"StringEquals": tagged}
    # No other role of the stack may assume anything.
    workers = {any_synth.logical_id(r) for r in stack.workers.roles}
    for logical, statements in statements_by_role(any_synth).items():
        if logical not in workers:
            assert not [s for s in statements if ASSUME & set(as_list(s["Action"]))], logical


def test_the_target_role_cannot_be_assumed_as_an_execution_role(any_synth: Synth) -> None:
    """A job naming the target role as its role_arn makes the worker send an external id: refused."""
    trust = any_synth.resources[any_synth.logical_id(any_synth.stack.target_role.role)]["Properties"]
    statements = trust["AssumeRolePolicyDocument"]["Statement"]
    assert statements
    for statement in statements:
        assert statement["Condition"] == {"Null": {"sts:ExternalId": "true"}}, statement


def _env(synth: Synth, function: Any) -> dict[str, Any]:
    variables: dict[str, Any] = synth.resources[synth.logical_id(function)]["Properties"]["Environment"][
        "Variables"
    ]
    return variables


def test_the_api_and_workers_know_where_the_list_is_and_the_workers_know_the_target_role(
    default_synth: Synth,
) -> None:
    stack = default_synth.stack
    name = f"/punctual/{stack.stack_name}/own-arns"
    for function in (stack.api.handler.function, stack.workers.worker.function):
        assert _env(default_synth, function)["PUNCTUAL_OWN_ARNS_PARAMETER"] == name
    worker = _env(default_synth, stack.workers.worker.function)
    assert worker["PUNCTUAL_TARGET_ROLE_ARN"] == {
        "Fn::GetAtt": [default_synth.logical_id(stack.target_role.role), "Arn"]
    }
    task = default_synth.resources[default_synth.logical_id(stack.workers.task_definition)]
    container_env = {
        e["Name"]: e["Value"] for e in task["Properties"]["ContainerDefinitions"][0]["Environment"]
    }
    assert container_env["PUNCTUAL_TARGET_ROLE_ARN"] == worker["PUNCTUAL_TARGET_ROLE_ARN"]
    assert container_env["PUNCTUAL_OWN_ARNS_PARAMETER"] == name


def test_the_paging_token_key_is_generated_at_deploy_and_read_by_the_api_only(default_synth: Synth) -> None:
    stack = default_synth.stack
    secret = default_synth.logical_id(stack.token_key.secret)
    generated = default_synth.resources[secret]["Properties"]["GenerateSecretString"]
    assert generated["PasswordLength"] >= 32
    assert _env(default_synth, stack.api.handler.function)["PUNCTUAL_TOKEN_KEY_SECRET"] == {"Ref": secret}
    readers = [
        role
        for role in (
            stack.api.handler.role,
            stack.dispatch.poller.role,
            stack.dispatch.tick.role,
            *stack.workers.roles,
        )
        if f"<{secret}>"
        in actions_on(role_statements(default_synth, role)).get("secretsmanager:GetSecretValue", ())
    ]
    assert readers == [stack.api.handler.role]
    # (the API also reads the dispatch key: it signs the slots "run now" sends)
    dispatch_key = f"<{default_synth.logical_id(stack.storage.dispatch_key)}>"
    assert actions_on(role_statements(default_synth, stack.api.handler.role))[
        "secretsmanager:GetSecretValue"
    ] == {f"<{secret}>", dispatch_key}
    for function in (stack.workers.worker.function, stack.dispatch.poller.function):
        assert "PUNCTUAL_TOKEN_KEY" not in _env(default_synth, function)


def test_workers_decrypt_only_webhook_secrets_and_the_tenant_keys_they_are_sealed_under(
    default_synth: Synth,
) -> None:
    for role in default_synth.stack.workers.roles:
        decrypts = [s for s in role_statements(default_synth, role) if "kms:Decrypt" in as_list(s["Action"])]
        assert all(as_list(s["Action"]) == ["kms:Decrypt"] for s in decrypts)
        assert [s["Condition"] for s in decrypts] == [
            {
                "StringEquals": {"kms:EncryptionContext:purpose": "punctual-webhook-signing-secret"},
                "ForAllValues:StringEquals": {"kms:EncryptionContextKeys": ["purpose", "tenant", "job"]},
            },
            {
                "StringEquals": {"kms:EncryptionContext:purpose": "punctual-tenant-data-key"},
                "ForAllValues:StringEquals": {"kms:EncryptionContextKeys": ["purpose", "tenant"]},
            },
        ]


def test_the_api_makes_and_unwraps_only_tenant_data_keys(default_synth: Synth) -> None:
    statements = role_statements(default_synth, default_synth.stack.api.handler.role)
    (data_keys,) = [s for s in statements if "kms:GenerateDataKey" in as_list(s["Action"])]
    assert sorted(as_list(data_keys["Action"])) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert data_keys["Condition"] == {
        "StringEquals": {"kms:EncryptionContext:purpose": "punctual-tenant-data-key"},
        "ForAllValues:StringEquals": {"kms:EncryptionContextKeys": ["purpose", "tenant"]},
    }


def test_the_decrypt_condition_names_the_keys_the_code_binds() -> None:
    from punctual.security.signing_secrets import DEFAULT_CONTEXT, job_binding
    from punctual_cdk import constants as c

    assert set(c.WEBHOOK_SECRET_CONTEXT_KEYS) == {*DEFAULT_CONTEXT, *job_binding("t", "j")}
    from punctual.security.tenant_keys import TENANT_KEY_PURPOSE, key_context

    assert (c.TENANT_KEY_PURPOSE, set(c.TENANT_KEY_CONTEXT_KEYS)) == (
        TENANT_KEY_PURPOSE,
        set(key_context("t")),
    )


def test_quota_defaults_reach_every_function(default_synth: Synth) -> None:
    stack = default_synth.stack
    for function in (
        stack.api.handler.function,
        stack.workers.worker.function,
        stack.dispatch.poller.function,
    ):
        env = _env(default_synth, function)
        assert env["PUNCTUAL_MAX_JOBS_PER_TENANT"] == "100000"
        assert env["PUNCTUAL_MAX_TRIGGERS_PER_MINUTE_PER_TENANT"] == "60000"
        assert env["PUNCTUAL_API_REQUESTS_PER_MINUTE_PER_TENANT"] == "1200"
        assert env["PUNCTUAL_REQUIRE_TARGET_ROLE"] == "false"


def test_the_api_encrypts_only_under_its_two_purposes(default_synth: Synth) -> None:
    statements = role_statements(default_synth, default_synth.stack.api.handler.role)
    (encrypt,) = [s for s in statements if "kms:Encrypt" in as_list(s["Action"])]
    assert encrypt["Condition"] == {
        "StringEquals": {
            "kms:EncryptionContext:purpose": ["punctual-webhook-signing-secret", "punctual-idempotent-reply"]
        }
    }


def test_the_ticks_store_records_no_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """What lets the tick go without GetItem/PutItem (aws_calls.UNREACHED): its store has no layout."""
    from punctual.runtime import aws
    from punctual.runtime.composition import Container
    from punctual.runtime.settings import Settings

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    aws.reset()
    try:
        built = Container(Settings(table_name="t"))
        tick = built.tick()
        assert tick.store is built.reader
        built.reader.check_layout()  # returns at once: no layout to record or compare, no call made
        assert built.reader.layout is None
    finally:
        aws.reset()
