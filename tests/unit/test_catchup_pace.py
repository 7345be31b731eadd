"""A tenant's catch-up is released at most its catch-up rate a second, whatever its number of jobs.

QA30: a job owes its slots after an outage (catch-up policy ``all``) and the pollers released them
30 a second per job, with no bound per tenant; a tenant's 10 ``rate(1 second)`` jobs after a
7-minute stop sent 300 owed slots a second to workers that start 200, and another tenant's slots
due meanwhile, sent behind them, started up to 7.1 s late (at 100 jobs and 1,000 claims a second,
28 s).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from test_resend_backlog import _SteadyWorkers

from factories import spec
from punctual.dispatch.polling import PollerConfig
from punctual.dispatch.polling.catchup_pace import CatchupPace
from punctual.dispatch.polling.drain import MinuteDrain
from punctual.dispatch.polling.release import ReleaseReport
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.slots import MAX_RELEASE_PER_TIMER
from punctual.timing.timers import Timer, TimerKind
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import LAYOUT, SHORT, most_within

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
OUTAGE_MIN = 7


def _instant(slot: str) -> datetime:
    return datetime.fromisoformat(slot.replace("Z", "+00:00"))


class _Outage:
    """Tenant acme's ``jobs`` rate(1 second) jobs ran, then no poller for 7 minutes; when the pollers
    come back, globex has ``other`` (a rate(1 second) job due from then on, or one that owes a
    catch-up too); workers claim ``claims`` a second in the order sent."""

    def __init__(self, jobs: int, claims: float, pace: float, other_owes: bool = False) -> None:
        store, clock = MemoryStore(), ManualClock(T - timedelta(minutes=2))
        self.sim = sim = _SteadyWorkers(store, clock)
        sim.RATE = claims
        sim.config = replace(sim.config, catchup_slots_per_second_per_tenant=pace)
        service = JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), ("queue://long",)))
        start = T.isoformat()
        self.acme = {
            service.register("acme", spec("rate(1 second)", start_at=start))[0].id for _ in range(jobs)
        }
        if other_owes:
            self.other = service.register("globex", spec("rate(1 second)", start_at=start))[0].id
        sim.run([T - timedelta(minutes=1), T], until=T + timedelta(seconds=70))
        self.back = back = T + timedelta(minutes=1 + OUTAGE_MIN)
        clock.set(back - timedelta(seconds=10))
        if not other_owes:
            first = (back + timedelta(seconds=2)).isoformat()
            self.other = service.register("globex", spec("rate(1 second)", start_at=first))[0].id
        sim.run([back + timedelta(minutes=m) for m in range(3)], until=back + timedelta(minutes=3))

    def late_s(self, job_id: str) -> list[float]:
        return [
            (at - _instant(slot)).total_seconds()
            for (job, slot), at in self.sim.started.items()
            if job == job_id
        ]


def test_a_tenants_catch_up_of_many_jobs_does_not_make_another_tenants_slots_late() -> None:
    # Given acme's 10 jobs owing 4,200 slots, workers starting 200 a second, a catch-up rate of 100
    outage = _Outage(jobs=10, claims=200.0, pace=100.0)
    # Then globex's slots due while acme catches up start on time (before: up to 7.1 s late, 19 of
    # them past 1 s)
    late = outage.late_s(outage.other)
    assert len(late) == 178 and max(late) < 1.0
    # and acme's catch-up is all run, each slot once
    started = [job for job, _ in outage.sim.started if job in outage.acme]
    assert len(started) == 10 * 660 and outage.sim.dropped == 0


def test_a_tenants_owed_slots_are_sent_at_its_catch_up_rate() -> None:
    outage = _Outage(jobs=10, claims=1000.0, pace=100.0)
    owed_before = outage.back
    sends = [
        at
        for at, m in outage.sim.queues.log
        if m.job_id in outage.acme
        and _instant(m.slot) < owed_before
        and at >= owed_before - timedelta(seconds=10)
    ]
    assert len(sends) >= 10 * (OUTAGE_MIN * 60)
    # A bucket of one second's slots and the second's own, and the one timer (30 slots) taken on credit
    assert most_within(sends, timedelta(seconds=1)) <= 2 * 100 + 30
    # (without the pace: 300 a second, 30 a job)
    assert most_within(sends, timedelta(seconds=5)) <= 5 * 100 + 100 + 30


def test_another_tenants_catch_up_is_not_held_behind_a_paced_one() -> None:
    # Given globex owing a catch-up too (one job, 420 slots) beside acme's ten
    outage = _Outage(jobs=10, claims=1000.0, pace=100.0, other_owes=True)
    back = outage.back
    sends = [(at, m) for at, m in outage.sim.queues.log if at >= back - timedelta(seconds=10)]
    owed = [at for at, m in sends if m.job_id == outage.other and _instant(m.slot) < back]
    acme_owed = [at for at, m in sends if m.job_id in outage.acme and _instant(m.slot) < back]
    # Then globex's owed slots are sent at their job's own pace (30 a second, as without the rate),
    # past acme's waiting timers, and done long before acme's 4,200 at 100 a second
    assert len(owed) == OUTAGE_MIN * 60 and len(acme_owed) == 10 * OUTAGE_MIN * 60
    assert most_within(owed, timedelta(seconds=4)) >= 4 * 30
    assert max(acme_owed) - max(owed) > timedelta(seconds=20)


_TIMER = {"now": T, "due": T, "job_id": "j", "slot": "2026-12-01T12:00:00Z", "attempt": 1, "job_version": 1}


def _catchup_timer(tenant: str) -> Timer:
    return LAYOUT.make(**_TIMER, tenant=tenant, kind=TimerKind.CATCHUP)  # type: ignore[arg-type]


def test_the_pace_takes_a_tenants_timers_while_its_bucket_holds_slots_and_charges_what_was_sent() -> None:
    pace = CatchupPace(60.0, group_count=2)  # 30 a second for this poller's group
    timer = _catchup_timer("acme")
    assert pace.may_take(timer, 0)  # a full bucket: 30
    assert not pace.may_take(timer, 0)  # taken at the 30 it may carry
    assert pace.may_take(_catchup_timer("globex"), 0)  # another tenant's bucket is its own
    pace.charge({"acme": 5, "globex": 30})  # what the release really sent
    assert pace.may_take(timer, 0)  # 25 left
    pace.charge({"acme": 30})  # -5
    assert not pace.may_take(timer, 100)  # -5 + 3 (100 ms at 30 a second)
    assert pace.may_take(timer, 200)  # +1
    pace.release_taken()  # a release that failed costs nothing
    assert pace.may_take(timer, 200)
    assert CatchupPace(0.0, 4).may_take(timer, 0) and CatchupPace(0.0, 4).active is False


class _Releaser:
    """Releases what it is given (30 owed slots a timer), or fails while ``failing``."""

    def __init__(self) -> None:
        self.clock = ManualClock(T)
        self.config = PollerConfig()
        self.failing = True
        self.released: list[Timer] = []

    def release(self, timers: list[Timer], uncertain: bool = False) -> ReleaseReport:
        if self.failing:
            raise RuntimeError("queue unreachable")
        self.released += timers
        sent = Counter(t.tenant for t in timers for _ in range(MAX_RELEASE_PER_TIMER))
        return ReleaseReport(released=sum(sent.values()), sent_by_tenant=dict(sent))


def test_lagging_timers_a_pace_holds_keep_their_order_and_a_failed_release_puts_all_back() -> None:
    releaser = _Releaser()
    drain = MinuteDrain(releaser, uncertain_through_ms=None, defer_catchup=True)  # type: ignore[arg-type]
    a1, a2, b1, a3 = (
        LAYOUT.make(
            **{**_TIMER, "due": T + timedelta(seconds=s), "job_id": f"j{s}"}, tenant=n, kind=TimerKind.CATCHUP
        )  # type: ignore[arg-type]
        for s, n in ((1, "acme"), (2, "acme"), (3, "globex"), (4, "acme"))
    )
    drain.lagging.extend([a1, a2, b1, a3])
    pace = CatchupPace(30.0, group_count=1)  # one timer of each tenant a second
    # When the release of what the pace allows (a1, then b1 past acme's waiting a2) fails
    with pytest.raises(RuntimeError):
        drain.release_lagging(20, pace)
    # Then every timer is back, in due order, and the failed release cost no tenant its rate
    assert list(drain.lagging) == [a1, a2, b1, a3]
    releaser.failing = False
    drain.release_lagging(20, pace)
    assert releaser.released == [a1, b1] and list(drain.lagging) == [a2, a3]
    # and acme's next timer waits for its bucket to fill again (a second at 30 a second)
    drain.release_lagging(20, pace)
    assert list(drain.lagging) == [a2, a3]
    releaser.clock.set(T + timedelta(seconds=1))
    drain.release_lagging(20, pace)
    assert releaser.released[2:] == [a2] and list(drain.lagging) == [a3]
