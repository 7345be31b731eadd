"""What a client generated from ``openapi.json`` meets is what the document declares (QA, 2026-12-05).

A schema-driven run over real HTTP (schemathesis and hand-written flows, ~15,000 requests) found
every body matching its schema, but the document leaving out what a generated client acts on: no
response header declared anywhere (``ETag``, ``Location``, ``Retry-After``); 429 on the schedule
preview, 503 on every operation, 400 and 403 on reads, 413 and 415 on a backfill, all answered
and none declared. Every API test's client now checks each answer against the document
(:mod:`openapi_contract`); the tests here cover the rest of what that run found.
"""

from __future__ import annotations

import json
import re

import pytest
from api_harness import ApiClient, job_spec, rest_event
from api_harness import api as api  # the fixture
from openapi_contract import ROOT, undeclared

from punctual.api.problems import ApiProblem
from punctual.api.tenancy import tenant_of

DOCUMENT = json.loads((ROOT / "openapi.json").read_text())
OPERATIONS = {op["operationId"]: op for item in DOCUMENT["paths"].values() for op in item.values()}
HOLIDAYS = {"timezone": "UTC", "dates": ["2026-12-25"]}


def test_the_contract_check_names_an_undeclared_status_and_header() -> None:
    # The check the API tests' client makes: it can fail
    assert undeclared("GET", "/v1/jobs/abc", 200, {"ETag": '"1"'}) == []
    assert undeclared("GET", "/v1/jobs/abc", 418, {}) == ["getJob answered 418, which it does not declare"]
    assert undeclared("GET", "/v1/jobs", 200, {"Location": "x"}) == [
        "listJobs 200 sent location, which it does not declare"
    ]
    assert undeclared("POST", "/schedules/x", 418, {}) == []  # EventBridge Scheduler's API: not here


@pytest.mark.parametrize("name", sorted(set(OPERATIONS) - {"getOpenApiDocument"}))
def test_every_operation_that_knows_its_caller_declares_what_any_may_answer(name: str) -> None:
    declared = set(OPERATIONS[name]["responses"])
    assert {"400", "401", "403", "422", "429", "500", "503"} <= declared
    for status in ("429", "503"):
        assert "Retry-After" in OPERATIONS[name]["responses"][status]["headers"]


@pytest.mark.parametrize("name", ["createJob", "replaceJob", "putCalendar", "createJobBatch", "backfillJob"])
def test_operations_that_take_a_body_declare_413_and_415(name: str) -> None:
    assert {"413", "415"} <= set(OPERATIONS[name]["responses"])


def test_versions_and_new_resources_are_declared_headers() -> None:
    assert set(DOCUMENT["components"]["headers"]) == {"ETag", "Location", "Retry-After"}
    for name in ("getJob", "replaceJob", "pauseJob", "resumeJob", "rotateSigningSecret", "getCalendar"):
        assert "ETag" in OPERATIONS[name]["responses"]["200"]["headers"], name
    for name, status in (("createJob", "201"), ("triggerJob", "202"), ("backfillJob", "202")):
        assert "Location" in OPERATIONS[name]["responses"][status]["headers"], name
    assert "ETag" in OPERATIONS["replaceJob"]["responses"]["412"]["headers"]
    # Retry-After on a 409 only where an Idempotency-Key's first request may still be running
    assert "Retry-After" in OPERATIONS["createJob"]["responses"]["409"]["headers"]
    assert "headers" not in OPERATIONS["replaceJob"]["responses"]["409"]


def test_if_match_declares_the_versions_it_takes() -> None:
    # Review: the pattern was looked for under "If-Match", the document names the header if-match
    [if_match] = [p for p in OPERATIONS["replaceJob"]["parameters"] if p["name"].lower() == "if-match"]
    pattern = re.compile(if_match["schema"]["pattern"])
    for taken in ('"3"', "3", 'W/"3"', '"3", "4"', "*", " 3 ,, 4 "):
        assert pattern.match(taken), taken
    for refused in ("x", '""3""', "*, 3", "", "3 4"):
        assert not pattern.match(refused), refused


def test_a_body_on_a_get_or_a_delete_is_ignored(api: ApiClient) -> None:
    # Given a job, and requests carrying a stray body (some HTTP clients attach one to a DELETE)
    job = api.create()
    text = {"Content-Type": "text/plain"}
    # When it is read and deleted with one (text, or over the body limit)
    got = api.call("GET", f"/v1/jobs/{job['id']}", raw="x" * 400_000, headers=text)
    deleted = api.call("DELETE", f"/v1/jobs/{job['id']}", raw="please", headers=text)
    # Then both are answered as without it (they were 413 and 415)
    assert got.status == 200 and got.body["id"] == job["id"]
    assert deleted.status == 204
    assert api.call("GET", f"/v1/jobs/{job['id']}").status == 404


def test_a_batch_at_its_path_with_a_trailing_slash_has_the_batch_limit(api: ApiClient) -> None:
    # Given a batch over the single-job body limit (320 KB) and under the batch's (5 MB)
    items = [{"id": f"big{i}", "job": job_spec(payload={"pad": "z" * 8000})} for i in range(50)]
    body = {"jobs": items}
    assert len(json.dumps(body)) > 330_000
    # When it is sent to the batch path with a trailing slash
    reply = api.call("POST", "/v1/job-batches/", body)
    # Then it is taken, as at the path without it (it was 413)
    assert reply.status == 200, reply
    assert [result["code"] for result in reply.body["results"]] == [201] * 50


def test_a_backfill_body_over_the_limit_is_413_naming_the_route_not_a_job_payload(api: ApiClient) -> None:
    job = api.create()
    reply = api.call("POST", f"/v1/jobs/{job['id']}/backfill", raw="x" * 400_000)
    assert reply.status == 413
    assert "job payload" not in reply.problem["detail"] and "this route's limit" in reply.problem["detail"]
    spec = api.call("POST", "/v1/jobs", raw="x" * 400_000)
    assert "a job payload may have 262144" in spec.problem["detail"]


@pytest.mark.parametrize("media", ["application/merge-patch+json", "application/vnd.api+json"])
def test_a_json_suffix_media_type_is_415_naming_it(api: ApiClient, media: str) -> None:
    # A merge patch taken as a spec would have replaced the whole job with it
    reply = api.call("POST", "/v1/jobs", job_spec(), headers={"Content-Type": media})
    assert reply.status == 415
    assert media in reply.problem["detail"]
    assert api.call("GET", "/v1/jobs").body["items"] == []


@pytest.mark.parametrize("version", ['"²"', '"٣"', "³", '""1""'])
def test_an_if_match_of_non_ascii_digits_is_400(api: ApiClient, version: str) -> None:
    # '²' is a digit to str.isdigit() that int() refuses: it was a 500
    job = api.create()
    reply = api.call("PUT", f"/v1/jobs/{job['id']}", job_spec(name="x"), headers={"If-Match": version})
    assert reply.status == 400 and reply.fields() == ["header.If-Match"]
    assert api.call("GET", f"/v1/jobs/{job['id']}").body["version"] == 1


def test_if_match_star_puts_a_calendar_only_where_one_exists(api: ApiClient) -> None:
    # RFC 9110 13.1.1: * is false when there is no current representation (it created one)
    missing = api.call("PUT", "/v1/calendars/holidays", HOLIDAYS, headers={"If-Match": "*"})
    assert missing.status == 412, missing
    assert api.call("GET", "/v1/calendars/holidays").status == 404
    assert api.call("PUT", "/v1/calendars/holidays", HOLIDAYS).status == 201
    replaced = api.call("PUT", "/v1/calendars/holidays", HOLIDAYS, headers={"If-Match": "*"})
    assert replaced.status == 200 and replaced.body["version"] == 2


def test_local_mode_refuses_two_different_tenant_headers() -> None:
    event = rest_event("GET", "/v1/jobs", headers={"X-Punctual-Tenant": "b"})
    event["multiValueHeaders"]["X-Punctual-Tenant"] = ["a", "b"]  # the last one won, silently
    with pytest.raises(ApiProblem) as refused:
        tenant_of(event, local_mode=True)
    assert refused.value.status == 400 and "more than once" in refused.value.detail
    event["multiValueHeaders"]["X-Punctual-Tenant"] = ["b", " b"]
    assert tenant_of(event, local_mode=True) == "b"


@pytest.mark.parametrize(
    ("method", "path", "unknown", "declared"),
    [
        ("GET", "/v1/jobs/{job}/executions?stat=FAILED", "stat", "limit, next_token, since, status, until"),
        ("GET", "/v1/jobs?limit=5&State=PAUSED", "State", "limit, next_token, state, tag"),
        ("GET", "/v1/jobs/{job}?version=1", "version", "none"),
        ("POST", "/v1/jobs/{job}/rotate-secret?drop_prev=true", "drop_prev", "drop_previous"),
        ("GET", "/v1/openapi.json?format=yaml", "format", "none"),
    ],
)
def test_a_query_parameter_a_route_does_not_take_is_400_naming_it(
    api: ApiClient, method: str, path: str, unknown: str, declared: str
) -> None:
    """QA22: an unknown query parameter was ignored: ?stat=FAILED (a typo of status) answered the
    whole history with 200, as if it were the filtered one."""
    job = api.create()["id"]

    reply = api.call(method, path.format(job=job))

    assert reply.status == 400, reply
    assert reply.body["title"] == "Unknown query parameter", reply.body
    assert f"takes no query parameter {unknown} (it takes: {declared})" in reply.body["detail"]


def test_declared_query_parameters_head_options_and_a_presigned_url_still_work(api: ApiClient) -> None:
    job = api.create()["id"]
    signed = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=abc&X-Amz-Date=20261206T000000Z"

    assert api.call("GET", f"/v1/jobs/{job}/executions?status=FAILED&limit=5").status == 200
    assert api.call("GET", f"/v1/jobs?{signed}&limit=5").status == 200
    assert api.call("HEAD", f"/v1/jobs/{job}/executions?limit=1").status == 200
    assert api.call("HEAD", f"/v1/jobs/{job}/executions?stat=1").status == 400
    assert api.call("OPTIONS", f"/v1/jobs/{job}?anything=1").status == 204
