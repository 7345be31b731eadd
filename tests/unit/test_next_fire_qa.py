"""``next_fire_at`` against what actually fires (QA): the job service, the poller and a worker on a
manual clock, stepped from one due timer to the next; each ``next_fire_at`` read is compared with
the first run that follows it.

* A jittered slot whose nominal instant has passed is still to come until its dispatch instant
  (it was shown as the slot after, while this one ran first); a jitter longer than the gap
  between slots releases slots in slot order.
* Right after a resume that owes slots the catch-up policy runs, the next fire is the resume
  itself (the RESUME timer due then), until the first of them is claimed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig
from factories import spec
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.models import Job
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.slots import dispatch_instant
from punctual.usecases.calendar_service import CalendarService
from punctual.usecases.calendars import CalendarSpec
from punctual.usecases.jobs import JobService, QueueRouting
from punctual.usecases.next_fire import upcoming_releases


def at(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=UTC)


class Sim:
    """The job service, the poller and a worker over one in-memory store, on a manual clock."""

    def __init__(self, now: datetime) -> None:
        self.clock = ManualClock(now)
        self.rig = Rig(MemoryStore(), self.clock)
        self.jobs = JobService(
            self.rig.store, self.rig.queues, self.clock, LAYOUT, QueueRouting((SHORT,), (LONG,))
        )
        self.calendars = CalendarService(self.rig.store, self.clock)
        self.runs: list[tuple[datetime, str]] = []  # (when it ran, slot)
        self.ran_until = now
        self.rig.target = FakeTarget(self._ran)
        self.worker = self.rig.worker()

    def _ran(self, ctx: SlotContext) -> TargetResult:
        self.runs.append((self.clock.now(), ctx.slot))
        return TargetResult.ok()

    def register(self, schedule: str, **fields: Any) -> Job:
        job, _ = self.jobs.register("default", spec(schedule, **fields), job_id="job-1")
        return job

    def next_fire(self) -> datetime | None:
        return self.jobs.get("default", "job-1").next_fire_at

    def pause(self) -> Job:
        return self.jobs.pause("default", "job-1")

    def resume(self) -> Job:
        return self.jobs.resume("default", "job-1")

    def paused_over(self, pause: datetime, resume: datetime) -> Job:
        """Paused at ``pause`` and resumed at ``resume``, the pollers and the workers running
        meanwhile: the resume's answer."""
        self.run_until(pause)
        self.pause()
        self.run_until(resume)
        return self.resume()

    def poll(self) -> int:
        return len(self.rig.poll(timedelta(hours=2)))

    def work(self) -> int:
        return len(self.rig.work(self.worker, SHORT)) + len(self.rig.work(self.worker, LONG))

    def step(self) -> None:
        """What the pollers and the workers do now, until nothing more is due."""
        for _ in range(50):
            if not self.poll() + self.work():
                return
        raise AssertionError("the poller and the workers did not settle")

    def _next_due(self) -> datetime | None:
        now = self.clock.now()
        store: Any = self.rig.store
        dues = [
            timer.due
            for bucket in store._buckets.values()
            for _, timer in bucket
            if timer.due > now and (timer.pk, timer.sk) not in self.rig.released_timers
        ]
        return min(dues, default=None)

    def run_until(
        self, end: datetime, every: timedelta | None = None
    ) -> list[tuple[datetime, datetime | None]]:
        """Step from one due timer to the next until ``end``; with ``every``, also read
        ``next_fire_at`` that often (after that instant's step): (when, what it was)."""
        samples: list[tuple[datetime, datetime | None]] = []
        sample_at = self.clock.now()
        while True:
            self.step()
            now = self.clock.now()
            if every is not None and now >= sample_at:
                samples.append((now, self.next_fire()))
                sample_at = now + every
            if now >= end:
                self.ran_until = now
                return samples
            stops = [end, self._next_due(), sample_at if every is not None else None]
            self.clock.set(max(min(s for s in stops if s is not None), now + timedelta(milliseconds=1)))

    def first_run(self, since: datetime, *, inclusive: bool = False) -> datetime | None:
        """When the first run after ``since`` (or at it) started."""
        return min((w for w, _ in self.runs if w > since or (inclusive and w == since)), default=None)

    def mismatches(self, samples: list[tuple[datetime, datetime | None]]) -> list[tuple[str, Any, Any]]:
        """The reads whose ``next_fire_at`` was not when the next run started (one after the end
        of the run cannot be told)."""
        return [
            (f"{t:%d %H:%M:%S}", nxt, self.first_run(t))
            for t, nxt in samples
            if nxt != self.first_run(t) and not (nxt is not None and nxt > self.ran_until)
        ]


@pytest.fixture
def sim() -> Sim:
    return Sim(at(2026, 12, 1, 9, 30))


# --------------------------------------------------------------------------- jitter


def test_a_jittered_slot_whose_instant_passed_is_next_until_it_is_released(sim: Sim) -> None:
    # Given an hourly job with a jitter of 3000 s: the 10:00 slot is released at 10:18:26
    job = sim.register("cron(0 * * * ? *)", jitter_seconds=3000)
    ten = dispatch_instant(job, at(2026, 12, 1, 10))
    assert ten == at(2026, 12, 1, 10, 18, 26)
    # When it is read between the slot's instant and its release
    samples = sim.run_until(at(2026, 12, 1, 14), every=timedelta(minutes=5))
    # Then next_fire_at is that release, which is when the slot runs (and so at every read)
    assert dict(samples)[at(2026, 12, 1, 10, 5)] == ten
    assert sim.runs[0] == (ten, "2026-12-01T10:00:00Z")
    assert sim.mismatches(samples) == []


def test_a_jitter_longer_than_the_gap_between_slots_releases_them_in_slot_order(sim: Sim) -> None:
    # Given a slot every 10 minutes delayed by up to 25: a slot's dispatch instant may come before
    # the previous slot's, and it is released with that slot (a release takes every later slot due)
    sim.register("rate(10 minutes)", jitter_seconds=1500)
    samples = sim.run_until(at(2026, 12, 1, 13), every=timedelta(minutes=1))
    # Then next_fire_at is always the next release: the first slot in slot order still to come
    assert len({w for w, _ in sim.runs}) < len(sim.runs)  # some slots did go with an earlier one
    assert sim.mismatches(samples) == []


def test_jittered_slots_keep_their_calendars_and_dst_policy() -> None:
    # Given a 02:30 Berlin job whose skipped local time is skipped (29 March 2026: 02:00 -> 03:00),
    # released up to 50 minutes late, excluding 31 March
    sim = Sim(at(2026, 3, 27, 12))
    sim.calendars.put("default", "days", CalendarSpec(timezone="Europe/Berlin", dates=["2026-03-31"]))
    sim.register(
        "cron(30 2 * * ? *)",
        timezone="Europe/Berlin",
        dst={"gap": "skip"},
        jitter_seconds=3000,
        exclude_calendars=["days"],
    )
    samples = sim.run_until(at(2026, 4, 2, 6), every=timedelta(minutes=10))
    # Then the runs are 28 March, 30 March, 1 April and 2 April, and next_fire_at named each first
    assert [slot for _, slot in sim.runs] == [
        "2026-03-28T01:30:00Z",
        "2026-03-30T00:30:00Z",
        "2026-04-01T00:30:00Z",
        "2026-04-02T00:30:00Z",
    ]
    assert sim.mismatches(samples) == []


def test_a_slot_due_before_the_job_was_registered_is_not_its_next_fire() -> None:
    # Given an hourly job with a jitter of 3000 s registered at 10:00:30: 10:00 is not its slot
    sim = Sim(at(2026, 12, 1, 10, 0, 30))
    job = sim.register("cron(0 * * * ? *)", jitter_seconds=3000)
    samples = sim.run_until(at(2026, 12, 1, 12), every=timedelta(minutes=5))
    assert job.next_fire_at == dispatch_instant(job, at(2026, 12, 1, 11)) == sim.runs[0][0]
    assert sim.mismatches(samples) == []


@pytest.mark.parametrize("payload", [None, {"edited": True}], ids=["same spec", "payload edited"])
def test_a_replace_within_the_jitter_names_the_slot_that_runs_first(sim: Sim, payload: Any) -> None:
    # Given an hourly job with a jitter of 3000 s replaced at 10:05, the 10:00 slot not yet released
    sim.register("cron(0 * * * ? *)", jitter_seconds=3000)
    sim.run_until(at(2026, 12, 1, 10, 5))
    fields = {} if payload is None else {"payload": payload}
    replaced = sim.jobs.replace("default", "job-1", spec("cron(0 * * * ? *)", jitter_seconds=3000, **fields))
    samples = sim.run_until(at(2026, 12, 1, 13), every=timedelta(minutes=5))
    assert replaced.next_fire_at == sim.first_run(at(2026, 12, 1, 10, 5))
    assert sim.mismatches(samples) == []


def test_a_replace_moving_the_timing_within_the_jitter_names_the_slot_that_runs_first(sim: Sim) -> None:
    """QA26: after a replace that moved the job's timing (hourly at :00 to :02) within the jitter,
    next_fire_at and the upcoming slots listed the new timing's 10:02, before the replace, which no
    chain releases, and left out the old chain's 10:00, owed and released on its timing."""
    sim.register("cron(0 * * * ? *)", jitter_seconds=3000)
    sim.run_until(at(2026, 12, 1, 10, 5))
    replaced = sim.jobs.replace("default", "job-1", spec("cron(2 * * * ? *)", jitter_seconds=3000))
    listed = dict(upcoming_releases(replaced, sim.clock.now(), (), 3))  # what GET .../upcoming lists
    samples = sim.run_until(at(2026, 12, 1, 13), every=timedelta(minutes=5))
    assert replaced.next_fire_at == sim.first_run(at(2026, 12, 1, 10, 5))
    assert sim.mismatches(samples) == []
    ran = {slot: when for when, slot in sim.runs}
    assert {f"{slot:%Y-%m-%dT%H:%M:%SZ}": fires for slot, fires in listed.items()} == {
        slot: when
        for slot, when in ran.items()
        if slot in {"2026-12-01T10:00:00Z", "2026-12-01T11:02:00Z", "2026-12-01T12:02:00Z"}
    }


@pytest.mark.parametrize(
    ("pause", "resume", "first"),
    [
        # paused before the 10:00 slot, resumed before its release (10:18:26): the resumed chain's
        ((9, 59), (10, 5), (10, 18, 26)),
        # paused after it, resumed before its release: the old chain's timer, met after the resume
        ((10, 10), (10, 15), (10, 18, 26)),
        # paused over its release, resumed later: the pause owes it, run at the resume
        ((10, 10), (10, 30), (10, 30)),
        ((10, 10), (11, 5), (11, 5)),
    ],
)
def test_a_resume_within_the_jitter_names_the_slot_that_runs_first(
    sim: Sim, pause: tuple[int, int], resume: tuple[int, int], first: tuple[int, ...]
) -> None:
    sim.register("cron(0 * * * ? *)", jitter_seconds=3000)
    resumed = sim.paused_over(at(2026, 12, 1, *pause), at(2026, 12, 1, *resume))
    samples = sim.run_until(at(2026, 12, 1, 13), every=timedelta(minutes=5))
    assert (
        resumed.next_fire_at
        == sim.first_run(at(2026, 12, 1, *resume), inclusive=True)
        == at(2026, 12, 1, *first)
    )
    assert sim.mismatches(samples) == []


# --------------------------------------------------------------------------- resume


@pytest.mark.parametrize("policy", ["all", "latest", "none"])
@pytest.mark.parametrize(("pause_s", "resume_s"), [(0, 0), (0.5, 0.5), (-0.5, 0), (0, -0.5)])
def test_a_resume_that_owes_slots_it_runs_names_the_resume(
    sim: Sim, policy: str, pause_s: float, resume_s: float
) -> None:
    # Given a job every minute paused around 10:05 and resumed around 10:10
    sim.clock.set(at(2026, 12, 1, 10))
    sim.register("rate(1 minute)", start_at="2026-12-01T10:00:00Z", catchup={"policy": policy})
    pause, resume = (
        at(2026, 12, 1, 10, 5) + timedelta(seconds=pause_s),
        at(2026, 12, 1, 10, 10) + timedelta(seconds=resume_s),
    )
    sim.run_until(pause - timedelta(milliseconds=600))
    sim.clock.set(pause)
    sim.pause()
    sim.run_until(resume - timedelta(milliseconds=1))
    sim.clock.set(resume)
    # When it is resumed, next_fire_at is when the next slot runs: the resume when the catch-up
    # policy runs an owed slot (or a slot due at once), else the next slot
    resumed = sim.resume()
    assert sim.next_fire() == resumed.next_fire_at
    sim.run_until(at(2026, 12, 1, 10, 13))
    assert resumed.next_fire_at == sim.first_run(resume, inclusive=True)
    runs_at_resume = [slot for when, slot in sim.runs if when == resume]
    assert (resumed.next_fire_at == resume) == bool(runs_at_resume)


def every_minute_paused_over_five(sim: Sim) -> Job:
    """A job every minute from 10:00, paused at 10:05:30 and resumed at 10:10:30 (it owes
    10:06 to 10:10): the resume's answer."""
    sim.clock.set(at(2026, 12, 1, 10))
    sim.register("rate(1 minute)", start_at="2026-12-01T10:00:00Z")
    return sim.paused_over(at(2026, 12, 1, 10, 5, 30), at(2026, 12, 1, 10, 10, 30))


def test_after_the_resume_runs_its_owed_slots_next_fire_at_is_the_next_slot_again(sim: Sim) -> None:
    resumed = every_minute_paused_over_five(sim)
    resume = sim.clock.now()
    assert resumed.next_fire_at == resume
    # The RESUME timer is released: its slots wait in the queue, still to run
    assert sim.poll() == 1
    assert sim.next_fire() == resume
    # A worker claims them: they ran, and the next is the chain's next slot
    sim.work()
    assert [slot[11:16] for when, slot in sim.runs if when == resume] == [f"10:{m:02}" for m in range(6, 11)]
    assert sim.next_fire() == at(2026, 12, 1, 10, 11)
    samples = sim.run_until(at(2026, 12, 1, 10, 20), every=timedelta(seconds=20))
    assert sim.mismatches(samples) == []


@pytest.mark.parametrize(("policy", "runs"), [("all", True), ("none", False)])
def test_a_one_time_job_resumed_after_its_instant(sim: Sim, policy: str, runs: bool) -> None:
    sim.register("at(2026-12-01T10:30:00)", catchup={"policy": policy})
    resumed = sim.paused_over(at(2026, 12, 1, 10), at(2026, 12, 1, 10, 45))
    sim.run_until(at(2026, 12, 1, 12))
    assert resumed.next_fire_at == (at(2026, 12, 1, 10, 45) if runs else None)
    assert sim.runs == ([(at(2026, 12, 1, 10, 45), "2026-12-01T10:30:00Z")] if runs else [])


@pytest.mark.parametrize(("policy", "runs"), [("all", True), ("none", False)])
def test_a_job_resumed_after_its_end_at(sim: Sim, policy: str, runs: bool) -> None:
    sim.register(
        "rate(10 minutes)",
        start_at="2026-12-01T09:40:00Z",
        end_at="2026-12-01T10:30:00Z",
        catchup={"policy": policy},
    )
    resumed = sim.paused_over(at(2026, 12, 1, 10, 5), at(2026, 12, 1, 10, 50))
    sim.run_until(at(2026, 12, 1, 12))
    assert resumed.next_fire_at == (at(2026, 12, 1, 10, 50) if runs else None)
    assert [slot[11:16] for when, slot in sim.runs if when == at(2026, 12, 1, 10, 50)] == (
        ["10:10", "10:20", "10:30"] if runs else []
    )


def test_owed_slots_on_excluded_days_do_not_make_the_resume_the_next_fire(sim: Sim) -> None:
    # Given a daily 09:00 job that excludes 2 December, paused over that slot
    sim.calendars.put("default", "days", CalendarSpec(timezone="UTC", dates=["2026-12-02"]))
    sim.register("cron(0 9 * * ? *)", exclude_calendars=["days"])
    # When it is resumed within the catch-up window of the excluded slot: nothing runs then
    resumed = sim.paused_over(at(2026, 12, 1, 12), at(2026, 12, 2, 9, 30))
    sim.run_until(at(2026, 12, 3, 10))
    assert resumed.next_fire_at == at(2026, 12, 3, 9) == sim.first_run(at(2026, 12, 2, 9, 30), inclusive=True)


def test_a_replace_or_a_read_long_after_a_resume_shows_the_next_slot_at_no_extra_read(sim: Sim) -> None:
    # Given a job resumed with owed slots at 10:10
    every_minute_paused_over_five(sim)
    sim.run_until(at(2026, 12, 1, 10, 30, 30))
    # When the same spec is written again, its answer is the next slot (the owed ones ran)
    again = sim.jobs.replace("default", "job-1", spec("rate(1 minute)", start_at="2026-12-01T10:00:00Z"))
    sim.run_until(at(2026, 12, 1, 10, 31, 40))
    assert again.next_fire_at == at(2026, 12, 1, 10, 31) == sim.first_run(at(2026, 12, 1, 10, 30, 30))
    # And a read more than a minute after the resume reads no execution record
    reads: list[str] = []
    store: Any = sim.rig.store
    original = store.get_execution
    store.get_execution = lambda *key: reads.append(key[2]) or original(*key)
    assert sim.next_fire() == at(2026, 12, 1, 10, 32)
    assert sim.jobs.list_jobs("default", 10).items[0].next_fire_at == at(2026, 12, 1, 10, 32)
    assert reads == []


def test_the_console_shows_the_same_next_fire_as_the_api(sim: Sim) -> None:
    """The console derived it on its own, as the API did before (a jittered slot still pending
    left out)."""
    from punctual.console.view import next_fire

    job = sim.register("cron(0 * * * ? *)", jitter_seconds=3000)
    sim.run_until(at(2026, 12, 1, 10, 5))
    assert next_fire(job, sim.clock.now()) == at(2026, 12, 1, 10, 18, 26) == sim.next_fire()
