"""Write units a job registered through ``POST /v1/job-batches`` (issue 32, point 6), before and
after a batch's new jobs were stored a group a transaction, and what they make of 10 million.

The API's batch path (:func:`punctual.api.batch.create_batch`, the services a deployment builds)
runs in-process against moto with every request of its clients counted by the cost bench's meter
(:mod:`awsmeter`: each item's size, billed as DynamoDB bills, a transaction's items twice).
"Before" is the same code with every job stored alone (its own 4-item transaction with its
tenant's counter and its own peak-profile change), as every batch job was until 2026-12-07.

Measured: write units a job, by item kind; the tenant counter's writes a job; the peak profile's
writes a job and its size. Derived from them (labelled so): the jobs a second one tenant can
register (each single item takes 1,000 write units a second: DynamoDB's partition limit), and the
time for 10 million at the table's default write quota (40,000 write units a second, the whole
table: triggers share it) with warm throughput, and on a new on-demand table without it (4,000
write units a second at first, up to double the previous peak every 30 minutes).

Usage: ``python bench/registration_cost.py [--jobs 1000]`` (writes ``bench/results/registration_cost.json``).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import benchlib
from awsmeter import Meter, Tally
from cost_rig import ACCOUNT, moto_item

TABLE = "punctual-registration-bench"
TENANT = "bench-tenant"
BATCH = 500
PARTITION_WRU_S = 1_000  # DynamoDB: write units a second on one partition (one item at most)
TABLE_QUOTA_WRU_S = 40_000  # the account's default write quota of one on-demand table
NEW_TABLE_WRU_S = 4_000  # a new on-demand table without warm throughput, at first
# A new table created provisioned (tableBillingMode provisioned, tableWriteCapacityMin): it serves what
# it was created with from the start (its warm throughput), and the stack gives its index the same.
PROVISIONED_WCU = 20_000
FULL_PROFILE_WRU = 24  # a tenant's peak profile with every minute of the day used (~24 KB)
TEN_MILLION = 10_000_000


@contextmanager
def _services(meter: Meter) -> Iterator[Any]:
    """The API's services over moto, every client made after the meter hooked."""
    import boto3
    from moto import mock_aws

    from punctual.api.wiring import build_services
    from punctual.runtime import aws
    from punctual.runtime.settings import Settings
    from punctual.store.dynamo import table_definition

    benchlib.fast_moto_transactions()
    with mock_aws():
        boto3.setup_default_session(region_name="us-east-1")
        meter.peek_item = moto_item
        meter.install(boto3.DEFAULT_SESSION.events)
        aws.reset()
        boto3.client("dynamodb").create_table(**table_definition(TABLE))
        queue = boto3.client("sqs").create_queue(
            QueueName="bench-short.fifo", Attributes={"FifoQueue": "true"}
        )["QueueUrl"]
        settings = Settings(
            table_name=TABLE,
            short_queue_urls=[queue],
            secret_key="bench-local-secret-key-0123456789",
            token_key="bench-token-key",
            api_batch_concurrency=1,  # moto's transactions are not safe side by side
            max_jobs_per_tenant=1_000_000,
        )
        try:
            yield build_services(settings, aws.client("dynamodb"), aws.client("sqs"))
        finally:
            aws.reset()


def _specs(jobs: int) -> list[dict[str, Any]]:
    """Daily webhook jobs at spread minutes far from now (no near-lane ledger write)."""
    hour = (datetime.now(UTC).hour + 12) % 24
    return [
        {
            "name": f"job {n}",
            "schedule": f"cron({n % 60} {hour} * * ? *)",
            "target": {"type": "http", "url": "https://hooks.example.com/registered"},
        }
        for n in range(jobs)
    ]


def measure(jobs: int, grouped: bool) -> dict[str, Any]:
    """Register ``jobs`` through batches of 500; what the table was billed, per job."""
    from punctual.api.batch import BatchInput, create_batch
    from punctual.usecases.registration import NewJob

    meter = Meter()
    specs = _specs(jobs)
    alone = mock.patch.object(NewJob, "groupable", property(lambda self: False))
    with _services(meter) as services, alone if not grouped else _nothing():
        meter.reset()
        meter.phase = "register"
        for start in range(0, jobs, BATCH):
            body = {
                "jobs": [
                    {"id": f"j{start + n:07d}", "job": s} for n, s in enumerate(specs[start : start + BATCH])
                ]
            }
            reply = create_batch(services, TENANT, BatchInput.model_validate(body))
            assert reply.created == len(body["jobs"]), [r.problem for r in reply.results if r.problem][:1]
        tallies = meter.snapshot()
        profile = moto_item(TABLE, {"pk": {"S": f"tenant#{TENANT}"}, "sk": {"S": "#peaks"}})
    by_kind: dict[str, float] = {}
    for (_, operation, kind), tally in tallies.items():
        if operation.startswith("dynamodb."):
            by_kind[f"{operation.removeprefix('dynamodb.')} {kind}"] = round(tally.wru / jobs, 3)
    wru = sum(t.wru for t in tallies.values())
    index_wru = sum(t.index_wru for t in tallies.values())
    transactions = _calls(tallies, "TransactWriteItems")
    profile_writes = sum(
        t.calls for (_, op, kind), t in tallies.items() if op == "dynamodb.UpdateItem" and kind == "tenant"
    )
    from awsmeter import item_size, write_units

    return {
        "grouped": grouped,
        "jobs": jobs,
        "wru_per_job": wru / jobs,
        "index_wru_per_job": index_wru / jobs,  # the audit index's (capacity and price of its own)
        "wru_by_request_and_kind_per_job": {k: v for k, v in sorted(by_kind.items()) if v},
        "transactions": transactions,
        "counter_writes_per_job": transactions / jobs,  # every job transaction updates the counter
        "profile_writes_per_job": profile_writes / jobs,
        "profile_wru_per_write": write_units(item_size(profile)) if profile else 0,
    }


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _calls(tallies: dict[tuple[str, str, str], Tally], operation: str) -> int:
    return sum(t.calls for (_, op, _), t in tallies.items() if op == f"dynamodb.{operation}")


def derived(run: dict[str, Any]) -> dict[str, Any]:
    """One tenant's jobs a second (each single item's partition) and 10 million's time."""
    wru, index_wru = run["wru_per_job"], run["index_wru_per_job"]
    prices = benchlib.load_prices()
    counter = PARTITION_WRU_S / 2 / run["counter_writes_per_job"]  # a transactional write: 2 units
    profile = PARTITION_WRU_S / FULL_PROFILE_WRU / run["profile_writes_per_job"]
    return {
        "tenant_jobs_per_s_counter_item": counter,
        "tenant_jobs_per_s_full_day_profile": profile,
        "tenant_jobs_per_s": min(counter, profile),
        "ten_million_minutes_warm": TEN_MILLION * wru / TABLE_QUOTA_WRU_S / 60,
        "ten_million_minutes_new_table": new_table_minutes(wru),
        "warm_wru_s_for_an_hour": TEN_MILLION * wru / 3600,
        "ten_million_minutes_new_provisioned": TEN_MILLION * wru / PROVISIONED_WCU / 60,
        "index_minutes_new_on_demand": new_table_minutes(index_wru) if index_wru else 0.0,
        # a new table created provisioned, its index given the same (the stack's provisioned mode)
        "provisioned_usd_an_hour": 2
        * PROVISIONED_WCU
        * benchlib.price(prices, "dynamodb.provisioned_wcu_hour"),
        "ten_million_usd_on_demand": TEN_MILLION
        * (wru + index_wru)
        * benchlib.price(prices, "dynamodb.on_demand_write_per_million")
        / 1e6,
    }


def new_table_minutes(wru_per_job: float) -> float:
    """Minutes to register 10 million on a new on-demand table: 4,000 write units a second at
    first, double the previous peak each 30 minutes, up to the table's quota."""
    left, minutes, rate = float(TEN_MILLION), 0.0, float(NEW_TABLE_WRU_S)
    while True:
        per_half_hour = rate * 1800 / wru_per_job
        if per_half_hour >= left:
            return minutes + 30 * left / per_half_hour
        left -= per_half_hour
        minutes += 30
        rate = min(rate * 2, TABLE_QUOTA_WRU_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000)
    parser.add_argument("--no-json", action="store_true")
    args = parser.parse_args()
    import logging

    logging.getLogger("punctual").setLevel(logging.WARNING)
    benchlib.heading("Registration through job batches: write units a job (moto in-process, metered)")
    runs = {name: measure(args.jobs, grouped) for name, grouped in (("before", False), ("after", True))}
    figures = {name: derived(run) for name, run in runs.items()}
    rows = []
    for name, run in runs.items():
        d = figures[name]
        rows.append(
            (
                name + (" (a group a transaction)" if run["grouped"] else " (each job alone)"),
                f"{run['wru_per_job']:.2f}",
                f"{run['counter_writes_per_job']:.3f}",
                f"{run['profile_writes_per_job']:.3f}",
                f"{d['tenant_jobs_per_s_counter_item']:,.0f}"
                f" / {d['tenant_jobs_per_s_full_day_profile']:,.0f}",
                f"{d['ten_million_minutes_warm']:.0f} min",
                f"{d['ten_million_minutes_new_table']:.0f} min",
                f"{d['ten_million_minutes_new_provisioned']:.0f} min",
                f"{run['index_wru_per_job']:.2f}",
            )
        )
    print(
        benchlib.table(
            [
                "path",
                "WRU a job (measured)",
                "counter writes a job",
                "profile writes a job",
                "one tenant jobs/s: counter / full-day profile (derived)",
                "10 M at 40,000 WRU/s, warm (derived)",
                "10 M, new table (derived)",
                f"10 M, new table provisioned at {PROVISIONED_WCU:,} WCU (derived)",
                "audit index WRU a job (measured)",
            ],
            rows,
        )
    )
    for name, run in runs.items():
        print(f"  {name}: WRU a job by request and item kind: {run['wru_by_request_and_kind_per_job']}")
    need = {name: f"{figures[name]['warm_wru_s_for_an_hour']:,.0f}" for name in runs}
    print(
        f"  10 million within an hour takes {need['after']} write units a second (before: {need['before']}):"
        " tableWarmWriteUnitsPerSecond at least that (plus the triggers' own) on a new table. Before, at"
        " the API's 16 threads a batch, about 8 jobs shared a profile write (this in-process run: 1 thread,"
        " 1 each): one tenant ~320 to ~500 jobs a second."
    )
    after = figures["after"]
    minutes, hourly = after["ten_million_minutes_new_provisioned"], after["provisioned_usd_an_hour"]
    print(
        f"  On a new table: created provisioned at {PROVISIONED_WCU:,} WCU (tableBillingMode provisioned,"
        f" tableWriteCapacityMin {PROVISIONED_WCU}; the stack gives the audit index the same),"
        f" 10 million take {minutes:.0f} min for ${hourly:.2f} an hour (the same writes on demand:"
        f" ${after['ten_million_usd_on_demand']:.2f}, index included); then switch to on-demand"
        " (allowed four times in 24 hours) or lower the minimum. The audit index's own writes"
        f" ({runs['after']['index_wru_per_job']:.2f} a job) take"
        f" {after['index_minutes_new_on_demand']:.0f} min on a new on-demand index"
        " (its own 4,000 WRU/s at first)."
    )
    if not args.no_json:
        benchlib.write_result(
            "registration_cost", {"jobs": args.jobs, "runs": runs, "derived": figures, "account": ACCOUNT}
        )


if __name__ == "__main__":
    main()
