"""A long run of slots a pause owes and the catch-up policy drops is one MISSED range record, keyed
by its first slot. That first slot is the first one at or after the pause's instant, and it may
have run already: released just before the pause landed (the API node's clock a fraction of a
second behind the poller's, or a poller a little ahead). The range record's write found that
slot's record, took it for "recorded before", and the whole run went unrecorded (QA23: a
``rate(20 seconds)`` job paused for two hours and resumed with catch-up ``all`` had its first hour,
179 slots older than the window, in no record, no ``skipped_slots``, no ``missed`` event). The
range now starts at the first slot that has no record. The same held for the range an ``after()``
child gets under its parent's: a child whose first slot of it was already SKIPPED (its other
parent failed that slot) had the rest of the range in no record."""

from __future__ import annotations

from datetime import datetime, timedelta

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig
from factories import spec
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock, OffsetClock
from punctual.store.base import JobStore
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_instant, slot_key
from punctual.usecases.jobs import JobService, QueueRouting

PERIOD = timedelta(seconds=20)


def _covered(rig: Rig, job_id: str, period: timedelta = PERIOD) -> tuple[list[str], list[str]]:
    """The slots the job's records stand for: (not MISSED, MISSED), a range record's counted out."""
    ran, missed = [], []
    for record in rig.store.list_executions("default", job_id, limit=500).items:
        if record.status is ExecutionStatus.MISSED:
            first = slot_instant(record.slot)
            missed += [slot_key(first + n * period) for n in range(record.slot_count)]
            assert missed[-1] == (record.last_slot or record.slot)
        else:
            ran.append(record.slot)
    return sorted(ran), sorted(missed)


def test_every_slot_of_a_long_pause_is_recorded_when_the_first_one_owed_ran(
    store: JobStore, t0: datetime
) -> None:
    rig = Rig(store, ManualClock(t0))  # DynamoDB too: its conflict answers the record it met
    routing = QueueRouting((SHORT,), (LONG,))
    jobs = JobService(rig.store, rig.queues, rig.clock, LAYOUT, routing)
    api_behind = JobService(rig.store, rig.queues, OffsetClock(rig.clock, -0.2), LAYOUT, routing)
    jobs.register("default", spec("rate(20 seconds)", catchup={"policy": "all"}), job_id="r")
    worker = rig.worker()
    first = t0 + PERIOD
    rig.advance_to(first + 2 * PERIOD)  # 10:01:00: the 10:01:00 slot is released and runs
    rig.poll()
    rig.work_until_idle(worker)
    api_behind.pause("default", "r")  # paused_at 10:00:59.8: that slot is the first one owed
    rig.advance_to(first + 2 * PERIOD + timedelta(hours=2))
    rig.poll()
    resumed_at = rig.clock.now()
    jobs.resume("default", "r")
    for _ in range(10):  # the catch-up goes 30 slots a release
        rig.poll()
        rig.work_until_idle(worker)

    ran, missed = _covered(rig, "r")

    due = [slot_key(first + n * PERIOD) for n in range((resumed_at - first) // PERIOD + 1)]
    assert sorted(set(ran) | set(missed)) == due  # each slot is accounted for...
    assert not set(ran) & set(missed)  # ...once
    window = slot_key(resumed_at - timedelta(hours=1))  # catch-up all: the last hour runs
    assert missed == [slot for slot in due if first + 2 * PERIOD < slot_instant(slot) and slot < window]
    assert jobs.get("default", "r").skipped_slots == len(missed)


def _child_under_a_paused_parent(t0: datetime, fails_at: int) -> tuple[Rig, JobService]:
    """c = after(a, b): b fails its slot ``fails_at`` minutes after t0 for good (the child's is
    SKIPPED); a is paused from 10:01:30 for two hours, then resumed with catch-up none (its slots
    MISSED, in ranges, and the child's under them)."""
    rig = Rig(MemoryStore(), ManualClock(t0))
    jobs = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    fails = slot_key(t0 + timedelta(minutes=fails_at))

    def script(ctx: SlotContext) -> TargetResult:
        return TargetResult.permanent("boom") if (ctx.job_id, ctx.slot) == ("b", fails) else TargetResult.ok()

    rig.target = FakeTarget(script)
    worker = rig.worker()
    jobs.register("default", spec("cron(* * * * ? *)", catchup={"policy": "none"}), job_id="a")
    jobs.register("default", spec("cron(* * * * ? *)", retry={"max_attempts": 1}), job_id="b")
    jobs.register("default", spec("after(a, b)"), job_id="c")
    rig.advance_to(t0 + timedelta(minutes=1, seconds=30))
    rig.poll()
    rig.work_until_idle(worker)
    jobs.pause("default", "a")  # 10:01:30: a's slots from 10:02 on are owed
    while rig.clock.now() < t0 + timedelta(hours=2, minutes=2):  # b runs on, a stays paused
        rig.clock.advance(20)
        rig.poll(timedelta(minutes=5))
        rig.work_until_idle(worker)
    jobs.resume("default", "a")  # catch-up none: a's two hours are MISSED, in ranges
    rig.poll(timedelta(minutes=5))
    rig.work_until_idle(worker)
    return rig, jobs


def test_a_childs_range_under_a_missed_parent_range_starts_past_its_recorded_slot(t0: datetime) -> None:
    rig, jobs = _child_under_a_paused_parent(t0, 2)  # b's 10:02 fails: the child's 10:02 is SKIPPED
    minute = timedelta(minutes=1)
    fails = slot_key(t0 + 2 * minute)

    ran, missed = _covered(rig, "c", minute)

    assert ran == [slot_key(t0 + minute), fails]  # 10:01 ran, 10:02 SKIPPED
    owed = [slot_key(t0 + n * minute) for n in range(3, 123)]  # 10:03 .. 12:02
    assert missed == owed  # each slot a's ranges stand for is MISSED under them
    assert jobs.get("default", "c").skipped_slots == len(owed)


def test_a_childs_range_leaves_out_a_slot_it_recorded_in_the_middle(t0: datetime) -> None:
    # b fails the child's 10:30 for good, in the middle of a's paused span: the child's range under
    # a's leaves that slot out (QA23: it was SKIPPED and counted MISSED too)
    rig, jobs = _child_under_a_paused_parent(t0, 30)
    minute = timedelta(minutes=1)

    ran, missed = _covered(rig, "c", minute)

    assert ran == [slot_key(t0 + minute), slot_key(t0 + 30 * minute)]
    owed = [slot_key(t0 + n * minute) for n in range(2, 123) if n != 30]  # 10:02 .. 12:02 but 10:30
    assert missed == owed
    assert jobs.get("default", "c").skipped_slots == len(owed)
