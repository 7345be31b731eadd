"""How fast local mode's burst workers start: from the scaling decision to their first receive.

Issue 35's three-Region chaos run missed its p99 in one burst minute: each Region's planner asked
for two burst workers, and six new Python processes (imports, boto3 clients) took 17 to 30 s to
start on two busy cores, long after the burst's instant. Local mode now forks each ``burst-N``
from a zygote started with the supervisor (``local/supervisor.py``, ``local/zygote.py``); with
``--cold-burst-workers`` it starts them as new processes, as before.

For each way (cold, then warm) this starts local mode (no demo), then ``--rounds`` times: writes
the planner's file (``run/scaling.json``) asking for ``--burst`` workers, with the decision's
instant, waits until each has logged its first receive (``local/event_source.py``: seconds after
the supervisor asked for it and after the scaling decision), and scales back to none. It prints
the decision-to-first-receive figures and the load average (the machine is shared: the figure
is the point, not a timing assertion).

Usage: ``python bench/local_burst_start.py [--rounds 3] [--burst 2] [--no-json]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import benchlib

from local.harness import LocalMode, running

FIRST_RECEIVE = re.compile(
    r"(burst-\d+): first receive ([\d.]+) s after its start was asked"
    r"(?:, ([\d.]+) s after the scaling decision)?"
)
WAIT_S = 240.0  # a cold start on a busy machine took 30 s; generous


def _ask(local: LocalMode, count: int) -> None:
    """Write the planner's decision as local.scaling.FileActuator does (atomically)."""
    path = local.state / "run" / "scaling.json"
    record = {
        "burst_workers": count,
        "previous": None,
        "decided_at": datetime.now(UTC).isoformat(),
        "minutes": [],
    }
    temporary = path.with_suffix(".bench")
    temporary.write_text(json.dumps(record))
    os.replace(temporary, path)


def _receives(local: LocalMode) -> list[tuple[str, float, float | None]]:
    return [
        (m.group(1), float(m.group(2)), float(m.group(3)) if m.group(3) else None)
        for m in FIRST_RECEIVE.finditer(local.log())
    ]


def measure(rounds: int, burst: int, warm: bool) -> dict[str, Any]:
    extra = ["--no-demo"] + ([] if warm else ["--cold-burst-workers"])
    rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="burst-start-") as state,
        running(Path(state), *extra, tenant="bench") as local,
    ):
        scaling = local.state / "run" / "scaling.json"
        local.wait(scaling.exists, 120, "the planner's first decision")  # it then writes only on change
        time.sleep(5)  # the zygotes (warm) finish preparing, as they do long before a burst
        for index in range(rounds):
            seen = len(_receives(local))
            load = os.getloadavg()[0]
            _ask(local, burst)
            found = local.wait(
                lambda seen=seen: (r := _receives(local)[seen:]) and len(r) >= burst and r,
                WAIT_S,
                f"{burst} burst workers' first receive",
            )
            for name, asked_s, decided_s in found[:burst]:
                rows.append(
                    {
                        "round": index + 1,
                        "worker": name,
                        "asked_s": asked_s,
                        "decision_s": decided_s,
                        "load": load,
                    }
                )
            _ask(local, 0)
            local.wait(lambda: not any(n.startswith("burst-") for n in local.pids()), 120, "the scale-back")
            time.sleep(2)
    decisions = [r["decision_s"] for r in rows if r["decision_s"] is not None]
    return {
        "warm": warm,
        "rows": rows,
        "decision_to_first_receive_s": {
            "median": statistics.median(decisions) if decisions else None,
            "max": max(decisions) if decisions else None,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--burst", type=int, default=2, help="burst workers asked for each round (<= 2)")
    parser.add_argument("--only", choices=("cold", "warm"), help="one way only")
    parser.add_argument("--no-json", action="store_true")
    args = parser.parse_args()
    ways = [w for w in ("cold", "warm") if args.only in (None, w)]
    results = {way: measure(args.rounds, args.burst, way == "warm") for way in ways}
    benchlib.heading("Burst workers: scaling decision -> first receive")
    table = [
        (way, r["round"], r["worker"], r["load"], r["asked_s"], r["decision_s"])
        for way, result in results.items()
        for r in result["rows"]
    ]
    print(
        benchlib.table(
            ["start", "round", "worker", "load avg", "asked -> receive s", "decision -> receive s"], table
        )
    )
    for way, result in results.items():
        figures = result["decision_to_first_receive_s"]
        print(
            f"{way}: decision -> first receive median {figures['median']:.2f} s, max {figures['max']:.2f} s"
        )
    if not args.no_json:
        benchlib.write_result("local_burst_start", {"date": datetime.now(UTC).isoformat(), **results})


if __name__ == "__main__":
    main()
