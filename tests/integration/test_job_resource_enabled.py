"""``Custom::PunctualJob``'s ``Enabled`` property (``punctual_cdk.Job(enabled=False)``), as
``AWS::Scheduler::Schedule``'s ``State``: a job declared disabled is created paused in its create's
own write; an update that turns it off pauses before the new spec lands, one that turns it on
resumes after; an update that leaves it as it was changes no state."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_harness import ApiClient
from api_harness import api as api  # the fixture
from audit_harness import all_timers
from test_job_resource_lifecycle import ROLE_A, URL, RoleApi, _event, _spec

from punctual_cdk.provider import handler as provider


@pytest.fixture
def as_a(api: ApiClient) -> RoleApi:
    return RoleApi(api, ROLE_A)


def _props(spec: dict[str, Any], enabled: Any = None) -> dict[str, Any]:
    props: dict[str, Any] = {"ServiceToken": "x", "ApiUrl": URL, "Spec": json.dumps(spec)}
    if enabled is not None:
        props["Enabled"] = enabled
    return props


def _event_with(
    kind: str, request_id: str, spec: dict[str, Any], enabled: Any = None, **extra: Any
) -> dict[str, Any]:
    event = _event(kind, request_id, spec, **extra)
    event["ResourceProperties"] = _props(spec, enabled)
    return event


def _job(api: ApiClient, job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = api.call("GET", f"/v1/jobs/{job_id}", user=ROLE_A).body
    return body


def _timers(api: ApiClient, job_id: str) -> int:
    """The job's timers of its current version (a pause leaves the older chain's timer, which the
    poller drops as stale)."""
    version = _job(api, job_id)["version"]
    return sum(
        1 for timer in all_timers(api.store) if timer.job_id == job_id and timer.job_version == version
    )


def _update(
    job_id: str, spec: dict[str, Any], enabled: Any, old_spec: dict[str, Any], old_enabled: Any
) -> dict[str, Any]:
    return _event_with(
        "Update",
        "req-u",
        spec,
        enabled,
        PhysicalResourceId=job_id,
        OldResourceProperties=_props(old_spec, old_enabled),
    )


def test_a_job_declared_disabled_is_created_paused_once(api: ApiClient, as_a: RoleApi) -> None:
    # When CloudFormation creates a job with Enabled false (as text, as it sends booleans), twice
    create = _event_with("Create", "req-1", _spec(schedule="rate(1 minute)"), "false")
    answers = [provider.on_event(create, as_a) for _ in range(2)]
    job_id = answers[0]["PhysicalResourceId"]
    # Then one job exists, paused, with no timer a poller could release
    assert {a["PhysicalResourceId"] for a in answers} == {job_id}
    assert _job(api, job_id)["state"] == "PAUSED" and _timers(api, job_id) == 0


def test_turning_it_on_resumes_it_and_off_pauses_it_before_the_new_spec(
    api: ApiClient, as_a: RoleApi
) -> None:
    old = _spec(schedule="rate(1 minute)")
    job_id = provider.on_event(_event_with("Create", "req-1", old, "false"), as_a)["PhysicalResourceId"]
    # When an update turns it on
    new = _spec(schedule="rate(5 minutes)")
    provider.on_event(_update(job_id, new, "true", old, "false"), as_a)
    # Then the job has the new spec and runs
    job = _job(api, job_id)
    assert job["state"] == "ENABLED" and job["schedule"] == "rate(5 minutes)" and _timers(api, job_id) == 1
    # When an update turns it off again with another spec
    newer = _spec(schedule="rate(10 minutes)")
    calls: list[tuple[str, str]] = []
    real = as_a.request

    def recorded(
        method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        calls.append((method, path))
        return real(method, path, body, headers)

    as_a.request = recorded  # type: ignore[method-assign]
    provider.on_event(_update(job_id, newer, "false", new, "true"), as_a)
    # Then it was paused before its spec was replaced: the new spec never had a timer
    assert calls[:2] == [("POST", f"/v1/jobs/{job_id}/pause"), ("PUT", f"/v1/jobs/{job_id}")]
    job = _job(api, job_id)
    assert job["state"] == "PAUSED" and job["schedule"] == "rate(10 minutes)" and _timers(api, job_id) == 0


def test_an_update_that_keeps_enabled_changes_no_state(api: ApiClient, as_a: RoleApi) -> None:
    old = _spec(schedule="rate(1 minute)")
    job_id = provider.on_event(_event_with("Create", "req-1", old), as_a)["PhysicalResourceId"]
    # An operator pauses it through the API; a template update that leaves Enabled alone
    assert api.call("POST", f"/v1/jobs/{job_id}/pause", user=ROLE_A).status == 200
    provider.on_event(_update(job_id, _spec(schedule="rate(2 minutes)"), None, old, None), as_a)
    # leaves it paused (the template said nothing new about its state)
    assert _job(api, job_id)["state"] == "PAUSED"


def test_a_disabled_job_deleted_outside_cloudformation_is_declared_again_paused(
    api: ApiClient, as_a: RoleApi
) -> None:
    old = _spec(schedule="rate(1 minute)")
    job_id = provider.on_event(_event_with("Create", "req-1", old), as_a)["PhysicalResourceId"]
    assert api.call("DELETE", f"/v1/jobs/{job_id}", user=ROLE_A).status == 204
    answer = provider.on_event(_update(job_id, old, "false", old, "true"), as_a)
    assert answer["PhysicalResourceId"] != job_id
    assert _job(api, answer["PhysicalResourceId"])["state"] == "PAUSED"


@pytest.mark.parametrize("value", ["maybe", "", "0"])
def test_an_enabled_value_that_is_not_a_boolean_is_refused_naming_it(
    api: ApiClient, as_a: RoleApi, value: str
) -> None:
    with pytest.raises(provider.ProviderError, match=r"^Enabled: true or false"):
        provider.on_event(_event_with("Create", "req-1", _spec(), value), as_a)
    assert api.call("GET", "/v1/jobs", user=ROLE_A).body["items"] == []


def test_turning_off_a_completed_job_and_its_rollback_succeed(api: ApiClient, as_a: RoleApi) -> None:
    # review: pausing a COMPLETED job is 409, which failed the update; the rollback then put the
    # unchanged spec of a one-time job that had run, 422 (no slot left): UPDATE_ROLLBACK_FAILED
    from api_harness import principal_id

    from punctual.execution.chain_ends import complete_job
    from punctual.runtime.clock import SystemClock

    once = _spec(schedule="at(2031-01-01T00:00:00)")
    job_id = provider.on_event(_event_with("Create", "req-1", once), as_a)["PhysicalResourceId"]
    tenant = principal_id(ROLE_A).split(":")[0]
    job = api.store.get_job(tenant, job_id)
    assert job is not None and complete_job(api.store, job, SystemClock())  # its one slot ran
    puts: list[str] = []
    real = as_a.request

    def recorded(
        method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        if method == "PUT":
            puts.append(path)
        return real(method, path, body, headers)

    as_a.request = recorded  # type: ignore[method-assign]
    provider.on_event(_update(job_id, once, "false", once, None), as_a)  # turned off: done
    provider.on_event(_update(job_id, once, None, once, "false"), as_a)  # the rollback: done
    assert _job(api, job_id)["state"] == "COMPLETED" and puts == []  # the same spec is not put again


@pytest.mark.parametrize("old_enabled", [None, "false"])
def test_a_new_spec_of_a_completed_job_declared_disabled_leaves_it_paused(
    api: ApiClient, as_a: RoleApi, old_enabled: Any
) -> None:
    """QA26: a COMPLETED job cannot be paused (its pause is done, 409), and the new spec put after
    it made the job ENABLED again: a job declared disabled (turned off by this update, or before)
    fired at its new slot."""
    from api_harness import principal_id

    from punctual.execution.chain_ends import complete_job
    from punctual.runtime.clock import SystemClock

    once, later = _spec(schedule="at(2031-01-01T00:00:00)"), _spec(schedule="at(2032-01-01T00:00:00)")
    job_id = provider.on_event(_event_with("Create", "req-1", once), as_a)["PhysicalResourceId"]
    job = api.store.get_job(principal_id(ROLE_A).split(":")[0], job_id)
    assert job is not None and complete_job(api.store, job, SystemClock())  # its one slot ran
    if old_enabled == "false":  # turned off after it completed: nothing to pause
        provider.on_event(_update(job_id, once, "false", once, None), as_a)
    provider.on_event(_update(job_id, later, "false", once, old_enabled), as_a)
    assert _job(api, job_id)["state"] == "PAUSED" and _job(api, job_id)["schedule"] == later["schedule"]
    assert _timers(api, job_id) == 0
    # turned on again, it runs its new slot
    provider.on_event(_update(job_id, later, None, later, "false"), as_a)
    assert _job(api, job_id)["state"] == "ENABLED" and _timers(api, job_id) == 1
