"""QA22: :class:`PunctualClient` follows every listing's ``next_token`` (jobs had a helper; a job's
executions and the calendars had none), within a limit. Against the API handler served on loopback
(the fixtures of test_cli_api.py).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from api_harness import api as api  # the fixture
from test_cli_api import Served, create, run
from test_cli_api import served as served  # the fixture

from punctual.models import Execution, ExecutionStatus
from punctual_cli import client as client_module
from punctual_cli.client import ClientInputError, PunctualClient


def _gets(served: Served, path: str) -> list[str]:
    """The next_token each GET of ``path`` sent ('' for none)."""
    seen = [e for e in served.events if e["httpMethod"] == "GET" and e["path"] == path]
    return [(e.get("queryStringParameters") or {}).get("next_token", "") for e in seen]


def test_executions_are_followed_page_by_page_within_a_limit(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "PAGE_SIZE", 2)
    job = create(capsys, "--no-name-check")
    slots = [f"2026-11-30T0{hour}:00:00Z" for hour in range(5)]
    for hour, slot in enumerate(slots):
        status = ExecutionStatus.FAILED if hour % 2 else ExecutionStatus.SUCCEEDED
        record = Execution(
            job_id=job["id"],
            tenant="default",
            slot=slot,
            scheduled_at=datetime(2026, 11, 30, hour, tzinfo=UTC),
            status=status,
        )
        served.api.store.save_execution(record, None, ttl_epoch_s=2_000_000_000)
    client = PunctualClient(served.url)
    path = f"/v1/jobs/{job['id']}/executions"

    assert [r["slot"] for r in client.iter_executions(job["id"])] == slots[::-1]  # newest first
    assert len(_gets(served, path)) == 3 and all(_gets(served, path)[1:])  # 2 + 2 + 1, by token
    assert [r["slot"] for r in client.iter_executions(job["id"], "FAILED")] == [slots[3], slots[1]]
    served.events.clear()
    assert [r["slot"] for r in client.iter_executions(job["id"], limit=3)] == slots[:1:-1]
    assert len(_gets(served, path)) == 2  # no page read past the limit
    assert list(client.iter_executions(job["id"], limit=0)) == []
    with pytest.raises(ClientInputError, match="limit"):
        list(client.iter_executions(job["id"], limit=-1))


def test_calendars_and_jobs_are_followed_within_a_limit(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "PAGE_SIZE", 2)
    names = [f"cal-{n}" for n in range(5)]
    for name in names:
        assert run(capsys, "calendars", "put", name, "--date", "2026-12-24")[0] == 0
    client = PunctualClient(served.url)

    assert sorted(c["name"] for c in client.iter_calendars()) == names
    assert len(_gets(served, "/v1/calendars")) == 3
    assert len(list(client.iter_calendars(limit=3))) == 3
    code, out, err = run(capsys, "calendars", "list", "--all", "-o", "json")  # the command: every page
    assert code == 0 and sorted(c["name"] for c in json.loads(out)["items"]) == names, err
    made = [create(capsys, "--no-name-check")["id"] for _ in range(3)]
    assert sorted(j["id"] for j in client.iter_jobs()) == sorted(made)
    assert len(list(client.iter_jobs(limit=1))) == 1
