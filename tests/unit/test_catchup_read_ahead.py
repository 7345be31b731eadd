"""The owed minutes catch-up reads ahead for their fate lines (:meth:`punctual.dispatch.polling.
catchup.CatchUp.release_urgent`) are still drained, marked and passed by the watermarks oldest
first: a watermark that moves past a minute whose timers were not all released loses them (the
next poller owes nothing before it: those chains stop)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class _Releaser:
    """Records the timers it is handed (sent as they come)."""

    def __init__(self) -> None:
        from punctual.dispatch.polling import PollerConfig

        self.config = PollerConfig()
        self.sent: list[Any] = []

    def release(self, timers: list[Any], uncertain: bool = False, sent_by_ms: int | None = None) -> Any:
        from punctual.dispatch.polling.release import ReleaseReport

        self.sent.extend(timers)
        return ReleaseReport(released=len(timers))


def test_a_minute_read_ahead_is_drained_before_the_watermarks_pass_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from factories import job
    from punctual.dispatch.polling import PollerConfig
    from punctual.dispatch.polling import catchup as catchup_module
    from punctual.dispatch.polling.catchup import CatchUp
    from punctual.store.memory import MemoryStore
    from punctual.timing.slots import fire_timer
    from punctual.timing.timers import Lane, TimerLayout, to_ms

    # Given three owed minutes (12:00, 12:01, 12:02), a catch-up `all` timer in each (lines an
    # hour on: nothing urgent), and a read ahead bounded at two minutes' timers (AHEAD_TIMERS,
    # 20,000, made 2 here: as with three minutes of 10,000 timers)
    layout, store = TimerLayout(), MemoryStore()
    minutes = [T + timedelta(minutes=m) for m in range(3)]
    for index, minute in enumerate(minutes):
        owing = job(f"job-{index}", "rate(1 hour)")
        store.put_timers([fire_timer(layout, owing, minute + timedelta(seconds=10), T - timedelta(hours=1))])
    shards = {lane: layout.shards_of_group(lane, 0, 1) for lane in (Lane.FAR, Lane.NEAR)}
    for lane, owned in shards.items():
        store.advance_watermarks(lane, owned, minutes[0])
    monkeypatch.setattr(catchup_module, "AHEAD_TIMERS", 2)
    releaser = _Releaser()
    catchup = CatchUp(store, releaser, PollerConfig(), 0, 1, shards)  # type: ignore[arg-type]
    catchup.plan(minutes[-1] + timedelta(minutes=1))
    now = minutes[-1] + timedelta(minutes=1, seconds=20)
    # When the poller's catch-up turns go (paced: the urgent release first, then a slice of one
    # timer), the first minute closing while the second waits read ahead
    turns = 0
    while catchup.pending and turns < 10:
        turns += 1
        catchup.release_urgent(now, to_ms(now) + 10_000, 600)
        catchup.slice(now, 1)
        # Then at every turn (where the poller may die, or its minute end) the watermarks leave
        # owed every minute that still holds a timer not released: the next poller reads it
        mark = min(store.get_watermarks(Lane.FAR, shards[Lane.FAR]).values())
        sent = {timer.job_id for timer in releaser.sent}
        unsent = [minute for index, minute in enumerate(minutes) if f"job-{index}" not in sent]
        assert all(minute >= mark for minute in unsent), (turns, mark, sent)
    # And every minute is released once, oldest first (until now 12:02 was opened before 12:01,
    # read ahead, and the watermarks moved to 12:03 with 12:01's timer still held)
    assert [timer.job_id for timer in releaser.sent] == ["job-0", "job-1", "job-2"]


def test_reading_owed_minutes_ahead_never_holds_the_minutes_on_time_slots_back() -> None:
    from factories import spec
    from punctual.dispatch.polling import PollerConfig
    from punctual.runtime.clock import ManualClock
    from punctual.store.memory import MemoryStore
    from punctual.timing.timers import Lane, TimerLayout
    from punctual.usecases.jobs import JobService, QueueRouting
    from simulation import LONG, SHORT, SteadyWorkers, instant_of

    # Given a store whose bucket reads take 3 ms each (DynamoDB's, about: a minute of one shard
    # group is 544 of them), its pollers down for the half hour before 12:00 (their watermarks
    # left at 11:30: 30 owed minutes, nearly empty), and a `rate(1 second)` job on time
    clock = ManualClock(T - timedelta(minutes=1))

    class Slow(MemoryStore):
        def query_timers(self, *args: Any, **kwargs: Any) -> Any:
            clock.advance(0.003)
            return super().query_timers(*args, **kwargs)

    store = Slow()
    rig = type("Workers", (SteadyWorkers,), {"RATE": 20.0, "counted": True})
    layout = TimerLayout()  # (512 far and 32 near shards, as deployed)
    config = PollerConfig(layout=layout, short_queue_urls=(SHORT,), long_queue_urls=(LONG,), concurrency=2)
    sim = rig(store, clock, config=config)
    for lane in (Lane.FAR, Lane.NEAR):
        store.advance_watermarks(lane, layout.shards_of_group(lane, 0, 1), T - timedelta(minutes=30))
    jobs = JobService(store, sim.queues, clock, layout, QueueRouting((SHORT,), (LONG,)))
    on_time = jobs.register("tenant-a", spec("rate(1 second)", start_at=T.isoformat()))[0].id
    # When the 12:00 poller catches the owed minutes up beside its own (paced: the queues count)
    sim.run([T], until=T + timedelta(minutes=1, seconds=30))
    # Then the job's slots go out on time all the same: a catch-up turn reads at most the owed
    # minutes it can before the minute's next release (until now the first turn read all 30
    # minutes ahead, 49 s of reads, and the slots due meanwhile went up to 49 s late)
    late = [(at - instant_of(m)).total_seconds() for at, m in sim.queues.log if m.job_id == on_time]
    assert len(late) >= 55 and max(late) < 10, max(late)


@pytest.mark.parametrize(
    ("catchup", "jitter_s"),
    [({"policy": "all"}, 0), ({"policy": "all", "window_seconds": 86400}, 90), ({"policy": "none"}, 7)],
)
def test_a_chain_timers_fate_line_costs_a_few_bytes_and_is_never_later_than_its_line(
    catchup: dict[str, Any], jitter_s: int
) -> None:
    from factories import job
    from punctual.dispatch.polling.fate_lines import fate_line_ms
    from punctual.timing.slots import dispatch_instant, fate_keep_s, fire_timer
    from punctual.timing.timers import TimerLayout, to_ms

    # Given a job's chain timers, on time (FIRE) and written late (CATCHUP, and a FIRE timer a
    # repair writes for a past slot, due when written); each near one is read
    # some 8.8 times a trigger, its far one written and read in packs of ~70 bytes an entry
    owing = job("job-1", "rate(1 minute)", catchup=catchup, jitter_seconds=jitter_s)
    slot = T + timedelta(minutes=3)
    for now, chained in ((T, True), (T + timedelta(minutes=5), True), (T + timedelta(minutes=5), False)):
        timer = fire_timer(TimerLayout(), owing, slot, now, chained=chained)
        line = to_ms(dispatch_instant(owing, slot)) + 1000 * fate_keep_s(owing, timer.kind)
        # Then its line is noted in at most 5 characters (an epoch in ms took 18: 30 % more bytes
        # a packed timer, 0.0808 write units a next timer at 10,000/s became 0.0992), and read
        # back it is the line or up to a second before it (never after: held longer, its slot
        # could be MISSED)
        assert timer.owner is None or len(timer.owner) <= 5, timer.owner
        assert line - 1000 < fate_line_ms(timer) <= line  # type: ignore[operator]
