"""The ``Custom::PunctualCalendar`` provider against the API under moto: a calendar declared by a
stack is its provider role's (the tenant of the stack's jobs too), put whole whatever the
deliveries, moved by a rename, and deleted only once no job excludes it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_harness import ApiClient
from api_harness import api as api  # the fixture
from test_job_resource_lifecycle import ROLE_A, ROLE_B, STACK_A, URL, RoleApi, _event, _spec

from punctual_cdk.provider import handler as provider

DAYS = {"timezone": "Europe/Berlin", "dates": ["2026-12-25"], "ranges": []}


@pytest.fixture
def as_a(api: ApiClient) -> RoleApi:
    return RoleApi(api, ROLE_A)


def _calendar_event(
    kind: str, days: dict[str, Any], name: str | None = "holidays", **extra: Any
) -> dict[str, Any]:
    props: dict[str, Any] = {"ServiceToken": "x", "ApiUrl": extra.pop("url", URL), "Spec": json.dumps(days)}
    if name is not None:
        props["Name"] = name
    return {
        "RequestType": kind,
        "ServiceToken": "x",
        "ResponseURL": "https://cloudformation-custom-resource-response.example/presigned",
        "StackId": STACK_A,
        "RequestId": f"req-{kind}",
        "LogicalResourceId": "Holidays",
        "ResourceType": provider.CALENDAR_RESOURCE_TYPE,
        "ResourceProperties": props,
        **extra,
    }


def _calendar(api: ApiClient, name: str, role: str = ROLE_A) -> Any:
    reply = api.call("GET", f"/v1/calendars/{name}", user=role)
    return reply.body if reply.status == 200 else reply.status


def test_create_puts_the_calendar_once_as_the_stacks_tenant(api: ApiClient, as_a: RoleApi) -> None:
    create = _calendar_event("Create", DAYS)
    answers = [provider.on_event(create, as_a) for _ in range(2)]  # a repeated delivery
    assert answers[0] == answers[1]
    assert answers[0]["PhysicalResourceId"].startswith("holidays@")
    assert answers[0]["Data"] == {"Name": "holidays"}
    got = _calendar(api, "holidays")
    assert got["dates"] == ["2026-12-25"] and got["timezone"] == "Europe/Berlin"
    assert _calendar(api, "holidays", ROLE_B) == 404  # another stack's role is another tenant
    # A job the same stack declares excludes it
    job = _event("Create", "req-job", _spec(schedule="rate(1 hour)", exclude_calendars=["holidays"]))
    job_id = provider.on_event(job, as_a)["PhysicalResourceId"]
    assert api.call("GET", f"/v1/jobs/{job_id}", user=ROLE_A).body["exclude_calendars"] == ["holidays"]


def test_a_calendar_without_a_name_gets_one_from_its_stack_and_logical_id(
    api: ApiClient, as_a: RoleApi
) -> None:
    answer = provider.on_event(_calendar_event("Create", DAYS, name=None), as_a)
    name = answer["Data"]["Name"]
    assert name.startswith("cfn-") and len(name) == 44
    assert answer == provider.on_event(_calendar_event("Create", DAYS, name=None), as_a)
    assert _calendar(api, name)["dates"] == ["2026-12-25"]


def test_update_puts_the_days_in_place_and_a_rename_moves_it(api: ApiClient, as_a: RoleApi) -> None:
    physical = provider.on_event(_calendar_event("Create", DAYS), as_a)["PhysicalResourceId"]
    new_days = {**DAYS, "dates": ["2026-12-25", "2026-12-26"]}
    same = provider.on_event(_calendar_event("Update", new_days, PhysicalResourceId=physical), as_a)
    assert same["PhysicalResourceId"] == physical  # in place: CloudFormation deletes nothing
    assert _calendar(api, "holidays")["dates"] == ["2026-12-25", "2026-12-26"]
    moved = provider.on_event(
        _calendar_event("Update", new_days, name="feiertage", PhysicalResourceId=physical), as_a
    )
    assert moved["PhysicalResourceId"] != physical and moved["Data"] == {"Name": "feiertage"}
    assert _calendar(api, "feiertage")["dates"] == ["2026-12-25", "2026-12-26"]
    # The old one goes when CloudFormation cleans up, with the old properties
    provider.on_event(_calendar_event("Delete", DAYS, PhysicalResourceId=physical), as_a)
    assert _calendar(api, "holidays") == 404 and _calendar(api, "feiertage") != 404


def test_delete_waits_for_its_jobs_and_is_done_when_gone(api: ApiClient, as_a: RoleApi) -> None:
    physical = provider.on_event(_calendar_event("Create", DAYS), as_a)["PhysicalResourceId"]
    job = _event("Create", "req-job", _spec(schedule="rate(1 hour)", exclude_calendars=["holidays"]))
    job_id = provider.on_event(job, as_a)["PhysicalResourceId"]
    delete = _calendar_event("Delete", DAYS, PhysicalResourceId=physical)
    # While a job excludes it, the delete fails naming the job (nothing deleted)
    with pytest.raises(provider.ProviderError, match=job_id):
        provider.on_event(delete, as_a)
    assert _calendar(api, "holidays") != 404
    # Once the job is gone (CloudFormation deletes dependants first), it is deleted; again is done too
    provider.on_event({**job, "RequestType": "Delete", "PhysicalResourceId": job_id}, as_a)
    for _ in range(2):
        assert provider.on_event(delete, as_a)["PhysicalResourceId"] == physical
    assert _calendar(api, "holidays") == 404


def test_a_failed_create_leaves_nothing_and_its_delete_calls_nothing(api: ApiClient, as_a: RoleApi) -> None:
    with pytest.raises(provider.ProviderError, match="dates"):
        provider.on_event(_calendar_event("Create", {**DAYS, "dates": ["2026-02-30"]}), as_a)
    with pytest.raises(provider.ProviderError, match=r"^Name: 1-64 characters"):
        provider.on_event(_calendar_event("Create", DAYS, name="a b"), as_a)
    assert api.call("GET", "/v1/calendars", user=ROLE_A).body["items"] == []
    calls: list[str] = []
    as_a.request = lambda *args, **kwargs: calls.append(args[1]) or (500, {})  # type: ignore[method-assign]
    done = provider.on_event(
        _calendar_event("Delete", DAYS, PhysicalResourceId="2026/12/05/[$LATEST]abc"), as_a
    )
    assert done["PhysicalResourceId"] == "2026/12/05/[$LATEST]abc" and calls == []


def test_a_named_calendar_it_did_not_make_is_never_taken_over(api: ApiClient, as_a: RoleApi) -> None:
    # review: a Create put over a calendar of the same name (another resource's, or the API's), and
    # CloudFormation's cleanup of the old resource, or a rollback, then deleted it
    assert (
        api.call("PUT", "/v1/calendars/holidays", {**DAYS, "dates": ["2027-01-01"]}, user=ROLE_A).status
        == 201
    )
    with pytest.raises(
        provider.ProviderError, match="calendar 'holidays' exists and this resource did not make it"
    ):
        provider.on_event(_calendar_event("Create", DAYS), as_a)
    assert _calendar(api, "holidays")["dates"] == ["2027-01-01"]  # untouched


def test_its_scheduler_gone_a_calendar_is_deleted_with_it(as_a: RoleApi) -> None:
    # review: a job's Delete took an API that no longer exists as done, a calendar's failed the stack
    class DeletedApi:
        def __init__(self, url: str) -> None:
            pass

        def request(self, *args: Any, **kwargs: Any) -> tuple[int, Any]:
            return 403, {"message": "Forbidden"}

    done = provider.on_event(
        _calendar_event("Delete", DAYS, PhysicalResourceId="holidays@0123456789ab"), DeletedApi
    )
    assert done["PhysicalResourceId"] == "holidays@0123456789ab" and "Forbidden" in done["Reason"]


def test_the_same_api_spelled_otherwise_is_an_update_in_place(api: ApiClient, as_a: RoleApi) -> None:
    physical = provider.on_event(_calendar_event("Create", DAYS), as_a)["PhysicalResourceId"]
    other = URL.replace("https://", "HTTPS://").replace(".execute-api.", ".EXECUTE-API.") + "/"
    same = provider.on_event(_calendar_event("Update", DAYS, url=other, PhysicalResourceId=physical), as_a)
    assert same["PhysicalResourceId"] == physical  # CloudFormation deletes nothing after it
