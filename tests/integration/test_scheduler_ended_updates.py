"""UpdateSchedule of a recurring schedule whose EndDate has passed, with an unmodified boto3
``scheduler`` client (QA30): GetSchedule's answer sent back with a new Description, or to disable
it, was refused for a ``rate()`` schedule ("EndDate is not in the future"), so the only update left
dropped its EndDate and started it again. An update that keeps its EndDate and expression is taken
and the schedule stays ended; one that moves the EndDate into the past is still refused."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from api_harness import ALICE_ID, ApiClient
from api_harness import api as api  # the fixture
from audit_harness import all_timers
from botocore.exceptions import ClientError
from test_scheduler_updates import OUTPUT_ONLY, T0, _put
from test_scheduler_updates import client as client  # the fixture
from test_scheduler_updates import clock as clock  # the fixture

from punctual.api.scheduler.mapping import job_id_of
from punctual.models import JobState
from punctual.runtime.clock import ManualClock


def _ended(api: ApiClient, name: str, expression: str, clock: ManualClock, client: Any) -> dict[str, Any]:
    """A schedule whose EndDate passed and whose chain ended (COMPLETED, as its poller leaves it)."""
    _put(client, name, expression, EndDate=T0 + timedelta(minutes=10))
    clock.set(T0 + timedelta(hours=1))
    job_id = job_id_of("default", name)
    stored = api.store.get_job(ALICE_ID, job_id)
    done = stored.model_copy(update={"state": JobState.COMPLETED, "next_fire_at": None})
    api.store.replace_job(done, stored.version)
    got = client.get_schedule(Name=name)
    return {key: value for key, value in got.items() if key not in OUTPUT_ONLY}


@pytest.mark.parametrize("expression", ["rate(1 minute)", "rate(5 minutes)", "cron(* * * * ? *)"])
def test_an_ended_schedule_takes_an_update_that_keeps_its_end_date(
    client: Any, api: ApiClient, clock: ManualClock, expression: str
) -> None:
    sent = _ended(api, "ending", expression, clock, client)
    # When its description is changed, as the service's docs advise (GetSchedule, then UpdateSchedule)
    client.update_schedule(**{**sent, "Description": "kept for the audit"})
    # Then it is taken, and the schedule is still ended: nothing runs again
    got = client.get_schedule(Name="ending")
    assert (got["Description"], got["EndDate"]) == ("kept for the audit", sent["EndDate"])
    job = api.call("GET", f"/v1/jobs/{job_id_of('default', 'ending')}").body
    assert (job["state"], job["next_fire_at"]) == ("COMPLETED", None)
    # and so is disabling it
    client.update_schedule(**{**sent, "State": "DISABLED"})
    assert client.get_schedule(Name="ending")["State"] == "DISABLED"
    job = api.call("GET", f"/v1/jobs/{job_id_of('default', 'ending')}").body
    assert job["next_fire_at"] is None
    # but an EndDate moved to another past instant is refused, naming it
    with pytest.raises(ClientError) as refused:
        client.update_schedule(**{**sent, "EndDate": sent["EndDate"] - timedelta(minutes=1)})
    error = refused.value.response["Error"]
    assert error["Code"] == "ValidationException" and "EndDate" in error["Message"], error


@pytest.mark.parametrize("expression", ["rate(1 minute)", "rate(5 minutes)", "cron(* * * * ? *)"])
def test_enabling_a_schedule_disabled_before_its_end_date_passed_is_refused(
    client: Any, api: ApiClient, clock: ManualClock, expression: str
) -> None:
    # Given a schedule DISABLED before its EndDate, which then passed while it was off (review of
    # QA30: GetSchedule's answer sent back with State ENABLED was taken; the schedule became ENABLED
    # with a resume timer, whose release recorded every slot of the disabled period MISSED)
    _put(client, "ending", expression, EndDate=T0 + timedelta(minutes=10))
    sent = {key: value for key, value in client.get_schedule(Name="ending").items() if key not in OUTPUT_ONLY}
    client.update_schedule(**{**sent, "State": "DISABLED"})
    clock.set(T0 + timedelta(hours=1))
    job_id = job_id_of("default", "ending")
    before = api.store.get_job(ALICE_ID, job_id)
    # When it is enabled with its EndDate and expression kept
    with pytest.raises(ClientError) as refused:
        client.update_schedule(**{**sent, "State": "ENABLED"})
    # Then it is refused, naming EndDate, and the schedule is left as it was: disabled, no timer of
    # its version (the one left of its first version, before it was disabled, is dropped as stale)
    error = refused.value.response["Error"]
    assert error["Code"] == "ValidationException" and "EndDate" in error["Message"], error
    assert client.get_schedule(Name="ending")["State"] == "DISABLED"
    after = api.store.get_job(ALICE_ID, job_id)
    assert (after.state, after.version) == (JobState.PAUSED, before.version)
    assert [t for t in all_timers(api.store) if t.job_id == job_id and t.job_version == after.version] == []
    # while a Description change that keeps it disabled is still taken
    client.update_schedule(**{**sent, "State": "DISABLED", "Description": "kept for the audit"})
    assert client.get_schedule(Name="ending")["State"] == "DISABLED"
