"""Tenant isolation for every route, and where the tenant comes from (IAM caller; local header)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

import pytest
from api_harness import ACCOUNT, ALICE, BOB, ApiClient, Reply, job_spec
from api_harness import api as api  # the fixture

from punctual.models import Execution, ExecutionStatus

SLOT = "2026-11-30T09:32:00Z"

# Every route that names a job, called by Bob on Alice's job.
FOREIGN_CALLS: dict[str, Callable[[ApiClient, str], Reply]] = {
    "GET job": lambda api, job: api.call("GET", f"/v1/jobs/{job}", user=BOB),
    "PUT job": lambda api, job: api.call("PUT", f"/v1/jobs/{job}", job_spec(name="mine now"), user=BOB),
    "PUT job with If-Match": lambda api, job: api.call(
        "PUT", f"/v1/jobs/{job}", job_spec(), {"If-Match": '"1"'}, user=BOB
    ),
    "DELETE job": lambda api, job: api.call("DELETE", f"/v1/jobs/{job}", user=BOB),
    "pause": lambda api, job: api.call("POST", f"/v1/jobs/{job}/pause", user=BOB),
    "resume": lambda api, job: api.call("POST", f"/v1/jobs/{job}/resume", user=BOB),
    "trigger": lambda api, job: api.call("POST", f"/v1/jobs/{job}/trigger", user=BOB),
    "trigger with key": lambda api, job: api.call(
        "POST", f"/v1/jobs/{job}/trigger", headers={"Idempotency-Key": "k"}, user=BOB
    ),
    "list executions": lambda api, job: api.call("GET", f"/v1/jobs/{job}/executions", user=BOB),
    "get execution": lambda api, job: api.call(
        "GET", f"/v1/jobs/{job}/executions/{quote(SLOT, safe='')}", user=BOB
    ),
}


@pytest.fixture
def alices_job(api: ApiClient) -> str:
    job_id: str = api.create(user=ALICE)["id"]
    api.store.save_execution(
        Execution(
            job_id=job_id,
            tenant=ALICE,
            slot=SLOT,
            scheduled_at="2026-11-30T09:32:00Z",  # type: ignore[arg-type]
            status=ExecutionStatus.SUCCEEDED,
        ),
        None,
        ttl_epoch_s=2_000_000_000,
    )
    return job_id


@pytest.mark.parametrize("route", sorted(FOREIGN_CALLS))
def test_another_tenant_cannot_see_or_touch_a_job(api: ApiClient, alices_job: str, route: str) -> None:
    reply = FOREIGN_CALLS[route](api, alices_job)

    # Not 403: another tenant's job does not exist for the caller.
    assert reply.status == 404
    assert reply.problem["type"].endswith("not-found")
    mine = api.call("GET", f"/v1/jobs/{alices_job}", user=ALICE).body
    assert (mine["version"], mine["state"], mine["name"]) == (1, "ENABLED", "nightly report")
    assert [e["slot"] for e in api.call("GET", f"/v1/jobs/{alices_job}/executions").body["items"]] == [SLOT]
    assert api.queued() == []


def test_listing_shows_only_the_callers_jobs(api: ApiClient, alices_job: str) -> None:
    bobs = api.create(user=BOB)["id"]

    assert [j["id"] for j in api.call("GET", "/v1/jobs", user=ALICE).body["items"]] == [alices_job]
    assert [j["id"] for j in api.call("GET", "/v1/jobs", user=BOB).body["items"]] == [bobs]


def test_a_next_token_cannot_be_replayed_by_another_tenant(api: ApiClient) -> None:
    for _ in range(2):
        api.create(user=ALICE)
    api.create(user=BOB)
    token = api.call("GET", "/v1/jobs?limit=1", user=ALICE).body["next_token"]

    reply = api.call("GET", f"/v1/jobs?limit=1&next_token={quote(token)}", user=BOB)

    assert reply.status == 400
    assert reply.problem["type"].endswith("invalid-next-token")


def test_an_execution_token_cannot_be_replayed_by_another_tenant(api: ApiClient, alices_job: str) -> None:
    api.store.save_execution(
        Execution(
            job_id=alices_job,
            tenant=ALICE,
            slot="2026-11-29T09:32:00Z",
            scheduled_at="2026-11-29T09:32:00Z",  # type: ignore[arg-type]
            status=ExecutionStatus.FAILED,
        ),
        None,
        ttl_epoch_s=2_000_000_000,
    )
    token = api.call("GET", f"/v1/jobs/{alices_job}/executions?limit=1").body["next_token"]
    bobs_job = api.create(user=BOB)["id"]

    reply = api.call("GET", f"/v1/jobs/{bobs_job}/executions?next_token={quote(token)}", user=BOB)

    assert reply.status == 400
    assert reply.problem["type"].endswith("invalid-next-token")


def test_sessions_of_one_role_share_a_tenant_and_other_roles_do_not(api: ApiClient) -> None:
    session_1 = f"arn:aws:sts::{ACCOUNT}:assumed-role/Scheduler/i-0abc"
    session_2 = f"arn:aws:sts::{ACCOUNT}:assumed-role/Scheduler/lambda-xyz"
    other_role = f"arn:aws:sts::{ACCOUNT}:assumed-role/Auditor/i-0abc"
    job = api.create(user=session_1)["id"]

    assert api.call("GET", f"/v1/jobs/{job}", user=session_2).status == 200
    assert api.call("GET", f"/v1/jobs/{job}", user=other_role).status == 404


def test_caller_without_identity_is_401(api: ApiClient) -> None:
    reply = api.call("GET", "/v1/jobs", user=None)

    assert reply.status == 401
    assert reply.problem["type"].endswith("unauthenticated")


def test_tenant_header_is_ignored_outside_local_mode(api: ApiClient, alices_job: str) -> None:
    reply = api.call("GET", f"/v1/jobs/{alices_job}", headers={"X-Punctual-Tenant": BOB}, user=ALICE)
    spoof = api.call("GET", f"/v1/jobs/{alices_job}", headers={"X-Punctual-Tenant": ALICE}, user=BOB)

    assert reply.status == 200
    assert spoof.status == 404


def test_local_mode_takes_the_tenant_from_the_header(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from punctual.api import wiring

    monkeypatch.setenv("PUNCTUAL_LOCAL_MODE", "1")
    wiring.use_services(None)
    team_a = {"X-Punctual-Tenant": "team-a"}
    job = api.call("POST", "/v1/jobs", job_spec(), team_a, user=None)

    assert job.status == 201
    assert api.call("GET", f"/v1/jobs/{job.body['id']}", headers=team_a, user=None).status == 200
    assert api.call("GET", f"/v1/jobs/{job.body['id']}", user=None).status == 404  # tenant "default"
    invalid = api.call("GET", "/v1/jobs", headers={"X-Punctual-Tenant": "a#b"}, user=None)
    assert invalid.status == 400
