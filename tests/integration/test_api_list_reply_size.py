"""``GET /v1/jobs`` and a job's history: a page's reply stays within Lambda's 6 MB, whatever the jobs'
payloads or the records' errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from api_harness import ALICE_ID, ApiClient, LambdaContext, job_spec, rest_event
from api_harness import api as api  # the fixture

from punctual.models import AttemptRecord, Execution, ExecutionStatus
from punctual.timing.timers import slot_key

LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024


def test_a_page_of_large_jobs_is_cut_short_under_lambdas_6_mb_and_next_token_goes_on(api: ApiClient) -> None:
    """QA: a page filled to ``limit`` whatever its size: 30 jobs of 250 KB payloads (each within the
    256 KB a payload may have) answered 7.5 MB, past Lambda's 6 MB response limit: API Gateway's 502
    for every listing of the tenant (console, CLI ``jobs list``) that reached them."""
    made = set()
    for _ in range(30):
        reply = api.call("POST", "/v1/jobs", job_spec(payload={"t": "x" * 250_000}))
        assert reply.status == 201, reply
        made.add(reply.body["id"])
    listed: list[str] = []
    token = None
    for _ in range(30):
        path = "/v1/jobs?limit=100" + (f"&next_token={token}" if token else "")
        out = api.handler.handler(rest_event("GET", path), LambdaContext())
        assert out["statusCode"] == 200, out["statusCode"]
        assert len(json.dumps(out).encode()) < LAMBDA_RESPONSE_LIMIT  # as Lambda carries it
        page = json.loads(out["body"])
        assert page["items"], page  # never an empty page while jobs are left
        listed += [item["id"] for item in page["items"]]
        token = page["next_token"]
        if not token:
            break
    assert sorted(listed) == sorted(made)  # each once, none lost


def test_a_page_of_long_failed_histories_is_cut_short_under_lambdas_6_mb(api: ApiClient) -> None:
    """QA32: a page of history filled to ``limit`` whatever its size: 100 records of a job retried
    186 times, each keeping 20 attempts whose error is 500 characters of Japanese (a Lambda target's
    message, a receiver's body), answered 8 MB as Lambda carries it: API Gateway's 502 for the page,
    and for every ``punctual runs list --all`` (pages of 100) of that job."""
    job_id = api.create()["id"]
    error = ("サーバーエラー" * 72)[:500]
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    slots = []
    for hour in range(100):
        at = t0 + timedelta(hours=hour)
        kept = [1, *range(168, 187)]  # the first attempt and the latest 19
        attempts = [
            AttemptRecord(
                attempt=n, status=ExecutionStatus.FAILED, started_at=at, finished_at=at, error=error
            )
            for n in kept
        ]
        record = Execution(
            job_id=job_id, tenant=ALICE_ID, slot=slot_key(at), scheduled_at=at, status=ExecutionStatus.FAILED,
            attempt=186, started_at=at, finished_at=at, error=error, result=error, attempts=attempts,
        )  # fmt: skip
        api.store.save_execution(record, None, ttl_epoch_s=2_000_000_000)
        slots.append(record.slot)
    listed: list[str] = []
    token = None
    for _ in range(10):
        path = f"/v1/jobs/{job_id}/executions?limit=100" + (f"&next_token={quote(token)}" if token else "")
        out = api.handler.handler(rest_event("GET", path), LambdaContext())
        assert out["statusCode"] == 200, out["statusCode"]
        assert len(json.dumps(out).encode()) < LAMBDA_RESPONSE_LIMIT  # as Lambda carries it
        page = json.loads(out["body"])
        assert page["items"], page
        listed += [item["slot"] for item in page["items"]]
        token = page["next_token"]
        if not token:
            break
    assert listed == slots[::-1]  # newest first, each once
