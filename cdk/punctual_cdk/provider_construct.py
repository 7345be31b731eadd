"""The provider of a stack's declared jobs and calendars (``Custom::PunctualJob``,
``Custom::PunctualCalendar``): one function per stack, whose role is the API's tenant of both, and
what it needs of a deployment (:class:`SchedulerRef`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from punctual_cdk.nag import acknowledge, acknowledge_at_synth, nag_text
from punctual_cdk.scheduler import Punctual

PROVIDER_DIR = Path(__file__).resolve().parent / "provider"
PROVIDER_ID = "PunctualJobProvider"
PROVIDER_TIMEOUT_S = 120  # each request is a few API calls; CloudFormation waits up to an hour


@dataclass(frozen=True)
class SchedulerRef:
    """What a job needs of a deployment: its API URL, the ARN prefix IAM authorises calls
    against (``arn:aws:execute-api:<region>:<account>:<api id>/<stage>``), its worker roles."""

    api_url: str
    execute_api_arn: str
    worker_role_arns: tuple[str, ...]
    allow_cidrs: tuple[str, ...] = ()
    execution_role_tag: str = "punctual:execution-role"  # the opt-in (issue 31)
    execution_role_prefix: str = ""
    # A multi-Region deployment's other Regions' worker roles (they run its slots too): trusted by
    # their ARN as a condition, so a Region's stack deployed before theirs may name them (QA30)
    peer_worker_role_arns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Refuse at synth what would deploy a trust policy or a provider that cannot work (QA26: a
        string of worker role ARNs, such as the WorkerRoleArns output, was read letter by letter:
        principals "a", "r", "n", ... that IAM refused at deploy; an ApiUrl that is not a URL
        failed each job's deploy)."""
        from punctual.delivery.targets.webhooks.guard import parse_allow_cidrs

        roles = self.worker_role_arns
        if not isinstance(roles, list | tuple) or not all(isinstance(arn, str) for arn in roles):
            raise TypeError(
                "SchedulerRef(worker_role_arns): a list of role ARNs (the WorkerRoleArns output, split at"
                f" its commas), not {type(roles).__name__}"
            )
        peers = self.peer_worker_role_arns  # plain role ARNs: their account is read from them
        if not isinstance(peers, list | tuple) or not all(
            isinstance(arn, str) and re.fullmatch(r"arn:[\w-]+:iam::\d{12}:role/\S+", arn) for arn in peers
        ):
            raise TypeError(
                f"SchedulerRef(peer_worker_role_arns): a list of IAM role ARNs, not {peers!r}"[:300]
            )
        cidrs = self.allow_cidrs  # (QA28: "10.0.0.0/8" was read letter by letter, as the roles were)
        if not isinstance(cidrs, list | tuple) or not all(isinstance(cidr, str) for cidr in cidrs):
            raise TypeError(
                "SchedulerRef(allow_cidrs): a list of CIDR blocks (the targetAllowCidrs setting),"
                f" not {type(cidrs).__name__}"
            )
        try:
            parse_allow_cidrs(cidr for cidr in cidrs if not cdk.Token.is_unresolved(cidr))
        except ValueError as exc:
            raise ValueError(f"SchedulerRef(allow_cidrs): {exc}") from None
        url = self.api_url
        if not (isinstance(url, str) and (cdk.Token.is_unresolved(url) or _is_url(url))):
            raise ValueError(
                "SchedulerRef(api_url): the Punctual stack's ApiUrl output"
                f" (https://<api id>.execute-api.<region>.amazonaws.com/<stage>), not {url!r}"
            )
        arn = self.execute_api_arn
        if not isinstance(arn, str) or not (cdk.Token.is_unresolved(arn) or ":execute-api:" in arn):
            raise ValueError(
                "SchedulerRef(execute_api_arn): arn:aws:execute-api:<region>:<account>:<api id>/<stage>,"
                f" not {arn!r}"
            )

    @classmethod
    def of(cls, scheduler: Punctual | SchedulerRef) -> SchedulerRef:
        if isinstance(scheduler, SchedulerRef):
            return scheduler
        if not isinstance(scheduler, Punctual):  # (QA: None was an AttributeError from deep inside)
            raise TypeError(
                f"scheduler: a Punctual construct or a SchedulerRef, not {type(scheduler).__name__}"
            )
        api = scheduler.api.rest_api
        return cls(
            api_url=scheduler.api.url,
            execute_api_arn=api.arn_for_execute_api("*", "/", api.deployment_stage.stage_name).removesuffix(
                "/*/"
            ),
            worker_role_arns=tuple(role.role_arn for role in scheduler.workers.roles),
            allow_cidrs=scheduler.config.target_allow_cidrs,
            execution_role_tag=scheduler.config.execution_role_tag,
            execution_role_prefix=scheduler.config.execution_role_prefix,
            peer_worker_role_arns=scheduler.peer_worker_role_arns,
        )


class JobProvider(Construct):
    """The provider function of ``Custom::PunctualJob`` and ``Custom::PunctualCalendar`` in one stack
    (one per stack and API)."""

    def __init__(self, scope: Construct, construct_id: str, *, scheduler: SchedulerRef) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(
            self, "Logs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=cdk.RemovalPolicy.DESTROY
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Punctual job provider: the tenant of the jobs this stack declares",
        )
        self.log_group.grant_write(self.role)
        self._apis: set[str] = set()
        self.serve(scheduler)  # (the API's id is another stack's output when the scheduler is)
        acknowledge(
            self.role,
            f"IAM5[Resource::{nag_text(self, self.log_group.log_group_arn)}:*]",
            "The provider writes its own log streams, named by Lambda at run time, in its own log group.",
        )
        self.function = lambda_.Function(
            self,
            "Function",
            description="Punctual: registers the jobs this stack declares (Custom::PunctualJob)",
            runtime=lambda_.Runtime.PYTHON_3_14,
            architecture=lambda_.Architecture.ARM_64,
            handler="handler.handler",
            code=lambda_.Code.from_asset(str(PROVIDER_DIR), exclude=["__pycache__", "*.pyc"]),
            role=self.role,
            log_group=self.log_group,
            timeout=cdk.Duration.seconds(PROVIDER_TIMEOUT_S),
            memory_size=256,
        )
        self.tenant = self.role.role_id  # the API's tenant for these jobs (the role's unique id)

    def _finding(self, path: str) -> str:
        return f"IAM5[Resource::{nag_text(self, path)}]"

    def serve(self, scheduler: SchedulerRef) -> None:
        """Let the provider call ``scheduler``'s API too (once per API)."""
        if scheduler.execute_api_arn in self._apis:
            return
        self._apis.add(scheduler.execute_api_arn)
        paths = _api_paths(scheduler)
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["execute-api:Invoke"], resources=paths)
        )
        for path in paths:
            acknowledge_at_synth(self.role, partial(self._finding, path), _PATHS_REASON)

    @classmethod
    def of(cls, scope: Construct, scheduler: SchedulerRef) -> JobProvider:
        """The stack's provider, made on first use; one that serves another scheduler's jobs too
        is let call its API (QA: the jobs of a stack's second scheduler were refused, 403)."""
        stack = cdk.Stack.of(scope)
        found = stack.node.try_find_child(PROVIDER_ID)
        if isinstance(found, JobProvider):
            found.serve(scheduler)
            return found
        return cls(stack, PROVIDER_ID, scheduler=scheduler)


def _is_url(text: str) -> bool:
    try:
        parts = urlsplit(text)
        return parts.scheme in ("https", "http") and bool(parts.hostname)
    except ValueError:  # (a host in brackets that is no IPv6 address)
        return False


def other_deployments(one: Punctual | SchedulerRef, other: Punctual | SchedulerRef) -> bool:
    """Whether two schedulers are known at synth to be two deployments: two ``Punctual``
    constructs, or two references whose execute-api ARNs are known and differ (a token is not)."""
    if isinstance(one, Punctual) and isinstance(other, Punctual):
        return one is not other
    if isinstance(one, SchedulerRef) and isinstance(other, SchedulerRef):
        arns = (one.execute_api_arn, other.execute_api_arn)
        return not any(cdk.Token.is_unresolved(arn) for arn in arns) and arns[0] != arns[1]
    return False


def after_its_api(resource: cdk.CustomResource, scheduler: Punctual | SchedulerRef) -> None:
    """A declared job or calendar of the scheduler's own stack is created after its API and deleted
    before it (QA: on a stack's delete, the API's permission to call its function could go first,
    and the job's delete then got API Gateway's 500s until the stack was DELETE_FAILED)."""
    if isinstance(scheduler, Punctual) and cdk.Stack.of(scheduler) is cdk.Stack.of(resource):
        resource.node.add_dependency(scheduler.api)


_PATHS_REASON = (
    "The provider calls the API for the jobs and calendars its stack declares, whose ids CloudFormation"
    " requests choose: every job and calendar path, and the read of a job's schedule ARN."
)


def _api_paths(scheduler: SchedulerRef) -> list[str]:
    return [
        f"{scheduler.execute_api_arn}/*/v1/jobs/*",
        f"{scheduler.execute_api_arn}/*/v1/calendars/*",
        f"{scheduler.execute_api_arn}/GET/schedules/*",
    ]
