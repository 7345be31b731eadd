"""Local mode's supervisor obeys the predictive-scaling planner: ``burst-N`` worker processes
come and go with the desired count; the standing components are never touched."""

from __future__ import annotations

import json
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
