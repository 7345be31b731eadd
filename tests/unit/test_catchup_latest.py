"""Catch-up ``latest`` after an outage longer than one release's walk (QA): only the newest due
slot runs, or none when the regular slot is due at once; every other one is recorded MISSED."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from factories import spec
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import LAYOUT, LONG, SHORT, Simulation


def T(h: int, m: int, s: int = 0) -> datetime:
    return datetime(2026, 12, 1, h, m, s, tzinfo=UTC)


@pytest.mark.parametrize("outage_minutes", [20, 45, 61, 100])
def test_latest_runs_no_late_slot_when_the_regular_one_is_due_and_records_every_other(
    outage_minutes: int,
) -> None:
    # Given a rate(1 minute) job with catch-up latest (window an hour), whose pollers stop after
    # 10:10 and come back `outage_minutes` later (the walk of one release takes 30 slots)
    store, clock = MemoryStore(), ManualClock(T(10, 0))
    sim = Simulation(store, clock, claim_latency_s=0.3)
    jobs = JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    jobs.register(
        "default",
        spec("rate(1 minute)", start_at="2026-12-01T10:00:00Z", catchup={"policy": "latest"}),
        job_id="j",
    )
    sim.run([T(10, m) for m in range(11)], until=T(10, 10, 30))
    back = T(10, 10) + timedelta(minutes=outage_minutes)  # the regular slot then is due at once
    clock.set(back + timedelta(seconds=1))  # the minute before is 61 s late: missed, not on time
    sim.run([back, back + timedelta(minutes=1)], until=back + timedelta(seconds=90))
    # Then no slot of the outage ran (the regular slot was due at once), and each is recorded
    ran = [datetime.fromisoformat(s) for s in sim.slots("j")]
    assert [s for s in ran if s > T(10, 10)] == [back, back + timedelta(minutes=1)]
    records = store.list_executions("default", "j", limit=1000).items
    covered = sum(r.slot_count or 1 for r in records if r.status.value == "MISSED")
    assert covered == outage_minutes - 1  # 10:11 up to the minute before the pollers came back
