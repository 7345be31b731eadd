"""The short chaos run (about 60 s of faults) that `make test` includes; `make chaos` is the long one.

Local mode runs as real processes on loopback; a seeded workload fires while workers and
pollers are killed -9 (the poller at least once mid-minute), a second poller with a skewed
clock runs on the same shard group, delivered messages are re-sent, AWS calls are throttled
and jobs are paused, resumed and replaced. The verdict (local/chaos/verdict.py) then holds
every slot to exactly one execution, with correctness bounds (the clock skew it injected),
and the run to its fire delay: a p99 above 10 s fails it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from local.chaos import cli as chaos
from local.chaos.faults.planned import MID_MINUTE
from local.chaos.verdict_data import MAX_P99_DELAY_S

pytestmark = pytest.mark.e2e

SEED = "20261130"  # the plan is a function of the seed: the same faults at the same offsets, every run
LINE = re.compile(
    r"slots (\d+), executed once (\d+), duplicates (\d+), missed (\d+), early (\d+), "
    r"chain repairs (\d+), faults (\d+), "
    r"fire delay p50 (-?[\d.]+) s p99 (-?[\d.]+) s max (-?[\d.]+) s \((\d+) slots(?:; [^)]*)?\)"
)


@pytest.mark.timeout(900)
def test_short_chaos_run_executes_every_owed_slot_exactly_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given local mode under a minute of seeded faults
    run_dir = tmp_path / "run"
    code = chaos.main(["run", "--seconds", "60", "--seed", SEED, "--dir", str(run_dir)])
    captured = capsys.readouterr()
    details = "\n".join(captured.err.splitlines()[-80:])

    # Then the verdict is one line, with the fire delay of the slots that count
    line = captured.out.strip().splitlines()[-1] if captured.out.strip() else ""
    match = LINE.fullmatch(line)
    assert match, f"{line!r}\n{details}"
    delays = [row for row in captured.err.splitlines() if "delay" in row and row.startswith("chaos: ")]
    with capsys.disabled():
        print(f"\nchaos short run: {line}")
        for row in delays:
            print(f"  {row}")
    slots, once, duplicates, missed, early, repairs, faults = (int(g) for g in match.groups()[:7])
    p50, p99, longest = (float(g) for g in match.groups()[7:10])
    counted = int(match.group(11))

    # And the faults were really injected: kills of pollers and workers (the poller at least once
    # mid-minute), a skewed poller, re-sent deliveries, throttling in the driver's processes, and
    # job changes
    events = [json.loads(row) for row in (run_dir / "faults.jsonl").read_text().splitlines()]
    injected = Counter(event["event"] for event in events)
    assert injected["kill"] >= 5 and injected["duplicate"] >= 10 and injected["skewed-poller"] == 1, injected
    mid_minute = [
        event
        for event in events
        if event["event"] == "kill" and event["target"] == "poller" and 15 <= float(event["minute_s"]) <= 45
    ]
    assert mid_minute, [e for e in events if e["event"].startswith("kill") and "poller" in str(e)]
    assert any(event["mode"] == MID_MINUTE for event in mid_minute), mid_minute
    with capsys.disabled():
        print("  poller killed at second " + ", ".join(f"{float(e['minute_s']):.1f}" for e in mid_minute))
    throttled = sum(
        len(path.read_text().splitlines()) for path in (run_dir / "fault-logs").glob("faults-*.jsonl")
    )
    assert throttled > 0
    assert faults >= injected["kill"] + injected["duplicate"] + throttled
    ledger = [json.loads(line)["event"] for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    assert {"pause", "resume", "update"} & set(ledger)

    # And every owed slot was executed once and nothing else, and no chain needed the auditor
    assert (duplicates, missed, early) == (0, 0, 0), f"{line}\n{details}"
    assert repairs == 0, f"the chain auditor repaired a chain (a bug to chase): {line}\n{details}"

    # And the verdict counted the target's calls per attempt and the alerts per (slot, condition):
    # alert endpoints that fail a first try delivered (SENT), ones that hang gave up visibly
    # (FAILED), none left SENDING, each attempt called once
    notes = captured.err.splitlines()
    [calls] = [row for row in notes if "target calls per attempt: " in row]
    [alerts] = [row for row in notes if "alerts per (slot, condition): " in row]
    with capsys.disabled():
        print(f"  {calls.removeprefix('chaos: ')}\n  {alerts.removeprefix('chaos: ')}")
    assert "attempts called once" in calls and "more than once" not in calls and "never called" not in calls
    assert re.search(r"failed SENT [1-9]", alerts) and re.search(r"failed FAILED [1-9]", alerts), alerts
    assert "SENDING" not in alerts and "over the tries" not in alerts, alerts
    assert once == slots > 40, line
    # And the slots fired on time: p99 of the fire delay within the bound (the exit code says so too)
    assert counted > 40 and p50 <= p99 <= longest, line
    assert p99 <= MAX_P99_DELAY_S, f"fire delay p99 {p99} s over {MAX_P99_DELAY_S} s: {line}\n{details}"
    assert code == 0, f"{line}\n{details}"

    # And the run's files alone give the same verdict again
    assert chaos.main(["verdict", str(run_dir)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == line
