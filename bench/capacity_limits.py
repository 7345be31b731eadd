"""The capacity model's inputs that are not measured: published AWS limits, prices and assumptions.

Each :class:`Limit` carries its value, unit and source page (read on :data:`CHECKED`); the
extra prices (provisioned Lambda, Fargate) and the stated assumptions (latencies, start times,
what is not published) each carry a one-line reason. ``bench/capacity.py`` prints them all
beside its figures; ``bench/quotas.py`` adds the quotas the hot path meets beyond these.
"""

from __future__ import annotations

from dataclasses import dataclass

# --------------------------------------------------------------------------- published limits


@dataclass(frozen=True)
class Limit:
    value: float
    unit: str
    source: str
    adjustable: bool = False


CHECKED = "2026-11-30"
SQS_SCALING = "docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html"
LIMITS: dict[str, Limit] = {
    "dynamodb_partition_wcu": Limit(
        1000,
        "write units/s per partition",
        "docs.aws.amazon.com/amazondynamodb/latest/developerguide/TroubleshootingThrottlingOnDemand.html"
        f" (read {CHECKED})",
    ),
    "dynamodb_partition_rcu": Limit(
        3000,
        "read units/s per partition",
        f"same page (read {CHECKED})",
    ),
    "dynamodb_table_wru": Limit(
        40_000,
        "write request units/s per on-demand table (default quota)",
        f"repost.aws/knowledge-center/on-demand-table-throttling-dynamodb (read {CHECKED})",
        adjustable=True,
    ),
    "dynamodb_table_rru": Limit(
        40_000,
        "read request units/s per on-demand table (default quota)",
        f"same page (read {CHECKED})",
        adjustable=True,
    ),
    "dynamodb_new_table_wru": Limit(
        4000,
        "write units/s a new on-demand table takes at once (then double the previous peak per 30 min,"
        " or pre-set warm throughput, which is kept once set)",
        f"same page; docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput.html"
        f" (read {CHECKED})",
        adjustable=True,
    ),
    "dynamodb_new_table_rru": Limit(
        12_000,
        "read units/s a new on-demand table takes at once (then double the previous peak per 30 min,"
        " or pre-set warm throughput, which is kept once set)",
        f"same page; docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput.html"
        f" (read {CHECKED})",
        adjustable=True,
    ),
    "sqs_fifo_tps": Limit(
        70_000,
        "transactions/s per API action per high-throughput FIFO queue, us-east-1 (x10 messages batched)",
        "docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html;"
        " figure as published by a public guide quoting it (70,000 TPS / 700,000 msgs/s), unverified here",
    ),
    "sqs_fifo_in_flight": Limit(
        120_000,
        "in-flight messages per FIFO queue",
        "SQS quotas page, raised from 20,000 in November 2024; as published, unverified here",
    ),
    "lambda_account_concurrency": Limit(
        1000,
        "concurrent executions per account and region (default quota)",
        "docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html (Concurrent executions, default"
        " 1,000; new accounts start lower and are raised with use; read on the stored copy, 2026-12-07)",
        adjustable=True,
    ),
    "lambda_scaling_rate": Limit(
        1000,
        "new execution environments per 10 s per function (each function scales on its own)",
        f"docs.aws.amazon.com/lambda/latest/dg/scaling-behavior.html (read {CHECKED})",
    ),
    "lambda_esm_max_concurrency": Limit(
        1000,
        "MaximumConcurrency of one SQS event source (2-1,000); FIFO: at most one per active message group",
        f"docs.aws.amazon.com/lambda/latest/dg/API_ScalingConfig.html and {SQS_SCALING} (read {CHECKED})",
    ),
    "lambda_esm_start": Limit(
        5,
        "concurrent invokes an SQS event source starts with when messages appear",
        f"{SQS_SCALING} (read {CHECKED})",
    ),
    "lambda_esm_ramp_per_min": Limit(
        300,
        "more concurrent invokes per minute per SQS event source, standard mode (stated for standard"
        " queues; the page gives no other rate for FIFO, so the model applies it to FIFO too)",
        f"{SQS_SCALING} (read {CHECKED})",
    ),
    "lambda_esm_provisioned_ramp_per_min": Limit(
        1000,
        "concurrent executions added per minute by an SQS event source in provisioned mode (up to 20,000);"
        " MinimumPollers 2-200, MaximumPollers 2-2,000 per event source",
        "aws.amazon.com/blogs/aws/aws-lambda-enhances-sqs-processing-with-new-provisioned-mode-3x-faster-"
        "scaling-16x-higher-capacity; docs.aws.amazon.com/lambda/latest/api/API_ProvisionedPollerConfig.html"
        f" (read {CHECKED}); FIFO support not stated there: unverified here",
    ),
    "lambda_esm_invokes_per_poller": Limit(
        10,
        "concurrent invokes one provisioned SQS event poller drives",
        "as recalled from the provisioned-mode section of services-sqs-scaling.html; unverified here",
    ),
    "lambda_vcpu_mb": Limit(
        1769,
        "MB of function memory per full vCPU",
        "docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html;"
        " as widely published, unverified here",
    ),
    "sfn_inline_map_concurrency": Limit(
        40,
        "concurrent iterations of an inline Map state",
        f"docs.aws.amazon.com/step-functions/latest/dg/state-map-inline.html (read {CHECKED})",
    ),
    "sfn_distributed_map_concurrency": Limit(
        10_000,
        "concurrent child workflow executions of a Distributed Map state (not used: see map_limit_for)",
        "docs.aws.amazon.com/step-functions/latest/dg/state-map-distributed.html;"
        " as published, unverified here",
    ),
    "fargate_launch_burst": Limit(
        100,
        "Fargate on-demand task launches at once (token bucket, per account and region)",
        "docs.aws.amazon.com/AmazonECS/latest/developerguide/throttling.html (read 2026-12-01)",
    ),
    "fargate_launch_rate": Limit(
        20,
        "Fargate on-demand task launches a second, sustained (the same bucket's refill)",
        "same page (read 2026-12-01)",
    ),
    "apigw_account_rps": Limit(
        10_000,
        "requests/s per account and region across APIs (burst 5,000)",
        f"docs.aws.amazon.com/apigateway/latest/developerguide/limits.html (read {CHECKED})",
        adjustable=True,
    ),
}

# Prices bench/prices.json does not carry (us-east-1, arm64), with where they come from.
EXTRA_PRICES: dict[str, tuple[float, str]] = {
    "lambda_provisioned_gb_s": (
        0.0000033334,
        "Lambda provisioned concurrency, arm64, per GB-second kept warm: aws.amazon.com/lambda/pricing/;"
        " as widely published, unverified here",
    ),
    "fargate_vcpu_hour": (
        0.03238,
        "Fargate Linux/ARM per vCPU-hour: aws.amazon.com/fargate/pricing/;"
        " as widely published, unverified here",
    ),
    "fargate_gb_hour": (
        0.00356,
        "Fargate Linux/ARM per GB-hour: same page; as widely published, unverified here",
    ),
}

# What the model takes as given where nothing measured or published says more.
ASSUMPTIONS: dict[str, tuple[float, str]] = {
    "cold_start_s": (
        1.0,
        "a new worker environment's init (Python, boto3, Powertools, the layer) before its first message",
    ),
    "ecs_cpu_efficiency": (
        0.8,
        "share of one vCPU an ECS worker process turns into work with 32 threads under the GIL",
    ),
    "ecs_lease_wru": (
        1.0,
        "an ECS worker writes a backstop LEASE timer per execution: one more write, due past the far"
        " threshold (its lease itself is 8 s, renewed on the record and the message), so into a far shard",
    ),
    "burst_margin": (
        0.9,
        "the burst-ready search aims at 90 % of each target (4.5 s p99, 9 s all started) for what the"
        " fluid model leaves out: a batch's tenth message starts 9 messages after its first (~0.2 s),"
        " pollers start a few hundred ms apart",
    ),
    "fargate_start_s": (
        60.0,
        "from UpdateService to a burst task long-polling: Fargate placement, ENI, pull of the ~200 MB"
        " worker image, interpreter start (no published figure; commonly reported 30-60 s)",
    ),
    "fargate_stop_s": (
        10.0,
        "from the scale-back to a burst task's end: an idle worker drains at once after SIGTERM",
    ),
    "tick_s": (
        2.0,
        "when in its minute the tick runs (EventBridge's every-minute rule fires in the first seconds)",
    ),
    "sqs_send_ms": (10.0, "SendMessageBatch latency (bench/cost_per_million.py's assumption, read from it)"),
    "batch_get_ms": (8.0, "BatchGetItem latency (same)"),
    "batch_write_ms": (10.0, "BatchWriteItem latency (same)"),
}


def assumed(name: str) -> float:
    return ASSUMPTIONS[name][0]


SECONDS_A_MONTH = 86_400 * 365 / 12
MINUTES_A_MONTH = SECONDS_A_MONTH / 60
DEPLOYABLE_MAX_QUEUES = 10  # infra/constants.py MAX_QUEUE_COUNT
DEPLOYABLE_MAX_GROUPS = 256  # infra/constants.py MAX_SHARD_GROUPS (a Parallel of 7 inline Maps)
