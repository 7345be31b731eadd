"""Ctrl-C while the ``punctual`` command is still starting (importing the core and pydantic, half a
second on an idle machine, seconds on a busy one) is an interrupt like any other: ``punctual:
interrupted`` and status 130, never a traceback (QA30: the console script imported the command at
its top, outside every handler, so a Ctrl-C right after Enter printed pydantic's import stack)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def _script() -> str:
    found = shutil.which("punctual", path=str(Path(sys.executable).parent))
    assert found, "the punctual console script is installed beside this interpreter (make install)"
    return found


def _run_interrupted(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    # Before the console script runs: the import of `module` raises KeyboardInterrupt, as a SIGINT
    # arriving while Python executes that module would.
    code = "import sys\ninterrupted_name = sys.argv.pop(1)\n" + textwrap.dedent(
        """
            class Interrupting:
                def find_spec(self, name, path=None, target=None):
                    if name == interrupted_name:
                        raise KeyboardInterrupt
                    return None

            sys.meta_path.insert(0, Interrupting())
            script = sys.argv.pop(1)
            sys.argv[0] = script
            import runpy
            runpy.run_path(script, run_name="__main__")
            """
    )
    env = {**os.environ, "PUNCTUAL_ENDPOINT": "http://127.0.0.1:9", "PUNCTUAL_TENANT": "t"}
    return subprocess.run(
        [sys.executable, "-c", code, module, _script(), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("module", ["pydantic", "punctual.timing.schedules", "punctual_cli.cli"])
def test_ctrl_c_while_the_command_starts_is_an_interrupt(module: str) -> None:
    done = _run_interrupted(module, "jobs", "list")
    assert done.stderr == "punctual: interrupted\n"
    assert done.returncode == 130
    assert done.stdout == ""


def test_the_command_still_runs_after_the_launcher() -> None:
    done = _run_interrupted(
        "no.such.module", "next", "rate(1 hour)", "--count", "2", "--after", "2026-01-01T00:00:00Z"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "2026-01-01T01:00:00Z\n2026-01-01T02:00:00Z\n"
