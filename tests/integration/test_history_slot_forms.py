"""A slot named by its instant in another RFC 3339 form (QA32): ``GET .../executions/{slot}`` and
``punctual runs get`` take ``2026-11-30T03:00:00+01:00``, JavaScript's ``...00.000Z`` or Python's
``+00:00`` for the slot ``2026-11-30T02:00:00Z``; before, the slot that ran answered 404 "no
execution" (the API) or "is not a slot key" (the CLI)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from urllib.parse import quote

import pytest
from api_harness import ALICE_ID, ApiClient
from api_harness import api as api  # the fixture
from test_cli_api import Served, run
from test_cli_api import served as served  # the fixture

from punctual.models import Execution, ExecutionStatus

SLOT = "2026-11-30T02:00:00Z"
MANUAL = "2026-11-30T02:00:07Z~m0123456789ab"


def _ran(api: ApiClient, job_id: str, slot: str, tenant: str = ALICE_ID) -> None:
    at = datetime(2026, 11, 30, 2, tzinfo=UTC)
    record = Execution(
        job_id=job_id, tenant=tenant, slot=slot, scheduled_at=at, status=ExecutionStatus.SUCCEEDED,
        started_at=at, finished_at=at,
    )  # fmt: skip
    api.store.save_execution(record, None, ttl_epoch_s=2_000_000_000)


@pytest.mark.parametrize(
    ("asked", "slot"),
    [
        ("2026-11-30T03:00:00+01:00", SLOT),
        ("2026-11-29T21:00:00-05:00", SLOT),
        ("2026-11-30T02:00:00.000Z", SLOT),
        ("2026-11-30T02:00:00+00:00", SLOT),
        ("2026-11-30t02:00:00z", SLOT),
        ("2026-11-30T02:00:07.000+00:00~m0123456789ab", MANUAL),
    ],
)
def test_a_slot_is_read_by_its_instant_in_any_rfc3339_form(api: ApiClient, asked: str, slot: str) -> None:
    job_id = api.create()["id"]
    _ran(api, job_id, slot)

    reply = api.call("GET", f"/v1/jobs/{job_id}/executions/{quote(asked, safe='')}")

    assert reply.status == 200, reply
    assert reply.body["slot"] == slot and reply.body["status"] == "SUCCEEDED"


@pytest.mark.parametrize("asked", ["2026-11-30T02:00:00.500Z", "2026-11-30T02:00:00", "2026-11-31T02:00:00Z"])
def test_what_names_no_slot_is_a_404_saying_what_a_slot_key_is(api: ApiClient, asked: str) -> None:
    job_id = api.create()["id"]
    _ran(api, job_id, SLOT)

    reply = api.call("GET", f"/v1/jobs/{job_id}/executions/{quote(asked, safe='')}")

    assert reply.status == 404
    assert "is not a slot key" in reply.problem["detail"]


def test_runs_get_takes_the_slots_instant_with_an_offset(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "jobs", "create", "--schedule", "rate(1 hour)", "--http-url", "https://x.example.com", "-o", "json")  # fmt: skip
    job_id = json.loads(out)["id"]
    _ran(served.api, job_id, SLOT, tenant="default")

    code_get, detail, err = run(capsys, "runs", "get", job_id, "2026-11-30T03:00:00+01:00", "-o", "json")

    assert code == code_get == 0, err
    assert json.loads(detail)["slot"] == SLOT


def test_a_run_now_slot_not_taken_yet_says_its_record_comes(api: ApiClient) -> None:
    """QA32: the 202 of POST /trigger names the slot (its Location too), whose GET answers 404 until a
    worker takes it; the 404 said only "no execution", as for a slot that will never have one."""
    job_id = api.create()["id"]
    slot = api.call("POST", f"/v1/jobs/{job_id}/trigger").body["slot"]

    reply = api.call("GET", f"/v1/jobs/{job_id}/executions/{quote(slot, safe='')}")
    plain = api.call("GET", f"/v1/jobs/{job_id}/executions/{quote(SLOT, safe='')}")

    assert reply.status == plain.status == 404
    assert "once a worker takes it" in reply.problem["detail"]
    assert "worker" not in plain.problem["detail"]
