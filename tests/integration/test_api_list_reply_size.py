"""``GET /v1/jobs``: a page's reply stays within Lambda's 6 MB, whatever the jobs' payloads."""

from __future__ import annotations

import json

from api_harness import ApiClient, LambdaContext, job_spec, rest_event
from api_harness import api as api  # the fixture

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
