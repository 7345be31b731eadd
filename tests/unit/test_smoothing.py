"""Burst smoothing (punctual.dispatch.smoothing): a target's rate budget spreads a burst, never past a
slot's allowed lateness; what cannot hold fires on time and is reported."""

from __future__ import annotations

import json
import math
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from execution_harness import LAYOUT, LONG, SHORT, Rig
from factories import job as make_job
from factories import spec
from punctual.delivery.notifications import EventPublisher, MemoryEventSink, Notifier
from punctual.dispatch.polling import PollerConfig
from punctual.dispatch.polling.release import SlotReleaser
from punctual.dispatch.queues import DispatchMessage, MemoryQueues
from punctual.dispatch.smoothing import (
    BudgetLedger,
    Overrun,
    SmoothingConfigError,
    parse_budgets,
    place_slot,
    spacing_us,
    target_key,
)
from punctual.execution import ClaimOutcome
from punctual.models import ExecutionStatus, HttpTarget
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.runtime.settings import Settings, SettingsError
from punctual.store.memory import MemoryStore
from punctual.timing.slots import fire_timer
from punctual.timing.timers import TimerLayout
from punctual.usecases.jobs import JobService, QueueRouting

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _place_all(
    dues: list[datetime], rate: float, lateness: float, lane: tuple[int, int] = (0, 1)
) -> list[tuple[datetime, datetime, bool]]:
    state = None
    out = []
    for due in dues:
        placed = place_slot(state, due, rate, lateness, lane)
        state = placed.next_free
        out.append((due, placed.release_at, placed.overrun))
    return out


def _most_in_a_second(instants: list[datetime]) -> int:
    """The most instants in any one-second window [t, t + 1 s) (t anywhere: a sliding window)."""
    ordered = sorted(instants)
    most, low = 0, 0
    for high, instant in enumerate(ordered):
        while instant - ordered[low] >= timedelta(seconds=1):
            low += 1
        most = max(most, high - low + 1)
    return most


@settings(max_examples=300, deadline=None)
@given(
    offsets=st.lists(st.integers(min_value=0, max_value=120_000), min_size=1, max_size=400),
    rate=st.floats(min_value=0.05, max_value=5_000, allow_nan=False, allow_infinity=False),
    lateness=st.integers(min_value=0, max_value=600),
    ordered=st.booleans(),
    groups=st.integers(min_value=1, max_value=64),
    data=st.data(),
)
def test_a_slot_is_never_released_before_its_instant_nor_past_its_lateness(
    offsets: list[int], rate: float, lateness: int, ordered: bool, groups: int, data: st.DataObject
) -> None:
    group = data.draw(st.integers(min_value=0, max_value=groups - 1))
    dues = [T + timedelta(milliseconds=ms) for ms in (sorted(offsets) if ordered else offsets)]
    for due, release_at, overrun in _place_all(dues, rate, lateness, (group, groups)):
        assert due <= release_at <= due + timedelta(seconds=lateness)
        if overrun:
            assert release_at == due  # on time, reported


@settings(max_examples=300, deadline=None)
@given(
    bursts=st.lists(
        st.tuples(st.integers(min_value=0, max_value=90_000), st.integers(min_value=1, max_value=300)),
        min_size=1,
        max_size=4,
    ),
    rate=st.one_of(
        st.integers(min_value=1, max_value=200).map(float),
        st.floats(min_value=0.05, max_value=200, allow_nan=False, allow_infinity=False),
    ),
    lateness=st.integers(min_value=0, max_value=30),
    groups=st.integers(min_value=1, max_value=80),
    data=st.data(),
)
def test_a_budget_holds_in_every_one_second_window_across_all_of_a_minutes_pollers(
    bursts: list[tuple[int, int]], rate: float, lateness: int, groups: int, data: st.DataObject
) -> None:
    # Given bursts of slots (an offset from T in ms, how many at once), hash-split over the
    # minute's pollers in any way, each poller placing its own slots on its own ledger
    dues = [T + timedelta(milliseconds=offset) for offset, count in bursts for _ in range(count)]
    owners = data.draw(st.lists(st.integers(0, groups - 1), min_size=len(dues), max_size=len(dues)))
    placed: list[tuple[datetime, datetime, bool]] = []
    for group in range(groups):
        mine = sorted(due for due, owner in zip(dues, owners, strict=True) if owner == group)
        placed += _place_all(mine, rate, lateness, (group, groups))
    # Then in every one-second window, wherever it starts (the burst's first second included),
    # the smoothed calls of all pollers together keep to the budget
    smoothed = [release for _, release, overrun in placed if not overrun]
    assert _most_in_a_second(smoothed) <= math.ceil(rate)
    if rate == int(rate):
        assert _most_in_a_second(smoothed) <= rate
    # and a slot the budget could not take is on time (and reported), never late
    for due, release, overrun in placed:
        assert release == due if overrun else due <= release <= due + timedelta(seconds=lateness)


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(min_value=1, max_value=3_000),
    rate=st.integers(min_value=1, max_value=500),
    lateness=st.integers(min_value=0, max_value=30),
)
def test_one_poller_takes_every_grid_instant_within_the_lateness_and_overruns_only_the_rest(
    size: int, rate: int, lateness: int
) -> None:
    placed = _place_all([T] * size, rate, lateness)
    step_us = spacing_us(rate)
    fits = min(size, lateness * 1_000_000 // step_us + 1)  # T is a minute's first grid instant
    assert sum(1 for *_, overrun in placed if not overrun) == fits
    assert [release for _, release, _ in placed[:fits]] == [
        T + timedelta(microseconds=j * step_us) for j in range(fits)
    ]


def test_slots_spread_in_order_within_the_lateness() -> None:
    # 10 calls at once, 4 a second (1.1 / 4 = 275 ms apart), 2 s allowed: 8 fit, 2 fire on time
    placed = _place_all([T] * 10, 4, 2)
    assert [round((r - T).total_seconds() * 1000) for _, r, _ in placed[:8]] == [
        0,
        275,
        550,
        825,
        1100,
        1375,
        1650,
        1925,
    ]
    assert [o for *_, o in placed] == [False] * 8 + [True] * 2
    assert [r for _, r, o in placed if o] == [T, T]


def test_a_budget_frees_up_as_time_passes() -> None:
    placed = _place_all([T, T, T + timedelta(seconds=5)], 1, 10)
    assert [r for _, r, _ in placed] == [
        T,
        T + timedelta(seconds=1.1),
        T + timedelta(seconds=5.5),  # the grid's first instant at or after its own
    ]


def test_zero_lateness_never_delays() -> None:
    placed = _place_all([T] * 5, 2, 0)
    assert all(release == T for _, release, _ in placed)
    assert [o for *_, o in placed] == [False, True, True, True, True]


def test_the_pollers_of_a_minute_take_turns_on_the_grid() -> None:
    # Two pollers, 10 a second: poller 0 at 0, 220, 440 ms...; poller 1 at 110, 330, 550 ms...
    first = _place_all([T] * 3, 10, 5, (0, 2))
    second = _place_all([T] * 3, 10, 5, (1, 2))
    assert [round((r - T).total_seconds() * 1000) for _, r, _ in first + second] == [
        0,
        220,
        440,
        110,
        330,
        550,
    ]


def test_a_budget_too_small_for_its_pollers_minute_uses_one_grid_and_still_holds() -> None:
    # 1 call a second over 80 pollers: a minute has no turn for every poller; the grid goes on
    placed = [r for g in (0, 41, 79) for _, r, o in _place_all([T], 1, 120, (g, 80)) if not o]
    assert len(placed) == 3 and _most_in_a_second(placed) == 1


def test_target_keys() -> None:
    assert target_key(HttpTarget(url="https://Hooks.Example.com/a?b=1")) == "hooks.example.com"
    assert target_key(HttpTarget(url="http://hooks.example.com:8080/a")) == "hooks.example.com:8080"
    lam = make_job(
        target={"type": "lambda", "function_arn": "arn:aws:lambda:eu-west-1:123456789012:function:f"}
    )
    assert target_key(lam.target) == "arn:aws:lambda:eu-west-1:123456789012:function:f"


def test_one_host_is_one_budget_however_its_urls_spell_it() -> None:
    # The scheme's own port and a final dot name the host the name without them names: two jobs
    # of one tenant calling it shared no budget, each taking the whole of it (QA22)
    plain = target_key(HttpTarget(url="https://hooks.example.com/a"))
    assert target_key(HttpTarget(url="https://hooks.example.com:443/b")) == plain
    assert target_key(HttpTarget(url="http://hooks.example.com:80/c")) == plain
    assert target_key(HttpTarget(url="https://hooks.example.com./d")) == plain
    assert target_key(HttpTarget(url="http://hooks.example.com:443/e")) == "hooks.example.com:443"
    # and a deployment's budget for it, spelt either way, is that one budget
    for spelt in ("Hooks.Example.com:443", "hooks.example.com.", "hooks.example.com:80"):
        assert parse_budgets([f"{spelt}=5"]) == {("*", plain): 5.0}
    assert parse_budgets(["acme/hooks.example.com:8443=5"]) == {("acme", "hooks.example.com:8443"): 5.0}


def test_deployment_budgets_parse_and_bad_ones_are_refused_by_name() -> None:
    budgets = parse_budgets(
        ["hooks.example.com=50", "acme/API.example.com=5", "arn:aws:sqs:eu-west-1:1:q=100"]
    )
    assert budgets == {
        ("*", "hooks.example.com"): 50.0,
        ("acme", "api.example.com"): 5.0,
        ("*", "arn:aws:sqs:eu-west-1:1:q"): 100.0,
    }
    for bad in ("hooks.example.com", "=5", "h=0", "h=-1", "h=nan", "h=x"):
        with pytest.raises(SmoothingConfigError):
            parse_budgets([bad])
    with pytest.raises(SettingsError, match="PUNCTUAL_TARGET_RATE_BUDGETS"):
        Settings.from_env({"PUNCTUAL_TARGET_RATE_BUDGETS": "hooks.example.com=fast"})


def test_the_ledger_picks_the_targets_own_budget_then_the_tenants_then_everyones() -> None:
    ledger = BudgetLedger({("acme", "h"): 10.0, ("*", "h"): 20.0}, lane=(1, 2))
    assert ledger.rate_for("acme", "h", 4.0) == 4.0
    assert ledger.rate_for("acme", "h", None) == 10.0
    assert ledger.rate_for("other", "h", None) == 20.0
    assert ledger.rate_for("other", "elsewhere", None) is None
    # the poller's lane decides where on the budget's grid its slots go
    assert ledger.place("acme", "h", 10.0, T, 5).release_at == T + timedelta(milliseconds=110)


# --------------------------------------------------------------------------- in the poller's release


EVENT_SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "events.schema.json").read_text())


class _Overruns:
    def __init__(self) -> None:
        self.seen: list[Overrun] = []

    def overrun(self, event: Overrun) -> None:
        self.seen.append(event)


def _release_burst(
    jobs: int,
    budget: float | None,
    lateness: int | None,
    events: MemoryEventSink | None = None,
    lanes: tuple[int, int] = (0, 1),
) -> tuple[list[DispatchMessage], RecordingMetrics, _Overruns]:
    # Given `jobs` jobs calling one host, each with a slot at T, and a poller at T
    clock = ManualClock(T)
    store, queues, metrics, overruns = (
        MemoryStore(),
        MemoryQueues(now=clock.now),
        RecordingMetrics(),
        _Overruns(),
    )
    layout = TimerLayout(4, 2, 180)
    config = PollerConfig(
        layout=layout, short_queue_urls=("short",), long_queue_urls=("long",), max_lateness_s=10
    )
    target = {"type": "http", "url": "https://hooks.example.com/x", "rate_budget_per_second": budget}
    timers = []
    for index in range(lanes[0], jobs, lanes[1]):  # this poller's share of the jobs
        job = make_job(
            f"job-{index:04d}",
            "cron(0 * * * ? *)",
            now=T - timedelta(hours=1),
            target=target,
            max_lateness_seconds=lateness,
        )
        store.create_job(job, None, max_jobs=10_000)
        timers.append(fire_timer(layout, job, T, T - timedelta(hours=1)))
    with ThreadPoolExecutor(4) as pool:
        notifier = Notifier(EventPublisher(events)) if events is not None else None
        releaser = SlotReleaser(store, queues, clock, config, metrics, pool, notifier, overruns=overruns)
        releaser.ledger.lane = lanes
        # When the burst is released
        report = releaser.release(timers)
    assert report.released == len(timers)  # every slot is sent at once: nothing waits in the poller
    return [stored.message for stored in queues.queues["short"]], metrics, overruns


def _instant(message: DispatchMessage) -> datetime:
    return datetime.fromisoformat((message.not_before or message.scheduled_at).replace("Z", "+00:00"))


def test_the_release_spreads_a_burst_over_the_budget_and_reports_what_cannot_wait() -> None:
    messages, metrics, overruns = _release_burst(100, 20, 3)
    # 20 a second is one call every 55 ms, placed no earlier than 2 s after the release (released
    # at the instant: HEAD_START_S, so each message reaches a worker before its call): 18 fit from
    # 2.035 s to 2.970 s of the 3 s allowed, the other 82 go on time, reported
    spread = sorted(_instant(m) for m in messages if m.not_before)
    assert len(spread) == 18 and spread[0] == T + timedelta(milliseconds=37 * 55)
    assert spread[-1] == T + timedelta(milliseconds=54 * 55)
    assert metrics.total("RateBudgetOverruns") == 82
    assert len(overruns.seen) == 82 and overruns.seen[0].record()["event"] == "rate_budget_overrun"
    assert {o.target for o in overruns.seen} == {"hooks.example.com"}
    over = {o.job_id for o in overruns.seen}
    assert _most_in_a_second([_instant(m) for m in messages if m.job_id not in over]) == 18


def test_two_pollers_of_a_burst_keep_to_one_budget_from_its_first_second() -> None:
    # The case: 40 slots at one instant, 10 a second, 8 s allowed, over two pollers
    # (it reached 20, 10, 10 in the first three seconds). Each poller releases its half.
    halves = [_release_burst(40, 10, 8, lanes=(g, 2)) for g in (0, 1)]
    messages = [m for batch, _, _ in halves for m in batch]
    assert sum(metrics.total("RateBudgetOverruns") for _, metrics, _ in halves) == 0
    instants = [_instant(m) for m in messages]
    assert _most_in_a_second(instants) <= 10
    assert Counter(int((i - T).total_seconds()) for i in instants)[0] <= 10


def test_each_overrun_is_an_event_on_the_bus_in_the_documented_schema() -> None:
    events = MemoryEventSink()
    messages, _, overruns = _release_burst(100, 20, 3, events)
    published = [e for e in events.events if e.detail_type == "Rate Budget Overrun"]
    # One event per overrun, naming the slot, the target and the bounds, sent with the release
    assert sorted(e.detail["slot"] for e in published) == sorted(o.slot for o in overruns.seen)
    assert len(published) == 82 == len(events.events)
    for event in published:
        jsonschema.validate(event.detail, EVENT_SCHEMA)
        assert event.detail["status"] == "OVER_BUDGET" and event.detail["target"] == "hooks.example.com"
        assert event.detail["rate_budget_per_second"] == 20 and event.detail["max_lateness_seconds"] == 3
        assert "over the rate budget of hooks.example.com" in event.detail["error"]
    # and the over-budget slots were sent on time
    on_time = {m.slot for m in messages if not m.not_before}
    assert {e.detail["slot"] for e in published} <= on_time


def test_the_deployment_default_lateness_applies_and_no_budget_changes_nothing() -> None:
    messages, _, _ = _release_burst(30, 2, None)  # 10 s by default: 550 ms apart, 19 fit
    assert max(m.not_before for m in messages) == "2026-12-01T12:00:09.900Z"
    messages, metrics, _ = _release_burst(30, None, None)
    assert {m.not_before for m in messages} == {""} and not metrics.total("RateBudgetOverruns")


def test_a_smoothed_message_is_signed_with_its_instant_and_reads_back() -> None:
    message = DispatchMessage(
        "t", "j", "2026-12-01T12:00:00Z", "2026-12-01T12:00:00Z", 1, 1, not_before="2026-12-01T12:00:03.000Z"
    )
    assert DispatchMessage.from_body(message.to_body()) == message
    plain = DispatchMessage("t", "j", "s", "s", 1, 1)
    assert "not_before" not in plain.payload()  # unchanged for every unsmoothed message
    assert math.isfinite(len(plain.to_body()))


# --------------------------------------------------------------------------- in the worker


def test_the_worker_holds_a_smoothed_message_until_its_instant_then_runs_it() -> None:
    # Given a slot due at T that its budget placed at T + 3 s, received at T
    rig = Rig(MemoryStore(), ManualClock(T))
    job = rig.add_job()
    message = rig.message(job, T)
    rig.send(DispatchMessage(**{**message.__dict__, "not_before": "2026-12-01T12:00:03.000Z"}))
    worker = rig.worker()
    # When the worker receives it: back to the queue until a second before its instant (the time
    # to receive it again), nothing recorded
    (held,) = rig.work(worker)
    assert (held.outcome, held.ack, held.return_after_s) == (ClaimOutcome.WAITING.value, False, 2)
    assert rig.history(job) == [] and rig.work(worker) == []  # invisible meanwhile
    assert rig.metrics.total("SmoothedMessagesHeld") == 1
    rig.advance_to(T + timedelta(seconds=1, milliseconds=900))
    assert rig.work(worker) == []  # still invisible (2 s visibility)
    # When it comes back (less than two seconds before its instant), it is claimed and runs at
    # its instant, not before
    rig.advance_to(T + timedelta(seconds=2))
    (ran,) = rig.work(worker)
    assert ran.outcome == ExecutionStatus.SUCCEEDED.value and ran.ack
    assert rig.clock.now() >= T + timedelta(seconds=3)


def test_a_slot_claimed_less_than_a_second_before_its_instant_waits_for_it_in_the_worker() -> None:
    # Given a slot its budget placed at T + 400 ms, received at T (not worth a trip to the queue)
    clock = ManualClock(T)
    rig = Rig(MemoryStore(), clock)
    job = rig.add_job()
    message = rig.message(job, T)
    rig.send(DispatchMessage(**{**message.__dict__, "not_before": "2026-12-01T12:00:00.400Z"}))
    called_at: list[datetime] = []

    class Target:
        def invoke(self, target: object, payload: object, ctx: object) -> object:
            from punctual.delivery.targets.base import TargetResult

            called_at.append(clock.now())
            return TargetResult.ok()

    # When the worker takes it, Then it claims it and calls the target at its instant, not before
    (ran,) = rig.work(rig.worker(target=Target()))  # type: ignore[arg-type]
    assert ran.outcome == ExecutionStatus.SUCCEEDED.value
    assert called_at == [T + timedelta(milliseconds=400)]


def _late_call(
    rig: Rig, job_id: str, target: dict[str, object], budgets: dict[tuple[str, str], float], lateness: int
) -> datetime:
    """The moment a worker of a deployment with ``lateness`` seconds of it calls a slot due at T
    that its budget placed at T + 2 s but whose message reaches the worker only at T + 2.5 s."""
    job = rig.add_job(job_id, target=target)
    message = rig.message(job, T)
    rig.send(DispatchMessage(**{**message.__dict__, "not_before": "2026-12-01T12:00:02.000Z"}))
    called_at: list[datetime] = []

    class Target:
        def invoke(self, target: object, payload: object, ctx: object) -> object:
            from punctual.delivery.targets.base import TargetResult

            called_at.append(rig.clock.now())
            return TargetResult.ok()

    rig.advance_to(T + timedelta(seconds=2, milliseconds=500))
    worker = rig.worker(target=Target(), max_lateness_s=lateness, rate_budgets=budgets)  # type: ignore[arg-type]
    (ran,) = rig.work(worker)
    assert ran.outcome == ExecutionStatus.SUCCEEDED.value
    return called_at[0]


def test_a_late_smoothed_call_keeps_within_the_deployments_lateness_and_its_budget() -> None:
    # Given a deployment whose maxLatenessSeconds is 3, a job of 1 call a second on its host and
    # no lateness of its own: the budget's next instants after T + 2.55 s are T + 3.3 s, ...
    url = "https://hooks.example.com/x"
    rig = Rig(MemoryStore(), ManualClock(T))
    # When its message reaches a worker late, Then it is called at once (late already), not at
    # T + 3.3 s: that is past the deployment's bound of 3 s
    own = {"type": "http", "url": url, "rate_budget_per_second": 1}
    assert _late_call(rig, "own", own, {}, 3) <= T + timedelta(seconds=3)
    # And a late call under a deployment budget of that host takes a free instant of it, as one
    # under a budget of its own does: not the one just taken, nor the moment it arrives
    rig = Rig(MemoryStore(), ManualClock(T))
    first = _late_call(rig, "own", {**own, "rate_budget_per_second": 2}, {}, 10)
    rig.clock.set(T)
    second = _late_call(rig, "deployed", {"type": "http", "url": url}, {("*", "hooks.example.com"): 2}, 10)
    assert second - first >= timedelta(microseconds=spacing_us(2))


def test_calls_a_late_release_sends_over_the_budget_are_each_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given 20 slots at T on a target of 2 calls a second, whose poller releases them only 30 s
    # late (it was down): no instant within their 10 s of lateness is left for any of them
    store = MemoryStore()
    rig = Rig(store, ManualClock(T - timedelta(minutes=10)))
    target = {"type": "http", "url": "https://hooks.example.com/x", "rate_budget_per_second": 2}
    jobs = JobService(store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    for index in range(20):
        jobs.register("default", spec(f"at({T:%Y-%m-%dT%H:%M:%S})", target=target), job_id=f"job-{index:02d}")
    rig.advance_to(T + timedelta(seconds=30))
    rig.poll()
    called: dict[str, datetime] = {}

    class Target:
        def invoke(self, target: object, payload: object, ctx: object) -> object:
            from punctual.delivery.targets.base import TargetResult

            called[ctx.job_id] = rig.clock.now()  # type: ignore[attr-defined]
            return TargetResult.ok()

    # When the workers take them
    with caplog.at_level("WARNING", logger="punctual.dispatch.smoothing"):
        rig.work_until_idle(rig.worker(target=Target()))  # type: ignore[arg-type]
    # Then every slot runs, and each call over the budget is reported (never silently over it):
    # the calls of the slots not reported keep to the budget
    reported = {r.rate_budget_overrun["job_id"] for r in caplog.records if hasattr(r, "rate_budget_overrun")}
    assert len(called) == 20
    assert _most_in_a_second([at for job_id, at in called.items() if job_id not in reported]) <= 2
    assert rig.metrics.total("RateBudgetOverruns") > 0


def _most_in_a_second(instants: list[datetime]) -> int:
    ordered = sorted(instants)
    return max((sum(1 for b in ordered if a <= b < a + timedelta(seconds=1)) for a in ordered), default=0)


def test_a_late_call_whose_next_free_instant_is_far_off_is_not_made_before_it() -> None:
    # Given a job of 1 call a second and 60 s of lateness whose budget's next 40 instants other
    # slots hold, and its message, placed at T + 2 s, reaching a worker at T + 3 s
    rig = Rig(MemoryStore(), ManualClock(T))
    url = "https://hooks.example.com/x"
    target = {"type": "http", "url": url, "rate_budget_per_second": 1}
    step = timedelta(microseconds=spacing_us(1))
    taken = [T + j * step for j in range(40)]
    for j, instant in enumerate(taken):
        rig.store.reserve_budget_instant("default", "hooks.example.com", instant, f"other-{j}/s", 0)
    job = rig.add_job(target=target, max_lateness_seconds=60)
    rig.send(DispatchMessage(**{**rig.message(job, T).__dict__, "not_before": "2026-12-01T12:00:02.000Z"}))
    rig.advance_to(T + timedelta(seconds=3))
    called: list[datetime] = []

    class Target:
        def invoke(self, target: object, payload: object, ctx: object) -> object:
            from punctual.delivery.targets.base import TargetResult

            called.append(rig.clock.now())
            return TargetResult.ok()

    rig.work_until_idle(rig.worker(target=Target()))  # type: ignore[arg-type]
    # Then it is called on an instant of its own, a spacing from every other slot's, or reported
    (at,) = called
    assert rig.metrics.total("RateBudgetOverruns") == 1 or all(abs(at - other) >= step for other in taken)


def test_the_children_a_parent_slot_sends_at_once_keep_to_their_targets_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given 20 after(parent) jobs calling one host with a budget of 2 calls a second
    store = MemoryStore()
    rig = Rig(store, ManualClock(T - timedelta(hours=1)))
    jobs = JobService(store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    jobs.register("default", spec("rate(1 hour)"), job_id="parent")
    target = {"type": "http", "url": "https://hooks.example.com/x", "rate_budget_per_second": 2}
    for index in range(20):
        jobs.register("default", spec("after(parent)", target=target), job_id=f"child-{index:02d}")
    called: dict[str, datetime] = {}

    class Target:
        def invoke(self, target: object, payload: object, ctx: object) -> object:
            from punctual.delivery.targets.base import TargetResult

            called.setdefault(ctx.job_id, rig.clock.now())  # type: ignore[attr-defined]
            return TargetResult.ok()

    # When the parent's slot succeeds, and the workers take what it sends as it comes
    worker = rig.worker(target=Target())  # type: ignore[arg-type]
    rig.advance_to(T)
    rig.poll()
    with caplog.at_level("WARNING", logger="punctual.dispatch.smoothing"):
        for step in range(60):
            rig.advance_to(max(rig.clock.now(), T + timedelta(milliseconds=500 * step)))
            rig.work_until_idle(worker)
    # Then every child runs once, and the calls not reported as over the budget keep to it
    reported = {r.rate_budget_overrun["job_id"] for r in caplog.records if hasattr(r, "rate_budget_overrun")}
    children = {job_id: at for job_id, at in called.items() if job_id.startswith("child-")}
    assert len(children) == 20
    assert _most_in_a_second([at for job_id, at in children.items() if job_id not in reported]) <= 2
    assert len(reported) <= 20 - 15  # 10 s of lateness at 2 a second hold 15 of them
