"""A burst at the cloud's cadence in local mode (issue 32): the real tick, every minute at :02, plans a
near-lane burst two minutes ahead from the minute-load ledger — its pollers (``burstTriggersPerPoller``)
and its burst workers (the deployment's 75 s start lead) — and the burst workers take a share.

Its own local mode (``--cloud-cadence``): the tick's plans and starts are journalled in
``run/executions.jsonl``, the planner's decisions in ``run/scaling.jsonl``, the messages each worker
process handled in ``run/<name>.handled``. About four minutes, most of it waiting for the minute.
"""

from __future__ import annotations

import json
import math
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from local import harness
from local.harness import LocalMode

TENANT = "cadence"
SLOTS = int(os.environ.get("PUNCTUAL_E2E_CADENCE_SLOTS", "120"))
PER_POLLER = 40  # burstTriggersPerPoller: the burst asks for ceil(SLOTS / 40) pollers
LEAD_S = 75  # the deployment's burstStartLeadS
NEAR_S = 170  # registered this long before its minute: inside the 180 s far threshold (near lane)


def _lines(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def _handled(local: LocalMode, prefix: str) -> int:
    total = 0
    for path in (local.state / "run").glob(f"{prefix}*.handled"):
        try:
            total += int(path.read_text())
        except (OSError, ValueError):
            continue
    return total


@pytest.mark.timeout(900)  # up to ~3.5 min to the burst's minute, its run, then stopping local mode
def test_a_near_lane_burst_is_prepared_two_minutes_ahead_at_the_clouds_cadence(tmp_path: Path) -> None:
    flags = ("--no-demo", "--cloud-cadence", "--set", f"PUNCTUAL_BURST_TRIGGERS_PER_POLLER={PER_POLLER}")
    with harness.running(tmp_path / "local", *flags, tenant=TENANT) as local:
        # Given a minute M far enough off to register its burst inside the near lane
        instant = math.ceil((time.time() + NEAR_S + 5) / 60) * 60
        due = datetime.fromtimestamp(instant, UTC)
        while time.time() < instant - NEAR_S:
            time.sleep(0.2)
        batch = {
            "jobs": [
                {
                    "id": f"burst-{index:04d}",
                    "job": {
                        "schedule": f"at({due:%Y-%m-%dT%H:%M:%S})",
                        "target": {"type": "http", "url": local.hook("cadence")},
                        "timeout_seconds": 10,
                    },
                }
                for index in range(SLOTS)
            ]
        }
        assert local.register(batch["jobs"], TENANT) == SLOTS
        registered = time.time()
        assert registered < instant - 120, (
            f"registration ended {instant - registered:.0f} s before the minute"
        )

        # When the ticks run (every minute at :02), Then the one two minutes before the burst plans
        # its pollers from the ledger (its timers are near: no far sample sees them) ...
        name = f"m-{due:%Y%m%dT%H%M}"
        journal = local.state / "run" / "executions.jsonl"
        start = local.wait(
            lambda: next((r for r in _lines(journal) if r.get("started") in (name, name + "-r")), None),
            instant - time.time() + 10,
            "the tick to start the burst's minute",
        )
        assert start["groups"] >= min(math.ceil(SLOTS / PER_POLLER), 4) > 1  # within the 4 local shards
        # ... and asks for its burst workers at least their start lead ahead
        history = local.state / "run" / "scaling.jsonl"
        up = local.wait(
            lambda: next((r for r in _lines(history) if r["burst_workers"] > 0), None),
            instant - time.time() + 10,
            "the planner to ask for burst workers",
        )
        asked = datetime.fromisoformat(up["decided_at"].replace("Z", "+00:00"))
        assert (due - asked).total_seconds() >= LEAD_S, up

        # And every slot reaches the receiver, the burst workers having run a share of them
        def all_ran() -> set[str] | None:
            keys = {str(r["key"]) for r in local.records() if r["name"] == "cadence"}
            return keys if len(keys) == SLOTS else None

        keys = local.wait(all_ran, instant - time.time() + 60 + SLOTS, "every slot of the burst to run")
        assert len(keys) == SLOTS
        # A worker counts a message once its batch is recorded and deleted: after the receiver
        # answered its last request, so the tallies catch up a moment later
        local.wait(
            lambda: _handled(local, "burst-") + _handled(local, "worker-") >= SLOTS,
            60,
            "the workers to count every message of the burst as handled",
        )
        burst, standing = _handled(local, "burst-"), _handled(local, "worker-")
        assert burst > 0, (burst, standing)
