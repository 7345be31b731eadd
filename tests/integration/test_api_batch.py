"""``POST /v1/job-batches``: registration at scale, validated per job and idempotent (issue 32)."""

from __future__ import annotations

import json

import pytest
from api_harness import ALICE_ID, ApiClient, http_spec, job_spec
from api_harness import api as api  # the fixture

from punctual.api.batch import BATCH_MAX_JOBS

PATH = "/v1/job-batches"


def _batch(count: int, **overrides: object) -> dict[str, object]:
    return {
        "jobs": [
            {"id": f"bulk-{i:04d}", "job": http_spec(name=f"job {i}", **overrides)} for i in range(count)
        ]
    }


def test_a_batch_registers_every_job_at_its_id_with_its_secret_shown_once(api: ApiClient) -> None:
    reply = api.call("POST", PATH, _batch(60))
    assert reply.status == 200
    assert (reply.body["created"], reply.body["exists"], reply.body["failed"]) == (60, 0, 0)
    results = reply.body["results"]
    assert [r["id"] for r in results] == [f"bulk-{i:04d}" for i in range(60)]  # request order
    assert all(r["status"] == "created" and r["code"] == 201 for r in results)
    assert all(r["job"]["signing_secret"].startswith("whsec_") for r in results)
    got = api.call("GET", "/v1/jobs/bulk-0042").body
    assert got["name"] == "job 42" and got["version"] == 1 and "signing_secret" not in got
    assert len(api.call("GET", "/v1/jobs?limit=100").body["items"]) == 60


def test_each_job_is_validated_on_its_own_and_a_bad_one_fails_alone(api: ApiClient) -> None:
    batch = _batch(3)
    jobs = batch["jobs"]
    assert isinstance(jobs, list)
    jobs += [
        {"id": "bad-schedule", "job": job_spec(schedule="cron(99 * * * ? *)")},
        {"id": "bad-url", "job": http_spec(target={"type": "http", "url": "http://127.0.0.1/admin"})},
        {"id": "no-target", "job": {"schedule": "rate(1 hour)"}},
        {"id": "bad-payload", "job": job_spec(payload={"k": "x" * (300 * 1024)})},
    ]
    reply = api.call("POST", PATH, batch)
    assert reply.status == 200
    by_id = {r["id"]: r for r in reply.body["results"]}
    assert [by_id[f"bulk-{i:04d}"]["status"] for i in range(3)] == ["created"] * 3
    for job_id in ("bad-schedule", "bad-url", "no-target", "bad-payload"):
        result = by_id[job_id]
        assert result["status"] == "failed" and 400 <= result["code"] < 500, result
        assert result["problem"]["status"] == result["code"] and result["job"] is None
        assert api.call("GET", f"/v1/jobs/{job_id}").status == 404
    assert by_id["no-target"]["problem"]["errors"][0]["field"].startswith("jobs.5.job.")
    assert by_id["bad-url"]["problem"]["errors"][0]["field"] == "target.url"
    assert reply.body["failed"] == 4 and reply.body["created"] == 3


def test_a_repeated_batch_registers_only_what_is_missing(api: ApiClient) -> None:
    # Given a batch whose first try registered the first half only (a timeout, a crash)
    batch = _batch(20)
    jobs = batch["jobs"]
    assert isinstance(jobs, list)
    first = api.call("POST", PATH, {"jobs": jobs[:10]})
    assert first.body["created"] == 10
    # When it is sent again whole, Then the missing half is registered and the rest is reported
    again = api.call("POST", PATH, batch)
    assert (again.body["created"], again.body["exists"], again.body["failed"]) == (10, 10, 0)
    assert {r["status"] for r in again.body["results"][:10]} == {"exists"}
    assert all(
        r["job"]["version"] == 1 and r["job"]["signing_secret"] is None for r in again.body["results"][:10]
    )
    assert len(api.call("GET", "/v1/jobs?limit=100").body["items"]) == 20
    # And a job at an existing id with another spec is a conflict, the stored one untouched
    changed = {"jobs": [{"id": "bulk-0003", "job": http_spec(name="something else")}]}
    (conflict,) = api.call("POST", PATH, changed).body["results"]
    assert (conflict["status"], conflict["code"]) == ("failed", 409)
    assert api.call("GET", "/v1/jobs/bulk-0003").body["name"] == "job 3"


@pytest.mark.parametrize(
    "body",
    [
        {"jobs": []},
        {"jobs": [{"id": f"j{i}", "job": job_spec()} for i in range(BATCH_MAX_JOBS + 1)]},
        {"jobs": [{"id": "twice", "job": job_spec()}, {"id": "twice", "job": job_spec()}]},
        {"jobs": [{"id": "not an id!", "job": job_spec()}]},
        {"items": []},
        [job_spec()],
    ],
    ids=["empty", "too-many", "repeated-id", "bad-id", "no-jobs", "not-an-object"],
)
def test_what_is_no_batch_is_a_422_and_registers_nothing(api: ApiClient, body: object) -> None:
    reply = api.call("POST", PATH, body)
    assert reply.status == 422 and reply.body["type"].endswith("validation")
    assert api.call("GET", "/v1/jobs").body["items"] == []


def test_the_tenants_quota_holds_per_job(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from punctual.api import wiring

    monkeypatch.setenv("PUNCTUAL_MAX_JOBS_PER_TENANT", "5")
    wiring.use_services(None)
    reply = api.call("POST", PATH, _batch(8))
    assert reply.body["created"] == 5 and reply.body["failed"] == 3
    refused = [r for r in reply.body["results"] if r["status"] == "failed"]
    assert {r["problem"]["quota"] for r in refused} == {"maxJobsPerTenant"}
    assert api.store.get_job(ALICE_ID, "bulk-0000") is not None


def test_a_job_failing_unexpectedly_fails_alone_and_the_others_results_reach_the_caller(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA: one job of a batch with a lone surrogate in a tag value failed the whole batch with a
    500 while the others were stored (their signing secrets, shown once, lost with the reply)."""
    from punctual.usecases.jobs import JobService

    prepare = JobService.prepare  # (a batch's jobs are prepared one by one, then stored in groups)

    def failing(
        self: JobService, tenant: str, spec: object, job_id: str | None = None, paused: bool = False
    ) -> object:
        if job_id == "boom":
            raise RuntimeError("a bug")
        return prepare(self, tenant, spec, job_id, paused)  # type: ignore[arg-type]

    monkeypatch.setattr(JobService, "prepare", failing)
    batch = _batch(2)
    jobs = batch["jobs"]
    assert isinstance(jobs, list)
    jobs += [
        {"id": "tag-value", "job": http_spec(tags={"k": "\udc00"})},
        {"id": "tag-key", "job": http_spec(tags={"\udc00": "x"})},
        {"id": "big", "job": http_spec(payload={"k": "x" * (300 * 1024)})},
        {"id": "boom", "job": http_spec()},
    ]
    reply = api.call("POST", PATH, batch)
    assert reply.status == 200
    by_id = {r["id"]: r for r in reply.body["results"]}
    assert [by_id[f"bulk-{i:04d}"]["job"]["signing_secret"][:6] for i in range(2)] == ["whsec_"] * 2
    for job_id in ("tag-value", "tag-key"):
        assert by_id[job_id]["code"] == 422, by_id[job_id]
        assert "lone surrogate" in str(by_id[job_id]["problem"]["errors"]), by_id[job_id]
    assert by_id["big"]["code"] == 413 and by_id["big"]["problem"]["type"].endswith("payload-too-large")
    assert by_id["boom"]["code"] == 500 and "a bug" not in str(by_id["boom"]["problem"])
    assert (reply.body["created"], reply.body["failed"]) == (2, 4)
    for job_id in ("tag-value", "tag-key", "big", "boom"):
        assert api.call("GET", f"/v1/jobs/{job_id}").status == 404
    single = api.call("POST", "/v1/jobs", http_spec(tags={"k": "\udc00"}))
    assert single.status == 422 and single.fields() == ["tags"], single.problem


def test_a_batch_whose_reply_would_pass_lambdas_6_mb_is_refused_before_anything_is_made(
    api: ApiClient,
) -> None:
    """QA: the 5 MB cap counted the request's bytes, but the reply carries every job back escaped
    (a quote as \\" in the body, \\\\\\" in Lambda's response, a non-ASCII character as \\uXXXX): a
    batch of 2.9 MB made its jobs and answered 5.8 MB and more (a 5 MB batch of 'é' about 16 MB),
    past Lambda's 6 MB: API Gateway's 502, every job made and its signing secret lost."""
    quotes = {"jobs": [{"id": f"q{i}", "job": http_spec(payload={"t": '"' * 120_000})} for i in range(12)]}
    raw = json.dumps(quotes)
    assert len(raw.encode()) < 3 * 1024 * 1024  # well within the request's own limit
    reply = api.call("POST", PATH, raw=raw)
    assert reply.status == 413 and reply.body["type"].endswith("payload-too-large"), reply
    assert "reply" in reply.body["detail"], reply.body
    assert api.call("GET", "/v1/jobs").body["items"] == []
