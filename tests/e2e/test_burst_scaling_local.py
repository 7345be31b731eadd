"""Predictive scaling in local mode: burst workers are started before a burst's minute and
stopped after it, by the same planner the tick runs (issue 22).

Local mode's planner counts a burst worker (``burst-N``, one more worker process) as draining 3
messages a second and the two standing workers the same (``local.config``), so a burst of
one-time slots due at one instant asks for two burst workers (its most): the decision path of
a 600,000-slot burst in the cloud, at a size moto runs. Runs before ``test_local_mode.py`` (whose last
test stops the shared local mode) and waits for the scale-back, so the burst workers are gone
before the other tests look at the worker processes.

The burst is the issue's 1,000 slots (about 110 s here, most of it waiting for the minute);
``PUNCTUAL_E2E_BURST_SLOTS`` sets another size, the deadlines grow with it.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from local.harness import LocalMode

TENANT = "burst-e2e"
SLOTS = int(os.environ.get("PUNCTUAL_E2E_BURST_SLOTS", "1000"))
# Registration (job batches: ~20 a second on moto at worst, with room), then the planner's start
# lead (20 s: local.scaling.START_LEAD_S) and period (2 s).
LEAD_S = 16 + SLOTS // 20
DRAIN_S = 30 + SLOTS // 5  # moto's FIFO queues drain a burst of this size within it


def _history(local: LocalMode) -> list[dict[str, Any]]:
    path: Path = local.state / "run" / "scaling.jsonl"
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def test_burst_workers_start_before_a_burst_minute_and_stop_after_it(local_mode: LocalMode) -> None:
    local = local_mode
    # Given 100 one-time slots due together at the start of a coming minute
    instant = math.ceil((time.time() + LEAD_S) / 60) * 60
    due = datetime.fromtimestamp(instant, UTC)
    spec = {
        "schedule": f"at({due:%Y-%m-%dT%H:%M:%S})",
        "target": {"type": "http", "url": local.hook("burst")},
        "timeout_seconds": 10,
    }
    # (registered as a user registers many at once: job batches of up to 500, POST /v1/job-batches)
    for first in range(0, SLOTS, 500):
        jobs = [
            {"id": f"burst-{index:05d}", "job": {**spec, "name": f"burst {index}"}}
            for index in range(first, min(first + 500, SLOTS))
        ]
        assert local.register(jobs, TENANT) == len(jobs)
    assert time.time() < instant - 7, "registration took too long to leave the planner its lead"
    before = len(_history(local))

    # When the planner sees the minute coming, Then burst workers are started before it
    up = local.wait(
        lambda: next((r for r in _history(local)[before:] if r["burst_workers"] > 0), None),
        instant - time.time() + 5,
        "the planner to ask for burst workers",
    )
    assert up["burst_workers"] == 2
    assert datetime.fromisoformat(up["decided_at"].replace("Z", "+00:00")) < due
    assert [m["load"] >= SLOTS for m in up["minutes"]] == [True]  # the demo's slots of that minute too
    local.wait(lambda: "burst-2" in local.pids(), 30, "the burst workers' processes")
    started_at = time.time()
    assert started_at < instant, "the burst workers must be running before the minute"
    assert re.search(r"started burst-1 \(forked from its zygote\): burst workers 0 -> 1", local.log())

    # And after the minute (its hold over, the queues drained) they are stopped again
    down = local.wait(
        lambda: next((r for r in _history(local)[before:] if r["burst_workers"] == 0), None),
        60 + DRAIN_S,
        "the planner to scale back",
    )
    assert datetime.fromisoformat(down["decided_at"].replace("Z", "+00:00")) > due

    # (every burst worker: on a busy machine the event source's own scaling may have added a
    # burst-3 while every worker held a batch; it is scaled back once the workers are idle, and
    # its stop can land after burst-1's and burst-2's)
    def all_stopped() -> bool:
        log = local.log()
        return all(f"stopped {name} (scaled back)" in log for name in ("burst-1", "burst-2")) and not any(
            name.startswith("burst-") for name in local.pids()
        )

    local.wait(all_stopped, 90, "the supervisor to stop every burst worker")
    assert {"worker-1", "worker-2", "ecs-worker"} <= set(local.pids())  # the standing ones stay

    # And every slot of the burst ran, once
    def all_ran() -> set[str] | None:
        keys = {str(r["key"]) for r in local.records() if r["name"] == "burst"}
        return keys if len(keys) == SLOTS else None

    keys = local.wait(all_ran, DRAIN_S, "every slot of the burst to reach the receiver")
    assert len(keys) == SLOTS
