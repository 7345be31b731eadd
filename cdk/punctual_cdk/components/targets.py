"""Permissions the workers need to reach AWS targets: only what context ``targetArnPatterns`` allows.

Each pattern names its service (``arn:aws:lambda:eu-west-1:123456789012:function:team-*``) and
gets that service's one invoking action, nothing else: ``lambda:InvokeFunction``,
``sqs:SendMessage``, ``sns:Publish``, ``events:PutEvents``, ``states:StartExecution``,
``ecs:RunTask`` on task-definition patterns and ``ecs:DescribeTasks``/``ecs:StopTask`` on task
patterns, and ``iam:PassRole`` (only to ECS tasks) on role patterns that ECS RunTask targets
use. With an empty list the workers get no target permission at all: HTTP webhook targets need
none. Encrypted target queues and topics also need kms:GenerateDataKey/Decrypt on their key,
which is the key owner's grant to give (a key policy), not this stack's.
"""

from __future__ import annotations

from collections import defaultdict

from aws_cdk import aws_iam as iam
from constructs import IConstruct

from punctual_cdk.config import target_actions
from punctual_cdk.nag import acknowledge


def grant_targets(role: iam.IRole, patterns: tuple[str, ...], *, policy_scope: IConstruct) -> None:
    """Add one statement per set of target actions to ``role``; acknowledge each wildcard pattern."""
    by_actions: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for pattern in patterns:
        by_actions[target_actions(pattern)].append(pattern)
    for actions, resources in sorted(by_actions.items()):
        conditions = None
        if actions == ("iam:PassRole",):
            conditions = {"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="Targets" + "".join(a.replace(":", " ").title().replace(" ", "") for a in actions),
                actions=list(actions),
                resources=resources,
                conditions=conditions,
            )
        )
        for resource in resources:
            if "*" in resource:
                acknowledge(
                    policy_scope,
                    f"IAM5[Resource::{resource}]",
                    "Target ARN pattern allowed by the operator in context targetArnPatterns; the "
                    f"workers may only {', '.join(actions)} on it.",
                )
