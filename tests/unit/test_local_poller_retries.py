"""Local mode retries and restarts its poller as the deployed state machine retries the poller task.

The retriers are the template's (``Retry`` of the poller task, carried by the deployment);
``CLOUD_RETRY`` below is that field as ``infra/`` synthesises it today, and
``tests/infra/test_local_retry_follows_the_template.py`` checks that local mode reads it so.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from local.config import LocalConfig
from local.logs import LogSink
from local.poller import MinuteScheduler
from local.resources import Deployment
from local.retriers import PROCESS_EXITED, Attempts, Retrier, error_name, retrier_for, retriers_from
from local.supervisor import ComponentSpec, Supervisor, default_components, supervisor_backoff_s

SERVICE_ERRORS = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
]
CLOUD_RETRY: list[dict[str, Any]] = [
    {
        "ErrorEquals": SERVICE_ERRORS,
        "IntervalSeconds": 1,
        "MaxAttempts": 50,
        "BackoffRate": 1.5,
        "MaxDelaySeconds": 4,
        "JitterStrategy": "FULL",
    },
    {
        "ErrorEquals": ["States.ALL"],
        "IntervalSeconds": 1,
        "MaxAttempts": 25,
        "BackoffRate": 1.5,
        "MaxDelaySeconds": 4,
    },
]
CATCH_ALL_WAITS_S = [1, 1.5, 2.25, 3.375] + [4] * 21
ITEM = {
    "minute": "2026-11-30T10:00:00Z",
    "group": 1,
    "group_count": 2,
    "shard_count": 4,
    "near_shard_count": 2,
}


# --------------------------------------------------------------------------- the States Language's Retry


def test_retry_n_waits_interval_times_rate_to_the_n_minus_1_at_most_the_max_delay() -> None:
    service, catch_all = retriers_from(CLOUD_RETRY)

    assert catch_all.delays_s() == CATCH_ALL_WAITS_S
    assert sum(catch_all.delays_s()) >= 80  # the poller's window: lead 10 s + 60 s + grace 10 s
    # Full jitter: a random wait between 0 and the delay
    rng = random.Random(7)
    assert all(0 <= service.delay_s(n, rng) <= min(1.5 ** (n - 1), 4) for n in range(1, 51))
    # The States Language's defaults: 1 s, x2, 3 attempts, no cap, no jitter
    assert Retrier.from_asl({"ErrorEquals": ["States.ALL"]}).delays_s() == [1, 2, 4]


def test_the_first_retrier_that_names_an_error_decides_and_counts_its_own_attempts() -> None:
    retriers = retriers_from(
        [
            {"ErrorEquals": ["Lambda.TooManyRequestsException"], "MaxAttempts": 1},
            {"ErrorEquals": ["States.ALL"], "MaxAttempts": 2, "IntervalSeconds": 3},
        ]
    )
    attempts = Attempts(retriers)

    assert attempts.next_delay_s("Lambda.TooManyRequestsException") == 1
    # Its one retry used, that error is not retried again (the catch-all does not take it over)
    assert attempts.next_delay_s("Lambda.TooManyRequestsException") is None
    # Any other error: the catch-all, with its own count
    assert [attempts.next_delay_s("RuntimeError"), attempts.next_delay_s("Sandbox.Timedout")] == [3, 6]
    assert attempts.next_delay_s("RuntimeError") is None


def test_error_names_match_as_step_functions_matches_them() -> None:
    task_failed = Retrier(("States.TaskFailed",))
    assert task_failed.matches("RuntimeError") and task_failed.matches("Lambda.Unknown")
    assert not task_failed.matches("States.Timeout")
    assert Retrier(("States.ALL",)).matches("States.Timeout")
    assert not Retrier(tuple(SERVICE_ERRORS)).matches("RuntimeError")
    # A handler's exception is reported by its type's name; a dead process as Runtime.ExitError
    assert error_name(ValueError("bad")) == "ValueError"
    service, catch_all = retriers_from(CLOUD_RETRY)
    assert retrier_for([service, catch_all], PROCESS_EXITED) is catch_all


# --------------------------------------------------------------------------- the poller component


@dataclass
class FlakyHandler:
    """A poller handler that raises on its first ``failures`` invocations."""

    failures: int
    calls: int = 0

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.calls += 1
        assert event == ITEM  # the same (minute, group) each time
        assert context.get_remaining_time_in_millis() > 100_000  # a fresh invocation each time
        if self.calls <= self.failures:
            raise RuntimeError(f"poller crashed (invocation {self.calls})")
        return {"released": 3, "stale": 0, "skipped": 0, "completed": 3}


@pytest.fixture
def scheduler_for(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr("punctual.runtime.composition.Container.store", None)  # no table needed

    def make(handler: Any, retry: list[dict[str, Any]], stop_after_waits: int | None = None) -> Any:
        waits: list[float] = []

        def wait(seconds: float) -> bool:  # records instead of sleeping; True = stopping
            waits.append(seconds)
            return stop_after_waits is not None and len(waits) >= stop_after_waits

        return MinuteScheduler(handler, 120, retriers_from(retry), wait=wait), waits

    return make


def test_a_poller_that_raises_is_retried_with_the_state_machines_delays(scheduler_for: Any) -> None:
    handler = FlakyHandler(failures=3)
    scheduler, waits = scheduler_for(handler, CLOUD_RETRY)

    scheduler._invoke(ITEM)

    assert handler.calls == 4
    assert waits == CATCH_ALL_WAITS_S[:3] == [1, 1.5, 2.25]
    assert scheduler.contexts == []


def test_a_poller_that_always_fails_is_left_after_the_retriers_attempts(
    scheduler_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    handler = FlakyHandler(failures=10_000)
    scheduler, waits = scheduler_for(handler, CLOUD_RETRY)

    scheduler._invoke(ITEM)

    # Then as the state machine: 1 + 25 invocations, then the Catch (logged; other groups go on)
    assert handler.calls == 1 + 25
    assert waits == CATCH_ALL_WAITS_S
    assert "poller for 2026-11-30T10:00:00Z group 1 failed" in caplog.messages[-1]


def test_without_retriers_in_the_template_a_failure_is_only_logged(scheduler_for: Any) -> None:
    handler = FlakyHandler(failures=1)
    scheduler, waits = scheduler_for(handler, [])

    scheduler._invoke(ITEM)

    assert (handler.calls, waits) == (1, [])


def test_no_retry_once_local_mode_is_stopping(scheduler_for: Any) -> None:
    handler = FlakyHandler(failures=10_000)
    scheduler, waits = scheduler_for(handler, CLOUD_RETRY, stop_after_waits=2)

    scheduler._invoke(ITEM)

    assert (handler.calls, waits) == (2, [1, 1.5])


# --------------------------------------------------------------------------- the supervisor


class FakeProcess:
    """A child process (Popen's pid and poll()) that died of SIGKILL, or runs on."""

    pid = 4242

    def __init__(self, dead: bool) -> None:
        self.returncode = -9 if dead else None
        self.signals: list[int] = []

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, signum: int) -> None:
        self.signals.append(signum)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class QuietSink(LogSink):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, text: str) -> None:
        self.lines.append(text)

    def warning(self, text: str) -> None:
        self.lines.append(text)


def restart_delays(supervisor: Supervisor, name: str, restarts: int, ran_s: float = 0.1) -> list[float]:
    """The delays the supervisor chose for ``restarts`` deaths in a row of ``name`` (the others run on)."""
    for other in supervisor.children.values():
        other.process = FakeProcess(dead=other.spec.name == name)
    child = supervisor.children[name]
    delays = []
    for _ in range(restarts):
        supervisor.clock.now += ran_s  # type: ignore[attr-defined]
        supervisor.check()  # it died: a restart is scheduled
        assert child.restart_at is not None
        delays.append(round(child.restart_at - supervisor.clock(), 6))
        supervisor.clock.now = child.restart_at  # type: ignore[attr-defined]
        supervisor.check()  # restarted (as a process that dies at once)
    return delays


@pytest.fixture
def supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Supervisor:
    config = LocalConfig(state_dir=tmp_path, cache_dir=tmp_path / "cache")
    specs = [s for s in default_components(config) if s.name in ("poller", "api")]
    made = Supervisor(config, specs, QuietSink())
    made.clock = Clock()

    def spawn(child: Any) -> None:  # a restarted process dies again at once
        child.process = FakeProcess(dead=True)
        child.started_at = made.clock()
        child.restart_at = None

    monkeypatch.setattr(made, "_spawn", spawn)
    for child in made.children.values():
        spawn(child)
    return made


def write_deployment(config: LocalConfig, retry: list[dict[str, Any]]) -> None:
    Deployment(
        endpoint=config.aws_endpoint,
        table_name="punctual",
        short_queue_urls=[],
        long_queue_urls=[],
        failed_queue_url="",
        queue_arns={},
        dead_letter_urls=[],
        poller_timeout_s=120,
        worker_timeout_s=900,
        api_timeout_s=29,
        worker_batch_size=10,
        ecs_stop_timeout_s=120,
        poller_retry=retry,
    ).write(config.deployment_file)


def test_a_dead_poller_process_is_restarted_with_the_state_machines_delays(supervisor: Supervisor) -> None:
    write_deployment(supervisor.config, CLOUD_RETRY)

    # The catch-all retrier's delays (a dead process is Runtime.ExitError), then its longest one
    assert restart_delays(supervisor, "poller", 30) == CATCH_ALL_WAITS_S + [4] * 5
    assert "poller (pid 4242) killed by SIGKILL; restarting in 1.0s" in supervisor.sink.lines  # type: ignore[attr-defined]
    # The other components keep the supervisor's back-off: 0.5 s doubling to 10 s
    assert restart_delays(supervisor, "api", 7) == [0.5, 1, 2, 4, 8, 10, 10]


def test_a_poller_that_ran_a_minute_starts_its_delays_afresh(supervisor: Supervisor) -> None:
    write_deployment(supervisor.config, CLOUD_RETRY)

    assert restart_delays(supervisor, "poller", 3) == [1, 1.5, 2.25]
    assert restart_delays(supervisor, "poller", 2, ran_s=61) == [1, 1]


def test_the_poller_keeps_the_supervisors_back_off_until_there_is_a_deployment(
    supervisor: Supervisor,
) -> None:
    assert restart_delays(supervisor, "poller", 3) == [0.5, 1, 2]
    write_deployment(supervisor.config, CLOUD_RETRY)
    assert restart_delays(supervisor, "poller", 1) == [3.375]  # the fourth restart in a row


def test_components_restart_with_the_supervisors_back_off_by_default() -> None:
    spec = ComponentSpec("worker-1", ("worker",), 1)
    assert [spec.restart_delay(n) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, 10, 10]
    assert supervisor_backoff_s(1) == 0.5


def test_a_warm_component_is_started_by_forking_its_zygote_and_restarted_after_the_delay(
    supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the poller, a warm component: its zygote (a process kept imported and prepared) forks it
    import io

    from local.zygote import Forked

    write_deployment(supervisor.config, CLOUD_RETRY)

    class Zygote(FakeProcess):
        def __init__(self) -> None:
            super().__init__(dead=False)
            self.stdin = io.BytesIO()

    zygotes: list[Zygote] = []

    def popen(child: Any, zygote: bool = False) -> Any:
        if not zygote:  # a cold start (the API here)
            assert not child.spec.warm, "a warm component is never started cold while its zygote runs"
            return FakeProcess(dead=False)
        zygotes.append(Zygote())
        return zygotes[-1]

    monkeypatch.setattr(supervisor, "_popen", popen)
    child = supervisor.children["poller"]
    assert child.spec.warm
    Supervisor._spawn(supervisor, child)  # (the fixture's _spawn stands in for cold starts)
    forked = child.process
    assert isinstance(forked, Forked) and zygotes[0].stdin.getvalue().startswith(b"fork ")
    supervisor._zygote_said(child.zygote, ["forked", "4242"])
    assert forked.pid == 4242 and forked.poll() is None
    # When it is killed (its zygote reaps it and says so)
    supervisor._zygote_said(child.zygote, ["exited", "4242", "-9"])
    assert forked.poll() == -9
    supervisor.check()
    # Then it is restarted after the state machine's retry delay, by another fork of the same zygote
    assert child.restart_at == supervisor.clock() + 1
    supervisor.clock.now = child.restart_at  # type: ignore[attr-defined]
    monkeypatch.setattr(supervisor, "_spawn", lambda c: Supervisor._spawn(supervisor, c))
    supervisor.check()
    assert len(zygotes) == 1 and zygotes[0].stdin.getvalue().count(b"fork ") == 2
    assert isinstance(child.process, Forked) and child.process is not forked and child.restarts == 1
    assert "restarted poller (restart 1, forked from its zygote)" in supervisor.sink.lines  # type: ignore[attr-defined]
    # And the Lambda workers are warm too, restarted at once, the ECS worker after a second (standing
    # for a service's other tasks); the API is not
    specs = {s.name: s for s in default_components(supervisor.config)}
    assert specs["worker-1"].warm and specs["worker-1"].restart_delay(1) == 0.0 and specs["poller-2"].warm
    assert specs["ecs-worker"].warm and specs["ecs-worker"].restart_delay(5) == 1.0
    assert not specs["api"].warm


def test_local_mode_runs_the_deployments_ready_ecs_tasks(tmp_path: Path) -> None:
    """The ECS service runs ecsReadyTasks (2) tasks while ECS-lane slots are due: local mode runs as
    many ECS worker processes, each its own name (pid and in-flight files), so that one's death
    leaves the other to take its messages within the lease, as in a deployment."""
    config = LocalConfig(state_dir=tmp_path)
    specs = {s.name: s for s in default_components(config)}
    ecs = [name for name in specs if name.startswith("ecs-worker")]
    assert ecs == ["ecs-worker", "ecs-worker-2"]
    for name in ecs:
        assert specs[name].args == ("ecs-worker", "--name", name)
        assert specs[name].warm and specs[name].restart_delay(3) == 1.0 and specs[name].stop_stage == 1
    one = [s.name for s in default_components(replace(config, ecs_workers=1)) if s.name.startswith("ecs")]
    assert one == ["ecs-worker"]
    # and the chaos runs kill either task
    from local.chaos.faults.driver import KILL_WEIGHTS, RESPITE_S
    from local.chaos.faults.sustained import PHASES
    from local.chaos.verdict_data import ECS_WORKERS

    for name in ecs:
        assert (
            name in KILL_WEIGHTS and name in RESPITE_S and name in PHASES["workers"] and name in ECS_WORKERS
        )


# --------------------------------------------------------------------------- two poller processes


def test_poller_processes_share_each_minutes_plan_and_run_their_own_replica(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from local.poller import start_minute

    monkeypatch.setattr("punctual.runtime.composition.Container.store", None)  # no table: unknown load
    minute = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    # Given two processes that start the same minute, each with its own sizing (the second's
    # differs, as a table read a moment later can)
    plans = tmp_path / "minutes"
    first = start_minute(plans, minute, lambda: {"groups": [{"group": 0}], "pollers": [{"group": 0}]})
    second = start_minute(plans, minute, lambda: {"groups": [], "pollers": []})
    # Then the first plan written stands for both (a minute is planned once, as an execution is named)
    assert first == second == {"groups": [{"group": 0}], "pollers": [{"group": 0}]}
    # And each process runs its own replica of each group of the plan (a minute with load: two)
    started: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
    for replica in (0, 1):
        scheduler = MinuteScheduler(
            lambda event, context, r=replica: started[r].append(event) or {},
            120,
            replica=replica,
            plans=plans,
        )
        scheduler.start(minute + timedelta(minutes=1))
        for thread in scheduler.threads:
            thread.join(timeout=10)
    assert [(e["group"], e.get("replica", 0)) for e in started[0]] == [(0, 0)]
    assert [(e["group"], e.get("replica", 0)) for e in started[1]] == [(0, 1)]
    assert (plans / "m-20261130T1001.json").exists()


# --------------------------------------------------------------------------- scaling beside the minutes


class _StuckScaler:
    """A scaling decision that does not return until released (moto busy on a loaded machine)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def step(self, now: datetime) -> None:
        self.entered.set()
        self.release.wait(timeout=120)


class _Clock:
    def __init__(self, now: datetime) -> None:
        self.current = now

    def now(self) -> datetime:
        return self.current


def test_a_slow_scaling_decision_never_holds_back_a_minutes_pollers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31 (fairness under bursts): a decision took 14 s while a burst's minute was due, and
    the minute's pollers started 14 s late. Scaling runs beside the minutes' starts."""
    monkeypatch.setattr("punctual.runtime.composition.Container.store", None)  # no table needed
    minute = datetime(2026, 12, 3, 23, 14, tzinfo=UTC)
    started: list[str] = []
    scaler = _StuckScaler()
    scheduler = MinuteScheduler(lambda event, context: started.append(event["minute"]) or {}, 120)
    scheduler.scaler = scaler  # type: ignore[assignment]
    clock = _Clock(minute - timedelta(seconds=30))  # the minute before is open, this one not yet
    scheduler.clock = clock  # type: ignore[assignment]
    stop = threading.Event()
    runner = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    runner.start()
    try:
        # Given a scaling decision that is stuck
        assert scaler.entered.wait(timeout=60)
        # When the burst's minute opens (its lead before it)
        clock.current = minute - timedelta(seconds=scheduler.settings.poller_lead_s)
        # Then its pollers start all the same
        deadline = time.monotonic() + 60
        while "2026-12-03T23:14:00Z" not in started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "2026-12-03T23:14:00Z" in started
    finally:
        stop.set()
        scaler.release.set()
        runner.join(timeout=60)


def test_a_minute_is_sized_ahead_and_its_pollers_start_at_their_lead(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31 (fairness under bursts): a minute sized at its lead (count queries on its far
    buckets, 12.5 s with moto busy on a loaded machine) started its pollers 2.5 s after a burst's
    instant. As the tick does in the cloud, local mode sizes a minute ahead of its start."""
    monkeypatch.setattr("punctual.runtime.composition.Container.store", None)  # no table needed
    import punctual.dispatch.tick as tick

    minute = datetime(2026, 12, 4, 3, 17, tzinfo=UTC)
    sized_at: list[datetime] = []
    sizing_may_end = threading.Event()
    real_plan = tick.plan_minute

    def slow_plan(planned: datetime, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if planned == minute:
            sized_at.append(clock.current)
            sizing_may_end.wait(timeout=60)  # the count queries, slow
        return real_plan(planned, *args, **kwargs)

    monkeypatch.setattr(tick, "plan_minute", slow_plan)
    started: list[str] = []
    scheduler = MinuteScheduler(lambda event, context: started.append(event["minute"]) or {}, 120)
    lead = timedelta(seconds=scheduler.settings.poller_lead_s)
    clock = _Clock(minute - lead - timedelta(seconds=20))  # the minute before runs, this one is 20 s off
    scheduler.clock = clock  # type: ignore[assignment]
    stop = threading.Event()
    runner = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    runner.start()
    try:
        # Given a minute 20 s before its lead: it is sized then, not at its lead
        deadline = time.monotonic() + 60
        while not sized_at and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sized_at == [minute - lead - timedelta(seconds=20)]
        assert "2026-12-04T03:17:00Z" not in started  # nothing starts before the lead
        # When the sizing is done and the lead comes, its pollers start with that plan (not sized again)
        sizing_may_end.set()
        clock.current = minute - lead
        deadline = time.monotonic() + 60
        while "2026-12-04T03:17:00Z" not in started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "2026-12-04T03:17:00Z" in started
        assert len(sized_at) == 1
    finally:
        stop.set()
        sizing_may_end.set()
        runner.join(timeout=60)


def test_at_the_clouds_cadence_a_minute_is_not_sized_ahead_its_ticks_plan_stands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tick plans each minute two minutes ahead and re-plans it one minute ahead (a burst grown
    meanwhile): the minute reads that plan at its start, and local mode sizes nothing itself."""
    monkeypatch.setattr("punctual.runtime.composition.Container.store", None)  # no table needed
    minute = datetime(2026, 12, 4, 3, 17, tzinfo=UTC)
    scheduler = MinuteScheduler(lambda event, context: {}, 120)
    early = minute - timedelta(seconds=scheduler.settings.poller_lead_s + 20)
    assert scheduler.minutes_to_plan(early) == [minute]
    scheduler.cloud = object()  # type: ignore[assignment]
    assert scheduler.minutes_to_plan(early) == []
