"""Workers: the worker Lambda on the short queues and the ECS worker service on the long queues.

Short lane
    An SQS event source per short queue: batches of ``workerBatchSize``, partial batch
    responses (a failed message is retried alone, its group's later messages wait), and at most
    ``workerMaxConcurrency`` concurrent invocations per queue. The function timeout is the
    longest job the Lambda lane runs (900 s, Lambda's maximum); the queue's visibility timeout
    is that plus a minute, as the mapping requires (at least the function's timeout). The
    worker leases each message for seconds itself: it sets a batch's visibility to the message
    lease (``PUNCTUAL_MESSAGE_LEASE_S``, 7 s) as it arrives and renews it every 4 s while it holds
    it, running or not (``punctual.execution.batch``; the record's own lease, ``PUNCTUAL_LEASE_S``,
    12 s, is heartbeated every 5 s), so a crashed invocation's messages come back within 7 s, and
    a run's message back is its takeover. One that dies before its
    handler runs leaves its batch for the queue's timeout: the pollers re-send those slots
    (``punctual.dispatch.polling.resend``). A redelivery while the first invocation still runs is
    harmless: the claim waits or drops it.

Long lane
    A Fargate service runs ``python -m punctual.execution.worker_service`` (image built from
    ``functions/ecs_worker/Dockerfile`` at deploy time; synth only stages it). It scales out on
    the long queues' waiting messages and scales in to the minimum only when nothing is waiting
    *or in flight*, nor run past SQS's 12-hour visibility cap (``RunsDetached``, which a task
    reports while it holds such a run, its message let go of), so scale-in never stops a task
    in the middle of a job; stopTimeout gives a
    task two minutes to drain after SIGTERM. Tasks run in private subnets, reaching DynamoDB,
    S3 and (optionally) SQS, Logs, ECR, STS and KMS through VPC endpoints, and HTTP targets
    through NAT; with ``workerSubnets`` public, in public subnets with a public IP each and no
    inbound rule (no NAT gateway, no interface endpoint: nothing billed while no task runs).

Burst workers (``ecsBurstTasks`` or ``ecsBurstTasksMax`` > 0; none by default)
    A second Fargate service, same image and cluster, whose container polls the *short* queues
    (``PUNCTUAL_WORKER_LANE=short``) with ``ecsBurstConcurrency`` threads, at a standing
    ``ecsBurstTasks`` tasks of ``ecsBurstCpu`` / ``ecsBurstMemoryMb``. It exists for
    top-of-minute bursts: an SQS event source that found its queue idle starts at 5 concurrent
    invokes and adds 300 a minute, so a 600,000-slot minute drains over a minute whatever the
    worker Lambda's concurrency; tasks already long-polling start taking messages at once. They
    share the short queues with the worker Lambda (FIFO hands a message group to one consumer
    at a time) and take sustained traffic too. They run in heartbeat mode: a receive sets the
    message's visibility to the message lease (``message_lease_s``, 7 s; the short queue's default,
    the Lambda timeout plus a minute, does not apply), and the task's lease keeper renews it every
    4 s while it holds it, from its receive (its heartbeats renew the record's lease, ``lease_s``,
    12 s). A task that dies gives back within the 7 s message lease everything it held, started
    or not, to either consumer: a run's message back is its takeover. Their
    backstop LEASE timer (for a message lost outright) is due past the far threshold, so the LEASE
    timer of each execution
    of a burst goes to a far bucket (256 keys) and not to a near one (8 keys, which 600,000
    LEASE writes in five seconds would overrun 17 times). No scaling on metrics
    (it would come after the burst): the tick sets the desired count ahead of a planned burst, up
    to ``ecsBurstTasksMax``, and back to ``ecsBurstTasks`` after it (predictive scaling,
    ``punctual.dispatch.scaling``); an alarm fires when fewer than ``ecsBurstTasks`` run. The same grants
    as the long-lane service, with consume rights on the short queues instead of the long ones; the queues use
    SQS-managed encryption, so no KMS grant is needed to read them.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from punctual_cdk import constants as c
from punctual_cdk.assets import source_path
from punctual_cdk.components.functions import LambdaRuntime, PunctualFunction, retention
from punctual_cdk.components.metrics import app_metric
from punctual_cdk.components.queues import SEND_ACTIONS, Queues
from punctual_cdk.components.security import grant_execution_roles
from punctual_cdk.components.storage import Storage
from punctual_cdk.config import ConfigError, PunctualConfig
from punctual_cdk.nag import acknowledge

# What the ECS image's build context may contain: the Dockerfile, the core and the pins.
ECS_CONTEXT_EXCLUDES = (
    "*",
    "!requirements.txt",
    "!layers",
    "layers/*",
    "!layers/core",
    "layers/core/*",
    "!layers/core/python",
    "layers/core/python/*",
    "!layers/core/python/punctual",
    "**/__pycache__",
    "**/*.pyc",
    "!functions",
    "functions/*",
    "!functions/ecs_worker",
)

_INTERFACE_ENDPOINTS = {
    "sqs": ec2.InterfaceVpcEndpointAwsService.SQS,
    "logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "ecr.api": ec2.InterfaceVpcEndpointAwsService.ECR,
    "ecr.dkr": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "sts": ec2.InterfaceVpcEndpointAwsService.STS,
    "kms": ec2.InterfaceVpcEndpointAwsService.KMS,
}
_GATEWAY_ENDPOINTS = {
    "dynamodb": ec2.GatewayVpcEndpointAwsService.DYNAMODB,
    "s3": ec2.GatewayVpcEndpointAwsService.S3,
}


class Workers(Construct):
    """The worker Lambda and the ECS worker service, with their roles and scaling."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PunctualConfig,
        runtime: LambdaRuntime,
        storage: Storage,
        queues: Queues,
        environment: dict[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        self._config = config

        # --- short lane: the worker Lambda -------------------------------------------------------
        self.worker: PunctualFunction = runtime.function(
            self,
            "Worker",
            name="worker",
            description="Punctual worker: claims, runs and finishes short executions",
            timeout_s=c.WORKER_TIMEOUT_S,
            memory_mb=config.worker_memory_mb,
            environment=environment,
        )
        self._grant_worker(self.worker.role, storage, queues, consumes=queues.short)
        # The event source mapping polls the short queues as the function's role: SqsEventSource
        # grants it c.EVENT_SOURCE_ACTIONS on them. The tick raises their MaximumConcurrency for
        # a minute that needs it (predictive scaling) and sets it back to this.
        self.event_sources: list[event_sources.SqsEventSource] = []
        for queue in queues.short:
            source = event_sources.SqsEventSource(
                queue,
                batch_size=config.worker_batch_size,
                report_batch_item_failures=True,
                max_concurrency=config.worker_max_concurrency,
            )
            self.worker.function.add_event_source(source)
            self.event_sources.append(source)

        # --- long lane: the ECS worker service ----------------------------------------------------
        self.endpoint_security_group: ec2.SecurityGroup | None = None
        self.vpc = self._vpc()
        # Until the CLI has looked the VPC up, CDK hands out a placeholder VPC (not a valid id).
        self.vpc_lookup_pending = bool(config.vpc_id) and self.vpc.vpc_id != config.vpc_id
        self.cluster = ecs.Cluster(
            self,
            "Cluster",
            vpc=self.vpc,
            container_insights_v2=ecs.ContainerInsights.ENABLED,
        )
        self.containers: list[ecs.ContainerDefinition] = []
        self.task_definition, self.container_logs, self.container = self._task(
            "WorkerTask",
            "WorkerServiceLogs",
            cpu=config.ecs_cpu,
            memory_mib=config.ecs_memory_mib,
            environment={
                **environment,
                "PUNCTUAL_WORKER_GRACE_S": str(c.ECS_DRAIN_GRACE_S),
                "PUNCTUAL_WORKER_STOP_S": str(c.ECS_DRAIN_STOP_S),
            },
            storage=storage,
            queues=queues,
            consumes=queues.long,
        )
        self.security_group = ec2.SecurityGroup(
            self,
            "WorkerServiceSecurityGroup",
            vpc=self.vpc,
            description="Punctual ECS workers: no inbound; outbound to targets and AWS APIs",
            allow_all_outbound=True,
        )
        if self.endpoint_security_group is not None:
            self.endpoint_security_group.add_ingress_rule(
                self.security_group, ec2.Port.tcp(443), "HTTPS from the Punctual ECS workers"
            )
        self.containers.append(self.container)
        self.service = self._service("WorkerService", self.task_definition, config.ecs_min_tasks)
        self._scaling(queues)

        # --- burst workers: a standing service on the short queues (ecsBurstTasks > 0) ----------
        self.burst_task_definition: ecs.FargateTaskDefinition | None = None
        self.burst_container_logs: logs.LogGroup | None = None
        self.burst_service: ecs.FargateService | None = None
        if config.ecs_burst_tasks > 0 or config.ecs_burst_tasks_max > 0:
            self.burst_task_definition, self.burst_container_logs, burst_container = self._task(
                "BurstWorkerTask",
                "BurstWorkerServiceLogs",
                cpu=config.ecs_burst_cpu,
                memory_mib=config.ecs_burst_memory_mb,
                environment={
                    **environment,
                    "PUNCTUAL_WORKER_GRACE_S": str(c.ECS_DRAIN_GRACE_S),
                    "PUNCTUAL_WORKER_STOP_S": str(c.ECS_DRAIN_STOP_S),
                    "PUNCTUAL_WORKER_LANE": "short",  # worker_service receives from the short queues
                    "PUNCTUAL_WORKER_CONCURRENCY": str(config.ecs_burst_concurrency),
                    # The same leases as every worker: their backstop LEASE timers are far
                    # timers all the same (far threshold + a minute), so a burst's go to the far
                    # buckets (shardCount keys), not the few near ones (docs/capacity.md).
                },
                storage=storage,
                queues=queues,
                consumes=queues.short,
            )
            self.containers.append(burst_container)
            # Standing at ecsBurstTasks (0: none at rest); no metric scaling, which would come after
            # the burst: the tick starts more ahead of a planned burst (ecsBurstTasksMax).
            self.burst_service = self._service(
                "BurstWorkerService", self.burst_task_definition, config.ecs_burst_tasks
            )

    @property
    def roles(self) -> list[iam.IRole]:
        """Every role that runs executions: the worker Lambda's and each ECS task's."""
        tasks = [self.task_definition] + ([self.burst_task_definition] if self.burst_task_definition else [])
        return [self.worker.role, *(t.task_role for t in tasks)]

    @property
    def task_definitions(self) -> list[ecs.FargateTaskDefinition]:
        return [self.task_definition] + ([self.burst_task_definition] if self.burst_task_definition else [])

    def _service(
        self, service_id: str, task_definition: ecs.FargateTaskDefinition, desired_count: int
    ) -> ecs.FargateService:
        """A worker service in the private subnets (no public IP), or with ``workerSubnets``
        public in the public ones (a public IP each, no inbound rule); rolling back a failed deploy."""
        public = self._config.worker_subnets == "public"
        return ecs.FargateService(
            self,
            service_id,
            cluster=self.cluster,
            task_definition=task_definition,
            desired_count=desired_count,
            min_healthy_percent=100,
            max_healthy_percent=200,
            circuit_breaker=ecs.DeploymentCircuitBreaker(rollback=True),
            vpc_subnets=ec2.SubnetSelection(subnet_type=self._worker_subnet_type),
            security_groups=[self.security_group],
            assign_public_ip=public,
        )

    @property
    def _worker_subnet_type(self) -> ec2.SubnetType:
        if self._config.worker_subnets == "public":
            return ec2.SubnetType.PUBLIC
        return ec2.SubnetType.PRIVATE_WITH_EGRESS

    def _task(
        self,
        task_id: str,
        logs_id: str,
        *,
        cpu: int,
        memory_mib: int,
        environment: dict[str, str],
        storage: Storage,
        queues: Queues,
        consumes: list[sqs.Queue],
    ) -> tuple[ecs.FargateTaskDefinition, logs.LogGroup, ecs.ContainerDefinition]:
        """A worker task (image from the ECS Dockerfile), its role's grants and its log group."""
        arm = self._config.ecs_architecture == "ARM64"
        task_definition = ecs.FargateTaskDefinition(
            self,
            task_id,
            cpu=cpu,
            memory_limit_mib=memory_mib,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.ARM64 if arm else ecs.CpuArchitecture.X86_64,
                operating_system_family=ecs.OperatingSystemFamily.LINUX,
            ),
        )
        self._grant_worker(task_definition.task_role, storage, queues, consumes=consumes)
        log_group = logs.LogGroup(
            self,
            logs_id,
            retention=retention(self._config.log_retention_days),
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        container = task_definition.add_container(
            "worker",
            image=ecs.ContainerImage.from_asset(
                source_path(".", c.ECS_DOCKERFILE),
                file=c.ECS_DOCKERFILE,
                exclude=list(ECS_CONTEXT_EXCLUDES),
                ignore_mode=cdk.IgnoreMode.DOCKER,
                platform=ecr_assets.Platform.LINUX_ARM64 if arm else ecr_assets.Platform.LINUX_AMD64,
            ),
            logging=ecs.LogDrivers.aws_logs(stream_prefix="worker", log_group=log_group),
            environment=environment,
            stop_timeout=cdk.Duration.seconds(c.ECS_STOP_TIMEOUT_S),
            readonly_root_filesystem=True,
        )
        acknowledge(
            task_definition,
            "ECS2",
            "The worker container's environment holds configuration only (table name, queue URLs, "
            "shard counts, KMS key id); no secret is passed in it. Webhook secrets are stored "
            "encrypted in the table and decrypted with KMS at run time.",
        )
        if task_definition.execution_role is not None:
            acknowledge(
                task_definition.execution_role,
                "IAM5[Resource::*]",
                "ecr:GetAuthorizationToken, which the execution role needs to pull the worker image, "
                "does not support resource-level permissions.",
            )
        return task_definition, log_group, container

    def _grant_worker(
        self, role: iam.IRole, storage: Storage, queues: Queues, *, consumes: list[sqs.Queue]
    ) -> None:
        """The same rights for both lanes: table, own queues, sending, secrets, roles for targets.

        No target permission: AWS targets are called as the deployment's target role (assumed,
        see punctual_cdk/components/security.py) or as the job's execution role.
        """
        storage.grant_items(role, c.TABLE_ACTIONS_BY_COMPONENT["worker"])
        storage.grant_dispatch_key(role)  # verifies what it receives, signs what it sends
        Queues.grant(role, consumes, c.WORKER_CONSUME_ACTIONS)
        # A takeover of an expired lease and a dependent job's run are sent to either lane;
        # executions that end FAILED are announced on the failed queue.
        Queues.grant(role, [*queues.work_queues, queues.failed], SEND_ACTIONS)
        # Webhook secrets only: the encryption context must name their purpose (and, for secrets
        # stored since issue 16, the tenant and job, which the worker passes from the job).
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt"],
                resources=[storage.secrets_key.key_arn],
                conditions={
                    "StringEquals": {"kms:EncryptionContext:purpose": c.WEBHOOK_SECRET_PURPOSE},
                    # Only contexts made of the purpose and the job binding (tenant, job): a
                    # secret stored before the binding has the purpose alone and still decrypts.
                    "ForAllValues:StringEquals": {
                        "kms:EncryptionContextKeys": list(c.WEBHOOK_SECRET_CONTEXT_KEYS)
                    },
                },
            )
        )
        # ...and, since envelope encryption, the tenants' data keys they are sealed under (one
        # Decrypt per tenant per process per key epoch): purpose and tenant, nothing else.
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt"],
                resources=[storage.secrets_key.key_arn],
                conditions={
                    "StringEquals": {"kms:EncryptionContext:purpose": c.TENANT_KEY_PURPOSE},
                    "ForAllValues:StringEquals": {
                        "kms:EncryptionContextKeys": list(c.TENANT_KEY_CONTEXT_KEYS)
                    },
                },
            )
        )
        grant_execution_roles(role, self._config)

    def _vpc(self) -> ec2.IVpc:
        if self._config.vpc_id:
            # An existing VPC: looked up at synth (`cdk synth`/`cdk deploy` with credentials; the
            # answer is cached in cdk.context.json). It needs private subnets with egress (or, with
            # workerSubnets public, public subnets). Without an account and region the lookup
            # fails with a jsii traceback naming no setting.
            stack = cdk.Stack.of(self)
            if cdk.Token.is_unresolved(stack.account) or cdk.Token.is_unresolved(stack.region):
                raise ConfigError(
                    "vpcId: looking the VPC up needs the stack's account and region: set "
                    "CDK_DEFAULT_ACCOUNT and CDK_DEFAULT_REGION (the cdk CLI sets them from your "
                    "credentials; `python infra/app.py` and `make synth` do not), or give the stack an env"
                )
            return ec2.Vpc.from_lookup(self, "Vpc", vpc_id=self._config.vpc_id)
        public = self._config.worker_subnets == "public"
        subnets = [ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24)]
        if not public:
            subnets.append(
                ec2.SubnetConfiguration(
                    name="workers", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=20
                )
            )
        vpc = ec2.Vpc(
            self,
            "Vpc",
            max_azs=c.VPC_MAX_AZS,
            # Public worker subnets route out through their internet gateway: no NAT to pay for.
            nat_gateways=0 if public else self._config.nat_gateways,
            subnet_configuration=subnets,
            restrict_default_security_group=True,
        )
        flow_logs = logs.LogGroup(
            self,
            "VpcFlowLogs",
            retention=retention(self._config.log_retention_days),
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        vpc.add_flow_log("FlowLogs", destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs))
        for name in c.VPC_GATEWAY_ENDPOINTS:
            vpc.add_gateway_endpoint(
                f"{_pascal(name)}Endpoint",
                service=_GATEWAY_ENDPOINTS[name],
                # (CDK's default, the private subnets, would be none in a public-only VPC)
                subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PUBLIC)] if public else None,
            )
        if self._config.vpc_interface_endpoints and not public:
            # One group for all interface endpoints: HTTPS in from the workers' group only.
            self.endpoint_security_group = ec2.SecurityGroup(
                self,
                "EndpointSecurityGroup",
                vpc=vpc,
                description="Punctual VPC interface endpoints: HTTPS from the ECS workers",
                allow_all_outbound=False,
            )
            for name in c.VPC_INTERFACE_ENDPOINTS:
                vpc.add_interface_endpoint(
                    f"{_pascal(name)}Endpoint",
                    service=_INTERFACE_ENDPOINTS[name],
                    private_dns_enabled=True,
                    subnets=ec2.SubnetSelection(subnet_type=self._worker_subnet_type),
                    security_groups=[self.endpoint_security_group],
                    open=False,
                )
        return vpc

    def _scaling(self, queues: Queues) -> None:
        """Out on waiting messages; in only when nothing is waiting or being worked on (a message
        in flight, or a run past 12 hours that let go of its message)."""
        period = cdk.Duration.seconds(c.DASHBOARD_PERIOD_S)
        visible = {
            f"v{i}": q.metric_approximate_number_of_messages_visible(period=period, statistic="Maximum")
            for i, q in enumerate(queues.long)
        }
        in_flight = {
            f"f{i}": q.metric_approximate_number_of_messages_not_visible(period=period, statistic="Maximum")
            for i, q in enumerate(queues.long)
        }
        waiting = cloudwatch.MathExpression(
            expression=" + ".join(visible),
            using_metrics=visible,
            label="Long-lane messages waiting",
            period=period,
        )
        # Runs past 12 hours have no message left in flight (SQS's visibility cap): the tasks
        # holding them say so (QA: scale-in saw nothing and stopped them mid-run).
        detached = {"d": app_metric(c.METRIC_RUNS_DETACHED, "Maximum", service=c.ECS_METRICS_SERVICE)}
        backlog = cloudwatch.MathExpression(
            expression=" + ".join([*visible, *in_flight, "FILL(d, 0)"]),
            using_metrics={**visible, **in_flight, **detached},
            label="Long-lane messages waiting or in flight",
            period=period,
        )
        capacity = self.service.auto_scale_task_count(
            min_capacity=self._config.ecs_min_tasks, max_capacity=self._config.ecs_max_tasks
        )
        cooldown = cdk.Duration.seconds(c.ECS_SCALE_COOLDOWN_S)
        capacity.scale_on_metric(
            "ScaleOutOnWaiting",
            metric=waiting,
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            scaling_steps=[
                appscaling.ScalingInterval(upper=1, change=0),
                *(
                    appscaling.ScalingInterval(lower=lower, change=add)
                    for lower, add in c.ECS_SCALE_OUT_STEPS
                ),
            ],
            cooldown=cooldown,
        )
        capacity.scale_on_metric(
            "ScaleInWhenIdle",
            metric=backlog,
            # -100 % is clamped at the minimum task count.
            adjustment_type=appscaling.AdjustmentType.PERCENT_CHANGE_IN_CAPACITY,
            scaling_steps=[
                appscaling.ScalingInterval(upper=1, change=-100),
                appscaling.ScalingInterval(lower=1, change=0),
            ],
            cooldown=cooldown,
        )


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace(".", "-").split("-"))
