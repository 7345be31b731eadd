"""A rate budget shared by every poller of the deployment (issue 32, point 9): each shard group has
two pollers that each release every slot of the group, SQS FIFO keeping one message per slot;
whichever message wins, the budget holds in every one-second window and no slot is late past its
bound (punctual.dispatch.budget_reservations)."""

from __future__ import annotations

import itertools
import math
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factories import job as make_job
from punctual.dispatch.budget_reservations import BudgetRequest, SharedBudgetLedger, late_instant
from punctual.dispatch.polling import PollerConfig
from punctual.dispatch.polling.release import SlotReleaser
from punctual.dispatch.polling.resend import ResendWatch
from punctual.dispatch.queues import DispatchMessage, MemoryQueues, MessageKind, message_for
from punctual.dispatch.smoothing import Overrun, spacing_us
from punctual.models import Job
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.store.memory import MemoryStore
from punctual.timing.slots import fire_timer
from punctual.timing.timers import Timer, TimerLayout

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LAYOUT = TimerLayout(4, 2, 180)
CONFIG = PollerConfig(
    layout=LAYOUT, short_queue_urls=("short",), long_queue_urls=("long",), max_lateness_s=10
)


class _Overruns:
    def __init__(self) -> None:
        self.slots: set[tuple[str, str]] = set()

    def overrun(self, event: Overrun) -> None:
        self.slots.add((event.job_id, event.slot))


def _instant(message: DispatchMessage) -> datetime:
    return datetime.fromisoformat((message.not_before or message.scheduled_at).replace("Z", "+00:00"))


def _most_in_a_second(instants: list[datetime]) -> int:
    ordered = sorted(instants)
    most, low = 0, 0
    for high, instant in enumerate(ordered):
        while instant - ordered[low] >= timedelta(seconds=1):
            low += 1
        most = max(most, high - low + 1)
    return most


def _jobs(store: MemoryStore, dues: list[datetime], rate: float, lateness: int) -> list[Job]:
    target = {"type": "http", "url": "https://hooks.example.com/x", "rate_budget_per_second": rate}
    jobs = []
    for index, due in enumerate(dues):
        job = make_job(
            f"job-{index:04d}",
            f"at({due:%Y-%m-%dT%H:%M:%S})",
            now=T - timedelta(hours=1),
            target=target,
            max_lateness_seconds=lateness,
        )
        store.create_job(job, None, max_jobs=100_000)
        jobs.append(job)
    return jobs


class _Poller:
    """One poller of a shard group: its own process state (ledger, clock, queue, overruns)."""

    def __init__(
        self, store: MemoryStore, lane: tuple[int, int], now: datetime, pool: ThreadPoolExecutor
    ) -> None:
        self.clock = ManualClock(now)
        self.queues = MemoryQueues(now=self.clock.now)
        self.overruns = _Overruns()
        self.releaser = SlotReleaser(
            store, self.queues, self.clock, CONFIG, RecordingMetrics(), pool, overruns=self.overruns
        )
        self.releaser.ledger.lane = lane

    def messages(self) -> list[DispatchMessage]:
        return [stored.message for stored in self.queues.queues.get("short", [])]


class _BehindViews(MemoryStore):
    """Reservations whose reads miss some (as if another poller reserved them a moment after the
    read): the conditional write alone must keep two slots off one instant."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng

    def budget_reservations(
        self, tenant: str, key: str, low: datetime, high: datetime
    ) -> dict[datetime, str]:
        found = super().budget_reservations(tenant, key, low, high)
        return {at: owner for at, owner in found.items() if self.rng.random() < 0.5}


def _release_everywhere(
    rng: random.Random, dues: list[datetime], rate: float, lateness: int, groups: int, behind: bool = False
) -> tuple[list[tuple[datetime, datetime, bool]], int]:
    """Release a burst over ``groups`` shard groups of two pollers each, each poller seeing its
    group's timers in its own order and chunking, at its own moment, interleaved with the others;
    then keep one message per slot, a random one (SQS FIFO's deduplication). Returns (due, instant,
    overrun) per slot and how many messages were sent."""
    store = _BehindViews(random.Random(rng.random())) if behind else MemoryStore()
    jobs = _jobs(store, dues, rate, lateness)
    owner = [rng.randrange(groups) for _ in jobs]
    steps: list[tuple[_Poller, list[Timer]]] = []
    pollers: list[_Poller] = []
    with ThreadPoolExecutor(4) as pool:
        for group in range(groups):
            timers = [_timer_of(job) for job, g in zip(jobs, owner, strict=True) if g == group]
            for _ in range(2):
                # released a little before the burst or up to a second into it (the head start
                # differs), in its own order and polls of its own sizes
                poller = _Poller(
                    store, (group, groups), T + timedelta(milliseconds=rng.randint(-4000, 1000)), pool
                )
                pollers.append(poller)
                mine = timers[:]
                rng.shuffle(mine)
                while mine:
                    size = rng.randint(1, max(1, len(mine)))
                    steps.append((poller, mine[:size]))
                    mine = mine[size:]
        # interleave the pollers' polls, each poller's in its own order
        queues: dict[int, list[list[Timer]]] = {}
        for poller, batch in steps:
            queues.setdefault(id(poller), []).append(batch)
        by_id = {id(p): p for p in pollers}
        while queues:
            key = rng.choice(sorted(queues))
            poller = by_id[key]
            poller.releaser.release(queues[key].pop(0))
            if not queues[key]:
                del queues[key]
    sent: dict[tuple[str, str], list[tuple[DispatchMessage, _Poller]]] = {}
    for poller in pollers:
        for message in poller.messages():
            sent.setdefault((message.job_id, message.slot), []).append((message, poller))
    assert len(sent) == len(jobs)  # every slot is sent (by both pollers of its group)
    due_of = {job.id: due for job, due in zip(jobs, dues, strict=True)}
    kept = []
    for (job_id, slot), copies in sent.items():
        message, poller = rng.choice(copies)
        kept.append((due_of[job_id], _instant(message), (job_id, slot) in poller.overruns.slots))
    return kept, sum(len(c) for c in sent.values())


def _timer_of(job: Job) -> Timer:
    due = datetime.fromisoformat(job.schedule[3:-1]).replace(tzinfo=UTC)
    return fire_timer(LAYOUT, job, due, T - timedelta(hours=1))


@settings(max_examples=60, deadline=None)
@given(
    bursts=st.lists(
        st.tuples(st.integers(min_value=0, max_value=20), st.integers(min_value=1, max_value=40)),
        min_size=1,
        max_size=3,
    ),
    rate=st.one_of(
        st.integers(min_value=1, max_value=30).map(float),
        st.floats(min_value=0.5, max_value=30, allow_nan=False, allow_infinity=False),
    ),
    lateness=st.integers(min_value=0, max_value=12),
    groups=st.integers(min_value=1, max_value=4),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    behind=st.booleans(),
)
def test_a_budget_holds_in_every_second_whichever_poller_of_a_group_wins_each_slot(
    bursts: list[tuple[int, int]], rate: float, lateness: int, groups: int, seed: int, behind: bool
) -> None:
    # Given bursts of slots (whole seconds after T, how many) over 1..4 groups of two pollers
    dues = [T + timedelta(seconds=offset) for offset, count in bursts for _ in range(count)]
    # (with views of the reservations that may be behind: only the conditional writes decide)
    placed, _ = _release_everywhere(random.Random(seed), dues, rate, lateness, groups, behind)
    # Then, whichever message of each slot is kept, the smoothed calls keep to the budget in
    # every one-second window, wherever it starts
    smoothed = [instant for _, instant, overrun in placed if not overrun]
    assert _most_in_a_second(smoothed) <= math.ceil(rate)
    if rate == int(rate):
        assert _most_in_a_second(smoothed) <= rate
    # and no slot goes before its instant or after its bound; an overrun goes on time
    for due, instant, overrun in placed:
        assert instant == due if overrun else due <= instant <= due + timedelta(seconds=lateness)


def test_the_second_poller_of_a_group_reuses_the_first_ones_instants() -> None:
    # Given one group's two pollers releasing the same 30 slots in opposite orders, one after the other
    store = MemoryStore()
    jobs = _jobs(store, [T] * 30, 10, 10)
    timers = [_timer_of(job) for job in jobs]
    with ThreadPoolExecutor(2) as pool:
        first, second = (_Poller(store, (0, 1), T - timedelta(seconds=5), pool) for _ in range(2))
        first.releaser.release(timers)
        second.releaser.release(timers[::-1])
    # Then both send every slot at the same instant: no instant is taken twice, none is wasted
    ones = {(m.job_id, m.slot): m.not_before for m in first.messages()}
    assert ones == {(m.job_id, m.slot): m.not_before for m in second.messages()}
    instants = sorted(_instant(m) for m in first.messages())
    assert instants == [T + timedelta(microseconds=j * spacing_us(10)) for j in range(30)]


class _FailingReservations(MemoryStore):
    def reserve_budget_instant(self, *args: Any, **kwargs: Any) -> bool:
        raise ConnectionError("the table cannot be reached")


def test_a_store_error_while_reserving_never_loses_or_delays_a_slot() -> None:
    # Given a table whose reservations fail
    store = _FailingReservations()
    jobs = _jobs(store, [T] * 20, 5, 3)
    with ThreadPoolExecutor(2) as pool:
        poller = _Poller(store, (0, 1), T - timedelta(seconds=5), pool)
        metrics = poller.releaser.metrics
        poller.releaser.release([_timer_of(job) for job in jobs])
    # Then every slot is sent, within its bound (this process's own placement), and it is counted
    messages = poller.messages()
    assert len(messages) == 20
    assert all(T <= _instant(m) <= T + timedelta(seconds=3) for m in messages)
    assert (
        _most_in_a_second([_instant(m) for m in messages if (m.job_id, m.slot) not in poller.overruns.slots])
        <= 5
    )
    assert metrics.total("RateBudgetStoreErrors") >= 1  # type: ignore[attr-defined]


def test_only_budgeted_slots_touch_the_reservations() -> None:
    # A release without any budget makes no reservation read or write
    calls: list[str] = []

    class Watched(MemoryStore):
        def reserve_budget_instant(self, *args: Any, **kwargs: Any) -> bool:
            calls.append("reserve")
            return super().reserve_budget_instant(*args, **kwargs)

        def budget_reservations(self, *args: Any, **kwargs: Any) -> dict[datetime, str]:
            calls.append("read")
            return super().budget_reservations(*args, **kwargs)

    store = Watched()
    job = make_job("plain", f"at({T:%Y-%m-%dT%H:%M:%S})", now=T - timedelta(hours=1))
    store.create_job(job, None, max_jobs=10)
    with ThreadPoolExecutor(1) as pool:
        poller = _Poller(store, (0, 1), T, pool)
        assert isinstance(poller.releaser.ledger, SharedBudgetLedger)
        poller.releaser.release([_timer_of(job)])
    assert len(poller.messages()) == 1 and calls == []


def test_a_smoothed_message_waiting_for_its_instant_is_not_re_sent_as_unclaimed() -> None:
    # Given a slot placed 6 s after its instant, sent at its instant (no worker claims it before then)
    store = MemoryStore()
    (job,) = _jobs(store, [T], 0.2, 10)
    queues, metrics = MemoryQueues(now=lambda: T), RecordingMetrics()
    watch = ResendWatch(store, queues, ["short"], metrics, after_s=4.0)
    message = replace(
        message_for(job, "2026-12-01T12:00:00Z", T, 1, MessageKind.FIRE, T),
        not_before="2026-12-01T12:00:06.000Z",
    )
    watch.sent("short", [message], T)
    # Then the poller's watch does not take it for a message a dead worker holds before its instant
    assert watch.check(T + timedelta(seconds=5)) == 0
    # but does once it is still unclaimed the usual time after its instant
    assert watch.check(T + timedelta(seconds=10, milliseconds=100)) == 1


def test_late_calls_of_several_workers_take_instants_of_the_budget_not_the_moment_they_arrive() -> None:
    # Given five slots placed 220 ms apart (5 a second) whose messages all reach workers 1 s late,
    # at the same moment, in different worker processes
    store = MemoryStore()
    now = T + timedelta(seconds=3)
    step = timedelta(microseconds=spacing_us(5))
    calls = []
    for index in range(5):
        request = BudgetRequest("acme", "hooks.example.com", f"job-{index}/s", 5, T, 10)
        calls.append(late_instant(store, request, T + timedelta(seconds=2) + index * step, now).release_at)
    # Then each call goes on an instant of its own, none closer than the budget's spacing, and
    # none before the moment it arrived nor past its lateness
    ordered = sorted(calls)
    assert all(b - a >= step for a, b in itertools.pairwise(ordered))
    assert all(now <= c <= T + timedelta(seconds=10) for c in calls)
    # and a call on time keeps its instant (no reservation read or written)
    on_time = BudgetRequest("acme", "hooks.example.com", "job-9/s", 5, T, 10)
    assert late_instant(store, on_time, now, now).release_at == now


@pytest.mark.parametrize(("rate", "groups"), [(0.05, 3), (0.1, 5), (0.2, 12), (0.04, 2)])
def test_a_low_budget_is_one_grid_for_the_pollers_of_every_lane_and_a_workers_late_call(
    rate: float, groups: int
) -> None:
    # Given a budget so low that a minute cannot hold a turn of every poller group (QA22: the
    # pollers then used a grid from the epoch, a worker's late call the minute's)
    store = MemoryStore()
    step = timedelta(microseconds=spacing_us(rate))
    for group in range(groups):
        ledger = SharedBudgetLedger(store, lane=(group, groups))
        for index in range(3):
            due = T + timedelta(seconds=7 * index + group)
            ledger.place_shared("acme", "h", f"job-{group}-{index}/s", rate, due, 600)
    # When workers call slots late, each taking a new instant of the budget
    for index, late_ms in enumerate((1_000, 9_500, 30_000, 65_000, 130_000)):
        now = T + timedelta(milliseconds=late_ms)
        request = BudgetRequest("acme", "h", f"late-{index}/s", rate, now - timedelta(seconds=1), 600)
        late_instant(store, request, now - timedelta(seconds=1), now)
    # Then no two instants of the budget are closer than its spacing
    taken = sorted(store.budget_reservations("acme", "h", T - timedelta(hours=1), T + timedelta(hours=2)))
    assert all(b - a >= step for a, b in itertools.pairwise(taken)), taken
