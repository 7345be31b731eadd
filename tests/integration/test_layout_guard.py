"""Shard counts are fixed when a table is first used: a process configured otherwise refuses.

A job's shard is a hash of its id modulo the shard count, so a redeploy with other counts
would strand every stored timer (no poller reads its bucket) and write new ones where the
old pollers do not look. The first process to touch timers records its counts in the table;
every later process compares and refuses to read or write timers on a mismatch.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from api_harness import ALICE, ApiClient, LambdaContext, job_spec, rest_event
from api_harness import TABLE as API_TABLE
from api_harness import api as api  # the fixture

from factories import job
from punctual.store.base import LayoutMismatchError
from punctual.store.dynamo import DynamoStore
from punctual.timing.timers import Lane, TimerKind, TimerLayout, slot_key

OLD = TimerLayout(shard_count=512, near_shard_count=32)
NEW = TimerLayout(shard_count=256, near_shard_count=8)

TABLE = "punctual-test"  # the table tests/conftest.py's dynamo_client fixture creates


def _timer(layout: TimerLayout, t0, job_id: str = "j1"):  # type: ignore[no-untyped-def]
    due = t0 + timedelta(minutes=10)
    return layout.make(
        now=t0,
        due=due,
        job_id=job_id,
        tenant="default",
        slot=slot_key(due),
        attempt=1,
        kind=TimerKind.FIRE,
        job_version=1,
    )


def test_the_first_layout_is_recorded_and_a_different_one_refused(dynamo_client, t0):  # type: ignore[no-untyped-def]
    first = DynamoStore(dynamo_client, TABLE, OLD)
    first.put_timers([_timer(OLD, t0)])
    again = DynamoStore(dynamo_client, TABLE, OLD)  # a later process with the same counts
    assert again.query_timers(Lane.FAR, t0 + timedelta(minutes=10), 0) is not None

    other = DynamoStore(dynamo_client, TABLE, NEW)
    with pytest.raises(LayoutMismatchError) as caught:
        other.query_timers(Lane.FAR, t0, 0)
    message = str(caught.value)
    assert "512 far / 32 near" in message and "256 / 8" in message and "shardCount=512" in message
    with pytest.raises(LayoutMismatchError):
        other.put_timers([_timer(NEW, t0, "j2")])
    with pytest.raises(LayoutMismatchError):
        other.create_job(job("j3", now=t0), _timer(NEW, t0, "j3"), max_jobs=10)
    assert other.get_job("default", "j3") is None  # nothing was written
    # Jobs without timers (and reads of jobs and records) are not blocked.
    other.create_job(job("j4", now=t0), None, max_jobs=10)
    assert other.get_job("default", "j4") is not None


def test_a_store_without_a_layout_never_checks(dynamo_client, t0):  # type: ignore[no-untyped-def]
    DynamoStore(dynamo_client, TABLE, OLD).check_layout()
    unchecked = DynamoStore(dynamo_client, TABLE)  # tools and tests
    unchecked.put_timers([_timer(NEW, t0)])
    assert unchecked.count_timers(Lane.FAR, t0 + timedelta(minutes=10), _timer(NEW, t0).shard) == 1


def test_two_first_processes_agree(dynamo_client, t0):  # type: ignore[no-untyped-def]
    a, b = DynamoStore(dynamo_client, TABLE, OLD), DynamoStore(dynamo_client, TABLE, NEW)
    a.check_layout()
    with pytest.raises(LayoutMismatchError):
        b.check_layout()
    a.check_layout()  # checked once per process: no further reads
    item = dynamo_client.get_item(TableName=TABLE, Key={"pk": {"S": "meta#layout"}, "sk": {"S": "layout"}})
    assert item["Item"]["far"]["N"] == "512"


def _counted(out: str) -> set[str]:
    """The metrics of the EMF documents printed in ``out``."""
    return {
        m["Name"]
        for line in out.splitlines()
        if line.startswith("{") and "_aws" in line
        for d in json.loads(line)["_aws"]["CloudWatchMetrics"]
        for m in d["Metrics"]
    }


def test_the_api_answers_503_and_stores_nothing_on_a_mismatch(
    api: ApiClient, capsys: pytest.CaptureFixture[str]
) -> None:
    # The API is configured for 4 far / 2 near shards; the table says otherwise.
    DynamoStore(api.dynamodb, API_TABLE, TimerLayout(shard_count=8, near_shard_count=2)).check_layout()
    event = rest_event("POST", "/v1/jobs", json.dumps(job_spec()), None, user_arn=ALICE)
    capsys.readouterr()
    out = api.handler.handler(event, LambdaContext())
    assert out["statusCode"] == 503
    body = json.loads(out["body"])
    assert body["type"].endswith("misconfigured") and "Traceback" not in out["body"]
    # QA24: a 503 of the service's own (not "busy") counts in ApiFailures, which alarms
    assert {"Api5xx", "ApiFailures"} <= _counted(capsys.readouterr().out)
    listing = api.call("GET", "/v1/jobs")
    assert listing.status == 200 and listing.body["items"] == []
