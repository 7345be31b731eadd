"""Local mode's supervisor obeys the predictive-scaling planner: ``burst-N`` worker processes
come and go with the desired count; the standing components are never touched."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from test_local_poller_retries import Clock, QuietSink

from local.config import LocalConfig
from local.scaling import FileActuator, desired_burst_workers, history_file, local_settings, scaling_file
from local.supervisor import Supervisor, default_components
from punctual.dispatch.scaling import CapacityProfile, need_for, plan_capacity
from punctual.runtime.settings import Settings


class Process:
    """A child process that runs until it is signalled."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.signals: list[int] = []

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, signum: int) -> None:
        self.signals.append(signum)

    def kill(self) -> None:
        self.returncode = -9


@pytest.fixture
def supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Supervisor:
    config = LocalConfig(state_dir=tmp_path, cache_dir=tmp_path / "cache")
    made = Supervisor(config, default_components(config), QuietSink())
    made.clock = Clock()
    pids = iter(range(5000, 6000))

    def spawn(child: Any) -> None:
        child.process = Process(next(pids))
        child.started_at = made.clock()
        child.restart_at = None

    monkeypatch.setattr(made, "_spawn", spawn)
    # A burst worker's zygote too is a stand-in: no real process from a unit test
    monkeypatch.setattr(made, "_popen", lambda child, zygote=False: Process(next(pids)))
    for child in made.children.values():
        spawn(child)
    return made


def _want(supervisor: Supervisor, count: int) -> None:
    scaling_file(supervisor.config).parent.mkdir(parents=True, exist_ok=True)
    scaling_file(supervisor.config).write_text(json.dumps({"burst_workers": count}))
    supervisor.clock.now += 1  # type: ignore[attr-defined]
    supervisor.check()


def test_burst_workers_follow_the_desired_count_and_standing_ones_stay(supervisor: Supervisor) -> None:
    standing = {name: child.pid for name, child in supervisor.children.items()}
    assert {"worker-1", "worker-2", "ecs-worker"} <= set(standing)
    # When the planner asks for two burst workers, two worker processes named burst-N start
    _want(supervisor, 2)
    burst = {n: c for n, c in supervisor.children.items() if n.startswith("burst-")}
    assert sorted(burst) == ["burst-1", "burst-2"]
    assert [c.spec.args for c in burst.values()] == [
        ("worker", "--name", "burst-1"),
        ("worker", "--name", "burst-2"),
    ]
    # When it scales back to one, the highest-numbered gets SIGTERM and is forgotten once gone
    _want(supervisor, 1)
    assert burst["burst-2"].process.signals == [signal.SIGTERM]  # type: ignore[union-attr]
    assert burst["burst-1"].process.signals == []  # type: ignore[union-attr]
    burst["burst-2"].process.returncode = 0  # type: ignore[union-attr]
    supervisor.clock.now += 1  # type: ignore[attr-defined]
    supervisor.check()
    assert "burst-2" not in supervisor.children and burst["burst-2"].restarts == 0  # not restarted
    # One that does not stop within its stop timeout is killed
    _want(supervisor, 0)
    supervisor.clock.now += 30  # type: ignore[attr-defined]
    supervisor.check()
    assert burst["burst-1"].process.returncode == -9  # type: ignore[union-attr]
    supervisor.check()
    assert not any(n.startswith("burst-") for n in supervisor.children)
    # The standing components were never touched
    assert {n: c.pid for n, c in supervisor.children.items()} == standing
    log = "\n".join(supervisor.sink.lines)  # type: ignore[attr-defined]
    assert "started burst-1" in log and "stopped burst-2 (scaled back)" in log


def test_a_burst_worker_that_dies_while_wanted_is_restarted(supervisor: Supervisor) -> None:
    _want(supervisor, 1)
    child = supervisor.children["burst-1"]
    child.process.returncode = -9  # type: ignore[union-attr]
    supervisor.check()
    assert child.restart_at is not None  # the usual restart, not a scale-back


def test_the_file_actuator_writes_what_the_supervisor_reads(tmp_path: Path) -> None:
    config = LocalConfig(state_dir=tmp_path, cache_dir=tmp_path / "cache")
    assert desired_burst_workers(config) == 0
    profile = CapacityProfile.from_settings(local_settings(Settings(), config))
    # Two workers at 3 messages/s drain 60 in 10 s; 100 at once ask for ceil(40 / 30) = 2 more
    assert need_for(100, profile, _minute()).burst_workers == 2
    actuator = FileActuator(config, sqs=None, queue_urls=[])
    decision = plan_capacity(_minute(), {_minute(): 100}, 0, profile)
    assert actuator.apply(decision) == ["burst workers 0 -> 2"]
    assert desired_burst_workers(config) == 2
    assert actuator.apply(decision) == []
    lines = history_file(config).read_text().splitlines()
    assert [json.loads(line)["burst_workers"] for line in lines] == [2]


def _minute() -> Any:
    from datetime import UTC, datetime

    return datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


# --------------------------------------------------------------------------- warm burst workers


class Zygote:
    """A zygote process as the supervisor sees it: running, with the fork lines it was sent."""

    def __init__(self, pid: int) -> None:
        import io

        self.pid = pid
        self.stdin = io.BytesIO()
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def forks(self) -> int:
        return self.stdin.getvalue().count(b"fork ")


def _bare_supervisor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm: bool
) -> tuple[Supervisor, list[Any]]:
    """A supervisor of burst workers alone whose processes are recorded, not started."""
    config = LocalConfig(state_dir=tmp_path, cache_dir=tmp_path / "cache", warm_burst_workers=warm)
    made = Supervisor(config, [], QuietSink())
    made.clock = Clock()
    started: list[Any] = []

    def popen(child: Any, zygote: bool = False) -> Any:
        process = Zygote(7000 + len(started)) if zygote else Process(8000 + len(started))
        started.append((child.spec.name, zygote, process))
        return process

    monkeypatch.setattr(made, "_popen", popen)
    return made, started


def test_burst_workers_are_forked_from_zygotes_started_before_any_burst(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from local.zygote import Forked

    supervisor, started = _bare_supervisor(tmp_path, monkeypatch, warm=True)
    # Given a supervisor just started: each burst worker's zygote is started (imported, prepared)
    supervisor.start()
    assert [(name, zygote) for name, zygote, _ in started] == [("burst-1", True), ("burst-2", True)]
    zygotes = {name: process for name, _, process in started}
    # When the planner asks for two burst workers, each is a fork of its zygote: no new process
    _want(supervisor, 2)
    assert len(started) == 2
    assert [zygotes["burst-1"].forks(), zygotes["burst-2"].forks()] == [1, 1]
    burst = supervisor.children["burst-1"]
    assert isinstance(burst.process, Forked) and burst.spec.warm
    assert "started burst-1 (forked from its zygote): burst workers 0 -> 1" in supervisor.sink.lines  # type: ignore[attr-defined]
    supervisor._zygote_said(supervisor.burst_zygotes["burst-1"], ["forked", "4343"])
    assert burst.process.pid == 4343
    # And once scaled back and gone, the next burst forks the same zygote again
    supervisor._zygote_said(supervisor.burst_zygotes["burst-1"], ["exited", "4343", "0"])
    supervisor.children["burst-2"].process.exited(0)  # type: ignore[union-attr]
    monkeypatch.setattr(os, "kill", lambda pid, signum: None)  # no real process behind the pids
    _want(supervisor, 0)
    supervisor.clock.now += 1  # type: ignore[attr-defined]
    supervisor.check()
    assert not any(n.startswith("burst-") for n in supervisor.children)
    _want(supervisor, 1)
    assert len(started) == 2 and zygotes["burst-1"].forks() == 2
    # A zygote that died is started again at the next fork (a cold start, once)
    zygotes["burst-2"].returncode = -9
    _want(supervisor, 2)
    assert [(name, zygote) for name, zygote, _ in started[2:]] == [("burst-2", True)]
    assert started[2][2].forks() == 1


def test_burst_workers_start_cold_when_warm_starts_are_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    supervisor, started = _bare_supervisor(tmp_path, monkeypatch, warm=False)
    supervisor.start()
    assert started == []  # no zygote
    _want(supervisor, 1)
    assert [(name, zygote) for name, zygote, _ in started] == [("burst-1", False)]
    assert not supervisor.children["burst-1"].spec.warm


def test_a_worker_logs_its_first_receive_after_the_ask_and_the_scaling_decision(tmp_path: Path) -> None:
    from local.event_source import first_receive_note

    config = LocalConfig(state_dir=tmp_path, cache_dir=tmp_path / "cache")
    decided = 1_800_000_000.0
    scaling_file(config).parent.mkdir(parents=True)
    scaling_file(config).write_text(json.dumps({"burst_workers": 1, "decided_at": "2027-01-15T08:00:00Z"}))
    assert decided == _epoch("2027-01-15T08:00:00+00:00")
    note = first_receive_note(config, "burst-1", f"{decided + 0.4:.3f}", decided + 1.9)
    assert (
        note == "burst-1: first receive 1.50 s after its start was asked, 1.90 s after the scaling decision"
    )
    # A standing worker has no scaling decision behind it; an unknown ask is left out
    assert first_receive_note(config, "worker-1", None, decided) == "worker-1: first receive"
    # A decision taken after the start was asked is not this start's
    late = first_receive_note(config, "burst-1", f"{decided - 5:.3f}", decided + 1)
    assert late == "burst-1: first receive 6.00 s after its start was asked"


def _epoch(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text).timestamp()


def test_a_burst_workers_zygote_that_exited_is_started_again_before_the_next_burst(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    supervisor, started = _bare_supervisor(tmp_path, monkeypatch, warm=True)
    supervisor.start()
    # Given burst-1's zygote crashed while no burst was planned
    started[0][2].returncode = 1
    # When a little time passes, it is not retried in a tight loop
    supervisor.clock.now += 1  # type: ignore[attr-defined]
    supervisor.check()
    assert len(started) == 2
    # Then, after the retry delay, it is started again (prepared before any burst asks for it)
    supervisor.clock.now += 10  # type: ignore[attr-defined]
    supervisor.check()
    assert [(name, zygote) for name, zygote, _ in started[2:]] == [("burst-1", True)]
    assert "burst-1's zygote exited: starting it again" in supervisor.sink.lines  # type: ignore[attr-defined]
    assert not any(n.startswith("burst-") for n in supervisor.children)  # no burst worker itself


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_signal_sent_before_the_zygote_named_its_child_reaches_it_once_it_does(signum: int) -> None:
    """A Ctrl-C during a zygote's warm-up: the supervisor's SIGTERM to a child not forked yet was
    dropped, and the child ran on until its stop timeout's SIGKILL (a flaky e2e stop)."""
    import subprocess
    import sys

    from local.zygote import Forked

    child = Forked(zygote_pid=os.getpid())
    child.send_signal(signum)  # no pid yet: kept
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        child.forked(process.pid)  # the zygote's "forked PID" line: delivered now
        assert process.wait(timeout=30) == -signum
    finally:
        if process.poll() is None:
            process.kill()


def test_a_burst_worker_scaled_back_mid_batch_finishes_it_before_it_is_killed(supervisor: Supervisor) -> None:
    # The soak of 2026-12-05: burst-1 was scaled back as its long poll returned a slow slot (45 s);
    # SIGKILL 10 s later lost the run (lease lapsed, TIMED_OUT, the slot's only attempt). The event
    # source mapping's scaling never cuts an invocation short: a retiring worker finishes its batch.
    _want(supervisor, 1)
    child = supervisor.children["burst-1"]
    inflight = supervisor.config.inflight_file("burst-1")
    inflight.parent.mkdir(parents=True, exist_ok=True)
    inflight.write_text(json.dumps({"messages": [{"slot": "2026-12-05T16:22:24Z"}]}))
    _want(supervisor, 0)
    assert child.process.signals == [signal.SIGTERM]  # type: ignore[union-attr]
    supervisor.clock.now += 30  # type: ignore[attr-defined]  # past its stop timeout, batch still running
    supervisor.check()
    assert child.process.returncode is None  # type: ignore[union-attr]  # not killed mid-batch
    # Its batch done, it exits on its own and is forgotten, not restarted
    inflight.unlink()
    child.process.returncode = 0  # type: ignore[union-attr]
    supervisor.clock.now += 1  # type: ignore[attr-defined]
    supervisor.check()
    assert "burst-1" not in supervisor.children and child.restarts == 0


def test_a_burst_worker_whose_batch_outlives_the_function_timeout_is_killed(supervisor: Supervisor) -> None:
    _want(supervisor, 1)
    child = supervisor.children["burst-1"]
    inflight = supervisor.config.inflight_file("burst-1")
    inflight.parent.mkdir(parents=True, exist_ok=True)
    inflight.write_text("{}")
    _want(supervisor, 0)
    supervisor.clock.now += 10 + 901  # type: ignore[attr-defined]  # stop timeout + more than any Lambda timeout
    supervisor.check()
    assert child.process.returncode == -9  # type: ignore[union-attr]


def test_a_scale_up_beside_a_worker_finishing_its_batch_starts_no_worker_past_the_maximum(
    supervisor: Supervisor,
) -> None:
    # Review: burst-1 scaled back while finishing its batch keeps its name for up to the function's
    # timeout; a scale-up meanwhile took burst-2, then burst-3 (past the maximum of 2, from a cold
    # zygote kept for good)
    most = max(supervisor.config.burst_workers_max, supervisor.config.event_source_workers_max)
    _want(supervisor, 1)
    inflight = supervisor.config.inflight_file("burst-1")
    inflight.parent.mkdir(parents=True, exist_ok=True)
    inflight.write_text("{}")
    _want(supervisor, 0)
    _want(supervisor, most)
    names = sorted(n for n in supervisor.children if n.startswith("burst-"))
    assert names == [f"burst-{i}" for i in range(1, most + 1)]
    assert set(supervisor.burst_zygotes) <= {f"burst-{i}" for i in range(1, most + 1)}
