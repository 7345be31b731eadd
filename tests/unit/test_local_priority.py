"""local/priority.py: the stand-ins for the world outside the deployment (moto, the webhook
receiver) run ahead of the deployment's processes (a burst's release must not starve the workers'
claims, nor the receiver's stamps: issue 31, fairness under bursts)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from local import priority, receiver
from local.config import LocalConfig, free_port


def _in_a_thread(body: object) -> dict[str, int]:
    """Run ``body`` in a thread of its own (a nice value is per thread on Linux): the test's
    own threads keep theirs."""
    seen: dict[str, int] = {}
    thread = threading.Thread(target=lambda: body(seen))  # type: ignore[operator]
    thread.start()
    thread.join(timeout=30)
    return seen


def test_run_ahead_covers_the_thread_and_every_thread_it_starts() -> None:
    def body(seen: dict[str, int]) -> None:
        seen["before"] = os.getpriority(os.PRIO_PROCESS, 0)
        priority.run_ahead("a test")
        seen["after"] = os.getpriority(os.PRIO_PROCESS, 0)
        child = threading.Thread(target=lambda: seen.__setitem__("child", os.getpriority(os.PRIO_PROCESS, 0)))
        child.start()
        child.join(timeout=30)

    seen = _in_a_thread(body)
    if seen["after"] == seen["before"] and seen["before"] != priority.OUTSIDE_PRIORITY:
        pytest.skip("this machine does not let a process raise its priority (no CAP_SYS_NICE)")
    assert priority.OUTSIDE_PRIORITY < 0  # ahead of the deployment's processes, which run at 0
    assert seen["after"] == priority.OUTSIDE_PRIORITY
    assert seen["child"] == priority.OUTSIDE_PRIORITY  # a server's request threads inherit it
    assert os.getpriority(os.PRIO_PROCESS, 0) == seen["before"]  # not the test's own thread


def test_without_the_right_to_raise_it_the_component_keeps_the_default(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(which: int, who: int, value: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(priority.os, "setpriority", refuse)
    with caplog.at_level("INFO", logger="local"):
        priority.run_ahead("moto")  # no raise: local mode still starts
    assert "moto runs at the default priority" in caplog.text
    assert "Operation not permitted" in caplog.text


def test_the_webhook_receiver_runs_ahead_before_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(receiver, "run_ahead", calls.append)
    config = LocalConfig.from_env({}, state_dir=tmp_path, receiver_port=free_port())
    stop = threading.Event()
    stop.set()  # serve nothing: start, then stop at once
    receiver.run(config, stop)
    assert calls == ["the webhook receiver"]
