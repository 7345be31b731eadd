"""The Lambda runtime every function shares: one layer, one way to build a function.

Each function gets its own role (no managed policy: only what its construct grants), its own
log group with a retention, X-Ray active tracing, Python 3.14 on arm64, the core layer and the
Powertools settings. Code assets are the function's folder under ``functions/``; the core and
its dependencies live in the layer, built by ``make layer`` (``infra/build_layer.py``).
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from punctual_cdk import constants as c
from punctual_cdk.assets import source_path
from punctual_cdk.config import LOG_RETENTION_DAYS, ConfigError, PunctualConfig
from punctual_cdk.nag import XRAY_REASON, acknowledge

RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64


class PunctualFunction(Construct):
    """A Lambda function with its own role and log group.

    Attributes
    ----------
    function, role, log_group
        The function and the two resources that belong to it alone.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PunctualConfig,
        layer: lambda_.ILayerVersion,
        code_dir: str,
        description: str,
        timeout_s: int,
        memory_mb: int,
        environment: dict[str, str],
        reserved_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=retention(config.log_retention_days),
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Punctual {construct_id} function: least privilege, granted per resource",
        )
        self.log_group.grant_write(self.role)
        self.function = lambda_.Function(
            self,
            "Function",
            description=description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=c.HANDLER,
            code=lambda_.Code.from_asset(code_dir, exclude=list(c.ASSET_EXCLUDES)),
            layers=[layer],
            role=self.role,
            log_group=self.log_group,
            timeout=cdk.Duration.seconds(timeout_s),
            memory_size=memory_mb,
            tracing=lambda_.Tracing.ACTIVE,
            environment=environment,
            reserved_concurrent_executions=reserved_concurrency,
        )
        acknowledge(self.role, "IAM5[Resource::*]", XRAY_REASON)


class LambdaRuntime(Construct):
    """The core layer, shared by every function, and a factory for :class:`PunctualFunction`."""

    def __init__(self, scope: Construct, construct_id: str, *, config: PunctualConfig) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        layer_dir = Path(source_path(config.layer_asset_dir, "python"))
        if not (layer_dir / "python").is_dir():
            raise ConfigError(
                f"layerAssetDir: the Lambda layer is not built: {layer_dir}/python is missing "
                "(run `make layer`)"
            )
        self.layer = lambda_.LayerVersion(
            self,
            "CoreLayer",
            code=lambda_.Code.from_asset(str(layer_dir), exclude=list(c.ASSET_EXCLUDES)),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="Punctual core package and its dependencies (boto3 comes with the runtime)",
        )

    def function(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        description: str,
        timeout_s: int,
        memory_mb: int,
        environment: dict[str, str],
        reserved_concurrency: int | None = None,
    ) -> PunctualFunction:
        """A function whose code is ``functions/<name>/`` and entry point ``handler.handler``."""
        code_dir = Path(source_path(self._config.functions_dir, name)) / name
        if not (code_dir / "handler.py").is_file():
            raise ConfigError(
                f"functionsDir: the {name} function has no handler: {code_dir}/handler.py is missing"
            )
        return PunctualFunction(
            scope,
            construct_id,
            config=self._config,
            layer=self.layer,
            code_dir=str(code_dir),
            description=description,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            environment=environment,
            reserved_concurrency=reserved_concurrency,
        )


def on_schedule(
    scope: Construct,
    construct_id: str,
    function: lambda_.IFunction,
    *,
    description: str,
    schedule: str,
    max_event_age_s: int,
    retry_attempts: int,
) -> events.Rule:
    """An EventBridge rule that invokes ``function`` on ``schedule``, asynchronously: a failed
    invocation is retried ``retry_attempts`` times while the event is younger than ``max_event_age_s``."""
    age = cdk.Duration.seconds(max_event_age_s)
    function.configure_async_invoke(max_event_age=age, retry_attempts=retry_attempts)
    return events.Rule(
        scope,
        construct_id,
        description=description,
        schedule=events.Schedule.expression(schedule),
        targets=[targets.LambdaFunction(function, max_event_age=age, retry_attempts=retry_attempts)],
    )


_RETENTION_BY_DAYS = dict(
    zip(LOG_RETENTION_DAYS, list(logs.RetentionDays)[: len(LOG_RETENTION_DAYS)], strict=True)
)


def retention(days: int) -> logs.RetentionDays:
    """The RetentionDays member for a number of days that config already validated."""
    return _RETENTION_BY_DAYS[days]
