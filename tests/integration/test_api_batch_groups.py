"""``POST /v1/job-batches`` stores its new jobs a group a transaction (issue 32, point 6): fewer
write units a job, the tenant's counter written once a group, exactly as idempotent and as exact
about quotas as one job at a time."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from api_harness import ALICE_ID, TABLE, ApiClient, http_spec, job_spec
from api_harness import api as api  # the fixture

from punctual.store.dynamo import schema

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))  # the meter the cost bench counts with
from awsmeter import Meter  # noqa: E402

PATH = "/v1/job-batches"


def _batch(ids: list[str], **overrides: object) -> dict[str, object]:
    return {"jobs": [{"id": i, "job": job_spec(name=f"job {i}", **overrides)} for i in ids]}


def _ids(count: int, prefix: str = "bulk") -> list[str]:
    return [f"{prefix}-{i:04d}" for i in range(count)]


@pytest.fixture
def meter(api: ApiClient) -> Iterator[Meter]:
    """Every request of the API's clients (built after this) counted and billed as DynamoDB bills."""
    from moto.dynamodb.models import dynamodb_backends

    from punctual.api import wiring
    from punctual.runtime import aws

    def peek_item(table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        item = dynamodb_backends["123456789012"]["us-east-1"].get_item(table, key)
        return item.to_json()["Attributes"] if item is not None else None

    counted = Meter(peek_item=peek_item)
    session = boto3.DEFAULT_SESSION
    assert session is not None
    counted.install(session.events)
    aws.reset()
    wiring.use_services(None)
    yield counted
    session.events.unregister("before-parameter-build", counted._before)
    session.events.unregister("after-call", counted._after)
    aws.reset()


def _writes(meter: Meter) -> tuple[float, int]:
    """Write units, and TransactWriteItems requests, counted since the meter was reset."""
    tallies = meter.snapshot()
    wru = sum(t.wru for t in tallies.values())
    transactions = sum(t.calls for (_, op, _), t in tallies.items() if op == "dynamodb.TransactWriteItems")
    return wru, transactions


def _counted_jobs(api: ApiClient) -> int:
    item = api.dynamodb.get_item(TableName=TABLE, Key=schema.tenant_meta_key(ALICE_ID), ConsistentRead=True)
    return int(item["Item"]["job_count"]["N"])


def _timers(api: ApiClient) -> dict[str, int]:
    """Timers stored per job id (every item that is a timer: it names its job and its slot)."""
    found: dict[str, int] = {}
    for page in api.dynamodb.get_paginator("scan").paginate(TableName=TABLE):
        for item in page["Items"]:
            if "due_ms" in item and "job_id" in item:
                job_id = item["job_id"]["S"]
                found[job_id] = found.get(job_id, 0) + 1
    return found


def test_a_batch_costs_about_three_transactional_items_a_job(api: ApiClient, meter: Meter) -> None:
    """Each job alone was a 4-item transaction, 8 write units, and one write of the tenant's
    counter item (one item takes ~500 a second): now a group of up to 33 jobs is one transaction
    with one counter update."""
    meter.reset()
    reply = api.call("POST", PATH, _batch(_ids(99)))
    assert (reply.body["created"], reply.body["failed"]) == (99, 0), reply.body
    wru, transactions = _writes(meter)
    assert transactions == 3  # 33 jobs a transaction (3 items each and the counter: 100)
    print(f"{wru / 99:.2f} write units a job")
    assert wru / 99 < 7.0, wru / 99  # job, listing, timer at 2 units each, and the shares
    assert _counted_jobs(api) == 99
    assert _timers(api) == dict.fromkeys(_ids(99), 1)


def test_a_batch_with_some_jobs_registered_answers_those_exists_and_stores_the_rest_once(
    api: ApiClient, meter: Meter
) -> None:
    ids = _ids(40)
    before = [ids[n] for n in (0, 7, 20, 39)]
    assert api.call("POST", PATH, _batch(before)).body["created"] == 4
    meter.reset()
    reply = api.call("POST", PATH, _batch(ids))
    statuses = {r["id"]: r["status"] for r in reply.body["results"]}
    assert {i for i, s in statuses.items() if s == "exists"} == set(before)
    assert {i for i, s in statuses.items() if s == "created"} == set(ids) - set(before)
    # Group 1 (33 jobs, three there) cancelled once and written again without them; group 2
    # (7 jobs, one there) the same: four transactions, not forty
    assert _writes(meter)[1] == 4
    assert _counted_jobs(api) == 40  # each counted once
    assert _timers(api) == dict.fromkeys(ids, 1)
    assert len(api.call("GET", "/v1/jobs?limit=100").body["items"]) == 40


def test_a_batch_crossing_the_tenants_quota_refuses_exactly_the_jobs_past_it(
    api: ApiClient, meter: Meter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PUNCTUAL_MAX_JOBS_PER_TENANT", "40")
    from punctual.api import wiring

    wiring.use_services(None)
    ids = _ids(50)
    meter.reset()
    reply = api.call("POST", PATH, _batch(ids))
    results = reply.body["results"]
    # The first group (33 jobs) fits: one transaction. The second (17) would pass 40: refused
    # whole, then written job by job, in order, so exactly the 8th on of it is refused
    assert [r["status"] for r in results] == ["created"] * 40 + ["failed"] * 10, results
    assert {r["problem"]["quota"] for r in results[40:]} == {"maxJobsPerTenant"}
    assert _writes(meter)[1] == 1 + 1 + 17
    assert _counted_jobs(api) == 40
    assert set(_timers(api)) == set(ids[:40])
    for job_id in ids[40:]:
        assert api.call("GET", f"/v1/jobs/{job_id}").status == 404


def test_a_group_cancelled_for_a_conflict_is_tried_again_and_stored_once(
    api: ApiClient, meter: Meter
) -> None:
    from local import moto_fidelity

    ids = _ids(50)
    with moto_fidelity.installed(moto_fidelity.MotoFidelity()) as simulated:
        # Every group's first try meets another transaction on the tenant's counter
        simulated.inject_conflict("TransactWriteItems", times=2)
        meter.reset()
        reply = api.call("POST", PATH, _batch(ids, target={"type": "http", "url": "https://example.com/x"}))
    assert (reply.body["created"], reply.body["failed"]) == (50, 0), reply.body
    assert simulated.conflicts == 2
    assert _writes(meter)[1] == 4  # two groups, each tried twice
    assert _counted_jobs(api) == 50
    assert _timers(api) == dict.fromkeys(ids, 1)
    assert all(r["job"]["signing_secret"].startswith("whsec_") for r in reply.body["results"])


def test_jobs_with_links_or_calendars_are_stored_alone_beside_the_groups(api: ApiClient) -> None:
    assert api.call("PUT", "/v1/calendars/holidays", {"dates": ["2026-12-25"]}).status in (200, 201)
    batch = _batch(_ids(5))
    jobs = batch["jobs"]
    assert isinstance(jobs, list)
    jobs += [
        {"id": "child", "job": job_spec(schedule="after(bulk-0001)")},
        {"id": "off-on-holidays", "job": job_spec(exclude_calendars=["holidays"])},
        {"id": "hook", "job": http_spec()},
    ]
    reply = api.call("POST", PATH, batch)
    assert (reply.body["created"], reply.body["failed"]) == (8, 0), reply.body
    parent = api.store.get_job(ALICE_ID, "bulk-0001")
    assert parent is not None and parent.dependents == 1
    assert api.store.calendar_users(ALICE_ID, "holidays") == ["off-on-holidays"]
    assert _counted_jobs(api) == 8
