"""A chaos run ended by a SIGTERM (``timeout``, a CI job cancelled) stops the local mode it started
(QA22: the runner died at once and left a whole local mode running, in its own process group out
of the signal's reach, for as long as nobody killed it by hand)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from local.config import REPO_ROOT, alive
from local.harness import child_env

pytestmark = pytest.mark.e2e

START_S = 300.0  # a busy machine may synthesise the template first
STOP_S = 120.0


def _wait(condition, timeout_s: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
    return found


def test_a_sigterm_to_the_runner_stops_the_local_mode_it_started(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    pid_file = run_dir / "local" / "run" / "supervisor.pid"
    with (tmp_path / "chaos.out").open("wb") as out:
        runner = subprocess.Popen(
            [sys.executable, "-m", "local.chaos", "run", "--seconds", "600", "--dir", str(run_dir)],
            cwd=REPO_ROOT,
            env=child_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    supervisor = 0
    try:

        def started() -> int:
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text().strip())
                return pid if alive(pid) else 0
            assert runner.poll() is None, (tmp_path / "chaos.out").read_text()
            return 0

        supervisor = _wait(started, START_S, "the run's local mode")
        runner.send_signal(signal.SIGTERM)  # to the runner alone, as `timeout` sends it
        runner.wait(timeout=STOP_S)
        _wait(lambda: not alive(supervisor), STOP_S, "the run's local mode to stop")
        assert "chaos: interrupted" in (tmp_path / "chaos.out").read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.pid, signal.SIGKILL)
        if supervisor and alive(supervisor):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(supervisor), signal.SIGKILL)
