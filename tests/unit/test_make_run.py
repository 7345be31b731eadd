"""``make run`` as the README gives it: ``FRESH=1`` starts empty, anything that says no does not."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _up_line(*assignments: str) -> str:
    made = subprocess.run(
        ["make", "--no-print-directory", "-n", "run", *assignments],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return next(line for line in made.stdout.splitlines() if "punctual-local up" in line)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
@pytest.mark.parametrize(
    ("assignments", "fresh"),
    [
        ((), False),
        (("FRESH=1",), True),
        (("FRESH=yes",), True),
        # FRESH=0 deleted the state a clean stop had kept: every job and its history, gone
        (("FRESH=0",), False),
        (("FRESH=no",), False),
        (("FRESH=false",), False),
        # ... and so did the same words capitalized, or 'off' (QA28 review: FRESH=False emptied it)
        (("FRESH=False",), False),
        (("FRESH=NO",), False),
        (("FRESH=off",), False),
        (("FRESH=n",), False),
        (("FRESH=",), False),
    ],
)
def test_fresh_starts_empty_only_when_it_says_so(assignments: tuple[str, ...], fresh: bool) -> None:
    assert ("--fresh" in _up_line(*assignments).split()) is fresh


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_run_args_reach_punctual_local_up() -> None:
    """QA31: with 8080 taken (another local mode, any web server) ``make run`` stopped with "use
    another --api-port", and make had no way to pass it: ``RUN_ARGS`` goes to ``punctual-local up``,
    as ``CHAOS_ARGS`` to the chaos runs and ``CDK_ARGS`` to cdk."""
    words = _up_line("RUN_ARGS=--api-port 18080 --receiver-port 18081", "FRESH=1").split()
    assert words[words.index("up") + 1 :] == ["--fresh", "--api-port", "18080", "--receiver-port", "18081"]
