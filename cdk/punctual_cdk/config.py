"""The app's settings: CDK context (``cdk.json`` or ``-c key=value``) read once and validated.

Context given on the command line arrives as strings, so every reader coerces: ``"3"`` is 3,
``"false"`` is False, and a list is either JSON (``'["a","b"]'``) or comma-separated.
A bad value stops the synth with the context key's name.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from pydantic import ValidationError

from punctual.dispatch.smoothing import SmoothingConfigError, parse_budgets
from punctual.runtime.settings import DEPLOYED, Settings, context_key, default_of
from punctual_cdk import constants as c


class ConfigError(ValueError):
    """A context value the app cannot use."""


# Context key → default. cdk.json carries the same keys; a test keeps the two in step. The
# settings the runtime reads too (punctual.runtime.settings.DEPLOYED) take their defaults from it.
DEFAULTS: dict[str, Any] = {
    **{context_key(field): default_of(field) for field in DEPLOYED},
    "stackName": c.DEFAULT_STACK_NAME,
    "layerAssetDir": c.LAYER_ASSET_DIR,
    "functionsDir": c.FUNCTIONS_DIR,
    "targetArnPatterns": [],
    "pollerMaxConcurrency": c.POLLER_MAX_CONCURRENCY,
    "pollerMemoryMb": c.POLLER_MEMORY_MB,
    "leanPollerMemoryMb": c.LEAN_POLLER_MEMORY_MB,
    "leanPollerMaxTriggersPerMinute": c.LEAN_POLLER_MAX_TRIGGERS_PER_MINUTE,
    "pollerReservedConcurrency": 0,
    "queueCount": c.QUEUE_COUNT,
    "workerBatchSize": c.WORKER_BATCH_SIZE,
    "workerMaxConcurrency": c.WORKER_MAX_CONCURRENCY,
    "workerMemoryMb": c.WORKER_MEMORY_MB,
    "ecsMinTasks": c.ECS_MIN_TASKS,
    "ecsReadyTasks": c.ECS_READY_TASKS,
    "ecsMaxTasks": c.ECS_MAX_TASKS,
    "ecsCpu": c.ECS_CPU_UNITS,
    "ecsMemoryMiB": c.ECS_MEMORY_MIB,
    "ecsArchitecture": c.ECS_ARCHITECTURES[0],
    "ecsBurstTasks": c.ECS_BURST_TASKS,
    "ecsBurstConcurrency": c.ECS_BURST_CONCURRENCY,
    "ecsBurstCpu": c.ECS_BURST_CPU_UNITS,
    "ecsBurstMemoryMb": c.ECS_BURST_MEMORY_MIB,
    "ecsBurstTasksMax": c.ECS_BURST_TASKS_MAX,
    "vpcId": "",
    "workerSubnets": c.WORKER_SUBNETS[0],
    "natGateways": c.NAT_GATEWAYS,
    "vpcInterfaceEndpoints": True,
    "alarmEmails": [],
    "logRetentionDays": c.LOG_RETENTION_DAYS,
    "logLevel": c.LOG_LEVEL,
    "tableBillingMode": c.TABLE_BILLING_MODES[0],
    "tableReadCapacityMin": 5,
    "tableReadCapacityMax": 4000,
    "tableWriteCapacityMin": 5,
    "tableWriteCapacityMax": 4000,
    "tableWarmReadUnitsPerSecond": 0,
    "tableWarmWriteUnitsPerSecond": 0,
    "tableEncryption": c.TABLE_ENCRYPTIONS[0],
    "tableDeletionProtection": True,
    "tableRemovalPolicy": c.REMOVAL_POLICIES[0],
    "apiThrottleRatePerS": c.API_THROTTLE_RATE_PER_S,
    "apiThrottleBurst": c.API_THROTTLE_BURST,
    "apiReservedConcurrency": c.API_RESERVED_CONCURRENCY,
    "apiWebAclArn": "",
    "fireDelayAlarmMs": c.FIRE_DELAY_P99_ALARM_MS,
    "eventsBus": c.EVENTS_BUSES[0],
}

_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_FARGATE_CPU_UNITS = (256, 512, 1024, 2048, 4096, 8192, 16384)
# Fargate's CPU → memory (MiB) pairs: (lowest, highest, step).
_FARGATE_MEMORY_MIB = {
    256: (512, 2048, 512),  # 512, 1024, 2048 (1536 is refused below)
    512: (1024, 4096, 1024),
    1024: (2048, 8192, 1024),
    2048: (4096, 16384, 1024),
    4096: (8192, 30720, 1024),
    8192: (16384, 61440, 4096),
    16384: (32768, 122880, 8192),
}


def fargate_memory_fits(cpu: int, memory_mib: int) -> bool:
    """Whether Fargate runs a task of ``cpu`` units with ``memory_mib`` (it refuses other pairs)."""
    low, high, step = _FARGATE_MEMORY_MIB[cpu]
    if cpu == 256:
        return memory_mib in (512, 1024, 2048)
    return low <= memory_mib <= high and (memory_mib - low) % step == 0


# Retention values CloudWatch Logs accepts, in the order of aws_logs.RetentionDays.
LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)
_ARN_PATTERN = re.compile(r"^arn:(aws|aws-cn|aws-us-gov):(?P<service>[a-z0-9-]+):[^\s]*\Z")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+\Z")
_STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}\Z")
_REGIONAL_WEB_ACL = re.compile(
    r"^arn:aws(-cn|-us-gov)?:wafv2:[a-z0-9-]+:\d{12}:regional/webacl/[\w-]{1,128}/[\w-]{1,128}\Z"
)


@dataclass(frozen=True)
class PunctualConfig:
    """Every setting of the app, typed; built by :meth:`from_context`."""

    stack_name: str
    layer_asset_dir: str
    functions_dir: str
    shard_count: int
    near_shard_count: int
    far_threshold_s: int
    poll_interval_ms: int
    poller_lead_s: int
    retention_days: int
    max_jobs_per_tenant: int
    max_triggers_per_minute_per_tenant: int
    api_requests_per_minute_per_tenant: int
    max_slots_per_second_per_tenant: int
    max_slots_per_minute_per_tenant: int
    max_backfills_per_tenant: int
    backfill_slots_per_minute_per_tenant: int
    max_retries_per_second_per_tenant: int
    max_runs_in_flight_per_tenant: int
    max_long_runs_in_flight_per_tenant: int
    require_target_role: bool
    execution_role_tag: str
    execution_role_prefix: str
    target_allow_cidrs: tuple[str, ...]
    target_arn_patterns: tuple[str, ...]
    shard_groups: int
    poller_replicas: int
    max_shard_groups: int
    triggers_per_poller_minute: int
    burst_lateness_target_s: int
    burst_start_lead_s: int
    burst_hold_s: int
    max_lateness_seconds: int
    burst_triggers_per_poller: int
    target_rate_budgets: tuple[str, ...]
    poller_max_concurrency: int
    poller_memory_mb: int
    lean_poller_memory_mb: int
    lean_poller_max_triggers_per_minute: int
    poller_reserved_concurrency: int
    queue_count: int
    max_receive_count: int
    lease_s: int
    worker_batch_size: int
    worker_max_concurrency: int
    worker_memory_mb: int
    ecs_min_tasks: int
    ecs_ready_tasks: int
    ecs_max_tasks: int
    ecs_cpu: int
    ecs_memory_mib: int
    ecs_architecture: str
    ecs_burst_tasks: int
    ecs_burst_concurrency: int
    ecs_burst_cpu: int
    ecs_burst_memory_mb: int
    ecs_burst_tasks_max: int
    vpc_id: str
    worker_subnets: str
    nat_gateways: int
    vpc_interface_endpoints: bool
    alarm_emails: tuple[str, ...]
    log_retention_days: int
    log_level: str
    table_billing_mode: str
    table_read_capacity_min: int
    table_read_capacity_max: int
    table_write_capacity_min: int
    table_write_capacity_max: int
    table_warm_read_units_per_second: int
    table_warm_write_units_per_second: int
    table_encryption: str
    table_deletion_protection: bool
    table_removal_policy: str
    api_throttle_rate_per_s: int
    api_throttle_burst: int
    api_reserved_concurrency: int
    api_web_acl_arn: str
    fire_delay_alarm_ms: int
    events_enabled: bool
    events_status_changes: str
    events_bus: str
    audit_period_minutes: int
    audit_grace_s: int

    @classmethod
    def from_context(cls, get: Callable[[str], Any]) -> PunctualConfig:
        """Build from a context getter such as ``app.node.try_get_context``."""
        reader = _Reader(get)
        cfg = cls(
            stack_name=reader.text("stackName"),
            layer_asset_dir=reader.text("layerAssetDir"),
            functions_dir=reader.text("functionsDir"),
            shard_count=reader.integer("shardCount", 1, 100_000),
            near_shard_count=reader.integer("nearShardCount", 1, 10_000),
            far_threshold_s=reader.integer("farThresholdS", 10, 3600),
            poll_interval_ms=reader.integer("pollIntervalMs", 10, 60_000),
            poller_lead_s=reader.integer("pollerLeadS", 0, 50),
            retention_days=reader.retention("retentionDays"),
            max_jobs_per_tenant=reader.integer("maxJobsPerTenant", 1, 10**9),
            max_triggers_per_minute_per_tenant=reader.integer("maxTriggersPerMinutePerTenant", 1, 10**9),
            api_requests_per_minute_per_tenant=reader.integer("apiRequestsPerMinutePerTenant", 0, 10**9),
            max_slots_per_second_per_tenant=reader.integer("maxSlotsPerSecondPerTenant", 0, 10**9),
            max_slots_per_minute_per_tenant=reader.integer("maxSlotsPerMinutePerTenant", 0, 10**9),
            max_backfills_per_tenant=reader.integer("maxBackfillsPerTenant", 0, 10**6),
            backfill_slots_per_minute_per_tenant=reader.integer("backfillSlotsPerMinutePerTenant", 0, 10**9),
            max_retries_per_second_per_tenant=reader.integer("maxRetriesPerSecondPerTenant", 0, 10**6),
            max_runs_in_flight_per_tenant=reader.integer("maxRunsInFlightPerTenant", 0, 10**6),
            max_long_runs_in_flight_per_tenant=reader.integer("maxLongRunsInFlightPerTenant", 0, 10**6),
            require_target_role=reader.boolean("requireTargetRole"),
            execution_role_tag=reader.text("executionRoleTag"),
            execution_role_prefix=reader.text("executionRolePrefix", required=False),
            target_allow_cidrs=reader.strings("targetAllowCidrs"),
            target_arn_patterns=reader.strings("targetArnPatterns"),
            shard_groups=reader.integer("shardGroups", 1, c.MAX_SHARD_GROUPS),
            poller_replicas=reader.integer("pollerReplicas", 1, 2),
            max_shard_groups=reader.integer("maxShardGroups", 1, c.MAX_SHARD_GROUPS),
            triggers_per_poller_minute=reader.integer("triggersPerPollerMinute", 100, 10**7),
            burst_lateness_target_s=reader.integer("burstLatenessTargetS", 1, 600),
            burst_start_lead_s=reader.integer("burstStartLeadS", 0, 600),
            burst_hold_s=reader.integer("burstHoldS", 0, 3600),
            max_lateness_seconds=reader.integer("maxLatenessSeconds", 0, 3600),
            burst_triggers_per_poller=reader.integer("burstTriggersPerPoller", 0, 10**7),
            target_rate_budgets=reader.strings("targetRateBudgets"),
            poller_max_concurrency=reader.integer("pollerMaxConcurrency", 0, c.INLINE_MAP_MAX_CONCURRENCY),
            poller_memory_mb=reader.integer("pollerMemoryMb", 128, 10_240),
            lean_poller_memory_mb=reader.integer("leanPollerMemoryMb", 128, 10_240),
            lean_poller_max_triggers_per_minute=reader.integer("leanPollerMaxTriggersPerMinute", 0, 10**6),
            poller_reserved_concurrency=reader.integer("pollerReservedConcurrency", 0, 10_000),
            queue_count=reader.integer("queueCount", 1, c.MAX_QUEUE_COUNT),
            max_receive_count=reader.integer("maxReceiveCount", 1, 1000),
            lease_s=reader.integer("leaseS", 5, 3600),
            worker_batch_size=reader.integer("workerBatchSize", 1, 10),
            worker_max_concurrency=reader.integer("workerMaxConcurrency", 2, 1000),
            worker_memory_mb=reader.integer("workerMemoryMb", 128, 10_240),
            ecs_min_tasks=reader.integer("ecsMinTasks", 0, 1000),
            ecs_ready_tasks=reader.integer("ecsReadyTasks", 0, 1000),
            ecs_max_tasks=reader.integer("ecsMaxTasks", 1, 1000),
            ecs_cpu=reader.choice_int("ecsCpu", _FARGATE_CPU_UNITS),
            ecs_memory_mib=reader.integer("ecsMemoryMiB", 512, 122_880),
            ecs_architecture=reader.choice("ecsArchitecture", c.ECS_ARCHITECTURES),
            ecs_burst_tasks=reader.integer("ecsBurstTasks", 0, c.ECS_BURST_MAX_TASKS),
            ecs_burst_concurrency=reader.integer("ecsBurstConcurrency", 1, 256),  # ServiceSettings' bound
            ecs_burst_cpu=reader.choice_int("ecsBurstCpu", _FARGATE_CPU_UNITS),
            ecs_burst_memory_mb=reader.integer("ecsBurstMemoryMb", 512, 122_880),
            ecs_burst_tasks_max=reader.integer("ecsBurstTasksMax", 0, c.ECS_BURST_MAX_TASKS),
            vpc_id=reader.text("vpcId", required=False),
            worker_subnets=reader.choice("workerSubnets", c.WORKER_SUBNETS),
            nat_gateways=reader.integer("natGateways", 0, c.VPC_MAX_AZS),
            vpc_interface_endpoints=reader.boolean("vpcInterfaceEndpoints"),
            alarm_emails=reader.strings("alarmEmails"),
            log_retention_days=reader.choice_int("logRetentionDays", LOG_RETENTION_DAYS),
            log_level=reader.choice("logLevel", _LOG_LEVELS),
            table_billing_mode=reader.choice("tableBillingMode", c.TABLE_BILLING_MODES),
            table_read_capacity_min=reader.integer("tableReadCapacityMin", 1, 10**6),
            table_read_capacity_max=reader.integer("tableReadCapacityMax", 1, 10**6),
            table_write_capacity_min=reader.integer("tableWriteCapacityMin", 1, 10**6),
            table_write_capacity_max=reader.integer("tableWriteCapacityMax", 1, 10**6),
            table_warm_read_units_per_second=reader.warm(
                "tableWarmReadUnitsPerSecond", c.TABLE_WARM_READ_UNITS_MIN
            ),
            table_warm_write_units_per_second=reader.warm(
                "tableWarmWriteUnitsPerSecond", c.TABLE_WARM_WRITE_UNITS_MIN
            ),
            table_encryption=reader.choice("tableEncryption", c.TABLE_ENCRYPTIONS),
            table_deletion_protection=reader.boolean("tableDeletionProtection"),
            table_removal_policy=reader.choice("tableRemovalPolicy", c.REMOVAL_POLICIES),
            api_throttle_rate_per_s=reader.integer("apiThrottleRatePerS", 1, 10**6),
            api_throttle_burst=reader.integer("apiThrottleBurst", 1, 10**6),
            api_reserved_concurrency=reader.integer("apiReservedConcurrency", 0, 10_000),
            api_web_acl_arn=reader.text("apiWebAclArn", required=False),
            fire_delay_alarm_ms=reader.integer("fireDelayAlarmMs", 100, 600_000),
            events_enabled=reader.boolean("eventsEnabled"),
            events_status_changes=reader.choice("eventsStatusChanges", c.EVENTS_STATUS_CHANGES),
            events_bus=reader.choice("eventsBus", c.EVENTS_BUSES),
            audit_period_minutes=reader.integer("auditPeriodMinutes", 1, 1440),
            audit_grace_s=reader.integer("auditGraceS", 5, 86_400),
        )
        cfg._check()
        return cfg

    @classmethod
    def from_settings(cls, **settings: Any) -> PunctualConfig:
        """Build from settings by field name (``shard_count=512``), the rest at their defaults,
        with the same validation as :meth:`from_context` (what ``Punctual(scope, id, **settings)``
        takes)."""
        keys = setting_keys()
        unknown = sorted(set(settings) - set(keys))
        if unknown:
            raise ConfigError(f"{unknown[0]}: not a Punctual setting (settings: {', '.join(sorted(keys))})")
        context = {keys[name]: value for name, value in settings.items()}
        return cls.from_context(context.get)

    @property
    def group_slices(self) -> int:
        """Inline Maps the minute state machine runs side by side: 1 up to 40 groups, then one per 40."""
        return math.ceil(self.max_shard_groups / c.INLINE_MAP_MAX_CONCURRENCY)

    @property
    def pollers_per_minute(self) -> int:
        """The most pollers a minute runs: its groups (up to maxShardGroups), each twice while its
        Maps run them all at once (40 each), else once (punctual.dispatch.tick.replicas_for)."""
        groups = self.max_shard_groups
        replicated = groups * self.poller_replicas
        fits = replicated <= c.INLINE_MAP_MAX_CONCURRENCY * self.group_slices
        return max(groups, replicated if fits else c.INLINE_MAP_MAX_CONCURRENCY * self.group_slices)

    def _check(self) -> None:
        for pattern in self.target_arn_patterns:
            target_service(pattern)  # raises on a pattern that is not a usable ARN
        for email in self.alarm_emails:
            if not _EMAIL.match(email):
                raise ConfigError(f"alarmEmails: {email!r} is not an e-mail address")
        if self.shard_groups > self.max_shard_groups:
            raise ConfigError("shardGroups: must not exceed maxShardGroups")
        if self.group_slices > 1 and self.poller_max_concurrency:
            raise ConfigError(
                f"pollerMaxConcurrency: must be 0 (all groups at once) when maxShardGroups exceeds "
                f"{c.INLINE_MAP_MAX_CONCURRENCY}: the groups are split over several Maps"
            )
        # A Map capped below a minute's pollers starts the rest when the first end: a minute late,
        # their shards' slots with them.
        pollers = self.pollers_per_minute
        if self.group_slices == 1 and 0 < self.poller_max_concurrency < pollers:
            raise ConfigError(
                f"pollerMaxConcurrency: {self.poller_max_concurrency} runs fewer pollers at once than a "
                f"minute may have ({pollers}: maxShardGroups x pollerReplicas, at most "
                f"{c.INLINE_MAP_MAX_CONCURRENCY}); the others would start a minute late. Raise it, "
                "lower maxShardGroups or pollerReplicas, or set 0 (all at once)"
            )
        # Reserved concurrency is also the pollers' maximum, and a poller lives its minute from its
        # lead to its grace (~80 s): two minutes' pollers run at once. Fewer are throttled and start
        # when others end (Step Functions retries them), their shards' slots late.
        if 0 < self.poller_reserved_concurrency < 2 * pollers:
            raise ConfigError(
                f"pollerReservedConcurrency: {self.poller_reserved_concurrency} is also the pollers' "
                f"maximum, below the {2 * pollers} of two overlapping minutes ({pollers} pollers a minute "
                "at most: maxShardGroups x pollerReplicas, as the Maps run them); the others would be "
                "throttled and start late. Raise it, lower maxShardGroups or pollerReplicas, or set 0"
            )
        # A minute's far bucket is read once, when its pollers start (pollerLeadS before it); a far
        # timer is one due more than farThresholdS after it is written. One due late in the minute
        # and written after that read was never released by its pollers: the threshold must cover
        # the whole minute, the lead and the clock skew.
        least = 60 + self.poller_lead_s + c.CLOCK_SKEW_S
        if self.far_threshold_s < least:
            raise ConfigError(
                f"farThresholdS: {self.far_threshold_s} is under {least} (60 + pollerLeadS "
                f"{self.poller_lead_s} + {c.CLOCK_SKEW_S} s of clock skew): a far timer due late in a "
                "minute could be written after its pollers read the minute's far bucket, and not be released"
            )
        if self.near_shard_count > self.shard_count:
            raise ConfigError("nearShardCount: must not exceed shardCount")
        if self.ecs_min_tasks > self.ecs_max_tasks:
            raise ConfigError("ecsMinTasks: must not exceed ecsMaxTasks")
        if self.ecs_ready_tasks > self.ecs_max_tasks:
            raise ConfigError("ecsReadyTasks: must not exceed ecsMaxTasks")
        for memory_key, memory, cpu_key, cpu in (
            ("ecsMemoryMiB", self.ecs_memory_mib, "ecsCpu", self.ecs_cpu),
            ("ecsBurstMemoryMb", self.ecs_burst_memory_mb, "ecsBurstCpu", self.ecs_burst_cpu),
        ):
            if not fargate_memory_fits(cpu, memory):
                raise ConfigError(f"{memory_key}: Fargate does not run {memory} MiB with {cpu_key} {cpu}")
        try:
            parse_budgets(list(self.target_rate_budgets))
        except SmoothingConfigError as exc:
            raise ConfigError(f"targetRateBudgets: {exc}") from None
        if self.ecs_burst_tasks_max and self.ecs_burst_tasks_max < self.ecs_burst_tasks:
            raise ConfigError("ecsBurstTasksMax: must be 0 (no scaling) or at least ecsBurstTasks")
        if self.table_read_capacity_min > self.table_read_capacity_max:
            raise ConfigError("tableReadCapacityMin: must not exceed tableReadCapacityMax")
        if self.table_write_capacity_min > self.table_write_capacity_max:
            raise ConfigError("tableWriteCapacityMin: must not exceed tableWriteCapacityMax")
        # DeleteTable fails on a protected table: a stack that deletes its table with it could not
        # be destroyed (`make destroy` failing on the table, the stack left DELETE_FAILED).
        if self.table_deletion_protection and self.table_removal_policy == "destroy":
            raise ConfigError(
                "tableRemovalPolicy: destroy deletes the table with the stack, but tableDeletionProtection "
                "(true) refuses that delete and the stack could not be destroyed: set "
                "tableDeletionProtection=false too, or keep tableRemovalPolicy=retain"
            )
        # QA28: both synthesised, and no role could then opt in (every run AccessDenied, or refused)
        if self.execution_role_prefix.startswith("/"):
            raise ConfigError(
                f"executionRolePrefix: {self.execution_role_prefix!r} starts with '/': it is the part of a"
                " role's ARN after role/ (punctual/ for the path /punctual/, punctual- for a name prefix)"
            )
        if self.execution_role_tag.lower().startswith("aws:"):
            raise ConfigError(
                f"executionRoleTag: {self.execution_role_tag!r}: tag keys beginning with aws: are AWS's"
                " own, no role can be tagged with it"
            )
        if self.vpc_id and not re.fullmatch(r"vpc-[0-9a-f]{8,17}", self.vpc_id):
            raise ConfigError(f"vpcId: {self.vpc_id!r} is not a VPC id")
        if not _STACK_NAME.match(self.stack_name):
            raise ConfigError(
                f"stackName: {self.stack_name!r} is not a CloudFormation stack name (a letter, then "
                "letters, digits and '-', 128 at most)"
            )
        if self.api_web_acl_arn and not _REGIONAL_WEB_ACL.match(self.api_web_acl_arn):
            raise ConfigError(
                f"apiWebAclArn: {self.api_web_acl_arn!r} is not a regional WAFv2 web ACL's ARN "
                "(arn:aws:wafv2:<region>:<account>:regional/webacl/<name>/<id>; an API stage takes no other)"
            )
        if not self.vpc_id and self.nat_gateways == 0 and self.worker_subnets == "private":
            # The created VPC's worker subnets route out through NAT only: the ECS workers read the
            # dispatch key (Secrets Manager), the own-resource list (SSM) and publish events there.
            raise ConfigError(
                "natGateways: at least 1 for the VPC the stack creates: without one its ECS workers "
                "reach neither Secrets Manager, SSM and EventBridge nor HTTP targets (0 only with vpcId, or "
                "workerSubnets public)"
            )
        # The stack hands these to every function as PUNCTUAL_* variables: a value the runtime's
        # settings refuse would stop each one at cold start, so it stops the synth instead.
        try:
            Settings.model_validate({field: getattr(self, field) for field in DEPLOYED})
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ConfigError(f"{context_key(str(first['loc'][0]))}: {first['msg']}") from None


def synth_or_exit(synth: Callable[[], object]) -> None:
    """Run an app's build and synth: a context value it cannot use ends it with one line naming the
    key, on stderr, and exit status 2 (what `cdk synth` shows), not a Python traceback."""
    try:
        synth()
    except ConfigError as exc:
        print(f"punctual: context {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def target_service(pattern: str) -> str:
    """The AWS service a target ARN pattern belongs to (``lambda``, ``sqs``, ...).

    A pattern must name a supported service explicitly: ``*`` alone, or a wildcard in the
    service part, would hand the workers the whole account.
    """
    match = _ARN_PATTERN.match(pattern)
    if not match:
        raise ConfigError(f"targetArnPatterns: {pattern!r} is not an ARN pattern (arn:aws:<service>:...)")
    service = match["service"]
    if service not in c.TARGET_ACTIONS_BY_SERVICE:
        supported = ", ".join(sorted(c.TARGET_ACTIONS_BY_SERVICE))
        raise ConfigError(f"targetArnPatterns: {pattern!r}: service {service!r} is not one of {supported}")
    resource = pattern.split(":", 5)[5] if pattern.count(":") >= 5 else ""
    if resource in ("", "*"):
        raise ConfigError(f"targetArnPatterns: {pattern!r} must name a resource, not every {service} one")
    if service == "ecs" and not resource.startswith(tuple(c.ECS_TARGET_ACTIONS_BY_RESOURCE)):
        raise ConfigError(
            f"targetArnPatterns: {pattern!r}: an ECS pattern names task definitions "
            "(task-definition/<family>:*) for RunTask or tasks (task/<cluster>/*) for DescribeTasks/StopTask"
        )
    return service


def target_actions(pattern: str) -> tuple[str, ...]:
    """The actions the workers get on a target ARN pattern: its service's invoking action(s)."""
    service = target_service(pattern)
    if service == "ecs":
        resource = pattern.split(":", 5)[5]
        for prefix, actions in c.ECS_TARGET_ACTIONS_BY_RESOURCE.items():
            if resource.startswith(prefix):
                return actions
    return c.TARGET_ACTIONS_BY_SERVICE[service]


def setting_keys() -> dict[str, str]:
    """Each field of :class:`PunctualConfig` → its context key (``shard_count`` → ``shardCount``)."""
    by_letters = {key.lower(): key for key in DEFAULTS}
    return {field.name: by_letters[field.name.replace("_", "")] for field in fields(PunctualConfig)}


class _Reader:
    def __init__(self, get: Callable[[str], Any]) -> None:
        self._get = get

    def raw(self, key: str) -> Any:
        value = self._get(key)
        return DEFAULTS[key] if value is None else value

    def text(self, key: str, *, required: bool = True) -> str:
        value = str(self.raw(key) or "").strip()
        if required and not value:
            raise ConfigError(f"{key}: must not be empty")
        return value

    def integer(self, key: str, low: int, high: int) -> int:
        value = self.raw(key)
        if isinstance(value, float) and not value.is_integer():  # int() would cut the fraction off
            raise ConfigError(f"{key}: {value!r} is not an integer")
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: {value!r} is not an integer") from None
        if isinstance(value, bool) or not low <= number <= high:
            raise ConfigError(f"{key}: {value!r} is not an integer in {low}..{high}")
        return number

    def retention(self, key: str) -> int:
        """The execution history's days: at least as long as a worker accepts a message's copy."""
        number = self.integer(key, 1, 3650)
        if number < c.MIN_RETENTION_DAYS:
            raise ConfigError(
                f"{key}: {number} is below {c.MIN_RETENTION_DAYS}: a slot's record must outlive every "
                f"copy of its message a worker accepts ({c.MIN_RETENTION_DAYS - 1} days: queue, dead-letter "
                "queue, a redrive), or a redriven copy runs the slot again"
            )
        return number

    def warm(self, key: str, least: int) -> int:
        """A warm throughput: 0 (not set) or at least what DynamoDB starts a table at."""
        number = self.integer(key, 0, 10**7)
        if 0 < number < least:
            raise ConfigError(
                f"{key}: {number} is below DynamoDB's minimum warm throughput, {least} (what a new "
                "table starts at; it cannot be lowered): set 0 (not set) or at least that"
            )
        return number

    def choice_int(self, key: str, allowed: tuple[int, ...]) -> int:
        number = self.integer(key, min(allowed), max(allowed))
        if number not in allowed:
            raise ConfigError(f"{key}: {number} is not one of {allowed}")
        return number

    def choice(self, key: str, allowed: tuple[str, ...]) -> str:
        value = str(self.raw(key))
        if value not in allowed:
            raise ConfigError(f"{key}: {value!r} is not one of {', '.join(allowed)}")
        return value

    def boolean(self, key: str) -> bool:
        value = self.raw(key)
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise ConfigError(f"{key}: {value!r} is not true or false")

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.raw(key)
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    value = json.loads(text)
                except json.JSONDecodeError:
                    raise ConfigError(f"{key}: {value!r} is not a JSON list") from None
            else:
                value = text.split(",")
        if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
            raise ConfigError(f"{key}: {value!r} is not a list of strings")
        return tuple(item.strip() for item in value if item.strip())
