"""Security: the role that calls targets, the stack's own-resource list, the paging-token key.

Target role
    AWS targets are never called with a component's own role (the workers' roles must send to
    Punctual's queues). The workers assume this role for every AWS target without a
    ``role_arn``: it holds only the operator's ``targetArnPatterns`` (one invoking action per
    service) and explicit Deny statements on every own resource, so no pattern, however wide,
    reaches the queues, functions, state machine, table, topic, cluster or task definitions. A
    job's own execution role (``role_arn``) is the tenant's: the worker assumes it with the
    tenant's id as external id. The target role's trust refuses any request that carries an
    external id, so it can never be assumed as a job's execution role.

Own resources
    The ARNs of those resources, in an SSM parameter (``/punctual/<stack>/own-arns``) that the
    API and the workers read once (``PUNCTUAL_OWN_ARNS_PARAMETER``): registration refuses them
    as targets (422), the worker refuses to call them. A parameter, not an environment variable:
    a function's environment cannot name the function itself, nor the state machine that
    invokes it, without a circular dependency.

Paging-token key
    A random key generated at deploy (a Secrets Manager secret), read once by the API
    (``PUNCTUAL_TOKEN_KEY_SECRET``): paging tokens are HMACs under it.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from punctual_cdk import constants as c
from punctual_cdk.components.targets import grant_targets
from punctual_cdk.config import PunctualConfig
from punctual_cdk.nag import acknowledge

# Actions denied to the target role on every own resource: whatever a target of each service
# could be made to do to it.
OWN_RESOURCE_DENIED_ACTIONS = (
    "sqs:SendMessage",
    "lambda:InvokeFunction",
    "lambda:InvokeFunctionUrl",
    "states:StartExecution",
    "states:StartSyncExecution",
    "sns:Publish",
    "events:PutEvents",
    "ecs:RunTask",
    "ecs:StartTask",
    "ecs:StopTask",
    "ecs:DescribeTasks",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:GetItem",
    "dynamodb:Query",
)


def own_arns_parameter_name(stack_name: str) -> str:
    return c.OWN_ARNS_PARAMETER.format(stack=stack_name)


# Resources (ARNs and their qualified forms) in one Deny statement of the target role: 32 resolved
# ARNs are about 3 KB, well within a managed policy's 6,144 characters.
DENY_RESOURCES_A_STATEMENT = 32


class TargetRole(Construct):
    """The role the workers assume to call AWS targets that name no execution role.

    Parameters
    ----------
    workers
        The roles that may assume it (worker Lambda and ECS task roles); each is granted
        ``sts:AssumeRole`` and ``sts:TagSession`` on it.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, config: PunctualConfig, workers: Sequence[iam.IRole]
    ) -> None:
        super().__init__(scope, construct_id)
        # The workers assume it without an external id; they send one for every execution role.
        # A request with one is a job naming this role as its role_arn: refused by the trust.
        no_external_id = {"Null": {"sts:ExternalId": "true"}}
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.CompositePrincipal(
                *(
                    iam.ArnPrincipal(role.role_arn).with_session_tags().with_conditions(no_external_id)
                    for role in workers
                )
            ),
            description="Punctual: calls AWS targets (targetArnPatterns only; own resources denied)",
            max_session_duration=cdk.Duration.hours(1),
        )
        grant_targets(self.role, config.target_arn_patterns, policy_scope=self.role)
        for role in workers:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="AssumeTargetRole",
                    actions=list(c.ASSUME_ROLE_ACTIONS),
                    resources=[self.role.role_arn],
                )
            )

    def deny(self, own_arns: Sequence[str]) -> None:
        """Deny every invoking action on the stack's own resources, whatever the patterns allow."""
        resources: list[str] = []
        for arn in own_arns:
            resources.append(arn)
            resources.append(f"{arn}:*")  # qualified: function versions and aliases, revisions
        # In statements of at most DENY_RESOURCES_A_STATEMENT: with many queues (queueCount 6 and up)
        # the role's policy outgrows IAM's inline size and CDK moves statements to managed policies;
        # one statement holding them all left the inline policy empty, which cdk-nag could not read
        # (QA27: 'Rule threw an error during validation', the synth failed).
        for index in range(0, len(resources), DENY_RESOURCES_A_STATEMENT):
            part = index // DENY_RESOURCES_A_STATEMENT
            self.role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="OwnResourcesAreNeverTargets" + (str(part) if part else ""),
                    effect=iam.Effect.DENY,
                    actions=list(OWN_RESOURCE_DENIED_ACTIONS),
                    resources=resources[index : index + DENY_RESOURCES_A_STATEMENT],
                )
            )


def execution_role_resource(prefix: str) -> str:
    """The roles a worker may assume as execution roles: any account's, after ``role/`` the prefix."""
    return f"arn:{cdk.Aws.PARTITION}:iam::*:role/{prefix}*"


def execution_role_conditions(tag: str, *, assume: bool) -> dict[str, dict[str, str]]:
    """The conditions of the workers' execution-role grant (see :func:`grant_execution_roles`).

    ``iam:ResourceTag/<tag>`` is a condition key of the ``role`` resource for both ``sts:AssumeRole``
    and ``sts:TagSession``; ``sts:ExternalId`` only of AssumeRole (Service Authorization Reference,
    "Actions, resources, and condition keys for AWS Security Token Service").
    """
    conditions: dict[str, dict[str, str]] = {"StringEquals": {f"iam:ResourceTag/{tag}": "true"}}
    if assume:
        conditions["Null"] = {"sts:ExternalId": "false"}  # always sent: the tenant's id
    return conditions


def grant_execution_roles(role: iam.IRole, config: PunctualConfig) -> None:
    """A worker may assume only the execution roles that opted in to this deployment.

    A role opted in when it carries the tag ``executionRoleTag`` (default
    ``punctual:execution-role``) with the value ``true`` and, when the deployment sets
    ``executionRolePrefix``, its path and name start with it. IAM enforces both here, whatever a
    role's trust policy says: a role that trusts the deployment's account without an external id
    (the IAM console's "this account" default, or another account's role that trusts this one)
    cannot be assumed for anyone's job unless its owner tagged it. The tenant's trust policy must
    still name the worker roles and require ``sts:ExternalId`` equal to the tenant's id, which the
    worker always sends (the AssumeRole statement requires one).
    """
    resource = execution_role_resource(config.execution_role_prefix)
    for action, sid, assume in (
        ("sts:AssumeRole", "AssumeJobExecutionRoles", True),
        ("sts:TagSession", "TagJobExecutionRoleSessions", False),
    ):
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid=sid,
                actions=[action],
                resources=[resource],
                conditions=execution_role_conditions(config.execution_role_tag, assume=assume),
            )
        )
    rendered = resource.replace(cdk.Aws.PARTITION, "<AWS::Partition>")
    acknowledge(
        role,
        f"IAM5[Resource::{rendered}]",
        "Per-job execution roles (EventBridge Scheduler's model): a tenant names a role in its own "
        "account. IAM lets the worker assume only roles that opted in (the executionRoleTag tag, and "
        "executionRolePrefix when set), and only with an external id; the role's trust policy, which "
        "must name this worker and require the tenant's id as sts:ExternalId, grants the rest.",
    )


class OwnArns(Construct):
    """The SSM parameter listing the stack's own resources; readers get ssm:GetParameter on it."""

    def __init__(self, scope: Construct, construct_id: str, *, stack_name: str) -> None:
        super().__init__(scope, construct_id)
        self.name = own_arns_parameter_name(stack_name)
        # Built from the name, not from the parameter: the readers' policies must not depend on
        # the parameter, which depends on them (it lists their functions).
        self.arn = f"arn:{cdk.Aws.PARTITION}:ssm:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:parameter{self.name}"

    def publish(self, arns: Sequence[str]) -> ssm.StringParameter:
        return ssm.StringParameter(
            self,
            "Parameter",
            parameter_name=self.name,
            string_value=cdk.Fn.join(",", list(arns)),
            description="Punctual: ARNs of the stack's own resources, never accepted as job targets",
            tier=ssm.ParameterTier.ADVANCED if len(arns) > 30 else ssm.ParameterTier.STANDARD,
        )

    def grant_read(self, role: iam.IRole) -> None:
        role.add_to_principal_policy(iam.PolicyStatement(actions=["ssm:GetParameter"], resources=[self.arn]))


class TokenKey(Construct):
    """The paging-token HMAC key, generated at deploy.

    The multi-Region profile shares one key between its Regions, so that a ``next_token`` one
    Region's API gave pages in another's (a client that fails over mid-listing): the home
    Region's stack makes it, named ``name``, with a replica in each of ``replica_regions``; the
    other Regions' stacks make none (``replica``) and read their own Region's replica, by name.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str | None = None,
        replica_regions: Sequence[str] = (),
        replica: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        if replica:
            if name is None:
                raise ValueError("a replica paging-token key is read by its name")
            self.secret: secretsmanager.ISecret = secretsmanager.Secret.from_secret_name_v2(
                self, "Secret", name
            )
            return
        self.secret = secretsmanager.Secret(
            self,
            "Secret",
            secret_name=name,
            description="Punctual: HMAC key of the API's paging tokens (next_token)",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=64, exclude_punctuation=True
            ),
            replica_regions=[secretsmanager.ReplicaRegion(region=r) for r in replica_regions] or None,
        )
        acknowledge(
            self.secret,
            "SMG4",
            "The paging-token key only authenticates next_token values, which live for one listing; "
            "a rotation would only invalidate the listings in progress. Rotate by putting a new "
            "random value in the secret and letting the API functions restart.",
        )

    def grant_read(self, role: iam.IRole) -> None:
        # A replica read by name has no full ARN: its policy names it with any suffix.
        arn = self.secret.secret_full_arn or f"{self.secret.secret_arn}-??????"
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[arn])
        )
