"""Local mode scales its worker processes as the event source mapping scales Lambda: while every
worker has been working one batch for a second (a slow target holds its batch), one more burst
worker starts, so one tenant's slow runs do not hold back every other slot; it is given back once
workers idle. (A newcomer's run: two jobs whose webhook took 8 s made every tenant's slots 5-10 s
late with the two standing workers.)"""

from __future__ import annotations

import os
import signal
import time

from test_local_burst_workers import _want
from test_local_burst_workers import supervisor as supervisor  # the fixture

from local.scaling import BUSY_S, IDLE_S
from local.supervisor import Supervisor


def _working(supervisor: Supervisor, name: str, for_s: float) -> None:
    """``name`` has worked one batch for ``for_s`` seconds."""
    path = supervisor.config.inflight_file(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    received = time.time() - for_s
    os.utime(path, (received, received))


def _idle(supervisor: Supervisor, name: str) -> None:
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


def test_every_worker_busy_with_a_batch_adds_one_and_idle_ones_give_it_back(supervisor: Supervisor) -> None:
    _check(supervisor)
    assert _burst(supervisor) == []
    # A batch just received is not yet a held worker
    _working(supervisor, "worker-1", BUSY_S + 1)
    _working(supervisor, "worker-2", 0.0)
    _check(supervisor)
    assert _burst(supervisor) == []
    # When both standing workers have held a batch for a second, one more worker starts
    _working(supervisor, "worker-2", BUSY_S + 1)
    _check(supervisor)
    assert _burst(supervisor) == ["burst-1"]
    # and another while that one is held too, up to event_source_workers_max
    for name in ("burst-1", "burst-2", "burst-3", "burst-4"):
        _working(supervisor, name, BUSY_S + 1)
        _check(supervisor)
    assert _burst(supervisor) == ["burst-1", "burst-2", "burst-3", "burst-4"]
    assert supervisor.config.event_source_workers_max == 4
    for name in ("burst-3", "burst-4"):  # given back first, one IDLE_S after the other
        _idle(supervisor, name)
    _check(supervisor, 0.5)  # idle from here
    _check(supervisor, IDLE_S)
    assert _burst(supervisor) == ["burst-1", "burst-2", "burst-3"]
    _check(supervisor, IDLE_S)
    assert _burst(supervisor) == ["burst-1", "burst-2"]
    # Once a worker idles but the newest is still busy, none goes (a busy worker is not stopped)
    _idle(supervisor, "worker-1")
    _check(supervisor, IDLE_S + 1)
    _check(supervisor, IDLE_S + 1)
    assert _burst(supervisor) == ["burst-1", "burst-2"]
    # When the newest idles too, it goes after IDLE_S; then the next one after IDLE_S more
    _idle(supervisor, "burst-2")
    _check(supervisor, IDLE_S + 1)
    assert supervisor.children["burst-2"].process.signals == [signal.SIGTERM]  # type: ignore[union-attr]
    assert _burst(supervisor) == ["burst-1"]
    _idle(supervisor, "burst-1")
    _check(supervisor, 1.0)
    assert _burst(supervisor) == ["burst-1"]  # not before IDLE_S
    _check(supervisor, IDLE_S)
    assert _burst(supervisor) == []


def test_the_planner_and_the_event_source_each_keep_what_they_asked_for(supervisor: Supervisor) -> None:
    _want(supervisor, 1)  # the planner asks for one ahead of a burst
    assert _burst(supervisor) == ["burst-1"]
    for name in ("worker-1", "worker-2", "burst-1"):
        _working(supervisor, name, BUSY_S + 1)
    _check(supervisor)
    assert _burst(supervisor) == ["burst-1", "burst-2"]
    # The event source's own scaling idles back to what the planner still asks for, not below
    for name in ("worker-1", "worker-2", "burst-1", "burst-2"):
        _idle(supervisor, name)
    for _ in range(4):
        _check(supervisor, IDLE_S + 1)
    assert _burst(supervisor) == ["burst-1"]
