"""``python -m local.chaos`` refuses what it cannot run with one line and exit 2 (QA22): ``run
--minutes -1`` ran "-60s of faults", ``--max-p99-delay-s -3`` a bound no run could meet, and
``verdict`` of a directory that holds no run was a ``FileNotFoundError`` traceback."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from local.chaos import cli


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--minutes", "-1"],
        ["run", "--seconds", "0"],
        ["run", "--max-p99-delay-s", "-3"],
        ["run", "--kill-every", "nan"],
        ["plan", "--seconds", "-5"],
        ["region-loss", "--seconds", "-240"],
        ["verdict", ".", "--max-p99-delay-s", "0"],
    ],
)
def test_a_length_or_bound_not_above_0_is_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_run(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"{argv} was run")

    monkeypatch.setattr("local.chaos.runner.ChaosRun", no_run)  # nothing starts, whatever the parser takes
    monkeypatch.setattr(cli, "region_loss", no_run)
    with pytest.raises(SystemExit) as refused:
        cli.main(argv)
    assert refused.value.code == 2
    assert "a number above 0" in capsys.readouterr().err


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_run(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a run was started")

    monkeypatch.setattr(importlib.import_module("local.chaos.region_loss"), "RegionLossRun", no_run)
    monkeypatch.setattr("local.chaos.runner.ChaosRun", no_run)  # (after: RegionLossRun subclasses it)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["run", "--max-skew", "-5"], "argument --max-skew: a number 0 or above, not -5"),
        (["run", "--max-skew", "inf"], "argument --max-skew: a number 0 or above, not inf"),
        (["plan", "--stale-reads", "-1"], "argument --stale-reads: stale reads are 0 to 60 seconds behind"),
        (["run", "--stale-reads", "inf"], "argument --stale-reads: stale reads are 0 to 60 seconds behind"),
        (["run", "--throttle", "-0.5"], "argument --throttle: a share from 0 to below 1"),
        (["plan", "--throttle", "2"], "argument --throttle: a share from 0 to below 1"),
        (
            ["run", "--transaction-conflicts", "-0.1"],
            "argument --transaction-conflicts: a share from 0 to below 1",
        ),
        (
            ["run", "--transaction-conflicts", "nan"],
            "argument --transaction-conflicts: a share from 0 to below 1",
        ),
    ],
)
@pytest.mark.usefixtures("nothing_starts")
def test_a_negative_fault_size_or_a_share_outside_0_to_1_is_refused(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        cli.main(argv)
    assert refused.value.code == 2
    assert said in capsys.readouterr().err


def test_no_fault_at_all_is_still_a_fault_size_given() -> None:
    args = cli.build_parser().parse_args(["plan", "--max-skew", "0", "--throttle", "0", "--stale-reads", "0"])
    options = cli._options(args)
    assert (options.max_skew_s, options.throttle_rate, options.stale_reads_s) == (0.0, 0.0, 0.0)


def test_a_verdict_of_a_directory_without_a_run_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["verdict", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"chaos: cannot judge {tmp_path / 'nowhere'}: ") and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["region-loss", "--workers", "-1"],
            "region-loss: --workers: at least 1 Lambda worker process per Region",
        ),
        (["region-loss", "--workers", "0"], "region-loss: --workers: at least 1"),
        (["region-loss", "--down-at", "nan"], "region-loss: the outage must lie inside the run"),
        (["region-loss", "--down-for", "nan"], "region-loss: the outage must lie inside the run"),
    ],
)
@pytest.mark.usefixtures("nothing_starts")
def test_a_region_loss_without_workers_or_with_no_outage_instant_is_refused(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # --workers -1 was handed to each Region's local mode, and NaN instants passed the outage's check
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1, err
