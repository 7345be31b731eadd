"""What a poller crash costs: SQS entries per slot, extra reads, lateness after the restart.

The real poller on the in-memory store, in the simulation the crash tests use
(``tests/crash_harness.py``): one minute of a job mix (rate(1 second) chains, minutely near
timers, far timers) at 1,000 and 10,000 slots a minute; every poller killed at second 5,
30 or 55 of the minute, or six times in it, and restarted a second later (the state
machine's first retry); workers claim each message half a second after it is sent; each
SQS entry costs 1 ms of simulated time (what local mode's moto sustains), so re-sends
delay the slots behind them as they would for real.

Figures per case: SQS entries / slots of the minute; extra reads (timer rows and execution
records read beyond the same minute without a crash), per slot; p99 and max fire delay of
the slots due after the first kill; slots released (all of them, or some were lost).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import benchlib

sys.path.insert(0, str(benchlib.ROOT / "tests"))

from crash_harness import crash_cost  # (tests/ is put on the path just above)

CASES: list[tuple[str, list[float]]] = [
    ("killed at :05", [5]),
    ("killed at :30", [30]),
    ("killed at :55", [55]),
    ("killed six times", [5, 15, 25, 35, 45, 55]),
]


HEADERS = [
    "slots/min",
    "case",
    "SQS entries ÷ slots",
    "extra reads ÷ slot",
    "p99 after kill",
    "max",
    "released",
]


def run(slots: int) -> list[dict[str, Any]]:
    base = crash_cost(slots, [])
    base_reads = base.timer_rows_read + base.execution_keys_read
    out = []
    for name, kills in CASES:
        started = time.perf_counter()
        cost = crash_cost(slots, kills)
        reads = cost.timer_rows_read + cost.execution_keys_read
        delays = benchlib.summary(cost.delays_after_kill_ms)
        out.append(
            {
                "slots_per_minute": slots,
                "case": name,
                "kills_s": kills,
                "restarts": cost.restarts,
                "slots": cost.slots,
                "released": cost.released,
                "sqs_entries": cost.entries,
                "entries_per_slot": cost.entries_per_slot,
                "extra_reads_per_slot": (reads - base_reads) / cost.slots,
                "delay_after_kill_ms": delays,
                "wall_s": time.perf_counter() - started,
            }
        )
    return out


def main() -> None:
    rows = run(1000) + run(10_000)
    print(benchlib.machine_line())
    print(
        benchlib.table(
            HEADERS,
            [
                (
                    r["slots_per_minute"],
                    r["case"],
                    f"{r['entries_per_slot']:.3f}",
                    f"{r['extra_reads_per_slot']:.2f}",
                    f"{r['delay_after_kill_ms']['p99']:.0f} ms",
                    f"{r['delay_after_kill_ms']['max']:.0f} ms",
                    f"{r['released']}/{r['slots']}",
                )
                for r in rows
            ],
        )
    )
    one = [r for r in rows if len(r["kills_s"]) == 1]
    six = [r for r in rows if len(r["kills_s"]) == 6]
    payload = {
        "rows": rows,
        "worst_entries_per_slot_one_crash": max(r["entries_per_slot"] for r in one),
        "worst_entries_per_slot_six_crashes": max(r["entries_per_slot"] for r in six),
        "worst_p99_after_kill_ms": max(r["delay_after_kill_ms"]["p99"] for r in rows),
        "all_released": all(r["released"] == r["slots"] for r in rows),
        "verdicts": {
            "one_crash": max(r["entries_per_slot"] for r in one) <= 1.5,
            "six_crashes": max(r["entries_per_slot"] for r in six) <= 2.0,
        },
    }
    benchlib.write_result("crash_cost", payload)


if __name__ == "__main__":
    main()
