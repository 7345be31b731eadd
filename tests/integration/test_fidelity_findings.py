"""Issue 28, findings 1 and 8, on a store as stale and as contentious as DynamoDB.

Each scenario runs the real JobService, poller release and API against the in-memory store and
against DynamoDB on moto, both with the simulation of DynamoDB's eventually consistent reads
(answered one second behind here) or of its transaction conflicts (one scripted conflict, or
more). Before the fixes each of them ended a job's chain, lost a link or a count, or answered
500; moto alone (never behind, never conflicting) could not show any of them.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from api_harness import ApiClient, LambdaContext, job_spec, rest_event
from api_harness import api as api  # the fixture

from factories import spec
from fidelity_harness import SHORT, Scene, scene
from punctual.models import Execution, ExecutionStatus, JobState
from punctual.store.base import TransactionConflictError
from punctual.store.conflicts import CONFLICT_RETRY

KINDS = ["memory", "dynamo"]
TENANT = "default"


def fired(s: Scene, job_id: str) -> list[tuple[str, int]]:
    """(slot, job version) of every message sent for ``job_id``, in order."""
    return [
        (stored.message.slot, stored.message.job_version)
        for stored in s.rig.queues.queues.get(SHORT, [])
        if stored.message.job_id == job_id
    ]


def poll_at(s: Scene, instant: datetime) -> None:
    s.clock.set(instant)
    s.rig.poll()


# ---------------------------------------------------------------- finding 1: stale job reads


@pytest.mark.parametrize("kind", KINDS)
def test_a_job_registered_under_a_second_before_its_only_slot_fires(kind: str, t0: datetime) -> None:
    with scene(kind, t0, stale_read_s=1.0) as s:
        # Given a one-time job registered 0.6 s before its instant
        s.clock.set(t0 + timedelta(milliseconds=400))
        job, _ = s.service.register(TENANT, spec("at(2026-11-30T10:00:01)"))
        # When the poller releases it at its instant, its job read a second behind (not there yet)
        poll_at(s, t0 + timedelta(seconds=1))
        # Then the slot is sent (it used to be dropped as stale: the job never fired)
        assert fired(s, job.id) == [("2026-11-30T10:00:01Z", 1)]
        # And once a worker took it the job is complete (its message marks the chain's end)
        s.rig.work_until_idle(s.rig.worker())
        done = s.store.get_job(TENANT, job.id)
        assert done is not None and done.state is JobState.COMPLETED


@pytest.mark.parametrize("kind", KINDS)
def test_a_rate_job_whose_first_slot_is_under_a_second_away_keeps_firing(kind: str, t0: datetime) -> None:
    with scene(kind, t0, stale_read_s=1.0) as s:
        s.clock.set(t0 + timedelta(milliseconds=300))
        job, _ = s.service.register(TENANT, spec("rate(2 seconds)", start_at="2026-11-30T10:00:01Z"))
        for second in (1, 3, 5):
            poll_at(s, t0 + timedelta(seconds=second))
        assert [slot for slot, _ in fired(s, job.id)] == [
            "2026-11-30T10:00:01Z",
            "2026-11-30T10:00:03Z",
            "2026-11-30T10:00:05Z",
        ]


@pytest.mark.parametrize("kind", KINDS)
def test_a_replace_just_before_a_slot_sends_it_and_the_chain_goes_on(kind: str, t0: datetime) -> None:
    with scene(kind, t0, stale_read_s=1.0) as s:
        # Given a job every 10 s whose slots at :10 and :20 ran
        job, _ = s.service.register(TENANT, spec("rate(10 seconds)", payload={"v": 1}))
        for second in (10, 20):
            poll_at(s, t0 + timedelta(seconds=second))
        # When it is replaced (a new payload: the next slot stays :30) half a second before :30
        s.clock.set(t0 + timedelta(seconds=29.5))
        s.service.replace(TENANT, job.id, spec("rate(10 seconds)", payload={"v": 2}))
        # And the poller releases :30 with the job read a second behind (still version 1)
        poll_at(s, t0 + timedelta(seconds=30))
        poll_at(s, t0 + timedelta(seconds=40))
        # Then :30 and :40 are sent for version 2 (:30 used to be dropped, and the chain ended)
        assert fired(s, job.id)[-2:] == [("2026-11-30T10:00:30Z", 2), ("2026-11-30T10:00:40Z", 2)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_resume_with_catch_up_sends_every_owed_slot(kind: str, t0: datetime) -> None:
    with scene(kind, t0, stale_read_s=1.0) as s:
        # Given a job every 10 s (catch-up all) paused after its :10 slot, for a minute
        job, _ = s.service.register(TENANT, spec("rate(10 seconds)"))
        poll_at(s, t0 + timedelta(seconds=10))
        s.clock.set(t0 + timedelta(seconds=15))
        s.service.pause(TENANT, job.id)
        # When it is resumed at 1:15 and the poller acts half a second later, its read still paused
        s.clock.set(t0 + timedelta(seconds=75))
        s.service.resume(TENANT, job.id)
        poll_at(s, t0 + timedelta(seconds=75.5))
        poll_at(s, t0 + timedelta(seconds=80))
        # Then the slots owed since the pause are sent, and the chain goes on at 1:20 (it used to
        # send none of them and stop)
        sent = [slot for slot, version in fired(s, job.id) if version == 3]
        owed = [
            f"2026-11-30T10:0{m}:{sec:02d}Z"
            for m, sec in ((0, 20), (0, 30), (0, 40), (0, 50), (1, 0), (1, 10))
        ]
        assert sent == [*owed, "2026-11-30T10:01:20Z"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_release_a_moment_behind_a_resume_cannot_put_the_old_chain_back(kind: str, t0: datetime) -> None:
    with scene(kind, t0, stale_read_s=1.0) as s:
        # Given a job every 10 s whose :20 timer (version 1) the poller already holds
        job, _ = s.service.register(TENANT, spec("rate(10 seconds)"))
        poll_at(s, t0 + timedelta(seconds=10))
        [held] = [t for t in s.rig.timers(t0, t0 + timedelta(seconds=25)) if t.slot == "2026-11-30T10:00:20Z"]
        # And the job is paused and resumed just before :20 (version 3: its first timer is :20 too)
        s.clock.set(t0 + timedelta(seconds=19.2))
        s.service.pause(TENANT, job.id)
        s.clock.set(t0 + timedelta(seconds=19.4))
        s.service.resume(TENANT, job.id)
        [resumed] = [
            t for t in s.rig.timers(t0, t0 + timedelta(seconds=25)) if t.slot == "2026-11-30T10:00:20Z"
        ]
        assert resumed.job_version == 3
        # When at :20 the poller releases version 3's timer, then the version 1 timer it held, its
        # read of the job still a second behind (version 1: so that timer goes through too)
        s.clock.set(t0 + timedelta(seconds=20))
        dispatcher = s.rig.dispatcher()
        dispatcher.release([resumed])
        dispatcher.release([held])
        # Then the chain goes on at version 3 (the old chain's next timer used to replace the new
        # one: at :30 the only timer was version 1's, stale, and the job never fired again)
        [nxt] = [t for t in s.rig.timers(t0 + timedelta(seconds=25), t0 + timedelta(seconds=35))]
        assert nxt.job_version == 3
        poll_at(s, t0 + timedelta(seconds=30))
        poll_at(s, t0 + timedelta(seconds=40))
        assert [slot for slot, version in fired(s, job.id) if version == 3][-2:] == [
            "2026-11-30T10:00:30Z",
            "2026-11-30T10:00:40Z",
        ]


@pytest.mark.parametrize("kind", KINDS)
def test_a_missed_alert_of_a_job_just_registered_is_not_dropped(kind: str, t0: datetime) -> None:
    from punctual.dispatch.queues import MessageKind, message_for

    with scene(kind, t0, stale_read_s=1.0) as s:
        # Given a job registered a moment ago and a slot of it recorded MISSED
        job, _ = s.service.register(TENANT, spec("rate(1 minute)"))
        record = s.rig.store.get_job(TENANT, job.id)
        assert record is not None
        missed = Execution(
            job_id=job.id,
            tenant=TENANT,
            slot="2026-11-30T10:00:00Z",
            scheduled_at=t0,
            status=ExecutionStatus.MISSED,
            finished_at=t0,
            error="test",
        )
        s.store.save_execution(missed, None, 0)
        # When the worker takes its alert message half a second later (its job read is behind)
        s.clock.set(t0 + timedelta(milliseconds=500))
        worker = s.rig.worker()
        message = message_for(record, missed.slot, t0, 1, MessageKind.ALERT, s.clock.now())
        claim = worker.claim(message)
        # Then the alert is handled for the slot (it used to be dropped: "job or slot is gone")
        assert claim.reason == "missed alert", claim


# ---------------------------------------------------------------- finding 8: transaction conflicts


@pytest.mark.parametrize("kind", KINDS)
def test_a_child_registered_with_a_conflict_on_its_link_is_linked(kind: str, t0: datetime) -> None:
    with scene(kind, t0) as s:
        s.service.register(TENANT, spec("rate(1 minute)"), job_id="parent")
        # Given the registration's link to the parent meets another transaction once
        s.conflict("link")
        # When the child is registered
        child, _ = s.service.register(TENANT, spec("after(parent)"), job_id="child")
        # Then it is stored and linked (it used to be stored unlinked, the API answering 500)
        assert s.store.list_dependents(TENANT, "parent") == ["child"]
        stored = s.store.get_job(TENANT, "parent")
        assert stored is not None and stored.dependents == 1
        assert s.store.get_job(TENANT, child.id) is not None


@pytest.mark.parametrize("kind", KINDS)
def test_a_child_whose_link_keeps_conflicting_is_not_stored_at_all(kind: str, t0: datetime) -> None:
    with scene(kind, t0) as s:
        s.service.register(TENANT, spec("rate(1 minute)"), job_id="parent")
        s.conflict("link", times=CONFLICT_RETRY.attempts)
        with pytest.raises(TransactionConflictError):
            s.service.register(TENANT, spec("after(parent)"), job_id="child")
        # Nothing half-written: no orphan child counted against the quota, no link
        assert s.store.get_job(TENANT, "child") is None
        assert s.store.list_dependents(TENANT, "parent") == []
        # And the same request a moment later goes through
        s.service.register(TENANT, spec("after(parent)"), job_id="child")
        assert s.store.list_dependents(TENANT, "parent") == ["child"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_one_time_job_whose_completion_meets_a_conflict_is_completed(kind: str, t0: datetime) -> None:
    with scene(kind, t0) as s:
        job, _ = s.service.register(TENANT, spec("at(2026-11-30T10:00:30)"))
        # Given the COMPLETED write meets another transaction on the job once
        s.conflict("job")
        poll_at(s, t0 + timedelta(seconds=30))
        assert fired(s, job.id) == [("2026-11-30T10:00:30Z", 1)]
        s.rig.work_until_idle(s.rig.worker())  # the worker that takes the last slot completes it
        # Then the job is COMPLETED (it used to stay ENABLED for ever, with no timer)
        stored = s.store.get_job(TENANT, job.id)
        assert stored is not None and stored.state is JobState.COMPLETED


@pytest.mark.parametrize("kind", KINDS)
def test_skipped_slots_are_counted_through_a_conflict(kind: str, t0: datetime) -> None:
    with scene(kind, t0) as s:
        # Given a job every 10 s that does not catch up, whose poller was away for 105 s (the slots
        # of :10 to :40 are more than a minute late: missed)
        job, _ = s.service.register(TENANT, spec("rate(10 seconds)", catchup={"policy": "none"}))
        # And the count of its skipped slots meets another transaction on the job once
        s.conflict("skipped")
        poll_at(s, t0 + timedelta(seconds=105))
        # Then every missed slot is counted (the count used to be lost with the release)
        missed = s.store.list_executions(TENANT, job.id, 20, status=ExecutionStatus.MISSED).items
        assert len(missed) == 4
        stored = s.store.get_job(TENANT, job.id)
        assert stored is not None and stored.skipped_slots == 4


@pytest.mark.parametrize("kind", KINDS)
def test_registrations_that_meet_each_other_on_the_tenant_counter_all_succeed(
    kind: str, t0: datetime
) -> None:
    with scene(kind, t0) as s:
        s.service.register(TENANT, spec("rate(1 minute)"), job_id="first")
        # Given parallel registrations in one tenant: each update of the tenant's counter
        # meets another one's transaction once
        s.conflict("counter", times=5)
        for n in range(5):
            s.service.register(TENANT, spec("rate(1 minute)"), job_id=f"job-{n}")
        # Then all of them are stored and counted (they used to fail: 500)
        assert len(s.store.list_jobs(TENANT, 100).items) == 6


def _post(api: ApiClient, body: dict[str, Any]) -> dict[str, Any]:
    event = rest_event("POST", "/v1/jobs", json.dumps(body, ensure_ascii=False))  # UTF-8 on the wire
    out: dict[str, Any] = api.handler.handler(event, LambdaContext())
    return out


def test_a_conflict_that_outlives_the_retries_answers_503_with_retry_after(api: ApiClient) -> None:
    from local import moto_fidelity

    with moto_fidelity.installed(moto_fidelity.MotoFidelity()) as simulated:
        assert _post(api, job_spec())["statusCode"] == 201
        # Given every try of the next registration meets another transaction on the tenant counter
        simulated.inject_conflict(
            "TransactWriteItems", lambda ref: ref.sk == "#meta", CONFLICT_RETRY.attempts
        )
        out = _post(api, job_spec(name="second"))
        # Then the answer is 503 with Retry-After (it used to be 500), and nothing was stored
        assert out["statusCode"] == 503, out
        headers = {k: v[-1] for k, v in (out.get("multiValueHeaders") or {}).items()}
        headers.update(out.get("headers") or {})
        assert headers["Retry-After"] == "1"
        assert json.loads(out["body"])["type"].endswith(":busy")
        assert [job["name"] for job in api.call("GET", "/v1/jobs").body["items"]] == ["nightly report"]
        # And the same request a moment later is stored
        assert _post(api, job_spec(name="second"))["statusCode"] == 201


# ---------------------------------------------------------------- finding 9: sizes in bytes


def test_a_job_inside_every_character_limit_but_over_400_kb_is_413_naming_what(api: ApiClient) -> None:
    from local import moto_fidelity

    with moto_fidelity.installed(moto_fidelity.MotoFidelity()):  # DynamoDB's item size check
        # Given 30 header values of 8,192 "é": every limit counts characters, the item bytes
        headers = {f"x-header-{n}": "é" * 8192 for n in range(30)}
        body = job_spec(target={"type": "http", "url": "https://hooks.example.com/run", "headers": headers})
        out = _post(api, body)
        # Then the API answers 413 naming the headers (it used to be DynamoDB's ValidationException: 500)
        assert out["statusCode"] == 413, out["statusCode"]
        problem = json.loads(out["body"])
        assert problem["type"].endswith(":job-too-large")
        assert problem["errors"][0]["field"] == "target.headers"
        assert "target.headers 492," in problem["detail"] and "409,600" in problem["detail"]
        # And nothing was stored
        assert api.call("GET", "/v1/jobs").body["items"] == []


def test_a_creation_whose_idempotency_record_would_not_fit_is_413_before_anything_is_stored(
    api: ApiClient,
) -> None:
    from local import moto_fidelity

    with moto_fidelity.installed(moto_fidelity.MotoFidelity()):
        # Given header values of 80,000 "é" in all (160,000 bytes in the job item), which the
        # record of an idempotent creation holds escaped, six bytes each (480,000)
        headers = {f"x-header-{n}": "é" * 8000 for n in range(10)}
        body = job_spec(target={"type": "http", "url": "https://hooks.example.com/run", "headers": headers})
        event = rest_event(
            "POST", "/v1/jobs", json.dumps(body, ensure_ascii=False), {"Idempotency-Key": "k-1"}
        )
        out = api.handler.handler(event, LambdaContext())
        assert out["statusCode"] == 413, out["statusCode"]
        assert "idempotency record" in json.loads(out["body"])["detail"]
        assert api.call("GET", "/v1/jobs").body["items"] == []
        # Without the key there is no such record: the job is stored
        assert _post(api, body)["statusCode"] == 201
