"""Local mode stopped with Ctrl-C and started again keeps its jobs and their history (QA: every
job was gone after a restart, so every later slot was lost without a word); each slot runs once
across the stop, the slots due while stopped are caught up, and the demo is not registered twice.
``--fresh`` starts empty."""

from __future__ import annotations

import itertools
import json
import os
import signal
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from local import harness
from local.aws_state import LAYOUT_FILE, STATE_FILE
from local.harness import LocalMode

pytestmark = pytest.mark.e2e

EVERY_5S = "rate(5 seconds)"


def _hooked(local: LocalMode, name: str = "five") -> list[dict[str, Any]]:
    return [r for r in local.records() if r.get("name") == name]


def _slots(local: LocalMode, job_id: str) -> dict[str, tuple[str, int]]:
    status, body = local.api("GET", f"/v1/jobs/{job_id}/executions?limit=100")
    assert status == 200, body
    return {item["slot"]: (item["status"], item["attempt"]) for item in body["items"]}


def test_a_stop_and_a_start_keep_the_jobs_and_run_each_slot_once(tmp_path: Path) -> None:
    first = harness.start(tmp_path, tenant="me")
    second: LocalMode | None = None
    try:
        first.wait_ready()
        status, job = first.api(
            "POST", "/v1/jobs", {"schedule": EVERY_5S, "target": {"type": "http", "url": first.hook("five")}}
        )
        assert status == 201, job
        demo_jobs = len(first.api("GET", "/v1/jobs?limit=100", tenant="demo")[1]["items"])
        first.wait(lambda: len(_hooked(first)) >= 3 or None, 120, "three slots before the stop")
        before = _hooked(first)

        assert first.interrupt() == 0, first.tail()
        assert (tmp_path / STATE_FILE).exists(), first.tail()

        second = harness.start(tmp_path, tenant="me", like=first)
        second.wait_ready()
        assert "AWS state of the last clean stop loaded" in second.log(), second.tail()
        status, again = second.api("GET", f"/v1/jobs/{job['id']}")
        assert status == 200 and again["state"] == "ENABLED", again
        assert len(second.api("GET", "/v1/jobs?limit=100", tenant="demo")[1]["items"]) == demo_jobs
        second.wait(lambda: len(_hooked(second)) >= 4 or None, 120, "slots after the start")
        after = _hooked(second)
        slots = _slots(second, job["id"])
    finally:
        first.stop()
        if second is not None:
            second.stop()

    keys = Counter(str(r.get("key")) for r in before + after)
    assert all(count == 1 for count in keys.values()), keys  # no slot called twice across the stop
    ordered = sorted(slots)
    # every slot from the first to the last has its record: none lost across the stop (the ones
    # due while stopped ran late, as catch-up policy all says), each run once
    assert len(ordered) >= 7
    for earlier, later in itertools.pairwise(ordered):
        gap = (_instant(later) - _instant(earlier)).total_seconds()
        assert gap == 5, (earlier, later, slots)
    assert {status for status, _ in slots.values()} == {"SUCCEEDED"}, slots


def _instant(slot: str) -> datetime:
    return datetime.fromisoformat(slot.replace("Z", "+00:00"))


def _register_x(local: LocalMode) -> None:
    """Once ``local`` is ready, a job every 5 s calling hook ``x``."""
    local.wait_ready()
    status, _ = local.api(
        "POST", "/v1/jobs", {"schedule": EVERY_5S, "target": {"type": "http", "url": local.hook("x")}}
    )
    assert status == 201


def test_fresh_starts_empty(tmp_path: Path) -> None:
    """Stopped by a SIGTERM to its whole process group (``timeout``, ``kill -- -PGID``), local mode
    stops in order too: AWS last, its state kept (it stopped with the others at once: the workers
    still draining lost it, with tracebacks, and nothing was saved)."""
    first = harness.start(tmp_path, "--no-demo", tenant="me")
    try:
        _register_x(first)
        first.wait(lambda: _hooked(first, "x") or None, 120, "a slot before the stop")
        assert first.terminate() == 0, first.tail()
        assert (tmp_path / STATE_FILE).exists(), first.tail()
        log = first.log()
        stopping = log[log.index("signal 15") :]
        assert "AWS state saved" in stopping and "Traceback" not in stopping, first.tail()
        # with the shard counts its table's timers are laid out in (a start with others is refused)
        assert json.loads((tmp_path / LAYOUT_FILE).read_text()) == {"shards": 4, "near_shards": 2}
    finally:
        first.stop()
    fresh = harness.start(tmp_path, "--no-demo", tenant="me")  # a test's start is --fresh
    try:
        fresh.wait_ready()
        assert fresh.api("GET", "/v1/jobs?limit=10")[1]["items"] == []
    finally:
        fresh.stop()


def test_a_closed_terminal_stops_in_order_and_keeps_the_jobs(tmp_path: Path) -> None:
    """The terminal of ``make run`` closed (or its ssh session dropped) sends SIGHUP to the whole
    process group: every process died at once, AWS's state unsaved, and the next start had no job
    left, those of earlier runs included (a start consumes the saved state)."""
    first = harness.start(tmp_path, "--no-demo", tenant="me")
    try:
        _register_x(first)
        os.killpg(first.process.pid, signal.SIGHUP)
        assert first.process.wait(timeout=harness.STOP_TIMEOUT_S) == 0, first.tail()
        assert (tmp_path / STATE_FILE).exists(), first.tail()
        assert "Traceback" not in first.log(), first.tail()
    finally:
        first.stop()
