"""bench/cost_scale.py: what the cost bench's small run says about 10,000 triggers a second."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))  # the bench modules import each other by name, as the scripts do

import cost_scale  # noqa: E402
from awsmeter import Tally  # noqa: E402

JOB_READS = ("poller", "dynamodb.BatchGetItem", "job")


def test_a_per_chunk_request_is_paid_once_per_100_triggers_when_chunks_are_full() -> None:
    # The cost run: 1,850 triggers released in 296 chunks (one job read each), 6.25 a chunk.
    # At 10,000/s a chunk is full (100), so a per-chunk request costs 296 / 18.5 = 1/16 of the run's.
    assert cost_scale.per_full_chunk({JOB_READS: Tally(calls=296)}, 1850) == pytest.approx(1850 / 100 / 296)
    # the minute-load ledger, one write per chunk: 0.16 write units a trigger in the run, 0.01 at scale
    assert 296 / 1850 * cost_scale.per_full_chunk({JOB_READS: Tally(calls=296)}, 1850) == pytest.approx(0.01)


def test_full_chunks_already_are_not_scaled_and_no_chunks_scale_nothing() -> None:
    assert cost_scale.per_full_chunk({JOB_READS: Tally(calls=10)}, 2000) == 1.0  # 200 a chunk: capped
    assert cost_scale.per_full_chunk({}, 1850) == 1.0


def test_a_batch_bills_every_records_cpu_and_one_records_requests_per_ten() -> None:
    # ten records side by side: 3.3 ms of CPU each, one 12 ms claim + finish, a 10 ms lease, 3 ms overhead
    assert cost_scale.side_by_side_ms(12.0, 3.3, 10, 3.0, 10.0) == pytest.approx(3.3 + (3 + 10 + 12) / 10)
    # twenty records: two waves of requests
    assert cost_scale.side_by_side_ms(12.0, 3.3, 20, 3.0, 10.0) == pytest.approx(3.3 + (3 + 10 + 24) / 20)
