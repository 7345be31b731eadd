"""A takeover publishes its attempt's start (QA: a run taken over after its worker was lost
published nothing between attempt 1's RUNNING and attempt 2's SUCCEEDED, though every state
change of an execution is an event)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from execution_harness import LAYOUT, LONG, SHORT, Delivery, Rig
from factories import spec
from punctual.delivery.notifications import EventPublisher, MemoryEventSink, Notifier
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
