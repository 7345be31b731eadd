"""Local mode scales its worker processes as the event source mapping scales Lambda: while every
worker has held one batch for a second (a slow target holds its batch), one more burst worker
starts, so one tenant's slow runs do not hold back every other slot; they are given back once no
batch has been held for a while. (A newcomer's run: two jobs whose webhook took 8 s made every
tenant's slots 5-10 s late with the two standing workers.)"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import replace

from test_local_burst_workers import _want
from test_local_burst_workers import supervisor as supervisor  # the fixture

from local.scaling import BUSY_S, IDLE_S
from local.supervisor import Supervisor

HELD = BUSY_S + 1


def _working(supervisor: Supervisor, name: str, for_s: float = HELD) -> None:
    """``name`` has worked one batch for ``for_s`` seconds."""
    path = supervisor.config.inflight_file(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    received = time.time() - for_s
    os.utime(path, (received, received))


def _idle(supervisor: Supervisor, *names: str) -> None:
    for name in names:
        supervisor.config.inflight_file(name).unlink(missing_ok=True)


def _burst(supervisor: Supervisor) -> list[str]:
    return sorted(
        name
        for name, child in supervisor.children.items()
        if name.startswith("burst-") and not child.retiring_until
    )


def _check(supervisor: Supervisor, after_s: float = 1.0) -> None:
    supervisor.clock.now += after_s  # type: ignore[attr-defined]
    supervisor.check()


def test_every_worker_holding_a_batch_adds_one_and_they_go_when_none_is_held(supervisor: Supervisor) -> None:
    supervisor.reactive.config = replace(supervisor.config, event_source_workers_max=4)
    _check(supervisor)
    assert _burst(supervisor) == []
    # A batch just received does not hold its worker yet
    _working(supervisor, "worker-1")
    _working(supervisor, "worker-2", 0.0)
    _check(supervisor)
    assert _burst(supervisor) == []
    # When both standing workers have held a batch for a second, one more worker starts
    _working(supervisor, "worker-2")
    _check(supervisor)
    assert _burst(supervisor) == ["burst-1"]
    # and another while that one is held too, up to event_source_workers_max
    for name in ("burst-1", "burst-2", "burst-3", "burst-4"):
        _working(supervisor, name)
        _check(supervisor)
    assert _burst(supervisor) == ["burst-1", "burst-2", "burst-3", "burst-4"]
    # While any worker is still held they stay, quick batches elsewhere or not
    _idle(supervisor, "worker-1", "burst-1", "burst-2", "burst-3", "burst-4")
    _working(supervisor, "worker-1", 0.2)  # a quick batch
    _check(supervisor, IDLE_S + 1)
    _check(supervisor, IDLE_S + 1)
    assert len(_burst(supervisor)) == 4
    # Once no batch has been held for IDLE_S, they are all given back
    _idle(supervisor, "worker-2")
    _check(supervisor, 1.0)
    assert len(_burst(supervisor)) == 4  # not before IDLE_S
    _check(supervisor, IDLE_S)
    assert _burst(supervisor) == []
    assert supervisor.children["burst-4"].process.signals == [signal.SIGTERM]  # type: ignore[union-attr]


def test_the_planner_and_the_event_source_each_keep_what_they_asked_for(supervisor: Supervisor) -> None:
    _want(supervisor, 1)  # the planner asks for one ahead of a burst
    assert _burst(supervisor) == ["burst-1"]
    for name in ("worker-1", "worker-2", "burst-1"):
        _working(supervisor, name)
    _check(supervisor)
    assert _burst(supervisor) == ["burst-1", "burst-2"]
    # The event source's own scaling gives back to what the planner still asks for, not below
    _idle(supervisor, "worker-1", "worker-2", "burst-1", "burst-2")
    _check(supervisor, IDLE_S + 1)
    assert _burst(supervisor) == ["burst-1"]


def test_none_is_added_when_turned_off(supervisor: Supervisor) -> None:
    supervisor.reactive.config = replace(supervisor.config, event_source_workers_max=0)
    for name in ("worker-1", "worker-2"):
        _working(supervisor, name)
    _check(supervisor)
    assert _burst(supervisor) == []
