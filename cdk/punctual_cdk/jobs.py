"""Jobs declared as infrastructure: :class:`Job`, registered by the ``Custom::PunctualJob`` resource.

``Job(stack, "NightlyReport", scheduler=punctual, schedule="cron(0 2 * * ? *)",
target=LambdaTarget(report_fn), retry=RetryPolicy(max_attempts=5), overlap="skip")``

* The spec is checked at synth with the API's own model (``punctual.api.schemas.JobInput``)
  and webhook guard: a job the API would refuse fails ``cdk synth``, naming the field.
* Each stack gets one provider function (:class:`JobProvider`) whose role calls the API
  (SigV4). That role's unique id is the tenant of every job the stack declares: the identity of
  the declaring stack, never a name the template chooses.
* An AWS target is called as an execution role the job makes (or ``role=`` gives): trusted by
  the scheduler's worker roles with the provider role's id as ``sts:ExternalId`` (and the
  session tag the workers send), opted in to the scheduler (its ``executionRoleTag`` = ``true``,
  under its ``executionRolePrefix`` when it has one), and granted that one target only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct
from pydantic import BaseModel, ValidationError

from punctual_cdk.nag import acknowledge, nag_text
from punctual_cdk.scheduler import Punctual
from punctual_cdk.targets import JobTarget

PROVIDER_DIR = Path(__file__).resolve().parent / "provider"
PROVIDER_ID = "PunctualJobProvider"
PROVIDER_TIMEOUT_S = 120  # each request is a few API calls; CloudFormation waits up to an hour


class JobSpecError(ValueError):
    """A declared job the API would refuse (raised at synth)."""


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

    @classmethod
    def of(cls, scheduler: Punctual | SchedulerRef) -> SchedulerRef:
        if isinstance(scheduler, SchedulerRef):
            return scheduler
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
        )


class JobProvider(Construct):
    """The provider function of ``Custom::PunctualJob`` in one stack (one per stack and API)."""

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
        api_paths = [
            f"{scheduler.execute_api_arn}/*/v1/jobs/*",
            f"{scheduler.execute_api_arn}/GET/schedules/*",
        ]
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["execute-api:Invoke"], resources=api_paths)
        )
        for path in api_paths:
            acknowledge(
                self.role,
                f"IAM5[Resource::{nag_text(self, path)}]",
                "The provider calls the job API for the jobs its stack declares, whose ids CloudFormation "
                "requests choose: every job path, and the read of a job's schedule ARN.",
            )
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

    @classmethod
    def of(cls, scope: Construct, scheduler: SchedulerRef) -> JobProvider:
        """The stack's provider, made on first use."""
        stack = cdk.Stack.of(scope)
        found = stack.node.try_find_child(PROVIDER_ID)
        if isinstance(found, JobProvider):
            return found
        return cls(stack, PROVIDER_ID, scheduler=scheduler)


class Alert:
    """An alert rule of a job, sent to a typed target (``on``: the conditions, ``options``:
    ``late_after_seconds``, ``min_interval_seconds``, ``format``)."""

    def __init__(self, target: JobTarget, *, on: list[str], **options: Any) -> None:
        self.target = target
        self.fields = {"on": on, **options}


def _plain(value: Any) -> Any:
    """A spec value as JSON: the core's models dumped, enums by value, lists and dicts walked."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


class Job(Construct):
    """A job in Punctual, declared in the stack (``Custom::PunctualJob``).

    Parameters
    ----------
    scheduler
        The :class:`~punctual_cdk.Punctual` construct, or a :class:`SchedulerRef` to one
        deployed elsewhere.
    schedule, target
        As the API takes them; ``target`` is typed (:mod:`punctual_cdk.targets`).
    role
        The execution role for an AWS target (default: one made for this job).
    alerts
        :class:`Alert` rules.
    **spec
        Any other field of the job spec (``payload``, ``retry``, ``overlap``, ``catchup``,
        ``timezone``, ``timeout_seconds``, ...), as values or the core's models.

    Attributes
    ----------
    job_id, arn
        The job's id and ARN (``Fn::GetAtt`` of the resource).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        scheduler: Punctual | SchedulerRef,
        schedule: str,
        target: JobTarget,
        role: iam.IRole | None = None,
        alerts: list[Alert] | None = None,
        **spec: Any,
    ) -> None:
        super().__init__(scope, construct_id)
        ref = SchedulerRef.of(scheduler)
        self.provider = JobProvider.of(self, ref)
        alerts = alerts or []
        rest = {key: _plain(value) for key, value in spec.items()}
        rest.setdefault("name", construct_id)
        sample_role = {"role_arn": "arn:aws:iam::123456789012:role/placeholder"}

        def document(real: bool, role_arn: str | None) -> dict[str, Any]:
            with_role = {"role_arn": role_arn} if role_arn else {}
            out = {
                **rest,
                "schedule": schedule,
                "target": {**(target.render() if real else target.sample()), **with_role},
            }
            if alerts:
                out["alerts"] = [
                    {
                        **alert.fields,
                        "target": {
                            **(alert.target.render() if real else alert.target.sample()),
                            **(with_role if alert.target.needs_role else {}),
                        },
                    }
                    for alert in alerts
                ]
            return out

        needs_role = target.needs_role or any(alert.target.needs_role for alert in alerts)
        check(document(False, sample_role["role_arn"] if needs_role else None), ref, self.node.path)
        self.role: iam.IRole | None = None
        if needs_role:
            self.role = role or self._execution_role(ref)
            for each in (target, *(alert.target for alert in alerts)):
                each.grant(self.role)
        self.resource = cdk.CustomResource(
            self,
            "Resource",
            service_token=self.provider.function.function_arn,
            resource_type="Custom::PunctualJob",
            properties={
                "ApiUrl": ref.api_url,
                "Spec": cdk.Stack.of(self).to_json_string(
                    document(True, self.role.role_arn if self.role else None)
                ),
            },
        )
        self.job_id = self.resource.get_att_string("JobId")
        self.arn = self.resource.get_att_string("Arn")

    def _execution_role(self, ref: SchedulerRef) -> iam.Role:
        """The job's execution role: trusted by the workers (the tenant's id as external id, the
        session tag they send) and opted in to the scheduler (its tag; its path or name prefix)."""
        prefix = ref.execution_role_prefix
        placement: dict[str, str] = {}
        if prefix.endswith("/"):
            placement["path"] = "/" + prefix
        elif prefix:
            placement["role_name"] = (prefix + cdk.Names.unique_id(self))[:64]
        role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.CompositePrincipal(
                *(iam.ArnPrincipal(arn).with_session_tags() for arn in ref.worker_role_arns)
            ),
            external_ids=[self.provider.tenant],
            description=f"Punctual job {self.node.path}: what its workers may call",
            **placement,  # type: ignore[arg-type]
        )
        cdk.Tags.of(role).add(ref.execution_role_tag, "true")
        return role


def check(document: dict[str, Any], ref: SchedulerRef, where: str) -> None:
    """Validate a job as the API would (model, schedule, webhook guard); raise :class:`JobSpecError`."""
    from punctual.api.schemas import JobInput
    from punctual.delivery.targets.webhooks.guard import BlockedTargetError, guard_url
    from punctual.models import HttpTarget as HttpTargetModel

    try:
        spec = JobInput.model_validate_json(json.dumps(document)).spec()
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first.get("loc", ()))
        raise JobSpecError(f"Job {where}: {field}: {first.get('msg')}") from None
    if isinstance(spec.target, HttpTargetModel) and not cdk.Token.is_unresolved(spec.target.url):
        try:
            guard_url(spec.target.url, list(ref.allow_cidrs), resolve=False)
        except (BlockedTargetError, ValueError) as exc:
            raise JobSpecError(f"Job {where}: target.url: {exc}") from None
