"""Progress marks cost a write only when there is progress to keep (issue 30: the idle month).

A minute's poller records how far it released every ``progress_interval_s`` so that a restart of
it resumes there. An interval in which it released nothing leaves the mark where it was: a
restart from the older mark re-reads a stretch in which nothing was due, and re-sends nothing.
Idle, the marks were most of the poller's writes: 36 a minute, $0.99 of a $15 idle month.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from factories import spec
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobStore
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import LAYOUT, SHORT, Simulation


def _counting_marks(store: JobStore) -> list[tuple[Any, ...]]:
    marks: list[tuple[Any, ...]] = []
    write = store.put_progress

    def put_progress(*args: Any, **kwargs: Any) -> None:
        marks.append(args)
        write(*args, **kwargs)

    store.put_progress = put_progress  # type: ignore[method-assign]
    return marks


def test_an_idle_minute_writes_at_most_its_last_progress_mark(store: JobStore, t0: datetime) -> None:
    # Given a deployment with nothing due
    clock = ManualClock(t0 - timedelta(minutes=1))
    sim = Simulation(store, clock)
    marks = _counting_marks(store)
    # When a minute's poller runs through its minute and grace
    sim.run([t0], t0 + timedelta(minutes=2))
    # Then it wrote no mark while polling (at most the one at its end)
    assert len(marks) <= 1, marks


def test_a_busy_minute_marks_its_progress_as_it_goes(store: JobStore, t0: datetime) -> None:
    # Given a job due every second of the minute
    clock = ManualClock(t0 - timedelta(minutes=1))
    sim = Simulation(store, clock)
    service = JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), ("queue://long",)))
    service.register("default", spec("rate(1 second)", start_at=t0.isoformat()))
    marks = _counting_marks(store)
    # When the minute's poller runs
    sim.run([t0], t0 + timedelta(minutes=2))
    # Then it marked its progress through the minute, each mark further on than the one before
    through = [args[3] for args in marks]
    assert len(through) >= 20, through
    assert through == sorted(through) and len(set(through)) == len(through), through


def test_marks_go_on_past_the_look_back_after_the_last_slot_handled(store: JobStore, t0: datetime) -> None:
    # Given one one-time job due 10 s into the minute
    clock = ManualClock(t0 - timedelta(minutes=1))
    sim = Simulation(store, clock)
    service = JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), ("queue://long",)))
    due = t0 + timedelta(seconds=10)
    service.register("default", spec(f"at({due:%Y-%m-%dT%H:%M:%S})"))
    marks = _counting_marks(store)
    # When the minute's poller runs until 40 s into its minute (it never reaches its end)
    sim.run([t0], t0 + timedelta(seconds=40))
    # Then its last mark is a look-back past the slot: a restart from it reads nothing handled again
    through = [args[3] for args in marks]
    lookback_ms = sim.config.near_lookback_ms
    assert through and max(through) >= int(due.timestamp() * 1000) + lookback_ms, through
    # and it stopped marking once there: a few marks, not one every interval of the minute
    assert len(through) <= 2 + lookback_ms // int(sim.config.progress_interval_s * 1000), through
