"""A Region's uncertain release on a multi-Region table sends a slot another Region is running.

A poller that (re)starts after its minute began releases what was due before its start as
*uncertain*: it reads the slots' records and does not send a slot a worker already started. In
one Region that is right, the started slot's own message is in the same Region's queue and takes
the run over if its worker dies. On a multi-Region table the run may be in another Region, whose
queue holds the only message that would take it over: when that Region is lost with the run in
flight, nothing in this Region took the run over, and it stayed RUNNING until the lost Region came
back (the chain auditor does not look at an ``overlap: allow`` job's runs in flight).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from execution_harness import LAYOUT, LONG, SHORT, Rig, statuses
from factories import spec
from punctual.execution.ports import ClaimOutcome
from punctual.models import Job
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import Timer, slot_key
from punctual.usecases.jobs import JobService, QueueRouting

LEASE_S = 8


def _running_in_region_a(t0: datetime) -> tuple[Rig, Rig, Job, list[Timer], datetime]:
    """Regions a and b over one table (each its own queues); a job's slot running in Region a."""
    store, clock = MemoryStore(), ManualClock(t0)
    region_a, region_b = Rig(store, clock), Rig(store, clock)
    service = JobService(store, region_a.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    job = service.register("default", spec("rate(1 minute)"))[0]
    slot = min(t.due for t in region_a.timers(t0, t0 + timedelta(minutes=2)))
    clock.set(slot + timedelta(seconds=0.2))
    due = region_a.poll()
    [received] = region_a.queues.receive(SHORT, 10, 0, 900)
    claim = region_a.worker(lease_s=LEASE_S).claim(received.message)
    assert claim.outcome is ClaimOutcome.CLAIMED and statuses(region_a.history(job)) == [(1, "RUNNING")]
    clock.advance(3)  # Region b's poller starts again 3 s later: what was due is uncertain
    return region_a, region_b, job, due, slot


def test_a_restarted_regions_poller_sends_a_slot_another_region_is_running(t0: datetime) -> None:
    _, region_b, job, due, slot = _running_in_region_a(t0)
    # When Region b's restarted poller releases the slot again (uncertain)
    region_b.dispatcher(every_region_releases=True).release(due, uncertain=True)
    # Then Region b has its own copy of the running slot (QA27: none: the slot was "started")
    assert [m.slot for m in region_b.queues.all_messages()] == [slot_key(slot)]
    # And when Region a is then lost with the run in flight, Region b's copy waits out the lease
    # and takes the run over as attempt 2: the slot runs once more, not never
    worker_b = region_b.worker(lease_s=LEASE_S)
    region_b.work(worker_b, visibility_s=0)
    assert region_b.target.calls == []
    region_b.clock.advance(LEASE_S + 1)
    region_b.work_until_idle(worker_b)
    assert region_b.target.calls_for(job.id) == [(slot_key(slot), 2)]
    assert statuses(region_b.history(job)) == [(2, "SUCCEEDED")]


def test_one_regions_restarted_poller_still_leaves_a_started_slot_to_its_own_message(t0: datetime) -> None:
    # Given one Region (no every_region_releases): the running slot's message is in its own queue
    region_a, _, _, due, _ = _running_in_region_a(t0)
    held = len(region_a.queues.all_messages())  # (the original, held by its worker)
    # When its restarted poller releases the slot again (uncertain), nothing more is sent
    region_a.dispatcher().release(due, uncertain=True)
    assert len(region_a.queues.all_messages()) == held
