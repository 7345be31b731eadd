"""The Region-loss run's short form (docs/multi-region.md, section 7): `make test` includes it.

Two Regions of local mode share one table (moto: strongly consistent, as a DynamoDB MRSC global
table is), each with its own queues, API, poller and workers; every Region releases every slot
and the claim keeps each to one run. The seeded chaos workload is registered through both
Regions' APIs, Region b is killed whole (every process, ``kill -9``) for a minute with its queues
left as they were, then started again. The verdict holds every owed slot to exactly one
execution, none early, and the run to its fire delay (p99 at most 10 s); the outage line gives
the fire delay of the slots due while Region b was down.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_chaos_short import LINE  # the verdict's one line

from local.chaos import cli as chaos
from local.chaos.verdict_data import MAX_P99_DELAY_S

pytestmark = pytest.mark.e2e

SEED = "35"
OUTAGE = re.compile(
    r"region-loss: Region b down (\d+) s; fire delay while down p50 [\d.]+ s p99 ([\d.]+) s max [\d.]+ s"
    r" \((\d+) slots\); after it came back .*"
)


@pytest.mark.timeout(900)
def test_losing_a_region_for_a_minute_keeps_every_slot_once_and_on_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given two Regions over one table, Region b lost whole from +20 s to +80 s of a 110 s run
    run_dir = tmp_path / "run"
    args = ["--regions", "2", "--seconds", "110", "--down-at", "20", "--down-for", "60"]
    code = chaos.main(["region-loss", *args, "--seed", SEED, "--dir", str(run_dir)])
    captured = capsys.readouterr()
    details = "\n".join(captured.err.splitlines()[-60:])
    line = captured.out.strip().splitlines()[-1] if captured.out.strip() else ""
    match = LINE.fullmatch(line)
    assert match, f"{line!r}\n{details}"
    outage = next((m for m in map(OUTAGE.fullmatch, captured.err.splitlines()) if m), None)
    assert outage, details
    # (and which slots were latest, with what the loss did to them: QA30, a slot 12.41 s late)
    kinds = tuple(
        f"chaos: {note}"
        for note in (
            "latest fire delays: ",
            "fire delay by category: ",
            "runs cut mid-way, ",
            "fire delay of the ",
        )
    )
    lateness = [row.removeprefix("chaos: ") for row in captured.err.splitlines() if row.startswith(kinds)]
    with capsys.disabled():
        print(f"\nregion-loss short run: {line}\n  {outage.group(0)}")
        for row in lateness:
            print(f"  {row}")

    # Then the Region really went: every process of it killed at once, and it came back
    faults = [json.loads(row) for row in (run_dir / "faults.jsonl").read_text().splitlines()]
    killed = [f for f in faults if f["event"] == "kill-region"]
    assert len(killed) == 1 and len(killed[0]["pids"]) >= 5, killed
    assert faults[0]["event"] == "kill-region" and faults[-1]["event"] == "revive-region", faults
    components = {f["target"] for f in faults if f["event"] == "kill" and f["t"] == killed[0]["t"]}
    assert {"api", "poller", "ecs-worker", "worker-1", "worker-2"} <= components, components
    assert int(outage.group(1)) >= 55

    # And the jobs were registered through both Regions' APIs
    regions = json.loads((run_dir / "ledger.jsonl").read_text().splitlines()[0])["regions"]
    assert set(regions) == {"a", "b"}

    # And every owed slot was executed once and nothing else
    slots, once, duplicates, missed, early = (int(g) for g in match.groups()[:5])
    assert (duplicates, missed, early) == (0, 0, 0), f"{line}\n{details}"
    assert once == slots > 40, line

    # And the slots fired on time, those due while Region b was down included
    p99, counted = float(match.groups()[-3]), int(match.groups()[-1])  # (p50, p99, max, slots) last
    assert counted > 40 and p99 <= MAX_P99_DELAY_S, f"{line}\n{details}"
    assert int(outage.group(3)) > 20 and float(outage.group(2)) <= MAX_P99_DELAY_S, outage.group(0)
    assert code == 0, f"{line}\n{details}"
