"""A calendar in use cannot be deleted, whatever interleaving of job and calendar writes.

Issue 29's finding: the record that makes a calendar "in use" could be lost in two races (two
replaces of one job, one dropping the calendar and one keeping it; a create racing a calendar
delete that pruned the record of a job not written yet), the calendar was deleted, and the
job's holiday slots ran. Now a job write and its calendar uses are one transaction with a check
that each calendar exists, and a delete prunes a stale use only while its job is unchanged.

The property: the use cases (create, replace, delete of jobs; delete of calendars) run at once,
each on its own thread, and every store call waits for a turn; hypothesis picks whose call goes
next, so every interleaving of their store calls can come up. None may end with a job that
excludes a calendar that is gone, or one that a later delete would not see as in use.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from execution_harness import LAYOUT, LONG, SHORT
from factories import spec
from punctual.dispatch.queues import MemoryQueues, QueueRouting
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobExistsError
from punctual.store.memory import MemoryStore
from punctual.usecases.calendar_service import CalendarService
from punctual.usecases.calendars import CalendarSpec
from punctual.usecases.job_errors import JobError
from punctual.usecases.jobs import JobService

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
CALENDARS = ("h1", "h2")
JOBS = ("a", "b")
WAIT_S = 60.0  # a generous bound on a thread reaching its next store call (reached in microseconds)


class Turns:
    """Lets one store call run at a time, in the order the test picks."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.state: dict[int, str] = {}  # thread index -> "running" | "waiting" | "done"
        self.granted: int | None = None
        self.failure: BaseException | None = None

    def gate(self, index: int) -> None:
        with self.cond:
            self.state[index] = "waiting"
            self.cond.notify_all()
            if not self.cond.wait_for(lambda: self.granted == index, WAIT_S):
                raise TimeoutError("never given a turn")
            self.state[index] = "running"

    def done_call(self) -> None:
        with self.cond:
            self.granted = None
            self.cond.notify_all()

    def finish(self, index: int) -> None:
        with self.cond:
            self.state[index] = "done"
            self.cond.notify_all()

    def settled(self) -> list[int]:
        """Wait until no thread runs; the ones waiting for a turn."""
        with self.cond:
            ok = self.cond.wait_for(
                lambda: self.granted is None and "running" not in self.state.values(), WAIT_S
            )
            assert ok, f"a thread did not reach its next store call: {self.state}"
            return sorted(i for i, st_ in self.state.items() if st_ == "waiting")

    def grant(self, index: int) -> None:
        with self.cond:
            self.granted = index
            self.cond.notify_all()


class TurnStore:
    """The store as one thread sees it: every public call waits for that thread's turn."""

    def __init__(self, store: MemoryStore, turns: Turns, index: int) -> None:
        self._store, self._turns, self._index = store, turns, index

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._turns.gate(self._index)
            try:
                return attr(*args, **kwargs)
            finally:
                self._turns.done_call()

        return call


Op = tuple[str, str, tuple[str, ...]]  # (kind, job or calendar, calendars)

ops = st.one_of(
    st.tuples(
        st.just("create"), st.sampled_from(JOBS), st.lists(st.sampled_from(CALENDARS), unique=True).map(tuple)
    ),
    st.tuples(
        st.just("replace"),
        st.sampled_from(JOBS),
        st.lists(st.sampled_from(CALENDARS), unique=True).map(tuple),
    ),
    st.tuples(st.just("delete"), st.sampled_from(JOBS), st.just(())),
    st.tuples(st.just("delete calendar"), st.sampled_from(CALENDARS), st.just(())),
)


def _use_case(op: Op, store: Any, clock: ManualClock) -> Callable[[], object]:
    kind, name, calendars = op
    queues = MemoryQueues(now=clock.now)
    jobs = JobService(store, queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    job_spec = spec("rate(1 hour)", exclude_calendars=list(calendars))
    if kind == "create":
        return lambda: jobs.register("default", job_spec, job_id=name)
    if kind == "replace":
        return lambda: jobs.replace("default", name, job_spec)
    if kind == "delete":
        return lambda: jobs.delete("default", name)
    return lambda: CalendarService(store, clock).delete("default", name)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=st.lists(st.sampled_from(CALENDARS), unique=True),
    concurrent=st.lists(ops, min_size=2, max_size=4),
    data=st.data(),
)
def test_no_interleaving_leaves_a_job_excluding_a_calendar_that_is_gone(
    start: list[str], concurrent: list[Op], data: st.DataObject
) -> None:
    # Given both calendars, and job "a" excluding some of them
    store, clock = MemoryStore(), ManualClock(T0)
    calendars = CalendarService(store, clock)
    for name in CALENDARS:
        calendars.put("default", name, CalendarSpec(dates=["2026-12-25"]))
    JobService(store, MemoryQueues(now=clock.now), clock, LAYOUT, QueueRouting((SHORT,), (LONG,))).register(
        "default", spec("rate(1 hour)", exclude_calendars=start), job_id="a"
    )
    # When the operations run at once, their store calls interleaved as hypothesis picks
    turns = Turns()
    outcomes: dict[int, str] = {}

    def run(index: int, work: Callable[[], object]) -> None:
        try:
            work()
            outcomes[index] = "ok"
        except (JobError, JobExistsError) as exc:  # refused or lost a race: an answer, not a failure
            outcomes[index] = type(exc).__name__
        except BaseException as exc:
            turns.failure = exc
        finally:
            turns.finish(index)

    threads = [
        threading.Thread(target=run, args=(i, _use_case(op, TurnStore(store, turns, i), clock)), daemon=True)
        for i, op in enumerate(concurrent)
    ]
    turns.state.update({i: "running" for i in range(len(threads))})  # until each reaches its first call
    for thread in threads:
        thread.start()
    while waiting := turns.settled():
        turns.grant(data.draw(st.sampled_from(waiting), label="next store call"))
    for thread in threads:
        thread.join(WAIT_S)
    assert turns.failure is None, turns.failure
    # Then every job excludes only calendars that exist, and is recorded as their user
    for job in store.list_jobs("default", 10).items:
        for name in job.exclude_calendars:
            assert store.get_calendar("default", name) is not None, (job.id, name, concurrent, outcomes)
            assert job.id in store.calendar_users("default", name), (job.id, name, concurrent, outcomes)
