"""A batch prepares all its jobs before it stores any: each first timer is placed from the clock
as it is written, not as it was prepared (review QA28: a near slot's timer placed seconds earlier
was clamped to the preparing instant, behind the near lane's look-back, and its slot released
only at the minute's last read, up to ~70 s late)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from factories import spec
from punctual.dispatch.queues import MemoryQueues
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import Lane, TimerLayout
from punctual.usecases.jobs import JobService, QueueRouting

T0 = datetime(2026, 12, 7, 10, 0, 0, tzinfo=UTC)
LAYOUT = TimerLayout(4, 2, 180)
GAP = timedelta(seconds=30)  # a slow batch: the time between a job's preparing and its write


def _service(clock: ManualClock) -> JobService:
    return JobService(
        MemoryStore(), MemoryQueues(now=clock.now), clock, LAYOUT, QueueRouting(("short",), ("long",))
    )


def _first_timer_due(service: JobService, job_id: str) -> datetime:
    store = service.store
    found = []
    for lane, shards in ((Lane.NEAR, LAYOUT.near_shard_count), (Lane.FAR, LAYOUT.shard_count)):
        for minute in (T0, T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)):
            for shard in range(shards):
                found += [t for t in store.query_timers(lane, minute, shard) if t.job_id == job_id]
    assert len(found) == 1, found
    return datetime.fromtimestamp(found[0].due_ms / 1000, UTC)


@pytest.mark.parametrize("grouped", [True, False], ids=["a group", "alone"])
def test_a_first_timer_is_placed_when_it_is_written_not_when_prepared(grouped: bool) -> None:
    clock = ManualClock(T0)
    service = _service(clock)
    # Due 5 s after the preparing: by the write, 25 s past (the slot is owed, due at once)
    new = service.prepare("t1", spec("rate(1 hour)", start_at=(T0 + timedelta(seconds=5)).isoformat()), "j1")
    clock.advance(GAP.total_seconds())
    if grouped:
        (made,) = service.store_prepared([new])
        assert not isinstance(made, Exception), made
    else:
        service.write_prepared(new)
    assert _first_timer_due(service, "j1") == T0 + GAP
