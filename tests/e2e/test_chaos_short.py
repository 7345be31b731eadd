"""The short chaos run (about 60 s of faults) that `make test` includes; `make chaos` is the long one.

Local mode runs as real processes on loopback; a seeded workload fires while workers and
pollers are killed -9, a second poller with a skewed clock runs on the same shard group,
delivered messages are re-sent, AWS calls are throttled and jobs are paused, resumed and
replaced. The verdict (local/chaos/verdict.py) then holds every slot to exactly one
execution. Its tolerances are correctness bounds (the clock skew it injected), not timings.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from local.chaos import cli as chaos

pytestmark = pytest.mark.e2e

SEED = "20261130"  # the plan is a function of the seed: the same faults at the same offsets, every run
LINE = re.compile(
    r"slots (\d+), executed once (\d+), duplicates (\d+), missed (\d+), early (\d+), faults (\d+)"
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

    # Then the verdict is one line, with every owed slot executed once and nothing else
    line = captured.out.strip().splitlines()[-1] if captured.out.strip() else ""
    match = LINE.fullmatch(line)
    assert match, f"{line!r}\n{details}"
    with capsys.disabled():
        print(f"\nchaos short run: {line}")
    slots, once, duplicates, missed, early, faults = (int(g) for g in match.groups())
    assert code == 0, f"{line}\n{details}"
    assert (duplicates, missed, early) == (0, 0, 0)
    assert once == slots > 40, line

    # And the faults were really injected: kills of pollers and workers, a skewed poller,
    # re-sent deliveries, throttling in the driver's processes, and job changes
    injected = Counter(
        json.loads(line)["event"] for line in (run_dir / "faults.jsonl").read_text().splitlines()
    )
    assert injected["kill"] >= 5 and injected["duplicate"] >= 10 and injected["skewed-poller"] == 1, injected
    throttled = sum(
        len(path.read_text().splitlines()) for path in (run_dir / "fault-logs").glob("faults-*.jsonl")
    )
    assert throttled > 0
    assert faults >= injected["kill"] + injected["duplicate"] + throttled
    ledger = [json.loads(line)["event"] for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    assert {"pause", "resume", "update"} & set(ledger)

    # And the run's files alone give the same verdict again
    assert chaos.main(["verdict", str(run_dir)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == line
