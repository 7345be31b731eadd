"""bench/report.py: the Benchmarks page's rows say what the results they read measured."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))  # the bench modules import each other by name, as the scripts do

import benchlib  # noqa: E402
import report  # noqa: E402


def _sustained(jobs: int, probes: list[tuple[int, bool]]) -> dict[str, Any]:
    return {
        "jobs": jobs,
        "window_s": 120.0,
        "triggers_per_s": float(jobs),
        "fire_delay_s": {"p99": 0.9},
        "kept_up": True,
        "efficiency": 0.7,
        "search": [{"jobs": n, "passed": ok} for n, ok in probes],
    }


def _row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sustained: dict[str, Any], starts: str = "2. sustained"
) -> str:
    monkeypatch.setattr(benchlib, "RESULTS_DIR", tmp_path)
    delays = {"p50": 0.3, "p99": 0.6, "max": 0.6}
    burst = {"jobs": 100, "slot_to_receipt_s": delays, "slot_to_claim_s": delays}
    many = {
        "jobs": 10_000,
        "registration_per_s": 173.0,
        "observed_s": 30.0,
        "executed": 167,
        "fire_delay_s": {"p99": 1.769},
        "memory_mb": {"running": {"aws": 190.0}},
    }
    results = {"bursts": [burst], "sustained": sustained, "many_jobs": many}
    (tmp_path / "local_mode.json").write_text(json.dumps(results))
    return next(name for name, *_ in report.rows() if name.startswith(starts))


def test_the_sustained_row_says_the_held_load_is_90_percent_of_the_best_probe_that_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bench/local_mode.py holds 90 % of the highest rate a probe passed: 112 passed, 100 held
    row = _row(tmp_path, monkeypatch, _sustained(100, [(112, True), (140, False), (126, False)]))
    assert "highest load a probe search found (100" not in row
    assert "100 rate(1 second) jobs, 90 % of the 112 the best probe passed" in row
    assert "probes: 112 ok, 140 failed, 126 failed" in row


def test_the_sustained_row_says_when_no_probe_passed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    row = _row(tmp_path, monkeypatch, _sustained(24, [(30, False)]))
    assert "24 rate(1 second) jobs, no probe passed" in row


def test_the_many_jobs_row_says_how_few_slots_its_p99_is_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 10,000 jobs registered, but the p99 is over the 167 slots due in the 30 s it watched
    row = _row(tmp_path, monkeypatch, _sustained(100, [(112, True)]), starts="5. 10,000 mixed jobs")
    assert "p99 delay (of the 167 slots due in the 30 s watched)" in row


def test_make_bench_writes_its_table_beside_the_results_not_over_the_hand_kept_docs_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # QA27: the generated table replaced docs/benchmarks.md whole, undoing the page's corrections
    assert report.PAGE.parent == benchlib.RESULTS_DIR
    docs_page = benchlib.ROOT / "docs" / "benchmarks.md"
    before = docs_page.read_text()
    monkeypatch.setattr(report, "PAGE", tmp_path / "benchmarks.md")
    monkeypatch.setattr(sys, "argv", ["report.py"])
    report.main()
    assert (tmp_path / "benchmarks.md").read_text().startswith(report.HEADING)
    assert docs_page.read_text() == before
    assert "docs/benchmarks.md quotes the runs by hand" in capsys.readouterr().out


def _lease_results(**overrides: Any) -> dict[str, Any]:
    lease: dict[str, Any] = {
        "lease_s": 10,
        "message_lease_s": 8,
        "runs": [{"lane": "lambda", "run": "1 s", "usd_per_million_added": 0.1}],
        "recovery_s": {
            "run cut mid-way: death to the next attempt's start": 10.0,
            "received, not started: death to visible again": 8.0,
            "died before its handler: death to the run's start": 4.0,
        },
        "verdicts": {"runs_under_5_s_within_5_cents": True},
    }
    lease.update(overrides)
    return lease


def _recovery_verdict(lease: dict[str, Any]) -> str:
    [row] = [r for r in report.lease_rows(lease) if r[0].startswith("a dead worker replaced")]
    return row[3]


def test_the_lease_recovery_row_is_met_within_the_message_lease() -> None:
    assert _recovery_verdict(_lease_results()) == "met"


@pytest.mark.parametrize(
    "lease",
    [
        pytest.param(
            {k: v for k, v in _lease_results().items() if k != "message_lease_s"}, id="no-message-lease"
        ),
        pytest.param(
            _lease_results(recovery_s={"run cut mid-way: death to the next attempt's start": 8.0}),
            id="no-received-row",
        ),
        pytest.param(
            _lease_results(recovery_s={"received, not started: death to visible again": 10.0}),
            id="back-at-10-s",
        ),
    ],
)
def test_the_lease_recovery_row_is_missed_on_results_from_before_the_message_lease(
    lease: dict[str, Any],
) -> None:
    # (QA30: results without message_lease_s, 10 s back, read as met against a default of 10)
    assert _recovery_verdict(lease) == "**missed**"
