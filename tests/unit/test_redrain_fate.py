"""A slot released on time is never recorded MISSED by a later re-drain
(:mod:`punctual.dispatch.polling.redrain`).

A poller that resumes another's work releases again, as uncertain, the timers the earlier one may
have released. A job's timer whose chain's next timer is in a later minute was planned again as of
then: its slot, sent on time and still waiting in a backlogged queue, was found over 60 s late and
recorded MISSED, and the worker dropped the original message on that record. The in-process rig
(:class:`simulation.SteadyWorkers`: workers claiming at a fixed rate, each claim writes the slot's
record unless it has one, as the worker's conditional claim does).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from punctual.models import ExecutionStatus

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@dataclass
class Fates:
    """What became of one group's first slots (one a job)."""

    ran: int  # slots whose record is the workers' (SUCCEEDED)
    missed: int  # slots recorded MISSED
    missed_sent_on_time: int  # of those, slots whose first message was sent under 60 s late
    entries: int  # SQS entries sent for the slots, repeats too
    copies: int  # messages the queue took beyond one a slot (a repeat inside the dedup window is not)


def _fates(sim: Any, store: Any, ids: set[str], slot: datetime) -> Fates:
    key = slot.strftime("%Y-%m-%dT%H:%M:%SZ")
    log = [(at, m) for at, m in sim.queues.log if m.job_id in ids and m.slot == key]
    first: dict[str, float] = {}
    for at, message in log:
        first.setdefault(message.job_id, (at - slot).total_seconds())
    records = [(job, r) for (_, job, s), r in store._executions.items() if job in ids and s == key]
    missed = [job for job, r in records if r.status is ExecutionStatus.MISSED]
    return Fates(
        ran=sum(1 for _, r in records if r.status is ExecutionStatus.SUCCEEDED),
        missed=len(missed),
        missed_sent_on_time=sum(1 for job in missed if first.get(job, 61.0) <= 60.0),
        entries=sim.queues.entries_between(slot, slot + timedelta(seconds=1)),
        copies=len(log) - len({m.job_id for _, m in log}),
    )


def _scene(
    schedule: str,
    catchup: dict[str, Any],
    groups: list[tuple[int, int]],
    minutes: list[int],
    kill: tuple[int, float] | None,
    rate: float = 5.0,
    fast: int = 0,
    change: tuple[int, str] | None = None,
) -> list[Fates]:
    """Jobs of five tenants (``groups``: how many first due at each second after 12:00), pollers for
    the ``minutes`` after 12:00, all of them killed at ``kill`` (second, and how long until the
    killed ones start again), workers claiming ``rate`` a second; and ``fast`` catch-up ``all``
    ``rate(1 second)`` jobs from 11:59:30, with queues that say how many messages wait (the pace
    holds catch-up by them); ``change``: at that second every job is paused and resumed, paused
    and resumed 68 s later, or replaced by its own spec (``"pause"``, ``"pause a while"``,
    ``"replace"``). The fate of each group's first slots."""
    from factories import spec
    from punctual.runtime.clock import ManualClock
    from punctual.store.memory import MemoryStore
    from punctual.usecases.jobs import JobService, QueueRouting
    from simulation import LONG, SHORT, SteadyWorkers

    clock = ManualClock(T - timedelta(minutes=1))
    rig = type("Workers", (SteadyWorkers,), {"RATE": rate, "counted": fast > 0})
    store = MemoryStore()
    sim = rig(store, clock)
    jobs = JobService(store, sim.queues, clock, sim.config.layout, QueueRouting((SHORT,), (LONG,)))
    made = itertools.count(1)  # job ids (their shards) fixed: the run is the same every time

    tenants: dict[str, tuple[str, Any]] = {}

    def register(tenant: str, job: Any) -> str:
        job_id = str(jobs.register(tenant, job, f"{tenant}-{next(made):04d}")[0].id)
        tenants[job_id] = (tenant, job)
        return job_id

    def changed(kind: str) -> None:
        for job_id, (tenant, job) in sorted(tenants.items()):
            if kind in ("pause", "pause a while"):
                jobs.pause(tenant, job_id)
            if kind in ("pause", "resume"):
                jobs.resume(tenant, job_id)
            if kind == "replace":
                jobs.replace(tenant, job_id, job)

    every_second = spec("rate(1 second)", start_at=(T - timedelta(seconds=30)).isoformat())
    for i in range(fast):
        register(f"all-{i % 5}", every_second)
    owed: list[tuple[set[str], datetime]] = []
    for due_s, count in groups:
        due = T + timedelta(seconds=due_s)
        owing = spec(schedule, start_at=due.isoformat(), catchup=catchup)
        owed.append(({register(f"{catchup['policy']}-{i % 5}", owing) for i in range(count)}, due))
    kills = [] if kill is None else [(T + timedelta(seconds=kill[0]), kill[1])]
    events = [] if change is None else [(T + timedelta(seconds=change[0]), lambda: changed(change[1]))]
    if change is not None and change[1] == "pause a while":  # resumed 68 s on, after the re-drain
        events.append((T + timedelta(seconds=change[0] + 68), lambda: changed("resume")))
    until = T + timedelta(minutes=5)
    sim.run([T + timedelta(minutes=m) for m in minutes], until=until, events=events, kills=kills)
    return [_fates(sim, store, ids, due) for ids, due in owed]


@pytest.mark.parametrize(
    ("schedule", "catchup"),
    [
        ("rate(1 hour)", {"policy": "none"}),
        ("rate(1 minute)", {"policy": "latest"}),
        ("rate(1 hour)", {"policy": "all", "window_seconds": 60}),
    ],
)
@pytest.mark.parametrize("back_s", [60.0, 10_000.0])
def test_a_slot_sent_on_time_is_not_judged_late_again_by_a_re_drain(
    schedule: str, catchup: dict[str, Any], back_s: float
) -> None:
    # Given 600 jobs first due at 12:00:20, released on time, and workers claiming 5 a second (the
    # last message waits two minutes); the minute's poller killed at 12:00:25, back only after its
    # minute (or never): the next minute's poller drains the minute again from its progress mark at
    # 12:01:20, a restart after the minute re-reads it too, both as of then, 60 s after the slots
    (fates,) = _scene(schedule, catchup, [(20, 600)], [0, 1, 2], (25, back_s))
    # Then no slot whose message went out on time is recorded MISSED (296 were, and their messages
    # were dropped at the claim: never run), every one runs, once; the re-drain's copies of the
    # slots waiting in the queue are repeats the queue drops (no message beyond one a slot)
    assert (fates.missed_sent_on_time, fates.missed) == (0, 0), fates
    assert fates.ran == 600 and fates.copies == 0, fates


@pytest.mark.parametrize("change", ["pause", "pause a while", "replace"])
def test_a_slot_sent_on_time_is_not_judged_late_again_after_a_pause_or_a_replace(change: str) -> None:
    # Given the 600 catch-up `none` jobs of 12:00:20 released on time and waiting for the workers,
    # each paused and resumed (its old chain's timer is then a pause's orphan), paused until
    # 12:01:30 (the re-drain meets the timer while the job is paused: its slot was parked, owed by
    # the resume) or replaced by its own spec (a secret rotation: its old chain's timer is a
    # replaced chain's) at 12:00:22, and the minute's poller killed at 12:00:25, the next minute's
    # draining the minute again
    (fates,) = _scene(
        "rate(1 hour)", {"policy": "none"}, [(20, 600)], [0, 1, 2], (25, 10_000.0), change=(22, change)
    )
    # Then none of the slots is recorded MISSED (296 were, and 250 parked ones by the resume: the
    # re-drain judged them owed by the pause, or by the replace, and over 60 s late; a parked one
    # now goes as a copy of its message, as it was, whose claim skips it while the job is paused),
    # every one runs once (a replaced chain's copy is
    # a message of the new version: the claim of the original, first in the slot's group, starts
    # it, the copy's finds its record)
    assert (fates.missed_sent_on_time, fates.missed, fates.ran) == (0, 0, 600), fates


def test_slots_no_poller_released_keep_their_policy_after_an_outage() -> None:
    # Given catch-up `none` jobs: 300 due at 12:00:20 (released on time), 300 due at 12:00:45; the
    # minute's poller killed at 12:00:25 and every poller down until 12:03 (the 12:03 poller drains
    # the minute, 2 minutes on), workers claiming 5 a second
    sent, unsent = _scene(
        "rate(1 hour)", {"policy": "none"}, [(20, 300), (45, 300)], [-1, 0, 3], (25, 10_000.0)
    )
    # Then what was sent on time runs, and what no poller released before its fate line is MISSED
    # (2 minutes late), not run
    assert (sent.ran, sent.missed) == (300, 0), sent
    assert (unsent.ran, unsent.missed) == (0, 300), unsent


def test_a_restart_long_after_its_poller_died_keeps_the_policy_of_slots_never_sent() -> None:
    # Given the same jobs and outage, but the minute's poller started again at 12:02:25, after every
    # poller was down 2 minutes: it resumes from its minute's progress marks (the last near 12:00:25)
    sent, unsent = _scene("rate(1 hour)", {"policy": "none"}, [(20, 300), (45, 300)], [-1, 0, 3], (25, 120.0))
    # Then the slots due 20 s after the dead poller's last mark, never sent, 100 s late when the
    # restart releases them, are MISSED as catch-up `none` says (all 300 ran: the restart took them
    # for maybe sent, as though its poller had been releasing until the restart's own instant)
    assert (sent.ran, sent.missed) == (300, 0), sent
    assert (unsent.ran, unsent.missed, unsent.entries) == (0, 300, 0), unsent


def test_a_minute_no_poller_released_is_missed_as_before() -> None:
    # Given catch-up `none` jobs due at 12:00:20 whose minute had no poller at all (its progress
    # marks: none), the 12:02 poller draining it 90 s on
    (fates,) = _scene("rate(1 hour)", {"policy": "none"}, [(20, 300)], [-1, 2], None)
    # Then every slot is MISSED, none runs
    assert (fates.ran, fates.missed, fates.entries) == (0, 300, 0), fates


@pytest.mark.parametrize(
    ("kind", "catchup", "due_s", "sent_by_s", "kept"),
    [
        ("fire", {"policy": "none"}, 0, 5, True),  # released by 0:05, in time at :00
        ("fire", {"policy": "none"}, 0, -1, False),  # due after the earlier poller stopped
        ("fire", {"policy": "all", "window_seconds": 60}, 0, 0, True),
        ("catchup", {"policy": "all", "window_seconds": 60}, 70, 100, False),  # past its line when due
        ("catchup", {"policy": "all", "window_seconds": 90}, 70, 100, True),
        ("catchup", {"policy": "none"}, 30, 100, True),  # 30 s late when written: in time then
    ],
)
def test_a_slot_is_maybe_sent_when_an_earlier_release_could_send_it_before_its_fate_line(
    kind: str, catchup: dict[str, Any], due_s: int, sent_by_s: int, kept: bool
) -> None:
    from dataclasses import replace

    from factories import job
    from punctual.dispatch.polling.redrain import keep_maybe_sent
    from punctual.timing.slots import fire_timer, plan_release
    from punctual.timing.timers import TimerKind, TimerLayout, to_ms

    owing = job(schedule="rate(1 hour)", catchup=catchup)
    slot, now = T, T + timedelta(minutes=3)  # re-drained 3 minutes on: the slot is late now
    timer = fire_timer(TimerLayout(), owing, slot, T - timedelta(minutes=1))
    if kind == "catchup":  # written late by a release (due when written)
        timer = fire_timer(TimerLayout(), owing, slot, T + timedelta(seconds=due_s), chained=True)
        assert timer.kind is TimerKind.CATCHUP
    plan = plan_release(owing, slot, now, due=timer.due)
    assert plan.missed and not plan.release
    late = replace(plan, missed=list(plan.missed), release=list(plan.release))
    got = keep_maybe_sent(owing, late, timer, to_ms(T + timedelta(seconds=sent_by_s)))
    assert (got == [(owing.tenant, owing.id, timer.slot)]) is kept and (late.release == [slot]) is kept
    assert (late.missed == []) is kept
    # A slot dropped for another cause than its lateness (a calendar, a replace) keeps its verdict
    other = replace(plan, missed=[(slot, "calendar missing")], release=[])
    assert keep_maybe_sent(owing, other, timer, to_ms(now)) == [] and other.missed


def test_a_minute_handed_on_behind_lagging_timers_is_drained_again_without_missing_what_it_sent() -> None:
    # Given 20 catch-up `all` rate(1 second) jobs whose pollers were down from 12:00:35 for 35 s:
    # the rest of their chains waits its turn in the 12:01 poller's minute (CATCHUP timers, held by
    # the pace while the queues hold a backlog), and holds its progress mark back at 12:01:10; 200
    # catch-up `none` jobs due at 12:01:35 are released on time behind it; workers claiming 9 a
    # second. The minute is handed on with timers still waiting: the 12:02 poller drains it from
    # its mark, and the 12:03 poller again from the mark the 12:02 one left, 70 s after the slots
    (fates,) = _scene("rate(1 hour)", {"policy": "none"}, [(95, 200)], [-1, 0, 1, 2, 3], (35, 35.0), 9.0, 20)
    # Then none of the slots sent on time is recorded MISSED (all 200 were, and never ran)
    assert (fates.missed_sent_on_time, fates.missed, fates.ran, fates.copies) == (0, 0, 200, 0), fates


def test_how_long_a_dead_poller_may_have_been_releasing_past_its_mark() -> None:
    from factories import job
    from punctual.dispatch.polling.redrain import sent_by_ms
    from punctual.timing.slots import fire_timer
    from punctual.timing.timers import TimerKind, TimerLayout, to_ms

    owing = job(schedule="rate(1 second)")
    mark, now = to_ms(T + timedelta(seconds=10)), to_ms(T + timedelta(minutes=2))
    on_time = fire_timer(TimerLayout(), owing, T + timedelta(seconds=30), T)
    waiting = fire_timer(TimerLayout(), owing, T, T + timedelta(seconds=10, milliseconds=1), chained=True)
    assert waiting.kind is TimerKind.CATCHUP and waiting.due_ms == mark + 1
    # No mark: no poller released any of the minute
    assert sent_by_ms([], [on_time, waiting], 9000, now) is None
    # A mark: its poller may have gone on a mark's interval and the skew past it
    assert sent_by_ms([mark, mark - 5000], [on_time], 9000, now) == mark + 9000
    # A mark held back by a timer waiting its turn: its poller may have released to its end
    assert sent_by_ms([mark], [on_time, waiting], 9000, now) == now
    assert sent_by_ms([mark - 1], [on_time, waiting], 9000, now) == mark - 1 + 9000


def test_a_paused_jobs_slot_maybe_sent_before_the_pause_is_copied_not_owed_by_the_resume() -> None:
    from factories import job
    from punctual.dispatch.polling.redrain import paused_copy
    from punctual.models import JobState
    from punctual.timing.slots import fire_timer
    from punctual.timing.timers import TimerKind, TimerLayout, to_ms

    # Given a rate(10 seconds) job paused at 12:00:25, whose 12:00:00 timer a re-drain meets
    paused = job(schedule="rate(10 seconds)", catchup={"policy": "none"}, state=JobState.PAUSED)
    paused = paused.model_copy(update={"paused_at": T + timedelta(seconds=25)})
    timer = fire_timer(TimerLayout(), paused, T, T - timedelta(minutes=1))
    # When the earlier poller may have released it (by 12:00:05): a copy of its slot, as its chain,
    # and the next slot (due before the pause too) is the one the resume owes
    found = paused_copy(paused, timer, to_ms(T + timedelta(seconds=5)))
    assert found is not None
    chain, plan, rest = found
    assert chain.version == timer.job_version and plan.release == [T] and not plan.chain
    assert rest is not None and rest.slot == "2026-12-01T12:00:10Z"
    # A slot whose next one is after the pause owes nothing more; one no earlier poller can have
    # released in time (it stopped before the slot) is parked as before
    late = fire_timer(TimerLayout(), paused, T + timedelta(seconds=20), T - timedelta(minutes=1))
    assert paused_copy(paused, late, to_ms(T + timedelta(seconds=20)))[2] is None  # type: ignore[index]
    assert paused_copy(paused, timer, to_ms(T) - 1) is None
    # And a timer written past its slot's fate line (a CATCHUP timer due 70 s after it: no release
    # of it could send the slot in time) is parked, however late the earlier poller went on
    written_late = fire_timer(TimerLayout(), paused, T, T + timedelta(seconds=70), chained=True)
    assert written_late.kind is TimerKind.CATCHUP
    assert paused_copy(paused, written_late, to_ms(T + timedelta(minutes=2))) is None
