"""A replace that drops an ``after(...)`` parent owes the slots its remaining parents completed
(QA: ``after(a, b)`` made ``after(a)`` after ``a`` succeeded for 10:01 and before ``b`` did: the
child's 10:01 never ran and had no record), on both stores; what it does not owe stays unsent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig
from factories import spec
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.polling.release import unclaimed_child
from punctual.models import ExecutionStatus, JobState
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.slots import sent_check_timer
from punctual.usecases.calendar_service import CalendarService
from punctual.usecases.calendars import CalendarSpec
from punctual.usecases.jobs import JobService, QueueRouting

TENANT = "default"
MINUTE = "cron(* * * * ? *)"
RETRY_IN_90S = {"max_attempts": 3, "backoff": "fixed", "base_seconds": 90, "jitter": False}


def T(h: int, m: int, s: float = 0) -> datetime:
    return datetime(2026, 11, 30, h, m, tzinfo=UTC) + timedelta(seconds=s)


class World:
    """The job service, the pollers and a worker on one manual clock; ``b`` fails its 10:01 once
    (its retry comes 90 s later), every other call succeeds."""

    def __init__(self, store: Any) -> None:
        self.clock = ManualClock(T(9, 59, 30))
        self.store = store
        self.calls: list[tuple[str, str]] = []

        def run(ctx: SlotContext) -> TargetResult:
            self.calls.append((ctx.job_id, ctx.slot))
            if ctx.job_id == "b" and ctx.slot == "2026-11-30T10:01:00Z" and ctx.attempt == 1:
                return TargetResult.retryable("HTTP 503")
            return TargetResult.ok()

        self.rig = Rig(store, self.clock, target=FakeTarget(run))
        self.jobs = JobService(store, self.rig.queues, self.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
        self.calendars = CalendarService(store, self.clock)
        self.worker = self.rig.worker()

    def until(self, end: datetime) -> None:
        while self.clock.now() < end:
            self.clock.set(min(self.clock.now() + timedelta(seconds=1), end))
            self.rig.poll()
            self.rig.work_until_idle(self.worker, SHORT, rounds=200)

    def runs(self, job_id: str) -> list[str]:
        return sorted(slot for job, slot in self.calls if job == job_id)

    def records(self, job_id: str) -> dict[str, ExecutionStatus]:
        page = self.store.list_executions(TENANT, job_id, limit=100)
        return {record.slot: record.status for record in page.items}


def _three(world: World, child: str = "after(a, b)", **child_spec: Any) -> None:
    world.jobs.register(TENANT, spec(MINUTE), job_id="a")
    world.jobs.register(TENANT, spec(MINUTE, retry=RETRY_IN_90S), job_id="b")
    world.jobs.register(TENANT, spec(child, **child_spec), job_id="c")


def test_dropping_a_parent_runs_the_slot_the_other_parents_completed(store) -> None:  # type: ignore[no-untyped-def]
    world = World(store)
    _three(world)
    world.until(T(10, 1, 5))  # a ran 10:01; b failed it and waits for its retry
    assert ("a", "2026-11-30T10:01:00Z") in world.calls
    assert world.runs("c") == ["2026-11-30T10:00:00Z"]

    world.jobs.replace(TENANT, "c", spec("after(a)"))
    world.until(T(10, 3, 10))

    assert world.runs("c") == [  # 10:01 once (sent by the replace), each later slot once
        "2026-11-30T10:00:00Z",
        "2026-11-30T10:01:00Z",
        "2026-11-30T10:02:00Z",
        "2026-11-30T10:03:00Z",
    ]
    assert world.records("c")["2026-11-30T10:01:00Z"] is ExecutionStatus.SUCCEEDED


def test_a_slot_the_new_parents_have_not_completed_is_not_sent() -> None:
    world = World(MemoryStore())
    world.jobs.register(TENANT, spec(MINUTE), job_id="d")
    _three(world)
    world.until(T(10, 1, 5))

    # b is swapped for d, which has also run 10:01 but whose success this child never recorded
    # (it was not its parent then): nothing is owed; slots after the replace wait for a and d.
    world.jobs.replace(TENANT, "c", spec("after(a, d)"))
    world.until(T(10, 2, 30))

    assert world.runs("c") == ["2026-11-30T10:00:00Z", "2026-11-30T10:02:00Z"]
    assert "2026-11-30T10:01:00Z" not in world.records("c")


def test_a_slot_already_sent_is_not_sent_again() -> None:
    world = World(MemoryStore())
    _three(world)
    world.until(T(10, 0, 30))
    world.jobs.replace(TENANT, "c", spec("after(a)"))
    world.until(T(10, 1, 30))

    assert world.runs("c") == ["2026-11-30T10:00:00Z", "2026-11-30T10:01:00Z"]


def test_an_owed_slot_on_an_excluded_day_is_recorded_excluded_not_run() -> None:
    world = World(MemoryStore())
    _three(world)
    world.until(T(10, 1, 5))
    # the replace drops b and excludes the day: 10:01 is owed, and recorded EXCLUDED, not run
    world.calendars.put(TENANT, "today", CalendarSpec(ranges=[{"start": "2026-11-30", "end": "2026-12-01"}]))
    world.jobs.replace(TENANT, "c", spec("after(a)", exclude_calendars=["today"]))
    world.until(T(10, 1, 30))

    assert "2026-11-30T10:01:00Z" not in world.runs("c")
    assert world.records("c")["2026-11-30T10:01:00Z"] is ExecutionStatus.EXCLUDED


def test_an_after_job_runs_only_the_slots_inside_its_start_and_end() -> None:
    world = World(MemoryStore())
    world.jobs.register(TENANT, spec(MINUTE), job_id="a")
    world.jobs.register(TENANT, spec("after(a)", end_at="2026-11-30T10:01:30Z"), job_id="ends")
    world.jobs.register(TENANT, spec("after(a)", start_at="2026-11-30T10:01:30Z"), job_id="starts")
    world.until(T(10, 3, 30))

    assert world.runs("ends") == ["2026-11-30T10:00:00Z", "2026-11-30T10:01:00Z"]
    assert world.jobs.get(TENANT, "ends").state.value == "COMPLETED"  # as a scheduled job past its end
    assert world.runs("starts") == ["2026-11-30T10:02:00Z", "2026-11-30T10:03:00Z"]
    assert world.jobs.get(TENANT, "starts").state.value == "ENABLED"


def test_a_slot_still_owed_behind_a_later_dispatched_one_is_sent() -> None:
    # Review: the read stopped at the newest dispatched slot; parents' slots end out of order
    world = World(MemoryStore())
    _three(world)
    world.until(T(10, 2, 10))  # c's 10:02 ran; its 10:01 waits for b's retry (at 10:02:31)
    assert world.runs("c") == ["2026-11-30T10:00:00Z", "2026-11-30T10:02:00Z"]
    world.jobs.replace(TENANT, "c", spec("after(a)"))
    world.until(T(10, 3, 10))
    assert world.runs("c") == [f"2026-11-30T10:0{m}:00Z" for m in range(4)]


def test_a_slot_a_dropped_parent_failed_for_good_stays_unrun() -> None:
    # the old spec decided it (b's slot failed: the child does not run); the replace changes the
    # slots still open, not the ones decided
    world = World(MemoryStore())
    world.jobs.register(TENANT, spec(MINUTE), job_id="a")
    world.jobs.register(TENANT, spec(MINUTE, retry={"max_attempts": 1}), job_id="b")
    world.jobs.register(TENANT, spec("after(a, b)"), job_id="c")
    world.until(T(10, 1, 5))
    assert world.records("b")["2026-11-30T10:01:00Z"] is ExecutionStatus.FAILED
    world.jobs.replace(TENANT, "c", spec("after(a)"))
    world.until(T(10, 2, 10))
    assert world.runs("c") == ["2026-11-30T10:00:00Z", "2026-11-30T10:02:00Z"]


def test_owed_slots_keep_to_the_new_window_and_a_paused_child_records_them() -> None:
    world = World(MemoryStore())
    _three(world)
    world.until(T(10, 1, 5))
    world.jobs.replace(TENANT, "c", spec("after(a)", start_at="2026-11-30T10:01:30Z"))
    world.until(T(10, 1, 20))
    assert "2026-11-30T10:01:00Z" not in world.records("c")  # before its start_at: not its slot

    paused = World(MemoryStore())
    _three(paused)
    paused.until(T(10, 1, 5))
    paused.jobs.pause(TENANT, "c")
    paused.jobs.replace(TENANT, "c", spec("after(a)"))
    paused.until(T(10, 1, 20))
    # Review: no record at all; now the slot it owed is recorded, not run
    assert paused.records("c")["2026-11-30T10:01:00Z"] is ExecutionStatus.SKIPPED
    assert "2026-11-30T10:01:00Z" not in paused.runs("c")


def test_a_child_completed_past_its_end_still_runs_an_earlier_slot() -> None:
    # Review: 10:02 ended the child (past end_at) before b's retried 10:01 succeeded: 10:01 was lost
    world = World(MemoryStore())
    world.jobs.register(TENANT, spec(MINUTE), job_id="a")
    world.jobs.register(TENANT, spec(MINUTE, retry=RETRY_IN_90S), job_id="b")
    world.jobs.register(TENANT, spec("after(a, b)", end_at="2026-11-30T10:01:30Z"), job_id="c")
    world.until(T(10, 3, 10))
    assert world.jobs.get(TENANT, "c").state.value == "COMPLETED"
    assert world.runs("c") == ["2026-11-30T10:00:00Z", "2026-11-30T10:01:00Z"]


def test_slots_a_dropped_parent_never_had_are_not_run() -> None:
    # Review: after(a, b) with b every 5 minutes, made after(a): a's minutes b never has were run
    world = World(MemoryStore())
    world.jobs.register(TENANT, spec(MINUTE), job_id="a")
    world.jobs.register(TENANT, spec("cron(0/5 * * * ? *)"), job_id="b")
    world.jobs.register(TENANT, spec("after(a, b)"), job_id="c")
    world.until(T(10, 7, 5))
    assert world.runs("c") == ["2026-11-30T10:00:00Z", "2026-11-30T10:05:00Z"]
    world.jobs.replace(TENANT, "c", spec("after(a)"))
    world.until(T(10, 8, 10))
    assert world.runs("c") == ["2026-11-30T10:00:00Z", "2026-11-30T10:05:00Z", "2026-11-30T10:08:00Z"]


def test_a_child_slot_is_sent_again_to_a_child_completed_past_its_end() -> None:
    world = World(MemoryStore())
    child = spec("after(b)", end_at="2026-11-30T10:01:30Z")
    world.jobs.register(TENANT, spec(MINUTE), job_id="b")
    job, _ = world.jobs.register(TENANT, child, job_id="c")
    timer = sent_check_timer(LAYOUT, job, "2026-11-30T10:01:00Z", T(10, 1, 5))
    done = job.model_copy(update={"state": JobState.COMPLETED})
    assert unclaimed_child(timer, done, None, T(10, 1, 5)) is not None  # its slot before end_at
    ended = done.model_copy(update={"end_at": None})
    assert unclaimed_child(timer, ended, None, T(10, 1, 5)) is None


@pytest.mark.parametrize("b_retries", [True, False])
def test_a_dropped_after_parent_leaves_open_the_slots_its_own_parents_leave_open(b_retries: bool) -> None:
    # Review: a dropped parent that is itself an after() job, with no record for the slot yet,
    # counted as having closed it: after(a, g) made after(a) while g's parent b waited for its
    # retry of 10:01 lost the child's 10:01, with no record
    world = World(MemoryStore())
    world.jobs.register(TENANT, spec(MINUTE), job_id="a")
    retry = RETRY_IN_90S if b_retries else {"max_attempts": 1}
    world.jobs.register(TENANT, spec(MINUTE, retry=retry), job_id="b")
    world.jobs.register(TENANT, spec("after(b)"), job_id="g")
    world.jobs.register(TENANT, spec("after(g)"), job_id="h")  # two after() levels deep
    world.jobs.register(TENANT, spec("after(a, h)"), job_id="c")
    world.until(T(10, 1, 5))
    if b_retries:  # b's 10:01 failed once, its retry to come
        assert "2026-11-30T10:01:00Z" not in world.records("g")
    else:  # b failed it for good: recorded SKIPPED down the chain (g, h, and c through h)
        for child in ("g", "h", "c"):
            assert world.records(child)["2026-11-30T10:01:00Z"] is ExecutionStatus.SKIPPED
    world.jobs.replace(TENANT, "c", spec("after(a)"))
    world.until(T(10, 2, 10))
    if b_retries:  # the old spec still left 10:01 open (b's retry would run it, then g, h and c)
        assert world.runs("c") == [f"2026-11-30T10:0{m}:00Z" for m in range(3)]
    else:  # b failed it for good: g and h never run it, nor would c have
        assert world.runs("c") == ["2026-11-30T10:00:00Z", "2026-11-30T10:02:00Z"]


def test_a_dropped_after_parent_completed_past_its_end_still_leaves_its_earlier_slot_open() -> None:
    # Review: g (after(b), ending 10:01:30) completed at 10:02 while b's 10:01 waited for its retry;
    # a completed after() job still runs its slots before its end, so c's 10:01 was still owed
    world = World(MemoryStore())
    world.jobs.register(TENANT, spec(MINUTE), job_id="a")
    world.jobs.register(TENANT, spec(MINUTE, retry=RETRY_IN_90S), job_id="b")
    world.jobs.register(TENANT, spec("after(b)", end_at="2026-11-30T10:01:30Z"), job_id="g")
    world.jobs.register(TENANT, spec("after(a, g)"), job_id="c")
    world.until(T(10, 2, 10))
    assert world.jobs.get(TENANT, "g").state is JobState.COMPLETED
    world.jobs.replace(TENANT, "c", spec("after(a)"))
    world.until(T(10, 3, 10))
    assert world.runs("c") == ["2026-11-30T10:00:00Z", "2026-11-30T10:01:00Z", "2026-11-30T10:03:00Z"]


def test_the_owed_slot_walk_judges_each_job_and_slot_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Review: a diamond of after() jobs was walked 2^depth times a slot (14 levels, 10 slots: 245,750
    # steps); each (job, slot) is now judged once
    from punctual.usecases import child_slots

    store = MemoryStore()
    world = World(store)
    world.jobs.register(TENANT, spec(MINUTE), job_id="root")
    level = ["root"]
    for depth in range(10):
        level = [f"d{depth}-{side}" for side in "lr"]
        for job_id in level:
            parents = ["root"] if depth == 0 else [f"d{depth - 1}-l", f"d{depth - 1}-r"]
            world.jobs.register(TENANT, spec(f"after({', '.join(parents)})"), job_id=job_id)
    world.jobs.register(TENANT, spec(MINUTE), job_id="a")
    world.jobs.register(TENANT, spec("after(a, d9-l)"), job_id="c")
    slots = [f"2026-11-30T10:0{m}:00Z" for m in range(5)]
    for slot in slots:
        store.record_parent_success(TENANT, "c", slot, "a", 2_000_000_000)
    calls: list[tuple[str, str]] = []
    judge = child_slots._OpenSlots._of

    def counted(self: Any, job_id: str, slot: str, depth: int) -> bool:
        calls.append((job_id, slot))
        return judge(self, job_id, slot, depth)

    monkeypatch.setattr(child_slots._OpenSlots, "_of", counted)
    world.jobs.replace(TENANT, "c", spec("after(a)"))  # (walks once itself)
    calls.clear()
    child = store.get_job(TENANT, "c")
    assert child is not None
    child_slots.owed_child_slots(store, child, ("d9-l",))
    assert len(calls) == len(set(calls)) <= 21 * len(slots)
