"""Names, limits and defaults of the Punctual CDK app, with units in the names.

Every context setting the app reads has its default here; ``cdk.json`` repeats the
defaults so that a user sees (and edits) them in one place. ``punctual_cdk/config.py``
turns context into a validated :class:`~punctual_cdk.config.PunctualConfig`.
"""

from __future__ import annotations

from typing import Final

from punctual.runtime.settings import Settings
from punctual.security import message_auth

APP_NAME: Final = "punctual"
DEFAULT_STACK_NAME: Final = "Punctual"
CDK_OUTDIR: Final = "cdk.out"

# --- Lambda ------------------------------------------------------------------------------------
# Python 3.14 on arm64 (Graviton: ~20 % cheaper per GB-second; the layer is built for it).
LAMBDA_PYTHON_VERSION: Final = "3.14"
LAMBDA_PLATFORM_TAG: Final = "manylinux2014_aarch64"
LAYER_ASSET_DIR: Final = "build/layer"  # holds python/<packages>; built by `make layer`
LAYER_FALLBACK_DIR: Final = "layers/core"  # core sources only: enough for tests, not for a deploy
CORE_PACKAGE_DIR: Final = "layers/core/python/punctual"
FUNCTIONS_DIR: Final = "functions"
HANDLER: Final = "handler.handler"
FUNCTION_NAMES: Final = ("api", "poller", "worker", "tick")
ASSET_EXCLUDES: Final = ("__pycache__", "*.pyc", ".pytest_cache", "tests")

API_TIMEOUT_S: Final = 29  # API Gateway's integration timeout is 29 s
API_MEMORY_MB: Final = 512
TICK_TIMEOUT_S: Final = 20
TICK_MEMORY_MB: Final = 256
TICK_LOOKAHEAD_MINUTES: Final = 2  # each tick starts the next N minutes (idempotent names)
TICK_SCHEDULE: Final = "rate(1 minute)"
TICK_MAX_EVENT_AGE_S: Final = 120  # an older tick is useless: a newer one covers its minutes
TICK_RETRY_ATTEMPTS: Final = 2
# The chain auditor (punctual.auditing): a run a minute, each its share of the segments (every job
# once per auditPeriodMinutes). A run stops 20 s before its timeout and its segments come round
# again next period; a failed run is retried by Lambda's asynchronous invocation (twice), for as
# long as its minute's segments are worth checking (an hour).
AUDITOR_TIMEOUT_S: Final = 900
AUDITOR_MEMORY_MB: Final = 1024
AUDITOR_SCHEDULE: Final = "rate(1 minute)"
AUDITOR_MAX_EVENT_AGE_S: Final = 3600
AUDITOR_RETRY_ATTEMPTS: Final = 2
POLLER_TIMEOUT_S: Final = 120  # a poller starts POLLER_LEAD_S before its minute and runs ~70-80 s
POLLER_MEMORY_MB: Final = 1024
# The lean poller: the same code at the smallest memory, for minutes whose planned load is at most
# LEAN_POLLER_MAX_TRIGGERS_PER_MINUTE (an idle deployment's minutes). A poller runs ~80 s of every
# minute whatever its load, so its memory is most of the idle bill: 1,024 MB costs ~$47 a month,
# 128 MB ~$6. At 128 MB (7 % of a vCPU) it releases ~200 far or ~110 near slots a second.
LEAN_POLLER_MEMORY_MB: Final = 128
LEAN_POLLER_MAX_TRIGGERS_PER_MINUTE: Final = 60  # 0: never use the lean poller
# With pollerReservedConcurrency, the lean poller reserves its own most: a lean minute runs one
# poller (one group, one replica: punctual.dispatch.tick.replicas_for) and two minutes' pollers
# overlap (each lives from its lead to its grace, ~80 s), so 2, not the standard poller's 2 x
# maxShardGroups x pollerReplicas.
LEAN_POLLER_RESERVED_CONCURRENCY: Final = 2
WORKER_TIMEOUT_S: Final = 900  # the longest job the Lambda lane runs (Lambda's hard maximum)
WORKER_MEMORY_MB: Final = 512

# --- Scheduler settings handed to the runtime (PUNCTUAL_* environment) --------------------------
# The deployed settings (shard counts, poll interval, quotas, shard groups, ...) are defined once,
# with their defaults and the reasons for them, in punctual.runtime.settings.Settings (DEPLOYED); the app's
# context defaults (punctual_cdk/config.py) are derived from it, and a test holds cdk.json equal.
_RUNTIME = Settings()
POLLER_LEAD_S: Final = _RUNTIME.poller_lead_s
# An inline Map runs at most 40 iterations at once; a poller lasts its whole minute, so more
# groups than one Map runs would start late. Up to 40 groups the state machine has one inline
# Map over $.groups; beyond, a Parallel state of ceil(maxShardGroups / 40) inline Maps, each over
# a slice of at most 40 groups that the tick puts in $.group_slices (punctual_cdk/components/dispatch.py
# says why not a Distributed Map).
INLINE_MAP_MAX_CONCURRENCY: Final = 40
MAX_SHARD_GROUPS: Final = 256  # the most maxShardGroups may be (7 slices); groups never exceed shards
POLLER_MAX_CONCURRENCY: Final = 0  # 0 = unbounded (up to the inline Map limit above)
LOG_LEVEL: Final = "INFO"
POWERTOOLS_SERVICE_NAME: Final = APP_NAME
METRICS_NAMESPACE: Final = "Punctual"

# --- Step Functions ------------------------------------------------------------------------------
# The window a minute's poller owns: it starts POLLER_LEAD_S before its minute and reads the near
# lane until the minute plus the runtime's grace (PUNCTUAL_POLLER_GRACE_S, 10 s by default; the
# app does not set it).
POLLER_GRACE_S: Final = 10
POLLER_WINDOW_S: Final = POLLER_LEAD_S + 60 + POLLER_GRACE_S
# The clock skew between nodes the design tolerates (PollerConfig.skew_s): a far timer must be
# written this long before its bucket is read, by a writer whose clock may be that far ahead.
CLOCK_SKEW_S: Final = 5
# The poller task is retried on EVERY failure (the handler raised, the Lambda timed out or ran out
# of memory, Lambda.Unknown, States.TaskFailed, States.Timeout, a Lambda service error), quickly,
# for the whole window: delays of 1, 1.5, then 2 s (retry n waits INTERVAL x RATE^(n-1), at most
# MAX_DELAY). A crashed poller is back within 2 s plus a cold start, however often it died in its
# minute (a poller killed every few seconds spends most of its time down with longer delays; its
# group's other poller covers each death, issue 30). A retry invoked after its minute is over
# drains what is left and returns at once, so extra attempts are cheap. Local mode reads these
# fields from the template and retries (and restarts) its pollers with the same delays.
POLLER_RETRY_INTERVAL_S: Final = 1
POLLER_RETRY_BACKOFF_RATE: Final = 1.5
POLLER_RETRY_MAX_DELAY_S: Final = 2
# The catch-all retrier (States.ALL, no jitter): 47 retries wait 1 + 1.5 + 45 x 2 = 92.5 s in all,
# more than POLLER_WINDOW_S even if every attempt failed at once (at the default lead: see
# poller_retry_max_attempts for the deployment's own).
POLLER_RETRY_MAX_ATTEMPTS: Final = 47


def poller_retry_max_attempts(poller_lead_s: int) -> int:
    """The catch-all's retries for pollers that start ``poller_lead_s`` (``pollerLeadS``) before their
    minute: POLLER_RETRY_MAX_ATTEMPTS, and one more per POLLER_RETRY_MAX_DELAY_S of window beyond the
    default lead's, so the delays still cover the whole window (QA27: at pollerLeadS 50 a poller owns
    120 s, and 47 retries gave up 92.5 s in). The service retrier has twice as many."""
    longer_s = max(0, poller_lead_s + 60 + POLLER_GRACE_S - POLLER_WINDOW_S)
    return POLLER_RETRY_MAX_ATTEMPTS + -(-longer_s // POLLER_RETRY_MAX_DELAY_S)


# Lambda service errors and throttling: the same delays with full jitter (a throttled Map's
# pollers should not retry in step). Full jitter waits half the delay on average, so twice the
# catch-all's attempts cover the same window. ASL counts each retrier's attempts apart, and the
# first retrier that lists an error is the one that retries it: these never reach the catch-all.
POLLER_SERVICE_RETRY_ERRORS: Final = (
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
)
# The longest a minute's execution runs: the lookahead wait (<= 2 min), a first poller attempt to
# its Lambda timeout (2 min), the catch-all's 92 s of delays and one more attempt to its timeout,
# with room to spare. A poller that keeps timing out is stopped here (the execution times out)
# rather than retried for most of an hour, which bounds how many past minutes' pollers run at once.
STATE_MACHINE_TIMEOUT_S: Final = 600

# --- Storage ---------------------------------------------------------------------------------------
PARTITION_KEY: Final = "pk"
SORT_KEY: Final = "sk"
TTL_ATTRIBUTE: Final = "expires_at"
TABLE_BILLING_MODES: Final = ("on-demand", "provisioned")
TABLE_ENCRYPTIONS: Final = ("aws-managed", "cmk")
# What becomes of the table with its stack. Not "snapshot": CloudFormation's DeletionPolicy for
# AWS::DynamoDB::Table is Delete, Retain or RetainExceptOnCreate (its validation refuses Snapshot,
# which only databases such as RDS take); point-in-time recovery is always on.
REMOVAL_POLICIES: Final = ("retain", "destroy")
# Warm throughput: a new table starts at 12,000 read and 4,000 write units per second (DynamoDB
# developer guide, "Understanding DynamoDB warm throughput in different scenarios") and a table's
# warm throughput cannot be decreased, so a lower value is refused (Terraform's aws_dynamodb_table:
# "Minimum value of 12000" / "4000").
TABLE_WARM_READ_UNITS_MIN: Final = 12_000
TABLE_WARM_WRITE_UNITS_MIN: Final = 4_000
TABLE_AUTOSCALING_TARGET_PERCENT: Final = 70
TABLE_THROTTLE_ALARM_EVENTS: Final = 1  # any throttled request in a minute is worth a look

# --- Queues --------------------------------------------------------------------------------------
QUEUE_COUNT: Final = 1
MAX_QUEUE_COUNT: Final = 10
# The long lane has at most this many of them: the ECS workers' scale-in alarm adds each long
# queue's waiting and in-flight messages and the runs that let go of theirs (2 x queues + 1
# metrics), and CloudWatch takes at most 10 metrics in an alarm (QA27: queueCount 5 and up did not
# synthesise). The long lane carries long jobs, a few a second: one queue holds them.
MAX_LONG_QUEUE_COUNT: Final = 4
# The event source mapping requires the queue's visibility timeout to be at least the function's
# timeout: the function timeout plus a minute. It is not the lease: the worker sets each message's
# visibility to its lease of seconds as its batch arrives, and renews it while the run lasts
# (punctual.execution.batch), so a crashed invocation's messages come back within seconds. Only a
# batch whose worker died before its handler ran waits for this timeout (the pollers re-send its
# slots meanwhile: punctual.dispatch.polling.resend). AWS's usual advice of 6x the function timeout guards
# against a second delivery while the event source retries a throttled invocation; here a second
# delivery is harmless, because the worker's conditional claim drops it (or waits while the first
# attempt's lease is live).
SHORT_QUEUE_VISIBILITY_TIMEOUT_S: Final = WORKER_TIMEOUT_S + 60
# The ECS worker's receive asks for its lease of visibility and its heartbeats renew it: this
# only applies to a message received by something else.
LONG_QUEUE_VISIBILITY_TIMEOUT_S: Final = 900
# The workers drop a message released longer ago than these allow (MAX_MESSAGE_AGE_S): the core's
QUEUE_RETENTION_DAYS: Final = message_auth.QUEUE_RETENTION_DAYS
DLQ_RETENTION_DAYS: Final = message_auth.DLQ_RETENTION_DAYS
FAILED_QUEUE_RETENTION_DAYS: Final = 14
# The shortest execution history (retentionDays): a slot's record must outlive every copy of its
# message a worker still accepts (MAX_MESSAGE_AGE_S, 23 days), or a copy redriven after the record
# expired runs the slot again (QA27: 1 was accepted, the docs only said to keep it above 23).
MIN_RETENTION_DAYS: Final = message_auth.MAX_MESSAGE_AGE_S // 86400 + 1

# --- Workers -------------------------------------------------------------------------------------
WORKER_BATCH_SIZE: Final = 10  # FIFO event sources take at most 10
# Per queue; Lambda's event-source range is 2..1000. 400: 2x the ~195 environments 10,000/s
# keeps busy at ~20 ms a message (bench/capacity.py); a cap only, it costs nothing idle.
WORKER_MAX_CONCURRENCY: Final = 400
ECS_MIN_TASKS: Final = 0
# Tasks the tick keeps standing while ECS-lane slots are due within ECS_LANE_SIGHT_S (2: one task's
# death leaves another to take its messages within their lease); 0 = the tick leaves the service alone.
ECS_READY_TASKS: Final = 2
ECS_LANE_SIGHT_S: Final = 150  # a Fargate start (~60 s), a tick period (60 s) and a margin
TICK_ECS_LANE_READ_ACTIONS: Final = ("application-autoscaling:DescribeScalableTargets",)
TICK_ECS_LANE_WRITE_ACTIONS: Final = ("application-autoscaling:RegisterScalableTarget",)
TICK_ECS_LANE_SERVICE_ACTIONS: Final = ("ecs:DescribeServices", "ecs:UpdateService")
ECS_MAX_TASKS: Final = 10
ECS_CPU_UNITS: Final = 512
ECS_MEMORY_MIB: Final = 1024
ECS_ARCHITECTURES: Final = ("ARM64", "X86_64")
# The standing burst workers (ecsBurstTasks): a second Fargate service on the SHORT queues, so a
# top-of-minute burst finds consumers already polling (an SQS event source that found the queue
# idle starts at 5 concurrent invokes and adds 300 a minute). 0 = no service (the default).
ECS_BURST_TASKS: Final = 0
ECS_BURST_CONCURRENCY: Final = 32  # threads per task (PUNCTUAL_WORKER_CONCURRENCY)
ECS_BURST_CPU_UNITS: Final = 1024
ECS_BURST_MEMORY_MIB: Final = 2048
ECS_BURST_MAX_TASKS: Final = 5000  # ECS's tasks-per-service quota
# The most burst tasks the tick may start ahead of a planned burst (predictive scaling); 0 builds
# no scaling (and no burst service unless ecsBurstTasks asks for standing ones).
ECS_BURST_TASKS_MAX: Final = 0
# What one burst task drains a second per vCPU (bench/capacity.py: 644 messages/s for 1 vCPU with
# 32 threads, CPU-bound with the LEASE write): the tick's planner sizes the burst with it.
ECS_BURST_MESSAGES_PER_S_PER_VCPU: Final = 644
# Alarm when fewer burst tasks run than asked for, this many minutes in a row (a replaced task
# takes a minute or two to start).
ECS_BURST_SHORT_ALARM_PERIODS: Final = 5
ECS_STOP_TIMEOUT_S: Final = 120  # SIGTERM → SIGKILL: time for the worker to drain
# Running executions may finish for this long after SIGTERM (PUNCTUAL_WORKER_GRACE_S); then the
# rest are stopped and handed back for takeover once their runs return, or after
# PUNCTUAL_WORKER_STOP_S all the same: both well inside the stop timeout.
ECS_DRAIN_GRACE_S: Final = ECS_STOP_TIMEOUT_S - 30
ECS_DRAIN_STOP_S: Final = 10
ECS_DOCKERFILE: Final = "functions/ecs_worker/Dockerfile"
ECS_SCALE_COOLDOWN_S: Final = 60
# Scale-out steps on visible (waiting) long-queue messages: (lower bound, tasks to add).
ECS_SCALE_OUT_STEPS: Final = ((1, 1), (10, 3), (50, 10))
VPC_MAX_AZS: Final = 2
NAT_GATEWAYS: Final = 1
# Where the ECS workers run: private subnets that reach out through NAT (and interface endpoints),
# or public subnets with a public IP each and no inbound rule (no NAT, no endpoint: nothing billed
# while no task runs).
WORKER_SUBNETS: Final = ("private", "public")
VPC_GATEWAY_ENDPOINTS: Final = ("dynamodb", "s3")  # s3: ECR image layers
VPC_INTERFACE_ENDPOINTS: Final = ("sqs", "logs", "ecr.api", "ecr.dkr", "sts", "kms")

# --- What each component calls: its role gets exactly these actions (issue 16) ----------------------
# tests/infra/test_infra_least_privilege.py reads the runtime's code and checks that every action
# here is called there, and that each role in the template holds exactly its component's list.
_HOT_PATH_TABLE_ACTIONS = (
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Query",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:BatchWriteItem",
)
TABLE_ACTIONS_BY_COMPONENT: Final = {
    # Jobs (transactions: put, update, delete items), history, the Idempotency-Key records
    # (Powertools: get, put, update, delete), the per-tenant request counter, and a job's
    # exclusion calendars read together for its next slots (BatchGetItem); a calendar delete
    # removes a stale use in a transaction that checks its job is unchanged (ConditionCheck).
    "api": (
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:Query",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:ConditionCheckItem",
        "dynamodb:BatchWriteItem",  # a run-now slot's check timer (timing.slots.sent_check_timer)
    ),
    # Timers (read, packed writes), watermarks, progress marks, jobs and executions read in
    # batches, completed one-time jobs; and, off the hot path, deleting a job whose last slot the
    # poller itself recorded (EXCLUDED or MISSED) when it asked for that (delete_after_completion:
    # one conditional transaction, as a worker's after a slot ends).
    "poller": (*_HOT_PATH_TABLE_ACTIONS, "dynamodb:DeleteItem"),
    # Executions, turns, dependency records, retry and lease timers: the same kinds of calls; and
    # deleting a job whose last slot ended when it asked for that (delete_after_completion, the
    # EventBridge Scheduler API's ActionAfterCompletion DELETE: one conditional transaction).
    "worker": (*_HOT_PATH_TABLE_ACTIONS, "dynamodb:DeleteItem"),
    # Counting the coming minute's timers and reading the watermarks: reads only.
    "tick": ("dynamodb:BatchGetItem", "dynamodb:Query"),
    # The chain auditor: the audit index (Query, granted on the index too), jobs, timers, records,
    # turns, watermarks; its repairs: a conditional record (PutItem), timers (BatchWriteItem), a
    # completion (a transaction: UpdateItem, PutItem), the skipped count (UpdateItem), a dependant's
    # links (the store's one call that makes and removes them: DeleteItem with it, though the
    # auditor only makes them); enrolling jobs stored before the index (Scan, once, on demand).
    "auditor": (*_HOT_PATH_TABLE_ACTIONS, "dynamodb:DeleteItem", "dynamodb:Scan"),
}
# On a table without transactions (an MRSC global table, PUNCTUAL_TABLE_TRANSACTIONS=false) the
# store writes a transaction's items one at a time (punctual.store.dynamo.sequenced): a
# ConditionCheck becomes an UpdateItem, and a sequence that fails part way is undone (PutItem of
# what a write replaced, DeleteItem of what it created). Every component that writes the table
# writes transactions (job replaces and deletes, calendar uses, the auditor's completion).
SEQUENCED_WRITE_ACTIONS: Final = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
TABLE_WRITE_ACTIONS: Final = (
    *SEQUENCED_WRITE_ACTIONS,
    "dynamodb:BatchWriteItem",
    "dynamodb:ConditionCheckItem",
)


def without_transactions(actions: tuple[str, ...]) -> tuple[str, ...]:
    """A component's table actions on a table without transactions: no ConditionCheckItem, and
    the sequenced writer's writes and undo for a component that writes at all."""
    if not any(a in TABLE_WRITE_ACTIONS for a in actions):
        return actions
    kept = tuple(a for a in actions if a != "dynamodb:ConditionCheckItem")
    return kept + tuple(a for a in SEQUENCED_WRITE_ACTIONS if a not in kept)


# What the auditor queries on the audit index (punctual.store.dynamo.schema.AUDIT_INDEX).
AUDIT_INDEX_ACTIONS: Final = ("dynamodb:Query",)
AUDIT_INDEX_NAME: Final = "audit"
AUDIT_SEGMENT_ATTRIBUTE: Final = "aseg"
AUDIT_INDEX_PROJECTION: Final = ("version", "state", "doc", "rev")
# The worker's queue calls: receive (ECS), delete and extend visibility (both lanes).
WORKER_CONSUME_ACTIONS: Final = ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility")
# What CDK's SqsEventSource grants the worker function's role for its event source mapping
# (grantConsumeMessages): the Lambda service polls the short queues with these, not the code.
EVENT_SOURCE_ACTIONS: Final = (
    "sqs:ReceiveMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueUrl",
    "sqs:DeleteMessage",
    "sqs:GetQueueAttributes",
)
# The worker assumes roles to call targets: the deployment's target role, and a job's execution
# role (role_arn), tagging the session with the tenant.
ASSUME_ROLE_ACTIONS: Final = ("sts:AssumeRole", "sts:TagSession")
# The KMS encryption-context purpose of a job's webhook signing secret (punctual.security.signing_secrets).
WEBHOOK_SECRET_PURPOSE: Final = "punctual-webhook-signing-secret"
WEBHOOK_SECRET_CONTEXT_KEYS: Final = (
    "purpose",
    "tenant",
    "job",
)  # punctual.security.signing_secrets.job_binding
# Tenants' data keys (punctual.security.tenant_keys): webhook secrets are sealed under them (envelope).
TENANT_KEY_PURPOSE: Final = "punctual-tenant-data-key"
TENANT_KEY_CONTEXT_KEYS: Final = ("purpose", "tenant")  # punctual.security.tenant_keys.key_context
# Where the stack publishes its own resources' ARNs (punctual.security.ownership), under the stack name.
OWN_ARNS_PARAMETER: Final = "/punctual/{stack}/own-arns"

# --- API -----------------------------------------------------------------------------------------
API_STAGE_NAME: Final = "prod"  # routes carry their own version (/v1/...)
API_THROTTLE_RATE_PER_S: Final = 100
API_THROTTLE_BURST: Final = 200
# The api function's reserved concurrency: its most at once, so API traffic cannot take the
# account's Lambda concurrency from the workers and pollers (an unreserved API took it all). The
# stage's rate: at its 100 requests a second it serves requests of up to 1 s. Each Punctual stack
# of an account and Region reserves it again, and Lambda keeps 100 of the account's unreserved: an
# account whose quota is under 100 + 100 a stack cannot deploy it (QA30 review: 200 each was 300 for
# one stack); 0 opts out.
API_RESERVED_CONCURRENCY: Final = API_THROTTLE_RATE_PER_S

# --- Observability -------------------------------------------------------------------------------
LOG_RETENTION_DAYS: Final = 30
FIRE_DELAY_P99_ALARM_MS: Final = 10_000  # the design's "never over 10 s"
SHORT_QUEUE_AGE_ALARM_S: Final = 300
LONG_QUEUE_AGE_ALARM_S: Final = 900
DASHBOARD_PERIOD_S: Final = 60
# Powertools Metrics adds the service dimension to every EMF metric it writes.
METRIC_DIMENSIONS: Final = {"service": POWERTOOLS_SERVICE_NAME}
# The ECS worker writes its EMF lines itself, under its own service dimension.
ECS_METRICS_SERVICE: Final = "punctual-ecs-worker"
# EMF metrics the runtime writes (namespace METRICS_NAMESPACE).
METRIC_FIRE_DELAY_MS: Final = "FireDelayMs"
METRIC_START_DELAY_MS: Final = "StartDelayMs"  # a first attempt's start, by the worker of each lane
METRIC_SLOTS_RELEASED: Final = "SlotsReleased"
METRIC_SLOTS_MISSED: Final = "SlotsMissed"  # slots newly recorded MISSED (each counted once)
METRIC_EXECUTIONS_SUCCEEDED: Final = "ExecutionsSucceeded"
METRIC_EXECUTIONS_FAILED: Final = "ExecutionsFailed"
METRIC_RETRIES: Final = "Retries"
METRIC_FORGED_MESSAGES: Final = "ForgedMessages"  # dispatch messages without a valid signature
METRIC_DEAD_LETTERS_FAILED: Final = "DeadLettersFailed"  # a job's dead letter that could not be sent
METRIC_ALERTS_UNDELIVERED: Final = "AlertsUndelivered"  # an alert its job's deletion left undelivered
METRIC_EVENTS_FAILED: Final = "EventsFailed"  # events on the stack's bus dropped: PutEvents failed twice
METRIC_SLOTS_CALENDAR_MISSING: Final = "SlotsCalendarMissing"  # slots not run: a calendar is gone
# The tick could not raise (or lower) the ECS worker service's minimum for the ECS lane's slots.
METRIC_ECS_LANE_ERRORS: Final = "EcsLaneErrors"
ECS_LANE_ERROR_ALARM_PERIODS: Final = 3  # one failure is left to the next tick; three in a row are not
# An ECS worker task's runs past SQS's 12-hour visibility cap (their message let go of; the worker
# service reports them while it holds any): scale-in counts them as work in flight.
METRIC_RUNS_DETACHED: Final = "RunsDetached"
# Predictive scaling (the tick, punctual.dispatch.scaling): what it asked, what drove it, what it could not.
METRIC_BURST_WORKERS_DESIRED: Final = "BurstWorkersDesired"
METRIC_WORKER_CONCURRENCY_DESIRED: Final = "WorkerConcurrencyDesired"
METRIC_BURST_PLANNED_SLOTS: Final = "BurstPlannedSlots"
METRIC_BURST_SHORTFALL: Final = "BurstShortfall"
# Burst smoothing (punctual.dispatch.smoothing): slots that fired on time past their target's rate budget.
METRIC_RATE_BUDGET_OVERRUNS: Final = "RateBudgetOverruns"
# Retries its tenant's retry rate deferred (punctual.dispatch.polling.retry_pace).
METRIC_RETRIES_DEFERRED: Final = "RetriesDeferred"
# Messages not started because their tenant had its cap of runs in flight (punctual.execution.inflight).
METRIC_RUNS_HELD_AT_TENANT_CAP: Final = "RunsHeldAtTenantCap"
# The chain auditor (punctual.auditing): jobs checked, chains found broken (every one is a bug),
# chains repaired, jobs not judged because their shards' pollers were behind.
METRIC_CHAINS_AUDITED: Final = "ChainsAudited"
METRIC_CHAINS_BROKEN: Final = "ChainsBroken"
METRIC_JOBS_ORPHANED: Final = "JobsOrphaned"
METRIC_CHAINS_REPAIRED: Final = "ChainsRepaired"
METRIC_CHAIN_AUDIT_DEFERRED: Final = "ChainAuditDeferred"
# Failure counts no other alarm reads (components/failure_alarms.py): the first in five minutes alarms.
METRIC_LEASES_LOST: Final = "LeasesLost"  # a running attempt stopped: another worker takes it over
METRIC_ALERTS_FAILED: Final = "AlertsFailed"  # an alert with a rule whose delivery failed for good
METRIC_CHILD_RECORDS_FAILED: Final = "ChildRecordsFailed"  # after() children's unrun slots not recorded
METRIC_RATE_BUDGET_STORE_ERRORS: Final = "RateBudgetStoreErrors"  # a budget placed per process, not shared
METRIC_EVENT_COPIES_FAILED: Final = "EventCopiesFailed"  # a tenant's copy of its events not put
METRIC_EVENT_COPIES_REFUSED: Final = "EventCopiesRefused"  # ... refused by the tenant boundary
METRIC_API_FAILURES: Final = "ApiFailures"  # the API's own failures: 500s and the 503 "misconfigured"
FAILURE_ALARM_S: Final = 300  # the window of those alarms
MAX_ALARM_RANGE_MINUTES: Final = 1440  # CloudWatch: an alarm's periods x evaluation periods <= a day
# The tick's scaling calls: the worker event-source mappings, the burst service, the short queues' depth.
TICK_EVENT_SOURCE_ACTIONS: Final = ("lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping")
TICK_BURST_SERVICE_ACTIONS: Final = ("ecs:DescribeServices", "ecs:UpdateService")
TICK_QUEUE_ACTIONS: Final = ("sqs:GetQueueAttributes",)
POLLER_QUEUE_READ_ACTIONS: Final = ("sqs:GetQueueAttributes",)  # the short lane's backlog
# The tick looks at a minute's execution (on the other machine, with two: more than 40 pollers
# allowed) before it starts it, and re-plans a waiting minute whose burst grew since (stops it,
# starts it again with more pollers: punctual.dispatch.burst_sight).
TICK_EXECUTION_ACTIONS: Final = ("states:DescribeExecution", "states:StopExecution")
# With the lookahead, one failed tick is covered by the next: alarm on two in a row.
TICK_ERROR_ALARM_PERIODS: Final = 2
# No minute execution started for this long means no poller is running.
NO_MINUTE_STARTED_ALARM_S: Final = 300
# A function invoked every minute by its rule (the tick, the chain auditor) that was not invoked
# in this window: its rule is disabled or gone, or its invocations are throttled.
NOT_INVOKED_ALARM_S: Final = 300

# --- Target permissions ----------------------------------------------------------------------------
# What the workers may do to a target, keyed by the service in the target's ARN pattern.
TARGET_ACTIONS_BY_SERVICE: Final = {
    "lambda": ("lambda:InvokeFunction",),
    "sqs": ("sqs:SendMessage",),
    "sns": ("sns:Publish",),
    "events": ("events:PutEvents",),
    "states": ("states:StartExecution",),
    "ecs": ("ecs:RunTask", "ecs:DescribeTasks"),  # split by resource type, below
    "iam": ("iam:PassRole",),  # roles of ECS RunTask targets
}
# ECS actions apply to different resource types: RunTask to task definitions; following the
# task it started (DescribeTasks) and stopping it at its timeout (StopTask) to tasks. An ECS
# pattern must name one of the two. ListTasks and DescribeTaskDefinition, which the adapter uses
# only if allowed, take no resource-level permission: they are not granted (never "*").
ECS_TARGET_ACTIONS_BY_RESOURCE: Final = {
    "task-definition/": ("ecs:RunTask",),
    "task/": ("ecs:DescribeTasks", "ecs:StopTask"),
}

# --- API -----------------------------------------------------------------------------------------
# The KMS encryption context under which the API stores its idempotent replies (the one thing it
# may decrypt); the core's api/wiring.py uses the same purpose.
IDEMPOTENT_REPLY_PURPOSE: Final = "punctual-idempotent-reply"
DISPATCH_KEY_CHARS: Final = 64  # the generated dispatch-message key (letters and digits)

# Execution events (punctual.delivery.notifications.events): a bus the stack creates (the default), or the
# account's default bus (stacks made before issue 31, while they move their rules).
EVENTS_BUSES: Final = ("stack", "default")
# eventsStatusChanges: which Execution Status Change events reach the bus (punctual.runtime.settings)
EVENTS_STATUS_CHANGES: Final = ("problems", "all")
