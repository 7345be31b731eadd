"""A slot never starts before its instant, whatever a timer says (QA22: a timer row written in an
earlier minute than its slot's fired the slot a minute and a half early; nothing checked)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from execution_harness import Rig
from punctual.dispatch.queues import MessageKind, message_for
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


def test_a_slot_released_early_is_held_until_its_instant(rig: Rig, t0: datetime) -> None:
    # Given a slot at 10:01:30 released by a poller at 10:00:00 (its timer was in the wrong minute)
    job = rig.add_job(schedule="rate(1 minute)")
    slot = t0 + timedelta(seconds=90)
    rig.send(message_for(job, slot_key(slot), slot, 1, MessageKind.FIRE, t0))
    worker = rig.worker()
    # When a worker receives it at once
    first = rig.work(worker)
    # Then it is returned to its queue until the instant: no record, no call
    assert [(r.outcome, r.ack) for r in first] == [("waiting", False)]
    assert rig.store.get_execution(job.tenant, job.id, slot_key(slot)) is None
    assert rig.target.calls_for(job.id) == []
    # And it runs once its instant has come
    rig.advance_to(slot)
    assert [r.outcome for r in rig.work_until_idle(worker)] == ["SUCCEEDED"]
    record = rig.store.get_execution(job.tenant, job.id, slot_key(slot))
    assert record is not None and record.status is ExecutionStatus.SUCCEEDED
    assert record.started_at is not None and record.started_at >= slot


def test_a_release_a_few_seconds_early_is_a_clock_skew_and_runs(rig: Rig, t0: datetime) -> None:
    job = rig.add_job(schedule="rate(1 minute)")
    slot = t0 + timedelta(seconds=4)
    rig.send(message_for(job, slot_key(slot), slot, 1, MessageKind.FIRE, t0))
    assert [r.outcome for r in rig.work_until_idle(rig.worker())] == ["SUCCEEDED"]


def test_a_worker_clock_behind_a_punctual_sender_does_not_hold(rig: Rig, t0: datetime) -> None:
    # The sender released the slot at its instant by its own clock; the worker's clock is 30 s
    # behind: a skew, not an early release (held, it would be 30 s late)
    job = rig.add_job(schedule="rate(1 minute)")
    slot = t0 + timedelta(seconds=30)
    rig.send(message_for(job, slot_key(slot), slot, 1, MessageKind.FIRE, slot))
    assert [r.outcome for r in rig.work_until_idle(rig.worker())] == ["SUCCEEDED"]
