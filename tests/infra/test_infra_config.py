"""Context settings: defaults in one place, strings from `-c key=value` coerced, bad values refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra import build_layer
from punctual.runtime.settings import DEPLOYED, Settings, SettingsError, env_value
from punctual_cdk import constants as c
from punctual_cdk.config import DEFAULTS, ConfigError, PunctualConfig, fargate_memory_fits, target_actions

REPO_ROOT = Path(__file__).resolve().parents[2]


def config(**overrides: Any) -> PunctualConfig:
    return PunctualConfig.from_context(lambda key: overrides.get(key))


def test_cdk_json_carries_every_default_with_the_same_value() -> None:
    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    settings = {key: value for key, value in context.items() if not key.startswith("@aws-cdk")}

    assert settings == DEFAULTS


def test_defaults_match_the_runtime_contract() -> None:
    cfg = config()

    assert (cfg.shard_count, cfg.near_shard_count, cfg.far_threshold_s) == (256, 8, 180)
    assert (cfg.poll_interval_ms, cfg.retention_days, cfg.max_jobs_per_tenant) == (1000, 30, 100_000)
    assert (cfg.shard_groups, cfg.queue_count, cfg.max_receive_count) == (1, 1, 10)
    assert cfg.target_arn_patterns == () and cfg.target_allow_cidrs == ()


def test_command_line_strings_are_coerced() -> None:
    cfg = config(
        shardGroups="4",
        tableDeletionProtection="false",
        alarmEmails="a@example.com, b@example.com",
        targetArnPatterns='["arn:aws:sns:eu-west-1:123456789012:alerts"]',
    )

    assert cfg.shard_groups == 4
    assert cfg.table_deletion_protection is False
    assert cfg.alarm_emails == ("a@example.com", "b@example.com")
    assert cfg.target_arn_patterns == ("arn:aws:sns:eu-west-1:123456789012:alerts",)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("shardGroups", 41, "shardGroups"),  # more than maxShardGroups (40 by default)
        ("maxShardGroups", 257, "maxShardGroups"),  # 7 inline Maps of 40 in a Parallel at most
        ("shardGroups", "two", "shardGroups"),
        ("triggersPerPollerMinute", 99, "triggersPerPollerMinute"),  # Settings refuses under 100
        ("triggersPerPollerMinute", "many", "triggersPerPollerMinute"),
        ("ecsBurstTasks", -1, "ecsBurstTasks"),
        ("ecsBurstTasks", 5001, "ecsBurstTasks"),
        ("ecsBurstConcurrency", 0, "ecsBurstConcurrency"),
        ("ecsBurstConcurrency", 257, "ecsBurstConcurrency"),  # ServiceSettings' bound
        ("ecsBurstCpu", 1000, "ecsBurstCpu"),
        ("ecsBurstMemoryMb", 1024, "ecsBurstMemoryMb"),  # 1 vCPU takes 2..8 GB
        ("ecsBurstMemoryMb", 2500, "ecsBurstMemoryMb"),
        # QA22: the ECS worker's own pair was not checked (CloudFormation's validation warned, the
        # task definition failed at deploy)
        ("ecsMemoryMiB", 8192, "ecsMemoryMiB: Fargate does not run 8192 MiB with ecsCpu 512"),
        ("ecsMemoryMiB", 1536, "ecsMemoryMiB: Fargate does not run 1536 MiB with ecsCpu 512"),
        ("queueCount", 0, "queueCount"),
        ("workerBatchSize", 11, "workerBatchSize"),  # FIFO event sources take at most 10
        ("tableBillingMode", "serverless", "tableBillingMode"),
        ("logRetentionDays", 31, "logRetentionDays"),
        ("alarmEmails", ["not-an-address"], "alarmEmails"),
        ("vpcId", "my-vpc", "vpcId"),
        ("nearShardCount", 1024, "nearShardCount"),
        ("tableDeletionProtection", "maybe", "tableDeletionProtection"),
        # QA22: CloudFormation takes no Snapshot DeletionPolicy on a DynamoDB table (a synth warning,
        # a stack that could not deploy)
        ("tableRemovalPolicy", "snapshot", "tableRemovalPolicy: 'snapshot' is not one of retain, destroy"),
        ("ecsBurstTasksMax", 5001, "ecsBurstTasksMax"),
        ("ecsBurstTasksMax", 1, "ecsBurstTasksMax"),  # under ecsBurstTasks (set to 2 below)
        ("burstLatenessTargetS", 0, "burstLatenessTargetS"),
        ("burstStartLeadS", 601, "burstStartLeadS"),
        ("maxLatenessSeconds", -1, "maxLatenessSeconds"),
        ("targetRateBudgets", ["hooks.example.com=fast"], "targetRateBudgets"),
        ("ecsReadyTasks", -1, "ecsReadyTasks"),
        ("ecsReadyTasks", 11, "ecsReadyTasks"),  # over ecsMaxTasks (10)
        ("ecsReadyTasks", "two", "ecsReadyTasks"),
        # QA22: values every function's settings refuse at cold start (a deployment that never ran)
        ("executionRoleTag", "scheduler role", "executionRoleTag"),
        ("executionRolePrefix", "punctual-*", "executionRolePrefix"),
        # QA28: an IAM path as IAM writes it matched no role's ARN (role//punctual/*), and a reserved
        # tag key was one no role can carry: both synthesised, and no job's role could be assumed
        ("executionRolePrefix", "/punctual/", "executionRolePrefix: '/punctual/' starts with '/'"),
        (
            "executionRoleTag",
            "aws:scheduler",
            "executionRoleTag: 'aws:scheduler': tag keys beginning with aws:",
        ),
        ("targetAllowCidrs", "10.0.0.1/8", "targetAllowCidrs"),  # host bits set: not a block
        ("targetAllowCidrs", ["intranet"], "targetAllowCidrs"),
        # QA22: the created VPC's private subnets without a NAT gateway have no route out: the
        # ECS workers could not read the dispatch key (Secrets Manager) and never started
        ("natGateways", 0, "natGateways"),
        # QA22: refused by CloudFormation at deploy (or by CDK with a message naming no key)
        ("apiWebAclArn", "punctual-acl", "apiWebAclArn"),
        ("apiWebAclArn", "arn:aws:wafv2:us-east-1:123456789012:global/webacl/x/1", "apiWebAclArn"),
        ("stackName", "my scheduler", "stackName"),
        # QA22: below DynamoDB's warm throughput minimums (a new table's 12,000 / 4,000 units a
        # second, which cannot be lowered): synthesised, and refused by DynamoDB at deploy
        ("tableWarmReadUnitsPerSecond", 11_999, "tableWarmReadUnitsPerSecond: 11999 is below DynamoDB's"),
        ("tableWarmWriteUnitsPerSecond", "1000", "tableWarmWriteUnitsPerSecond: 1000 is below DynamoDB's"),
        # QA27: a fraction in cdk.json was cut off silently (shardCount 2.7 read as 2 and refused as
        # 'nearShardCount: must not exceed shardCount'; 256.5 deployed 256 shards)
        ("shardCount", 2.7, "shardCount: 2.7 is not an integer"),
        ("fireDelayAlarmMs", 1500.5, "fireDelayAlarmMs: 1500.5 is not an integer"),
        # QA27: a history shorter than the 23 days a worker accepts a message's copy let a copy
        # redriven after its slot's record expired run the slot again (1 was accepted)
        ("retentionDays", 23, "retentionDays: 23 is below 24: a slot's record must outlive every copy"),
    ],
)
def test_bad_values_name_their_key(key: str, value: Any, message: str) -> None:
    extra = {"ecsBurstTasks": 2} if key == "ecsBurstTasksMax" else {}
    with pytest.raises(ConfigError, match=message):
        config(**{key: value, **extra})


@pytest.mark.parametrize("app", ["infra/app.py", "infra/multi_region_app.py"])
def test_the_apps_stop_on_a_bad_context_value_with_one_line_naming_it(app: str) -> None:
    """QA22: `cdk synth -c shardGroups=two` printed a Python traceback ending in the ConfigError."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps({"shardGroups": "two", "regions": "us-east-1"})}
    done = subprocess.run(
        [sys.executable, app], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if "shardGroups" in line]
    assert lines == ["punctual: context shardGroups: 'two' is not an integer"], done.stderr


def test_a_bad_console_tenant_stops_the_synth_with_one_line_naming_it() -> None:
    """QA22: consoleTenant (read by the console construct, not the config) raised a ValueError
    and so a traceback."""
    import os
    import subprocess
    import sys

    context = {"consoleTenant": "ops team!", "layerAssetDir": "layers/core"}
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": "/nonexistent/unused"}
    done = subprocess.run(
        [sys.executable, "infra/app.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert [line for line in done.stderr.splitlines() if "consoleTenant" in line] == [
        "punctual: context consoleTenant: must be a tenant: 1-256 characters of letters, digits, ._:/@+=,-"
    ], done.stderr


def test_a_layer_not_built_stops_the_synth_with_one_line_naming_it(tmp_path: Path) -> None:
    """QA22: without `make layer` the synth ended in a Python traceback (FileNotFoundError), its
    clear message at the bottom, where every other refusal is one line naming its key."""
    import os
    import subprocess
    import sys

    missing = tmp_path / "no-layer"
    context = {"layerAssetDir": str(missing)}
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(tmp_path / "out")}
    done = subprocess.run(
        [sys.executable, "infra/app.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert [line for line in done.stderr.splitlines() if "layer" in line] == [
        f"punctual: context layerAssetDir: the Lambda layer is not built: {missing}/python is missing "
        "(run `make layer`)"
    ], done.stderr


def test_a_poller_reservation_holds_two_minutes_of_pollers() -> None:
    """QA22: reserved concurrency is also the pollers' maximum. A poller runs its whole minute
    from its lead to its grace (~80 s), so two minutes' pollers run at once; a reservation below
    that throttles the rest, which start when others end, their shards' slots late."""
    with pytest.raises(ConfigError, match="pollerReservedConcurrency"):
        config(pollerReservedConcurrency=10)  # 40 groups' pollers a minute, two minutes at once: 80
    with pytest.raises(ConfigError, match="pollerReservedConcurrency"):
        config(maxShardGroups=2, pollerReservedConcurrency=4)  # 2 groups x 2 replicas x 2 minutes
    assert config(pollerReservedConcurrency=80).poller_reserved_concurrency == 80
    assert config(maxShardGroups=2, pollerReservedConcurrency=8).poller_reserved_concurrency == 8
    assert config(maxShardGroups=62, shardGroups=1, pollerReservedConcurrency=248).group_slices == 2


def test_the_apis_reservation_leaves_a_small_account_room_and_may_be_opted_out_of() -> None:
    """QA30 review (b1fb7157): the default reserved 200 for the api function, again in every stack
    of an account and Region, and Lambda keeps 100 unreserved: an account under 300 could not deploy
    (or upgrade). 100 is the stage's 100 requests a second at up to 1 s each; 0 reserves nothing."""
    assert config().api_reserved_concurrency == 100 == c.API_THROTTLE_RATE_PER_S
    assert config(apiReservedConcurrency="0").api_reserved_concurrency == 0


def test_warm_throughput_is_unset_or_at_least_dynamodbs_minimum() -> None:
    cfg = config(tableWarmReadUnitsPerSecond=12_000, tableWarmWriteUnitsPerSecond=4_000)
    assert (cfg.table_warm_read_units_per_second, cfg.table_warm_write_units_per_second) == (12_000, 4_000)
    assert config(tableWarmWriteUnitsPerSecond=5_000).table_warm_read_units_per_second == 0  # not set


def test_far_timers_are_written_before_their_bucket_is_read() -> None:
    """QA22: farThresholdS took 10..3600, but a minute's far bucket is read once, when its pollers
    start (pollerLeadS before it): with a threshold of 30 a timer due at :50 written at :15 went to
    the bucket read at -0:10 and was not released by its pollers."""
    for context in ({"farThresholdS": 30}, {"farThresholdS": 74}, {"farThresholdS": 100, "pollerLeadS": 40}):
        with pytest.raises(ConfigError, match=r"^farThresholdS: \d+ is under \d+ \(60 \+ pollerLeadS"):
            config(**context)
    assert config(farThresholdS=75).far_threshold_s == 75  # 60 + the default lead (10) + 5 s of skew
    assert config(farThresholdS=105, pollerLeadS=40).far_threshold_s == 105


def test_a_destroyed_table_may_not_be_protected_from_deletion() -> None:
    """QA22: tableRemovalPolicy=destroy with tableDeletionProtection=true (its default) synthesised,
    and `make destroy` then failed on the table: DeleteTable refuses a protected table."""
    with pytest.raises(ConfigError) as refused:
        config(tableRemovalPolicy="destroy")
    message = str(refused.value)
    assert message.startswith("tableRemovalPolicy: ") and "tableDeletionProtection" in message
    assert "\n" not in message
    assert (
        config(tableRemovalPolicy="destroy", tableDeletionProtection="false").table_removal_policy
        == "destroy"
    )
    assert config(tableDeletionProtection=True).table_removal_policy == "retain"


def test_an_existing_vpc_needs_no_nat_gateway_of_the_stack() -> None:
    assert config(vpcId="vpc-0123456789abcdef0", natGateways=0).nat_gateways == 0


def test_every_deployed_value_is_one_the_runtime_reads_back() -> None:
    """QA22: the stack sets a function's PUNCTUAL_* variables from the context; a value its
    settings refuse stopped every function at cold start (PUNCTUAL_TARGET_ALLOW_CIDRS, the tag)."""
    cfg = config(
        executionRoleTag="acme:scheduler-role",
        executionRolePrefix="punctual/",
        targetAllowCidrs="10.0.0.0/8, fd00::/8",
    )
    env = {Settings.variable(field): env_value(getattr(cfg, field)) for field in DEPLOYED}
    settings = Settings.from_env(env)
    assert settings.target_allow_cidrs == ["10.0.0.0/8", "fd00::/8"]
    with pytest.raises(SettingsError, match="PUNCTUAL_TARGET_ALLOW_CIDRS"):
        Settings.from_env({"PUNCTUAL_TARGET_ALLOW_CIDRS": "10.0.0.1/8"})


@pytest.mark.parametrize(
    "pattern",
    [
        "*",
        "arn:aws:*:eu-west-1:123456789012:function:x",  # a wildcard service
        "arn:aws:lambda:eu-west-1:123456789012:*",  # every resource of a service
        "arn:aws:s3:::bucket/*",  # not a target service
        "arn:aws:ecs:eu-west-1:123456789012:cluster/main",  # ECS: neither a task definition nor a task
    ],
)
def test_target_patterns_never_grant_everything(pattern: str) -> None:
    with pytest.raises(ConfigError, match="targetArnPatterns"):
        config(targetArnPatterns=[pattern])


@pytest.mark.parametrize(
    ("pattern", "actions"),
    [
        ("arn:aws:lambda:eu-west-1:123456789012:function:team-*", ("lambda:InvokeFunction",)),
        ("arn:aws:sqs:eu-west-1:123456789012:orders", ("sqs:SendMessage",)),
        ("arn:aws:sns:eu-west-1:123456789012:alerts", ("sns:Publish",)),
        ("arn:aws:events:eu-west-1:123456789012:event-bus/default", ("events:PutEvents",)),
        ("arn:aws:states:eu-west-1:123456789012:stateMachine:x", ("states:StartExecution",)),
        ("arn:aws:ecs:eu-west-1:123456789012:task-definition/report:*", ("ecs:RunTask",)),
        ("arn:aws:ecs:eu-west-1:123456789012:task/reports/*", ("ecs:DescribeTasks", "ecs:StopTask")),
        ("arn:aws:iam::123456789012:role/report-task", ("iam:PassRole",)),
    ],
)
def test_each_target_service_gets_only_its_invoking_action(pattern: str, actions: tuple[str, ...]) -> None:
    assert target_actions(pattern) == actions


def test_layer_stamp_changes_with_its_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a core package and a requirements file
    core = tmp_path / "punctual"
    core.mkdir()
    (core / "__init__.py").write_text("x = 1\n")
    (core / "__pycache__").mkdir()
    (core / "__pycache__" / "junk.pyc").write_bytes(b"\0")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("pydantic==2.0\n")
    monkeypatch.setattr(build_layer, "CORE_DIR", core)
    monkeypatch.setattr(build_layer, "REQUIREMENTS", requirements)
    first = build_layer.inputs_hash()

    # When nothing but a .pyc changes, the stamp holds
    (core / "__pycache__" / "junk.pyc").write_bytes(b"\1")
    assert build_layer.inputs_hash() == first

    # When a source or a pin changes, the layer must be rebuilt
    (core / "__init__.py").write_text("x = 2\n")
    second = build_layer.inputs_hash()
    requirements.write_text("pydantic==2.1\n")
    assert len({first, second, build_layer.inputs_hash()}) == 3


def test_burst_workers_are_off_by_default_and_sized_from_context() -> None:
    cfg = config()
    assert (cfg.ecs_burst_tasks, cfg.ecs_burst_concurrency, cfg.ecs_burst_cpu, cfg.ecs_burst_memory_mb) == (
        0,
        32,
        1024,
        2048,
    )
    burst = config(ecsBurstTasks="214", ecsBurstCpu="2048", ecsBurstMemoryMb="4096", ecsBurstConcurrency="64")
    assert (burst.ecs_burst_tasks, burst.ecs_burst_cpu, burst.ecs_burst_memory_mb) == (214, 2048, 4096)
    assert burst.ecs_burst_concurrency == 64


@pytest.mark.parametrize(
    ("cpu", "memory", "fits"),
    [
        (256, 512, True),
        (256, 1536, False),
        (512, 4096, True),
        (1024, 2048, True),
        (1024, 9216, False),
        (4096, 30720, True),
        (8192, 20480, True),
        (8192, 18432, False),
        (16384, 122880, True),
    ],
)
def test_fargate_cpu_and_memory_pairs(cpu: int, memory: int, fits: bool) -> None:
    assert fargate_memory_fits(cpu, memory) is fits


def test_more_than_40_groups_split_over_inline_maps_which_then_run_all_at_once() -> None:
    assert config().group_slices == 1  # the default: one inline Map, as before
    assert config(maxShardGroups=40).group_slices == 1
    assert config(maxShardGroups=41).group_slices == 2
    assert config(maxShardGroups="62", shardGroups="41").group_slices == 2
    assert config(maxShardGroups=256).group_slices == 7
    assert config(maxShardGroups=2, pollerMaxConcurrency=4).poller_max_concurrency == 4
    # QA22: a Map that runs fewer pollers at once than a minute may have (its groups, twice each
    # while they fit: pollerReplicas) starts the others when the first end, a minute late.
    with pytest.raises(ConfigError, match="pollerMaxConcurrency"):
        config(pollerMaxConcurrency=4)  # maxShardGroups 40: a burst minute has up to 40 pollers
    with pytest.raises(ConfigError, match="pollerMaxConcurrency"):
        config(maxShardGroups=4, pollerMaxConcurrency=4)  # 4 groups with their replicas: 8
    assert config(maxShardGroups=4, pollerReplicas=1, pollerMaxConcurrency=4).poller_max_concurrency == 4
    assert config(pollerMaxConcurrency=40).poller_max_concurrency == 40  # 20 groups x 2, or 40 alone
    # Several Maps cannot share one concurrency cap: refuse rather than cap each Map alone.
    with pytest.raises(ConfigError, match="pollerMaxConcurrency"):
        config(maxShardGroups=62, pollerMaxConcurrency=4)
    with pytest.raises(ConfigError, match="pollerMaxConcurrency"):
        config(pollerMaxConcurrency=41)
