"""The chaos fault plan and driver: every plan kills the poller mid-minute, and a kill is logged
with the second of the minute it happened at and what the victim held.

No local mode: plans are pure functions of a seed; the driver kills a sleeping child process.
"""

from __future__ import annotations

import json
import random
import sys
import threading
from pathlib import Path

import pytest

from local.chaos.faults import driver as chaos_driver
from local.chaos.faults.driver import (
    MID_MINUTE_EVERY_S,
    MID_MINUTE_LEAD_S,
    FaultDriver,
    FaultOptions,
    plan_faults,
)
from local.chaos.faults.planned import MID_MINUTE, MID_MINUTE_S, PlannedFault
from local.chaos.faults.procs import ChaosProcess
from local.chaos.ledger import LedgerWriter, read_jsonl


def mid_minute_kills(plan: list[PlannedFault]) -> list[PlannedFault]:
    return [f for f in plan if f.kind == "kill" and f.mode == MID_MINUTE]


@pytest.mark.parametrize("seconds", [60.0, 90.0, 600.0])
def test_every_seed_plans_a_mid_minute_poller_kill_in_time(seconds: float) -> None:
    for seed in range(50):
        plan = plan_faults(random.Random(seed), seconds, FaultOptions(), [])
        kills = mid_minute_kills(plan)
        # one in every stretch of MID_MINUTE_EVERY_S that leaves the lead before the end
        assert len(kills) == max(
            1, len(range(0, int(seconds - MID_MINUTE_LEAD_S - 3) + 1, MID_MINUTE_EVERY_S))
        )
        assert all(k.target == "poller" for k in kills)
        # planned early enough for a second 18-42 of a minute to come before the end (at most 36 s)
        assert all(3.0 <= k.at_s <= seconds - MID_MINUTE_LEAD_S for k in kills), kills
    assert len(mid_minute_kills(plan_faults(random.Random(1), 600.0, FaultOptions(), []))) == 5


@pytest.mark.parametrize("largest", [0.0, 0.5, 1.0, 5.0])
def test_no_clock_offset_is_larger_than_max_skew(largest: float) -> None:
    # --max-skew 0 still skewed the second poller by up to 1 s (offsets were drawn from 1 s up)
    for seed in range(20):
        plan = plan_faults(random.Random(seed), 600.0, FaultOptions(max_skew_s=largest), [])
        offsets = [f.offset_s for f in plan if f.kind == "skew"]
        assert offsets and all(abs(o) <= largest for o in offsets), offsets


def test_the_lead_leaves_time_for_the_window_to_come() -> None:
    low, high = MID_MINUTE_S
    assert 15 <= low < high <= 45
    longest_wait = 60 - (high - low)  # from just after the window to its next start
    assert longest_wait + 1 < MID_MINUTE_LEAD_S


def make_driver(tmp_path: Path, processes: dict[str, ChaosProcess]) -> tuple[FaultDriver, list[str]]:
    echoed: list[str] = []
    fault_driver = FaultDriver(
        plan=[],
        state_dir=tmp_path / "local",
        log=LedgerWriter(tmp_path / "faults.jsonl"),
        follower=None,  # type: ignore[arg-type]
        workload=None,  # type: ignore[arg-type]
        sqs=None,
        short_queue_urls=[],
        long_queue_urls=[],
        processes=processes,
        make_skewed=lambda offset: processes["worker-chaos"],
        rng=random.Random(0),
        echo=echoed.append,
    )
    fault_driver.started = 0.0
    return fault_driver, echoed


def test_a_killed_worker_is_logged_with_its_second_and_the_batch_it_held(tmp_path: Path) -> None:
    worker = ChaosProcess(
        "worker-chaos", [sys.executable, "-c", "import time; time.sleep(60)"], {}, tmp_path / "w.log"
    )
    worker.start()
    try:
        fault_driver, echoed = make_driver(tmp_path, {"worker-chaos": worker})
        run_dir = tmp_path / "local" / "run"
        run_dir.mkdir(parents=True)
        batch = [
            {
                "queue_url": "q",
                "receipt": "r1",
                "job_id": "job-a",
                "slot": "2026-11-30T10:00:00Z",
                "attempt": 1,
            },
            {
                "queue_url": "q",
                "receipt": "r2",
                "job_id": "job-b",
                "slot": "2026-11-30T10:00:05Z",
                "attempt": 2,
            },
        ]
        (run_dir / "worker-chaos.inflight.json").write_text(json.dumps({"messages": batch}))
        fault = PlannedFault(1.0, "kill", target="worker-chaos", mode="any")
        assert fault_driver.kill_now(fault, "worker-chaos", None)
        assert worker.process is not None and worker.process.wait(timeout=5) == -9
    finally:
        worker.stop(timeout_s=5)
    [record] = read_jsonl(tmp_path / "faults.jsonl")
    assert record["event"] == "kill" and record["target"] == "worker-chaos" and record["mode"] == "any"
    assert record["minute_s"] == round(record["t"] % 60, 2)
    assert record["held"] == [
        {"job_id": "job-a", "slot": "2026-11-30T10:00:00Z", "attempt": 1},
        {"job_id": "job-b", "slot": "2026-11-30T10:00:05Z", "attempt": 2},
    ]
    assert f"second {record['t'] % 60:.1f} of the minute" in echoed[-1]


class FakeTime:
    """The driver's clock: each read returns the next instant of a script (then stays)."""

    def __init__(self, instants: list[float]) -> None:
        self.instants = instants
        self.reads = 0

    def time(self) -> float:
        value = self.instants[min(self.reads, len(self.instants) - 1)]
        self.reads += 1
        return value

    def monotonic(self) -> float:
        return self.time()

    def sleep(self, seconds: float) -> None:
        pass


def test_the_mid_minute_kill_waits_for_a_second_between_18_and_42(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    minute = 1_800_000_000.0 - 1_800_000_000.0 % 60  # the top of a UTC minute
    clock = FakeTime(
        [
            minute + 50.05,  # second 50: too late in this minute
            minute + 60 + 5.05,  # second 5 of the next: too early
            minute + 60 + 20.5,  # second 20, mid-second: not just after a whole second
            minute + 60 + 21.05,  # second 21, poller up for only a second: wait
            minute + 60 + 23.06,  # second 23, just after it: kill
        ]
    )
    ages = iter([1.0, 5.0])
    monkeypatch.setattr(chaos_driver, "time", clock)
    monkeypatch.setattr(chaos_driver, "_age_s", lambda pid: next(ages))
    fault_driver, _ = make_driver(tmp_path, {})
    killed: list[tuple[str, list[str] | None]] = []

    def kill_now(fault: PlannedFault, name: str, busy: list[str] | None, quiet: bool = False) -> bool:
        killed.append((name, busy))
        return True

    monkeypatch.setattr(fault_driver, "kill_now", kill_now)
    monkeypatch.setattr(fault_driver, "pid_of", lambda name: 4242)
    fault = PlannedFault(12.0, "kill", target="poller", mode=MID_MINUTE)
    fault_driver.waiting.add("poller")
    fault_driver.mid_minute(fault, threading.Event())
    assert killed == [("poller", ["second 23.06 of the minute"])]
    assert clock.reads == 5
    assert "poller" not in fault_driver.waiting


def test_a_mid_minute_kill_that_finds_no_moment_before_the_end_is_logged_skipped(tmp_path: Path) -> None:
    fault_driver, echoed = make_driver(tmp_path, {})
    stop = threading.Event()
    stop.set()
    fault_driver.mid_minute(PlannedFault(12.0, "kill", target="poller", mode=MID_MINUTE), stop)
    [record] = read_jsonl(tmp_path / "faults.jsonl")
    assert record["event"] == "kill-skipped" and "mid-minute" in echoed[-1]


def test_other_kills_of_the_poller_wait_while_a_mid_minute_one_is_pending(tmp_path: Path) -> None:
    fault_driver, _ = make_driver(tmp_path, {})
    fault_driver.waiting.add("poller")
    fault_driver.kill(PlannedFault(19.0, "kill", target="poller", mode="any"))
    [record] = read_jsonl(tmp_path / "faults.jsonl")
    assert record["event"] == "kill-skipped" and record["reason"] == "a mid-minute kill of it is pending"


class _Follower:
    def __init__(self, records: list[dict[str, object]]) -> None:
        self.records = records

    def snapshot(self) -> list[dict[str, object]]:
        return self.records


class _Sqs:
    def __init__(self) -> None:
        self.sent: list[dict[str, object]] = []

    def send_message(self, **call: object) -> None:
        self.sent.append(call)


def test_a_re_sent_delivery_is_signed_as_the_original_was_and_names_its_version(tmp_path: Path) -> None:
    # Given local mode's dispatch key, a job at version 2 since before its slot's delivery
    from local.chaos.workload import JobPlan, Workload
    from punctual.dispatch.queues import DispatchMessage
    from punctual.security.message_auth import DispatchSigner

    key = "k" * 43
    (tmp_path / "local" / "run").mkdir(parents=True)
    (tmp_path / "local" / "run" / "dispatch.key").write_text(key + "\n")
    workload = Workload(api=None, receiver_url="http://r", ledger=LedgerWriter(tmp_path / "l.jsonl"))  # type: ignore[arg-type]
    workload.ids["rate-00"] = "job-a"
    workload.plans["rate-00"] = JobPlan(key="rate-00", kind="rate", schedule="rate(5 seconds)")
    workload.versions["job-a"] = [(100.0, 1), (150.0, 2)]
    fault_driver, _ = make_driver(tmp_path, {})
    sqs = _Sqs()
    delivered = {"job": "job-a", "slot": "2026-11-30T10:00:00Z", "attempt": 1, "arrived": 160.0}
    fault_driver.follower = _Follower([delivered])  # type: ignore[assignment]
    fault_driver.workload, fault_driver.sqs, fault_driver.short_queue_urls = workload, sqs, ["q"]
    # When the driver re-sends that delivery
    fault_driver.duplicate(PlannedFault(1.0, "duplicate", count=1))
    # Then the copy passes the workers' signature check (an unsigned one was dropped as forged:
    # no re-send ever reached a claim) and carries the version the original was released for
    [call] = sqs.sent
    message = DispatchMessage.from_body(str(call["MessageBody"]))
    assert DispatchSigner(key).verify(message)
    assert (message.job_id, message.slot, message.attempt, message.job_version) == (
        "job-a",
        "2026-11-30T10:00:00Z",
        1,
        2,
    )
