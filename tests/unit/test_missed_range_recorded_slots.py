"""A MISSED range record stands for a run of slots that did not run; a slot of that run that has a
record of its own (a backfill ran it while the job was paused) is not one of them. QA23: the
range was written over it, so the slot was both run and counted MISSED (``skipped_slots`` one too
many per slot), against "each slot exactly once: run or recorded, never both"."""

from __future__ import annotations

from datetime import datetime, timedelta

from test_missed_range_first_slot_ran import _covered

from execution_harness import LAYOUT, LONG, SHORT, Rig
from factories import spec
from punctual.models import Execution, ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobStore
from punctual.timing.timers import slot_key
from punctual.usecases.backfill_runner import BackfillRunner
from punctual.usecases.backfills import BackfillState
from punctual.usecases.jobs import JobService, QueueRouting

MINUTE = timedelta(minutes=1)


def test_a_range_leaves_out_the_slots_a_backfill_ran_during_the_pause(store: JobStore, t0: datetime) -> None:
    rig = Rig(store, ManualClock(t0))
    routing = QueueRouting((SHORT,), (LONG,))
    jobs = JobService(rig.store, rig.queues, rig.clock, LAYOUT, routing)
    jobs.register("default", spec("rate(1 minute)", catchup={"policy": "none"}), job_id="r")
    worker = rig.worker()
    jobs.pause("default", "r")  # 10:00:00: every slot from 10:01 on is owed
    rig.advance_to(t0 + timedelta(hours=2))
    runner = BackfillRunner(rig.store, rig.queues, rig.clock, LAYOUT, routing, 4, 1000, 2.0)
    backfill = runner.start("default", "r", t0 + 40 * MINUTE, t0 + 45 * MINUTE)  # 10:40 .. 10:44
    for _ in range(30):
        rig.poll()
        rig.work_until_idle(worker)
        rig.clock.advance(2)
        found = rig.store.get_backfill("default", "r", backfill.id)
        if found is not None and found.state is not BackfillState.RUNNING:
            break
    resumed_at = rig.clock.now()
    jobs.resume("default", "r")  # catch-up none: the two hours owed are MISSED, in ranges
    for _ in range(5):
        rig.poll()
        rig.work_until_idle(worker)

    ran, missed = _covered(rig, "r", MINUTE)

    backfilled = [slot_key(t0 + n * MINUTE) for n in range(40, 45)]
    assert ran[: len(backfilled)] == backfilled
    assert not set(ran) & set(missed)  # each slot run or recorded MISSED, never both
    owed = [slot_key(t0 + n * MINUTE) for n in range(1, (resumed_at - t0) // MINUTE + 1)]
    assert sorted(set(missed) | set(backfilled)) == [s for s in owed if s in set(missed) | set(backfilled)]
    assert set(owed) - set(ran) <= set(missed)  # every owed slot that did not run is MISSED
    assert jobs.get("default", "r").skipped_slots == len(missed)


def test_a_late_message_for_a_slot_a_range_recorded_missed_does_not_run(
    store: JobStore, t0: datetime
) -> None:
    """The other half: a slot's message still in a queue when a later release records its slot
    MISSED inside a range (a repeat of a release whose sends landed, workers behind). Its claim
    wrote the slot's first record and ran it, though the range counts it MISSED ("MISSED is
    final"). A claim of a scheduled slot this late looks for a range over it and drops the message;
    a slot in no range runs."""
    rig = Rig(store, ManualClock(t0))
    job = rig.add_job("r", "rate(1 minute)")
    first, last = t0 + MINUTE, t0 + 60 * MINUTE
    missed = Execution(
        job_id="r", tenant=job.tenant, slot=slot_key(first), scheduled_at=first, status=ExecutionStatus.MISSED,
        error="catch-up policy none", last_slot=slot_key(last), slot_count=60,
    )  # fmt: skip
    rig.store.save_execution(missed, None, 2_000_000_000)
    rig.advance_to(last + 2 * MINUTE)
    inside, outside = t0 + 30 * MINUTE, last + MINUTE
    rig.send(rig.message(job, inside), rig.message(job, outside))

    rig.work_until_idle(rig.worker())

    assert [slot for slot, _ in rig.target.calls_for("r")] == [slot_key(outside)]
    assert rig.store.get_execution(job.tenant, "r", slot_key(inside)) is None  # the range's, still


def test_a_range_is_cut_around_the_records_in_it(t0: datetime) -> None:
    """A slot's record and a range record already in the run (a repeat of a release that died
    after writing part of it) are each left out whole; a range with nothing in it is itself."""
    from punctual.timing.missed_ranges import without_taken

    at = [t0 + n * MINUTE for n in range(130)]

    def step(after: datetime) -> datetime | None:
        return after - timedelta(seconds=after.second, microseconds=after.microsecond) + MINUTE

    taken = [(at[40], at[40], 1), (at[45], at[90], 46)]
    for period in (MINUTE, None):  # counted (rate) and stepped (other schedules)
        runs = without_taken(at[1], at[120], 120, taken, step, period, None)
        assert runs == [(at[1], at[39], 39), (at[41], at[44], 4), (at[91], at[120], 30)]
        assert without_taken(at[1], at[120], 120, [], step, period, None) == [(at[1], at[120], 120)]
        assert without_taken(at[1], at[120], 120, [(at[120], at[120], 1)], step, period, None) == [
            (at[1], at[119], 119)
        ]


def test_a_range_a_repeated_release_extends_is_told_as_it_now_is(t0: datetime) -> None:
    """QA23: a repeated release that finds a longer run than the first recorded grows the range
    record, and counts what it gained, but told the event (and the children) the range as it was:
    the added slots were never announced."""
    from factories import job as make_job
    from punctual.delivery.notifications import EventPublisher, MemoryEventSink, Notifier
    from punctual.dispatch.polling.unrun import UnrunSlots, range_record
    from punctual.dispatch.queues import MemoryQueues
    from punctual.runtime.observability import RecordingMetrics
    from punctual.store.memory import MemoryStore
    from punctual.timing.missed_ranges import MissedRange

    store, clock, sink = MemoryStore(), ManualClock(t0 + timedelta(hours=4)), MemoryEventSink()
    job = make_job("j", "cron(* * * * ? *)", now=t0 - timedelta(days=1))
    store.create_job(job, None, max_jobs=10)
    unrun = UnrunSlots(
        store, MemoryQueues(now=clock.now), clock, 30, RecordingMetrics(), Notifier(EventPublisher(sink)),
        lambda _: "short",
    )  # fmt: skip
    jobs = {(job.tenant, job.id): job}
    first = t0

    def missed(count: int) -> MissedRange:
        return MissedRange(first, first + timedelta(minutes=count - 1), count, "catch-up none")

    assert unrun.record_missed([range_record(job, missed(40), clock.now())], jobs) == 40
    assert unrun.record_missed([range_record(job, missed(50), clock.now())], jobs) == 10  # the gain
    counts = [e.detail.get("slot_count") for e in sink.events if e.detail_type == "Slot Missed"]
    assert counts == [40, 50]
