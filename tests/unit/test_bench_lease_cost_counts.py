"""bench/lease_cost.py counts every lease write a run asked for before it reads them: the lease
keeper's beats and the runs-in-flight counter's writes, made on threads of their own (QA30 review:
the last take-backs were often still queued, and ``in_flight_writes`` varied run to run)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))  # the bench modules import each other by name, as the scripts do

import lease_cost  # noqa: E402

ROWS = [
    (lane, seconds) for lane, lengths in lease_cost.RUNS.items() for _, seconds in lengths if seconds < 3600
]


@pytest.mark.parametrize("lane, seconds", ROWS)
def test_a_runs_lease_writes_are_all_counted_when_the_bench_reads_them(
    monkeypatch: pytest.MonkeyPatch, lane: str, seconds: int
) -> None:
    workers: list[Any] = []
    made = lease_cost._worker

    def kept(*args: Any) -> Any:
        workers.append(made(*args))
        return workers[-1]

    monkeypatch.setattr(lease_cost, "_worker", kept)
    for _ in range(5):
        # Given a run's lease costs as the bench reads them
        counted = lease_cost.lease_requests(lane, seconds)
        read = counted.in_flight_writes, counted.record_writes, counted.visibility_requests
        # When every write its worker asked for has been made
        assert workers[-1].in_flight.drain()
        # Then none was left out
        assert (counted.in_flight_writes, counted.record_writes, counted.visibility_requests) == read
