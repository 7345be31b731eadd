"""Configuration is a model: every process reads its environment through :class:`Settings`.

Validated once at cold start; a bad value fails loudly with the variable's name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from punctual.dispatch.queues import QueueRouting
from punctual.timing.timers import TimerLayout

# AWS_EXECUTION_ENV where AWS runs the process: AWS_Lambda_python3.11, AWS_ECS_FARGATE, AWS_ECS_EC2
_AWS_HOSTS = ("AWS_Lambda", "AWS_ECS")


class SettingsError(ValueError):
    """An environment variable holds a value Punctual cannot use."""


_PREFIX = "PUNCTUAL_"
CLOCK_SKEW_S = 5  # the clock skew between nodes the layout allows for (DESIGN: +-5 s)


class Settings(BaseModel):
    """Every ``PUNCTUAL_*`` variable of the runtime, its type, bounds and default: the one
    definition. The fields in :data:`DEPLOYED` are CDK context values too (``shardCount`` is
    ``shard_count``): the stack sets their variables from the context
    (``punctual_cdk.scheduler.runtime_environment``), and a test holds ``cdk.json``, the app's
    defaults and these defaults equal."""

    table_name: str = "punctual"
    short_queue_urls: list[str] = Field(default_factory=list)
    long_queue_urls: list[str] = Field(default_factory=list)
    failed_queue_url: str = ""
    # Far shards: 256 keep >= 2x headroom on a far bucket's 1,000 WRU/s for everything the default
    # pollers can release (a 600,000-slot top-of-minute burst by 40 pollers takes >= 9 s: ~250
    # WRU/s per key; 10,000/s sustained: ~40). Releasing faster needs more. Each far shard costs
    # one read per minute when idle.
    shard_count: int = Field(default=256, ge=1, le=100_000)
    # Near shards: 8 (packed timer rows write ~10x fewer units per timer; at 10,000/s with half
    # the timers in the near lane a key takes 625 timers/s). Each near shard is read every second.
    # Both counts are part of the data layout: never change them on a live deployment.
    near_shard_count: int = Field(default=8, ge=1, le=10_000)
    far_threshold_s: int = Field(default=180, ge=10, le=3600)  # >= 60 + poller_lead_s + 5
    poll_interval_ms: int = Field(default=1000, ge=10, le=60_000)
    poller_lead_s: int = Field(default=10, ge=0, le=50)
    # How long past its minute a poller keeps reading that minute's near buckets: at least the
    # clock skew between nodes, so a late writer's near timer is still read (DESIGN: +-5 s).
    poller_grace_s: int = Field(default=10, ge=0, le=50)
    retention_days: int = Field(default=30, ge=1, le=3650)
    # False on a table that refuses transactions (a multi-Region strongly consistent global table,
    # docs/multi-region.md): the store writes a transaction's items one by one, decisive item first.
    table_transactions: bool = True
    # Whose watermarks and progress marks a process reads and writes: "" (one Region), or the
    # Region's name on a multi-Region table, where a Region's pollers resume only from their own
    # Region's marks (docs/multi-region.md, section 2: the double fault).
    marks_scope: str = Field(default="", max_length=32, pattern=r"^[a-z0-9-]*$")
    # The Region the EventBridge-compatible API's ARNs name: "" (the API's own), or the home Region
    # of a multi-Region deployment, so that every Region's API gives a schedule the same ARN.
    arn_region: str = Field(default="", max_length=32, pattern=r"^[a-z0-9-]*$")
    target_allow_cidrs: list[str] = Field(default_factory=list)
    max_jobs_per_tenant: int = Field(default=100_000, ge=1)
    # The lease of a running attempt's record, on both lanes (punctual.execution.lease): the claim
    # sets lease_until this far ahead and heartbeats renew it while the run lasts, every lease_s
    # less CLOCK_SKEW_S and 2 s (5 s), so a run shorter than that writes nothing more. It is what
    # the pollers' checks, the backstop LEASE timers and any other copy of the run's message judge
    # the run by (with the clock skew allowed for). A worker that dies mid-run is noticed sooner,
    # by its message: see message_lease_s.
    lease_s: int = Field(default=12, ge=5, le=3600)
    # The lease of every message a worker holds (both lanes: a Lambda batch's, an ECS or burst
    # task's receive; running or not): its visibility, renewed by the lease keeper every
    # message_lease_s less 3 s (4 s) while the worker holds it, by SQS's clock alone. A worker that
    # dies gives back what it had not started within this, and a run's message back is its lease
    # lapsed (the claim's owner names the message's receive: punctual.execution.records.message_back):
    # the next worker takes the run over at once, whatever the record's lease_until and the
    # workers' clocks say, so a run whose worker died is started again at most this long after the
    # death. A worker whose renewals of a run's message fail until just before it could be back
    # stops the run (an ECS task lets the message go instead, its backstop timer keeping the run).
    # A slot whose worker died at its claim adds the time from its release to its claim, a second
    # or two on a loaded machine (the local chaos run: an ECS task's claim 2 s after it), so this
    # leaves that much of the 10 s bound.
    message_lease_s: int = Field(default=7, ge=5, le=3600)
    # A message the poller sent to the Lambda lane that no worker has claimed this long after is
    # sent again under another message group (punctual.dispatch.polling.resend): a worker that died before
    # its handler ran holds its batch for the queue's visibility timeout. 0: never.
    unclaimed_resend_s: float = Field(default=4.0, ge=0, le=60)
    clock_offset_s: float = 0.0  # chaos and tests: simulate a skewed node clock
    kms_key_id: str = ""
    # Envelope encryption of webhook secrets (punctual.security.tenant_keys): a tenant's secrets are sealed
    # under one data key per key epoch of this length; a process unwraps a tenant's key (one KMS
    # Decrypt) at most once per epoch.
    tenant_key_lifetime_s: int = Field(default=30 * 24 * 3600, ge=60, le=366 * 24 * 3600)
    secret_key: str = ""  # local mode: key for encrypting webhook secrets when there is no KMS
    state_machine_arn: str = ""
    # The minute state machine for minutes of more than 40 pollers (a Parallel of inline Maps;
    # the stack builds it when maxShardGroups > 40): the tick starts those minutes there.
    burst_state_machine_arn: str = ""
    # The key dispatch messages are signed with (punctual.security.message_auth): local mode and tests
    # set it; the stack names the Secrets Manager secret generated at deploy instead.
    dispatch_key: str = ""
    dispatch_key_secret_arn: str = ""
    queue_send_concurrency: int = Field(default=8, ge=1, le=256)
    # API: HMAC key binding paging tokens to tenant and query. The stack generates one at deploy
    # (a Secrets Manager secret, PUNCTUAL_TOKEN_KEY_SECRET, read once); local mode sets it directly.
    token_key: str = ""
    token_key_secret: str = ""
    # The stack's own resources, never targets (see punctual.security.ownership): a list, and/or the SSM
    # parameter holding the stack's list.
    own_arns: list[str] = Field(default_factory=list)
    own_arns_parameter: str = ""
    # The role the workers assume to call AWS targets of jobs that name no role_arn (empty: the
    # worker's own credentials, as in local mode); require_target_role refuses such jobs.
    target_role_arn: str = ""
    require_target_role: bool = False
    # Execution roles (role_arn) must have opted in (punctual.security.boundary): IAM lets the workers assume
    # only roles carrying this tag (value "true"), and, when a prefix is set, whose ARN after
    # "role/" starts with it (a path such as "punctual/" or a name prefix), checked at registration too.
    execution_role_tag: str = Field(default="punctual:execution-role", pattern=r"^[\w.:/=+@-]{1,128}$")
    execution_role_prefix: str = Field(default="", pattern=r"^[\w+=,.@/-]{0,64}$")
    # Per-tenant quotas: scheduled triggers per minute (the sum over a tenant's schedules) and
    # API requests per minute (0: no limit).
    max_triggers_per_minute_per_tenant: int = Field(default=60_000, ge=1)
    api_requests_per_minute_per_tenant: int = Field(default=1_200, ge=0)
    # Burst quotas (punctual.security.tenant_quotas): a tenant's slots due in one second and in one minute
    # (its jobs' peak profile, punctual.security.peaks), its backfills running at once and its backfilled
    # slots a minute (0: no limit).
    max_slots_per_second_per_tenant: int = Field(default=10_000, ge=0)
    max_slots_per_minute_per_tenant: int = Field(default=60_000, ge=0)
    max_backfills_per_tenant: int = Field(default=10, ge=0)
    backfill_slots_per_minute_per_tenant: int = Field(default=600, ge=0)
    # A tenant's retries released a second by all pollers together (punctual.dispatch.polling.retry_pace;
    # 0: no limit): the quotas above count first attempts only.
    max_retries_per_second_per_tenant: int = Field(default=100, ge=0)
    # A tenant's runs in flight that outlived their first lease (punctual.execution.inflight; 0: no cap),
    # on the short lane (a quarter of the default workerMaxConcurrency, 400) and on the ECS long lane
    # (a quarter of its default 40 runs at once: 4 a task, ecsMaxTasks 10): at the cap its next runs wait.
    max_runs_in_flight_per_tenant: int = Field(default=100, ge=0)
    max_long_runs_in_flight_per_tenant: int = Field(default=10, ge=0)
    # The work queues' maxReceiveCount (their redrive policy: a message received more often goes to
    # the dead-letter queue). A worker sends a fresh copy of a message that waits (a live lease, a
    # rate budget's instant) instead of returning it for the receive that would dead-letter it
    # (punctual.execution.parking.Parking.resend_waiting).
    max_receive_count: int = Field(default=10, ge=1, le=1000)
    # POST /v1/job-batches: jobs of one batch checked at once (then stored 33 a transaction).
    # Local mode and in-process tests use 1: moto's transactions are not safe side by side.
    api_batch_concurrency: int = Field(default=16, ge=1, le=64)
    # Local mode only: the API takes the tenant from X-Punctual-Tenant instead of the IAM caller.
    local_mode: bool = False
    shard_groups: int = Field(default=1, ge=1, le=1024)  # the fewest pollers a minute gets
    # Pollers per shard group of a minute on the standard poller (punctual.dispatch.tick.replicas_for):
    # 2 release every slot side by side, so one that dies (and its restart) delays nothing; an idle
    # (lean) minute keeps one. 1: one poller per group.
    poller_replicas: int = Field(default=2, ge=1, le=2)
    max_shard_groups: int = Field(default=40, ge=1, le=1024)  # 40: what one inline Map runs at once
    # What the tick plans one poller to release in a minute: a minute whose planned load is N
    # triggers gets ceil(N / this) groups (within the bounds). 30,000 = 500/s: a 1,024 MB poller
    # releases ~1,200/s (CPU-bound), so 10,000/s gets 20 pollers with 2x headroom on release rate
    # (bench/capacity.py); small loads still get one poller. A burst-ready deployment lowers it.
    triggers_per_poller_minute: int = Field(default=30_000, ge=100)
    # Far buckets counted to size a minute: an eighth of the default 256, so that a minute holding a
    # few hundred far timers is not mistaken for an idle one (the lean poller's choice rests on it).
    load_sample_shards: int = Field(default=32, ge=0, le=100_000)
    # The tick gives a minute the lean (small-memory) poller when its planned load (sampled far
    # timers plus the near timers of the last whole minute) is at most this; 0 never does.
    lean_max_triggers_per_minute: int = Field(default=60, ge=0)
    # The tick: the functions a minute's pollers run on (the lean one optional), the inline Maps
    # the state machine splits the groups over (more than 40 groups), how many minutes it starts.
    poller_function: str = ""
    lean_poller_function: str = ""
    group_slices: int = Field(default=1, ge=1, le=64)
    tick_lookahead_minutes: int = Field(default=2, ge=1, le=10)
    # Execution events (punctual.delivery.notifications.events): published to this EventBridge bus (a name
    # or an ARN; the stack sets the bus it chose) unless turned off.
    events_enabled: bool = True
    # Which ``Execution Status Change`` events go to that bus: ``problems`` (the default) every change
    # but an attempt's RUNNING and SUCCEEDED (FAILED, TIMED_OUT, RETRY_WAIT, SKIPPED, SUPERSEDED;
    # ``Slot Missed``, ``Slot Late``, ``Rate Budget Overrun`` and ``Chain Repaired`` always), or ``all``:
    # two more events a trigger, $2.00 per million triggers at EventBridge's $1.00 per million events
    # (docs/capacity.md). A job's own ``events_bus`` still gets every event of the job.
    events_status_changes: Literal["problems", "all"] = "problems"
    events_bus: str = "default"
    # Local mode only: events are POSTed to this URL (the local receiver) instead of EventBridge.
    events_url: str = ""
    # Predictive scaling (punctual.dispatch.scaling): the tick sizes the burst workers and the worker event
    # sources' MaximumConcurrency for each coming minute's planned load. The figures of the
    # capacity model (docs/capacity.md): one message's time on a worker Lambda, the event source's
    # cold start and ramp, what a burst worker drains a second, how long one takes to start.
    burst_lateness_target_s: int = Field(default=10, ge=1, le=600)
    worker_message_ms: float = Field(default=19.3, gt=0, le=900_000)
    worker_max_concurrency: int = Field(default=400, ge=0, le=10_000)  # at rest: workerMaxConcurrency
    worker_max_concurrency_ceiling: int = Field(default=1000, ge=0, le=10_000)
    event_source_cold_concurrency: int = Field(default=5, ge=0, le=10_000)
    event_source_ramp_per_minute: int = Field(default=300, ge=0, le=100_000)
    burst_workers: int = Field(default=0, ge=0, le=10_000)  # at rest: ecsBurstTasks
    burst_workers_max: int = Field(default=0, ge=0, le=10_000)  # 0: no burst workers to start
    burst_worker_messages_per_s: float = Field(default=644.0, gt=0)
    # Fargate: provisioning, image pull, container start (about a minute; docs/capacity.md). The
    # tick starts the next two minutes, so a burst minute is seen ~2 minutes ahead.
    burst_start_lead_s: int = Field(default=75, ge=0, le=600)
    burst_hold_s: int = Field(default=30, ge=0, le=3600)
    scaling_period_s: float = Field(default=60.0, gt=0, le=3600)
    # A minute too large for the standing capacity has its burst (slots due in its first
    # burst_lateness_target_s) read from this many far shards' timers, extrapolated.
    burst_head_sample_shards: int = Field(default=4, ge=0, le=100_000)
    # Pollers for a burst: a minute whose burst (slots due in its first burst_lateness_target_s)
    # is B gets at least ceil(B / this) pollers, so it is released within the target; 0: off
    # (pollers from the minute's total only). Sustained load has a small burst: it keeps
    # triggers_per_poller_minute's pollers.
    burst_triggers_per_poller: int = Field(default=0, ge=0, le=10_000_000)
    # What the actuator changes (the stack fills these on the tick): the worker function's event
    # source mapping ids, the burst ECS service and its cluster.
    worker_event_source_mappings: list[str] = Field(default_factory=list)
    burst_service: str = ""
    burst_cluster: str = ""
    # The ECS lane (punctual.dispatch.ecs_lane): the ECS worker service's scalable target
    # ("service/<cluster>/<service>"; "" = the tick leaves it alone), its minimum at rest
    # (ecsMinTasks) and while ECS-lane slots are in sight (ecsReadyTasks), and how far ahead: a
    # Fargate start (about 60 s), a tick period (60 s) and a margin.
    ecs_service_resource_id: str = ""
    ecs_min_tasks: int = Field(default=0, ge=0, le=1000)
    ecs_ready_tasks: int = Field(default=2, ge=0, le=1000)
    ecs_lane_sight_s: float = Field(default=150.0, ge=0, le=3600)
    # Burst smoothing (punctual.dispatch.smoothing): a slot may be released up to this many seconds after
    # its instant to keep a target within its rate budget (a job's max_lateness_seconds
    # overrides it); a slot the budget cannot take within it fires on time and counts an overrun.
    max_lateness_seconds: int = Field(default=10, ge=0, le=3600)
    # Deployment-wide rate budgets, "[tenant/]host-or-arn=calls-per-second" (no tenant: each
    # tenant's own budget of that size); a job's target may set its own (rate_budget_per_second).
    target_rate_budgets: list[str] = Field(default_factory=list)

    @field_validator("target_rate_budgets")
    @classmethod
    def _budgets(cls, value: list[str]) -> list[str]:
        from punctual.dispatch.smoothing import parse_budgets  # raises on an entry it cannot read

        parse_budgets(value)
        return value

    @field_validator("target_allow_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        from punctual.delivery.targets.webhooks.guard import parse_allow_cidrs  # raises on a non-block

        parse_allow_cidrs(value)
        return value

    # Backfill (punctual.usecases.backfill_runner): slots of one backfill in flight at once unless a
    # request asks otherwise, the most slots one backfill's range may hold, seconds between steps.
    backfill_max_parallel: int = Field(default=4, ge=1, le=100)
    backfill_max_slots: int = Field(default=1000, ge=1, le=10_000)
    backfill_step_s: float = Field(default=2.0, ge=0.1, le=60)
    # The chain auditor (punctual.auditing): every ENABLED job is checked once per
    # audit_period_minutes (one run a minute, each taking its share of the segments). A chain is
    # judged broken only when nothing of it happened for audit_grace_s (and its shards' pollers
    # are not behind), an execution in flight only after audit_inflight_grace_s; audit_repair
    # False finds and reports without repairing.
    audit_period_minutes: int = Field(default=60, ge=1, le=1440)
    audit_grace_s: int = Field(default=300, ge=5, le=86_400)
    audit_inflight_grace_s: int = Field(default=1800, ge=5, le=7 * 86_400)
    audit_repair: bool = True

    def layout(self) -> TimerLayout:
        """The timer layout these settings describe (the one way it is built from them)."""
        return TimerLayout(self.shard_count, self.near_shard_count, self.far_threshold_s)

    def routing(self) -> QueueRouting:
        """Which work queue a job's messages go to (the one way it is built from them)."""
        return QueueRouting(tuple(self.short_queue_urls), tuple(self.long_queue_urls))

    @model_validator(mode="after")
    def _far_covers_the_minute(self) -> Settings:
        # A minute's far bucket is read once, when its pollers start (poller_lead_s before it): a
        # far timer written after that read and due in that minute would never be released, so a
        # timer due within the minute, the lead and the clock skew must go to a near bucket (the
        # stack checks farThresholdS the same way; this holds local mode and tests to it too).
        least = 60 + self.poller_lead_s + CLOCK_SKEW_S
        if self.far_threshold_s < least:
            raise ValueError(
                f"far_threshold_s {self.far_threshold_s} is under {least} (60 + poller_lead_s "
                f"{self.poller_lead_s} + {CLOCK_SKEW_S} s of clock skew): a far timer due late in a "
                "minute could be written after its pollers read the minute's far bucket"
            )
        return self

    @field_validator(
        "short_queue_urls",
        "long_queue_urls",
        "target_allow_cidrs",
        "own_arns",
        "worker_event_source_mappings",
        "target_rate_budgets",
        mode="before",
    )
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @staticmethod
    def variable(field: str) -> str:
        """The environment variable of a field (``shard_count`` → ``PUNCTUAL_SHARD_COUNT``); a
        name that is no field is an error (the stack cannot set a variable nothing reads)."""
        if field not in Settings.model_fields:
            raise KeyError(f"{field!r} is not a setting of punctual.runtime.settings.Settings")
        return _PREFIX + field.upper()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read ``PUNCTUAL_*`` variables (``PUNCTUAL_SHARD_COUNT`` → ``shard_count``).

        Raises
        ------
        SettingsError
            A value the model refuses; or ``PUNCTUAL_LOCAL_MODE`` set where AWS runs the process
            (``AWS_EXECUTION_ENV``: a Lambda or an ECS task). Local mode trusts a header to name
            the tenant and derives the paging-token key from the table's name: in the cloud any
            caller could act as any tenant, so a component refuses to start (QA27).
        """
        settings = read_env(cls, _PREFIX, environ)
        host = Platform.from_env(environ).execution_env
        if settings.local_mode and host.startswith(_AWS_HOSTS):
            raise SettingsError(
                f"{_PREFIX}LOCAL_MODE is set in an AWS execution environment ({host}):"
                " local mode trusts a header to name the tenant, never in the cloud"
            )
        return settings


class Platform(BaseModel):
    """What the platform sets, not Punctual: the region (the AWS SDK's variables) and the metrics
    namespace (Powertools'). Read here like every other variable, when it is asked for (tests and
    local mode change them between calls)."""

    region: str = "us-east-1"
    metrics_namespace: str = "Punctual"
    # Lambda's AWS_LAMBDA_INITIALIZATION_TYPE ("on-demand", "provisioned-concurrency",
    # "snap-start"): set only in a Lambda execution environment, so "" outside one (tests, local mode).
    lambda_initialization: str = ""
    # The SDK's AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE>: where the components' AWS calls go
    # when set (local mode's moto server), so a webhook may never call them. None in a deployment.
    endpoint_urls: tuple[str, ...] = ()
    # AWS_EXECUTION_ENV: set where AWS runs the process (AWS_Lambda_python3.11, AWS_ECS_FARGATE)
    execution_env: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Platform:
        env = os.environ if environ is None else environ
        return cls(
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            metrics_namespace=env.get("POWERTOOLS_METRICS_NAMESPACE", "Punctual"),
            lambda_initialization=env.get("AWS_LAMBDA_INITIALIZATION_TYPE", ""),
            execution_env=env.get("AWS_EXECUTION_ENV", ""),
            endpoint_urls=tuple(
                value
                for name, value in sorted(env.items())
                if value and (name == "AWS_ENDPOINT_URL" or name.startswith("AWS_ENDPOINT_URL_"))
            ),
        )


# The settings a deployment chooses in its CDK context, under the field's camelCase name.
DEPLOYED: tuple[str, ...] = (
    "shard_count",
    "near_shard_count",
    "far_threshold_s",
    "poll_interval_ms",
    "poller_lead_s",
    "retention_days",
    "max_jobs_per_tenant",
    "max_triggers_per_minute_per_tenant",
    "api_requests_per_minute_per_tenant",
    "max_slots_per_second_per_tenant",
    "max_slots_per_minute_per_tenant",
    "max_backfills_per_tenant",
    "backfill_slots_per_minute_per_tenant",
    "max_retries_per_second_per_tenant",
    "max_runs_in_flight_per_tenant",
    "max_long_runs_in_flight_per_tenant",
    "max_receive_count",
    "lease_s",
    "require_target_role",
    "execution_role_tag",
    "execution_role_prefix",
    "target_allow_cidrs",
    "shard_groups",
    "poller_replicas",
    "max_shard_groups",
    "triggers_per_poller_minute",
    "events_enabled",
    "events_status_changes",
    "burst_lateness_target_s",
    "burst_start_lead_s",
    "burst_hold_s",
    "max_lateness_seconds",
    "burst_triggers_per_poller",
    "target_rate_budgets",
    "audit_period_minutes",
    "audit_grace_s",
)


def context_key(field: str) -> str:
    """The CDK context key of a deployed setting (``shard_count`` → ``shardCount``)."""
    head, *rest = field.split("_")
    return head + "".join(part.capitalize() for part in rest)


def default_of(field: str) -> object:
    """A field's default (the one place it is written)."""
    return Settings.model_fields[field].get_default(call_default_factory=True)


def env_value(value: object) -> str:
    """A setting's value as its environment variable carries it (lists comma-separated)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return str(value)


_Model = TypeVar("_Model", bound=BaseModel)


def read_env(model: type[_Model], prefix: str, environ: Mapping[str, str] | None = None) -> _Model:
    """``model`` from the variables ``<prefix><FIELD>`` (every settings model reads this way).

    Raises
    ------
    SettingsError
        A value the model refuses, named by its variable.
    """
    env = os.environ if environ is None else environ
    values = {name: env[prefix + name.upper()] for name in model.model_fields if prefix + name.upper() in env}
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        var = prefix + str(first["loc"][0]).upper() if first["loc"] else prefix + "*"
        raise SettingsError(f"{var}: {first['msg']}") from None
