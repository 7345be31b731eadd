"""The quota ledger's arithmetic (bench/quotas.py): every limit with a source, headroom that takes the
target's duration, what gets 2x, and a burst held to every quota it meets."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))  # the bench modules import each other by name, as the scripts do

import capacity_burst  # noqa: E402
import capacity_model  # noqa: E402
import quotas  # noqa: E402

D = capacity_model.Deployment(queue_count=1, worker_max_concurrency=400, account_concurrency=1000)
P = capacity_model.PerTrigger(
    timer_wru=0.08,
    exec_wru=2.0,
    rru=0.57,
    worker_io_ms=16.0,
    worker_cpu_us=1000.0,
    poller_cpu_us_near=480.0,
    poller_cpu_us_far=250.0,
)


def _by_name(checks: list[capacity_model.Check], start: str) -> capacity_model.Check:
    (found,) = [c for c in checks if c.name.startswith(start)]
    return found


def test_every_row_names_its_limit_value_and_source() -> None:
    checks = quotas.headroom_checks(10_000, 100.0, D, P)
    names = [c.name for c in checks]
    for expected in (
        "DynamoDB table writes",
        "DynamoDB table reads",
        "far bucket partition writes",
        "near bucket partition reads",
        "SQS FIFO SendMessageBatch",
        "SQS FIFO ReceiveMessage",
        "SQS FIFO DeleteMessageBatch",
        "SQS FIFO ChangeMessageVisibility",
        "KMS Decrypt",
        "Lambda account concurrency",
        "Lambda event-source MaximumConcurrency",
        "worker concurrency",
        "Step Functions",
    ):
        assert any(name.startswith(expected) for name in names), expected
    assert all(c.source and c.limit > 0 for c in checks)


@pytest.mark.parametrize("target_ms", [0.0, 100.0, 1000.0])
def test_the_targets_duration_is_in_the_workers_time_per_message(target_ms: float) -> None:
    # 16 ms of I/O, 1 ms of CPU at 512 MB's share of a vCPU, and the target's own run
    environments = 10_000 * (0.016 + 0.001 * 1769 / 512 + target_ms / 1000)
    worker = _by_name(quotas.headroom_checks(10_000, target_ms, D, P), "worker concurrency")
    assert worker.demand == pytest.approx(environments, rel=0.01)
    assert worker.headroom == pytest.approx(400 / environments, rel=0.01)


def test_the_ask_for_2x_at_100_ms_gets_2x_on_every_worker_limit() -> None:
    ask = quotas.quota_ask_for(10_000, 100.0, D, P)
    assert ask["cdk_json"] and ask["quota_requests"]
    asked = replace(
        D,
        queue_count=ask["cdk_json"].get("queueCount", D.queue_count),
        worker_max_concurrency=ask["cdk_json"].get("workerMaxConcurrency", D.worker_max_concurrency),
        account_concurrency=next(iter(ask["quota_requests"].values())),
    )
    checks = quotas.headroom_checks(10_000, 100.0, asked, P)
    for name in (
        "worker concurrency",
        "Lambda account concurrency",
        "Lambda event-source MaximumConcurrency",
    ):
        assert _by_name(checks, name).headroom >= 2.0, name
    # An event source takes 1,000 at most: more is more queues, never one source above it
    assert asked.worker_max_concurrency <= 1000


def test_kms_is_one_decrypt_per_tenant_per_worker_process_not_per_trigger() -> None:
    kms = _by_name(quotas.headroom_checks(10_000, 0.0, D, P), "KMS Decrypt")
    assert kms.demand < 10_000 / 100  # a call per trigger would be 10,000 a second
    environments = 10_000 * capacity_model.worker_seconds(D, P)
    assert kms.demand == pytest.approx(environments * 1000 / 3600, rel=0.01)


def test_a_burst_is_held_to_the_tables_read_quota_until_its_profile_asks_for_reads() -> None:
    d = replace(D, table_wru=420_000, warm_wru=420_000, warm_rru=40_000, ecs_burst_tasks=232)
    burst = capacity_burst.simulate_burst(600_000, d, P, groups=80)
    # a new table without warm reads takes 12,000 read units a second at once (QA27 review)
    cold = quotas.burst_under_quotas(burst, replace(d, warm_rru=0), P)
    assert cold["binding_quota"] == "DynamoDB reads a table takes at once (warm throughput)"
    assert cold["started_by_s_under_quotas"] == pytest.approx(600_000 * (0.57 - 0.05) / 12_000, rel=0.01)
    under = quotas.burst_under_quotas(burst, d, P)
    # 600,000 job reads at half a unit against 40,000 units a second: 7.5 s at least
    assert under["binding_quota"] == "DynamoDB table reads"
    assert under["started_by_s_under_quotas"] == pytest.approx(600_000 * (0.57 - 0.05) / 40_000, rel=0.01)
    asked = replace(d, table_rru=80_000, warm_rru=80_000)
    assert quotas.burst_under_quotas(burst, asked, P)["started_by_s_under_quotas"] == pytest.approx(
        max(burst.started_by_s, 600_000 * 0.52 / 80_000), rel=0.01
    )
