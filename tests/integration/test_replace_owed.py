"""A replace never drops a slot that was due by it (QA): the old spec's chain timer a poller had
not released yet (a moment behind, or down) is caught up under the new spec, up to where the new
chain starts; while the job is paused it is parked as a pause's owed slot. Every slot runs once
(the outage case in both stores)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig
from factories import spec
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobStore
from punctual.store.memory import MemoryStore
from punctual.usecases.jobs import JobService, QueueRouting


def T(h: int, m: int, s: float = 0) -> datetime:
    return datetime(2026, 12, 1, h, m, tzinfo=UTC) + timedelta(seconds=s)


class Recording(FakeTarget):
    """Records each call's slot and payload."""

    def __init__(self, into: list[tuple[str, Any]]) -> None:
        super().__init__()
        self.into = into

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        self.into.append((ctx.slot, payload))
        return super().invoke(target, payload, ctx)


class Run:
    """The job service, a poller and a worker on one manual clock; what the target received."""

    def __init__(self, start: datetime, store: JobStore | None = None) -> None:
        self.clock = ManualClock(start)
        self.payloads: list[tuple[str, Any]] = []
        self.rig = Rig(store or MemoryStore(), self.clock, target=Recording(self.payloads))
        self.jobs = JobService(
            self.rig.store, self.rig.queues, self.clock, LAYOUT, QueueRouting((SHORT,), (LONG,))
        )
        self.worker = self.rig.worker()

    def until(self, end: datetime, step_s: float = 1.0) -> None:
        """Pollers and workers at work every ``step_s`` up to ``end``."""
        while self.clock.now() < end:
            self.clock.set(min(self.clock.now() + timedelta(seconds=step_s), end))
            self.rig.poll()
            self.rig.work_until_idle(self.worker, SHORT)

    def ran(self) -> Counter[str]:
        return Counter(slot for slot, _ in self.payloads)


def _slot(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("after_ms", [0, 300, 999, 5000])
def test_a_payload_edit_just_after_an_unreleased_slot_runs_that_slot_with_the_new_payload(
    after_ms: int,
) -> None:
    run = Run(T(9, 58))
    run.jobs.register("default", spec("cron(0 * * * ? *)", payload={"v": 1}), job_id="j")
    run.until(T(9, 59, 59))
    run.clock.set(T(10, 0) + timedelta(milliseconds=after_ms))  # no poller released 10:00 yet
    run.jobs.replace("default", "j", spec("cron(0 * * * ? *)", payload={"v": 2}))
    run.until(T(10, 0, 10))
    run.clock.set(T(10, 59, 58))
    run.until(T(11, 0, 5))
    assert run.ran() == Counter({_slot(T(10, 0)): 1, _slot(T(11, 0)): 1})
    assert [payload for _, payload in run.payloads] == [{"v": 2}, {"v": 2}]


@pytest.mark.parametrize(("policy", "expected"), [("all", range(1, 11)), ("latest", [10]), ("none", [10])])
def test_slots_a_poller_outage_left_unreleased_are_caught_up_after_a_replace(
    policy: str, expected: Any, store: JobStore
) -> None:
    # Given pollers down from 10:00:30 to 10:10:20, and a payload edit at 10:10:10 (both stores)
    run = Run(T(9, 58), store)
    job = spec("rate(1 minute)", start_at="2026-12-01T09:00:00Z", catchup={"policy": policy})
    run.jobs.register("default", job, job_id="j")
    run.until(T(10, 0, 30), step_s=5)
    run.clock.set(T(10, 10, 10))
    run.jobs.replace("default", "j", job.model_copy(update={"payload": {"v": 2}}))
    run.clock.set(T(10, 10, 20))
    run.until(T(10, 13, 5), step_s=5)
    # Then the outage's slots follow the catch-up policy (as without the edit; 10:10 is 20 s late:
    # on time), each once; the
    # others are recorded MISSED; the new chain goes on from 10:11
    ran = run.ran()
    outage = [_slot(T(10, m)) for m in range(1, 11)]
    assert [s for s in outage if s in ran] == [_slot(T(10, m)) for m in expected]
    assert all(count == 1 for count in ran.values()), ran
    assert [_slot(T(10, m)) for m in (11, 12, 13)] == [s for s in sorted(ran) if s > _slot(T(10, 10))]
    records = {r.slot: r.status.value for r in run.rig.store.list_executions("default", "j", limit=100).items}
    assert all(records.get(s) in ("SUCCEEDED", "MISSED") for s in outage), records


def test_a_schedule_change_runs_the_old_schedules_due_slot_once_and_the_new_chain_after_the_replace() -> None:
    run = Run(T(9, 58))
    run.jobs.register("default", spec("cron(0 * * * ? *)"), job_id="j")
    run.until(T(9, 59, 59))
    run.clock.set(T(10, 0, 0.5))  # hourly 10:00 not released yet
    run.jobs.replace("default", "j", spec("rate(1 minute)"))
    run.until(T(10, 3, 5))
    ran = run.ran()
    assert ran[_slot(T(10, 0))] == 1 and all(count == 1 for count in ran.values()), ran
    assert sorted(ran) == [_slot(T(10, 0)), _slot(T(10, 1, 1)), _slot(T(10, 2, 1)), _slot(T(10, 3, 1))]


def test_a_job_replaced_then_paused_before_the_release_owes_the_slot_to_its_resume() -> None:
    run = Run(T(9, 58))
    job = spec("cron(0 * * * ? *)", payload={"v": 1})
    run.jobs.register("default", job, job_id="j")
    run.until(T(9, 59, 59))
    run.clock.set(T(10, 0, 0.3))
    run.jobs.replace("default", "j", job.model_copy(update={"payload": {"v": 2}}))
    run.clock.set(T(10, 0, 0.6))
    run.jobs.pause("default", "j")
    run.until(T(10, 5))  # the poller meets the old chain's 10:00 while the job is paused
    assert run.ran() == Counter()
    run.jobs.resume("default", "j")
    run.until(T(10, 5, 5))
    assert run.ran() == Counter({_slot(T(10, 0)): 1})
    assert run.payloads == [(_slot(T(10, 0)), {"v": 2})]


def test_an_identical_put_just_after_an_unreleased_slot_runs_that_slot_once() -> None:
    """An UpdateSchedule that changes nothing restarts the chain at a new version too."""
    run = Run(T(9, 58))
    job = spec("cron(0 * * * ? *)", payload={"v": 1})
    run.jobs.register("default", job, job_id="j")
    run.until(T(9, 59, 59))
    run.clock.set(T(10, 0, 0.3))
    run.jobs.replace("default", "j", job)
    run.until(T(10, 0, 10))
    run.clock.set(T(10, 59, 58))
    run.until(T(11, 0, 5))
    assert run.ran() == Counter({_slot(T(10, 0)): 1, _slot(T(11, 0)): 1})


@pytest.mark.parametrize("schedule", ["rate(1 minute)", "cron(* * * * ? *)"])
def test_a_job_registered_in_its_start_at_instant_fires_at_start_at(schedule: str) -> None:
    """QA (beside the replace cases, on the same harness): start_at is a slot (docs/schedules.md),
    but one equal to the registration instant never fired and had no record."""
    run = Run(T(10, 0))
    run.jobs.register("default", spec(schedule, start_at="2026-12-01T10:00:00Z"), job_id="j")
    run.until(T(10, 2, 5))
    assert run.ran() == Counter({_slot(T(10, m)): 1 for m in range(3)})


@pytest.mark.parametrize("schedule", ["rate(1 minute)", "rate(7 days)", "cron(* * * * ? *)"])
@pytest.mark.parametrize("fraction", [0.001, 0.4, 0.999])
def test_a_job_registered_within_its_start_at_second_fires_at_start_at(
    schedule: str, fraction: float
) -> None:
    """QA26: a start_at of now, as clients send it (EventBridge's ``StartDate=datetime.now()``, kept
    to whole seconds; ``--start-at now``), is a little before the registration instant: its slot,
    the schedule's first occurrence, was dropped and the first run came one period later (a week,
    for a rate(7 days) schedule). Slots are whole seconds: within start_at's second it is due now."""
    run = Run(T(10, 0, fraction))
    run.jobs.register("default", spec(schedule, start_at="2026-12-01T10:00:00Z"), job_id="j")
    run.until(T(10, 0, 5))
    assert run.ran() == Counter({_slot(T(10, 0)): 1})


def _records(run: Run) -> dict[str, tuple[str, str | None]]:
    items = run.rig.store.list_executions("default", "j", limit=500).items
    return {r.slot: (r.status.value, r.error) for r in items}


@pytest.mark.parametrize("policy", ["all", "latest"])
def test_a_replace_to_a_denser_schedule_owes_the_old_schedules_slots_only(policy: str) -> None:
    """Review: the old chain's slots were walked on the new schedule, so hourly -> every minute
    during an outage ran 10:01..10:10, which neither spec owed."""
    run = Run(T(9, 58))
    run.jobs.register("default", spec("cron(0 * * * ? *)", catchup={"policy": policy}), job_id="j")
    run.until(T(9, 59, 30), step_s=5)  # pollers down from 09:59:30 to 10:10:20
    run.clock.set(T(10, 10, 10))
    run.jobs.replace("default", "j", spec("cron(* * * * ? *)", catchup={"policy": policy}))
    run.clock.set(T(10, 10, 20))
    run.until(T(10, 12, 5), step_s=5)
    assert run.ran() == Counter({_slot(T(10, 0)): 1, _slot(T(10, 11)): 1, _slot(T(10, 12)): 1})


def test_a_replace_to_a_sparser_schedule_runs_every_slot_the_old_one_owed() -> None:
    """Review: every minute -> hourly during an outage lost 10:02..10:10 without a record."""
    run = Run(T(9, 58))
    run.jobs.register("default", spec("cron(* * * * ? *)"), job_id="j")
    run.until(T(10, 0, 30), step_s=5)
    run.clock.set(T(10, 10, 10))
    run.jobs.replace("default", "j", spec("cron(0 * * * ? *)"))
    run.clock.set(T(10, 10, 20))
    run.until(T(10, 12, 5), step_s=5)
    assert run.ran() == Counter({_slot(T(9, 59)): 1, **{_slot(T(10, m)): 1 for m in range(11)}})


@pytest.mark.parametrize(
    "new",
    [
        {"schedule": "delay(10 minutes)"},
        {"schedule": "at(2026-12-01T12:00:00)"},
        {"schedule": "cron(0 * * * ? *)", "start_at": "2026-12-01T12:00:00Z"},
    ],
)
def test_an_owed_slot_the_new_spec_would_not_run_is_recorded_not_run(new: dict[str, Any]) -> None:
    """Review: a replace to delay() dropped the owed 10:00 without a record; to at(12:00) (or a
    start_at of 12:00) it ran 10:00 too, a one-time job twice."""
    run = Run(T(9, 58))
    run.jobs.register("default", spec("cron(0 * * * ? *)"), job_id="j")
    run.until(T(9, 59, 59))
    run.clock.set(T(10, 0, 0.3))
    run.jobs.replace("default", "j", spec(**new))
    run.until(T(10, 1))
    assert _slot(T(10, 0)) not in run.ran()
    assert _records(run)[_slot(T(10, 0))] == ("MISSED", "job replaced: the new spec would not run it")


def test_a_slot_parked_by_a_pause_survives_a_replace_while_paused() -> None:
    """Review: a spec-changing replace of a paused job cleared the slot its pause owed."""
    run = Run(T(9, 58))
    run.jobs.register("default", spec("cron(0 * * * ? *)", payload={"v": 1}), job_id="j")
    run.until(T(9, 59, 59))
    run.clock.set(T(10, 0, 0.3))
    run.jobs.pause("default", "j")
    run.until(T(10, 1))  # the poller parks 10:00 on the paused job
    run.jobs.replace("default", "j", spec("cron(0 * * * ? *)", payload={"v": 2}))
    run.clock.set(T(10, 5))
    run.jobs.resume("default", "j")
    run.until(T(10, 5, 5))
    assert run.payloads == [(_slot(T(10, 0)), {"v": 2})]


class _Secrets:
    def new_secret(self, tenant: str, job_id: str) -> tuple[str, str]:
        return "whsec_plain", "stored"


def test_a_rotation_between_a_one_time_jobs_slot_and_its_release_runs_it_and_completes_the_job() -> None:
    """Review: the job ran its slot but stayed ENABLED with no chain (the owed plan never ended it)."""
    run = Run(T(9, 58))
    run.jobs.secrets = _Secrets()
    hook = {"type": "http", "url": "https://example.com/hook"}
    run.jobs.register("default", spec("at(2026-12-01T10:00:00)", target=hook), job_id="j")
    run.until(T(9, 59, 59))
    run.clock.set(T(10, 0, 0.3))
    run.jobs.rotate_secret("default", "j")
    run.until(T(10, 1))
    assert run.ran() == Counter({_slot(T(10, 0)): 1})
    job = run.rig.store.get_job("default", "j")
    assert job is not None and job.state.value == "COMPLETED"


@pytest.mark.parametrize(
    "schedule", ["at(2026-12-01T10:00:00)", "cron(0 * * * ? *)"], ids=["one-time", "past-end_at"]
)
def test_a_rotation_between_a_last_slots_release_and_its_worker_still_completes_the_job(
    schedule: str,
) -> None:
    """QA26: the worker's COMPLETED mark asked for the version the last slot was released for; a
    rotation in between (the spec unchanged) left the job ENABLED, with no slot and no chain, for
    good."""
    run = Run(T(9, 58))
    run.jobs.secrets = _Secrets()
    hook = {"type": "http", "url": "https://example.com/hook"}
    run.jobs.register("default", spec(schedule, target=hook, end_at="2026-12-01T10:30:00Z"), job_id="j")
    run.until(T(9, 59, 59))
    run.clock.set(T(10, 0, 0.3))
    run.rig.poll()  # the last slot is released; no worker has taken it yet
    run.jobs.rotate_secret("default", "j")
    run.until(T(10, 1))
    assert run.ran() == Counter({_slot(T(10, 0)): 1})
    job = run.rig.store.get_job("default", "j")
    assert job is not None and job.state.value == "COMPLETED"


@pytest.mark.parametrize(
    ("first", "second", "owed"),
    [
        # A hourly -> B every minute at 10:05:30 -> C at 10:07:30: A owes 10:00, B 10:06 and 10:07
        ("cron(0 * * * ? *)", "cron(* * * * ? *)", [(10, 0), (10, 6), (10, 7)]),
        # A every minute -> B hourly -> C: A owes 10:00..10:05, B nothing
        ("cron(* * * * ? *)", "cron(0 * * * ? *)", [(10, m) for m in range(6)]),
    ],
)
@pytest.mark.parametrize("third", ["payload", "cron(0/5 * * * ? *)"])
def test_each_chain_two_replaces_cut_in_one_outage_owes_its_own_slots(
    first: str, second: str, third: str, owed: list[tuple[int, int]]
) -> None:
    """Review: the job kept only its last replace's timing, so the first chain was walked on the
    second's (slots lost without a record, or run when no spec owed them)."""
    run = Run(T(9, 58))
    run.jobs.register("default", spec(first), job_id="j")
    run.until(T(9, 59, 30), step_s=5)  # pollers down from 09:59:30 to 10:10:20
    run.clock.set(T(10, 5, 30))
    run.jobs.replace("default", "j", spec(second))
    run.clock.set(T(10, 7, 30))
    run.jobs.replace("default", "j", spec(second, payload={"v": 3}) if third == "payload" else spec(third))
    run.clock.set(T(10, 10, 20))
    run.until(T(10, 10, 40), step_s=5)
    ran = {s for s, _ in run.payloads if s <= _slot(T(10, 10)) and s > _slot(T(9, 59, 30))}
    c_timing = second if third == "payload" else third  # C's own slots from 10:07:30 on (caught up)
    c_slots = {"cron(* * * * ? *)": [(10, 8), (10, 9), (10, 10)], "cron(0 * * * ? *)": []}.get(
        c_timing, [(10, 10)]
    )
    assert ran == {_slot(T(h, m)) for h, m in owed + c_slots}
    assert all(count == 1 for count in run.ran().values())


def test_a_rotation_after_a_timing_replace_in_one_outage_keeps_the_old_chains_timing() -> None:
    run = Run(T(9, 58))
    run.jobs.secrets = _Secrets()
    hook = {"type": "http", "url": "https://example.com/hook"}
    run.jobs.register("default", spec("cron(* * * * ? *)", target=hook), job_id="j")
    run.until(T(9, 59, 30), step_s=5)
    run.clock.set(T(10, 5, 30))
    run.jobs.replace("default", "j", spec("cron(0 * * * ? *)", target=hook))
    run.clock.set(T(10, 7, 30))
    run.jobs.rotate_secret("default", "j")
    run.clock.set(T(10, 10, 20))
    run.until(T(10, 10, 40), step_s=5)
    assert run.ran() == Counter({_slot(T(9, 59)): 1, **{_slot(T(10, m)): 1 for m in range(6)}})


def test_an_owed_slot_met_after_the_new_chain_completed_the_job_is_recorded() -> None:
    """Review: the new chain's last slot completed the job first; the old chain's owed 10:00 was
    then stale, with no record."""
    run = Run(T(9, 58))
    run.jobs.register("default", spec("cron(0 * * * ? *)"), job_id="j")
    run.until(T(9, 59, 30), step_s=5)
    run.clock.set(T(10, 2))
    run.jobs.replace("default", "j", spec("cron(* * * * ? *)", end_at="2026-12-01T10:03:00Z"))
    version = run.rig.store.get_job("default", "j").version  # type: ignore[union-attr]
    run.clock.set(T(10, 3, 1))
    now = run.clock.now()
    due = [
        t
        for t in run.rig.timers(now - timedelta(minutes=15), now)
        if (t.pk, t.sk) not in run.rig.released_timers
    ]
    for batch in ([t for t in due if t.job_version == version], [t for t in due if t.job_version != version]):
        run.rig.dispatcher().release(batch)  # the new chain's first (a poller's own minute), then the old
        run.rig.released_timers.update((t.pk, t.sk) for t in batch)
        run.rig.work_until_idle(run.worker)
    assert run.ran() == Counter({_slot(T(10, 3)): 1})
    assert _records(run)[_slot(T(10, 0))] == ("MISSED", "job replaced: the new spec has completed")


def test_a_paused_jobs_old_chain_ends_at_the_pause_not_at_the_replace() -> None:
    """Review: pause 10:01:30, replace to cron(0/2) 10:04:30, resume 10:07:30, pollers down all
    along: the old chain walked on to the replace and ran 10:03, a slot inside the pause that the
    new schedule does not have (the pause's slots are the resume's, on the current timing)."""
    run = Run(T(9, 58))
    run.jobs.register("default", spec("cron(* * * * ? *)"), job_id="j")
    run.until(T(9, 59, 30), step_s=5)  # pollers down from 09:59:30 to 10:08:20
    run.clock.set(T(10, 1, 30))
    run.jobs.pause("default", "j")
    run.clock.set(T(10, 4, 30))
    run.jobs.replace("default", "j", spec("cron(0/2 * * * ? *)"))
    run.clock.set(T(10, 7, 30))
    run.jobs.resume("default", "j")
    run.clock.set(T(10, 8, 20))
    run.until(T(10, 8, 40), step_s=5)
    expected = [(9, 59), (10, 0), (10, 1), (10, 2), (10, 4), (10, 6), (10, 8)]
    assert run.ran() == Counter({_slot(T(h, m)): 1 for h, m in expected})


def test_more_restarts_than_kept_drop_the_oldest_chain_instead_of_misplacing_it() -> None:
    """Review: past MAX_RESTARTS the oldest timer was matched to the next chain (its end, its
    timing): hourly -> every minute then 8 payload edits ran 10:01..10:03, which no spec owed."""
    run = Run(T(9, 58))
    run.jobs.register("default", spec("cron(0 * * * ? *)"), job_id="j")
    run.until(T(9, 59, 30), step_s=5)
    run.clock.set(T(10, 3, 30))
    run.jobs.replace("default", "j", spec("cron(* * * * ? *)"))
    for edit in range(8):
        run.clock.set(T(10, 4 + edit, 30))
        run.jobs.replace("default", "j", spec("cron(* * * * ? *)", payload={"edit": edit}))
    run.clock.set(T(10, 12, 20))
    run.until(T(10, 12, 40), step_s=5)
    assert not {_slot(T(10, m)) for m in (1, 2, 3)} & set(run.ran())
    assert all(count == 1 for count in run.ran().values())


def test_restarts_never_make_an_unchanged_spec_too_large_to_store() -> None:
    """Review: a job near the item limit was refused (413) by its fifth identical PUT: the kept
    restarts counted against it."""
    from punctual.store.dynamo.sizes import JOB_ITEM_LIMIT_BYTES, job_item_sizes

    def big(pad: int) -> Any:
        headers = {f"x-h{i}": "\u00e9" * 8192 for i in range(9)}
        hook = {"type": "http", "url": "https://example.com/hook", "headers": {**headers, "x-pad": "y" * pad}}
        return spec("cron(0 * * * ? *)", target=hook, payload={"pad": "x" * 250_000})

    probe = Run(T(9, 58))
    probe.jobs.register("default", big(10), job_id="j")
    size = job_item_sizes(probe.rig.store.get_job("default", "j"))["the job item"]  # type: ignore[arg-type]
    run = Run(T(9, 58))
    job = big(10 + JOB_ITEM_LIMIT_BYTES - 300 - size)  # 300 bytes under the limit
    run.jobs.register("default", job, job_id="j")
    for _ in range(6):
        run.clock.set(run.clock.now() + timedelta(seconds=10))
        run.jobs.replace("default", "j", job)  # each is stored (its oldest restarts given up)
    stored = run.rig.store.get_job("default", "j")
    assert (
        stored is not None
        and stored.version == 7
        and job_item_sizes(stored)["the job item"] <= JOB_ITEM_LIMIT_BYTES
    )


def test_a_rotation_in_the_instant_of_a_resume_keeps_the_slots_the_pause_owed() -> None:
    """Fuzzing (a randomized oracle): resume and rotate at one instant after a pause during an
    outage; the resumed chain's timer fell to the pause rules, which took the rotation's new chain
    for the resume's, and the 15 owed slots vanished without a record."""
    run = Run(T(9, 57, 30))
    run.jobs.secrets = _Secrets()
    hook = {"type": "http", "url": "https://example.com/hook"}
    job = spec("cron(* * * * ? *)", target=hook, catchup={"policy": "latest", "window_seconds": 3600})
    run.jobs.register("default", job, job_id="j")
    run.until(T(10, 1, 42.6))
    run.clock.set(T(10, 10, 0.3))  # pollers down since 10:01:42
    run.jobs.pause("default", "j")
    run.clock.set(T(10, 15, 2.6))
    run.until(T(10, 16, 0.3))
    run.jobs.resume("default", "j")
    run.jobs.rotate_secret("default", "j")
    run.until(T(10, 18, 5))
    records = _records(run)
    owed = [_slot(T(10, m)) for m in range(2, 17)]
    assert [slot for slot in owed if slot not in run.ran() and slot not in records] == []
    assert all(count == 1 for count in run.ran().values())


# A slot released for the old spec that no worker started by the replace (workers behind).


def _released_then_replaced(new: dict[str, Any], claim_after_s: float) -> tuple[Run, Any]:
    """10:00 released for version 1 (its message waits), the job replaced 300 ms later with
    ``new``, the message taken ``claim_after_s`` after the release; the 10:00 record."""
    run = Run(T(9, 58))
    run.jobs.register("default", spec("cron(0 * * * ? *)", payload={"v": 1}), job_id="j")
    run.until(T(9, 59, 59))
    run.clock.set(T(10, 0))
    run.rig.poll()  # released; no worker has taken it
    run.clock.set(T(10, 0, 0.3))
    run.jobs.replace("default", "j", spec(**new))
    run.clock.set(T(10, 0, claim_after_s))
    run.rig.work_until_idle(run.worker, SHORT)
    return run, run.rig.store.get_execution("default", "j", _slot(T(10, 0)))


@pytest.mark.parametrize("claim_after_s", [6, 9, 60])
def test_a_released_slot_a_late_worker_takes_after_an_edit_runs_once_with_the_new_spec(
    claim_after_s: float,
) -> None:
    # QA: the slot was recorded SUPERSEDED and never ran once the message outlived the 5 s in
    # which a worker trusts the job it carries.
    run, record = _released_then_replaced(
        {"schedule": "cron(0 * * * ? *)", "payload": {"v": 2}}, claim_after_s
    )
    assert record is not None and record.status.value == "SUCCEEDED"
    assert record.job_version == 2
    assert run.payloads == [(_slot(T(10, 0)), {"v": 2})]
    run.until(T(10, 0, 70))
    assert run.ran() == Counter({_slot(T(10, 0)): 1})


def test_a_released_slot_the_new_spec_does_not_run_stays_superseded() -> None:
    later = {"schedule": "cron(0 * * * ? *)", "start_at": "2026-12-01T10:30:00Z", "payload": {"v": 2}}
    run, record = _released_then_replaced(later, 9)
    assert record is not None and record.status.value == "SUPERSEDED"
    assert run.payloads == []


@pytest.mark.parametrize("released", [True, False])
def test_a_job_created_again_at_a_deleted_ones_id_never_runs_its_slots(released: bool) -> None:
    # Review: the new job's first restart covered every version from 1, the deleted job's too:
    # after an edit, the deleted job's 10:00 (released and waiting, or a timer no poller had
    # reached) ran on the new job, whose first slot is 11:00
    run = Run(T(9, 58))
    run.jobs.register("default", spec("cron(0 * * * ? *)", payload={"v": "old"}), job_id="j")
    run.until(T(9, 59, 50))
    if released:
        run.clock.set(T(10, 0))
        run.rig.poll()  # 10:00 released for the deleted job; no worker took it
    run.clock.set(T(10, 0, 1))
    run.jobs.delete("default", "j")
    run.clock.set(T(10, 0, 2))
    run.jobs.register("default", spec("cron(0 * * * ? *)", payload={"v": "new"}), job_id="j")
    run.clock.set(T(10, 0, 3))
    run.jobs.replace("default", "j", spec("cron(0 * * * ? *)", payload={"v": "edited"}))
    run.clock.set(T(10, 0, 9))  # past the 5 s in which a worker runs the job its message carries
    run.until(T(10, 0, 20))
    assert run.payloads == []
