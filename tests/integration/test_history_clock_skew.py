"""A job's own run is never shown as a deleted job's for a clock a little behind (QA32).

The API marks a record ``job_deleted`` when it began before the job at its id was created (a job
deleted and created again under its name), and the console leaves such records out. The creation
instant is the API's clock and a run's start the worker's: a run-now started just after the
creation by a worker whose clock was a second behind showed as the deleted job's, and the console
hid the job's first run. A record released for the job's current spec is its own unless it began
long before the creation (a minute: no clock is that far off)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from api_harness import ALICE_ID, ApiClient, job_spec
from api_harness import api as api  # the fixture
from console_html import parse

from factories import job
from punctual.console.render import LocalLinks, render_console
from punctual.console.view import ConsoleQuery, build_view
from punctual.models import Execution, ExecutionStatus
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key

HTTP = {"type": "http", "url": "https://hooks.example.com/run"}


def _ran(job_id: str, tenant: str, started: datetime, version: int, status: ExecutionStatus) -> Execution:
    slot = started.replace(microsecond=0)
    return Execution(
        job_id=job_id, tenant=tenant, slot=slot_key(slot), scheduled_at=slot, status=status,
        started_at=started, finished_at=started + timedelta(seconds=1), job_version=version,
    )  # fmt: skip


def test_the_new_jobs_run_begun_by_a_clock_a_second_behind_is_its_own(api: ApiClient) -> None:
    headers = {"If-None-Match": "*"}
    assert api.call("PUT", "/v1/jobs/reuse", job_spec(target=HTTP), headers=headers).status == 201
    old = api.call("GET", "/v1/jobs/reuse").body
    assert api.call("DELETE", "/v1/jobs/reuse").status == 204
    made = api.call("PUT", "/v1/jobs/reuse", job_spec(target=HTTP), headers=headers)
    assert made.status == 201
    created = datetime.fromisoformat(made.body["created_at"])
    # the deleted job's last run, begun 2 s before the new job (its version), and the new job's
    # run-now begun by a worker whose clock is a second behind the API's
    ended = _ran("reuse", ALICE_ID, created - timedelta(seconds=2), old["version"], ExecutionStatus.FAILED)
    own = _ran(
        "reuse", ALICE_ID, created - timedelta(seconds=1), made.body["version"], ExecutionStatus.SUCCEEDED
    )
    own = own.model_copy(update={"slot": own.slot + "~m0123456789ab"})
    for record in (ended, own):
        api.store.save_execution(record, None, ttl_epoch_s=2_000_000_000)

    listed = api.call("GET", "/v1/jobs/reuse/executions").body
    read = api.call("GET", f"/v1/jobs/reuse/executions/{quote(own.slot, safe='')}").body

    assert {item["slot"]: item["job_deleted"] for item in listed["items"]} == {
        own.slot: False,
        ended.slot: True,
    }
    assert read["job_deleted"] is False


def test_the_console_shows_the_new_jobs_run_begun_by_a_clock_a_second_behind() -> None:
    store = MemoryStore()
    t0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    made = job("report", now=t0, version=3)  # created again: past the deleted job's two versions
    store.create_job(made, None, 100)
    store.save_execution(
        _ran("report", "default", t0 - timedelta(seconds=1), 3, ExecutionStatus.FAILED), None, 2_000_000_000
    )

    shown = parse(
        render_console(build_view(store, ConsoleQuery("default"), t0 + timedelta(minutes=1)), LocalLinks())
    )

    assert shown.tables["pc-jobs"].column("Failures 24 h") == ["1"]  # type: ignore[attr-defined]


def test_the_jobs_run_begun_by_a_clock_behind_stays_its_own_after_an_edit(api: ApiClient) -> None:
    """The run's version is the creation's, the job's spec a later one (an edit since): the record
    is still the job's own. Review: the rule compared the record's version with the job's current
    spec, so any replace made a first run begun by a clock a second behind the deleted job's (and
    the console hid it), even of a job never deleted."""
    headers = {"If-None-Match": "*"}
    for job_id in ("fresh", "again"):
        assert api.call("PUT", f"/v1/jobs/{job_id}", job_spec(target=HTTP), headers=headers).status == 201
    old = api.call("GET", "/v1/jobs/again").body
    assert api.call("DELETE", "/v1/jobs/again").status == 204
    assert api.call("PUT", "/v1/jobs/again", job_spec(target=HTTP), headers=headers).status == 201
    for job_id in ("fresh", "again"):
        made = api.call("GET", f"/v1/jobs/{job_id}").body
        created = datetime.fromisoformat(made["created_at"])
        edit = {"If-Match": f'"{made["version"]}"'}
        edited = api.call(
            "PUT", f"/v1/jobs/{job_id}", job_spec(target=HTTP, schedule="cron(30 3 * * ? *)"), headers=edit
        )
        assert edited.status == 200 and edited.body["version"] == made["version"] + 1
        own = _ran(
            job_id, ALICE_ID, created - timedelta(seconds=1), made["version"], ExecutionStatus.SUCCEEDED
        )
        api.store.save_execution(own, None, ttl_epoch_s=2_000_000_000)

        listed = api.call("GET", f"/v1/jobs/{job_id}/executions").body
        read = api.call("GET", f"/v1/jobs/{job_id}/executions/{quote(own.slot, safe='')}").body

        assert [(item["slot"], item["job_deleted"]) for item in listed["items"]] == [(own.slot, False)]
        assert read["job_deleted"] is False
    # the deleted job's run begun as late is still the deleted job's: its version is before the new job's
    ended = _ran("again", ALICE_ID, created - timedelta(seconds=3), old["version"], ExecutionStatus.FAILED)
    api.store.save_execution(ended, None, ttl_epoch_s=2_000_000_000)
    read = api.call("GET", f"/v1/jobs/again/executions/{quote(ended.slot, safe='')}").body
    assert read["job_deleted"] is True


def test_the_console_shows_the_jobs_run_begun_by_a_clock_behind_after_an_edit() -> None:
    store = MemoryStore()
    t0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    made = job("report", now=t0, version=1)
    store.create_job(made, None, 100)
    edited = made.model_copy(update={"version": 2, "spec_version": 2})
    store.replace_job(edited, 1)
    store.save_execution(
        _ran("report", "default", t0 - timedelta(seconds=1), 1, ExecutionStatus.FAILED), None, 2_000_000_000
    )

    shown = parse(
        render_console(build_view(store, ConsoleQuery("default"), t0 + timedelta(minutes=1)), LocalLinks())
    )

    assert shown.tables["pc-jobs"].column("Failures 24 h") == ["1"]  # type: ignore[attr-defined]
