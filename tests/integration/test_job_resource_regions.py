"""QA30: a declared job (``Custom::PunctualJob``) or calendar of a multi-Region deployment moved
from one Region's API to another's (``ApiUrl`` changed, as docs/multi-region.md says to fail a
Region out: point clients at another Region's API). Both APIs serve the one global table, so it is
already there: the update is in place, never a second job beside it (both fired every slot, and
the old one's delete went to the lost Region's API, failed, and left it firing), nor a calendar
refused as one this resource did not make."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_harness import ApiClient
from api_harness import api as api  # the fixture
from test_job_resource_qa21 import OTHER_URL, URL, RoleApi, _event, _live, _props, _spec
from test_job_resource_qa21 import role as role  # the fixture

from punctual_cdk.provider import handler as provider


def _lost(method: str, path: str, body: Any, headers: Any, real: Any) -> tuple[int, Any]:
    raise TimeoutError("timed out")  # the Region's API gives no answer


def test_a_job_moved_to_another_regions_api_is_updated_in_place(api: ApiClient, role: RoleApi) -> None:
    job_id = provider.on_event(_event("Create", "req-1", _spec()), role)["PhysicalResourceId"]
    # When the Region it was declared at is lost (every call to its API times out)...
    role.faults.extend((method, "/", URL, _lost) for method in ("GET", "PUT", "POST", "DELETE"))
    # ...and the stack points the job at another Region's API, with a new schedule
    move = _event(
        "Update",
        "req-2",
        _spec(schedule="rate(1 hour)"),
        url=OTHER_URL,
        PhysicalResourceId=job_id,
        OldResourceProperties=_props(_spec()),
    )
    answer = provider.on_event(move, role)
    # Then the one job is updated there: same id (no replacement, so no delete of it sent to the
    # lost Region), one job live, with the new schedule
    assert answer["PhysicalResourceId"] == job_id and _live(api) == [job_id]
    status, body = role.real("GET", f"/v1/jobs/{job_id}")
    assert status == 200 and body["schedule"] == "rate(1 hour)"
    # And when the Region is back, moving the job back to its API is in place too
    role.faults.clear()
    back = _event(
        "Update",
        "req-3",
        _spec(),
        PhysicalResourceId=job_id,
        OldResourceProperties=_props(_spec(schedule="rate(1 hour)"), OTHER_URL),
    )
    assert provider.on_event(back, role)["PhysicalResourceId"] == job_id and _live(api) == [job_id]


def test_a_calendar_moved_to_another_regions_api_is_updated_in_place(api: ApiClient, role: RoleApi) -> None:
    days = {"timezone": "Europe/Berlin", "dates": ["2026-12-25"], "ranges": []}

    def calendar(kind: str, url: str, spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
        event = _event(kind, f"req-{kind}-{url[-20:]}", spec, url=url, props={"Name": "holidays"}, **extra)
        return {**event, "ResourceType": provider.CALENDAR_RESOURCE_TYPE, "LogicalResourceId": "Holidays"}

    physical = provider.on_event(calendar("Create", URL, days), role)["PhysicalResourceId"]
    role.faults.extend((method, "/", URL, _lost) for method in ("GET", "PUT", "DELETE"))  # Region lost
    new_days = {**days, "dates": ["2026-12-25", "2026-12-26"]}
    old = _props(json.dumps(days), URL, Name="holidays")
    move = calendar("Update", OTHER_URL, new_days, PhysicalResourceId=physical, OldResourceProperties=old)
    # Then it is the one calendar, its new days put in place: the same physical id, so CloudFormation
    # sends no delete of it (to the lost Region's API, of the calendar the jobs still exclude)
    assert provider.on_event(move, role)["PhysicalResourceId"] == physical
    status, body = role.real("GET", "/v1/calendars/holidays")
    assert status == 200 and body["dates"] == ["2026-12-25", "2026-12-26"]
    # And a calendar of that name at another API with other days is never taken over
    role.real("PUT", "/v1/calendars/holidays", {**days, "dates": ["2027-01-01"]})
    again = calendar("Update", URL + "x", new_days, PhysicalResourceId=physical, OldResourceProperties=old)
    role.faults.clear()
    with pytest.raises(provider.ProviderError, match="exists and this resource did not make it"):
        provider.on_event(again, role)
