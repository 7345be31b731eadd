"""The ``punctual jobs`` and ``punctual runs`` verbs against the API handler served on loopback.

The test serves ``functions/api/handler.py`` with :class:`local.api_gateway.LocalApiServer`
on a free port (local mode: the tenant comes from ``X-Punctual-Tenant``), over moto.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from api_harness import ApiClient
from api_harness import api as api  # the fixture

from local.api_gateway import LocalApiServer
from punctual.api import wiring
from punctual.models import AttemptRecord, Execution, ExecutionStatus
from punctual.runtime import lambda_support
from punctual_cli import cli, verb_kit
from punctual_cli.client import PunctualClient
from punctual_cli.retries import RetryPolicy


@dataclass
class Served:
    url: str
    api: ApiClient
    events: list[dict[str, Any]]


@pytest.fixture
def served(api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setenv("PUNCTUAL_LOCAL_MODE", "1")
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")  # EMF lines would mix with the CLI's stdout
    # Powertools flushes its metric set (shared by every handler) to stdout at 100 values, disabled
    # or not: emptied here, each test's CLI output holds such a line only past 100 of its own
    lambda_support.metrics.clear_metrics()
    wiring.use_services(None)
    events: list[dict[str, Any]] = []

    def recording(event: dict[str, Any], context: Any) -> dict[str, Any]:
        events.append(event)
        reply: dict[str, Any] = api.handler.handler(event, context)
        return reply

    with LocalApiServer(recording) as server:
        monkeypatch.setenv("PUNCTUAL_ENDPOINT", server.url)
        monkeypatch.delenv("PUNCTUAL_TENANT", raising=False)
        yield Served(server.url, api, events)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def create(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    code, out, err = run(
        capsys,
        "jobs", "create", "--output", "json", "--name", "hourly ping", "--schedule", "rate(1 hour)",
        "--http-url", "https://hooks.example.com/ping", "--tag", "team=ops", *extra,
    )  # fmt: skip
    assert code == 0, err
    # From its first line: Powertools prints a metrics line when 100 values pile up in its metric
    # set (shared by every test's handler), POWERTOOLS_METRICS_DISABLED or not.
    job: dict[str, Any] = json.loads(out[out.index("{\n") :])
    return job


def test_create_from_flags_prints_the_job_and_its_secret_once(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "jobs", "create", "--name", "nightly", "--schedule", "cron(0 2 * * ? *)", "--tz", "Europe/Berlin",
        "--http-url", "https://hooks.example.com/n", "--payload", '{"k": 1}', "--max-attempts", "5",
    )  # fmt: skip

    assert code == 0 and err == ""
    assert out.startswith("created job ")
    assert "cron(0 2 * * ? *)  [Europe/Berlin]" in out
    assert "max_attempts=5" in out
    assert "whsec_" in out and "shown once" in out
    # After the create, the CLI lists jobs to warn about a duplicate name.
    sent = json.loads(next(e for e in served.events if e["httpMethod"] == "POST")["body"])
    assert sent["payload"] == {"k": 1} and sent["target"]["url"] == "https://hooks.example.com/n"


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_create_from_a_file(
    served: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path, suffix: str
) -> None:
    spec = {
        "name": "from file",
        "schedule": "*/15 * * * *",
        "target": {"type": "http", "url": "https://x.example.com"},
    }
    path = tmp_path / f"job{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(spec))
    else:
        path.write_text(
            "name: from file\nschedule: '*/15 * * * *'\ntarget:\n  type: http\n  url: https://x.example.com\n"
        )

    code, out, _ = run(capsys, "jobs", "create", "--file", str(path), "-o", "json")

    assert code == 0
    assert json.loads(out)["schedule"] == "*/15 * * * *" and json.loads(out)["name"] == "from file"


def test_create_paused_then_resume(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    job = create(capsys, "--paused")
    assert job["state"] == "PAUSED" and job["next_fire_at"] is None
    code, out, err = run(capsys, "jobs", "resume", job["id"], "-o", "json")
    assert code == 0, err
    assert json.loads(out)["state"] == "ENABLED" and json.loads(out)["next_fire_at"]


def test_list_get_update_pause_resume_delete(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    job = create(capsys)

    code, listing, _ = run(capsys, "jobs", "list")
    assert code == 0
    header, row = listing.splitlines()[:2]
    assert header.split() == ["ID", "NAME", "STATE", "SCHEDULE", "TZ", "NEXT", "FIRE", "VERSION"]
    assert row.startswith(job["id"]) and "ENABLED" in row and "hourly ping" in row

    code, shown, _ = run(capsys, "jobs", "get", job["id"], "--output", "json")
    assert code == 0 and json.loads(shown)["tags"] == {"team": "ops"}

    code, out, _ = run(capsys, "jobs", "update", job["id"], "--name", "renamed", "--tag", "tier=1")
    assert code == 0 and out == f"updated job {job['id']} to version 2\n"
    updated = served.api.call(
        "GET", f"/v1/jobs/{job['id']}", headers={"X-Punctual-Tenant": "default"}, user=None
    )
    assert updated.body["name"] == "renamed" and updated.body["tags"] == {"team": "ops", "tier": "1"}
    assert updated.body["schedule"] == "rate(1 hour)"  # kept from the current spec

    assert run(capsys, "jobs", "pause", job["id"])[1] == f"job {job['id']} is PAUSED (version 3)\n"
    assert run(capsys, "jobs", "list", "--state", "PAUSED", "-o", "json")[1].count(job["id"]) == 1
    assert (
        run(capsys, "jobs", "resume", job["id"], "--if-match", "3")[1]
        == f"job {job['id']} is ENABLED (version 4)\n"
    )

    code, out, _ = run(capsys, "jobs", "delete", job["id"])
    assert code == 0 and out == f"deleted job {job['id']}\n"
    code, out, err = run(capsys, "jobs", "get", job["id"])
    assert code == 1 and out == ""
    assert err == f"punctual: error: 404 Not found: job '{job['id']}' not found\n"


def test_list_all_follows_every_page(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    ids = sorted(create(capsys)["id"] for _ in range(3))

    code, out, _ = run(capsys, "jobs", "list", "--limit", "1", "-o", "json")
    page = json.loads(out)
    code_all, out_all, _ = run(capsys, "jobs", "list", "--all", "-o", "json")

    assert code == code_all == 0
    assert len(page["items"]) == 1 and page["next_token"]
    assert [j["id"] for j in json.loads(out_all)["items"]] == ids


def test_update_with_a_stale_version_fails_with_412(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    job = create(capsys)
    run(capsys, "jobs", "pause", job["id"])

    code, out, err = run(capsys, "jobs", "update", job["id"], "--name", "late", "--if-match", "1")

    assert code == 1 and out == ""
    assert err.startswith("punctual: error: 412 Precondition failed: ")
    assert len(err.splitlines()) == 1


def test_trigger_then_runs_list_and_get(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    job = create(capsys)
    code, out, _ = run(capsys, "jobs", "trigger", job["id"], "--idempotency-key", "once", "-o", "json")
    slot = json.loads(out)["slot"]
    again = json.loads(
        run(capsys, "jobs", "trigger", job["id"], "--idempotency-key", "once", "-o", "json")[1]
    )
    assert code == 0 and again["slot"] == slot
    # Given: the worker recorded the run (two attempts)
    started = datetime.now(UTC)  # after the job was created: its own run
    served.api.store.save_execution(
        Execution(
            job_id=job["id"],
            tenant="default",
            slot=slot,
            scheduled_at=started,
            attempt=2,
            status=ExecutionStatus.SUCCEEDED,
            started_at=started,
            finished_at=started,
            attempts=[
                AttemptRecord(attempt=1, status=ExecutionStatus.FAILED, error="HTTP 502", started_at=started),
                AttemptRecord(attempt=2, status=ExecutionStatus.SUCCEEDED, started_at=started),
            ],
        ),
        None,
        ttl_epoch_s=2_000_000_000,
    )

    code, listing, _ = run(capsys, "runs", "list", job["id"])
    code_get, detail, _ = run(capsys, "runs", "get", job["id"], slot)

    assert code == code_get == 0
    assert listing.splitlines()[1].split()[:3] == [slot, "SUCCEEDED", "2"]
    assert f"slot       {slot}" in detail and "SUCCEEDED (attempt 2)" in detail
    attempt_lines = [line.split()[:2] for line in detail.splitlines() if line[:1].isdigit()]
    assert attempt_lines == [["1", "FAILED"], ["2", "SUCCEEDED"]]
    assert "HTTP 502" in detail


def test_a_missed_slot_shows_in_history_with_its_reason(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a job whose slot the poller recorded as missed (the catch-up policy dropped it)
    code, out, _ = run(capsys, "jobs", "create", "--schedule", "rate(1 hour)", "--http-url", "https://x.example.com", "-o", "json")  # fmt: skip
    job = json.loads(out)
    slot = "2026-11-30T09:00:00Z"
    missed = Execution(
        job_id=job["id"],
        tenant="default",
        slot=slot,
        scheduled_at=datetime(2026, 11, 30, 9, tzinfo=UTC),
        status=ExecutionStatus.MISSED,
        error="catch-up policy none: missed slots are not run",
    )
    served.api.store.save_execution(missed, None, ttl_epoch_s=2_000_000_000)
    # When the user lists the job's runs, all of them and only the missed ones
    code_all, listing, _ = run(capsys, "runs", "list", job["id"])
    code_missed, only, _ = run(capsys, "runs", "list", job["id"], "--status", "MISSED", "-o", "json")
    # Then the slot is there, marked MISSED, with the reason
    assert code == code_all == code_missed == 0
    assert listing.splitlines()[1].split()[:2] == [slot, "MISSED"]
    assert "catch-up policy none" in listing
    assert [(r["slot"], r["status"]) for r in json.loads(only)["items"]] == [(slot, "MISSED")]


def test_a_missed_range_shows_how_many_slots_it_stands_for(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA23: a long run of missed slots is one range record (``last_slot``, ``slot_count``); ``runs
    list`` and ``runs get`` showed it as one missed slot, so a pause that cost 179 runs read as one."""
    code, out, _ = run(capsys, "jobs", "create", "--schedule", "rate(20 seconds)", "--http-url", "https://x.example.com", "-o", "json")  # fmt: skip
    job = json.loads(out)
    first, last = "2026-11-30T10:01:20Z", "2026-11-30T11:00:40Z"
    missed = Execution(
        job_id=job["id"],
        tenant="default",
        slot=first,
        scheduled_at=datetime(2026, 11, 30, 10, 1, 20, tzinfo=UTC),
        status=ExecutionStatus.MISSED,
        error="job paused: older than the catch-up window",
        last_slot=last,
        slot_count=179,
    )
    served.api.store.save_execution(missed, None, ttl_epoch_s=2_000_000_000)

    code_list, listing, _ = run(capsys, "runs", "list", job["id"])
    code_get, detail, _ = run(capsys, "runs", "get", job["id"], first)
    # the SLOT column copied as it is (QA24: "... is not a slot key", exit 2)
    code_copied, copied, _ = run(capsys, "runs", "get", job["id"], listing.splitlines()[1].split()[0])

    assert code == code_list == code_get == code_copied == 0
    row = listing.splitlines()[1]
    assert row.split()[:2] == [f"{first}..{last}", "MISSED"]
    assert "179 slots" in row
    assert f"slots      179, {first} to {last}" in detail
    assert copied == detail
    assert "older than the catch-up window" in detail


def minute_job_with_missed_range(
    served: Served, capsys: pytest.CaptureFixture[str], first: str, last: str, count: int
) -> dict[str, Any]:
    """A ``cron(* * * * ? *)`` job made with the CLI whose slots ``first`` to ``last`` are one MISSED
    range record of ``count`` slots (a pause resumed with catch-up none)."""
    code, out, _ = run(capsys, "jobs", "create", "--schedule", "cron(* * * * ? *)", "--http-url", "https://x.example.com", "-o", "json")  # fmt: skip
    assert code == 0
    job: dict[str, Any] = json.loads(out)
    missed = Execution(
        job_id=job["id"],
        tenant="default",
        slot=first,
        scheduled_at=datetime.fromisoformat(first),
        status=ExecutionStatus.MISSED,
        error="job paused: catch-up policy none",
        last_slot=last,
        slot_count=count,
    )
    served.api.store.save_execution(missed, None, ttl_epoch_s=2_000_000_000)
    return job


def test_a_slot_inside_a_missed_range_answers_the_range(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA23: ``GET /v1/jobs/{id}/executions/{slot}`` (and ``runs get``) for a slot inside a MISSED
    range record answered 404 "no execution" though the history counts it MISSED: it answers the
    range's record as that slot's, ``range_slot`` naming the range's first slot. A slot past the
    range, or off the schedule's grid, is still 404; one with a record of its own answers it."""
    first, inner, last = "2026-11-30T10:01:00Z", "2026-11-30T10:30:00Z", "2026-11-30T11:00:00Z"
    job = minute_job_with_missed_range(served, capsys, first, last, 60)
    backfilled = Execution(
        job_id=job["id"],
        tenant="default",
        slot="2026-11-30T10:20:00Z",
        scheduled_at=datetime(2026, 11, 30, 10, 20, tzinfo=UTC),
        status=ExecutionStatus.SUCCEEDED,
        backfill="b1",
    )
    served.api.store.save_execution(backfilled, None, ttl_epoch_s=2_000_000_000)
    api = served.api

    reply = api.call("GET", f"/v1/jobs/{job['id']}/executions/{quote(inner)}")
    code_get, detail, _ = run(capsys, "runs", "get", job["id"], inner)

    assert reply.status == 200
    body = reply.body
    assert (body["slot"], body["status"], body["scheduled_at"]) == (inner, "MISSED", inner)
    assert (body["range_slot"], body["last_slot"], body["slot_count"]) == (first, last, 60)
    assert body["error"] == "job paused: catch-up policy none"
    assert code_get == 0
    assert f"slot       {inner}" in detail and f"slots      60, {first} to {last}" in detail
    own = api.call("GET", f"/v1/jobs/{job['id']}/executions/{quote(backfilled.slot)}").body
    assert (own["status"], own["range_slot"]) == ("SUCCEEDED", None)
    first_body = api.call("GET", f"/v1/jobs/{job['id']}/executions/{quote(first)}").body
    assert (first_body["slot"], first_body["range_slot"]) == (first, None)
    # (a key with a mark other than a run-now's names no slot either: QA28, it answered the range)
    for outside in ("2026-11-30T11:01:00Z", "2026-11-30T10:30:30Z", "2026-11-30T10:00:00Z", f"{inner}~abc"):
        assert api.call("GET", f"/v1/jobs/{job['id']}/executions/{quote(outside)}").status == 404


@pytest.mark.parametrize(
    "impossible", ["2026-11-30T23:59:60Z", "2026-11-30T24:00:00Z", "2026-11-31T00:00:00Z"]
)
def test_a_slot_key_of_no_instant_inside_a_missed_range_is_not_found_not_a_500(
    served: Served, capsys: pytest.CaptureFixture[str], impossible: str
) -> None:
    """QA28: a slot key of the right shape naming no instant (a leap second, hour 24, November 31st)
    that sorts inside a MISSED range record was read as one of the range's slots: the API answered
    500 (a ValueError out of parsing it) and ``runs get`` said the request could not be completed.
    It is no slot: the API answers 404, the CLI refuses it as bad input (exit 2, one line)."""
    job = minute_job_with_missed_range(served, capsys, "2026-11-30T23:01:00Z", "2026-12-01T01:00:00Z", 120)

    reply = served.api.call("GET", f"/v1/jobs/{job['id']}/executions/{quote(impossible)}")
    code_get, _, err = run(capsys, "runs", "get", job["id"], impossible)

    assert reply.status == 404 and impossible in reply.problem["detail"]
    assert code_get == 2
    assert err.strip().splitlines() == [
        f"punctual: error: {impossible!r} is not a slot key: its UTC instant, as 2026-11-30T02:00:00Z"
    ]


def test_runs_list_fills_a_filtered_page_the_api_answered_short(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA22: a status filter's page examines a bounded number of records, so the API may answer
    it short, even empty, with a next_token; ``runs list --status`` follows it to fill the page
    (it showed no runs and a --next-token for a failure under many successes)."""
    from punctual.store.dynamo import executions

    monkeypatch.setattr(executions, "LIST_SCAN_BUDGET", 100)  # a query's reply: stands for 2,000
    code, out, _ = run(capsys, "jobs", "create", "--schedule", "rate(1 hour)", "--http-url", "https://x.example.com", "-o", "json")  # fmt: skip
    job = json.loads(out)
    for minute in range(150):  # the oldest failed, then successes
        record = Execution(
            job_id=job["id"],
            tenant="default",
            slot=f"2026-11-30T{minute // 60:02d}:{minute % 60:02d}:00Z",
            scheduled_at=datetime(2026, 11, 30, minute // 60, minute % 60, tzinfo=UTC),
            status=ExecutionStatus.FAILED if minute == 0 else ExecutionStatus.SUCCEEDED,
        )
        served.api.store.save_execution(record, None, ttl_epoch_s=2_000_000_000)

    code, listed, _ = run(capsys, "runs", "list", job["id"], "--status", "FAILED", "-o", "json")

    page = json.loads(listed)
    assert code == 0 and [r["slot"] for r in page["items"]] == ["2026-11-30T00:00:00Z"]
    assert page["next_token"] is None


def test_validation_errors_exit_2_with_the_fields(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "jobs", "create", "--schedule", "cron(0 25 * * ? *)", "--http-url", "https://x.example.com",
    )  # fmt: skip

    assert code == 2 and out == ""
    first, second = err.splitlines()
    assert first.startswith("punctual: error: 422 Invalid request")
    assert second.startswith("  schedule: ")


def test_usage_errors_exit_2(served: Served, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")

    assert run(capsys, "jobs", "create", "--name", "no schedule")[0] == 2
    assert run(capsys, "jobs", "create", "--file", str(bad))[0] == 2
    assert run(capsys, "jobs", "list", "--limit", "500")[0] == 2
    code, _, err = run(capsys, "runs")
    assert code == 2 and err.startswith("punctual: error:")
    assert served.events == []  # nothing reached the API


def test_tenant_flag_separates_tenants_in_local_mode(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    job = create(capsys, "--tenant", "team-a")

    assert run(capsys, "jobs", "get", job["id"], "--tenant", "team-a")[0] == 0
    assert run(capsys, "jobs", "get", job["id"], "--tenant", "team-b")[0] == 1
    assert run(capsys, "jobs", "get", job["id"])[0] == 1  # tenant "default"


def test_endpoint_flag_and_unreachable_api(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys, "jobs", "list", "--endpoint", served.url)[0] == 0
    waits: list[float] = []
    policy = RetryPolicy(sleep=waits.append, clock=lambda: sum(waits))
    monkeypatch.setattr(verb_kit, "PunctualClient", functools.partial(PunctualClient, retry=policy))

    code, _, err = run(capsys, "jobs", "list", "--endpoint", "http://127.0.0.1:9")

    assert code == 1 and len(waits) == 3  # a read is tried again before the command gives up
    assert err.startswith("punctual: error: cannot reach http://127.0.0.1:9")


def test_requests_are_signed_with_sigv4_for_api_gateway(served: Served) -> None:
    client = PunctualClient(served.url, sign=True, region="eu-west-1")

    client.list_jobs(limit=1)

    headers = {k.lower(): v for k, v in served.events[-1]["headers"].items()}
    assert headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=")
    assert "/eu-west-1/execute-api/aws4_request" in headers["authorization"]
    assert "x-amz-date" in headers


def test_execute_api_hosts_are_signed_by_default() -> None:
    cloud = PunctualClient("https://a1b2c3d4e5.execute-api.eu-central-1.amazonaws.com/prod/")
    local = PunctualClient("http://127.0.0.1:8080")

    assert (cloud.sign, cloud.region, cloud.endpoint) == (
        True,
        "eu-central-1",
        "https://a1b2c3d4e5.execute-api.eu-central-1.amazonaws.com/prod",
    )
    assert local.sign is False


def test_jobs_upcoming_lists_the_next_slots(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    job = create(capsys)
    code, out, _ = run(capsys, "jobs", "upcoming", job["id"], "--count", "3", "-o", "json")
    assert code == 0
    reply = json.loads(out)
    assert len(reply["slots"]) == 3 and reply["state"] == "ENABLED"
    code, text, _ = run(capsys, "jobs", "upcoming", job["id"], "--count", "3")
    assert code == 0 and text.splitlines() == [s["slot"] for s in reply["slots"]]
    code, _, err = run(capsys, "jobs", "upcoming", job["id"], "--count", "0")
    assert code == 2 and err.count("\n") == 1 and "between 1 and 100" in err


def test_runs_list_all_follows_every_page(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a job with 250 records (three pages of the most a page holds)
    code, out, _ = run(capsys, "jobs", "create", "--schedule", "rate(1 hour)", "--http-url", "https://x.example.com", "-o", "json")  # fmt: skip
    job = json.loads(out)
    for minute in range(250):
        record = Execution(
            job_id=job["id"],
            tenant="default",
            slot=f"2026-11-30T{minute // 60:02d}:{minute % 60:02d}:00Z",
            scheduled_at=datetime(2026, 11, 30, minute // 60, minute % 60, tzinfo=UTC),
            status=ExecutionStatus.SUCCEEDED,
        )
        served.api.store.save_execution(record, None, ttl_epoch_s=2_000_000_000)
    # When the history is listed with --all, Then every record is there, newest first, no token
    code, listed, _ = run(capsys, "runs", "list", job["id"], "--all", "-o", "json")
    page = json.loads(listed)
    slots = [r["slot"] for r in page["items"]]
    assert code == 0 and len(slots) == 250 and slots == sorted(slots, reverse=True)
    assert page["next_token"] is None and page["job_deleted"] is False
    # And a deleted job's history listed whole says so, as each page does (review of QA32)
    assert run(capsys, "jobs", "delete", job["id"])[0] == 0
    code, listed, _ = run(capsys, "runs", "list", job["id"], "--all", "-o", "json")
    assert code == 0 and json.loads(listed)["job_deleted"] is True and len(json.loads(listed)["items"]) == 250
    # And --all with --next-token is refused as a usage error (the token would be ignored)
    code, _, err = run(capsys, "runs", "list", job["id"], "--all", "--next-token", "abc")
    assert code == 2 and "not allowed with argument" in err
