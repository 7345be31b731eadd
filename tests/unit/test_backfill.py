"""Backfill: each slot of a past range without an execution runs exactly once, at a bounded rate,
under repeated and concurrent requests, repeated steps and killed workers."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta

import pytest

from execution_harness import LAYOUT, LONG, SHORT, Crash, FakeTarget, Rig
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.queues import QueueRouting
from punctual.models import Execution, ExecutionStatus, Job, JobState, Overlap
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerKind, slot_key
from punctual.usecases.backfill_runner import PENDING, SENT, BackfillRunner
from punctual.usecases.backfills import Backfill, BackfillState
from punctual.usecases.calendars import Calendar
from punctual.usecases.job_errors import InvalidJobError, JobConflictError

S = ExecutionStatus
HOURLY = "cron(0 * * * ? *)"
DAY = datetime.fromisoformat("2026-11-30T00:00:00+00:00")


@pytest.fixture
def rig(t0: datetime) -> Rig:
    return Rig(MemoryStore(), ManualClock(t0))  # t0 is 2026-11-30T10:00:01Z


def runner(rig: Rig, max_parallel: int = 2, max_slots: int = 1000) -> BackfillRunner:
    return BackfillRunner(
        rig.store,
        rig.queues,
        rig.clock,
        LAYOUT,
        QueueRouting((SHORT,), (LONG,)),
        max_parallel=max_parallel,
        max_slots=max_slots,
        step_s=2.0,
    )


def record(job: Job, slot: datetime, status: ExecutionStatus) -> Execution:
    return Execution(job_id=job.id, tenant=job.tenant, slot=slot_key(slot), scheduled_at=slot, status=status)


def drive(rig: Rig, backfill: Backfill, rounds: int = 200) -> tuple[Backfill, int]:
    """Poll and work until the backfill is no longer RUNNING; returns it and the most messages
    that were ever waiting in the queue at once. A killed worker's message comes back after its
    visibility timeout (the clock is moved past it)."""
    worker = rig.worker()
    most = 0
    for _ in range(rounds):
        rig.poll()
        most = max(most, len(rig.queues.all_messages()))
        try:
            rig.work_until_idle(worker)
            rig.clock.advance(2)
        except Crash:
            worker = rig.worker()  # a new process; the dead one's message waits out its visibility
            rig.clock.advance(901)
        current = rig.store.get_backfill(backfill.tenant, backfill.job_id, backfill.id)
        assert current is not None
        if current.state is not BackfillState.RUNNING:
            return current, most
    raise AssertionError("the backfill did not finish")


def test_each_slot_without_a_record_runs_once_at_a_bounded_rate(rig: Rig) -> None:
    # Given an hourly job whose 03:00 slot ran (a backfill of it since its creation) and whose 04:00
    # slot was recorded MISSED
    job = rig.add_job("job-1", HOURLY)
    ran = record(job, DAY + timedelta(hours=3), S.SUCCEEDED).model_copy(
        update={"started_at": rig.clock.now()}
    )
    rig.store.save_execution(ran, None, 0)
    rig.store.save_execution(record(job, DAY + timedelta(hours=4), S.MISSED), None, 0)
    # When the same backfill of [00:00, 10:00) is asked for twice in a row and eight times at once
    first = runner(rig).start("default", job.id, DAY, DAY + timedelta(hours=10))
    again = runner(rig).start("default", job.id, DAY, DAY + timedelta(hours=10))
    answers: list[Backfill] = []
    threads = [
        threading.Thread(
            target=lambda: answers.append(
                runner(rig).start("default", job.id, DAY, DAY + timedelta(hours=10))
            )
        )
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then every request names the same backfill: 9 slots (the MISSED one included), 1 left alone
    assert {b.id for b in [first, again, *answers]} == {first.id}
    assert (len(first.slots), first.already_run, first.max_parallel) == (9, 1, 2)
    done, most = drive(rig, first)
    # And each of the 9 slots started exactly once, never more than 2 at a time; 03:00 not again
    assert done.state is BackfillState.DONE
    calls = Counter(slot for slot, _ in rig.target.calls_for(job.id))
    assert sorted(calls) == sorted(first.slots) and set(calls.values()) == {1}
    assert slot_key(DAY + timedelta(hours=3)) not in calls
    assert most <= 2
    history = {r.slot: r for r in rig.history(job)}
    assert all(history[k].status is S.SUCCEEDED and history[k].backfill == first.id for k in first.slots)
    assert history[slot_key(DAY + timedelta(hours=3))].backfill is None
    assert runner(rig).progress(done) == {"SUCCEEDED": 9}
    assert rig.metrics.total("StartDelayMs") == 0  # a backfilled slot's lateness is not counted
    # And asking again once it is done runs nothing new
    assert runner(rig).start("default", job.id, DAY, DAY + timedelta(hours=10)).state is BackfillState.DONE
    rig.poll()
    assert rig.queues.all_messages() == []


def test_killed_workers_and_repeated_steps_still_start_each_slot_once(rig: Rig) -> None:
    # Given workers that die in the middle of the first and the fourth call
    job = rig.add_job("job-1", HOURLY)
    rig.target = FakeTarget(Crash(), TargetResult.ok(), TargetResult.ok(), Crash(), *[TargetResult.ok()] * 20)
    backfill = runner(rig, max_parallel=3).start("default", job.id, DAY, DAY + timedelta(hours=6))
    # And a poller that released every backfill step twice (a crash after its sends)
    original = rig.dispatcher

    def twice():  # type: ignore[no-untyped-def]
        poller = original()
        release = poller.release

        def again(timers, uncertain=False):  # type: ignore[no-untyped-def]
            release(timers, uncertain)
            return release(timers, uncertain)

        poller.release = again  # type: ignore[method-assign]
        return poller

    rig.dispatcher = twice  # type: ignore[method-assign]
    done, most = drive(rig, backfill)
    # Then every slot succeeded once; a killed attempt was taken over as attempt 2
    assert done.state is BackfillState.DONE and most <= 3
    history = {r.slot: r for r in rig.history(job)}
    assert sorted(history) == sorted(backfill.slots)
    assert all(r.status is S.SUCCEEDED for r in history.values())
    assert sorted(r.attempt for r in history.values()) == [1, 1, 1, 1, 2, 2]
    calls = Counter(rig.target.calls_for(job.id))
    assert set(calls.values()) == {1}  # no (slot, attempt) was started twice


def test_a_cancelled_backfill_sends_no_more_and_its_unstarted_slots_are_dropped(rig: Rig) -> None:
    job = rig.add_job("job-1", HOURLY)
    run = runner(rig)
    backfill = run.start("default", job.id, DAY, DAY + timedelta(hours=5))
    rig.poll()  # the first step sends two slots
    assert len(rig.queues.all_messages()) == 2
    cancelled = run.cancel("default", job.id, backfill.id)
    assert cancelled.state is BackfillState.CANCELLED
    assert run.cancel("default", job.id, backfill.id).state is BackfillState.CANCELLED  # idempotent
    worker = rig.worker()
    for _ in range(5):
        rig.work_until_idle(worker)
        rig.clock.advance(2)
        rig.poll()
    assert rig.target.calls == [] and rig.history(job) == []
    assert run.progress(run.get("default", job.id, backfill.id)) == {PENDING: 3, SENT: 2}
    # The same request again starts afresh over what has not run
    fresh = run.start("default", job.id, DAY, DAY + timedelta(hours=5))
    assert fresh.id == backfill.id and fresh.state is BackfillState.RUNNING and len(fresh.slots) == 5
    done, _ = drive(rig, fresh)
    assert done.state is BackfillState.DONE and len(rig.target.calls) == 5
    with pytest.raises(JobConflictError):
        run.cancel("default", job.id, backfill.id)  # done: nothing left to cancel


def test_dependants_run_only_when_asked(rig: Rig) -> None:
    parent = rig.add_job("parent", HOURLY)
    child = rig.add_job("child", "after(parent)")
    rig.store.set_dependents("default", child.id, [parent.id], present=True)
    run = runner(rig)
    alone, _ = drive(rig, run.start("default", parent.id, DAY, DAY + timedelta(hours=2)))
    assert alone.state is BackfillState.DONE and rig.history(child) == []
    with_children = run.start(
        "default", parent.id, DAY + timedelta(hours=2), DAY + timedelta(hours=4), include_dependants=True
    )
    drive(rig, with_children)
    children = rig.history(child)
    assert sorted(r.slot for r in children) == with_children.slots
    assert all(r.status is S.SUCCEEDED and r.backfill == with_children.id for r in children)


def test_skip_and_queue_jobs_run_one_slot_at_a_time_and_a_paused_job_is_backfilled(rig: Rig) -> None:
    job = rig.add_job("job-1", HOURLY, overlap=Overlap.SKIP)
    rig.store.replace_job(job.model_copy(update={"state": JobState.PAUSED, "version": 2}), 1)
    backfill = runner(rig, max_parallel=5).start("default", job.id, DAY, DAY + timedelta(hours=4))
    assert backfill.max_parallel == 1
    done, most = drive(rig, backfill)
    assert done.state is BackfillState.DONE and most == 1
    assert [r.status for r in rig.history(job)] == [S.SUCCEEDED] * 4  # none was skipped


def test_slots_on_an_excluded_calendar_day_are_not_backfilled(rig: Rig) -> None:
    rig.store.put_calendar(
        Calendar(
            name="h",
            timezone="UTC",
            dates=["2026-11-29"],
            created_at=rig.clock.now(),
            updated_at=rig.clock.now(),
        ),
        None,
    )
    job = rig.add_job("job-1", HOURLY, exclude_calendars=["h"])
    backfill = runner(rig).start("default", job.id, DAY - timedelta(hours=3), DAY + timedelta(hours=2))
    assert (len(backfill.slots), backfill.excluded) == (2, 3)
    assert backfill.slots == [slot_key(DAY), slot_key(DAY + timedelta(hours=1))]


@pytest.mark.parametrize(
    ("schedule", "start", "end", "field", "words"),
    [
        (HOURLY, DAY, DAY, "end", "after start"),
        (HOURLY, DAY, DAY + timedelta(days=1), "end", "in the future"),
        (HOURLY, DAY - timedelta(days=30), DAY, "end", "more than 100 slots"),
        ("after(other)", DAY - timedelta(days=1), DAY, "job_id", "parents"),
        ("delay(5 minutes)", DAY - timedelta(days=1), DAY, "job_id", "no fixed slots"),
    ],
)
def test_bad_ranges_and_jobs_are_refused_naming_the_problem(
    rig: Rig, schedule: str, start: datetime, end: datetime, field: str, words: str
) -> None:
    if schedule.startswith("after"):
        rig.add_job("other", HOURLY)
    job = rig.add_job("job-1", schedule)
    with pytest.raises(InvalidJobError) as refused:
        runner(rig, max_slots=100).start("default", job.id, start, end)
    assert refused.value.field == field and words in str(refused.value)
    assert rig.store.get_backfill("default", job.id, "x") is None
    assert (
        rig.timers(
            rig.clock.now() - timedelta(days=1), rig.clock.now() + timedelta(days=1), TimerKind.BACKFILL
        )
        == []
    )


def test_a_deleted_job_ends_its_backfill(rig: Rig) -> None:
    job = rig.add_job("job-1", HOURLY)
    backfill = runner(rig).start("default", job.id, DAY, DAY + timedelta(hours=5))
    rig.store.delete_job("default", job.id)
    rig.poll()
    ended = rig.store.get_backfill("default", job.id, backfill.id)
    assert (
        ended is not None and ended.state is BackfillState.CANCELLED and ended.reason == "the job was deleted"
    )
    assert rig.queues.all_messages() == []


def test_an_after_child_on_an_excluded_day_is_recorded_excluded_not_run(rig: Rig) -> None:
    now = rig.clock.now()
    rig.store.put_calendar(Calendar(name="h", dates=["2026-11-30"], created_at=now, updated_at=now), None)
    parent = rig.add_job("parent", HOURLY)
    child = rig.add_job("child", "after(parent)", exclude_calendars=["h"])
    rig.store.set_dependents("default", child.id, [parent.id], present=True)
    backfill = runner(rig).start(
        "default", parent.id, DAY - timedelta(hours=1), DAY + timedelta(hours=1), include_dependants=True
    )
    drive(rig, backfill)
    children = {r.slot: r for r in rig.history(child)}
    assert children[slot_key(DAY - timedelta(hours=1))].status is S.SUCCEEDED  # the 29th: not excluded
    excluded = children[slot_key(DAY)]
    assert excluded.status is S.EXCLUDED and excluded.error == "excluded by calendar 'h' (version 1)"
    assert [slot for slot, _ in rig.target.calls_for(child.id)] == [slot_key(DAY - timedelta(hours=1))]


def test_a_sent_slot_whose_message_was_lost_is_sent_again_after_the_dedup_window(rig: Rig) -> None:
    job = rig.add_job("job-1", HOURLY)
    backfill = runner(rig).start("default", job.id, DAY, DAY + timedelta(hours=2))
    rig.poll()  # the first step sends both slots
    for received in rig.queues.receive(SHORT, 10, 0, 30):
        rig.queues.delete(SHORT, received.receipt)  # and the messages are lost
    worker = rig.worker()
    for _ in range(200):  # steps every 2 s: nothing to run, until the resend
        rig.clock.advance(2)
        rig.poll()
        rig.work_until_idle(worker)
        current = rig.store.get_backfill("default", job.id, backfill.id)
        if current is not None and current.state is BackfillState.DONE:
            break
    assert current is not None and current.state is BackfillState.DONE
    assert Counter(slot for slot, _ in rig.target.calls_for(job.id)) == {k: 1 for k in backfill.slots}
    assert rig.clock.now() - backfill.created_at >= timedelta(seconds=360)  # not before the window


def test_a_job_created_again_at_a_deleted_jobs_id_backfills_the_slots_the_earlier_one_ran(rig: Rig) -> None:
    """As an EventBridge schedule deleted and created again under its name: the new job's backfill
    runs the slots the earlier job ran (its records are replaced), but never one of its own."""

    def ran(job: Job, slot: datetime, started: datetime, status: ExecutionStatus = S.SUCCEEDED) -> None:
        done = record(job, slot, status).model_copy(update={"started_at": started, "finished_at": started})
        rig.store.save_execution(done, None, 0)

    # Given an hourly job whose 01:00 slot failed and 02:00 slot succeeded (run by hand since its
    # creation), and a done backfill of [00:00, 03:00) of it (which ran 00:00)
    old = rig.add_job("job-1", HOURLY)
    ran(old, DAY + timedelta(hours=1), rig.clock.now(), S.FAILED)
    ran(old, DAY + timedelta(hours=2), rig.clock.now())
    first, _ = drive(rig, runner(rig).start("default", old.id, DAY, DAY + timedelta(hours=3)))
    assert first.state is BackfillState.DONE and first.slots == [slot_key(DAY)]
    # When the job is deleted and created again at its id two minutes later, and the new job's own
    # 10:00 slot is recorded as begun 10 s before its creation (the nodes' clocks differ)
    rig.store.delete_job("default", old.id)
    rig.clock.advance(120)
    new = rig.add_job("job-1", HOURLY)
    ten = DAY + timedelta(hours=10)
    ran(new, ten, new.created_at - timedelta(seconds=10))
    # Then the same backfill request is planned anew for the new job: all three slots, none left alone
    end = DAY + timedelta(hours=3)
    again = runner(rig).start("default", new.id, DAY, end)
    assert again.id == first.id and again.created_at > first.created_at
    assert (again.slots, again.already_run, again.state) == (
        [slot_key(DAY + timedelta(hours=h)) for h in range(3)],
        0,
        BackfillState.RUNNING,
    )
    # And until a worker claims them, the earlier job's records are not counted as this backfill's
    rig.poll()
    assert runner(rig).progress(rig.store.get_backfill("default", new.id, again.id)) == {SENT: 2, PENDING: 1}
    done, _ = drive(rig, again)
    # And each ran once for the new job, recorded as the new backfill's
    assert done.state is BackfillState.DONE
    calls = Counter(slot for slot, _ in rig.target.calls_for(new.id))
    assert calls == {
        slot_key(DAY): 2,
        slot_key(DAY + timedelta(hours=1)): 1,
        slot_key(DAY + timedelta(hours=2)): 1,
    }
    history = {r.slot: r for r in rig.history(new)}
    assert all(history[k].status is S.SUCCEEDED and history[k].backfill == again.id for k in again.slots)
    assert runner(rig).progress(done) == {"SUCCEEDED": 3}
    # And a backfill over the new job's own 10:00 run (within a minute of the creation) leaves it alone
    own = runner(rig).start("default", new.id, ten, ten + timedelta(minutes=1))
    assert (own.slots, own.already_run, own.state) == ([], 1, BackfillState.DONE)


def test_a_running_backfill_of_a_deleted_job_ends_when_a_job_is_created_again_at_its_id(rig: Rig) -> None:
    job = rig.add_job("job-1", HOURLY)
    backfill = runner(rig).start("default", job.id, DAY, DAY + timedelta(hours=5))
    rig.store.delete_job("default", job.id)
    rig.clock.advance(120)
    rig.add_job("job-1", HOURLY)  # before the backfill's next step
    rig.poll()
    ended = rig.store.get_backfill("default", job.id, backfill.id)
    assert (
        ended is not None and ended.state is BackfillState.CANCELLED and ended.reason == "the job was deleted"
    )
    assert rig.queues.all_messages() == []
    assert rig.target.calls_for(job.id) == []


def test_a_backfilled_missed_slot_counts_as_sent_until_claimed_and_is_sent_again_if_lost(rig: Rig) -> None:
    """A MISSED record is the plan's, not the run's: a step must not count its slot ended (it would
    never be run if its message were lost)."""
    job = rig.add_job("job-1", HOURLY)
    rig.store.save_execution(record(job, DAY, S.MISSED), None, 0)
    backfill = runner(rig).start("default", job.id, DAY, DAY + timedelta(hours=1))
    rig.poll()  # the first step sends the slot
    for received in rig.queues.receive(SHORT, 10, 0, 30):
        rig.queues.delete(SHORT, received.receipt)  # and its message is lost
    rig.clock.advance(2)
    rig.poll()
    current = rig.store.get_backfill("default", job.id, backfill.id)
    assert current is not None and current.state is BackfillState.RUNNING
    assert runner(rig).progress(current) == {SENT: 1}
    done, _ = drive(rig, current, rounds=400)
    assert done.state is BackfillState.DONE
    assert [slot for slot, _ in rig.target.calls_for(job.id)] == [slot_key(DAY)]


@pytest.mark.parametrize("overlap", [Overlap.SKIP, Overlap.QUEUE])
def test_a_dependant_that_runs_one_slot_at_a_time_runs_every_backfilled_slot(
    rig: Rig, overlap: Overlap
) -> None:
    """QA27: ``include_dependants`` runs the children of each backfilled slot (documented), but a
    child with overlap ``skip`` had the slots whose parent succeeded while its run of an earlier
    one lasted recorded SKIPPED ("overlap: slot ... had not finished"): in local mode, four of a
    backfill's six. A backfilled slot waits for its turn instead, as under ``queue``."""
    parent = rig.add_job("parent", HOURLY)
    child = rig.add_job("child", "after(parent)", overlap=overlap)
    rig.store.set_dependents("default", child.id, [parent.id], present=True)

    def lasting(ctx: SlotContext) -> TargetResult:
        # While each child run lasts, another worker runs what comes meanwhile: the backfill's
        # next parent slot, and so that slot's child
        if ctx.job_id == child.id:
            rig.clock.advance(3)
            rig.poll()
            rig.work_until_idle(rig.worker())
        return TargetResult.ok()

    rig.target = FakeTarget(lasting)
    # When the parent is backfilled over three hours with its dependants
    backfill = runner(rig, max_parallel=1).start(
        "default", parent.id, DAY, DAY + timedelta(hours=3), include_dependants=True
    )
    done, _ = drive(rig, backfill)
    # Then every backfilled slot of the child ran, once: none was SKIPPED
    assert done.state is BackfillState.DONE
    children = {r.slot: r for r in rig.history(child)}
    assert {k: r.status for k, r in children.items()} == {k: S.SUCCEEDED for k in backfill.slots}
    assert all(r.backfill == backfill.id for r in children.values())
    assert sorted(rig.target.calls_for(child.id)) == [(k, 1) for k in backfill.slots]
