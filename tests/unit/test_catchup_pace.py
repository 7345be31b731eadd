"""Catch-up goes out at the pace the workers take the short lane (issue: one tenant's catch-up made
another tenant's on-time slots late; :mod:`punctual.dispatch.polling.catchup_pace`).

The in-process rig (:class:`simulation.SteadyWorkers`): the real pollers and re-send watch over
the memory store, a manual clock, and workers that take the queue in the order sent at a fixed
number of claims a second; with ``counted`` the queues say how many messages wait, as SQS's
``ApproximateNumberOfMessages`` does.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from punctual.dispatch.polling.catchup_pace import (
    FLOOR_EVERY_S,
    MAX_WINDOW,
    MIN_WINDOW,
    NO_DRAIN_S,
    READ_EVERY_S,
    READ_TIMEOUT_S,
    STANDING_S,
    CatchUpPace,
)
from punctual.dispatch.polling.queue_counts import BackgroundCount, NotYet
from punctual.dispatch.queues import MemoryQueues
from simulation import SHORT, catch_up_beside_another_tenant

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Gauge:
    """A queue that holds ``waiting`` messages; the test moves it."""

    def __init__(self, waiting: int = 0) -> None:
        self.waiting = waiting
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.waiting


def _at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


# ------------------------------------------------------------------------------ the pace alone


def test_without_a_gauge_nothing_is_held() -> None:
    assert CatchUpPace(None).allowance(T, 0) is None
    # (a queue port that cannot count, or no short queue: no gauge)
    assert CatchUpPace.of(object(), [SHORT]).count is None
    assert CatchUpPace.of(MemoryQueues(now=lambda: T), []).count is None


def test_a_gauge_that_fails_holds_nothing_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> int:
        raise RuntimeError("throttled")

    pace = CatchUpPace(broken)
    with caplog.at_level(logging.WARNING, logger="punctual.dispatch.polling"):
        assert [pace.allowance(_at(i * READ_EVERY_S), 0) for i in range(4)] == [None] * 4
    assert sum("catch-up goes unpaced" in r.getMessage() for r in caplog.records) == 1


def test_a_backlog_the_workers_drain_holds_catch_up_at_about_a_second_of_their_work() -> None:
    gauge = Gauge(0)
    pace = CatchUpPace(gauge)
    # The first read: an empty queue, room for the starting window
    assert pace.allowance(_at(0), 0) == 2 * MIN_WINDOW
    pace.released(_at(0))
    assert pace.allowance(_at(0.1), 60) == 0  # (not read again yet: what it sent counts)
    # Half a second on, the workers took 10 of them (20 a second): the window is a second of
    # that, at least one CATCHUP timer's slots
    gauge.waiting = 50
    assert pace.allowance(_at(READ_EVERY_S), 60) == 0
    assert pace.window == MIN_WINDOW and pace.drain_rate(_at(READ_EVERY_S)) == pytest.approx(20.0)
    assert pace.holds == 1
    # Down under the window: room again (40 a second over both reads: 10, then 30)
    gauge.waiting = 20
    assert pace.allowance(_at(2 * READ_EVERY_S), 60) == 40 - 20 and pace.window == 40


def test_the_pollers_on_time_sends_fill_the_window_too() -> None:
    gauge = Gauge(0)
    pace = CatchUpPace(gauge)
    assert pace.allowance(_at(0), 0) == 2 * MIN_WINDOW
    # A top-of-minute release of 500 on-time slots since: no room for catch-up before the next read
    assert pace.allowance(_at(0.1), 500) == 0
    # and the workers, which took 100 of them, are not taken for idle
    gauge.waiting = 400
    assert pace.allowance(_at(READ_EVERY_S), 500) == 0
    assert pace.drain_rate(_at(READ_EVERY_S)) == pytest.approx(200.0)


def test_the_window_grows_while_the_workers_take_everything_offered() -> None:
    gauge = Gauge(0)
    pace = CatchUpPace(gauge)
    windows, sent = [], 0
    for step in range(12):
        now = _at(step * READ_EVERY_S)
        room = pace.allowance(now, sent)
        assert room is not None and room > 0
        sent += room
        pace.released(now)
        windows.append(pace.window)  # every read finds the queue empty again
    assert windows[0] == 2 * MIN_WINDOW and windows[-1] == MAX_WINDOW
    assert all(b >= a for a, b in itertools.pairwise(windows))


def test_a_backlog_nothing_drains_is_held_only_until_it_is_plain_nothing_drains() -> None:
    # Given messages waiting that no worker takes (workers all down, or none at all)
    gauge = Gauge(500)
    pace = CatchUpPace(gauge)
    held = [pace.allowance(_at(i * READ_EVERY_S), 0) for i in range(int(NO_DRAIN_S / READ_EVERY_S))]
    assert set(held) == {0}
    # Then once none was taken for NO_DRAIN_S, catch-up is not held: holding would share nothing
    assert pace.allowance(_at(NO_DRAIN_S), 0) is None
    # And a drain seen again paces it again
    gauge.waiting = 400
    assert pace.allowance(_at(NO_DRAIN_S + READ_EVERY_S), 0) == 0


def test_a_backlog_that_holding_does_not_shorten_holds_nothing() -> None:
    # Given short queues that other pollers (other shard groups, each counting only its own
    # sends) keep at about 100 messages, which workers taking far more than that a second keep
    # up with: the count goes up and down around 100 whatever this poller holds (QA31: each
    # read that found a few less was taken for a drain, so catch-up was held at the floor,
    # one timer every 15 s, for as long as the others sent: a dead poller's minute of
    # thousands of timers took hours)
    gauge = Gauge(100)
    pace = CatchUpPace(gauge)
    allowed = []
    for step in range(int(60 / READ_EVERY_S)):
        gauge.waiting = 100 + (12, -9, 4, -13, 7, -2)[step % 6]
        allowed.append(pace.allowance(_at(step * READ_EVERY_S), 0))
    # Then once the backlog stood on its level for STANDING_S (not brought down by holding),
    # nothing is held: holding would share nothing
    after = allowed[int(2 * STANDING_S / READ_EVERY_S) + 1 :]
    assert after and all(a is None or a > 0 for a in after), allowed


def test_while_held_one_timer_still_goes_out_every_floor_interval() -> None:
    gauge = Gauge(10_000)
    pace = CatchUpPace(gauge)
    seconds, ones = 0.0, []
    while seconds < 2 * FLOOR_EVERY_S + 1:
        gauge.waiting -= 5  # a backlog that drains 10 a second, never under the window
        room = pace.allowance(_at(seconds), 0)
        if room:
            ones.append((seconds, room))
            pace.released(_at(seconds))
        assert pace.next_look(_at(seconds)) <= _at(seconds + READ_EVERY_S)
        seconds += READ_EVERY_S
    assert [room for _, room in ones] == [1, 1]
    assert [at for at, _ in ones] == pytest.approx([FLOOR_EVERY_S, 2 * FLOOR_EVERY_S], abs=READ_EVERY_S)


# ------------------------------------------------------------------------------ the pollers


@pytest.mark.parametrize(
    ("rate", "unpaced_over", "paced_under"),
    [(20.0, 6.0, 2.5), (10.0, 25.0, 6.0)],
)
def test_another_tenants_slots_do_not_wait_behind_a_catch_up(
    rate: float, unpaced_over: float, paced_under: float
) -> None:
    # Given one tenant's 420 owed slots and another tenant's on-time job, workers claiming
    # `rate` a second: unpaced (a queue port that cannot count), the other tenant waits behind
    # the catch-up (6.2 s at 20 a second, 26 s at 10)
    unpaced = catch_up_beside_another_tenant(rate, counted=False)
    assert max(unpaced.late) > unpaced_over
    # When the pollers see the queue's backlog, Then the other tenant's slots wait about one
    # CATCHUP timer's slots at most (30 slots: 1.5 s at 20 a second, 3 s at 10)
    paced = catch_up_beside_another_tenant(rate, counted=True)
    assert len(paced.late) == len(unpaced.late) == 36 and max(paced.late) < paced_under
    # And every owed slot still ran, once, about as soon as unpaced (the workers are the bound)
    assert paced.ran == unpaced.ran == 660 and paced.copies == unpaced.copies == 0
    assert paced.last_owed_s <= unpaced.last_owed_s + 3


def test_many_jobs_catching_up_at_a_thousand_claims_a_second() -> None:
    # Given 100 rate(1 second) jobs owing 420 slots each (42,000) and workers claiming 1,000 a
    # second: unpaced the other tenant's slots were up to 25.8 s late
    paced = catch_up_beside_another_tenant(1000.0, counted=True, jobs_owing=100)
    assert max(paced.late) < 2.0 and paced.ran == 66_000 and paced.copies == 0


@pytest.mark.parametrize("lag_s", [1.0, 5.0, 30.0])
def test_a_count_that_lags_behind_never_stops_a_catch_up(lag_s: float) -> None:
    # Given SQS's approximate count, which may lag what the queues hold (here the count of lag_s
    # before: a backlog that grew shows low, one that drained shows high)
    unpaced = catch_up_beside_another_tenant(20.0, counted=False)
    behind = catch_up_beside_another_tenant(20.0, counted=True, count_lag_s=lag_s)
    # Then every owed slot still runs, once, about as soon as unpaced
    assert behind.ran == unpaced.ran == 660 and behind.copies == 0
    assert behind.last_owed_s <= unpaced.last_owed_s + 10
    # And the other tenant waits no longer than with no pace at all
    assert len(behind.late) == 36 and max(behind.late) <= max(unpaced.late) + 0.5


def test_two_shard_groups_catching_up_at_once_each_with_its_own_pace() -> None:
    # Given four jobs owing 420 slots each, spread over two shard groups whose pollers each pace
    # by the same short queues while counting only their own sends, workers claiming 20 a second
    paced = catch_up_beside_another_tenant(20.0, counted=True, jobs_owing=4, minutes=4, groups=2)
    # Then every owed slot runs, once, and so does every slot of the other tenant
    assert paced.ran == 4 * 720 and len(paced.late) == 48
    # And the other tenant's slots wait behind at most a window of each group (4.5 to 10 s over
    # hash seeds; one group 4.5 s; unpaced 69 to 113 s, the resend watch re-sending the backlog)
    assert max(paced.late) < 15.0


def _dead_pollers_minute(counted: bool, jobs_due: int) -> list[float]:
    """``jobs_due`` rate(1 hour) jobs of five tenants due at 12:00:30, whose minute's poller died
    (the next minute's catches it up); workers claiming 1,000 a second. Each slot's fire delay."""
    from factories import spec
    from punctual.runtime.clock import ManualClock
    from punctual.store.memory import MemoryStore
    from punctual.usecases.jobs import JobService, QueueRouting
    from simulation import LONG, SteadyWorkers

    clock = ManualClock(T - timedelta(minutes=2))
    rig = type("Workers", (SteadyWorkers,), {"RATE": 1000.0, "counted": counted})
    sim = rig(MemoryStore(), clock)
    jobs = JobService(sim.store, sim.queues, clock, sim.config.layout, QueueRouting((SHORT,), (LONG,)))
    due = T + timedelta(seconds=30)
    owed = {
        jobs.register(f"tenant-{i % 5}", spec("rate(1 hour)", start_at=due.isoformat()))[0].id
        for i in range(jobs_due)
    }
    sim.run([T + timedelta(minutes=1), T + timedelta(minutes=2)], until=T + timedelta(minutes=3))
    return [(at - due).total_seconds() for (job, _), at in sim.started.items() if job in owed]


def test_a_dead_pollers_minute_of_one_slot_timers_goes_out_at_the_workers_pace() -> None:
    # Given a minute whose poller died, 1,000 fire timers of one slot each, and workers that
    # claim 1,000 a second: unpaced, the next minute's poller sends them all within a few seconds
    # of taking the minute on
    unpaced = _dead_pollers_minute(counted=False, jobs_due=1000)
    assert len(unpaced) == 1000
    # When the pollers pace catch-up by the queue's backlog, Then the timers are not counted as
    # 30 slots each (one timer a slice: 20 slots a second, the last one 25 s later than unpaced)
    paced = _dead_pollers_minute(counted=True, jobs_due=1000)
    assert len(paced) == 1000 and max(paced) <= max(unpaced) + 3


def test_spend_fills_the_allowance_with_timers_of_any_size() -> None:
    from punctual.dispatch.polling.catchup_pace import spend
    from punctual.dispatch.polling.release import ReleaseReport

    def timers(sizes: list[int]) -> tuple[list[int], object, object]:
        batches: list[int] = []

        def release(n: int) -> ReleaseReport:
            batches.append(n)
            taken = [sizes.pop(0) for _ in range(min(n, len(sizes)))]
            return ReleaseReport(released=sum(taken))

        return batches, release, lambda: bool(sizes)

    # One-slot timers: about the allowance's slots of them, in a few batches (not one a slice)
    batches, release, left = timers([1] * 100)
    assert spend(release, left, 60, 20).released == 20 and len(batches) <= 6  # (20 timers a slice)
    batches, release, left = timers([1] * 100)
    assert spend(release, left, 12, 20).released == 12
    # Whole CATCHUP timers: the allowance's worth (at least one), as before
    batches, release, left = timers([30] * 10)
    assert spend(release, left, 90, 20).released == 90 and batches == [3]
    batches, release, left = timers([30] * 10)
    assert spend(release, left, 10, 20).released == 30
    # Nothing left: it stops
    batches, release, left = timers([1] * 3)
    assert spend(release, left, 60, 20).released == 3


def test_a_count_that_does_not_move_while_the_poller_sends_is_not_a_drain() -> None:
    # Given a count that stays put (a count behind that froze, or messages no worker can take: a
    # FIFO group behind its running slot) while the poller still sends into the queues (on-time
    # slots, the floor's timers): what it sent does not show, but nothing was seen taken
    gauge = Gauge(500)
    pace = CatchUpPace(gauge)
    sent, allowed = 0, []
    for i in range(int(NO_DRAIN_S / READ_EVERY_S) + 1):
        sent += 5
        allowed.append(pace.allowance(_at(i * READ_EVERY_S), sent))
    assert set(allowed[:-1]) == {0}
    # Then past NO_DRAIN_S it holds nothing, as for messages none takes (it was held for good,
    # one timer every 15 s: a job catching up fell further behind than it caught up)
    assert allowed[-1] is None
    # And a count that moves down again paces again
    gauge.waiting = 400
    assert pace.allowance(_at(NO_DRAIN_S + READ_EVERY_S), sent + 5) == 0


def test_a_standing_count_does_not_hold_a_catch_up_for_good() -> None:
    # Given 420 owed slots, workers claiming 20 a second, and a short-lane count that reads 500
    # whatever the queues hold (frozen behind, or 500 messages of groups no worker can take)
    from simulation import SteadyWorkers

    frozen = catch_up_beside_another_tenant(20.0, counted=True, minutes=4, count=lambda _waiting: 500)
    unpaced = catch_up_beside_another_tenant(20.0, counted=False, minutes=4)
    # Then the catch-up still ends about as soon as unpaced (held at 30 slots every 15 s it was
    # not over four minutes on), every owed slot once
    assert frozen.ran == unpaced.ran and frozen.copies == 0
    assert frozen.last_owed_s <= unpaced.last_owed_s + NO_DRAIN_S + 5
    assert SteadyWorkers.counted is False  # (the rig's default is untouched)


def test_messages_no_worker_takes_do_not_hold_catch_up() -> None:
    # Given 200 messages that stand in the count (a queue job's slots in their FIFO group behind
    # its running one) under what the workers take as it comes: the count moves, never under 200
    gauge = Gauge(200)
    pace = CatchUpPace(gauge)
    sent, seconds, allowed = 0, 0.0, []
    while seconds <= 2 * STANDING_S + READ_EVERY_S:
        gauge.waiting = 200 + (5 if int(seconds / READ_EVERY_S) % 2 else 0)  # the on-time slots' share
        sent += 5
        allowed.append((seconds, pace.allowance(_at(seconds), sent)))
        seconds += READ_EVERY_S
    # Then it is held while the level may still be a line the workers take
    assert all(room == 0 for at, room in allowed if at < STANDING_S)
    # and once it stood STANDING_S over a window's worth, only what moves over it counts
    assert pace.standing(_at(seconds - READ_EVERY_S)) == 200
    assert all(room is not None and room > 0 for at, room in allowed if at >= 2 * STANDING_S)


def test_a_backlog_that_goes_down_is_no_standing_level() -> None:
    # Given a backlog the workers take (20 a read) while the poller sends a few on-time slots
    gauge = Gauge(900)
    pace = CatchUpPace(gauge)
    sent = 0
    for i in range(int(3 * STANDING_S / READ_EVERY_S)):
        sent += 2
        room = pace.allowance(_at(i * READ_EVERY_S), sent)
        # Then it holds catch-up until the backlog is under its window, never counting it standing
        assert pace.standing(_at(i * READ_EVERY_S)) == 0
        assert room in (0, 1) or gauge.waiting < pace.window + MIN_WINDOW  # (1: the floor)
        gauge.waiting = max(0, gauge.waiting - 20)


def test_messages_no_worker_takes_do_not_hold_another_tenants_catch_up_for_good() -> None:
    # Given 420 owed slots, workers claiming 20 a second, and 200 messages more in the count that
    # no worker takes (another tenant's queue job's slots behind its running one)
    standing = catch_up_beside_another_tenant(
        20.0, counted=True, minutes=4, count=lambda waiting: waiting + 200
    )
    unpaced = catch_up_beside_another_tenant(20.0, counted=False, minutes=4)
    # Then the catch-up ends about as soon as unpaced (held at 30 slots every 15 s, 195 of its
    # slots were still owed four minutes on), every owed slot once
    assert standing.ran == unpaced.ran and standing.copies == 0
    assert standing.last_owed_s <= unpaced.last_owed_s + 2 * STANDING_S
    # And the other tenant's slots still do not wait behind it
    assert max(standing.late) < 2.5


def test_spend_keeps_what_the_batches_before_a_failure_sent() -> None:
    from punctual.dispatch.polling.catchup_pace import spend
    from punctual.dispatch.polling.release import ReleaseReport

    calls: list[int] = []

    def release(n: int) -> ReleaseReport:
        calls.append(n)
        if len(calls) == 3:
            raise RuntimeError("throttled")
        return ReleaseReport(released=n)

    into = ReleaseReport()
    with pytest.raises(RuntimeError):
        spend(release, lambda: True, 60, 20, into)
    assert into.released == sum(calls[:2]) == 6  # (two timers, then four: each counted as it went)


def test_a_read_off_the_loop_that_hangs_never_holds_the_poller_or_its_catch_up() -> None:
    # Given a backlog read over the network that hangs (a throttled GetQueueAttributes retrying)
    release = threading.Event()
    started = threading.Event()

    def hangs() -> int:
        started.set()
        release.wait(30)
        return 5

    pace = CatchUpPace(BackgroundCount(hangs))
    try:
        # Then the poller's loop is never held: each ask answers at once; catch-up waits for the
        # first figure only briefly, then goes unpaced
        # (a call that waited on the read would answer its figure, not 0)
        assert pace.allowance(_at(0), 0) == 0
        assert started.wait(10)
        assert pace.allowance(_at(READ_TIMEOUT_S / 2), 0) == 0
        assert pace.allowance(_at(READ_TIMEOUT_S), 0) is None
    finally:
        release.set()
    # And once it answers, the pace has its figure
    deadline = time.monotonic() + 30
    seconds = READ_TIMEOUT_S
    while pace.allowance(_at(seconds), 0) is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
        seconds += READ_EVERY_S
    assert pace.window - 5 == pace.allowance(_at(seconds), 0)


def test_a_read_off_the_loop_answers_the_figure_of_the_read_before() -> None:
    values = iter([7, 9, 11])
    count = BackgroundCount(lambda: next(values))
    with pytest.raises(NotYet):
        count()  # the first read starts
    answers = []
    deadline = time.monotonic() + 30
    while len(answers) < 2 and time.monotonic() < deadline:
        try:
            answers.append(count())  # (each answer starts the next read)
        except NotYet:
            time.sleep(0.01)
    assert answers == [7, 9]


def _answered(count: BackgroundCount) -> None:
    """Wait (generously) until the read ``count`` runs has answered."""
    deadline = time.monotonic() + 30
    while count._running:
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_what_was_sent_while_a_read_off_the_loop_ran_is_not_taken_for_drained() -> None:
    # Given a read off the loop that measures the queue as soon as it starts, before the sends of
    # the turn that started it, and no worker at all (every message sent stays waiting)
    queue = Gauge(0)
    count = BackgroundCount(queue)
    pace = CatchUpPace(count)
    sent = 0
    assert pace.allowance(_at(0), sent) == 0  # (the first read starts)
    _answered(count)
    for step in range(1, 8):
        now = _at(step * READ_EVERY_S)
        room = pace.allowance(now, sent) or 0
        _answered(count)  # (the read this turn started measured before the turn's sends)
        sent += room
        queue.waiting += room
        # Then nothing is taken for drained (the figure one read old is paired with what had
        # been sent when its read began, not when it was answered), and the pace keeps no more
        # than its window waiting
        assert not pace.drain_rate(now), f"turn {step}: {sent} sent, {queue.waiting} waiting"
        assert queue.waiting <= 2 * MIN_WINDOW


def test_a_backlog_others_fill_faster_than_the_workers_take_it_is_no_backlog_nothing_drains() -> None:
    # Given workers that take 20 a second from the short queues and other shard groups' pollers
    # (each counting only its own sends) that put 30 a second into them: the count rises while
    # this poller is held, so what it sees drain of its own sends is nothing
    gauge = Gauge(100)
    pace = CatchUpPace(gauge)
    sent, allowed = 0, []
    for step in range(int(3 * NO_DRAIN_S / READ_EVERY_S)):
        room = pace.allowance(_at(step * READ_EVERY_S), sent)
        allowed.append(room)
        if room:
            sent += room
            gauge.waiting += room
            pace.released(_at(step * READ_EVERY_S))
        gauge.waiting += 5  # (15 sent by the others, 10 taken, each half second)
    # Then the poller stays paced (the floor only): a count that rose by more than it sent shows
    # others sending, which hides what was taken; it is no sign that nothing takes the queues
    # (QA31: four shard groups catching up at once each went unpaced after 10 s, and their
    # catch-ups flooded the queues: another tenant's slots 75 s late)
    assert None not in allowed and set(allowed) <= {0, 1}, allowed
    # And once the count stands still with none taken, nothing drains: it holds nothing
    for step in range(len(allowed), len(allowed) + int(NO_DRAIN_S / READ_EVERY_S) + 1):
        last = pace.allowance(_at(step * READ_EVERY_S), sent)
    assert last is None


def test_a_clock_stepped_back_does_not_hold_a_catch_up_longer_than_the_floor() -> None:
    # Given a held catch-up (a backlog the workers drain 10 a second, never under the window)
    gauge = Gauge(10_000)
    pace = CatchUpPace(gauge)
    assert pace.allowance(_at(0), 0) == 0
    # When the poller's clock is stepped back a minute (a wall clock set back) and runs on
    start, seconds, floor = -60.0, -60.0, None
    while seconds < start + 2 * FLOOR_EVERY_S and floor is None:
        gauge.waiting -= 5
        room = pace.allowance(_at(seconds), 0)
        if room:
            floor = seconds
        seconds += READ_EVERY_S
    # Then the figures are read on, and the floor's timer still goes out within FLOOR_EVERY_S
    # of the clock's new time, not once the clock is back where it was (a minute more held)
    assert gauge.reads > 2
    assert floor is not None and floor - start <= FLOOR_EVERY_S + READ_EVERY_S


def test_a_past_minutes_batch_is_counted_when_its_progress_mark_cannot_be_written() -> None:
    # Given a minute whose poller died (200 one-slot fire timers) and a store that fails to
    # write progress marks (throttled)
    from factories import spec
    from punctual.dispatch.polling import Poller, PollerConfig
    from punctual.dispatch.polling.catchup import CatchUp
    from punctual.dispatch.polling.catchup_pace import spend
    from punctual.dispatch.polling.release import ReleaseReport
    from punctual.runtime.clock import ManualClock
    from punctual.store.memory import MemoryStore
    from punctual.timing.timers import Lane
    from punctual.usecases.jobs import JobService, QueueRouting
    from simulation import LAYOUT, LONG

    class NoMarks(MemoryStore):
        def put_progress(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            raise RuntimeError("throttled")

    clock = ManualClock(T - timedelta(minutes=2))
    store, queues = NoMarks(), MemoryQueues(clock.now)
    config = PollerConfig(layout=LAYOUT, short_queue_urls=(SHORT,), long_queue_urls=(LONG,))
    jobs = JobService(store, queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    due = T + timedelta(seconds=30)
    for i in range(200):
        jobs.register(f"tenant-{i % 5}", spec("rate(1 hour)", start_at=due.isoformat()))
    clock.set(T + timedelta(minutes=1, seconds=30))
    poller = Poller(store, queues, clock, config)
    shards = {Lane.FAR: list(range(LAYOUT.shard_count)), Lane.NEAR: list(range(LAYOUT.near_shard_count))}
    catchup = CatchUp(store, poller.releaser, config, 0, 1, shards)
    catchup.plan(T + timedelta(minutes=1))
    assert catchup.pending
    # When a paced turn releases some of it (each batch's mark fails to be written)
    into = ReleaseReport()
    spend(lambda n: catchup.slice(clock.now(), n), lambda: catchup.open is not None, 100, 50, into)
    # Then every slot sent is in the minute's report (what the pace counts as sent), and the
    # minute stays open for the next slice
    sent = len(queues.queues.get(SHORT, []))
    assert 0 < sent < 200 and into.released == sent
    assert catchup.open is not None
