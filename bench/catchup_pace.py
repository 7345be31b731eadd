"""Another tenant's fire delay beside one tenant's catch-up, paced by the queues' backlog or not.

In-process (``tests/simulation.py``: the real pollers and re-send watch over the memory store, a
manual clock, workers that take the short lane in the order sent at a fixed number of claims a
second): ``jobs`` ``rate(1 second)`` jobs of one tenant owe 420 slots each after 7 minutes with no
poller (catch-up policy ``all``), and another tenant's ``rate(5 seconds)`` job starts as the pollers
come back. "Unpaced" is a queue port that cannot count its backlog (the design before
``punctual/dispatch/polling/catchup_pace.py``); "paced" reads it as SQS's
``ApproximateNumberOfMessages`` does. Printed: the other tenant's fire delay p50 / max, when the
last owed slot started, and the re-sent copies. The pace's own cost (one ``GetQueueAttributes`` a
short queue every 0.5 s while a poller has catch-up to send) is not a rate the rig can show.
"""

from __future__ import annotations

import sys

import benchlib

sys.path.insert(0, str(benchlib.ROOT / "tests"))

from simulation import catch_up_beside_another_tenant  # (tests/ is put on the path just above)

# (owing jobs, claims a second, shard groups: a poller each, over the same queues)
CASES = [(1, 40.0, 1), (1, 20.0, 1), (1, 10.0, 1), (1, 5.0, 1), (100, 1000.0, 1), (4, 20.0, 4)]


def main() -> None:
    rows, out = [], []
    for jobs, rate, groups in CASES:
        for counted in (False, True):
            got = catch_up_beside_another_tenant(
                rate, counted=counted, jobs_owing=jobs, groups=groups, minutes=4 if groups > 1 else 3
            )
            late = sorted(got.late)
            row = {
                "owing_jobs": jobs,
                "claims_per_second": rate,
                "shard_groups": groups,
                "paced": counted,
                "other_p50_s": round(benchlib.percentile(late, 50) or 0.0, 2),
                "other_max_s": round(max(late), 2),
                "other_slots": len(late),
                "owed_slots_run": got.ran,
                "last_owed_start_s": round(got.last_owed_s, 1),
                "copies": got.copies,
            }
            out.append(row)
            rows.append(
                [
                    str(jobs),
                    f"{rate:.0f}",
                    str(groups),
                    "paced" if counted else "unpaced",
                    f"{row['other_p50_s']:.2f}",
                    f"{row['other_max_s']:.2f}",
                    str(len(late)),
                    f"{row['last_owed_start_s']:.0f} s",
                    str(got.copies),
                ]
            )
    benchlib.heading("Another tenant's fire delay beside a catch-up (420 owed slots a job, in-process)")
    headers = [
        "owing jobs",
        "claims/s",
        "groups",
        "catch-up",
        "other p50 s",
        "other max s",
        "other slots run",
        "last owed start",
        "copies",
    ]
    print(benchlib.table(headers, rows))
    benchlib.write_result("catchup_pace", {"cases": out})


if __name__ == "__main__":
    main()
