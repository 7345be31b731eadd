"""Synthesis and template helpers for the infrastructure tests (fixtures live in conftest.py).

Synthesis runs from the repository root (asset paths are relative to it), without Docker and
without network. The real layer (``make layer``) is used when it is built; otherwise the core
sources stand in for it, which is all the assertions need. Every synth runs cdk-nag: a finding
that is not acknowledged fails the fixture, and so every test.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))  # the CDK app's package, `infra`, is not installed

# What the cdk CLI adds to the context of a synth: construct paths and asset paths in metadata.
CLI_CONTEXT = {"aws:cdk:enable-path-metadata": True, "aws:cdk:enable-asset-metadata": True}

# A second deployment shape: the options a production user turns on.
CUSTOM_CONTEXT: dict[str, Any] = {
    "stackName": "PunctualCustom",
    "queueCount": 2,
    "shardGroups": 4,
    "triggersPerPollerMinute": "20000",  # as `-c key=value` passes it: a string
    "pollerMaxConcurrency": 40,  # every poller a minute may have (fewer would start some late)
    "pollerReservedConcurrency": 80,  # two overlapping minutes of those 40
    "maxReceiveCount": 3,
    "workerMaxConcurrency": 50,
    "tableBillingMode": "provisioned",
    "tableEncryption": "cmk",
    "tableWarmReadUnitsPerSecond": 15000,
    "tableWarmWriteUnitsPerSecond": 5000,
    "tableRemovalPolicy": "destroy",
    "tableDeletionProtection": "false",  # as `-c key=value` passes it: a string
    "alarmEmails": "ops@example.com,oncall@example.com",
    "apiReservedConcurrency": "50",  # as `-c key=value` passes it: a string
    "apiWebAclArn": "arn:aws:wafv2:eu-west-1:123456789012:regional/webacl/punctual/0000-1111",
    "targetArnPatterns": [
        "arn:aws:lambda:eu-west-1:123456789012:function:team-*",
        "arn:aws:sqs:eu-west-1:123456789012:orders",
        "arn:aws:states:eu-west-1:123456789012:stateMachine:nightly-*",
        "arn:aws:ecs:eu-west-1:123456789012:task-definition/report:*",
        "arn:aws:ecs:eu-west-1:123456789012:task/reports/*",
        "arn:aws:iam::123456789012:role/report-task-*",
    ],
    "vpcInterfaceEndpoints": "false",
    "eventsBus": "default",  # execution events on the account's default bus (before issue 31)
    "executionRoleTag": "acme:scheduler-role",
    "executionRolePrefix": "punctual/",
}


# The burst-ready capacity profile (bench/capacity.py, profile (c)): more pollers planned per
# minute, more than 40 of them, and standing ECS burst workers on the short queues.
BURST_CONTEXT: dict[str, Any] = {
    "stackName": "PunctualBurst",
    "shardCount": 288,  # nearShardCount may not exceed it (and both are fixed at first deploy)
    "nearShardCount": 288,
    "workerMaxConcurrency": 390,
    "maxShardGroups": 62,  # more than an inline Map's 40: a Parallel of two Maps
    "pollerMemoryMb": 1769,
    "tableWarmWriteUnitsPerSecond": 410000,
    "tableWarmReadUnitsPerSecond": 40000,
    "triggersPerPollerMinute": 9678,
    "ecsBurstTasks": "214",  # as `-c key=value` passes it: a string
    "ecsBurstTasksMax": 300,  # predictive scaling starts up to 86 more ahead of a planned burst
    "ecsBurstConcurrency": 32,
    "ecsBurstCpu": 1024,
    "ecsBurstMemoryMb": 2048,
}


@dataclass
class Synth:
    """One synthesised variant of the app."""

    stack: Any
    template: Any  # aws_cdk.assertions.Template
    json: dict[str, Any]
    report: dict[str, Any]
    outdir: Path
    acknowledged: dict[str, dict[str, str]]  # construct path → {rule id: reason}

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return self.json["Resources"]

    def of_type(self, cfn_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v["Type"] == cfn_type}

    def logical_id(self, construct: Any) -> str:
        from aws_cdk import Stack

        return Stack.of(construct).resolve(Stack.of(construct).get_logical_id(construct.node.default_child))


def _layer_dir() -> str:
    return "build/layer" if (REPO_ROOT / "build/layer/python").is_dir() else "layers/core"


FUNCTION_NAMES = ("api", "poller", "worker", "tick", "console")
STUB_HANDLER = '''"""Stand-in for a handler not written yet: lets the infrastructure tests synthesise."""


def handler(event, context):
    raise NotImplementedError
'''


def missing_handlers() -> list[str]:
    return [n for n in FUNCTION_NAMES if not (REPO_ROOT / "functions" / n / "handler.py").is_file()]


def functions_dir(staging: Path) -> str:
    """``functions``, or a staged copy with stand-ins where a handler is not written yet.

    The app refuses to synthesise a function without its handler; the infrastructure does not
    depend on the handlers' content, so its tests go on, and one test reports what is missing.
    """
    missing = missing_handlers()
    if not missing:
        return "functions"
    for name in FUNCTION_NAMES:
        target = staging / name
        if name in missing:
            target.mkdir(parents=True, exist_ok=True)
            (target / "handler.py").write_text(STUB_HANDLER)
        else:
            shutil.copytree(
                REPO_ROOT / "functions" / name, target, ignore=shutil.ignore_patterns("__pycache__")
            )
    return str(staging)


def synthesise(
    outdir: Path, context: dict[str, Any] | None = None, env: dict[str, str] | None = None
) -> Synth:
    from aws_cdk.assertions import Template

    from infra.app import build_app

    saved = {key: os.environ.get(key) for key in env or {}}
    os.environ.update(env or {})
    try:
        defaults = {
            **CLI_CONTEXT,
            "layerAssetDir": _layer_dir(),
            "functionsDir": functions_dir(outdir.with_name(outdir.name + "-functions")),
        }
        app, stack = build_app({**defaults, **(context or {})}, outdir=str(outdir))
        assembly = app.synth()  # raises ValidationFailed on any unacknowledged cdk-nag finding
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    template_json = assembly.get_stack_artifact(stack.artifact_id).template
    metadata = json.loads((outdir / f"{stack.artifact_id}.metadata.json").read_text())
    acknowledged: dict[str, dict[str, str]] = {}
    for path, entries in metadata.items():
        for entry in entries:
            if entry["type"] == "aws:cdk:acknowledged-rules":
                acknowledged.setdefault(path, {}).update(entry["data"])
    return Synth(
        stack=stack,
        template=Template.from_json(template_json),
        json=template_json,
        report=json.loads((outdir / "validation-report.json").read_text()),
        outdir=outdir,
        acknowledged=acknowledged,
    )


# --- template helpers ------------------------------------------------------------------------------
def join_parts(value: Any) -> str:
    """The text of an ``Fn::Join`` with its tokens rendered as ``<Ref>``/``<LogicalId.Attr>``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(join_parts(part) for part in parts)
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return f"<{'.'.join(value['Fn::GetAtt'])}>"
    return json.dumps(value)


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def statements_by_role(synth: Synth) -> dict[str, list[dict[str, Any]]]:
    """Every policy statement attached to each role (inline policies, AWS::IAM::Policy, and the
    managed policies CDK moves a role's statements to when its inline policy outgrows IAM's size)."""
    result: dict[str, list[dict[str, Any]]] = {role: [] for role in synth.of_type("AWS::IAM::Role")}
    for logical_id, role in synth.of_type("AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            result[logical_id].extend(policy["PolicyDocument"]["Statement"])
    attached = {**synth.of_type("AWS::IAM::Policy"), **synth.of_type("AWS::IAM::ManagedPolicy")}
    for policy in attached.values():
        for role_ref in policy["Properties"].get("Roles", []):
            result[role_ref["Ref"]].extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return result


def component_roles(stack: Any) -> dict[str, tuple[str, Any]]:
    """Role name → (component, role)."""
    roles: dict[str, tuple[str, Any]] = {
        "api": ("api", stack.api.handler.role),
        "poller": ("poller", stack.dispatch.poller.role),
        "tick": ("tick", stack.dispatch.tick.role),
        "auditor": ("auditor", stack.auditor.handler.role),
        "worker-lambda": ("worker", stack.workers.worker.role),
        "worker-task": ("worker", stack.workers.task_definition.task_role),
        "console": ("console", stack.console.handler.role),
    }
    if stack.dispatch.lean_poller is not None:
        roles["lean-poller"] = ("poller", stack.dispatch.lean_poller.role)
    if stack.workers.burst_task_definition is not None:
        roles["burst-task"] = ("worker", stack.workers.burst_task_definition.task_role)
    return roles


def role_statements(synth: Synth, role: Any) -> list[dict[str, Any]]:
    return statements_by_role(synth)[synth.logical_id(role)]


def actions_on(statements: list[dict[str, Any]]) -> dict[str, set[str]]:
    """action → the set of rendered resources it is allowed on."""
    granted: dict[str, set[str]] = {}
    for statement in statements:
        if statement.get("Effect", "Allow") != "Allow":
            continue
        for action in as_list(statement["Action"]):
            granted.setdefault(action, set()).update(join_parts(r) for r in as_list(statement["Resource"]))
    return granted


Emitted = set[tuple[str, str, frozenset[tuple[str, str]]]]


def emitted_metrics(documents: list[dict[str, Any]]) -> Emitted:
    """(namespace, metric name, dimensions) of each metric in some EMF documents."""
    return {
        (directive["Namespace"], metric["Name"], frozenset((d, doc[d]) for d in dimension_set))
        for doc in documents
        for directive in doc["_aws"]["CloudWatchMetrics"]
        for dimension_set in directive["Dimensions"]
        for metric in directive["Metrics"]
    }


def alarmed_metrics(alarm: dict[str, Any]) -> Emitted:
    """(namespace, metric name, dimensions) of each ``Punctual`` metric an alarm's queries read."""
    return {
        (
            m["MetricStat"]["Metric"]["Namespace"],
            m["MetricStat"]["Metric"]["MetricName"],
            frozenset((d["Name"], d["Value"]) for d in m["MetricStat"]["Metric"]["Dimensions"]),
        )
        for m in alarm["Metrics"]
        if "MetricStat" in m and m["MetricStat"]["Metric"]["Namespace"] == "Punctual"
    }
