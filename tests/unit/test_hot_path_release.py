"""The release path's own cost per slot: the claim reads no job when the message carries it, and a
one-time job's slot is released like a recurring one (no transaction of the poller per job)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from execution_harness import LAYOUT, SHORT, Rig
from factories import spec
from punctual.dispatch.queues import SPEC_MAX_CHARS, DispatchMessage, job_from_spec, spec_of
from punctual.execution.claim import SPEC_TRUST_S
from punctual.models import ExecutionStatus, JobState
from punctual.runtime.clock import ManualClock
from punctual.security.message_auth import DispatchSigner
from punctual.store.memory import MemoryStore
from punctual.usecases.jobs import JobService, QueueRouting

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TENANT = "default"


class CountingStore(MemoryStore):
    """The in-memory store, counting the calls the hot path is about."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def get_job(self, tenant: str, job_id: str, consistent: bool = True) -> Any:
        self.calls["get_job"] += 1
        return super().get_job(tenant, job_id, consistent)

    def replace_job(self, job: Any, expected_version: int, *args: Any, **kwargs: Any) -> None:
        self.calls["replace_job"] += 1
        super().replace_job(job, expected_version, *args, **kwargs)


def register(rig: Rig, count: int, schedule: str, **overrides: Any) -> list[str]:
    service = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), ()))
    ids = [f"job-{i:03d}" for i in range(count)]
    for job_id in ids:
        service.register(TENANT, spec(schedule, **overrides), job_id=job_id)
    return ids


def release_at(rig: Rig, instant: datetime) -> list[DispatchMessage]:
    rig.advance_to(instant)
    rig.poll()
    return rig.queues.all_messages(SHORT)


# --------------------------------------------------------------------------- the claim's job read


def test_a_released_slot_is_claimed_run_and_finished_without_reading_its_job() -> None:
    # Given 20 jobs whose slots the poller releases
    store = CountingStore()
    rig = Rig(store, ManualClock(T - timedelta(minutes=10)))
    register(rig, 20, "rate(5 minutes)", start_at=T.isoformat())
    messages = release_at(rig, T)
    assert len(messages) == 20 and all(m.spec for m in messages)
    # When a worker takes them at once, Then every slot runs, and no job was read for it
    store.calls.clear()
    results = rig.work_until_idle(rig.worker())
    assert [r.outcome for r in results] == [ExecutionStatus.SUCCEEDED.value] * 20
    assert store.calls["get_job"] == 0
    assert rig.metrics.total("RunDurationMs") is not None


def test_a_message_older_than_the_trust_window_reads_its_job_and_sees_a_pause() -> None:
    # Given a released slot whose job is paused after the release
    store = CountingStore()
    rig = Rig(store, ManualClock(T - timedelta(minutes=10)))
    (job_id,) = register(rig, 1, "rate(5 minutes)", start_at=T.isoformat())
    release_at(rig, T)
    service = JobService(store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), ()))
    service.pause(TENANT, job_id)
    # When a worker takes it after the trust window, Then it reads the job and skips the slot
    rig.clock.advance(SPEC_TRUST_S + 1)
    store.calls.clear()
    (result,) = rig.work_until_idle(rig.worker())
    assert result.outcome == "skipped"
    assert store.calls["get_job"] >= 1


def test_a_carried_job_must_be_the_messages_own_version() -> None:
    store = CountingStore()
    rig = Rig(store, ManualClock(T))
    job = rig.add_job("job-1")
    message = rig.message(job, T)
    released = T.isoformat().replace("+00:00", "Z")
    other = job.model_copy(update={"version": job.version + 1})
    rig.send(DispatchMessage(**{**message.__dict__, "released_at": released, "spec": spec_of(other)}))
    store.calls.clear()
    (result,) = rig.work_until_idle(rig.worker())
    assert result.outcome == ExecutionStatus.SUCCEEDED.value
    assert store.calls["get_job"] >= 1  # the carried one did not match: read


def test_the_carried_job_is_signed_with_the_message() -> None:
    # Someone who can write to the queue cannot swap the job a message carries
    signer = DispatchSigner("k" * 40)
    rig = Rig(MemoryStore(), ManualClock(T))
    job = rig.add_job("job-1")
    message = signer.sign(rig.message(job, T))
    evil = job.model_copy(update={"payload": {"steal": True}})
    forged = DispatchMessage(**{**message.__dict__, "spec": spec_of(evil)})
    rig.send(forged)
    (result,) = rig.work_until_idle(rig.worker(signer=signer))
    assert result.outcome == "forged" and rig.target.calls == []


def test_a_job_too_large_to_carry_is_read() -> None:
    big = spec("rate(1 minute)", payload={"blob": "x" * SPEC_MAX_CHARS})
    rig = Rig(MemoryStore(), ManualClock(T))
    service = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), ()))
    job, _ = service.register(TENANT, big, job_id="big")
    assert spec_of(job) == ""
    small, _ = service.register(TENANT, spec("rate(1 minute)"), job_id="small")
    assert job_from_spec(spec_of(small)) == small  # every field, the store's counters too


# --------------------------------------------------------------------------- one-time jobs


def test_a_burst_of_one_time_slots_is_released_without_a_transaction_per_job() -> None:
    # Given 50 at() jobs due at one instant
    store = CountingStore()
    rig = Rig(store, ManualClock(T - timedelta(minutes=10)))
    ids = register(rig, 50, f"at({T:%Y-%m-%dT%H:%M:%S})")
    # When the poller releases them, Then it writes no job: each message says it ends its chain
    store.calls.clear()
    messages = release_at(rig, T)
    assert len(messages) == 50 and all(m.last for m in messages)
    assert store.calls["replace_job"] == 0
    assert {store.get_job(TENANT, i).state for i in ids} == {JobState.ENABLED}  # type: ignore[union-attr]
    # When a worker takes them, Then each job is COMPLETED (by the worker) and each slot ran
    results = rig.work_until_idle(rig.worker())
    assert [r.outcome for r in results] == [ExecutionStatus.SUCCEEDED.value] * 50
    assert {store.get_job(TENANT, i).state for i in ids} == {JobState.COMPLETED}  # type: ignore[union-attr]
    assert rig.metrics.total("JobsCompleted") == 50


def test_a_job_changed_after_its_last_slot_was_released_is_not_completed_by_the_worker() -> None:
    store = CountingStore()
    rig = Rig(store, ManualClock(T - timedelta(minutes=10)))
    (job_id,) = register(rig, 1, f"at({T:%Y-%m-%dT%H:%M:%S})")
    release_at(rig, T)
    service = JobService(store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), ()))
    service.pause(TENANT, job_id)
    rig.work_until_idle(rig.worker())
    job = store.get_job(TENANT, job_id)
    assert job is not None and job.state is JobState.PAUSED  # the pause stands


def test_a_repeat_of_the_last_message_writes_nothing_more() -> None:
    store = CountingStore()
    rig = Rig(store, ManualClock(T - timedelta(minutes=10)))
    register(rig, 1, f"at({T:%Y-%m-%dT%H:%M:%S})")
    (message,) = release_at(rig, T)
    worker = rig.worker()
    rig.work_until_idle(worker)
    store.calls.clear()
    rig.clock.advance(301)  # past SQS's dedup window (and the carried job's trust)
    rig.send(message)  # delivered again (a worker died before deleting it)
    (again,) = rig.work_until_idle(worker)
    assert again.outcome == "duplicate" and store.calls["replace_job"] == 0


@pytest.mark.parametrize("schedule", ["rate(1 minute)", "cron(* * * * ? *)"])
def test_the_slot_before_a_jobs_end_carries_the_chains_end(schedule: str) -> None:
    store = CountingStore()
    rig = Rig(store, ManualClock(T - timedelta(minutes=10)))
    (job_id,) = register(
        rig, 1, schedule, start_at=T.isoformat(), end_at=(T + timedelta(seconds=90)).isoformat()
    )
    first = release_at(rig, T)
    assert [m.last for m in first] == [False]
    rig.work_until_idle(rig.worker())
    second = [m for m in release_at(rig, T + timedelta(minutes=1)) if m.slot != first[0].slot]
    assert [m.last for m in second] == [True]
    rig.work_until_idle(rig.worker())
    job = store.get_job(TENANT, job_id)
    assert job is not None and job.state is JobState.COMPLETED
    assert store.calls["replace_job"] == 1  # the worker's, not the poller's


def test_a_last_slot_no_message_carries_is_completed_by_the_poller() -> None:
    # A one-time job whose slot was missed (catch-up none): nothing is sent, the poller completes it
    store = CountingStore()
    rig = Rig(store, ManualClock(T - timedelta(minutes=10)))
    (job_id,) = register(rig, 1, f"at({T:%Y-%m-%dT%H:%M:%S})", catchup={"policy": "none"})
    assert release_at(rig, T + timedelta(minutes=5)) == []
    job = store.get_job(TENANT, job_id)
    assert job is not None and job.state is JobState.COMPLETED
