"""The local-mode harness's own promises, on small stand-in processes: a stop ends the whole
process group, and a wait fails as soon as the process it watches exits, with its output."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from local.config import LocalModeError
from local.harness import LocalMode, alive, stop_group

pytestmark = pytest.mark.e2e


def _group_leader_with_child(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A process (its own group) that starts a long-lived child and ignores SIGTERM itself."""
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(tmp_path / 'child.pid')!r}, 'w').write(str(child.pid))\n"
        "time.sleep(600)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    local = LocalMode(process, tmp_path, tmp_path / "none.out", api_url="")
    child = local.wait(
        lambda: (tmp_path / "child.pid").exists() and int((tmp_path / "child.pid").read_text() or 0),
        60,
        "the child's pid",
        interval_s=0.1,
    )
    return process, int(child)


def test_stop_group_ends_every_process_of_the_group_even_one_that_ignores_sigterm(tmp_path: Path) -> None:
    # Given a group leader that ignores SIGTERM, and its child
    process, child = _group_leader_with_child(tmp_path)
    assert alive(process.pid) and alive(child)
    # When the group is stopped (a short grace: the leader will not go on SIGTERM)
    stop_group(process, timeout_s=1)
    # Then the leader is gone (and reaped), and so is its child
    assert process.returncode is not None
    assert _gone(child)


def _gone(pid: int, checks: int = 300) -> bool:
    """``pid`` is not alive, now or within a few seconds (a killed process is reaped
    asynchronously; alive() already counts a zombie as gone)."""
    for _ in range(checks):
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_a_wait_fails_when_the_process_exits_and_shows_the_end_of_its_output(tmp_path: Path) -> None:
    # Given a "local mode" that prints a line and exits with status 3
    output = tmp_path / "up.out"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-c", "print('cannot bind the API port'); raise SystemExit(3)"],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    local = LocalMode(process, tmp_path, output, api_url="")
    # When a test waits for something that will now never happen
    with pytest.raises(LocalModeError) as failure:
        local.wait(lambda: False, timeout_s=600, what="something that never comes")
    # Then the failure says local mode exited, with which status, and what it printed last
    message = str(failure.value)
    assert "exited (3) while waiting for something that never comes" in message
    assert "cannot bind the API port" in message
