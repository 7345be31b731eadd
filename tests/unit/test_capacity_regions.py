"""The capacity model's multi-Region profile (bench/capacity_regions.py): its arithmetic only.

Every Region releases every slot and the claim keeps one (docs/multi-region.md, section 2): each
replica applies every Region's next-timer write, the winner's claim and finish and the losing
claims; each Region's queue takes every slot; each claim waits a cross-Region round trip.
"""

from __future__ import annotations

import importlib
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))  # the bench modules import each other by name, as the scripts do

regions = importlib.import_module("capacity_regions")
model = importlib.import_module("capacity_model")

ONE, TWO, THREE = regions.REGION_PROFILES
D = model.Deployment(table_wru=40_000, table_rru=40_000, account_concurrency=1000)
P = model.PerTrigger(worker_io_ms=14.0, worker_cpu_us=1000.0, target_ms=0.0)
SENDS = 0.1  # one SendMessageBatch of ten per trigger
COUNTS = regions.RegionCounts(
    timer_wru=0.1,
    exec_wru=2.0,
    rru=1.0,
    sqs_calls={
        "sqs.SendMessageBatch": SENDS,
        "sqs.ReceiveMessage": 0.1,
        "sqs.DeleteMessageBatch": 0.1,
        "sqs.ChangeMessageVisibilityBatch": 0.1,
    },
    claim_ms=6.0,
)


def _check(checks: list[object], starts: str) -> object:
    return next(c for c in checks if c.name.startswith(starts))  # type: ignore[attr-defined]


def test_the_profiles_are_one_region_two_and_a_witness_and_three() -> None:
    assert [(p.regions, p.replicas, p.witness) for p in regions.REGION_PROFILES] == [
        (1, 1, False),
        (2, 2, True),
        (3, 3, False),
    ]


def test_each_replica_applies_every_regions_timer_write_the_winners_two_and_the_losing_claims() -> None:
    # one Region: its next timer and the claim and finish
    assert regions.replica_wru_per_trigger(COUNTS, ONE) == pytest.approx(2.1)
    # two Regions: two next-timer writes (the same item), claim + finish, one losing claim
    assert regions.replica_wru_per_trigger(COUNTS, TWO) == pytest.approx(2 * 0.1 + 2 + 1)
    # three: three next-timer writes, claim + finish, two losing claims
    assert regions.replica_wru_per_trigger(COUNTS, THREE) == pytest.approx(3 * 0.1 + 2 + 2)


def test_table_writes_per_replica_and_their_headroom_at_10000_a_second() -> None:
    checks = regions.regional_checks(10_000, D, P, COUNTS, THREE, 30.0)
    writes = _check(checks, "table writes per replica")
    assert writes.demand == pytest.approx(43_000)  # type: ignore[attr-defined]
    assert writes.headroom == pytest.approx(40_000 / 43_000)  # type: ignore[attr-defined]
    assert regions.two_x(writes) == 86_000  # the per-Region quota that gives 2x
    concurrency = _check(checks, "worker concurrency")
    assert regions.two_x(concurrency) == math.ceil(2 * concurrency.demand / 100) * 100  # type: ignore[attr-defined]
    # reads stay local: one Region's, whatever the number of Regions
    reads = [
        _check(regions.regional_checks(10_000, D, P, COUNTS, p, 30.0), "table reads") for p in (ONE, THREE)
    ]
    assert [r.demand for r in reads] == [10_000, 10_000]  # type: ignore[attr-defined]


def test_every_region_writes_each_next_timer_to_the_same_key() -> None:
    d = replace(D, shard_count=100, near_shard_count=10)
    p = replace(P, near_share=0.5)
    one = regions.regional_checks(10_000, d, p, COUNTS, ONE, 30.0)
    three = regions.regional_checks(10_000, d, p, COUNTS, THREE, 30.0)
    assert _check(one, "far timer key").demand == pytest.approx(10_000 * 0.1 / 100)  # type: ignore[attr-defined]
    assert _check(three, "far timer key").demand == pytest.approx(3 * 10_000 * 0.1 / 100)  # type: ignore[attr-defined]
    assert _check(three, "near timer key").demand == pytest.approx(3 * 5_000 / 10 * 0.1)  # type: ignore[attr-defined]


def test_every_regions_queue_takes_every_slot_so_the_sends_over_all_regions_multiply() -> None:
    assert [regions.sends_per_trigger(COUNTS, p, D) for p in regions.REGION_PROFILES] == pytest.approx(
        [SENDS, 2 * SENDS, 3 * SENDS]
    )
    figures = regions.region_figures(10_000, D, P, COUNTS, THREE, 30.0)
    assert figures.sqs_calls_per_trigger_all_regions == pytest.approx(3 * 0.4)
    assert (figures.claims_per_slot, figures.losing_claims_per_slot) == (3, 2)
    # per queue, a Region sends what one Region sends
    per_queue = [
        _check(regions.regional_checks(10_000, D, P, COUNTS, p, 30.0), "SQS FIFO SendMessageBatch").demand  # type: ignore[attr-defined]
        for p in (ONE, THREE)
    ]
    assert per_queue == pytest.approx([1000, 1000])


def test_the_claim_waits_a_cross_region_round_trip_only_across_regions() -> None:
    assert regions.claim_ms(COUNTS, ONE, 30.0) == 6.0
    assert regions.claim_ms(COUNTS, TWO, 30.0) == 36.0
    assert regions.claim_ms(COUNTS, THREE, 12.0) == 18.0


def test_a_region_wins_one_slot_in_r_and_loses_the_others() -> None:
    single = model.worker_seconds(D, P)
    assert regions.worker_seconds_per_slot(D, P, COUNTS, ONE, 30.0) == pytest.approx(single)
    cpu = min(1.0, D.worker_memory_mb / 1769)
    lost = 0.036 + regions.LOSER_CPU_SHARE * 0.001 / cpu
    won = single + 2 * 0.030  # the claim and the finish each wait the round trip
    assert regions.worker_seconds_per_slot(D, P, COUNTS, TWO, 30.0) == pytest.approx(won / 2 + lost / 2)
    assert regions.worker_seconds_per_slot(D, P, COUNTS, THREE, 30.0) == pytest.approx(won / 3 + 2 * lost / 3)
    concurrency = _check(regions.regional_checks(1000, D, P, COUNTS, THREE, 30.0), "worker concurrency")
    assert concurrency.demand == pytest.approx(1000 * (won / 3 + 2 * lost / 3))  # type: ignore[attr-defined]


def test_the_counts_come_from_the_cost_benchs_rows_at_scale() -> None:
    cost = {
        "summary": {
            "rows": [
                {
                    "phase": "poller",
                    "operation": "dynamodb.BatchWriteItem",
                    "wru_per_trigger": 0.5,
                    "wru_per_trigger_at_scale": 0.08,
                    "rru_per_trigger": 0.0,
                    "calls_per_trigger": 0.15,
                },
                {
                    "phase": "poller",
                    "operation": "dynamodb.BatchGetItem",
                    "wru_per_trigger": 0.0,
                    "wru_per_trigger_at_scale": 0.0,
                    "rru_per_trigger": 1.0,
                    "calls_per_trigger": 0.15,
                },
                {
                    "phase": "worker",
                    "operation": "dynamodb.PutItem",
                    "wru_per_trigger": 2.0,
                    "wru_per_trigger_at_scale": 2.0,
                    "rru_per_trigger": 0.0,
                    "calls_per_trigger": 2.0,
                },
                {
                    "phase": "history",
                    "operation": "dynamodb.Query",
                    "wru_per_trigger": 0.0,
                    "wru_per_trigger_at_scale": 0.0,
                    "rru_per_trigger": 0.05,
                    "calls_per_trigger": 0.05,
                },
                {
                    "phase": "poller",
                    "operation": "sqs.SendMessageBatch",
                    "wru_per_trigger": 0.0,
                    "wru_per_trigger_at_scale": 0.0,
                    "rru_per_trigger": 0.0,
                    "calls_per_trigger": 0.2,
                },
            ]
        },
        "assumptions": {"latency_ms": {"dynamodb.PutItem": 7.0}},
    }
    counts = regions.RegionCounts.from_cost(cost, P)
    assert (counts.timer_wru, counts.exec_wru, counts.rru, counts.claim_ms) == (0.08, 2.0, 1.0, 7.0)
    assert counts.sqs_calls["sqs.SendMessageBatch"] == 0.2 and counts.sqs_calls["sqs.ReceiveMessage"] == 0
    # without the cost bench's results, the per-trigger defaults
    fallback = regions.RegionCounts.from_cost({}, P)
    assert (fallback.timer_wru, fallback.exec_wru) == (P.timer_wru, P.exec_wru)
