"""Runs started before a loss or a pause: a takeover publishes its attempt's start (QA: a run
taken over after its worker was lost published nothing between attempt 1's RUNNING and attempt
2's SUCCEEDED, though every state change of an execution is an event), and a run handed back at a
worker's shutdown goes on while its job is paused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from execution_harness import LAYOUT, LONG, SHORT, Delivery, Rig
from factories import spec
from punctual.delivery.notifications import EventPublisher, MemoryEventSink, Notifier
from punctual.dispatch.queues import MessageKind, message_for
from punctual.execution.records import RELEASED_NOTE
from punctual.models import Execution, ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.usecases.jobs import JobService, QueueRouting

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def test_a_takeover_publishes_the_new_attempt_running() -> None:
    clock = ManualClock(T0 - timedelta(seconds=30))
    events = MemoryEventSink()
    rig = Rig(MemoryStore(), clock, notifier=Notifier(EventPublisher(events)))
    jobs = JobService(rig.store, rig.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    jobs.register("default", spec("cron(0 * * * ? *)", retry={"max_attempts": 2}), job_id="j")
    clock.set(T0)
    rig.poll()
    [received] = rig.queues.receive(SHORT, 10, 0, 8)
    rig.worker(lease_s=8).claim(received.message, Delivery(SHORT, received.receipt, 1))  # then lost
    clock.set(T0 + timedelta(seconds=10))  # the lease lapsed: the message is back
    rig.work_until_idle(rig.worker(lease_s=8))

    changes = [e.detail for e in events.events if e.detail_type == "Execution Status Change"]
    assert [(d["status"], d["attempt"]) for d in changes][-2:] == [("RUNNING", 2), ("SUCCEEDED", 2)]


def test_a_run_handed_back_at_shutdown_goes_on_while_its_job_is_paused() -> None:
    # Review: a paused job's hand-back (its worker shut down mid-run) ended FAILED, a failure
    # report sent though the target never failed, when the next worker took it after 5 s
    clock = ManualClock(T0)
    rig = Rig(MemoryStore(), clock)
    jobs = JobService(rig.store, rig.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    job, _ = jobs.register("default", spec("cron(0 * * * ? *)"), job_id="j")
    slot = "2026-12-01T11:00:00Z"
    released = Execution(
        job_id="j",
        slot=slot,
        scheduled_at=T0 + timedelta(hours=1),
        attempt=1,
        status=ExecutionStatus.RETRY_WAIT,
        finished_at=T0,
        error=RELEASED_NOTE,
        releases=1,
        job_version=job.version,
    )
    rig.store.save_execution(released, None, 2_000_000_000)
    jobs.pause("default", "j")
    clock.set(T0 + timedelta(seconds=30))
    retry = message_for(job, slot, T0 + timedelta(hours=1), 2, MessageKind.RETRY, T0)
    rig.queues.send(SHORT, [retry])
    rig.work_until_idle(rig.worker())
    record = rig.store.get_execution("default", "j", slot)
    assert record is not None and record.status is ExecutionStatus.SUCCEEDED, record
    assert rig.failures.bodies == []
