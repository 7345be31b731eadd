"""A local-mode component run alone stops on Ctrl-C while it waits for local AWS (QA).

``punctual-local api`` (or ``poller``, ``worker``, ``ecs-worker``, ``auditor``) started before
``punctual-local aws`` waits up to 180 s for the table and queues. Ctrl-C there logged
``signal 2: stopping`` and was then ignored: the command went on waiting its 180 s, and ended
with ``no local AWS ... after 180s`` (exit 2), though local mode's page says "Run alone, Ctrl-C
stops it".
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from local.config import REPO_ROOT, LocalConfig, free_port

WAIT_S = 120.0  # well below the 180 s the component would otherwise wait for AWS


def _waiting_for_aws(process: subprocess.Popen[str], pid_file: Path) -> bool:
    """Whether the component is past its start (pid file written, signal handlers set) and asleep:
    in its wait loop."""
    if process.poll() is not None:
        raise AssertionError(f"the component exited early: {process.communicate()}")
    if not pid_file.exists():
        return False
    state = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state == "S"


@pytest.mark.parametrize("component", ["api", "auditor"])
def test_ctrl_c_stops_a_component_waiting_for_aws(tmp_path: Path, component: str) -> None:
    aws_port = free_port()  # nothing listens there: local AWS never comes up
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUNCTUAL_LOCAL_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "local", component, "--state-dir", str(tmp_path), "--aws-port", str(aws_port)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pid_file = LocalConfig.from_env({}, state_dir=tmp_path).pid_file(component)
    try:
        deadline = time.monotonic() + WAIT_S
        while not _waiting_for_aws(process, pid_file):
            assert time.monotonic() < deadline, "the component never started waiting for AWS"
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail("Ctrl-C did not stop the component waiting for local AWS")
        assert "no local AWS" not in stderr, stderr
        assert "Traceback" not in stderr, stderr
        assert process.returncode == 0, stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
