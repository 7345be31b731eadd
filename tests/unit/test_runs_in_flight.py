"""A tenant's runs in flight (punctual.execution.inflight): runs past their first lease are counted by
their heartbeats, per lane and tenant, and at ``maxRunsInFlightPerTenant`` the tenant's next runs
wait (returned, then parked QUEUED with the reason) while other tenants' start; the count drops when
runs end, or when their worker died and their windows pass."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from execution_harness import LONG, SHORT, FakeTarget, Rig
from punctual.delivery.targets.base import TargetResult
from punctual.dispatch.queues import DispatchMessage
from punctual.execution import Delivery, Worker
from punctual.execution.inflight import AT_CAP_WAIT_S
from punctual.execution.ports import Claim, ClaimOutcome
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.instants import format_instant_ms
from punctual.timing.timers import TimerKind

instant = format_instant_ms
LEASE_S = 8  # beats 5 s after the claim; windows of 10 s


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))


def worker(rig: Rig, cap: int) -> Worker:
    return rig.worker(lease_s=LEASE_S, max_runs_in_flight=cap, max_long_runs_in_flight=cap)


def message(rig: Rig, tenant: str, job_id: str) -> DispatchMessage:
    job = rig.add_job(job_id, tenant=tenant)
    return rig.message(job, rig.clock.now())


def start(w: Worker, msg: DispatchMessage, queue: str = SHORT, receive: int = 1) -> Claim:
    """Claim ``msg`` and keep it running (registered live, as the worker does while it runs), the
    counter writes asked before made first (they are made on a thread of their own)."""
    assert w.in_flight.drain()
    claim = w.claim(msg, Delivery(queue, f"r-{msg.job_id}-{receive}", receive))
    if claim.claimed:
        w.live.add(claim)
    return claim


def outlive_first_lease(rig: Rig, w: Worker, *claims: Claim) -> None:
    """The runs' first heartbeat, 5 s on (the lease keeper's)."""
    rig.clock.advance(6)
    for claim in claims:
        assert w.heartbeat(claim)


def counted(w: Worker, tenant: str, lane: str = "short") -> int:
    assert w.in_flight.drain()
    now = w.clock.now()
    window = w.in_flight.window(now)
    return max(w.store.runs_in_flight(f"{lane}/{tenant}", (window - 1, window)).values())


def test_a_run_is_counted_once_a_window_from_its_first_heartbeat_and_taken_back_at_its_end(rig: Rig) -> None:
    w = worker(rig, cap=5)
    claim = start(w, message(rig, "tenant-a", "hangs"))
    assert claim.claimed
    assert counted(w, "tenant-a") == 0  # under its first lease: nothing written
    outlive_first_lease(rig, w, claim)
    assert counted(w, "tenant-a") == 1
    w.heartbeat(claim)  # a second beat in the same window adds nothing
    assert counted(w, "tenant-a") == 1
    rig.clock.advance(5)
    w.heartbeat(claim)
    rig.clock.advance(5)
    w.heartbeat(claim)
    assert counted(w, "tenant-a") == 1
    w.live.discard(claim)  # the run left its process (finished, handed back)
    assert counted(w, "tenant-a") == 0
    assert counted(w, "tenant-b") == 0


def test_a_heartbeat_never_waits_on_a_counter_write(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a run past its first lease whose tenant's counter item answers slowly (throttled, an
    # answer lost: the SDK's retries take seconds)
    w = worker(rig, cap=5)
    claim = start(w, message(rig, "tenant-a", "hangs"))
    answered = threading.Event()
    real = w.store.add_runs_in_flight

    def slow(*args: object) -> int:
        answered.wait(30)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(w.store, "add_runs_in_flight", slow)
    rig.clock.advance(6)
    # When the lease keeper beats it, the beat (and the keeper's other runs) go on at once: the
    # count is written beside (QA25 review: the write was made under the run's lock, on the one
    # keeper thread, so every run's lease renewal of the process waited on it)
    beat = threading.Thread(target=w.heartbeat, args=(claim,))
    beat.start()
    beat.join(5)
    assert not beat.is_alive()
    # And the mark is made once the item answers
    answered.set()
    assert counted(w, "tenant-a") == 1


def test_at_the_cap_the_tenants_next_run_is_not_started_and_another_tenants_is(rig: Rig) -> None:
    w = worker(rig, cap=2)
    first = start(w, message(rig, "tenant-a", "a-1"))
    second = start(w, message(rig, "tenant-a", "a-2"))
    outlive_first_lease(rig, w, first, second)
    w.in_flight.read_every_s = 0  # (a process reads again every few seconds)

    held_message = message(rig, "tenant-a", "a-3")
    held = start(w, held_message)
    assert held.outcome is ClaimOutcome.WAITING and not held.ack
    assert held.return_after_s == AT_CAP_WAIT_S
    assert "maxRunsInFlightPerTenant" in held.reason
    assert rig.store.get_execution("tenant-a", "a-3", held_message.slot) is None  # nothing written
    assert rig.metrics.total("RunsHeldAtTenantCap") == 1

    other = start(w, message(rig, "tenant-b", "b-1"))
    assert other.claimed  # another tenant's run starts
    on_long = start(w, message(rig, "tenant-a", "a-long"), queue=LONG)
    assert on_long.claimed  # and the tenant's runs on the other lane, counted apart

    # Returned again and again, the first attempt is parked QUEUED with the reason, never lost
    parked = start(w, held_message, receive=3)
    assert parked.outcome is ClaimOutcome.QUEUED and parked.ack
    record = rig.store.get_execution("tenant-a", "a-3", held_message.slot)
    assert record is not None and record.status is ExecutionStatus.QUEUED
    assert "runs in flight" in (record.error or "")
    assert rig.timers(rig.clock.now(), rig.clock.now().replace(hour=11), TimerKind.QUEUED)

    # One of the runs ends: under the cap, the parked slot's check starts it, once
    w.live.discard(first)
    for _ in range(12):  # the other still runs, and beats
        rig.clock.advance(5)
        assert w.heartbeat(second)
    assert counted(w, "tenant-a") == 1
    rig.poll()
    results = rig.work_until_idle(w)
    assert [r.outcome for r in results] == ["SUCCEEDED"]
    assert [c.job_id for c in rig.target.calls] == ["a-3"]


def test_a_dead_workers_runs_drop_out_when_their_windows_pass(rig: Rig) -> None:
    w = worker(rig, cap=1)
    dead = start(w, message(rig, "tenant-a", "a-1"))
    outlive_first_lease(rig, w, dead)
    w.in_flight.read_every_s = 0
    assert start(w, message(rig, "tenant-a", "a-2")).outcome is ClaimOutcome.WAITING
    # Its worker died: nothing takes the mark back, nothing beats it again
    rig.clock.advance(2 * w.in_flight.window_s)
    assert counted(w, "tenant-a") == 0
    assert start(w, message(rig, "tenant-a", "a-3")).claimed


def test_no_cap_counts_and_holds_nothing(rig: Rig) -> None:
    w = worker(rig, cap=0)
    claims = [start(w, message(rig, "tenant-a", f"a-{n}")) for n in range(3)]
    outlive_first_lease(rig, w, *claims)
    assert counted(w, "tenant-a") == 0
    assert start(w, message(rig, "tenant-a", "a-next")).claimed


def test_far_from_its_cap_no_tenants_counters_are_read(rig: Rig) -> None:
    # One read of the list of tenants near their cap per process every few seconds: nothing per trigger
    reads: list[str] = []
    read = rig.store.runs_in_flight
    rig.store.runs_in_flight = lambda scope, windows: reads.append(scope) or read(scope, windows)  # type: ignore[method-assign]
    w = worker(rig, cap=100)
    running = [start(w, message(rig, "tenant-a", f"a-{n}")) for n in range(3)]
    outlive_first_lease(rig, w, *running)
    w.in_flight.read_every_s = 0
    assert all(start(w, message(rig, "tenant-a", f"next-{n}")).claimed for n in range(5))
    assert reads == []  # 3 of 100: not near the cap


def test_a_smoothed_message_is_held_for_its_instant_first_then_for_the_cap(rig: Rig) -> None:
    w = worker(rig, cap=1)
    running = start(w, message(rig, "tenant-a", "a-1"))
    outlive_first_lease(rig, w, running)
    w.in_flight.read_every_s = 0
    smoothed = replace(
        message(rig, "tenant-a", "a-2"), not_before=instant(rig.clock.now() + timedelta(seconds=30))
    )
    ahead = start(w, smoothed)
    assert ahead.outcome is ClaimOutcome.WAITING and "rate budget" in ahead.reason  # its instant's wait
    assert rig.metrics.total("RunsHeldAtTenantCap") == 0
    for _ in range(6):  # the run goes on, and beats, until the smoothed slot's instant
        rig.clock.advance(5)
        assert w.heartbeat(running)
    at_instant = start(w, smoothed, receive=2)
    assert at_instant.outcome is ClaimOutcome.WAITING and "runs in flight" in at_instant.reason


def test_near_its_cap_a_tenants_runs_are_counted_from_their_start(rig: Rig) -> None:
    # A tenant at half its cap or more is listed near it: the runs it starts then count at once, so
    # a wave of its waiting slots released together (its hanging runs ended) is seen within seconds
    w = worker(rig, cap=4)
    first = [start(w, message(rig, "tenant-a", f"a-{n}")) for n in range(2)]
    outlive_first_lease(rig, w, *first)
    w.in_flight.read_every_s = 0
    wave = [start(w, message(rig, "tenant-a", f"wave-{n}")) for n in range(3)]
    assert [c.outcome for c in wave] == [ClaimOutcome.CLAIMED, ClaimOutcome.CLAIMED, ClaimOutcome.WAITING]
    assert counted(w, "tenant-a") == 4  # none of the wave has beaten yet
    for claim in wave[:2]:
        w.live.discard(claim)  # short runs: their marks taken back at their end
    assert counted(w, "tenant-a") == 2


def test_far_from_its_cap_a_tenants_start_writes_nothing(rig: Rig) -> None:
    writes: list[str] = []
    add = rig.store.add_runs_in_flight
    rig.store.add_runs_in_flight = lambda scope, *rest: writes.append(scope) or add(scope, *rest)  # type: ignore[method-assign]
    w = worker(rig, cap=100)
    claims = [start(w, message(rig, "tenant-a", f"a-{n}")) for n in range(5)]
    for claim in claims:
        w.live.discard(claim)
    assert writes == []


def test_a_retry_held_at_the_cap_past_its_max_age_ends_its_slot_failed(rig: Rig) -> None:
    w = rig.worker(lease_s=LEASE_S, max_runs_in_flight=1, target=FakeTarget(TargetResult.retryable("boom")))
    job = rig.add_job(
        "a-2", tenant="tenant-a", retry={"max_attempts": 3, "base_seconds": 1, "max_age_seconds": 60}
    )
    first = rig.message(job, rig.clock.now())
    assert w.process(first, Delivery(SHORT, "r-first", 1)).outcome == "RETRY_WAIT"
    running = start(w, message(rig, "tenant-a", "a-1"))  # the tenant's other run hangs: at its cap
    outlive_first_lease(rig, w, running)
    w.in_flight.read_every_s = 0
    retry = rig.message(job, first.slot, attempt=2, kind="retry")
    assert start(w, retry).outcome is ClaimOutcome.WAITING  # held at the cap
    for _ in range(14):  # and held past its max age
        rig.clock.advance(5)
        assert w.heartbeat(running)
    w.live.discard(running)
    rig.clock.advance(2 * w.in_flight.window_s)
    ended = start(w, retry, receive=3)
    assert ended.outcome is ClaimOutcome.EXHAUSTED
    record = rig.store.get_execution("tenant-a", "a-2", first.slot)
    assert (
        record is not None and record.status is ExecutionStatus.FAILED and "max_age" in (record.error or "")
    )


def test_a_copy_of_a_slot_that_ran_is_dropped_at_the_cap_not_held_for_good(rig: Rig) -> None:
    # The pollers' copy of a slot (sent again when no worker claimed it within seconds: a held
    # message is one) that comes back after its slot ran: held, it would come back for as long
    # as its tenant stays at its cap; its claim drops it
    w = worker(rig, cap=1)
    ran = message(rig, "tenant-a", "a-1")
    assert w.process(ran, Delivery(SHORT, "r-ran", 1)).outcome == "SUCCEEDED"
    running = start(w, message(rig, "tenant-a", "a-2"))
    outlive_first_lease(rig, w, running)
    w.in_flight.read_every_s = 0
    copy = replace(ran, resend=1)
    assert start(w, copy).outcome is ClaimOutcome.WAITING  # held (no read of its record)
    dropped = start(w, copy, receive=3)
    assert dropped.outcome is ClaimOutcome.DUPLICATE and dropped.ack
    assert [c.job_id for c in rig.target.calls] == ["a-1"]


def test_a_mark_whose_listing_near_the_cap_fails_is_still_taken_back_and_not_added_again(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA25 review: the counter's ADD is applied before the scope is listed near its cap; a listing
    that failed (the window's one list item throttled) reported the mark as not made, so the run's
    next beats in the window added to the counter again (up to four a window) and its end took
    none of them back: a tenant held at its cap with a quarter of its cap running."""
    w = worker(rig, cap=2)  # a run's first mark lists its tenant (half the cap)

    def throttled(*_: object) -> None:
        raise RuntimeError("ProvisionedThroughputExceededException")

    monkeypatch.setattr(rig.store, "mark_hot_in_flight", throttled)
    claim = start(w, message(rig, "tenant-a", "hangs"))
    outlive_first_lease(rig, w, claim)
    rig.clock.advance(1)
    assert w.heartbeat(claim)  # a second beat in the same window
    assert counted(w, "tenant-a") == 1  # counted once, not once a beat
    monkeypatch.undo()
    w.live.discard(claim)
    assert counted(w, "tenant-a") == 0  # and taken back at its end


def test_a_run_claimed_by_an_ecs_worker_after_its_drain_handed_everything_back_takes_its_mark_back(
    rig: Rig,
) -> None:
    """QA25 review: a claim an ECS worker makes after its drain released every run is handed back
    at once, never run; counted at its start (its tenant near its cap), its mark stayed for its
    windows (up to 40 s) and held the tenant's next runs."""
    from punctual.dispatch.queues import Received
    from punctual.execution.worker_service import WorkerService

    w = worker(rig, cap=4)
    first = [start(w, message(rig, "tenant-a", f"a-{n}")) for n in range(2)]
    outlive_first_lease(rig, w, *first)
    w.in_flight.read_every_s = 0
    service = WorkerService(w, [SHORT])
    service._released_all = True  # the drain handed back every run it had
    late = message(rig, "tenant-a", "late")
    assert not service._execute(SHORT, Received(late, "r-late", 1, "m-late"))
    assert counted(w, "tenant-a") == 2  # the two runs going on, not the one handed back


def test_a_clock_stepped_back_does_not_keep_a_tenant_held_on_a_count_read_in_its_future(rig: Rig) -> None:
    """QA25 review: a process's count (and its list of tenants near their cap) was kept while
    younger than 3 s, and a read made before the process's clock stepped back (an NTP step, a
    thawed environment) stayed "younger" until the clock passed it again: for a step of an hour,
    the tenant's runs were held by that process for an hour, whatever the store said."""
    w = worker(rig, cap=2)
    runs = [start(w, message(rig, "tenant-a", f"a-{n}")) for n in range(2)]
    outlive_first_lease(rig, w, *runs)
    held = start(w, message(rig, "tenant-a", "a-held"))
    assert held.outcome is ClaimOutcome.WAITING  # read now: at its cap
    for claim in runs:
        w.live.discard(claim)  # both runs end: the store counts none
    rig.clock.set(rig.clock.now() - timedelta(hours=1))  # the clock steps back
    assert start(w, message(rig, "tenant-a", "a-next")).claimed  # read again, under its cap
