"""A parent's slot the poller does not run still gives each ``after()`` child's slot a record.

A parent slot recorded EXCLUDED (a calendar's day) or MISSED (its catch-up policy dropped it)
never runs, so neither success nor failure reached its children: their slot had no record at
all, a hole that looks like a stopped job (documented as a gap until now). Now the child's slot
is SKIPPED under an EXCLUDED parent, MISSED (with its event and alert) under a MISSED one, and so
on down the chain, once however often the release repeats; a backfill of the parent with its
dependants still runs the child's MISSED slot.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from execution_harness import LAYOUT, SHORT, FakeTarget, Rig
from factories import spec
from punctual.delivery.notifications import Alerter, EventPublisher, MemoryEventSink, Notifier
from punctual.delivery.notifications.events import SLOT_MISSED
from punctual.delivery.targets.base import TargetResult
from punctual.dispatch.queues import MessageKind, QueueRouting
from punctual.execution.unrun_children import UnrunChildren
from punctual.models import AlertStatus, ExecutionStatus, Job
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key
from punctual.usecases.backfill_runner import BackfillRunner
from punctual.usecases.backfills import BackfillState
from punctual.usecases.calendar_service import CalendarService
from punctual.usecases.calendars import CalendarSpec
from punctual.usecases.job_errors import InvalidJobError
from punctual.usecases.jobs import JobService

S = ExecutionStatus
T0 = datetime(2026, 12, 24, 8, 0, tzinfo=UTC)  # the 24th is in the calendar
HOOK = {"type": "http", "url": "https://alerts.example.com/hook"}
DAILY = "cron(0 8 * * ? *)"


def world() -> tuple[Rig, JobService]:
    store = MemoryStore()
    clock = ManualClock(T0 - timedelta(hours=1))
    events = MemoryEventSink()
    rig = Rig(store, clock, notifier=Notifier(EventPublisher(events), Alerter(store, FakeTarget(), clock)))
    CalendarService(store, clock).put("default", "holidays", CalendarSpec(dates=["2026-12-24"]))
    return rig, JobService(store, rig.queues, clock, LAYOUT, QueueRouting((SHORT,), ()))


def chain(jobs: JobService, parent_spec: dict, child_extra: dict | None = None) -> tuple[Job, Job, Job]:
    parent, _ = jobs.register("default", spec(DAILY, **parent_spec), job_id="parent")
    child, _ = jobs.register("default", spec("after(parent)", **(child_extra or {})), job_id="child")
    grandchild, _ = jobs.register("default", spec("after(child)"), job_id="grandchild")
    return parent, child, grandchild


def record(rig: Rig, job: Job, slot: datetime) -> tuple[str, str | None] | None:
    found = rig.store.get_execution("default", job.id, slot_key(slot))
    return None if found is None else (found.status.value, found.error)


def events(rig: Rig) -> list[tuple[str, str, str]]:
    sink = rig.notifier.events.sink
    return [(e.detail_type, e.detail["job_id"], e.detail["status"]) for e in sink.events]


def test_an_excluded_parent_slot_records_the_chain_below_it_skipped_once() -> None:
    # Given a daily parent that excludes the holidays, a child and a grandchild after it
    rig, jobs = world()
    parent, child, grandchild = chain(jobs, {"exclude_calendars": ["holidays"]})
    # When the holiday's slot is released, and released again (a poller that died and came back)
    rig.clock.set(T0 + timedelta(seconds=1))
    due = rig.poll()
    rig.dispatcher().release(due, uncertain=True)
    # Then the parent's slot is EXCLUDED and each slot below it SKIPPED, naming its parent
    assert record(rig, parent, T0)[0] == "EXCLUDED"  # type: ignore[index]
    assert record(rig, child, T0) == ("SKIPPED", "not run: parent parent's slot was EXCLUDED")
    assert record(rig, grandchild, T0) == ("SKIPPED", "not run: parent child's slot was SKIPPED")
    # And each SKIPPED record's event went out once, and nothing was sent to run
    skipped = [e for e in events(rig) if e[2] == "SKIPPED"]
    assert sorted(skipped) == sorted({e for e in skipped}) and {e[1] for e in skipped} == {
        "child",
        "grandchild",
    }
    assert rig.queues.all_messages(SHORT) == []


def test_a_missed_parent_slot_records_the_childs_missed_with_its_alert_and_a_backfill_runs_it() -> None:
    # Given a parent that catches up nothing, and a child with a rule on missed slots
    rig, jobs = world()
    parent, child, grandchild = chain(
        jobs, {"catchup": {"policy": "none"}}, {"alerts": [{"on": ["missed"], "target": HOOK}]}
    )
    # When the parent's slot is released two minutes late (the scheduler was down)
    rig.clock.set(T0 + timedelta(minutes=2))
    rig.poll()
    # Then the slot is MISSED for the parent, the child and the grandchild, each with its event
    assert record(rig, parent, T0)[0] == "MISSED"  # type: ignore[index]
    assert record(rig, child, T0) == ("MISSED", "not run: parent parent's slot was MISSED")
    assert record(rig, grandchild, T0) == ("MISSED", "not run: parent child's slot was MISSED")
    missed = sorted(e[1] for e in events(rig) if e[0] == SLOT_MISSED)
    assert missed == ["child", "grandchild", "parent"]
    # And the child's missed alert is handed to a worker, which makes it; the slots count as not run
    assert [(m.kind, m.job_id) for m in rig.queues.all_messages(SHORT)] == [(MessageKind.ALERT, "child")]
    rig.work_until_idle(rig.worker())
    [alert] = rig.store.list_alerts("default", child.id, 10)
    assert (alert.key_slot, alert.condition.value, alert.status) == (slot_key(T0), "missed", AlertStatus.SENT)
    assert rig.store.get_job("default", child.id).skipped_slots == 1  # type: ignore[union-attr]
    assert rig.target.calls == []
    # When the parent's slot is backfilled with its dependants
    runner = BackfillRunner(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), ()))
    backfill = runner.start("default", parent.id, T0, T0 + timedelta(minutes=1), include_dependants=True)
    worker = rig.worker()
    for _ in range(20):
        rig.poll()
        rig.work_until_idle(worker)
        rig.clock.advance(2)
        done = rig.store.get_backfill("default", parent.id, backfill.id)
        if (
            done is not None
            and done.state is not BackfillState.RUNNING
            and not rig.queues.all_messages(SHORT)
        ):
            break
    # Then the parent, the child and the grandchild run that slot, once each
    assert [record(rig, j, T0)[0] for j in (parent, child, grandchild)] == ["SUCCEEDED"] * 3  # type: ignore[index]
    assert [rig.target.calls_for(j.id) for j in (parent, child, grandchild)] == [[(slot_key(T0), 1)]] * 3


def test_a_child_outside_its_window_or_on_a_run_slot_gets_no_record() -> None:
    # Given a child whose start_at is after the parent's excluded slot
    rig, jobs = world()
    parent, child, grandchild = chain(
        jobs, {"exclude_calendars": ["holidays"]}, {"start_at": (T0 + timedelta(hours=1)).isoformat()}
    )
    # When the parent's holiday slot is released
    rig.clock.set(T0 + timedelta(seconds=1))
    rig.poll()
    # Then the parent's slot is EXCLUDED, and the child, whose window it is not in, has no record
    assert record(rig, parent, T0)[0] == "EXCLUDED"  # type: ignore[index]
    assert record(rig, child, T0) is None and record(rig, grandchild, T0) is None
    # And the next (working) day the parent runs and the chain follows as before
    rig.clock.set(T0 + timedelta(days=1, seconds=1))
    rig.poll()
    rig.work_until_idle(rig.worker())
    day2 = T0 + timedelta(days=1)
    assert [record(rig, j, day2)[0] for j in (parent, child, grandchild)] == ["SUCCEEDED"] * 3  # type: ignore[index]


def test_a_childs_slot_its_calendar_excludes_or_its_pause_misses_records_the_grandchilds_too() -> None:
    # Given a parent that runs every day, a child that excludes the holidays, and a grandchild
    rig, jobs = world()
    parent, child, grandchild = chain(jobs, {}, {"exclude_calendars": ["holidays"]})
    # When the parent's holiday slot runs and succeeds
    rig.clock.set(T0 + timedelta(seconds=1))
    rig.poll()
    rig.work_until_idle(rig.worker())
    # Then the child's slot is EXCLUDED by its calendar and the grandchild's SKIPPED under it
    assert record(rig, parent, T0)[0] == "SUCCEEDED"  # type: ignore[index]
    assert record(rig, child, T0)[0] == "EXCLUDED"  # type: ignore[index]
    assert record(rig, grandchild, T0) == ("SKIPPED", "not run: parent child's slot was EXCLUDED")
    # When the child is paused and the parent's next slot succeeds
    jobs.pause("default", child.id)
    day2 = T0 + timedelta(days=1)
    rig.clock.set(day2 + timedelta(seconds=1))
    rig.poll()
    rig.work_until_idle(rig.worker())
    # Then the child's slot is MISSED (it was paused) and the grandchild's MISSED under it
    assert record(rig, child, day2)[0] == "MISSED"  # type: ignore[index]
    assert record(rig, grandchild, day2) == ("MISSED", "not run: parent child's slot was MISSED")
    assert [e for e in events(rig) if e[1] == "grandchild"][-1] == (SLOT_MISSED, "grandchild", "MISSED")
    assert rig.target.calls_for(grandchild.id) == []


def test_a_parents_slots_missed_from_before_the_child_existed_are_not_the_childs() -> None:
    # Given a parent that catches up nothing, paused over three of its daily slots
    rig, jobs = world()
    parent, _ = jobs.register("default", spec(DAILY, catchup={"policy": "none"}), job_id="parent")
    jobs.pause("default", parent.id)
    rig.clock.set(T0 + timedelta(days=2, hours=1))
    # And a child registered after those slots
    child, _ = jobs.register("default", spec("after(parent)"), job_id="child")
    # When the parent is resumed and its owed slots are dropped by its policy
    jobs.resume("default", parent.id)
    for _ in range(3):
        rig.poll(lookback=timedelta(days=3))
        rig.clock.advance(1)
    # Then the parent's missed slots are recorded, and the child, which never had them, has none
    assert [r.status for r in rig.history(parent)] and all(r.status is S.MISSED for r in rig.history(parent))
    assert rig.history(child) == []


def test_a_slot_only_one_of_a_childs_parents_has_is_not_the_childs() -> None:
    # Given a child of a five-minute parent that catches up nothing and of an hourly one
    rig, jobs = world()
    start = (T0 - timedelta(minutes=1)).isoformat()
    jobs.register(
        "default", spec("cron(0/5 * * * ? *)", catchup={"policy": "none"}, start_at=start), job_id="p5"
    )
    jobs.register("default", spec("cron(0 * * * ? *)", start_at=start), job_id="p60")
    child, _ = jobs.register("default", spec("after(p5, p60)"), job_id="child")
    # When the pollers come back two minutes after 08:00, and again after 08:05
    for at in (T0 + timedelta(minutes=2), T0 + timedelta(minutes=7)):
        rig.clock.set(at)
        rig.poll()
        rig.work_until_idle(rig.worker())
    # Then 08:00, a slot of both parents, is MISSED for the child; 08:05, the hourly one's none, is not its
    assert record(rig, child, T0) == ("MISSED", "not run: parent p5's slot was MISSED")
    assert record(rig, child, T0 + timedelta(minutes=5)) is None
    assert [r.slot for r in rig.history(child)] == [slot_key(T0)]


def test_a_failed_parent_slot_the_other_parent_never_has_records_nothing_for_the_child() -> None:
    # Given a child of a five-minute parent whose target fails for good and of an hourly one
    rig, jobs = world()
    rig.target.results = [
        lambda ctx: TargetResult.permanent("no") if ctx.job_id == "p5" else TargetResult.ok()
    ]
    start = (T0 - timedelta(minutes=1)).isoformat()
    jobs.register(
        "default", spec("cron(0/5 * * * ? *)", start_at=start, retry={"max_attempts": 1}), job_id="p5"
    )
    jobs.register("default", spec("cron(0 * * * ? *)", start_at=start), job_id="p60")
    child, _ = jobs.register("default", spec("after(p5, p60)"), job_id="child")
    # When both run 08:00 and the five-minute one 08:05, failing each time
    for at in (T0 + timedelta(seconds=1), T0 + timedelta(minutes=5, seconds=1)):
        rig.clock.set(at)
        rig.poll()
        rig.work_until_idle(rig.worker())
    # Then the child's 08:00 is SKIPPED (a slot of both), and it has no 08:05 (not a slot of its)
    assert record(rig, child, T0) == ("SKIPPED", "not run: parent p5's slot ended FAILED")
    assert record(rig, child, T0 + timedelta(minutes=5)) is None


def test_a_repeated_release_records_the_grandchild_a_release_that_died_left_out() -> None:
    # Given the chain below an excluded parent slot was recorded for the child, not the grandchild
    rig, jobs = world()
    _, _, grandchild = chain(jobs, {"exclude_calendars": ["holidays"]})
    rig.clock.set(T0 + timedelta(seconds=1))
    due = rig.poll()
    rig.store._executions.pop(("default", grandchild.id, slot_key(T0)))  # as if it died before it
    assert record(rig, grandchild, T0) is None
    # When the release is repeated
    rig.dispatcher().release(due, uncertain=True)
    # Then the grandchild's slot is recorded under the child's record found there
    assert record(rig, grandchild, T0) == ("SKIPPED", "not run: parent child's slot was SKIPPED")


def test_a_failure_recording_the_children_keeps_the_parents_records_and_events() -> None:
    # Given a parent that catches up nothing with a child, and reads of dependants that fail
    rig, jobs = world()
    parent, child, _ = chain(jobs, {"catchup": {"policy": "none"}})

    def failing(tenant: str, parent_id: str) -> list[str]:
        raise RuntimeError("throttled")

    rig.store.list_dependents = failing  # type: ignore[method-assign]
    # When its slot is released two minutes late
    rig.clock.set(T0 + timedelta(minutes=2))
    rig.poll()
    # Then the parent's slot is MISSED with its event and count; the release went on without the child's
    assert record(rig, parent, T0)[0] == "MISSED"  # type: ignore[index]
    assert [e[1] for e in events(rig) if e[0] == SLOT_MISSED] == ["parent"]
    assert rig.store.get_job("default", parent.id).skipped_slots == 1  # type: ignore[union-attr]
    assert record(rig, child, T0) is None
    assert rig.timers(T0, T0 + timedelta(days=2))  # the chain goes on


def test_a_parents_missed_range_gives_the_child_only_the_slots_all_its_parents_have() -> None:
    # Given a child of a minutely parent that catches up nothing and of one at :29 and :59 that
    # catches up its last hour (it runs them late: only the minutely one's range records the child)
    rig, jobs = world()
    start = (T0 - timedelta(minutes=1)).isoformat()
    none = {"policy": "none"}
    jobs.register("default", spec("cron(* * * * ? *)", catchup=none, start_at=start), job_id="p1")
    jobs.register("default", spec("cron(29/30 * * * ? *)", start_at=start), job_id="p30")
    child, _ = jobs.register("default", spec("after(p1, p30)"), job_id="child")
    # When the pollers come back 70 minutes late (the minutely parent's slots: one range record)
    rig.clock.set(T0 + timedelta(minutes=70))
    for _ in range(5):  # the catch-up goes in slices
        rig.poll(lookback=timedelta(minutes=80))
        rig.clock.advance(1)
    p1 = rig.store.get_job("default", "p1")
    assert p1 is not None
    [p1_range] = [r for r in rig.history(p1, limit=200) if r.slot_count > 1]
    assert (p1_range.slot, p1_range.last_slot) == (
        slot_key(T0 + timedelta(minutes=29)),
        slot_key(T0 + timedelta(minutes=68)),
    )
    # Then the child has the slots both parents have, 07:59, 08:29 and 08:59, each MISSED once (review:
    # the range from 08:29, a slot of both, was copied whole: 40 slots the child never had)
    history = sorted((r.slot, r.status.value, r.slot_count) for r in rig.history(child))
    assert history == [(slot_key(T0 + timedelta(minutes=m)), "MISSED", 1) for m in (-1, 29, 59)]
    assert rig.store.get_job("default", child.id).skipped_slots == 3  # type: ignore[union-attr]


def test_a_chain_deeper_than_its_slots_are_recorded_is_refused() -> None:
    """QA24: a root's failed (or missed) slot was recorded 16 after() jobs down and no further: the
    17th job of a 21-deep chain and those below it had no record of the slot at all. A chain of
    16 records the slot all the way down; a 17th job, or a replace that joins two chains into
    more than 16, is refused (422 naming the chain), nothing written."""
    rig, jobs = world()
    root, _ = jobs.register("default", spec(DAILY), job_id="j0")
    for n in range(1, 17):
        jobs.register("default", spec(f"after(j{n - 1})"), job_id=f"j{n}")
    with pytest.raises(InvalidJobError, match=r"after\(\) chain too deep: j17 -> j16 -> .* -> j1 \(17"):
        jobs.register("default", spec("after(j16)"), job_id="j17")
    assert rig.store.get_job("default", "j17") is None
    # a replace from below: k1 after(k0) under j8 would put k1..k2 below 16 levels
    jobs.register("default", spec(DAILY), job_id="k0")
    jobs.register("default", spec("after(k0)"), job_id="k1")
    jobs.register("default", spec("after(k1)"), job_id="k2")
    with pytest.raises(InvalidJobError, match=r"k2 -> k1 -> j16 -> "):
        jobs.replace("default", "k1", spec("after(j16)"))
    jobs.replace("default", "k1", spec("after(j14)"))  # 16 deep: k2 is the 16th
    # And a failed root slot is recorded down to the 16th job of either branch
    rig.clock.set(T0)
    rig.send(rig.message(root, T0))
    rig.work_until_idle(rig.worker(target=FakeTarget(TargetResult.permanent("HTTP 400"))))
    below = [f"j{n}" for n in range(1, 17)] + ["k1", "k2"]
    assert [record(rig, jobs.get("default", j), T0)[0] for j in below] == ["SKIPPED"] * 18  # type: ignore[index]


def test_the_depth_check_of_a_replace_reads_each_descendant_once() -> None:
    """Review: the walk down a lattice of diamonds went every path (2^12 reads of links here)."""
    rig, jobs = world()
    for root in ("l0", "r0"):
        jobs.register("default", spec(DAILY), job_id=root)
    for level in range(1, 13):
        parents = "l0" if level == 1 else f"l{level - 1}a, l{level - 1}b"
        for side in "ab":
            jobs.register("default", spec(f"after({parents})"), job_id=f"l{level}{side}")
    reads: list[str] = []
    real = rig.store.list_dependents
    rig.store.list_dependents = lambda tenant, parent: reads.append(parent) or real(tenant, parent)  # type: ignore[method-assign]
    jobs.replace("default", "l1a", spec("after(l0, r0)"))  # a new parent: the chain is checked
    assert len(reads) <= 30  # the 22 jobs below l1a once each, and the write's own reads


def test_a_grandchilds_record_that_cannot_be_written_under_an_excluded_child_is_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # QA24: under a child slot a worker recorded EXCLUDED, the grandchildren's records that failed
    # were logged only: ChildRecordsFailed (which alarms) did not count them
    rig, jobs = world()
    _, child, grandchild = chain(jobs, {}, {"exclude_calendars": ["holidays"]})

    def failing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("ProvisionedThroughputExceededException")

    monkeypatch.setattr(UnrunChildren, "_under", failing)
    rig.clock.set(T0 + timedelta(seconds=1))
    rig.poll()
    rig.work_until_idle(rig.worker())

    assert record(rig, child, T0)[0] == "EXCLUDED"  # type: ignore[index]
    assert record(rig, grandchild, T0) is None
    assert rig.metrics.total("ChildRecordsFailed") == 1
