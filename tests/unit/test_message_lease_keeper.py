"""The lease keeper's held messages under the message lease (issue 30, point 3): whatever the run's
lease, a held message is renewed before its message lease lapses, and with the default leases
every renewal is one request a queue, at the heartbeat's steps.

In-memory queues on a manual clock; the keeper stepped as its thread ticks (once a second).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pytest

from execution_harness import SHORT, Rig
from punctual.execution import WorkerConfig
from punctual.execution.keeper import TICK_S, LeaseKeeper
from punctual.runtime.clock import ManualClock
from punctual.runtime.settings import Settings
from punctual.store.memory import MemoryStore


def test_the_workers_default_message_lease_is_the_deployments_and_shorter_than_the_run_lease() -> None:
    settings = Settings()
    assert WorkerConfig().message_visibility_s == settings.message_lease_s < settings.lease_s
    assert (
        WorkerConfig.from_settings(settings, lease_timers=False).message_visibility_s
        == settings.message_lease_s
    )
    # Never past a run's lease: a deployment with a shorter lease has its messages leased as long
    assert WorkerConfig(lease_s=5, message_lease_s=8).message_visibility_s == 5


def test_a_message_lease_below_its_floor_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="message_lease_s"):
        Settings(message_lease_s=2)


@pytest.mark.parametrize("lease_s", [10, 60, 600])
def test_held_messages_are_renewed_before_their_message_lease_lapses_whatever_the_run_lease(
    t0: datetime, lease_s: int
) -> None:
    # Given a batch of three messages a worker holds, none started, with a run lease of lease_s
    rig = Rig(MemoryStore(), ManualClock(t0))
    jobs = [rig.add_job(f"job-{n}") for n in range(3)]
    worker = rig.worker(lease_s=lease_s, message_lease_s=8)
    rig.send(*(rig.message(job, t0) for job in jobs))
    received = rig.queues.receive(SHORT, 10, 0, 900)
    assert len(received) == 3
    keeper = LeaseKeeper(worker)
    keeper.hold(SHORT, [r.receipt for r in received], rig.clock.now())
    # When its keeper ticks for a minute
    for _ in range(60):
        rig.clock.advance(TICK_S)
        keeper.step()
        # Then none ever comes back while the worker lives
        assert rig.queues.receive(SHORT, 10, 0, 900) == []
    # And each renewal was one request for the three (the hold, then one every few seconds)
    renewals = rig.queues.visibility_calls - 1
    assert 60 // keeper.renew_s <= renewals <= 60 // keeper.renew_s + 1
    assert keeper.renew_s <= 8 - 2  # a tick and a request's time before the message lease ends
    # And once it stops (its worker died), they are back within the message lease
    rig.clock.advance(8)
    assert len(rig.queues.receive(SHORT, 10, 0, 900)) == 3


def test_a_held_run_under_a_long_lease_is_beaten_when_due_its_message_lapsing_within_the_message_lease(
    t0: datetime,
) -> None:
    # Given a run a Lambda batch holds, on a deployment whose run lease is a minute (its message
    # renewed every few seconds for the message lease's sake)
    rig = Rig(MemoryStore(), ManualClock(t0))
    job = rig.add_job(timeout_seconds=600)
    worker = rig.worker(lease_s=60, message_lease_s=8)
    keeper, claim = rig.held_run(worker, job, t0)
    # When it runs for two minutes, its keeper ticking
    for _ in range(120):
        rig.clock.advance(TICK_S)
        keeper.step()
        assert rig.queues.receive(SHORT, 10, 0, 900) == []
    # Then its record was heartbeated when its lease asked for it (every 53 s), not at each of
    # its message's renewals (every 6 s)
    assert rig.metrics.total("Heartbeats") == 2
    # And when its worker dies, its message comes back within the message lease of its last
    # renewal, its record's lease still live (the message back is the takeover: message_back)
    worker.live.discard(claim)
    rig.clock.advance(8 - 0.5)
    assert rig.queues.receive(SHORT, 10, 0, 900) == []
    rig.clock.advance(0.5)
    [back] = rig.queues.receive(SHORT, 10, 0, 900)
    assert back.message.slot == claim.message.slot
    record = rig.store.get_execution(job.tenant, job.id, claim.message.slot)
    assert record is not None and record.lease_until is not None and record.lease_until > rig.clock.now()


def test_a_message_released_while_its_renewal_waits_for_a_beat_thread_is_not_renewed(t0: datetime) -> None:
    # Given a held message due for renewal, whose renewal waits for a beat thread (the threads
    # busy with slow writes: here, made only when the test says)
    rig = Rig(MemoryStore(), ManualClock(t0))
    job = rig.add_job()
    worker = rig.worker(message_lease_s=8)
    rig.send(rig.message(job, t0))
    [received] = rig.queues.receive(SHORT, 1, 0, 900)
    keeper = LeaseKeeper(worker, tick_s=0.0)
    keeper.hold(SHORT, [received.receipt], rig.clock.now())
    waiting: list[Callable[[], object]] = []
    keeper._beats.submit = lambda key, write: waiting.append(write)  # type: ignore[method-assign,assignment,return-value]
    rig.clock.advance(keeper.renew_s)
    keeper.step()
    assert len(waiting) == 1
    # When its batch lets go of it (made visible) before the renewal is made
    keeper.release(SHORT, received.receipt)
    rig.queues.change_visibility(SHORT, received.receipt, 0)
    calls = rig.queues.visibility_calls
    waiting[0]()
    # Then it is not hidden again: no request, and the next worker sees it
    assert rig.queues.visibility_calls == calls
    assert rig.queues.receive(SHORT, 1, 0, 900)
