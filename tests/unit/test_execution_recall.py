"""After a long store outage, the messages a worker returned with a backoff come back within
seconds of its end (punctual.execution.recall), and no sooner to the dead-letter queue."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from execution_harness import LAYOUT, LONG, SHORT, Rig
from factories import job, spec
from punctual.dispatch.queues import MemoryQueues, MessageKind, QueueRouting, message_for
from punctual.execution import Delivery, error_backoff_s
from punctual.execution.recall import Recalls
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key
from punctual.usecases.jobs import JobService


class StoreDown(Exception):
    """The store unreachable (a DynamoDB outage): every call fails."""


class Outage:
    """A store whose every call fails while ``down`` is set, or for the jobs in ``broken``."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.down = False
        self.broken: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.store, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.down or self.broken & {str(getattr(a, "job_id", a)) for a in args}:
                raise StoreDown(f"{name}: unreachable")
            return attr(*args, **kwargs)

        return call


@pytest.fixture
def outage() -> Outage:
    return Outage(MemoryStore())


@pytest.fixture
def rig(outage: Outage, t0: datetime) -> Rig:
    return Rig(outage, ManualClock(t0))  # type: ignore[arg-type]


def register(rig: Rig, job_id: str, schedule: str, start: datetime) -> None:
    jobs = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    jobs.register("t", spec(schedule, start_at=start.isoformat()), job_id)


def recorded_runs(rig: Rig) -> dict[tuple[str, str], list[datetime]]:
    """When each (job, slot) called its target, filled as the target is called."""
    runs: dict[tuple[str, str], list[datetime]] = {}
    invoke = rig.target.invoke

    def recorded(target: Any, payload: Any, ctx: Any) -> Any:
        runs.setdefault((ctx.job_id, ctx.slot), []).append(rig.clock.now())
        return invoke(target, payload, ctx)

    rig.target.invoke = recorded  # type: ignore[method-assign]
    return runs


def owed_by(
    runs: dict[tuple[str, str], list[datetime]], t0: datetime, end: datetime
) -> dict[tuple[str, str], list[datetime]]:
    """The runs of the slots of ``job-0`` ... ``job-7`` (every minute from ``t0``, seven seconds
    apart) due before ``end``: every one of them, or the assertion fails."""
    owed = {
        (f"job-{i}", slot_key(at))
        for i in range(8)
        for minute in range(8)
        if (at := t0 + timedelta(seconds=7 * i, minutes=minute)) < end
    }
    due = {key: at for key, at in runs.items() if key in owed}
    assert set(due) == owed
    return due


@pytest.mark.parametrize("outage_s", [120, 300])
def test_slots_returned_during_a_long_store_outage_run_within_seconds_of_its_end(
    rig: Rig, outage: Outage, t0: datetime, outage_s: int
) -> None:
    # Given jobs firing every minute, seven seconds apart, and a store down from 10:01:40 for
    # two or five minutes, while the pollers go on releasing what they had read before it
    for i in range(8):
        register(rig, f"job-{i}", "rate(1 minute)", t0 + timedelta(seconds=7 * i))
    worker = rig.worker(lease_s=8)
    start, end = t0 + timedelta(seconds=100), t0 + timedelta(seconds=100 + outage_s)
    runs = recorded_runs(rig)
    # When the workers take what is visible, once a second, through the outage and after it
    while rig.clock.now() < end + timedelta(minutes=5):
        outage.down = False
        rig.poll()
        outage.down = start <= rig.clock.now() < end
        rig.lambda_round(worker, (StoreDown,))
        rig.clock.advance(1)
    # Then every slot due by the outage's end ran once, the last of them within seconds of the
    # end (QA25: each came back when its backoff ended, up to 79 s after a 2-minute outage and
    # 268 s after a 5-minute one), and the chains went on after it
    due = owed_by(runs, t0, end)
    assert all(len(at) == 1 for at in runs.values())
    assert max(at[0] for at in due.values()) <= end + timedelta(seconds=10)
    for i in range(8):
        assert any(
            datetime.fromisoformat(slot) > end + timedelta(minutes=3)
            for job, slot in runs
            if job == f"job-{i}"
        )


def test_a_message_that_keeps_failing_is_recalled_once_and_never_past_its_dead_letter_limit(
    rig: Rig, outage: Outage, t0: datetime
) -> None:
    # Given a job whose every claim fails (its item unreadable) beside one that runs every ten
    # seconds, and a queue that dead-letters at the sixth receive
    register(rig, "fine", "rate(10 seconds)", t0)
    register(rig, "broken", "rate(1 hour)", t0)
    outage.broken.add("broken")
    worker = rig.worker(lease_s=8, max_receive_count=6)
    receives: list[tuple[datetime, int]] = []

    def seen(delivery: Delivery) -> None:
        if delivery.receipt in broken_receipts():
            receives.append((rig.clock.now(), delivery.receive_count))

    def broken_receipts() -> set[str]:
        return {s.receipt for s in rig.queues.queues.get(SHORT, []) if s.message.job_id == "broken"}

    # When the workers take what is visible, once a second, for an hour
    for _ in range(3600):
        rig.poll()
        rig.lambda_round(worker, (StoreDown,), seen)
        rig.clock.advance(1)
    # Then its backoffs were all kept but one (the one recall the other job's claims made), and
    # the receive past the queue's limit (the one SQS dead-letters: the memory queue keeps it)
    # came only after its whole backoff: a recall never sends a message to the dead-letter queue
    counts = [count for _, count in receives]
    assert counts[:7] == [1, 2, 3, 4, 5, 6, 7]
    gaps = [(b - a).total_seconds() for (a, _), (b, _) in itertools.pairwise(receives[:7])]
    kept = [gap >= error_backoff_s(n) for n, gap in enumerate(gaps, start=1)]
    assert kept.count(False) == 1
    assert kept[-1]
    assert sum(gaps) >= sum(error_backoff_s(n) for n in range(1, 7)) - error_backoff_s(5)


class KmsOutage:
    """Signing secrets that cannot be read while ``down`` (KMS throttling), or for ``broken`` jobs."""

    def __init__(self) -> None:
        self.down = False
        self.broken: set[str] = set()

    def __call__(self, job: Any) -> tuple[str, ...]:
        if self.down or job.id in self.broken:
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "kms"}}, "Decrypt")
        return ("whsec_test",)


@pytest.mark.parametrize("outage_s", [120, 300])
def test_slots_deferred_during_a_long_kms_outage_run_within_seconds_of_its_end(
    rig: Rig, t0: datetime, outage_s: int
) -> None:
    # Given webhook jobs firing every minute, seven seconds apart, whose signing secrets cannot be
    # decrypted from 10:01:40 for two or five minutes (KMS throttling, this worker's key cache cold)
    for i in range(8):
        register(rig, f"job-{i}", "rate(1 minute)", t0 + timedelta(seconds=7 * i))
    kms = KmsOutage()
    worker = rig.worker(lease_s=8)
    worker.signing_secrets = kms
    start, end = t0 + timedelta(seconds=100), t0 + timedelta(seconds=100 + outage_s)
    runs = recorded_runs(rig)
    # When the pollers and the worker go on, once a second, through the outage and after it
    while rig.clock.now() < end + timedelta(minutes=5):
        kms.down = start <= rig.clock.now() < end
        rig.poll()
        rig.lambda_round(worker, ())
        rig.clock.advance(1)
    # Then every slot due by the outage's end ran once (its deferrals not counted as attempts),
    # the last of them within seconds of the end (QA25: each waited out its deferral, 2 s, 4 s,
    # ... 5 minutes: up to 61 s after a 2-minute outage and 251 s after a 5-minute one)
    due = owed_by(runs, t0, end)
    assert all(len(at) == 1 for at in runs.values())
    assert max(at[0] for at in due.values()) <= end + timedelta(seconds=10)
    assert rig.metrics.values.get("AttemptsDeferred")


def test_a_deferred_slot_is_brought_back_once_when_its_tenants_secrets_open(rig: Rig, t0: datetime) -> None:
    # Given a webhook job whose secret cannot be decrypted beside one of the same tenant whose can
    register(rig, "fine", "rate(10 seconds)", t0)
    register(rig, "broken", "rate(1 hour)", t0)
    kms = KmsOutage()
    kms.broken.add("broken")
    worker = rig.worker(lease_s=8)
    worker.signing_secrets = kms
    runs = recorded_runs(rig)
    # When the worker takes what is visible, once a second, for ten minutes
    for _ in range(600):
        rig.poll()
        rig.lambda_round(worker, ())
        rig.clock.advance(1)
    # Then the broken slot was tried once at its instant, once more brought back by the other
    # job's secret opening, and then only at its deferrals' instants (2 s, 4 s, ... 5 minutes):
    # a slot is brought back once, so a secret that stays unreadable costs no more than before
    record = rig.store.get_execution("t", "broken", slot_key(t0))
    assert record is not None and record.status.value == "RETRY_WAIT"
    assert ("broken", slot_key(t0)) not in runs
    assert rig.metrics.values.get("DeferredSlotsBroughtBack") == [1]
    assert 8 <= record.releases <= 10  # (the waits 2+4+...+256 s fit ten minutes 9 times: one skipped)


def test_a_large_backlog_is_recalled_a_hundred_messages_a_claim(t0: datetime) -> None:
    # Given a worker that returned 250 messages during an outage, which ended 10 s ago
    clock = ManualClock(t0)
    queues = MemoryQueues(now=clock.now)
    queues.send(
        SHORT, [message_for(job(f"job-{i}"), slot_key(t0), t0, 1, MessageKind.FIRE, t0) for i in range(250)]
    )
    recalls = Recalls(queues, clock, RecordingMetrics(), max_receive_count=10)
    for received in queues.receive(SHORT, 250, 0, 900):
        queues.change_visibility(SHORT, received.receipt, 90)
        recalls.returned(received.message, Delivery(SHORT, received.receipt, 1), 90)
    clock.advance(10)
    # When claims read the store again, each recalls the oldest hundred (ten requests), not all
    # at once before its own run
    assert [recalls.answered() for _ in range(4)] == [100, 100, 50, 0]
    assert queues.visibility_calls == 25
    assert len(queues.receive(SHORT, 250, 0, 900)) == 250


def test_a_message_whose_return_failed_is_not_recalled(
    rig: Rig, t0: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a worker returning two messages after errors, the first return refused by SQS
    parking = rig.worker().claimer.parking
    first, second = (
        message_for(job(f"job-{i}"), slot_key(t0), t0, 1, MessageKind.FIRE, t0) for i in range(2)
    )
    real = rig.queues.change_visibility

    def refused(*args: Any) -> None:
        raise ClientError(
            {"Error": {"Code": "InternalError", "Message": "try again"}}, "ChangeMessageVisibility"
        )

    monkeypatch.setattr(rig.queues, "change_visibility", refused)
    parking.return_after_error(first, Delivery(SHORT, "r-1", 1))
    monkeypatch.setattr(rig.queues, "change_visibility", real)
    parking.return_after_error(second, Delivery(SHORT, "r-2", 1))
    # Then only the second is remembered: the first comes back when its visibility said anyway,
    # and may be held by another worker under another receipt by the time the store answers
    # (review: its stale receipt was recalled)
    assert len(parking.recalls) == 1
