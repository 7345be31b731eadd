"""Each Region keeps its own watermarks and progress marks (multi-Region, the double fault).

On a multi-Region table every Region releases every slot to its own queues, and the claim keeps
each slot to one run. A progress mark or a watermark says what *its writer's* queues were given:
when the writer's Region is lost, what it gave its queues is lost with it. A surviving Region's
poller that resumed from the lost Region's marks would skip those slots until that Region came
back, and for good if it never did. With ``marks_scope`` set to the Region's name (the stack sets
``PUNCTUAL_MARKS_SCOPE``), a Region's pollers read and write only their own Region's marks; the
single-Region deployment (scope "") keeps its keys.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta

from factories import spec
from punctual.dispatch.polling import PollerConfig
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobStore
from punctual.store.dynamo import schema
from punctual.timing.timers import Lane, slot_key
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import LAYOUT, LONG, SHORT, RecordingQueues, Simulation


def in_region(store: JobStore, name: str) -> JobStore:
    """The same table (or memory) as a Region ``name`` sees it: only the marks are its own."""
    view = copy.copy(store)
    view.marks_scope = name  # type: ignore[attr-defined]
    return view


def _world(store: JobStore, t0: datetime) -> tuple[ManualClock, JobStore, JobStore, Simulation]:
    """Regions a and b over ``store``; a simulation of Region a's pollers and workers (its queue,
    claimed 0.3 s after each send; the resend watch on, as on the Lambda lane)."""
    clock = ManualClock(t0 - timedelta(minutes=1))
    a, b = in_region(store, "a"), in_region(store, "b")
    config = PollerConfig(
        layout=LAYOUT,
        short_queue_urls=(SHORT,),
        long_queue_urls=(LONG,),
        concurrency=2,
        resend_after_s=4.0,
        every_region_releases=True,  # as the stack of a multi-Region profile sets it
    )
    return clock, a, b, Simulation(a, clock, config=config, claim_latency_s=0.3)


def _unrun(store: JobStore, job_id: str, minute: datetime) -> list[str]:
    """The slots of ``minute`` with no record: never claimed by Region a's workers."""
    return sorted(s for s in _seconds_of(minute) if store.get_execution("default", job_id, s) is None)


def _every_second_job(store: JobStore, sim: Simulation, clock: ManualClock, start: datetime) -> str:
    service = JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    return service.register("default", spec("rate(1 second)", start_at=start.isoformat()))[0].id


def _seconds_of(minute: datetime) -> set[str]:
    return {slot_key(minute + timedelta(seconds=s)) for s in range(60)}


def test_marks_of_one_region_are_not_seen_by_another(store: JobStore, t0: datetime) -> None:
    a, b = in_region(store, "a"), in_region(store, "b")
    b.advance_watermarks(Lane.FAR, [0, 1], t0)
    b.put_progress(t0, 0, 1, 42_000)
    assert a.get_watermarks(Lane.FAR, [0, 1]) == {} and a.get_progress(t0) == []
    assert store.get_watermarks(Lane.FAR, [0, 1]) == {} and store.get_progress(t0) == []
    a.advance_watermarks(Lane.FAR, [0], t0 - timedelta(minutes=3))
    # each Region's own marks move forward only, as before
    assert a.get_watermarks(Lane.FAR, [0, 1]) == {0: t0 - timedelta(minutes=3)}
    assert b.get_watermarks(Lane.FAR, [0, 1]) == {0: t0, 1: t0}
    assert [m.through_ms for m in b.get_progress(t0)] == [42_000]


def test_the_single_region_keys_are_unchanged() -> None:
    minute = datetime.fromisoformat("2026-11-30T10:00:00+00:00")
    assert schema.watermark_key("far", 3)["pk"]["S"] == "wm#far#3"
    assert schema.progress_key(minute, 0, 1)["pk"]["S"] == f"progress#{schema.minute_key(minute)}"
    assert schema.watermark_key("far", 3, "us-east-2")["pk"]["S"] == "wm#us-east-2#far#3"
    assert schema.progress_pk(minute, "b") == f"progress#b#{schema.minute_key(minute)}"


def test_a_region_a_step_behind_another_still_sends_every_slot(store: JobStore, t0: datetime) -> None:
    # Given two Regions releasing an every-second job, Region b's poller a step ahead of Region
    # a's at every instant (it writes each slot's next timer before Region a reads the bucket),
    # and Region b's queue lost with everything it was given (a single fault: Region b goes down)
    clock, a, b, sim = _world(store, t0)
    job_id = _every_second_job(a, sim, clock, t0)
    lost_queue = RecordingQueues(clock)
    sim.run(
        [t0], t0 + timedelta(minutes=2), pollers=[sim.poller(store=b, queues=lost_queue), sim.poller(store=a)]
    )
    assert _seconds_of(t0) <= {m.slot for _, m in lost_queue.log}
    # Then Region a sent every slot to its own queue too: a chain Region b moved on does not
    # prove the slot reached Region a's queue, and every slot ran there
    assert _seconds_of(t0) <= set(sim.slots(job_id))
    assert _unrun(a, job_id, t0) == []


def test_a_restarted_poller_does_not_resume_from_a_lost_regions_progress(
    store: JobStore, t0: datetime
) -> None:
    # Given two Regions whose pollers both run minute t0 of an every-second job; Region b's
    # queue is lost with everything it was given (its Region goes down, its workers with it)
    clock, a, b, sim = _world(store, t0)
    job_id = _every_second_job(a, sim, clock, t0)
    lost_queue = RecordingQueues(clock)
    node_a, node_b = sim.poller(store=a), sim.poller(store=b, queues=lost_queue)
    # When Region a's poller dies 2 s into the minute and comes back 30 s later, after Region b's
    # poller marked its progress well past the slots in between
    sim.run(
        [t0],
        t0 + timedelta(minutes=2),
        pollers=[node_a, node_b],
        node_kills=[(t0 + timedelta(seconds=2), node_a)],
        restart_s=30.0,
    )
    assert {slot_key(t0 + timedelta(seconds=s)) for s in range(3, 30)} <= {m.slot for _, m in lost_queue.log}
    # Then every slot of the minute ran in Region a: the restart resumed from Region a's own mark
    # and watched what it did not release again; none waits for Region b to come back
    assert _unrun(a, job_id, t0) == []


def test_catch_up_does_not_skip_a_minute_only_a_lost_region_released(store: JobStore, t0: datetime) -> None:
    # Given minute t0 of an every-second job released only by Region b (Region a's poller of that
    # minute never ran), and Region b then lost with its queue
    clock, a, b, sim = _world(store, t0)
    job_id = _every_second_job(a, sim, clock, t0)
    lost_queue = RecordingQueues(clock)
    sim.run([t0], t0 + timedelta(seconds=75), pollers=[sim.poller(store=b, queues=lost_queue)])
    assert _seconds_of(t0) <= {m.slot for _, m in lost_queue.log}  # b had released the minute
    assert len(_unrun(a, job_id, t0)) == 60
    # When Region a's poller of the next minute starts
    sim.run([t0 + timedelta(minutes=1)], t0 + timedelta(minutes=3), pollers=[sim.poller(store=a)])
    # Then its catch-up drained minute t0 from Region a's own watermarks, and every slot ran
    assert _unrun(a, job_id, t0) == []
