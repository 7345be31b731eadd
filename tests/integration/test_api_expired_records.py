"""Records past their TTL through the API (QA22): DynamoDB deletes an expired item lazily, up to
~48 hours after its expires_at, and reads return it until then; the docs promise history "until it
expires". The API's reads of executions and alerts leave out what expired."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from urllib.parse import quote

from api_harness import ALICE_ID, ApiClient
from api_harness import api as api  # the fixture

from punctual.models import Alert, AlertCondition, Execution, ExecutionStatus

SLOTS = ("2026-11-01T09:00:00Z", "2026-11-02T09:00:00Z")  # the first expired an hour ago


def _record(api: ApiClient, job_id: str, slot: str, ttl: int) -> None:
    execution = Execution(
        job_id=job_id,
        tenant=ALICE_ID,
        slot=slot,
        scheduled_at=datetime.fromisoformat(slot),
        status=ExecutionStatus.FAILED,
    )
    api.store.save_execution(execution, None, ttl_epoch_s=ttl)


def test_expired_executions_and_alerts_are_not_listed_or_read(api: ApiClient) -> None:
    job_id = api.create()["id"]
    now = int(time.time())
    _record(api, job_id, SLOTS[0], now - 3600)
    _record(api, job_id, SLOTS[1], now + 86_400)
    for slot, ttl in zip(SLOTS, (now - 3600, now + 86_400), strict=True):
        at = datetime.fromisoformat(slot) + timedelta(seconds=5)
        alert = Alert(
            tenant=ALICE_ID, job_id=job_id, key_slot=slot, condition=AlertCondition.FAILED,
            created_at=at, claimed_at=at, owner="w1",
        )  # fmt: skip
        assert api.store.create_alert(alert, ttl)

    listed = api.call("GET", f"/v1/jobs/{job_id}/executions")
    expired = api.call("GET", f"/v1/jobs/{job_id}/executions/{quote(SLOTS[0], safe='')}")
    live = api.call("GET", f"/v1/jobs/{job_id}/executions/{quote(SLOTS[1], safe='')}")
    alerts = api.call("GET", f"/v1/jobs/{job_id}/alerts")

    assert [e["slot"] for e in listed.body["items"]] == [SLOTS[1]]
    assert expired.status == 404 and live.status == 200
    assert [a["key_slot"] for a in alerts.body["items"]] == [SLOTS[1]]


def test_a_deleted_job_whose_history_all_expired_is_not_found(api: ApiClient) -> None:
    job_id = api.create()["id"]
    _record(api, job_id, SLOTS[0], int(time.time()) - 3600)
    assert api.call("DELETE", f"/v1/jobs/{job_id}").status == 204

    assert api.call("GET", f"/v1/jobs/{job_id}/executions").status == 404
