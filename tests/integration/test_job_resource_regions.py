"""QA30: a declared job (``Custom::PunctualJob``) of a multi-Region deployment moved from one
Region's API to another's (``ApiUrl`` changed, as docs/multi-region.md says to fail a Region out:
point clients at another Region's API). Both APIs serve the one global table, so the job is
already there: the update is in place, never a second job beside it (both fired every slot, and
the old one's delete went to the lost Region's API, failed, and left it firing)."""

from __future__ import annotations

from typing import Any

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
