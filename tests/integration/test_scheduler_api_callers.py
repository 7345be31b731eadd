"""The scheduler-compatible API's answers about its callers and its own limits: quotas, throttling,
internal errors, who the caller is (split from test_scheduler_api.py, which passed 800 lines)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from api_harness import ALICE_ID, ApiClient, job_spec
from api_harness import api as api  # the fixture
from botocore.exceptions import ClientError
from scheduler_harness import scheduler_client
from test_scheduler_api import _code, _create

from punctual.api.scheduler.mapping import job_id_of


def test_quota_throttling_internal_and_unauthenticated_errors(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a deployment allowing two jobs, two groups and six requests a minute per tenant
    monkeypatch.setenv("PUNCTUAL_MAX_JOBS_PER_TENANT", "2")
    monkeypatch.setenv("PUNCTUAL_API_REQUESTS_PER_MINUTE_PER_TENANT", "6")
    from punctual.api import wiring
    from punctual.api.scheduler import operations
    from punctual.runtime.clock import ManualClock

    monkeypatch.setattr(operations, "MAX_GROUPS_PER_TENANT", 2)  # default and one more
    # Every request in one quota minute, whatever the wall clock does meanwhile
    wiring.services().jobs.clock = ManualClock(datetime(2026, 12, 1, 12, 0, 5, tzinfo=UTC))
    client = scheduler_client(api)
    _create(client, "one")
    _create(client, "two")
    code, message = _code(_create, client=client, name="three")
    assert code == "ServiceQuotaExceededException" and "maxJobsPerTenant" in message, message
    client.create_schedule_group(Name="g1")
    assert _code(client.create_schedule_group, Name="g2")[0] == "ServiceQuotaExceededException"
    client.get_schedule(Name="one")  # the sixth request this minute
    code, message = _code(client.get_schedule, Name="one")
    assert code == "ThrottlingException" and "per minute" in message


def test_internal_errors_and_missing_callers(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from punctual.api.scheduler import operations

    def broken(req: Any, values: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setitem(operations.OPERATIONS, "ListSchedules", broken)
    client = scheduler_client(api)
    code, message = _code(client.list_schedules)
    assert code == "InternalServerException" and "a bug" not in message
    anonymous = scheduler_client(api, user=None)  # type: ignore[arg-type]
    assert _code(anonymous.list_schedule_groups)[0] == "AccessDeniedException"


def test_throttled_storage_is_a_throttling_exception(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA22: DynamoDB throttling (which moto never does) reached the scheduler API as an unknown
    error: InternalServerException (500). It is the service's retryable ThrottlingException."""
    from punctual.api import wiring

    client = scheduler_client(api)
    _create(client, "one")

    def throttled(*args: object, **kwargs: object) -> None:
        raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException"}}, "GetItem")

    monkeypatch.setattr(wiring.services().store, "get_job", throttled)
    code, message = _code(client.get_schedule, Name="one")

    assert code == "ThrottlingException" and "retry" in message, message


def test_the_tenant_of_a_signed_request_in_local_mode() -> None:
    from punctual.api.tenancy import tenant_of

    auth = "AWS4-HMAC-SHA256 Credential=e2e/20261201/us-east-1/scheduler/aws4_request, SignedHeaders=host, Signature=ab"
    assert tenant_of({"headers": {"Authorization": auth}}, local_mode=True) == "e2e"
    assert tenant_of({"headers": {"Authorization": auth, "X-Punctual-Tenant": "t1"}}, local_mode=True) == "t1"
    assert tenant_of({"headers": {}}, local_mode=True) == "default"
    with pytest.raises(Exception):  # noqa: B017 - outside local mode the key names nobody
        tenant_of({"headers": {"Authorization": auth}}, local_mode=False)


@pytest.mark.parametrize("key", ["team#1", "t" * 300])
def test_a_signature_whose_key_id_is_no_tenant_name_is_refused_in_local_mode(
    api: ApiClient, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    from punctual.api import wiring

    monkeypatch.setenv("PUNCTUAL_LOCAL_MODE", "1")
    wiring.use_services(None)
    auth = f"AWS4-HMAC-SHA256 Credential={key}/20261201/us-east-1/scheduler/aws4_request, SignedHeaders=host, Signature=ab"
    # (QA22: it acted for the tenant "default", whose schedules it listed and could change)
    api.call("PUT", "/v1/jobs/nightly", job_spec(), {"If-None-Match": "*"}, user=None)  # default's
    refused = api.call("GET", "/schedules", headers={"Authorization": auth}, user=None)

    assert refused.status == 400 and refused.headers["x-amzn-ErrorType"] == "ValidationException"
    assert "access key id" in refused.body["Message"]


def test_tenant_requests_are_counted_for_alice(api: ApiClient) -> None:
    client = scheduler_client(api)
    _create(client, "x")
    assert api.store.get_job(ALICE_ID, job_id_of("default", "x")) is not None


# --------------------------------------------------------------------------- the dead-letter queue on SQS
