"""The whole scheduler as one construct, :class:`Punctual`: one construct per concern, wired together.

``Punctual(stack, "Scheduler", shard_count=512, alarm_emails=["ops@example.com"])`` adds it to a
user's own stack; ``infra/app.py`` is this repository's app around it (the construct's id there
is ``Default``, which CDK leaves out of logical ids, so the template is the one the stack had).

storage (table, keys) → queues → dispatch (tick, state machine, poller) → workers (Lambda, ECS)
→ api → chain audit (the auditor) → observability → console (the dashboard's jobs-and-runs
widget). The runtime reads its configuration from ``PUNCTUAL_*`` variables that this stack sets
identically on every function and on the ECS task.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct

from punctual.runtime.settings import DEPLOYED, Settings, env_value
from punctual_cdk import constants as c
from punctual_cdk.components.api import Api
from punctual_cdk.components.auditing import ChainAuditor
from punctual_cdk.components.console import Console
from punctual_cdk.components.dispatch import Dispatch
from punctual_cdk.components.events import ExecutionEvents
from punctual_cdk.components.functions import LambdaRuntime
from punctual_cdk.components.observability import Observability
from punctual_cdk.components.queues import Queues
from punctual_cdk.components.security import OwnArns, TargetRole, TokenKey, own_arns_parameter_name
from punctual_cdk.components.storage import Storage
from punctual_cdk.components.workers import Workers
from punctual_cdk.config import ConfigError, PunctualConfig
from punctual_cdk.nag import acknowledge, nag_text


class Punctual(Construct):
    """Everything Punctual runs on, in the stack it is added to (one per stack).

    Parameters
    ----------
    config
        The settings, validated (:class:`~punctual_cdk.config.PunctualConfig`); or
    storage
        Makes the table and keys (called with this construct) instead of :class:`Storage`: the
        multi-Region profile's :class:`~punctual_cdk.multi_region.GlobalStorage`.
    token_key
        Makes the paging-token key instead of a :class:`TokenKey` of this stack's own: the
        multi-Region profile's one key, shared by its Regions.
    **settings
        any of its fields by name (``shard_count=512``), the rest at their defaults, validated
        with the same rules as the app's context (a bad value raises ``ConfigError`` naming it).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PunctualConfig | None = None,
        storage: Callable[[Construct], Storage] | None = None,
        token_key: Callable[[Construct], TokenKey] | None = None,
        **settings: Any,
    ) -> None:
        super().__init__(scope, construct_id)
        if config is not None and settings:
            raise ConfigError("Punctual: pass config or settings by name, not both")
        if "stack_name" in settings:  # (QA28: taken, and it named nothing)
            raise ConfigError(
                "stack_name: the scheduler's resources are named by the stack it is added to: name that"
                " stack (cdk.Stack(..., stack_name=...))"
            )
        config = config or PunctualConfig.from_settings(**settings)
        stack = cdk.Stack.of(self)
        if any(isinstance(child, Punctual) for child in stack.node.find_all() if child is not self):
            raise ConfigError(f"Punctual: stack {stack.node.path} has one already (one per stack)")
        self.stack_name = stack.stack_name
        self.config = config
        # ``storage`` makes the table and keys instead (the multi-Region profile's GlobalStorage).
        self.storage = storage(self) if storage is not None else Storage(self, "Storage", config=config)
        self.queues = Queues(self, "Queues", config=config)
        self.runtime = LambdaRuntime(self, "Runtime", config=config)
        self.own_arns = OwnArns(self, "OwnArns", stack_name=self.stack_name)
        self.token_key = token_key(self) if token_key is not None else TokenKey(self, "PagingTokenKey")
        self.events = ExecutionEvents(self, "Events", config=config, stack_name=self.stack_name)
        environment = runtime_environment(config, self.storage, self.queues, self.stack_name)
        environment["PUNCTUAL_EVENTS_BUS"] = self.events.bus_arn

        self.dispatch = Dispatch(
            self,
            "Dispatch",
            config=config,
            runtime=self.runtime,
            storage=self.storage,
            queues=self.queues,
            environment=environment,
        )
        self.workers = Workers(
            self,
            "Workers",
            config=config,
            runtime=self.runtime,
            storage=self.storage,
            queues=self.queues,
            environment=environment,
        )
        self.api = Api(
            self,
            "Api",
            config=config,
            runtime=self.runtime,
            storage=self.storage,
            queues=self.queues,
            environment=environment,
        )
        # The API reads the paging-token key; the API and the workers read the own-resource list.
        self.token_key.grant_read(self.api.handler.role)
        self.api.handler.function.add_environment(
            "PUNCTUAL_TOKEN_KEY_SECRET", self.token_key.secret.secret_arn
        )
        for role in (self.api.handler.role, *self.workers.roles):
            self.own_arns.grant_read(role)
        # Execution events: the pollers and the workers publish them, on the chosen bus only; the
        # tick its Burst Shortfall events (the chain auditor, made below, its Chain Repaired ones).
        publishers = [*(p.role for p in self.dispatch.pollers), *self.workers.roles, self.dispatch.tick.role]
        for role in publishers:
            self.events.grant_put(role)
        # AWS targets are called as this role (or a job's execution role), never as a worker's own.
        self.target_role = TargetRole(self, "TargetRole", config=config, workers=self.workers.roles)
        self.workers.worker.function.add_environment(
            "PUNCTUAL_TARGET_ROLE_ARN", self.target_role.role.role_arn
        )
        for container in self.workers.containers:
            container.add_environment("PUNCTUAL_TARGET_ROLE_ARN", self.target_role.role.role_arn)
        self._predictive_scaling()
        self._ecs_lane_readiness()
        self.auditor = ChainAuditor(
            self,
            "ChainAudit",
            config=config,
            runtime=self.runtime,
            storage=self.storage,
            queues=self.queues,
            events_bus=self.events,
            environment=environment,
        )
        # The stack's bus refuses every principal but its publishers, the auditor included.
        self.events.only_publishers([*publishers, self.auditor.handler.role])

        self.observability = Observability(
            self,
            "Observability",
            config=config,
            table=self.storage.table,
            queues=self.queues,
            poller=self.dispatch.poller,
            tick=self.dispatch.tick,
            worker=self.workers.worker,
            api=self.api.handler,
            state_machine=self.dispatch.state_machine,
            lean_poller=self.dispatch.lean_poller,
            burst_service=self.workers.burst_service,
            burst_state_machine=self.dispatch.burst_state_machine,
            shown_alarms=self.auditor.alarms,
        )
        self.auditor.notify(self.observability.topic)
        self.console = Console(
            self,
            "Console",
            config=config,
            runtime=self.runtime,
            storage=self.storage,
            environment=environment,
            dashboard=self.observability.dashboard,
        )

        own = self.own_resource_arns()
        # The list the runtime reads also names every role of the stack: none is a job's role_arn.
        self.own_arns.publish([*own, *self.own_role_arns()])
        self.target_role.deny(own)

        cdk.CfnOutput(self, "ApiUrl", value=self.api.url, description="Base URL (SigV4, service execute-api)")
        cdk.CfnOutput(self, "TableName", value=self.storage.table.table_name)
        cdk.CfnOutput(self, "StateMachineArn", value=self.dispatch.state_machine.state_machine_arn)
        cdk.CfnOutput(self, "FailedQueueUrl", value=self.queues.failed.queue_url)
        cdk.CfnOutput(self, "AlarmTopicArn", value=self.observability.topic.topic_arn)
        # The worker roles of the deployment's other Regions (multi_region.MultiRegionPunctual sets
        # them): they claim its slots too, and so assume its jobs' execution roles
        self.peer_worker_role_arns: tuple[str, ...] = ()
        self.worker_role_arns_output = cdk.CfnOutput(
            self,
            "WorkerRoleArns",
            value=cdk.Fn.join(",", [role.role_arn for role in self.workers.roles]),
            description="The roles a tenant's execution role (role_arn) must trust",
        )

    def _predictive_scaling(self) -> None:
        """The tick sizes the workers ahead of each planned burst (``punctual.dispatch.scaling``): it is
        told what to scale and the capacity figures, and may change those resources only."""
        config, tick, workers = self.config, self.dispatch.tick, self.workers
        function, role = tick.function, tick.role
        sources = workers.event_sources
        cpu_share = config.ecs_burst_cpu / 1024
        mapping_ids = [source.event_source_mapping_id for source in sources]
        for name, value in {
            "PUNCTUAL_WORKER_EVENT_SOURCE_MAPPINGS": cdk.Fn.join(",", mapping_ids),
            "PUNCTUAL_WORKER_MAX_CONCURRENCY": str(config.worker_max_concurrency),
            "PUNCTUAL_BURST_WORKERS": str(config.ecs_burst_tasks),
            "PUNCTUAL_BURST_WORKERS_MAX": str(max(config.ecs_burst_tasks, config.ecs_burst_tasks_max)),
            "PUNCTUAL_BURST_WORKER_MESSAGES_PER_S": str(c.ECS_BURST_MESSAGES_PER_S_PER_VCPU * cpu_share),
        }.items():
            function.add_environment(name, value)
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=list(c.TICK_EVENT_SOURCE_ACTIONS),
                resources=[s.event_source_mapping_arn for s in sources],
            )
        )
        Queues.grant(role, self.queues.short, c.TICK_QUEUE_ACTIONS)  # the backlog a burst leaves
        service = workers.burst_service
        if service is not None:
            function.add_environment("PUNCTUAL_BURST_SERVICE", service.service_arn)
            function.add_environment("PUNCTUAL_BURST_CLUSTER", workers.cluster.cluster_arn)
            statement = iam.PolicyStatement(
                actions=list(c.TICK_BURST_SERVICE_ACTIONS), resources=[service.service_arn]
            )
            role.add_to_principal_policy(statement)

    def _ecs_lane_readiness(self) -> None:
        """The tick raises the ECS worker service's minimum while ECS-lane slots are in sight
        (``punctual.dispatch.ecs_lane``): told the service's scalable target, it may read and
        register that target's capacity and describe and update that service only."""
        config, tick, workers = self.config, self.dispatch.tick, self.workers
        if config.ecs_ready_tasks <= config.ecs_min_tasks:
            return  # nothing to raise: the tick leaves the service alone
        function, role = tick.function, tick.role
        resource_id = f"service/{workers.cluster.cluster_name}/{workers.service.service_name}"
        for name, value in {
            "PUNCTUAL_ECS_SERVICE_RESOURCE_ID": resource_id,
            "PUNCTUAL_ECS_MIN_TASKS": str(config.ecs_min_tasks),
            "PUNCTUAL_ECS_READY_TASKS": str(config.ecs_ready_tasks),
            "PUNCTUAL_ECS_LANE_SIGHT_S": str(c.ECS_LANE_SIGHT_S),
        }.items():
            function.add_environment(name, value)
        # A scalable target's ARN ends in an id the service assigns (not in the template): the
        # targets of this account and Region, of which the tick registers the one it is told.
        targets = (
            f"arn:{cdk.Aws.PARTITION}:application-autoscaling:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}"
            ":scalable-target/*"
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=list(c.TICK_ECS_LANE_READ_ACTIONS), resources=["*"])
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=list(c.TICK_ECS_LANE_WRITE_ACTIONS), resources=[targets])
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=list(c.TICK_ECS_LANE_SERVICE_ACTIONS), resources=[workers.service.service_arn]
            )
        )
        acknowledge(
            role,
            f"IAM5[Resource::{nag_text(role, targets)}]",
            "a scalable target's ARN ends in an id Application Auto Scaling assigns, not known to the "
            "template: the tick registers only the ECS worker service's target, the one it is told",
        )

    def own_role_arns(self) -> list[str]:
        """Every IAM role of this stack (the target role above all): never a job's execution role."""
        return _role_arns_of(self)

    def own_resource_arns(self) -> list[str]:
        """Every resource of this stack a target could name: queues (DLQs too), table, functions,
        state machine, alarm topic, the events bus it made, cluster, task definitions."""
        functions = [
            self.api.handler,
            *self.dispatch.pollers,
            self.dispatch.tick,
            self.workers.worker,
            self.console.handler,  # it renders any tenant's jobs: never a tenant's target
            self.auditor.handler,
        ]
        return [
            *(q.queue_arn for q in [*self.queues.work_queues, *self.queues.dead_letter, self.queues.failed]),
            self.storage.table.table_arn,
            *(f.function.function_arn for f in functions),
            *(machine.state_machine_arn for machine in self.dispatch.state_machines),
            self.observability.topic.topic_arn,
            self.events.bus.event_bus_arn,
            self.workers.cluster.cluster_arn,
            # The family, not one revision: the target role's Deny then covers every revision.
            *(
                f"arn:{cdk.Aws.PARTITION}:ecs:{cdk.Aws.REGION}:{cdk.Aws.ACCOUNT_ID}:task-definition/{t.family}"
                for t in self.workers.task_definitions
            ),
        ]


def _role_arns_of(scope: Construct) -> list[str]:
    """The ARN of every IAM role in ``scope``, custom resource providers' included: those CDK makes
    once per stack for constructs of ``scope`` (a VPC's default security group restriction, say)
    sit at the stack's top level, outside ``scope``, and are included too."""
    stack = cdk.Stack.of(scope)
    providers = [
        child
        for child in stack.node.children
        if child.node.id.startswith("Custom::") and child.node.id.endswith("CustomResourceProvider")
    ]
    nodes = [*scope.node.find_all(), *(n for p in providers for n in p.node.find_all())]
    return [
        cdk.Token.as_string(node.get_att("Arn"))
        for node in nodes
        if isinstance(node, cdk.CfnResource) and node.cfn_resource_type == "AWS::IAM::Role"
    ]


def runtime_environment(
    config: PunctualConfig, storage: Storage, queues: Queues, stack_name: str
) -> dict[str, str]:
    """The ``PUNCTUAL_*`` and Powertools variables every function and the ECS task read: the
    deployed settings (:data:`punctual.runtime.settings.DEPLOYED`, from the context) and the resources."""
    # The settings the stack's resources give (names from the one definition, like the rest).
    resources = {
        "table_name": storage.table.table_name,
        "short_queue_urls": cdk.Fn.join(",", [q.queue_url for q in queues.short]),
        "long_queue_urls": cdk.Fn.join(",", [q.queue_url for q in queues.long]),
        "failed_queue_url": queues.failed.queue_url,
        "own_arns_parameter": own_arns_parameter_name(stack_name),
        "kms_key_id": storage.secrets_key.key_arn,
        "dispatch_key_secret_arn": storage.dispatch_key.secret_arn,
    }
    return {
        **{Settings.variable(field): value for field, value in resources.items()},
        # Every setting the deployment chooses in its context, derived from the one definition.
        **{Settings.variable(field): env_value(getattr(config, field)) for field in DEPLOYED},
        "POWERTOOLS_SERVICE_NAME": c.POWERTOOLS_SERVICE_NAME,
        "POWERTOOLS_METRICS_NAMESPACE": c.METRICS_NAMESPACE,
        "LOG_LEVEL": config.log_level,
    }
