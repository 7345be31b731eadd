"""The cost bench prices what the Lambdas write to CloudWatch Logs and what X-Ray records.

Every function traces actively and prints its metrics as EMF documents into its log group; both
are billed per trigger (Logs by the GB ingested, X-Ray by the trace recorded), so a $ per million
that leaves them out is low by the same amount at any rate.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
awsmeter = importlib.import_module("awsmeter")
cost_rig = importlib.import_module("cost_rig")
cost_money = importlib.import_module("cost_money")


@pytest.fixture(scope="module")
def summary() -> dict:
    import boto3
    from moto.dynamodb import models as dynamodb_models
    from moto.dynamodb.models.table import Table

    from punctual.runtime import aws

    # The cost rig makes moto fast for benchmarks (a narrowed Query, a shallow transaction
    # snapshot that does not roll back in-place updates: benchlib, "never in tests") and hooks
    # its meter into boto3's default session. All of it is undone here: left in place, later
    # tests' failed transactions kept their updates (the full suite's dependency tests failed).
    with pytest.MonkeyPatch.context() as undo:
        undo.setattr(Table, "query", Table.query)
        undo.setattr(Table, "all_items", Table.all_items)
        undo.setattr(dynamodb_models, "copy", dynamodb_models.copy)
        undo.setattr(boto3, "DEFAULT_SESSION", boto3.DEFAULT_SESSION)
        meter = awsmeter.Meter()
        base = cost_rig.run(meter, "idle", 0, 3, 4, 2)
        load = cost_rig.run(meter, "load", 60, 3, 4, 2)
    aws.reset()  # the shared clients made on the rig's session
    assert load.triggers > 0
    assert load.emf_bytes["poller"] > 0 and load.emf_bytes["worker"] > 0
    return cost_money.summarize(load, base, cost_money.Prices.load())


def test_the_metrics_the_lambdas_print_are_priced_per_trigger(summary: dict) -> None:
    observed = summary["logs_and_traces_at_10k"]
    # The worker prints at least a start delay and a run duration per trigger, the poller a fire
    # delay: more than a few bytes each, and each invocation's platform lines besides.
    assert observed["emf_bytes_per_trigger"] > 20
    assert observed["platform_log_bytes_per_trigger"] == cost_rig.PLATFORM_LOG_BYTES / 10
    assert observed["logs_usd_per_million"] > 0
    assert observed["xray_traces_per_trigger"] == pytest.approx(cost_rig.XRAY_SAMPLED_SHARE / 10)


def test_the_on_demand_figure_includes_logs_and_traces(summary: dict) -> None:
    observed = summary["logs_and_traces_at_10k"]
    rest = (
        sum(r["usd_per_million_at_scale"] for r in summary["rows"])
        + summary["worker_lambda_at_scale"]["usd_per_million"]
        + summary["storage"]["usd_per_million"]
        + summary["poller_lambda_usd_per_million_at_10k"]
        + summary["stepfunctions_usd_per_million_at_10k"]
        + summary["kms_at_10k"]["usd_per_million"]
    )
    with_them = rest + observed["logs_usd_per_million"] + observed["xray_usd_per_million"]
    assert summary["on_demand_usd_per_million"] == pytest.approx(with_them)
    # ...and so does the provisioned figure, which differs from it only in DynamoDB's price
    provisioned = summary["provisioned_at_10k"]["70%"]
    assert provisioned["all_in_usd_per_million"] == pytest.approx(
        summary["on_demand_usd_per_million"]
        - summary["dynamodb_on_demand_usd_per_million"]
        + provisioned["dynamodb_usd_per_million"]
    )


def test_storage_counts_the_tables_continuous_backups() -> None:
    # The stack's table has point-in-time recovery on (cdk/punctual_cdk/components/storage.py):
    # its continuous backups are billed on the table's size, beside its storage.
    prices = cost_money.Prices.load()
    listed = json.loads((BENCH / "prices.json").read_text())["dynamodb"]
    table, pitr = listed["storage_gb_month"]["usd"], listed["pitr_gb_month"]["usd"]
    rows = [
        {"kind": "exec", "wru_per_trigger": 2.0, "bytes_per_item": 335.0},
        {"kind": "near", "wru_per_trigger": 0.08, "bytes_per_item": 197.0},
    ]
    storage = cost_money.storage_per_million(rows, prices)
    assert storage["pitr_usd_per_million"] > 0
    assert storage["usd_per_million"] == pytest.approx(
        storage["pitr_usd_per_million"] * (table + pitr) / pitr
    )


def test_a_worker_document_frame_is_priced_per_invocation_and_its_values_per_trigger() -> None:
    """A worker prints its documents once an invocation: the frame (namespace, dimensions, metric
    definitions) comes once an invocation of ``batch`` records, the values once a trigger. A run
    of small batches (20 triggers in 4 invocations here) must not price full batches' frames as
    if each carried five records."""
    from punctual.runtime.emf import EmfBuffer

    lines: list[str] = []
    buffer = EmfBuffer("Punctual", "punctual", write=lines.append)
    for value in (12.0, 3456.5, 7.25):
        buffer.add("StartDelayMs", value, "Milliseconds")
    buffer.add("RunDurationMs", 81.0, "Milliseconds")
    buffer.flush()
    assert len(lines) == 1
    values = cost_rig.emf_value_bytes(lines[0])
    assert values == len("[12.0,3456.5,7.25]") + len("[81.0]")

    load = cost_rig.RunResult("load", 1, {}, triggers=20, invocations=4)
    load.emf_bytes = {"poller": 200, "worker": 4 * 300 + 20 * 15}
    load.emf_value_bytes = {"poller": 100, "worker": 20 * 15}
    prices = cost_money.Prices.load()
    full = cost_money.logs_and_traces_per_million(load, prices, 10)
    small = cost_money.logs_and_traces_per_million(load, prices, 5)
    assert full["emf_worker_frame_bytes_per_invocation"] == pytest.approx(300)
    assert full["emf_bytes_per_trigger"] == pytest.approx(200 / 20 + 15 + 300 / 10)
    assert small["emf_bytes_per_trigger"] == pytest.approx(200 / 20 + 15 + 300 / 5)
