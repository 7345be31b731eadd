"""Burst smoothing (punctual.smoothing): a target's rate budget spreads a burst, never past a
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

from execution_harness import Rig
from factories import job as make_job
from punctual.clock import ManualClock
from punctual.execution import ClaimOutcome
from punctual.models import ExecutionStatus, HttpTarget
from punctual.notifications import EventPublisher, MemoryEventSink, Notifier
from punctual.observability import RecordingMetrics
from punctual.polling import PollerConfig
from punctual.polling.release import SlotReleaser
from punctual.queues import DispatchMessage, MemoryQueues
from punctual.settings import Settings, SettingsError
from punctual.slots import fire_timer
from punctual.smoothing import (
    BudgetLedger,
    Overrun,
    SmoothingConfigError,
    parse_budgets,
    place_slot,
    target_key,
)
from punctual.store.memory import MemoryStore
from punctual.timers import TimerLayout

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _place_all(dues: list[datetime], rate: float, lateness: float) -> list[tuple[datetime, datetime, bool]]:
    state = None
    out = []
    for due in dues:
        placed = place_slot(state, due, rate, lateness)
        state = placed.next_free
        out.append((due, placed.release_at, placed.overrun))
    return out


@settings(max_examples=300, deadline=None)
@given(
    offsets=st.lists(st.integers(min_value=0, max_value=120_000), min_size=1, max_size=400),
    rate=st.floats(min_value=0.05, max_value=5_000, allow_nan=False, allow_infinity=False),
    lateness=st.integers(min_value=0, max_value=600),
    ordered=st.booleans(),
)
def test_a_slot_is_never_released_before_its_instant_nor_past_its_lateness(
    offsets: list[int], rate: float, lateness: int, ordered: bool
) -> None:
    dues = [T + timedelta(milliseconds=ms) for ms in (sorted(offsets) if ordered else offsets)]
    for due, release_at, overrun in _place_all(dues, rate, lateness):
        assert due <= release_at <= due + timedelta(seconds=lateness)
        if overrun:
            assert release_at == due  # on time, reported
        # Held back by whole seconds only (the worker's visibility counts whole seconds)
        assert (release_at - due).total_seconds() == int((release_at - due).total_seconds())


@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(min_value=1, max_value=3_000),
    rate=st.integers(min_value=1, max_value=500),
    lateness=st.integers(min_value=0, max_value=60),
)
def test_a_top_of_minute_burst_keeps_to_its_budget_each_second_and_overruns_only_past_the_lateness(
    size: int, rate: int, lateness: int
) -> None:
    placed = _place_all([T] * size, rate, lateness)
    smoothed = [release for _, release, overrun in placed if not overrun]
    per_second = Counter(int((release - T).total_seconds()) for release in smoothed)
    assert max(per_second.values()) <= rate  # the budget holds for every smoothed call
    # The budget takes rate x (lateness + 1) calls within the lateness; the rest overrun, on time.
    fits = min(size, rate * (lateness + 1))
    assert len(smoothed) == fits
    assert sum(1 for _, _, overrun in placed if overrun) == size - fits


def test_slots_spread_in_order_within_the_lateness() -> None:
    # 10 calls at once, 4 a second, 2 s allowed: 4 now, 4 at +1 s, 2 at +2 s
    placed = _place_all([T] * 10, 4, 2)
    assert [int((r - T).total_seconds()) for _, r, _ in placed] == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    # 2 s allowed but 14 calls: the last two fire on time, reported
    placed = _place_all([T] * 14, 4, 2)
    assert [o for *_, o in placed] == [False] * 12 + [True] * 2
    assert [r for _, r, o in placed if o] == [T, T]


def test_a_budget_frees_up_as_time_passes() -> None:
    placed = _place_all([T, T, T + timedelta(seconds=5)], 1, 10)
    assert [r for _, r, _ in placed] == [T, T + timedelta(seconds=1), T + timedelta(seconds=5)]


def test_zero_lateness_never_delays() -> None:
    placed = _place_all([T] * 5, 2, 0)
    assert all(release == T for _, release, _ in placed)
    assert [o for *_, o in placed] == [False, False, True, True, True]


def test_target_keys() -> None:
    assert target_key(HttpTarget(url="https://Hooks.Example.com/a?b=1")) == "hooks.example.com"
    assert target_key(HttpTarget(url="http://hooks.example.com:8080/a")) == "hooks.example.com:8080"
    lam = make_job(
        target={"type": "lambda", "function_arn": "arn:aws:lambda:eu-west-1:123456789012:function:f"}
    )
    assert target_key(lam.target) == "arn:aws:lambda:eu-west-1:123456789012:function:f"


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


def test_the_ledger_picks_the_targets_own_budget_then_the_tenants_then_everyones_and_shares_it() -> None:
    ledger = BudgetLedger({("acme", "h"): 10.0, ("*", "h"): 20.0}, share=0.5)
    assert ledger.rate_for("acme", "h", 4.0) == 2.0
    assert ledger.rate_for("acme", "h", None) == 5.0
    assert ledger.rate_for("other", "h", None) == 10.0
    assert ledger.rate_for("other", "elsewhere", None) is None


# --------------------------------------------------------------------------- in the poller's release


EVENT_SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "events.schema.json").read_text())


class _Overruns:
    def __init__(self) -> None:
        self.seen: list[Overrun] = []

    def overrun(self, event: Overrun) -> None:
        self.seen.append(event)


def _release_burst(
    jobs: int, budget: float | None, lateness: int | None, events: MemoryEventSink | None = None
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
    for index in range(jobs):
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
        # When the burst is released
        report = releaser.release(timers)
    assert report.released == jobs  # every slot is sent at once: nothing waits in the poller
    return [stored.message for stored in queues.queues["short"]], metrics, overruns


def test_the_release_spreads_a_burst_over_the_budget_and_reports_what_cannot_wait() -> None:
    messages, metrics, overruns = _release_burst(100, 20, 3)
    held = Counter(m.not_before for m in messages)
    # 20 at once, 20 for each of the next 3 seconds, the last 20 on time and reported
    assert held[""] == 40
    assert [held[f"2026-12-01T12:00:0{s}.000Z"] for s in (1, 2, 3)] == [20, 20, 20]
    assert metrics.total("RateBudgetOverruns") == 20
    assert len(overruns.seen) == 20 and overruns.seen[0].record()["event"] == "rate_budget_overrun"
    assert {o.target for o in overruns.seen} == {"hooks.example.com"}


def test_each_overrun_is_an_event_on_the_bus_in_the_documented_schema() -> None:
    events = MemoryEventSink()
    messages, _, overruns = _release_burst(100, 20, 3, events)
    published = [e for e in events.events if e.detail_type == "Rate Budget Overrun"]
    # One event per overrun, naming the slot, the target and the bounds, sent with the release
    assert sorted(e.detail["slot"] for e in published) == sorted(o.slot for o in overruns.seen)
    assert len(published) == 20 == len(events.events)
    for event in published:
        jsonschema.validate(event.detail, EVENT_SCHEMA)
        assert event.detail["status"] == "OVER_BUDGET" and event.detail["target"] == "hooks.example.com"
        assert event.detail["rate_budget_per_second"] == 20 and event.detail["max_lateness_seconds"] == 3
        assert "over the rate budget of hooks.example.com" in event.detail["error"]
    # and the over-budget slots were sent on time
    on_time = {m.slot for m in messages if not m.not_before}
    assert {e.detail["slot"] for e in published} <= on_time


def test_the_deployment_default_lateness_applies_and_no_budget_changes_nothing() -> None:
    messages, _, _ = _release_burst(30, 2, None)  # 10 s by default: 2 x 11 = 22 fit
    assert max(m.not_before for m in messages) == "2026-12-01T12:00:10.000Z"
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
    # When the worker receives it: back to the queue for the 3 s left, nothing recorded
    (held,) = rig.work(worker)
    assert (held.outcome, held.ack, held.return_after_s) == (ClaimOutcome.WAITING.value, False, 3)
    assert rig.history(job) == [] and rig.work(worker) == []  # invisible meanwhile
    assert rig.metrics.total("SmoothedMessagesHeld") == 1
    # When its instant comes (within the last second: a fraction is not held), it runs
    rig.advance_to(T + timedelta(seconds=2, milliseconds=300))
    assert rig.work(worker) == []  # still invisible (3 s visibility)
    rig.advance_to(T + timedelta(seconds=3))
    (ran,) = rig.work(worker)
    assert ran.outcome == ExecutionStatus.SUCCEEDED.value and ran.ack
