"""A run-now slot whose message a worker caught and died with is sent again by its check
(punctual.timing.slots.sent_check_timer), paused job included; a claimed one is left alone."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from execution_harness import LAYOUT, LONG, SHORT, Rig
from factories import spec
from punctual.dispatch.queues import MessageKind
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerKind
from punctual.usecases.jobs import JobService, QueueRouting


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


@pytest.mark.parametrize("paused", [False, True])
def test_a_run_now_slot_lost_with_its_worker_runs_after_its_check(
    rig: Rig, t0: datetime, paused: bool
) -> None:
    # Given a job (paused or not) run now, and the worker that received the message dying
    # before its handler ran (the message in flight for the queue's whole timeout)
    service = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    job, _ = service.register("default", spec("rate(1 day)"))
    if paused:
        service.pause("default", job.id)
    slot = service.trigger("default", job.id, request_key="now")
    [lost] = rig.queues.receive(SHORT, 10, 0, 960)
    assert lost.message.kind == MessageKind.MANUAL
    # When its check is released 5 s on
    [check] = rig.timers(t0, t0 + timedelta(minutes=1), TimerKind.CHILD)
    assert (check.slot, check.due) == (slot, t0 + timedelta(seconds=5))
    rig.clock.advance(5)
    rig.poll()
    # Then the slot runs once, and the original, back after its timeout, is dropped
    worker = rig.worker()
    rig.work_until_idle(worker)
    assert rig.target.calls_for(job.id) == [(slot, 1)]
    rig.clock.advance(960)
    rig.work_until_idle(worker)
    assert rig.target.calls_for(job.id) == [(slot, 1)]


def test_a_claimed_run_now_slot_is_not_sent_again(rig: Rig, t0: datetime) -> None:
    service = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    job, _ = service.register("default", spec("rate(1 day)"))
    slot = service.trigger("default", job.id, request_key="now")
    rig.work_until_idle(rig.worker())
    rig.clock.advance(5)
    assert TimerKind.CHILD in [t.kind for t in rig.poll()]
    assert rig.queues.all_messages() == []
    assert rig.target.calls_for(job.id) == [(slot, 1)]


class _SendThrottled:
    """The rig's queues, whose next send is refused (SQS throttling through the SDK's retries)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.refused = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def send(self, queue_url: str, messages: list[Any]) -> None:
        self.refused += 1
        raise ClientError({"Error": {"Code": "RequestThrottled", "Message": "slow down"}}, "SendMessageBatch")


def test_a_run_now_whose_send_is_throttled_is_accepted_and_runs_once_by_its_check(
    rig: Rig, t0: datetime
) -> None:
    # Given a job, and SQS throttling the API's send of its run-now slot
    routing = QueueRouting((SHORT,), (LONG,))
    job, _ = JobService(rig.store, rig.queues, rig.clock, LAYOUT, routing).register(
        "default", spec("rate(1 day)")
    )
    throttled = _SendThrottled(rig.queues)
    # When it is run now (no Idempotency-Key)
    slot = JobService(rig.store, throttled, rig.clock, LAYOUT, routing).trigger("default", job.id)
    # Then the request is accepted, not answered 503 "nothing was done" (QA24: the slot's check,
    # written first, ran it 5 s later all the same, and the client's retry of the 503 ran a second
    # slot), and the slot runs once, sent by its check
    assert throttled.refused == 1 and rig.queues.all_messages() == []
    rig.clock.advance(5)
    rig.poll()
    rig.work_until_idle(rig.worker())
    assert rig.target.calls_for(job.id) == [(slot, 1)]
