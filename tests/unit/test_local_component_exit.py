"""A local-mode component that has stopped ignores a further SIGTERM while its process exits.

QA31: at every stop by the process group's SIGTERM (``kill -- -PGID``, ``timeout``: local mode's
page says it stops everything in order) the supervisor reported ``stopped auditor (killed by
SIGTERM)`` beside every other component's ``exit 0``. The auditor stops at once on the group's
SIGTERM; the supervisor's own SIGTERM of its stop then reached it while Python was finalizing,
which puts back the default action (death) of every signal it had a handler for, but leaves an
ignored one ignored.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from local.component import run_component
from local.config import LocalConfig


@pytest.fixture
def handlers_kept() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@pytest.mark.usefixtures("handlers_kept")
def test_a_component_that_stopped_ignores_sigterm_while_it_exits(tmp_path: Path) -> None:
    seen: list[bool] = []

    def body(config: LocalConfig, stop: threading.Event) -> None:
        signal.raise_signal(signal.SIGTERM)  # the group's SIGTERM: the component stops
        seen.append(stop.is_set())

    assert run_component("probe", body, LocalConfig(state_dir=tmp_path)) == 0
    assert seen == [True]  # a SIGTERM while it runs is still its stop, not its death
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN  # and once stopped, one more is nothing
    assert not (tmp_path / "run" / "probe.pid").exists()
