"""``punctual-local up`` over a state directory whose supervisor was killed (QA, multi-Region).

A Region lost whole (``kill -9`` of its process group) leaves its supervisor's pid file; while the
killed supervisor's parent has not reaped it, the pid is a zombie. ``up`` took any pid that
``os.kill(pid, 0)`` reaches for a running local mode and refused to start the Region again
("local mode is already running ... (pid N)") though nothing of it ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from local.cli import refuse_if_running
from local.config import LocalConfig, LocalModeError


def _config(state: Path) -> LocalConfig:
    return LocalConfig.from_env({}, state_dir=state)


def test_a_zombie_supervisor_does_not_block_a_restart(tmp_path: Path) -> None:
    config = _config(tmp_path)
    config.pid_file("supervisor").parent.mkdir(parents=True, exist_ok=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])  # not waited for: a zombie once it exits
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{dead.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        config.pid_file("supervisor").write_text(str(dead.pid))
        refuse_if_running(config)  # no LocalModeError
        assert not config.pid_file("supervisor").exists()
    finally:
        dead.wait()


def test_a_live_supervisor_still_blocks(tmp_path: Path) -> None:
    config = _config(tmp_path)
    config.pid_file("supervisor").parent.mkdir(parents=True, exist_ok=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        config.pid_file("supervisor").write_text(str(live.pid))
        with pytest.raises(LocalModeError, match="already running"):
            refuse_if_running(config)
    finally:
        live.kill()
        live.wait()


def test_a_process_that_got_the_dead_supervisors_pid_since_does_not_block(tmp_path: Path) -> None:
    """``kill -9`` of local mode, then a reboot or a container restart: pids start over, and the pid
    file's number named a live process of another kind for good ("local mode is already running"
    at every ``make run``, with nothing of it running)."""
    config = _config(tmp_path)
    config.pid_file("supervisor").parent.mkdir(parents=True, exist_ok=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        config.pid_file("supervisor").write_text(str(other.pid))
        an_hour_ago = time.time() - 3600  # written by the supervisor before the restart
        os.utime(config.pid_file("supervisor"), (an_hour_ago, an_hour_ago))
        refuse_if_running(config)  # no LocalModeError
        assert not config.pid_file("supervisor").exists()
    finally:
        other.kill()
        other.wait()


def test_a_garbled_pid_file_is_forgotten(tmp_path: Path) -> None:
    config = _config(tmp_path)
    config.pid_file("supervisor").parent.mkdir(parents=True, exist_ok=True)
    config.pid_file("supervisor").write_text("not a pid")
    refuse_if_running(config)
    assert not config.pid_file("supervisor").exists()
