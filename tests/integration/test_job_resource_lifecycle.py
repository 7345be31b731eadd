"""The ``Custom::PunctualJob`` provider's lifecycle against the job API under moto.

CloudFormation's requests as it sends them (create, update in place, a replacing update, delete,
the rollbacks of each, and repeated deliveries), answered by the provider
(``punctual_cdk.provider.handler``) calling the API handler in-process as its own role: one job
per create request, none left behind, and the declaring stack's role as the tenant.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from api_harness import ACCOUNT, REGION, ApiClient, principal_id
from api_harness import api as api  # the fixture

from punctual_cdk.provider import handler as provider

STACK_A = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/orders/0a1b2c3d-aaaa-bbbb-cccc-000000000001"
STACK_B = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/billing/0a1b2c3d-aaaa-bbbb-cccc-000000000002"
ROLE_A = f"arn:aws:sts::{ACCOUNT}:assumed-role/orders-PunctualJobProviderRole/provider-session"
ROLE_B = f"arn:aws:sts::{ACCOUNT}:assumed-role/billing-PunctualJobProviderRole/provider-session"
URL = "https://abc123defg.execute-api.us-east-1.amazonaws.com/prod"
OTHER_URL = "https://zyx987wvut.execute-api.us-east-1.amazonaws.com/prod"
QUEUE = f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders"


class RoleApi:
    """The job API as the provider of one stack reaches it: every request as that stack's role."""

    def __init__(self, api: ApiClient, role_arn: str) -> None:
        self.api = api
        self.role_arn = role_arn
        self.urls: list[str] = []
        self.apart: set[str] = set()  # URLs of other deployments: only the jobs made there are found

    def __call__(self, url: str) -> RoleApi:
        self.urls.append(url)
        return self

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        url = self.urls[-1] if self.urls else ""
        if url in self.apart and method == "GET" and not path.endswith(provider.api_tag(url)):
            return 404, {"title": "Not found", "detail": "no such job in this deployment"}
        reply = self.api.call(method, path, body, headers=headers, user=self.role_arn)
        return reply.status, reply.body


def _spec(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "nightly-orders",
        "schedule": "cron(0 2 * * ? *)",
        "target": {"type": "sqs", "queue_arn": QUEUE},
        "payload": {"report": "orders"},
        **overrides,
    }


def _event(
    kind: str, request_id: str, spec: dict[str, Any], *, stack: str = STACK_A, **extra: Any
) -> dict[str, Any]:
    return {
        "RequestType": kind,
        "ServiceToken": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:provider",
        "ResponseURL": "https://cloudformation-custom-resource-response.example/presigned",
        "StackId": stack,
        "RequestId": request_id,
        "LogicalResourceId": "NightlyOrdersJob",
        "ResourceType": provider.RESOURCE_TYPE,
        "ResourceProperties": {
            "ServiceToken": "x",
            "ApiUrl": extra.pop("url", URL),
            "Spec": json.dumps(spec),
        },
        **extra,
    }


def _jobs(api: ApiClient, role: str = ROLE_A) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.call("GET", "/v1/jobs", user=role).body["items"]
    return items


@pytest.fixture
def as_a(api: ApiClient) -> RoleApi:
    return RoleApi(api, ROLE_A)


def test_create_makes_one_job_whatever_the_deliveries(api: ApiClient, as_a: RoleApi) -> None:
    # When CloudFormation delivers one Create three times (a retry after a lost answer)
    create = _event("Create", "req-1", _spec())
    answers = [provider.on_event(create, as_a) for _ in range(3)]
    # Then one job exists, named by every answer, with the ARN and id as outputs
    jobs = _jobs(api)
    assert len(jobs) == 1
    job_id = jobs[0]["id"]
    assert {a["PhysicalResourceId"] for a in answers} == {job_id}
    assert answers[0]["Data"] == {
        "JobId": job_id,
        "Arn": f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/default/{job_id}",
    }
    assert jobs[0]["schedule"] == "cron(0 2 * * ? *)" and jobs[0]["target"]["queue_arn"] == QUEUE
    # And the tenant is the declaring stack's provider role (its unique id), not a template's name
    assert api.store.get_job(principal_id(ROLE_A).split(":")[0], job_id) is not None
    assert _jobs(api, ROLE_B) == []
    # And another request (another resource or a new create) is another job
    provider.on_event(_event("Create", "req-2", _spec()), as_a)
    assert len(_jobs(api)) == 2


def test_update_in_place_keeps_the_job_and_its_rollback_restores_it(api: ApiClient, as_a: RoleApi) -> None:
    created = provider.on_event(_event("Create", "req-1", _spec()), as_a)
    job_id = created["PhysicalResourceId"]
    # When the schedule changes (an in-place update), delivered twice
    update = _event(
        "Update",
        "req-2",
        _spec(schedule="rate(1 hour)"),
        PhysicalResourceId=job_id,
        OldResourceProperties={"ApiUrl": URL, "Spec": json.dumps(_spec())},
    )
    answers = [provider.on_event(update, as_a) for _ in range(2)]
    # Then the same job carries the new spec; no other job exists
    assert {a["PhysicalResourceId"] for a in answers} == {job_id}
    [job] = _jobs(api)
    assert job["id"] == job_id and job["schedule"] == "rate(1 hour)"
    # When the stack update fails later, CloudFormation's rollback sends the old properties back
    rollback = _event(
        "Update",
        "req-3",
        _spec(),
        PhysicalResourceId=job_id,
        OldResourceProperties={"ApiUrl": URL, "Spec": json.dumps(_spec(schedule="rate(1 hour)"))},
    )
    assert provider.on_event(rollback, as_a)["PhysicalResourceId"] == job_id
    [job] = _jobs(api)
    assert job["id"] == job_id and job["schedule"] == "cron(0 2 * * ? *)"


def test_a_replacement_swaps_safely_and_its_rollback_leaves_the_old_job(
    api: ApiClient, as_a: RoleApi
) -> None:
    old_id = provider.on_event(_event("Create", "req-1", _spec()), as_a)["PhysicalResourceId"]
    as_a.apart.add(OTHER_URL)
    # When the job moves to another deployment's URL (a replacement), delivered twice
    replace = _event(
        "Update",
        "req-2",
        _spec(),
        url=OTHER_URL,
        PhysicalResourceId=old_id,
        OldResourceProperties={"ApiUrl": URL, "Spec": json.dumps(_spec())},
    )
    new_ids = {provider.on_event(replace, as_a)["PhysicalResourceId"] for _ in range(2)}
    # Then a new job exists beside the old one (which CloudFormation deletes once the update succeeded)
    [new_id] = new_ids
    assert new_id != old_id and as_a.urls[-1] == OTHER_URL
    assert sorted(j["id"] for j in _jobs(api)) == sorted([old_id, new_id])
    # Rollback: CloudFormation deletes the new one; the old one is as it was
    provider.on_event(_event("Delete", "req-3", _spec(), url=OTHER_URL, PhysicalResourceId=new_id), as_a)
    [job] = _jobs(api)
    assert job["id"] == old_id and job["version"] == 1
    # Success instead: the cleanup deletes the old one, and only the new one is left
    new_id = provider.on_event(replace | {"RequestId": "req-4"}, as_a)["PhysicalResourceId"]
    provider.on_event(_event("Delete", "req-5", _spec(), PhysicalResourceId=old_id), as_a)
    assert [j["id"] for j in _jobs(api)] == [new_id]


def test_delete_and_rollback_leave_nothing_and_never_fail(api: ApiClient, as_a: RoleApi) -> None:
    job_id = provider.on_event(_event("Create", "req-1", _spec()), as_a)["PhysicalResourceId"]
    delete = _event("Delete", "req-2", _spec(), PhysicalResourceId=job_id)
    # A delete, delivered twice, removes the job and succeeds both times
    for _ in range(2):
        assert provider.on_event(delete, as_a)["PhysicalResourceId"] == job_id
    assert _jobs(api) == []
    # The rollback of a create that failed (its physical id names no job) succeeds and calls nothing
    before = len(as_a.urls)
    failed = _event("Delete", "req-3", _spec(), PhysicalResourceId="failed-req-0")
    assert provider.on_event(failed, as_a)["PhysicalResourceId"] == "failed-req-0"
    assert api.call("GET", "/v1/jobs", user=ROLE_A).status == 200 and len(as_a.urls) == before


def test_another_stack_cannot_touch_a_declared_job(api: ApiClient, as_a: RoleApi) -> None:
    job_id = provider.on_event(_event("Create", "req-1", _spec()), as_a)["PhysicalResourceId"]
    as_b = RoleApi(api, ROLE_B)
    # Stack B naming A's job in a delete (or an update) reaches nothing of A's
    provider.on_event(_event("Delete", "req-2", _spec(), stack=STACK_B, PhysicalResourceId=job_id), as_b)
    assert [j["id"] for j in _jobs(api)] == [job_id]
    update = _event(
        "Update",
        "req-3",
        _spec(schedule="rate(1 hour)"),
        stack=STACK_B,
        PhysicalResourceId=job_id,
        OldResourceProperties={"ApiUrl": URL, "Spec": json.dumps(_spec())},
    )
    assert provider.on_event(update, as_b)["PhysicalResourceId"] != job_id  # B gets a job of its own
    assert _jobs(api)[0]["schedule"] == "cron(0 2 * * ? *)"


def test_a_refused_spec_fails_the_resource_with_the_reason(
    api: ApiClient, as_a: RoleApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[dict[str, Any]] = []

    class _Answered:
        def __enter__(self) -> _Answered:
            return self

        def __exit__(self, *_: object) -> None:
            return None

    def urlopen(request: urllib.request.Request, timeout: float) -> _Answered:
        assert request.get_method() == "PUT" and request.full_url.endswith("/presigned")
        sent.append(json.loads(request.data))  # type: ignore[arg-type]
        return _Answered()

    monkeypatch.setattr(provider.urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(provider, "SignedApi", as_a)
    # When CloudFormation asks for a job whose schedule the API refuses
    provider.handler(_event("Create", "req-1", _spec(schedule="every tuesday")), None)
    # Then the resource fails with the API's reason, under an id a later delete ignores
    assert sent[0]["Status"] == "FAILED" and "schedule" in sent[0]["Reason"]
    assert sent[0]["PhysicalResourceId"] == "failed-req-1" and _jobs(api) == []
    provider.handler(_event("Delete", "req-2", _spec(), PhysicalResourceId="failed-req-1"), None)
    assert sent[1]["Status"] == "SUCCESS" and sent[1]["PhysicalResourceId"] == "failed-req-1"
    # And a good one succeeds with its outputs
    provider.handler(_event("Create", "req-3", _spec()), None)
    assert sent[2]["Status"] == "SUCCESS" and sent[2]["Data"]["JobId"] == sent[2]["PhysicalResourceId"]


def _update(request_id: str, spec: dict[str, Any], old: dict[str, Any], job_id: str) -> dict[str, Any]:
    old_properties = {"ApiUrl": URL, "Spec": json.dumps(old)}
    return _event("Update", request_id, spec, PhysicalResourceId=job_id, OldResourceProperties=old_properties)


def test_an_update_of_a_one_time_job_that_ran_and_deleted_itself_succeeds(
    api: ApiClient, as_a: RoleApi
) -> None:
    """QA23: a one-time job with delete_after_completion ran and deleted itself; any later change of
    its properties (a description) was a re-create the API refused ("no future slot"), and so was
    the rollback: the stack stuck in UPDATE_ROLLBACK_FAILED. Nothing is made again; both succeed."""
    once = _spec(schedule="at(2027-01-01T00:00:00)", delete_after_completion=True)
    job_id = provider.on_event(_event("Create", "req-1", once), as_a)["PhysicalResourceId"]
    assert api.call("DELETE", f"/v1/jobs/{job_id}", user=ROLE_A).status == 204  # as its completion does
    past = {**once, "schedule": "at(2026-01-01T00:00:00)"}  # as declared, now that its instant passed
    update = _update("req-2", {**past, "description": "ran in January"}, past, job_id)
    answer = provider.on_event(update, as_a)
    assert answer["PhysicalResourceId"] == job_id and answer["Data"] == {"JobId": job_id}
    assert "ran its course" in answer["Reason"] and _jobs(api) == []
    rollback = {**update, "RequestId": "req-3", "ResourceProperties": update["ResourceProperties"]}
    assert provider.on_event(rollback, as_a)["PhysicalResourceId"] == job_id
    # A job that is gone and still has slots to run is made again, as before
    again = _update("req-4", _spec(description="back"), _spec(), job_id)
    assert provider.on_event(again, as_a)["PhysicalResourceId"] != job_id and len(_jobs(api)) == 1
