"""One tenant's hanging runs do not hold every worker, in local mode (the counters in moto's
table): tenant A's jobs call a receiver that never answers in time, one slot every ten seconds, and
tenant B's slots, due after them, reach the receiver while A's runs still hang, A holding its cap
of runs in flight (1 here) and its other slots waiting. On the short lane (local mode's two worker
processes, each a Lambda invocation held by the slowest run of its batch;
``maxRunsInFlightPerTenant``) and on the ECS long lane (its worker tasks, one run at a time each
here; ``maxLongRunsInFlightPerTenant``).

Without the cap (0) A's runs took every worker of the lane and none of B's slots reached the
receiver within 120 s, on either lane; with it, B's arrived 0.02 to 0.09 s after their instants
(QA, 2026-12-06).

One local mode of its own for both lanes, on free ports, stopped at the end.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from local.harness import request, running

pytestmark = pytest.mark.e2e

CAP = 1
A_SLOTS = 5  # one every 10 s: counted 5 s after its start, seen by the workers 3 s later
A_EVERY_S = 10
B_SLOTS = 4
HANG_S = 600  # A's receiver answers after this; its runs time out first
A_TIMEOUT_S = 300
PAYLOAD = {"job": "<job_id>", "slot": "<slot>", "attempt": "<attempt>"}


def at(instant: float) -> str:
    return f"at({datetime.fromtimestamp(instant, UTC):%Y-%m-%dT%H:%M:%S})"


# Both lanes in one local mode: the short lane (its two worker processes) and the ECS long lane
# (worker tasks running one attempt at a time here: A's hanging runs could take them all)
SETTINGS = (
    f"PUNCTUAL_MAX_RUNS_IN_FLIGHT_PER_TENANT={CAP}",
    f"PUNCTUAL_MAX_LONG_RUNS_IN_FLIGHT_PER_TENANT={CAP}",
    "PUNCTUAL_WORKER_CONCURRENCY=1",
)
LANES = {"short": {}, "long": {"runtime": "ecs"}}


@pytest.mark.timeout(900)  # local mode's start, ~40 s to the first instant, A's 40 s, B's wait, its stop
def test_b_reaches_its_receiver_on_each_lane_while_a_hangs_at_its_cap(tmp_path: Path) -> None:
    options = [arg for setting in SETTINGS for arg in ("--set", setting)]
    with running(tmp_path / "local", "--no-demo", *options, tenant="a") as local:
        # Given, on each lane, tenant A's jobs that hang, one due every 10 s, and tenant B's, due
        # after them
        first = math.ceil(time.time() + 40)
        b_due = first + A_SLOTS * A_EVERY_S
        a_jobs, b_jobs = [], []
        for lane, runtime in LANES.items():
            hanging = {
                **runtime,
                "target": {"type": "http", "url": local.hook(f"a-{lane}") + f"?delay={HANG_S}"},
                "payload": PAYLOAD,
                "timeout_seconds": A_TIMEOUT_S,
            }
            a_jobs += [
                {"id": f"a-{lane}-{n}", "job": {**hanging, "schedule": at(first + n * A_EVERY_S)}}
                for n in range(A_SLOTS)
            ]
            b_jobs += [
                {
                    "id": f"b-{lane}-{n}",
                    "job": {
                        **runtime,
                        "schedule": at(b_due + n),
                        "target": {"type": "http", "url": local.hook(f"b-{lane}")},
                        "payload": PAYLOAD,
                    },
                }
                for n in range(B_SLOTS)
            ]
        assert local.register(a_jobs, "a") == 2 * A_SLOTS
        assert local.register(b_jobs, "b") == 2 * B_SLOTS
        assert time.time() < first - 5, "registration took too long"

        # When they fall due, Then B's slots all reach the receiver on each lane while A's runs
        # still hang
        def b_arrived() -> list[dict[str, object]] | None:
            found = [r for r in local.records() if str(r["name"]).startswith("b-")]
            return found if len(found) >= 2 * B_SLOTS else None

        local.wait(b_arrived, b_due - time.time() + 120, "B's slots while A's runs hang")
        records = local.records()
        for lane in LANES:
            b_records = [r for r in records if r["name"] == f"b-{lane}"]
            a_records = [r for r in records if r["name"] == f"a-{lane}"]
            print(
                f"{lane} lane: A's calls {len(a_records)}; B's arrival after its instant "
                f"{sorted(round(float(r['arrived']) - b_due - n, 2) for n, r in enumerate(b_records))}"  # type: ignore[arg-type]
            )
            assert len(b_records) == B_SLOTS and len({r["key"] for r in b_records}) == B_SLOTS
            assert all(r["status"] is None for r in a_records)  # A's runs all still hang
            assert len(a_records) < A_SLOTS  # and A did not start every slot: the rest wait for its cap
            # and those waiting say why in their records, once parked (parked QUEUED, not lost)
            waiting = []
            for n in range(1, A_SLOTS):
                status, page = request(f"{local.api_url}/v1/jobs/a-{lane}-{n}/executions", tenant="a")
                assert status == 200
                waiting += [
                    e
                    for e in page["items"]
                    if e["status"] == "QUEUED" and "runs in flight" in (e.get("error") or "")
                ]
            print(lane, [(e["job_id"], e["status"], e["error"]) for e in waiting])
            assert waiting, lane
