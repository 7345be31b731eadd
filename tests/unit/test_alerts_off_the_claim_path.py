"""Nothing on the claim path waits for the outside world; no alert stays SENDING for ever.

Issue 29's findings, reproduced through the real worker and poller (in-memory store, manual
clock): a ``late`` alert used to be delivered inside the claim (3 tries of up to 10 s per rule),
so with alert endpoints that hang the run started late and, on the heartbeat lane, after its
lease had lapsed (a second worker took the slot over: the target was called twice); and a
worker that died while it sent a ``late`` alert left it SENDING for ever. Now the claim makes
the alert (a conditional write and its sweep timer) and returns; the delivery runs beside the
run; a dead deliverer's alert is taken over by its sweep.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from execution_harness import LAYOUT, Crash, FakeTarget, Rig
from factories import job as make_job
from punctual.delivery.notifications import Alerter, Notifier
from punctual.delivery.notifications.alerts import DELIVERY_TIMEOUT_S, DELIVERY_TRIES
from punctual.delivery.notifications.sweep import SWEEP_AFTER_S, AlertSweeps
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.queues import MessageKind, message_for
from punctual.execution import ClaimOutcome, Worker
from punctual.models import AlertCondition, AlertStatus, ExecutionStatus, Job
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerKind, slot_key

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
LATE_S = 30  # every slot here is released this late
HANG = {"type": "http", "url": "https://hangs.example.com/alert"}
PAGER = {"type": "http", "url": "https://pager.example.com/alert"}
HANG_LIMIT_S = 5.0  # how long a test waits for a condition before it gives up (never reached when it holds)


class Rec:
    """The job's target: records the instant of each call; optionally holds the run open."""

    def __init__(self, clock: ManualClock, hold: threading.Event | None = None) -> None:
        self.clock = clock
        self.hold = hold
        self.started = threading.Event()
        self.calls: list[tuple[str, int, datetime]] = []

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        self.calls.append((ctx.slot, ctx.attempt, self.clock.now()))
        self.started.set()
        if self.hold is not None:
            self.hold.wait(HANG_LIMIT_S)
        return TargetResult.ok("HTTP 200")


class Setup:
    """A store, a clock, a rig, and workers that each have their own notifier and alerter."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.clock = ManualClock(T0)
        self.rig = Rig(self.store, self.clock)

    def worker(self, target: Any, hooks: Any, *, lease_timers: bool = False) -> Worker:
        alerter = Alerter(self.store, hooks, self.clock, sweeps=AlertSweeps(self.store, LAYOUT))
        self.rig.notifier = Notifier(alerter=alerter)
        return self.rig.worker(lease_timers=lease_timers, target=target)

    def job(self, *rules: dict[str, Any], runtime: str = "lambda") -> Job:
        return self.rig.add_job(alerts=list(rules), retry={"max_attempts": 3}, runtime=runtime)

    def release_late(self, job: Job, queue: str) -> str:
        """The slot T0, released LATE_S after its instant (the clock is then)."""
        self.clock.set(T0 + timedelta(seconds=LATE_S))
        self.rig.send(message_for(job, slot_key(T0), T0, 1, MessageKind.FIRE, self.clock.now()), queue=queue)
        return slot_key(T0)

    def late_alert(self, job: Job) -> Any:
        return self.store.get_alert(job.tenant, job.id, slot_key(T0), AlertCondition.LATE)


def late_rule(target: dict[str, Any]) -> dict[str, Any]:
    return {"on": ["late"], "late_after_seconds": 5, "target": target}


def test_hanging_late_alert_endpoints_delay_no_start_on_the_lambda_lane() -> None:
    # Given a job with two late rules whose endpoints never answer (each try ends in the
    # transport's timeout, which the injected clock spends), released 30 s late
    s = Setup()
    target = Rec(s.clock)
    on_claim_path: list[str] = []

    def hang(ctx: SlotContext) -> TargetResult:
        if not target.started.wait(HANG_LIMIT_S):
            on_claim_path.append(ctx.slot)  # asked to deliver before the run had started
        s.clock.advance(DELIVERY_TIMEOUT_S)
        return TargetResult.retryable(f"timed out after {DELIVERY_TIMEOUT_S:g} s")

    hooks = FakeTarget(hang)
    worker = s.worker(target, hooks)
    job = s.job(late_rule(HANG), late_rule(PAGER))
    slot = s.release_late(job, "queue://short")
    released = s.clock.now()
    # When a Lambda worker handles the message
    handled = s.rig.work(worker)
    # Then the run started at the claim's instant, once, and succeeded
    assert not on_claim_path
    assert target.calls == [(slot, 1, released)]
    record = s.store.get_execution(job.tenant, job.id, slot)
    assert record is not None and record.status is ExecutionStatus.SUCCEEDED and record.attempt == 1
    assert record.started_at == released
    assert [h.ack for h in handled] == [True]
    # And the late alert was made once and given up visibly: FAILED with every try of each rule
    alert = s.late_alert(job)
    assert alert.status is AlertStatus.FAILED
    assert [(d.rule, d.status, d.tries) for d in alert.deliveries] == [
        (0, AlertStatus.FAILED, DELIVERY_TRIES),
        (1, AlertStatus.FAILED, DELIVERY_TRIES),
    ]
    assert len(hooks.calls) == 2 * DELIVERY_TRIES


def test_a_hanging_late_alert_lets_no_lease_lapse_on_the_heartbeat_lane() -> None:
    # Given an ECS job with a late rule whose endpoint hangs until the test lets it answer,
    # and two ECS workers (heartbeat mode, 60 s leases)
    s = Setup()
    endpoint_answers, run_ends = threading.Event(), threading.Event()
    target = Rec(s.clock, hold=run_ends)

    def hang(ctx: SlotContext) -> TargetResult:
        endpoint_answers.wait(HANG_LIMIT_S)
        return TargetResult.ok("HTTP 200")

    hooks = FakeTarget(hang)
    first = s.worker(target, hooks, lease_timers=True)
    second = s.worker(target, FakeTarget(), lease_timers=True)
    job = s.job(late_rule(HANG), runtime="ecs")
    slot = s.release_late(job, "queue://long")
    [received] = s.rig.queues.receive("queue://long", 1, 0, 60)
    # When the first worker claims it: the claim returns while the endpoint still hangs
    claim = first.claim(received.message)
    assert claim.outcome is ClaimOutcome.CLAIMED
    alert = s.late_alert(job)
    assert alert.status is AlertStatus.SENDING and alert.deliveries == []
    # And its run starts and lasts, while heartbeats keep the lease for 90 s of the clock
    runner = threading.Thread(target=lambda: first.finish(claim, first.run(claim)))
    runner.start()
    assert target.started.wait(HANG_LIMIT_S)
    for _ in range(3):
        s.clock.advance(30)
        assert first.heartbeat(claim)
    # Then neither the poller's lease timer nor a second worker takes the slot over
    s.rig.poll()
    assert not [m for m in s.rig.queues.all_messages() if m.kind == MessageKind.TAKEOVER]
    takeover = message_for(job, slot, T0, 2, MessageKind.TAKEOVER, s.clock.now())
    assert second.claim(takeover).outcome is ClaimOutcome.WAITING
    # And once the endpoint answers and the run ends: one call of the target, one alert, SENT
    endpoint_answers.set()
    run_ends.set()
    runner.join(HANG_LIMIT_S)
    assert first.settle(HANG_LIMIT_S) == 0
    assert [(c[0], c[1]) for c in target.calls] == [(slot, 1)]
    record = s.store.get_execution(job.tenant, job.id, slot)
    assert record is not None and record.status is ExecutionStatus.SUCCEEDED and record.attempt == 1
    alert = s.late_alert(job)
    assert alert.status is AlertStatus.SENT and len(hooks.calls) == 1


def test_a_late_alert_left_sending_by_a_dead_worker_is_swept_and_delivered() -> None:
    # Given a worker that dies (Crash) while it delivers a late alert: the first worker's
    # delivery dies, and so does the first sweep's
    s = Setup()
    target = Rec(s.clock)
    hooks = FakeTarget(Crash(), Crash(), TargetResult.ok("HTTP 200"))
    worker = s.worker(target, hooks)
    job = s.job(late_rule(HANG))
    slot = s.release_late(job, "queue://short")
    try:
        s.rig.work(worker, visibility_s=3600)
        raise AssertionError("the worker should have died")
    except Crash:
        pass
    # The run itself was not held up: it started and ended, once
    record = s.store.get_execution(job.tenant, job.id, slot)
    assert record is not None and record.status is ExecutionStatus.SUCCEEDED
    assert s.late_alert(job).status is AlertStatus.SENDING
    # When the poller reaches the alert's sweep timer and a worker handles it: it dies too
    sweeps = s.rig.timers(T0, T0 + timedelta(hours=1), TimerKind.ALERT)
    assert [t.due for t in sweeps] == [s.clock.now() + timedelta(seconds=SWEEP_AFTER_S)]
    s.clock.advance(SWEEP_AFTER_S)
    s.rig.poll()
    try:
        s.rig.work(worker, visibility_s=3600)
        raise AssertionError("the sweeping worker should have died")
    except Crash:
        pass
    assert s.late_alert(job).status is AlertStatus.SENDING
    # Then the sweep that its takeover armed finishes it: delivered, once more, and SENT
    s.clock.advance(SWEEP_AFTER_S)
    s.rig.poll()
    s.rig.work_until_idle(worker)
    alert = s.late_alert(job)
    assert alert.status is AlertStatus.SENT
    assert [(d.rule, d.status) for d in alert.deliveries] == [(0, AlertStatus.SENT)]
    assert len(hooks.calls) == 3
    # And the job's target was called once for the slot
    assert [(c[0], c[1]) for c in target.calls] == [(slot, 1)]
    # And a later sweep finds it done: nothing is sent again
    s.clock.advance(SWEEP_AFTER_S)
    s.rig.poll()
    s.rig.work_until_idle(worker)
    assert len(hooks.calls) == 3


def test_a_sweep_waits_for_a_live_owner_and_delivers_only_the_rules_left() -> None:
    # Given an alert with two rules whose owner delivered the first, then died on the second
    store, clock = MemoryStore(), ManualClock(T0)
    rig = Rig(store, clock)
    job = rig.add_job(alerts=[late_rule(HANG), late_rule(PAGER)])
    delivered: list[str] = []

    def record(ctx: SlotContext) -> TargetResult:
        delivered.append(ctx.slot)
        return TargetResult.ok("HTTP 200")

    dying = Alerter(store, FakeTarget(record, Crash()), clock)
    from punctual.execution.records import new_record

    execution = new_record(rig.message(job, T0), ExecutionStatus.RUNNING)
    made = dying.make(AlertCondition.LATE, job, execution, fire_delay_ms=LATE_S * 1000)
    assert made is not None
    clock.advance(20)
    try:
        dying.deliver(job, made)
        raise AssertionError("the deliverer should have died")
    except Crash:
        pass
    hooks = FakeTarget()
    sweeper = Alerter(store, hooks, clock)
    # When its sweep comes before the (renewed) claim is stale: it waits for the rest
    clock.advance(40)
    wait_s = sweeper.sweep(job, slot_key(T0), AlertCondition.LATE)
    assert wait_s is not None and wait_s > 0 and hooks.calls == []
    # Then past the stale bound it takes over and delivers only the second rule
    clock.advance(wait_s + 1)
    assert sweeper.sweep(job, slot_key(T0), AlertCondition.LATE) is None
    alert = store.get_alert(job.tenant, job.id, slot_key(T0), AlertCondition.LATE)
    assert alert is not None and alert.status is AlertStatus.SENT
    assert [(d.rule, d.status) for d in alert.deliveries] == [(0, AlertStatus.SENT), (1, AlertStatus.SENT)]
    assert len(delivered) == 1 and len(hooks.calls) == 1


def test_an_alert_left_sending_for_a_job_that_is_gone_is_given_up_visibly() -> None:
    """QA23: a one-time job with delete_after_completion failed; its worker died while sending the
    failed alert and the job was deleted meanwhile. The sweep skipped the gone job, and the alert
    stayed SENDING with nothing to say so. The poller's sweep now counts it (AlertsUndelivered)
    and logs it; nothing is sent (its rules went with the job)."""
    from concurrent.futures import ThreadPoolExecutor

    from punctual.dispatch.polling import PollerConfig
    from punctual.dispatch.polling.release import SlotReleaser
    from punctual.dispatch.queues import MemoryQueues
    from punctual.models import Alert
    from punctual.runtime.observability import RecordingMetrics
    from punctual.store.memory import MemoryStore

    store, clock, metrics = MemoryStore(), ManualClock(T0), RecordingMetrics()
    alert = Alert(
        tenant="default", job_id="gone", key_slot=slot_key(T0), condition=AlertCondition.FAILED,
        created_at=T0, claimed_at=T0, owner="dead-worker",
    )  # fmt: skip
    assert store.create_alert(alert, 0)
    timer = AlertSweeps(store, LAYOUT).timer(
        make_job("gone", "at(2026-12-01T10:00:00)", now=T0 - timedelta(hours=1)),
        slot_key(T0),
        AlertCondition.FAILED,
        T0,
        T0,
    )
    clock.set(timer.due)
    queues = MemoryQueues(now=clock.now)
    config = PollerConfig(layout=LAYOUT, short_queue_urls=("short",), long_queue_urls=("long",))
    with ThreadPoolExecutor(1) as pool:
        SlotReleaser(store, queues, clock, config, metrics, pool).release([timer])
    assert metrics.total("AlertsUndelivered") == 1 and not queues.queues.get("short")


def test_an_alert_whose_delivery_is_cut_short_every_time_is_given_up_after_max_stalls() -> None:
    """A Lambda worker waits a try's length at most for its batch's deliveries, so a delivery to
    an endpoint that answers too slowly is cut short every time, and each sweep took it over again:
    for ever. Takeovers in a row that find no rule delivered since the claim before are counted;
    the MAX_STALLS-th records the alert FAILED (visibly given up); one that finds progress starts
    the count again."""
    from punctual.delivery.notifications.alerts import MAX_STALLS
    from punctual.execution.records import new_record
    from punctual.runtime.observability import RecordingMetrics

    store, clock, metrics = MemoryStore(), ManualClock(T0), RecordingMetrics()
    rig = Rig(store, clock)
    job = rig.add_job(alerts=[late_rule(PAGER), late_rule(HANG)])
    cut_short: list[Any] = []  # deliveries handed over and never run (a worker whose wait ran out)
    execution = new_record(rig.message(job, T0), ExecutionStatus.RUNNING)
    made = Alerter(store, FakeTarget(), clock, later=cut_short.append).make(
        AlertCondition.LATE, job, execution, fire_delay_ms=LATE_S * 1000, deliver=True
    )
    assert made is not None and len(cut_short) == 1

    def sweep_once(hooks: FakeTarget) -> Any:
        clock.advance(SWEEP_AFTER_S)
        Alerter(store, hooks, clock, later=cut_short.append, metrics=metrics).sweep(
            job, slot_key(T0), AlertCondition.LATE
        )
        return store.get_alert(job.tenant, job.id, slot_key(T0), AlertCondition.LATE)

    # A sweep whose delivery gets the first rule out, then is cut short on the second: progress
    progressing = sweep_once(FakeTarget(TargetResult.ok("HTTP 200"), Crash()))
    try:
        cut_short.pop()()  # (this one runs, until its cut on the second rule)
        raise AssertionError("the delivery should have been cut short")
    except Crash:
        pass
    # When every later takeover's delivery is cut short before any rule is delivered
    states = [sweep_once(FakeTarget()) for _ in range(MAX_STALLS + 1)]
    alert = states[-1]
    assert progressing.status is AlertStatus.SENDING
    # Then the takeover after the progress starts the count again, the stalls that follow are
    # taken over, and the MAX_STALLS-th gives it up: FAILED, naming why
    assert progressing.stalled == 1
    assert [s.stalled for s in states] == list(range(MAX_STALLS + 1))
    assert alert.status is AlertStatus.FAILED
    assert [(d.rule, d.status) for d in alert.deliveries] == [(0, AlertStatus.SENT), (1, AlertStatus.FAILED)]
    assert "cut short" in (alert.deliveries[1].error or "")
    assert metrics.total("AlertsFailed") == 1
    # And a later sweep leaves it alone
    assert sweep_once(FakeTarget()).status is AlertStatus.FAILED


def test_a_delivery_thawed_after_its_alert_was_taken_over_counts_nothing() -> None:
    """A Lambda worker waits for its batch's deliveries a try's length at most: a delivery still
    going is frozen with the invocation and thaws in a later one, maybe after its alert's sweep
    took it over and delivered it. Its outcome's write then fails (not its owner): it must count
    nothing either. It counted AlertsRaised again and, its try cut short by the freeze, AlertsFailed
    (whose first raises the operators' alarm: "the tenant was not told") for an alert SENT."""
    from punctual.execution.records import new_record
    from punctual.runtime.observability import RecordingMetrics

    store, clock, metrics = MemoryStore(), ManualClock(T0), RecordingMetrics()
    rig = Rig(store, clock)
    job = rig.add_job(alerts=[late_rule(PAGER)])
    frozen: list[Any] = []  # the delivery its invocation's wait cut short, frozen with it
    execution = new_record(rig.message(job, T0), ExecutionStatus.RUNNING)
    cut = FakeTarget(TargetResult.retryable(f"timed out after {DELIVERY_TIMEOUT_S:g} s"))
    made = Alerter(store, cut, clock, later=frozen.append, metrics=metrics).make(
        AlertCondition.LATE, job, execution, fire_delay_ms=LATE_S * 1000, deliver=True
    )
    assert made is not None and len(frozen) == 1
    # When its sweep takes it over and delivers it
    clock.advance(SWEEP_AFTER_S)
    Alerter(store, FakeTarget(), clock, metrics=metrics).sweep(job, slot_key(T0), AlertCondition.LATE)
    # And the frozen delivery thaws then: its tries fail (their connections were cut meanwhile)
    frozen.pop()()
    # Then the alert is SENT, counted once, and not failed
    alert = store.get_alert(job.tenant, job.id, slot_key(T0), AlertCondition.LATE)
    assert alert.status is AlertStatus.SENT
    assert len(cut.calls) == DELIVERY_TRIES
    assert metrics.total("AlertsRaised") == 1
    assert metrics.total("AlertsFailed") == 0


def test_a_takeover_delivers_the_throttled_rule_its_cut_short_owner_had_not_delivered() -> None:
    """A rule with ``min_interval_seconds`` is marked sent when its delivery begins, before its
    tries. A delivery cut short during them (a Lambda worker's wait ran out: routine since the wait
    is a try's length) left the mark, and the takeover found the rule throttled by it: the alert
    was recorded HELD, never delivered, the endpoint not called once."""
    from punctual.execution.records import new_record

    store, clock = MemoryStore(), ManualClock(T0)
    rig = Rig(store, clock)
    job = rig.add_job(alerts=[{**late_rule(PAGER), "min_interval_seconds": 600}])
    frozen: list[Any] = []  # the delivery its invocation's wait cut short, during its first try
    execution = new_record(rig.message(job, T0), ExecutionStatus.RUNNING)
    Alerter(store, FakeTarget(Crash()), clock, later=frozen.append).make(
        AlertCondition.LATE, job, execution, fire_delay_ms=LATE_S * 1000, deliver=True
    )
    try:
        frozen.pop()()
        raise AssertionError("the delivery should have been cut short")
    except Crash:
        pass
    # When its sweep takes it over
    clock.advance(SWEEP_AFTER_S)
    hooks = FakeTarget()
    Alerter(store, hooks, clock).sweep(job, slot_key(T0), AlertCondition.LATE)
    # Then the rule is delivered, not held back by its own first owner's mark
    alert = store.get_alert(job.tenant, job.id, slot_key(T0), AlertCondition.LATE)
    assert [(d.rule, d.status) for d in alert.deliveries] == [(0, AlertStatus.SENT)]
    assert alert.status is AlertStatus.SENT and len(hooks.calls) == 1
