"""A job created paused (``state: PAUSED``, CreateSchedule ``State: DISABLED``, CDK ``enabled=False``)
was never enabled: its resume starts afresh and owes no slot from before it, as EventBridge
Scheduler enabling a schedule created DISABLED, or a CronJob's ``suspend`` lifted. (Review: one
created at 10:00 and resumed at 12:00:05 ran 60 slots at once and recorded the hour before MISSED.)
A job paused after it ran still owes what its catch-up policy says."""

from __future__ import annotations

from datetime import datetime

from execution_harness import LAYOUT, LONG, SHORT, Rig
from factories import spec
from punctual.models import JobState
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.usecases.jobs import JobService, QueueRouting


def _service(rig: Rig) -> JobService:
    return JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))


def _released_slots(rig: Rig) -> list[str]:
    return sorted(m.message.slot for m in rig.queues.queues.get(SHORT, []))


def test_a_job_created_paused_owes_nothing_on_its_resume(t0: datetime) -> None:
    rig = Rig(MemoryStore(), ManualClock(t0))
    service = _service(rig)
    job, _ = service.register("default", spec("rate(1 minute)"), job_id="off", paused=True)
    assert job.state is JobState.PAUSED and job.paused_at is None
    rig.clock.advance(2 * 3600 + 5)
    resumed = service.resume("default", "off")
    assert resumed.state is JobState.ENABLED
    rig.poll()
    assert _released_slots(rig) == []  # nothing from the two hours before
    assert service.get("default", "off").skipped_slots == 0  # nor recorded MISSED
    rig.clock.advance(60)
    rig.poll()
    assert len(_released_slots(rig)) == 1  # its first slot after the resume


def test_a_job_paused_after_it_ran_still_owes_its_catch_up(t0: datetime) -> None:
    rig = Rig(MemoryStore(), ManualClock(t0))
    service = _service(rig)
    service.register("default", spec("rate(1 minute)", catchup={"policy": "all"}), job_id="on")
    rig.clock.advance(30)
    service.pause("default", "on")
    rig.clock.advance(5 * 60)
    service.resume("default", "on")
    rig.poll()
    assert len(_released_slots(rig)) == 5  # the five slots due while it was paused
