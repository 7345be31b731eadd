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


def test_the_new_jobs_alert_made_by_a_clock_a_second_behind_is_its_own(api: ApiClient) -> None:
    """Review of QA32: an alert was marked the deleted job's when made before the job's creation by
    the worker's clock; a worker a second behind the API made the new job's first alert 'before' it.
    Within a minute of the creation, an alert about a slot at or after it is the job's own."""
    from datetime import timedelta

    assert api.call("PUT", "/v1/jobs/etl", job_spec(), {"If-None-Match": "*"}).status == 201
    assert api.call("DELETE", "/v1/jobs/etl").status == 204
    made = api.call("PUT", "/v1/jobs/etl", job_spec(), {"If-None-Match": "*"})
    created = datetime.fromisoformat(made.body["created_at"])

    def alert(key: str, scheduled: datetime, made_at: datetime) -> None:
        body = {"slot": key, "scheduled_at": scheduled.isoformat().replace("+00:00", "Z")}
        alert = Alert(
            tenant=ALICE_ID, job_id="etl", key_slot=key, condition=AlertCondition.FAILED,
            created_at=made_at, claimed_at=made_at, owner="w1", body=body,
        )  # fmt: skip
        assert api.store.create_alert(alert, int(time.time()) + 86_400)

    second = created.replace(microsecond=0) + timedelta(seconds=1)
    # the new job's run-now (its instant the API's), alerted by a worker a second behind
    alert(second.strftime("%Y-%m-%dT%H:%M:%SZ") + "~m0123456789ab", second, created - timedelta(seconds=1))
    # the deleted job's last slot, alerted just before the creation, and one long before it
    alert("2026-11-30T02:00:00Z", created - timedelta(seconds=5), created - timedelta(seconds=2))
    alert("2026-11-29T02:00:00Z", created - timedelta(hours=1), created - timedelta(hours=1))

    listed = api.call("GET", "/v1/jobs/etl/alerts").body
    shown = {a["key_slot"][:20]: a["job_deleted"] for a in listed["items"]}
    assert shown == {
        second.strftime("%Y-%m-%dT%H:%M:%SZ"): False,
        "2026-11-30T02:00:00Z": True,
        "2026-11-29T02:00:00Z": True,
    }, shown
