"""Overlap policies at claim time, with a previous slot of the same job still running."""

from __future__ import annotations

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest

from execution_harness import LONG, SHORT, Rig, statuses
from punctual.delivery.notifications import EventPublisher, MemoryEventSink, Notifier
from punctual.delivery.targets.base import TargetResult
from punctual.execution import Delivery, turns
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key

S = ExecutionStatus
MINUTE = timedelta(minutes=1)


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


def test_allow_runs_the_next_slot_alongside(rig: Rig, t0: datetime) -> None:
    job = rig.add_job(overlap="allow", timeout_seconds=600)
    worker = rig.worker()
    long_run = worker.claim(rig.message(job, t0))
    rig.clock.set(t0 + MINUTE)
    rig.send(rig.message(job, t0 + MINUTE))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    assert long_run.live
    assert [r.status for r in rig.history(job)] == [S.SUCCEEDED, S.RUNNING]


def test_skip_records_every_slot_that_falls_inside_a_long_run(rig: Rig, t0: datetime) -> None:
    # Given slot 1 running for ten minutes (longer than the overlap check's look-back of records)
    job = rig.add_job(overlap="skip", timeout_seconds=800)
    worker = rig.worker()
    long_run = worker.claim(rig.message(job, t0))
    # When slots 2..10 arrive meanwhile, one a minute
    for i in range(1, 10):
        rig.clock.set(t0 + i * MINUTE)
        rig.send(rig.message(job, t0 + i * MINUTE))
        assert [r.outcome for r in rig.work_until_idle(worker)] == ["skipped"]
    # Then each is SKIPPED (recorded, pointing at the run that blocked it); nothing else ran
    history = rig.history(job)
    assert [r.status for r in history] == [S.SKIPPED] * 9 + [S.RUNNING]
    assert {r.blocked_by for r in history[:-1]} == {slot_key(t0)}
    assert rig.target.calls == []
    skipped_job = rig.store.get_job(job.tenant, job.id)
    assert skipped_job is not None and skipped_job.skipped_slots == 9
    assert rig.metrics.total("OverlapSkipped") == 9
    # And once slot 1 finished, the next slot runs
    worker.finish(long_run, TargetResult.ok())
    rig.clock.set(t0 + 10 * MINUTE)
    rig.send(rig.message(job, t0 + 10 * MINUTE))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]


def test_skip_keeps_out_while_a_lost_run_is_unresolved_then_lets_the_next_in(rig: Rig, t0: datetime) -> None:
    # Given slot 1 whose worker died (its lease lapses; its takeover will continue the slot)
    job = rig.add_job(overlap="skip", timeout_seconds=60)
    worker = rig.worker()
    worker.claim(rig.message(job, t0))
    # When slot 2 arrives after the lease lapsed, before the takeover
    rig.clock.set(t0 + 5 * MINUTE)
    rig.send(rig.message(job, t0 + 5 * MINUTE))
    # Then it is skipped: slot 1 still holds the job's turn, so two runs are never in flight
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["skipped"]
    # And once slot 1 ended (its takeover ran it), the next slot runs
    rig.send(rig.message(job, t0))  # the lost message comes back: a takeover
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    rig.clock.set(t0 + 6 * MINUTE)
    rig.send(rig.message(job, t0 + 6 * MINUTE))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    assert [r.status for r in rig.history(job)] == [S.SUCCEEDED, S.SKIPPED, S.SUCCEEDED]


def test_queue_records_waiting_slots_and_starts_each_as_the_one_before_ends(rig: Rig, t0: datetime) -> None:
    # Given slot 1 running, and slots 2 and 3 of the same job arriving behind it
    job = rig.add_job(overlap="queue", timeout_seconds=600)
    worker = rig.worker()
    long_run = worker.claim(rig.message(job, t0))
    rig.clock.set(t0 + MINUTE)
    rig.send(rig.message(job, t0 + MINUTE), rig.message(job, t0 + 2 * MINUTE))
    # When a worker takes them
    results = rig.work_until_idle(worker)
    # Then both are recorded QUEUED at once and their messages are deleted (nothing circles
    # through the queue's receive count towards its dead-letter queue)
    assert [(r.outcome, r.ack) for r in results] == [("queued", True), ("queued", True)]
    assert [r.status for r in rig.history(job)] == [S.QUEUED, S.QUEUED, S.RUNNING]
    assert rig.queues.all_messages() == []
    # When slot 1 finishes, slot 2 is started at once, then slot 3 when slot 2 ends: in order
    worker.finish(long_run, TargetResult.ok())
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED", "SUCCEEDED"]
    assert rig.target.calls_for(job.id) == [(slot_key(t0 + MINUTE), 1), (slot_key(t0 + 2 * MINUTE), 1)]
    assert statuses(rig.history(job)) == [(1, "SUCCEEDED"), (1, "SUCCEEDED"), (1, "SUCCEEDED")]
    assert rig.store.take_turn(job.tenant, job.id, "probe", rig.clock.now()).holder == "probe"  # turn free


def test_a_turn_passed_on_starts_its_slot_while_a_message_held_back_holds_the_jobs_group(
    rig: Rig, t0: datetime
) -> None:
    # Given a queue job whose slot-1 message is held back in its FIFO group (its claim met
    # throttling: returned with the error backoff, 10 s then 30 s, and in flight meanwhile), slot 1
    # running from a re-sent copy, and slot 2 waiting for the turn
    job = rig.add_job(overlap="queue", timeout_seconds=600)
    worker = rig.worker()
    rig.send(rig.message(job, t0))
    [held] = rig.queues.receive(SHORT, 10, 0, 30)
    copy = dataclasses.replace(held.message, resend=1)
    run = worker.claim(copy)
    assert run.claimed
    rig.send(dataclasses.replace(rig.message(job, t0 + MINUTE), resend=1))
    assert [r.outcome for r in rig.work(worker)] == ["queued"]
    # When slot 1 ends (the throttling over)
    worker.finish(run, worker.run(run))
    # Then slot 2 starts at once, not once the held message's backoff ends (QA24: its TURN message
    # waited in the job's group behind it, and the job stood still up to minutes after the fault)
    assert [r.outcome for r in rig.work(worker)] == ["SUCCEEDED"]
    assert rig.target.calls_for(job.id) == [(slot_key(t0), 1), (slot_key(t0 + MINUTE), 1)]


def test_a_queued_slot_waits_hours_without_reaching_a_dead_letter_queue(rig: Rig, t0: datetime) -> None:
    # Given slot 1 that runs for three hours on the ECS lane, and slot 2 queued behind it
    job = rig.add_job(overlap="queue", timeout_seconds=4 * 3600, runtime="ecs")
    worker = rig.worker(lease_timers=True)
    long_run = worker.claim(rig.message(job, t0))
    rig.clock.set(t0 + MINUTE)
    rig.send(rig.message(job, t0 + MINUTE), queue=LONG)
    assert [r.outcome for r in rig.work_until_idle(worker, LONG)] == ["queued"]
    # When the hours pass, with the poller releasing the queued slot's checks as they fall due
    checks = 0
    for _ in range(3 * 60):
        rig.clock.advance(60)
        worker.heartbeat(long_run)
        rig.poll()
        handled = rig.work_until_idle(worker, LONG)
        checks += len(handled)
        assert all(r.outcome == "queued" and r.ack for r in handled)
    # Then it checked now and then (a safety net: every 30 s at first, at most every 5 minutes
    # once it has waited ten), each check a fresh message, deleted, never circling
    assert 36 <= checks <= 45
    assert rig.queues.all_messages() == []  # each check was received once and deleted
    # And it starts as soon as slot 1 ends, not at its next check
    worker.finish(long_run, TargetResult.ok())
    assert [r.outcome for r in rig.work_until_idle(worker, LONG)] == ["SUCCEEDED"]
    assert statuses(rig.history(job)) == [(1, "SUCCEEDED"), (1, "SUCCEEDED")]


@pytest.mark.parametrize(("overlap", "outcome"), [("queue", "queued"), ("skip", "skipped")])
def test_a_slot_waiting_for_its_retry_keeps_its_turn(
    rig: Rig, t0: datetime, overlap: str, outcome: str
) -> None:
    # Given slot 1 failed once and waits for its retry
    job = rig.add_job(overlap=overlap, timeout_seconds=60, retry={"max_attempts": 3, "base_seconds": 120})
    rig.target.results[:] = [TargetResult.retryable("502"), TargetResult.ok()]
    worker = rig.worker()
    rig.send(rig.message(job, t0))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["RETRY_WAIT"]
    # When slot 2 arrives meanwhile
    rig.clock.set(t0 + MINUTE)
    rig.send(rig.message(job, t0 + MINUTE))
    # Then it does not start before slot 1 has finally ended
    assert [r.outcome for r in rig.work_until_idle(worker)] == [outcome]
    rig.clock.set(t0 + 5 * MINUTE)
    rig.poll()  # the retry timer (and the queued slot's check, which finds it still waiting)
    expected = ["SUCCEEDED", "SUCCEEDED"] if overlap == "queue" else ["SUCCEEDED"]
    assert [r.outcome for r in rig.work_until_idle(worker) if r.outcome != "queued"] == expected
    calls = [(slot_key(t0), 1), (slot_key(t0), 2)] + (
        [(slot_key(t0 + MINUTE), 1)] if overlap == "queue" else []
    )
    assert rig.target.calls_for(job.id) == calls  # slot 2 only after slot 1 finally ended


def test_a_turn_left_by_a_dead_worker_is_taken_back(rig: Rig, t0: datetime) -> None:
    # Given slot 1 that ended SUCCEEDED, whose worker died before passing the turn on
    job = rig.add_job(overlap="skip", timeout_seconds=60)
    worker = rig.worker()
    claim = worker.claim(rig.message(job, t0))
    pass_turn = rig.store.pass_turn
    rig.store.pass_turn = lambda *a, **k: None  # type: ignore[method-assign]
    worker.finish(claim, TargetResult.ok())
    rig.store.pass_turn = pass_turn  # type: ignore[method-assign]
    # When slot 2 arrives
    rig.clock.set(t0 + MINUTE)
    rig.send(rig.message(job, t0 + MINUTE))
    # Then it takes the turn from the ended slot and runs
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]


@pytest.mark.parametrize("overlap", ["skip", "queue"])
def test_many_workers_racing_on_one_job_never_run_two_slots_at_once(overlap: str, t0: datetime) -> None:
    # Given 12 slots of one job claimed at the same moment by 12 workers (threads)
    rig = Rig(MemoryStore(), ManualClock(t0 + 20 * MINUTE))
    job = rig.add_job(overlap=overlap, timeout_seconds=600)
    workers = [rig.worker() for _ in range(12)]
    barrier = threading.Barrier(len(workers))

    def claim(i: int) -> str:
        barrier.wait()
        return workers[i].claim(rig.message(job, t0 + i * MINUTE)).outcome.value

    with ThreadPoolExecutor(len(workers)) as pool:
        outcomes = list(pool.map(claim, range(len(workers))))
    # Then exactly one runs; the others are skipped or queued
    assert outcomes.count("claimed") == 1, outcomes
    assert set(outcomes) == {"claimed", "skipped" if overlap == "skip" else "queued"}
    running = [r for r in rig.history(job) if r.status is S.RUNNING]
    assert len(running) == 1


def test_a_queue_turn_its_holder_ended_without_passing_on_goes_to_the_oldest_waiting_slot(
    rig: Rig, t0: datetime
) -> None:
    # Given a queue job whose slot 1 runs while slots 2 and 3 arrive and wait for it
    job = rig.add_job(overlap="queue", timeout_seconds=600)
    worker = rig.worker()
    first = worker.claim(rig.message(job, t0))
    for i in (1, 2):
        rig.clock.set(t0 + i * MINUTE)
        assert worker.claim(rig.message(job, t0 + i * MINUTE)).outcome.value == "queued"
    # and slot 1 ends, its worker not (yet) having passed the turn on
    pass_turn = rig.store.pass_turn
    rig.store.pass_turn = lambda *a, **k: None  # type: ignore[method-assign]
    worker.finish(first, TargetResult.ok())
    rig.store.pass_turn = pass_turn  # type: ignore[method-assign]
    # When slot 4 arrives before anyone passed the turn on
    rig.clock.set(t0 + 3 * MINUTE)
    fourth = worker.claim(rig.message(job, t0 + 3 * MINUTE))
    # Then it waits behind slots 2 and 3, and slot 2 (the oldest waiting) gets the turn
    assert fourth.outcome.value == "queued"
    turn = rig.store.take_turn(job.tenant, job.id, "none", rig.clock.now())
    assert turn.holder == slot_key(t0 + MINUTE), turn
    # And the slots run one at a time in slot order
    rig.work_until_idle(worker)
    ran = [slot for slot, _ in rig.target.calls_for(job.id)]
    assert ran == [slot_key(t0 + i * MINUTE) for i in (1, 2, 3)], ran


def test_a_queued_slots_end_repeated_by_the_copy_that_waited_for_its_run_keeps_its_event_id(
    t0: datetime,
) -> None:
    # Given a queue job whose slot 2 waits behind slot 1, and whose safety-net check is sent just
    # as slot 1 ends (the check and the turn's message are both in flight for slot 2)
    sink = MemoryEventSink()
    rig = Rig(MemoryStore(), ManualClock(t0), notifier=Notifier(EventPublisher(sink)))
    job = rig.add_job(overlap="queue", timeout_seconds=600)
    worker = rig.worker()
    first = worker.claim(rig.message(job, t0))
    rig.clock.set(t0 + MINUTE)
    assert worker.claim(rig.message(job, t0 + MINUTE)).outcome.value == "queued"
    worker.finish(first, TargetResult.ok())
    rig.clock.set(t0 + MINUTE + timedelta(seconds=40))
    rig.poll()  # the check
    received = {r.message.kind: r for r in rig.queues.receive(SHORT, 10, 0, 900)}
    turn, check = received["turn"], received["check"]
    second = worker.claim(turn.message, Delivery(SHORT, turn.receipt, turn.receive_count))
    rig.queues.delete(SHORT, turn.receipt)
    waited = worker.process(check.message, Delivery(SHORT, check.receipt, check.receive_count))
    assert waited.outcome == "waiting"  # a copy waits behind the live run: its backup if it dies
    # When slot 2 ends, and the copy comes back after it (the REPAIR of a redelivery)
    worker.finish(second, TargetResult.ok())
    rig.clock.set(t0 + 5 * MINUTE)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["duplicate"]
    rig.notifier.flush()
    # Then the end's event may go out again (at least once, docs/alerts.md), as the same event:
    # same event_id and detail, so that a consumer that dedupes on event_id sees one SUCCEEDED
    ends = [e.detail for e in sink.events if e.detail["status"] == "SUCCEEDED"]
    by_id = {detail["event_id"]: detail for detail in ends}
    assert sorted(by_id) == [f"{job.tenant}:{job.id}:{slot_key(t0 + i * MINUTE)}:1:SUCCEEDED" for i in (0, 1)]
    assert all(detail == by_id[detail["event_id"]] for detail in ends)


def test_a_queue_holds_at_most_max_waiting_slots_and_skips_the_next_naming_why(
    rig: Rig, t0: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # QA27: the waiting set grew without bound (one DynamoDB item: past 400 KB every new slot's
    # claim would fail until its message dead-lettered); it is capped, as Temporal's buffer is
    monkeypatch.setattr(turns, "MAX_WAITING", 2)
    job = rig.add_job(overlap="queue", timeout_seconds=600)
    worker = rig.worker()
    long_run = worker.claim(rig.message(job, t0))
    rig.clock.set(t0 + 3 * MINUTE)
    rig.send(*(rig.message(job, t0 + k * MINUTE) for k in (1, 2, 3)))
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["queued", "queued", "skipped"]
    third = rig.store.get_execution(job.tenant, job.id, slot_key(t0 + 3 * MINUTE))
    assert third is not None and third.status is S.SKIPPED
    assert third.error == f"overlap queue full: 2 slots already wait for slot {slot_key(t0)} (at most 2)"
    # a copy of a slot already waiting is not refused by the cap: it goes on waiting
    again = turns.Turns(rig.store, rig.queues, lambda _: "short").take_slot(
        job.tenant, job.id, slot_key(t0 + MINUTE), rig.clock.now(), queue=True
    )
    assert again == slot_key(t0) and not isinstance(again, turns.QueueFull)
    # and the queued slots still run in order when the run ends
    worker.finish(long_run, TargetResult.ok())
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED", "SUCCEEDED"]
    assert [s for _, s in statuses(rig.history(job))] == ["SKIPPED", "SUCCEEDED", "SUCCEEDED", "SUCCEEDED"]
