"""A deleted job's alerts through the API (QA28): kept until they expire, and marked
``job_deleted`` as its executions are, also once a job is created again at its id (they were listed
as the new job's own)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from api_harness import ALICE_ID, ApiClient, job_spec
from api_harness import api as api  # the fixture

from punctual.models import Alert, AlertCondition


def _alert(api: ApiClient, job_id: str, slot: str) -> None:
    now = datetime.now(UTC)
    alert = Alert(
        tenant=ALICE_ID, job_id=job_id, key_slot=slot, condition=AlertCondition.FAILED,
        created_at=now, claimed_at=now, owner="w1", body={"slot": slot, "summary": f"{slot} failed"},
    )  # fmt: skip
    assert api.store.create_alert(alert, int(time.time()) + 86_400)


def test_a_deleted_jobs_alerts_are_marked_as_its_not_the_next_jobs_at_its_id(api: ApiClient) -> None:
    # Given a job whose slot alerted, deleted
    assert api.call("PUT", "/v1/jobs/etl", job_spec(), {"If-None-Match": "*"}).status == 201
    _alert(api, "etl", "2026-11-30T02:00:00Z")
    assert api.call("DELETE", "/v1/jobs/etl").status == 204
    # Then its alerts stay readable, marked
    gone = api.call("GET", "/v1/jobs/etl/alerts")
    assert gone.status == 200 and gone.body["job_deleted"] is True
    assert [a["job_deleted"] for a in gone.body["items"]] == [True]
    # When a job is created again at its id, and a slot of it alerts
    time.sleep(0.01)  # (the instants are the system clock's: milliseconds apart at least)
    assert api.call("PUT", "/v1/jobs/etl", job_spec(), {"If-None-Match": "*"}).status == 201
    time.sleep(0.01)
    _alert(api, "etl", "2026-12-01T02:00:00Z")
    # Then the listing is the new job's, and says which alert is the deleted job's
    listed = api.call("GET", "/v1/jobs/etl/alerts")
    assert listed.status == 200 and listed.body["job_deleted"] is False
    shown = [(a["key_slot"], a["job_deleted"]) for a in listed.body["items"]]
    assert shown == [("2026-12-01T02:00:00Z", False), ("2026-11-30T02:00:00Z", True)]
