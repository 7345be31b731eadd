"""QA17 (qa4b): POST /v1/job-batches repeated at a full quota, counts and exists."""

from __future__ import annotations

import pytest
from api_harness import ALICE_ID, ApiClient, job_spec
from api_harness import api as api  # the fixture

PATH = "/v1/job-batches"


def _batch(count: int, start: int = 0, **overrides: object) -> dict[str, object]:
    return {
        "jobs": [
            {"id": f"bulk-{i:04d}", "job": job_spec(name=f"job {i}", **overrides)}
            for i in range(start, start + count)
        ]
    }


def _reconfigure(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    from punctual.api import wiring

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    wiring.use_services(None)


def test_repeat_at_full_job_quota_answers_exists(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    _reconfigure(monkeypatch, PUNCTUAL_MAX_JOBS_PER_TENANT="5")
    first = api.call("POST", PATH, _batch(5))
    assert first.body["created"] == 5
    again = api.call("POST", PATH, _batch(7))
    statuses = [(r["status"], r["code"]) for r in again.body["results"]]
    assert statuses[:5] == [("exists", 200)] * 5, again.body["results"][:5]
    assert statuses[5:] == [("failed", 409)] * 2


def test_repeat_at_full_peak_quota_answers_exists(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    _reconfigure(monkeypatch, PUNCTUAL_MAX_SLOTS_PER_SECOND_PER_TENANT="5")
    first = api.call("POST", PATH, _batch(7))
    assert (first.body["created"], first.body["failed"]) == (5, 2), first.body
    refused = [r for r in first.body["results"] if r["status"] == "failed"]
    assert {r["problem"]["quota"] for r in refused} == {"maxSlotsPerSecondPerTenant"}
    again = api.call("POST", PATH, _batch(5))
    statuses = [(r["status"], r["code"]) for r in again.body["results"]]
    assert statuses == [("exists", 200)] * 5, again.body["results"]


def test_repeat_at_full_trigger_quota_answers_exists(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    # rate(1 minute) counts 1 trigger/minute each
    _reconfigure(monkeypatch, PUNCTUAL_MAX_TRIGGERS_PER_MINUTE_PER_TENANT="3")
    first = api.call("POST", PATH, _batch(4, schedule="rate(1 minute)"))
    assert (first.body["created"], first.body["failed"]) == (3, 1), first.body
    again = api.call("POST", PATH, _batch(3, schedule="rate(1 minute)"))
    statuses = [(r["status"], r["code"]) for r in again.body["results"]]
    assert statuses == [("exists", 200)] * 3, again.body["results"]


def test_conditional_put_at_full_peak_quota_is_412(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    _reconfigure(monkeypatch, PUNCTUAL_MAX_SLOTS_PER_SECOND_PER_TENANT="1")
    spec = job_spec()
    assert api.call("PUT", "/v1/jobs/only", spec, headers={"If-None-Match": "*"}).status == 201
    again = api.call("PUT", "/v1/jobs/only", spec, headers={"If-None-Match": "*"})
    assert again.status == 412, again.body
    assert api.store.get_job(ALICE_ID, "only") is not None
