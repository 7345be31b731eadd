"""local/aws_server.py: the embedded AWS runs ahead of the deployment's processes (a burst's
release must not starve the workers' claims of moto: issue 31, fairness under bursts)."""

from __future__ import annotations

import os
import threading

import pytest

from local import aws_server


def _in_a_thread(body: object) -> dict[str, int]:
    """Run ``body`` in a thread of its own (a nice value is per thread on Linux): the test's
    own threads keep theirs."""
    seen: dict[str, int] = {}

    def run() -> None:
        body(seen)  # type: ignore[operator]

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    return seen


def test_moto_and_every_thread_it_starts_run_at_the_aws_priority() -> None:
    def body(seen: dict[str, int]) -> None:
        seen["before"] = os.getpriority(os.PRIO_PROCESS, 0)
        aws_server.run_ahead()
        seen["after"] = os.getpriority(os.PRIO_PROCESS, 0)
        child = threading.Thread(target=lambda: seen.__setitem__("child", os.getpriority(os.PRIO_PROCESS, 0)))
        child.start()
        child.join(timeout=30)

    seen = _in_a_thread(body)
    if seen["after"] == seen["before"] and seen["before"] != aws_server.AWS_PRIORITY:
        pytest.skip("this machine does not let a process raise its priority (no CAP_SYS_NICE)")
    assert aws_server.AWS_PRIORITY < 0  # ahead of the deployment's processes, which run at 0
    assert seen["after"] == aws_server.AWS_PRIORITY
    assert seen["child"] == aws_server.AWS_PRIORITY  # the server's request threads inherit it
    assert os.getpriority(os.PRIO_PROCESS, 0) == seen["before"]  # not the test's own thread


def test_without_the_right_to_raise_it_moto_keeps_the_default(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(which: int, who: int, value: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(aws_server.os, "setpriority", refuse)
    with caplog.at_level("INFO", logger="local.aws"):
        aws_server.run_ahead()  # no raise: local mode still starts
    assert "default priority" in caplog.text
    assert "Operation not permitted" in caplog.text
