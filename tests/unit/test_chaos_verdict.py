"""The chaos verdict on hand-made runs: it counts what it must and names every violation.

No processes: a ledger, receiver records and execution records are written the way a run
writes them, then judged (local/chaos/verdict.py).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pytest import approx

from local.chaos import cli
from local.chaos.lateness import CUT_MID_WAY, DIED_BEFORE_TARGET, UNTOUCHED
from local.chaos.ledger import LedgerWriter, load, time_slots
from local.chaos.verdict import MAX_P99_DELAY_S, Bounds, Delays, RunData, Verdict, judge, judge_dir
from punctual.execution import LEASE_LOST_NOTE
from punctual.models import AttemptRecord, Execution, ExecutionStatus, RetryPolicy
from punctual.retries import next_retry_at, seeded_random
from punctual.schedules import jitter_offset_s

S = ExecutionStatus
T0 = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
STEADY = {"max_attempts": 10, "backoff": "fixed", "base_seconds": 1, "max_seconds": 1, "jitter": False}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ts(seconds: float) -> float:
    return at(seconds).timestamp()


def key(seconds: float) -> str:
    return at(seconds).strftime("%Y-%m-%dT%H:%M:%SZ")


class RunBuilder:
    """Writes a run the way the runner does, in a temporary directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "ledger.jsonl"
        self.ledger = LedgerWriter(self.path)
        self.receiver: list[dict[str, Any]] = []
        self.executions: dict[str, list[Execution]] = {}
        self.faults: list[dict[str, Any]] = []
        self.alerts: dict[str, list[dict[str, Any]]] = {}  # the alert ledger, by job id
        self.alert_arrivals: list[dict[str, Any]] = []
        self.alerts_before: dict[str, list[dict[str, Any]]] | None = None  # read before the records
        self.chain_repairs: list[dict[str, Any]] = []  # the auditor's Chain Repaired events

    def job(
        self,
        job_key: str,
        kind: str,
        schedule: str,
        first: float | None,
        *,
        registered: float = -0.5,
        retry: dict[str, Any] | None = None,
        meant_to_fail: bool = False,
        parents: tuple[str, ...] = (),
        runtime: str = "lambda",
        jitter: int = 0,
        alerts: list[dict[str, Any]] | None = None,
    ) -> str:
        job_id = f"id-{job_key}"
        spec = {"schedule": schedule, "retry": retry or STEADY, "runtime": runtime, "jitter_seconds": jitter}
        if alerts:
            spec["alerts"] = alerts
        body = {
            "id": job_id,
            "version": 1,
            "schedule": schedule,
            "timezone": "UTC",
            "state": "ENABLED",
            "runtime": runtime,
            "jitter_seconds": jitter,
            "next_fire_at": key(first) if first is not None else None,
        }
        self.ledger.write(
            "register",
            key=job_key,
            kind=kind,
            spec=spec,
            meant_to_fail=meant_to_fail,
            parents=list(parents),
            sent=ts(registered),
            answered=ts(registered + 0.1),
            status=201,
            job=body,
        )
        self.executions.setdefault(job_id, [])
        return job_id

    def change(
        self, job_key: str, op: str, when: float, version: int, state: str, first: float | None
    ) -> None:
        body = {
            "id": f"id-{job_key}",
            "version": version,
            "schedule": "rate(5 seconds)",
            "state": state,
            "next_fire_at": key(first) if first is not None else None,
        }
        self.ledger.write(op, key=job_key, sent=ts(when), answered=ts(when + 0.1), status=200, job=body)

    def ran(
        self,
        job_id: str,
        slot: float,
        *,
        attempts: list[tuple[S, float, float, str | None]] | None = None,
        requests: list[tuple[int, float, float, int]] | None = None,
        final: S = S.SUCCEEDED,
    ) -> None:
        """A slot's record (attempts: status, start, end, error) and its receiver requests."""
        attempts = attempts or [(final, slot + 0.1, slot + 0.2, None)]
        records = [
            AttemptRecord(
                attempt=i + 1, status=st, started_at=at(a), finished_at=at(b), error=err, owner=f"o{i}"
            )
            for i, (st, a, b, err) in enumerate(attempts)
        ]
        last = records[-1]
        self.executions[job_id].append(
            Execution(
                job_id=job_id,
                tenant="chaos",
                slot=key(slot),
                scheduled_at=at(slot),
                attempt=last.attempt,
                status=final,
                started_at=last.started_at,
                finished_at=last.finished_at,
                owner=last.owner,
                attempts=records,
            )
        )
        if requests is None:
            ok = 200 if final is S.SUCCEEDED else 500
            requests = [(len(records), attempts[-1][1] + 0.01, attempts[-1][2] - 0.01, ok)]
        for attempt, arrived, answered, status in requests:
            self.receiver.append(
                {
                    "job": job_id,
                    "slot": key(slot),
                    "key": f"{job_id}:{key(slot)}",
                    "attempt": attempt,
                    "arrived": ts(arrived),
                    "answered": ts(answered),
                    "status": status,
                }
            )

    def kill(self, target: str, when: float, held: list[tuple[str, float, int]] | None = None) -> None:
        """A kill -9 as the driver logs it; ``held``: (job id, slot, attempt) of the batch it held."""
        self.faults.append(
            {
                "event": "kill",
                "t": ts(when),
                "target": target,
                "minute_s": round(ts(when) % 60, 2),
                "held": [{"job_id": j, "slot": key(slot), "attempt": a} for j, slot, a in held or []],
            }
        )

    def cut(self, cut: float) -> None:
        self.ledger.write("phase", name="faults_end")
        lines = [json.loads(line) for line in self.path.read_text().splitlines()]
        lines[-1]["t"] = ts(cut)
        self.path.write_text("".join(json.dumps(line) + "\n" for line in lines))

    def judge(
        self,
        cut: float,
        collected: float | None = None,
        skew_s: float = 0.0,
        max_p99_delay_s: float = MAX_P99_DELAY_S,
    ) -> Verdict:
        self.cut(cut)
        return judge(
            RunData(
                run=load(self.path),
                faults=self.faults,
                throttles=Counter({"throttle sqs": 3}),
                receiver=self.receiver,
                executions=self.executions,
                dead_letters=[],
                failure_reports=[],
                collected_at=ts(collected if collected is not None else cut + 30),
                bounds=Bounds(skew_s=skew_s, max_p99_delay_s=max_p99_delay_s),
                alerts=self.alerts,
                alert_arrivals=self.alert_arrivals,
                alerts_before=self.alerts_before,
                chain_repairs=self.chain_repairs,
            )
        )

    def save(self, cut: float, bounds: Bounds) -> Path:
        """The run's files, as the runner leaves them (``verdict RUN_DIR`` reads them)."""
        run_dir = self.path.parent
        lines = self.path.read_text()
        self.path.write_text(
            json.dumps({"event": "run", "t": ts(-1), "bounds": asdict(bounds)}) + "\n" + lines
        )
        self.cut(cut)
        (run_dir / "faults.jsonl").write_text("".join(json.dumps(f) + "\n" for f in self.faults))
        collected = {
            "collected_at": ts(cut + 30),
            "receiver": self.receiver,
            "executions": {
                job_id: [e.model_dump(mode="json") for e in items]
                for job_id, items in self.executions.items()
            },
            "dead_letters": [],
            "failure_reports": [],
            "chain_repairs": self.chain_repairs,
        }
        (run_dir / "collected.json").write_text(json.dumps(collected))
        return run_dir


@pytest.fixture
def run(tmp_path: Path) -> RunBuilder:
    return RunBuilder(tmp_path)


def kinds(verdict: Verdict) -> list[str]:
    return sorted(v.kind for v in verdict.violations)


def test_every_owed_slot_once_is_a_clean_verdict(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    for slot in range(0, 40, 5):
        run.ran(job, slot)
    verdict = run.judge(cut=20)
    # 0, 5, 10, 15, 20 are owed; 25..35 ran after the cut (optional)
    assert (verdict.slots, verdict.executed_once, verdict.duplicates, verdict.missed, verdict.early) == (
        5,
        5,
        0,
        0,
        0,
    )
    assert verdict.ok and verdict.line() == (
        "slots 5, executed once 5, duplicates 0, missed 0, early 0, chain repairs 0, faults 3, "
        "fire delay p50 0.11 s p99 0.11 s max 0.11 s (5 slots)"
    )


def test_an_attempt_delivered_twice_is_a_duplicate_named_by_its_slot(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    run.ran(job, 0)
    run.ran(job, 5, requests=[(1, 5.1, 5.2, 200), (1, 5.3, 5.4, 200)])
    verdict = run.judge(cut=5)
    assert verdict.duplicates == 1 and verdict.executed_once == 1 and not verdict.ok
    [violation] = verdict.violations
    assert (violation.kind, violation.job, violation.slot) == ("duplicate", "rate-00", key(5))
    assert "attempt 1 reached the receiver again" in violation.detail


def test_a_request_after_the_slot_succeeded_is_a_duplicate(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    run.ran(job, 0, requests=[(1, 0.15, 0.18, 200), (2, 9.0, 9.1, 200)])
    verdict = run.judge(cut=4)
    assert verdict.duplicates >= 1 and "duplicate" in kinds(verdict)


def test_an_owed_slot_that_never_ran_is_missed_with_a_diagnosis(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    run.ran(job, 0)
    run.ran(job, 10)
    run.kill("worker-1", 5.5)
    verdict = run.judge(cut=10)
    assert (verdict.slots, verdict.missed) == (3, 1)
    [violation] = verdict.violations
    assert violation.kind == "missed" and violation.slot == key(5)
    assert "no execution record" in violation.detail and "worker-1 +0.5s" in violation.detail


def test_a_slot_stuck_running_is_missed(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    # (what the first chaos run found: a taken-over attempt whose worker died too, never recovered)
    run.ran(
        job,
        0,
        attempts=[(S.TIMED_OUT, 0.1, 21, LEASE_LOST_NOTE), (S.RUNNING, 21, 22, None)],
        requests=[(1, 0.2, 3.0, 200), (2, 21.1, 24.0, 200)],
        final=S.RUNNING,
    )
    run.executions[job][0].attempts.pop()  # a running attempt is not on the list yet
    run.kill("worker-2", 3)
    run.kill("worker-1", 24.1)
    verdict = run.judge(cut=2)
    assert (verdict.missed, verdict.duplicates) == (1, 0)
    assert kinds(verdict) == ["missed"]
    assert "record RUNNING attempt 2" in verdict.violations[0].detail


def test_early_is_measured_against_the_largest_clock_offset(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    run.ran(job, 5, attempts=[(S.SUCCEEDED, 3.0, 3.1, None)])
    assert run.judge(cut=5, skew_s=1.0).early == 1


def test_a_release_within_the_skew_is_not_early(tmp_path: Path) -> None:
    run = RunBuilder(tmp_path)
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=5)
    run.ran(job, 5, attempts=[(S.SUCCEEDED, 3.0, 3.1, None)])
    verdict = run.judge(cut=5, skew_s=2.5)
    assert verdict.early == 0 and verdict.ok


def test_slots_of_a_paused_interval_are_not_owed(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    run.change("rate-00", "pause", 100, 2, "PAUSED", None)
    run.change("rate-00", "resume", 130, 3, "ENABLED", 135)
    for slot in [*range(0, 40, 5), *range(135, 160, 5)]:
        run.ran(job, slot)
    verdict = run.judge(cut=155)
    # owed: 0..35 (before the 60 s guard ahead of the pause), 135..155; 40..130 optional and absent
    assert (verdict.slots, verdict.executed_once, verdict.missed) == (13, 13, 0), verdict.violations
    expected = time_slots(load(run.path).jobs["rate-00"], ts(155), ts(160), 0.0)
    assert not expected[key(100)].owed and "pause" in expected[key(100)].reason
    assert not expected[key(120)].owed and expected[key(140)].owed


def test_a_rerun_after_a_lost_worker_needs_a_kill_to_explain_it(run: RunBuilder) -> None:
    lost = [(S.TIMED_OUT, 0.1, 21.0, LEASE_LOST_NOTE), (S.SUCCEEDED, 21.0, 21.5, None)]
    two_oks = [(1, 0.2, 3.0, 200), (2, 21.1, 21.4, 200)]
    job = run.job("rate-00", "rate", "rate(60 seconds)", first=0)
    run.ran(job, 0, attempts=lost, requests=two_oks)
    run.kill("worker-1", 1.0)
    assert run.judge(cut=10).ok


def test_a_lapsed_lease_without_a_crash_is_two_owners(run: RunBuilder) -> None:
    lost = [(S.TIMED_OUT, 0.1, 21.0, LEASE_LOST_NOTE), (S.SUCCEEDED, 21.0, 21.5, None)]
    job = run.job("rate-00", "rate", "rate(60 seconds)", first=0)
    run.ran(job, 0, attempts=lost, requests=[(1, 0.2, 25.0, 200), (2, 21.1, 21.4, 200)])
    run.kill("ecs-worker", 1.0)  # the wrong runtime: no Lambda worker died
    verdict = run.judge(cut=10)
    assert kinds(verdict) == ["owners", "owners"]
    assert any("in flight at the receiver at once" in v.detail for v in verdict.violations)


def test_a_retry_before_its_backoff_instant_is_a_violation(run: RunBuilder) -> None:
    retry = {"max_attempts": 5, "backoff": "fixed", "base_seconds": 3, "max_seconds": 3, "jitter": False}
    job = run.job("flaky-00", "flaky", "rate(60 seconds)", first=0, retry=retry)
    run.ran(
        job,
        0,
        attempts=[(S.FAILED, 0.1, 0.2, "HTTP 500"), (S.SUCCEEDED, 1.5, 1.6, None)],
        requests=[(1, 0.11, 0.19, 500), (2, 1.51, 1.59, 200)],
    )
    verdict = run.judge(cut=10)
    assert kinds(verdict) == ["retries"] and "before its backoff instant" in verdict.violations[0].detail


def test_a_jittered_retry_at_its_instant_passes(run: RunBuilder) -> None:
    retry = {"max_attempts": 5, "backoff": "exponential", "base_seconds": 2, "max_seconds": 8, "jitter": True}
    job = run.job("flaky-00", "flaky", "rate(60 seconds)", first=0, retry=retry)
    due = next_retry_at(
        RetryPolicy.model_validate(retry),
        failed_attempt=1,
        failed_at=at(0.2),
        scheduled_at=at(0),
        rng=seeded_random(job, key(0), 1),
    )
    assert due is not None
    start = (due - T0).total_seconds() + 0.05
    run.ran(
        job,
        0,
        attempts=[(S.FAILED, 0.1, 0.2, "HTTP 500"), (S.SUCCEEDED, start, start + 0.1, None)],
        requests=[(1, 0.11, 0.19, 500), (2, start + 0.01, start + 0.09, 200)],
    )
    assert run.judge(cut=10).ok


def test_a_job_meant_to_fail_must_use_every_attempt_and_never_succeed(run: RunBuilder) -> None:
    retry = {"max_attempts": 3, "backoff": "fixed", "base_seconds": 2, "max_seconds": 2, "jitter": False}
    job = run.job("doomed-00", "doomed", "rate(60 seconds)", first=0, retry=retry, meant_to_fail=True)
    run.ran(
        job,
        0,
        attempts=[(S.FAILED, 0.1, 0.2, "500"), (S.FAILED, 2.3, 2.4, "500")],
        requests=[(1, 0.11, 0.19, 500), (2, 2.31, 2.39, 500)],
        final=S.FAILED,
    )
    verdict = run.judge(cut=10)
    assert kinds(verdict) == ["terminal"] and "after 2 of 3 attempts" in verdict.violations[0].detail


def test_a_child_that_ran_without_both_parents_breaks_the_dependency(run: RunBuilder) -> None:
    a = run.job("pair-00a", "pair", "rate(10 seconds)", first=0)
    b = run.job("pair-00b", "pair", "rate(10 seconds)", first=0)
    child = run.job(
        "after-pair-00",
        "after",
        "after(id-pair-00a, id-pair-00b)",
        first=None,
        parents=("pair-00a", "pair-00b"),
    )
    run.ran(a, 0)
    run.ran(b, 0, final=S.FAILED, attempts=[(S.FAILED, 0.1, 0.2, "500")])
    run.ran(a, 10)
    run.ran(b, 10, attempts=[(S.SUCCEEDED, 10.1, 10.4, None)])
    run.ran(child, 0, attempts=[(S.SUCCEEDED, 0.5, 0.6, None)])
    run.ran(child, 10, attempts=[(S.SUCCEEDED, 10.3, 10.5, None)])  # before b's success was recorded
    verdict = run.judge(cut=10)
    details = sorted((v.kind, v.slot) for v in verdict.violations)
    assert ("phantom", key(0)) in details  # no slot both parents succeeded for
    assert ("dependency", key(10)) in details
    # b's failed slot 0 is a missed owed slot of b: it was meant to succeed
    assert ("missed", key(0)) in details


def test_a_delay_chain_is_owed_from_each_finish(run: RunBuilder) -> None:
    job = run.job("delay-00", "delay", "delay(5 seconds)", first=None, registered=-0.5)
    # registered at -0.5 s: anchor 0, first slot 5; each next slot = ceil(finish) + 5
    run.ran(job, 5, attempts=[(S.SUCCEEDED, 5.1, 6.3, None)])
    run.ran(job, 12, attempts=[(S.SUCCEEDED, 12.1, 12.2, None)])
    verdict = run.judge(cut=20)
    assert (verdict.slots, verdict.missed) == (3, 1)  # 5, 12 and 18 (= ceil(12.2) + 5) owed; 18 never ran
    assert verdict.violations[0].slot == key(18)


def test_a_slot_due_before_a_pause_but_not_started_may_be_skipped(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    run.change("rate-00", "pause", 100, 2, "PAUSED", None)
    for slot in range(0, 35, 5):
        run.ran(job, slot)
    # slot 35 was delivered late (its worker died holding it) and found the job paused
    run.ran(job, 35, attempts=[(S.SKIPPED, 100.5, 100.5, "job is paused")], final=S.SKIPPED, requests=[])
    run.executions[job][-1] = run.executions[job][-1].model_copy(update={"error": "job is paused"})
    verdict = run.judge(cut=150)
    assert verdict.ok and (verdict.slots, verdict.executed_once) == (7, 7), verdict.violations
    # a slot skipped before the pause was even asked for is missed
    run2 = RunBuilder(run.path.parent / "again")
    job = run2.job("rate-00", "rate", "rate(5 seconds)", first=0)
    run2.change("rate-00", "pause", 100, 2, "PAUSED", None)
    run2.ran(job, 35, attempts=[(S.SKIPPED, 36, 36, "job is paused")], final=S.SKIPPED, requests=[])
    assert any(v.kind == "missed" and v.slot == key(35) for v in run2.judge(cut=150).violations)


def test_a_delay_chain_counts_from_the_slot_when_its_run_ended_before_it(run: RunBuilder) -> None:
    job = run.job("delay-00", "delay", "delay(5 seconds)", first=None, registered=-0.5)
    # slot 5 released 4 s early (a poller 4.5 s ahead) and over at 1.1: the next slot is 10, not 7
    run.ran(job, 5, attempts=[(S.SUCCEEDED, 1.0, 1.1, None)])
    run.ran(job, 7, attempts=[(S.SUCCEEDED, 7.1, 7.2, None)])
    verdict = run.judge(cut=12, skew_s=4.5)
    assert sorted((v.kind, v.slot) for v in verdict.violations) == [("missed", key(10)), ("phantom", key(7))]


# --------------------------------------------------------------------------- fire delay


def fire_at(run: RunBuilder, job: str, slot: float, delay: float) -> None:
    """Slot ``slot`` claimed ``delay - 0.01`` s after its instant, its request arriving ``delay`` s after it."""
    run.ran(job, slot, attempts=[(S.SUCCEEDED, slot + delay - 0.01, slot + delay + 0.05, None)])


def late_run(run: RunBuilder, delays: list[float]) -> float:
    """One rate(20 seconds) job whose slot i fires delays[i] late; returns the cut (the last slot)."""
    job = run.job("rate-00", "rate", "rate(20 seconds)", first=0)
    for index, delay in enumerate(delays):
        fire_at(run, job, index * 20, delay)
    return (len(delays) - 1) * 20


def test_delays_are_percentiles_by_nearest_rank() -> None:
    assert Delays.of([]) is None
    assert Delays.of([3.0, 1.0, 2.0]) == Delays(count=3, p50=2.0, p99=3.0, max=3.0)
    hundred = Delays.of(i / 10 for i in range(100, 0, -1))
    assert hundred == Delays(count=100, p50=5.0, p99=9.9, max=10.0)
    assert Delays.of([0.5] * 98 + [7.0, 8.0]) == Delays(count=100, p50=0.5, p99=7.0, max=8.0)


def test_fire_and_claim_delay_percentiles_of_a_run(run: RunBuilder) -> None:
    delays = [i / 10 for i in range(1, 101)]  # 0.1 .. 10.0 s
    verdict = run.judge(cut=late_run(run, delays))
    assert verdict.ok, verdict.violations
    assert verdict.fire_delay is not None and verdict.claim_delay is not None
    fire = verdict.fire_delay
    assert (fire.count, fire.p50, fire.p99, fire.max) == (100, approx(5.0), approx(9.9), approx(10.0))
    assert (verdict.claim_delay.p50, verdict.claim_delay.p99) == (approx(4.99), approx(9.89))
    assert verdict.line().endswith(", fire delay p50 5.00 s p99 9.90 s max 10.00 s (100 slots)")
    assert any(
        n.startswith("claim delay (to attempt 1's claim) p50 4.99 s p99 9.89 s") for n in verdict.notes
    )


def test_one_late_slot_in_a_hundred_is_not_the_p99_two_are(tmp_path: Path) -> None:
    one = RunBuilder(tmp_path / "one")
    verdict = one.judge(cut=late_run(one, [0.2] * 99 + [60.0]))
    assert verdict.ok and verdict.fire_delay is not None
    assert (verdict.fire_delay.p99, verdict.fire_delay.max) == (approx(0.2), approx(60.0))

    two = RunBuilder(tmp_path / "two")
    verdict = two.judge(cut=late_run(two, [0.2] * 98 + [60.0, 45.0]))
    assert not verdict.ok and verdict.fire_delay is not None and verdict.fire_delay.p99 == approx(45.0)
    [violation] = verdict.violations
    assert violation.kind == "lateness"
    assert str(violation).startswith("lateness: fire delay p99 45.00 s is over the bound of 10 s")
    assert f"rate-00 {key(98 * 20)} 60.0 s, rate-00 {key(99 * 20)} 45.0 s" in violation.detail
    # the line shows it (and does not count it among "other violations")
    assert verdict.line().endswith(
        "fire delay p50 0.20 s p99 45.00 s max 60.00 s (100 slots; p99 over the 10 s bound)"
    )


def test_the_bound_is_a_setting_and_p99_at_the_bound_passes(tmp_path: Path) -> None:
    delays = [1.0] * 98 + [12.0, 12.0]
    at_bound = RunBuilder(tmp_path / "a")
    assert at_bound.judge(cut=late_run(at_bound, delays), max_p99_delay_s=12.0).ok
    below = RunBuilder(tmp_path / "b")
    verdict = below.judge(cut=late_run(below, delays), max_p99_delay_s=11.9)
    assert [v.kind for v in verdict.violations] == ["lateness"]
    assert "bound of 11.9 s" in verdict.violations[0].detail


def test_the_cli_fails_a_run_over_the_bound_and_names_the_figure(
    run: RunBuilder, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = late_run(run, [0.5] * 90 + [30.0] * 10)
    run_dir = run.save(cut, Bounds())
    assert judge_dir(run_dir).too_late
    assert cli.main(["verdict", str(run_dir)]) == 1
    captured = capsys.readouterr()
    assert captured.out.strip().endswith("p99 30.00 s max 30.00 s (100 slots; p99 over the 10 s bound)")
    assert "chaos: VIOLATION lateness: fire delay p99 30.00 s is over the bound of 10 s" in captured.err
    assert "lateness: fire delay p99 30.00 s" in (run_dir / "violations.txt").read_text()
    # the bound the run recorded, overridden when judging again
    assert cli.main(["verdict", str(run_dir), "--max-p99-delay-s", "45"]) == 0
    assert capsys.readouterr().out.strip().endswith("p99 30.00 s max 30.00 s (100 slots)")


def test_every_slot_counts_whatever_a_kill_did_to_it_in_its_category(run: RunBuilder) -> None:
    on_time = run.job("rate-00", "rate", "rate(60 seconds)", first=0)
    run.ran(on_time, 0)
    run.ran(on_time, 60)
    # a retry: the slot's delay is its first attempt's, not the retry's 3 s later
    retry = {"max_attempts": 5, "backoff": "fixed", "base_seconds": 3, "max_seconds": 3, "jitter": False}
    flaky = run.job("flaky-00", "flaky", "rate(100 seconds)", first=0, retry=retry)
    run.ran(
        flaky,
        0,
        attempts=[(S.FAILED, 0.1, 0.2, "HTTP 500"), (S.SUCCEEDED, 3.3, 3.4, None)],
        requests=[(1, 0.11, 0.19, 500), (2, 3.31, 3.39, 200)],
    )
    # a first attempt lost with its worker before it called the target: taken over as attempt 2
    # once the lease lapsed (its worker died at 1.0: the re-run started 8 s after the death)
    lost = run.job("rate-01", "rate", "rate(100 seconds)", first=0)
    run.ran(
        lost,
        0,
        attempts=[(S.TIMED_OUT, 0.1, 9.0, LEASE_LOST_NOTE), (S.SUCCEEDED, 9.0, 9.5, None)],
        requests=[(2, 9.1, 9.4, 200)],
    )
    run.kill("worker-1", 1.0)
    # held by a worker killed before it fired (its batch came back after its lease); a slot whose
    # worker was killed after its request arrived is untouched
    held = run.job("rate-02", "rate", "rate(60 seconds)", first=0)
    fire_at(run, held, 0, 8.5)
    fire_at(run, held, 60, 0.11)
    run.kill("worker-2", 0.5, held=[(held, 0, 1)])
    run.kill("worker-chaos", 60.5, held=[(held, 60, 1)])
    # late after a Lambda worker died at its release, though no snapshot saw it held
    unseen = run.job("rate-03", "rate", "rate(60 seconds)", first=0)
    fire_at(run, unseen, 0, 7.0)
    fire_at(run, unseen, 60, 0.1)
    run.kill("worker-1", 0.2)
    # a run cut mid-way: its request arrived, its worker died at 30.5, attempt 2 started at 38.6
    cut = run.job("ecs-00", "ecs", "rate(60 seconds)", first=0, runtime="ecs")
    run.ran(
        cut,
        0,
        attempts=[(S.TIMED_OUT, 0.1, 38.5, LEASE_LOST_NOTE), (S.SUCCEEDED, 38.6, 50.0, None)],
        requests=[(1, 0.12, 30.6, 200), (2, 38.7, 49.9, 200)],
    )
    run.kill("ecs-worker", 30.5)
    fire_at(run, cut, 60, 6.0)  # 6 s late with no ECS worker killed: untouched, late all the same
    # delay(...) and after(...) slots: their instants are other runs' ends
    chain = run.job("delay-00", "delay", "delay(50 seconds)", first=None)
    run.ran(chain, 50, attempts=[(S.SUCCEEDED, 70.0, 70.1, None)])
    a = run.job("pair-00a", "pair", "rate(100 seconds)", first=0)
    b = run.job("pair-00b", "pair", "rate(100 seconds)", first=0)
    child = run.job("after-pair-00", "after", "after(a, b)", first=None, parents=("pair-00a", "pair-00b"))
    run.ran(a, 0)
    run.ran(b, 0)
    run.ran(child, 0, attempts=[(S.SUCCEEDED, 40.0, 40.1, None)])

    verdict = run.judge(cut=60)
    assert verdict.ok, verdict.violations
    # Only the slots late by design are left out: none for what a kill did
    assert verdict.delay_excluded == {"after(...) slots": 1, "delay(...) slots": 1}
    categories = {(d.job, d.slot): d.category for d in verdict.delays}
    assert categories == {
        ("rate-00", key(0)): UNTOUCHED,
        ("rate-00", key(60)): UNTOUCHED,
        ("flaky-00", key(0)): UNTOUCHED,
        ("rate-01", key(0)): DIED_BEFORE_TARGET,
        ("rate-02", key(0)): DIED_BEFORE_TARGET,
        ("rate-02", key(60)): UNTOUCHED,
        ("rate-03", key(0)): DIED_BEFORE_TARGET,
        ("rate-03", key(60)): UNTOUCHED,
        ("ecs-00", key(0)): CUT_MID_WAY,
        ("ecs-00", key(60)): UNTOUCHED,
        ("pair-00a", key(0)): UNTOUCHED,
        ("pair-00b", key(0)): UNTOUCHED,
    }
    assert verdict.fire_delay is not None and verdict.fire_delay.count == 12
    assert 9.0 < verdict.fire_delay.max < 9.2  # rate-01: the re-run's request, 9.1 s after the slot
    died = verdict.categories[DIED_BEFORE_TARGET]
    assert died.count == 3 and 8.4 < died.p99 < 9.2
    assert verdict.categories[CUT_MID_WAY].count == 1
    # The re-runs, from the death to the next attempt's start: rate-01 (1.0 -> 9.0), ecs-00 (30.5 -> 38.6)
    assert verdict.reruns is not None and verdict.reruns.count == 2
    assert 7.9 < verdict.reruns.p50 < 8.2 and 8.0 < verdict.reruns.max < 8.2
    assert any(n.startswith("fire delay by category: untouched") for n in verdict.notes)
    assert any(
        n.startswith("runs cut mid-way, from the death to the re-run's start: p50 8.") for n in verdict.notes
    )


def test_slots_a_pause_or_an_update_may_delay_do_not_count(run: RunBuilder) -> None:
    paused = run.job("rate-00", "rate", "rate(10 seconds)", first=0)
    run.change("rate-00", "pause", 100, 2, "PAUSED", None)
    replaced = run.job("rate-01", "rate", "rate(10 seconds)", first=0)
    run.change("rate-01", "update", 100, 2, "ENABLED", 110)
    for slot in range(0, 40, 10):
        run.ran(paused, slot)
        run.ran(replaced, slot)
    # due within the guard before the pause/update, released late (a poller that restarted)
    fire_at(run, paused, 50, 45.0)
    fire_at(run, replaced, 60, 35.0)
    for slot in range(110, 155, 5):  # the new version's slots (rate(5 seconds) from 110)
        run.ran(replaced, slot)
    verdict = run.judge(cut=150)
    assert verdict.ok, verdict.violations
    assert verdict.slots == 4 + 4 + 9
    assert verdict.fire_delay is not None
    assert verdict.fire_delay.count == 17 and verdict.fire_delay.max < 0.2


def test_a_jittered_slot_is_late_from_its_jittered_instant(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(60 seconds)", first=0, jitter=30)
    offsets = [jitter_offset_s(job, at(slot), 30) for slot in (0, 60, 120)]
    assert any(offsets)  # (the job id hashes to some jitter: else this test proves nothing)
    for slot, offset in zip((0, 60, 120), offsets, strict=True):
        fire_at(run, job, slot + offset, 0.25)
        run.executions[job][-1] = run.executions[job][-1].model_copy(update={"slot": key(slot)})
        run.receiver[-1]["slot"] = key(slot)
        run.receiver[-1]["key"] = f"{job}:{key(slot)}"
    verdict = run.judge(cut=120)
    assert verdict.ok, verdict.violations
    assert verdict.fire_delay is not None and verdict.fire_delay.count == 3
    assert (verdict.fire_delay.p50, verdict.fire_delay.max) == (approx(0.25), approx(0.25))


def test_no_slot_that_counts_is_no_figure(run: RunBuilder) -> None:
    chain = run.job("delay-00", "delay", "delay(50 seconds)", first=None)
    run.ran(chain, 50)
    verdict = run.judge(cut=60)
    assert verdict.ok and verdict.fire_delay is None
    assert verdict.line().endswith(", faults 3, fire delay - (0 slots)")


def _doomed_with_alerts(run: RunBuilder) -> str:
    retry = {"max_attempts": 1, "backoff": "fixed", "base_seconds": 2, "max_seconds": 2, "jitter": False}
    rule = {"on": ["failed"], "target": {"type": "http", "url": "http://127.0.0.1:1/alert/doomed-00"}}
    job = run.job(
        "doomed-00", "doomed", "rate(20 seconds)", first=0, retry=retry, meant_to_fail=True, alerts=[rule]
    )
    for slot in (0, 20, 40):
        run.ran(job, slot, requests=[(1, slot + 0.11, slot + 0.19, 500)], final=S.FAILED)
    return job


def _alerted(
    run: RunBuilder,
    job: str,
    slot: float,
    arrivals: tuple[float, ...] = (0.5,),
    tries: int = 1,
    status: str = "SENT",
) -> None:
    delivery = {"rule": 0, "status": status, "tries": tries}
    run.alerts.setdefault(job, []).append(
        {"key_slot": key(slot), "condition": "failed", "status": status, "deliveries": [delivery]}
    )
    for offset in arrivals:
        body = {"job_id": job, "slot": key(slot), "condition": "failed"}
        alert_key = f"{job}:{key(slot)}#alert-failed"
        run.alert_arrivals.append(
            {"name": "doomed-00", "key": alert_key, "arrived": ts(slot + offset), "body": body}
        )


def test_the_alert_ledger_holds_one_failed_alert_per_failed_slot(run: RunBuilder) -> None:
    job = _doomed_with_alerts(run)
    for slot in (0, 20, 40):
        _alerted(run, job, slot)
    verdict = run.judge(cut=50)
    assert verdict.ok, verdict.violations
    assert (
        "alerts per (slot, condition): arrivals 3, failed SENT 3, failed slots 3, tries recorded 3"
        in verdict.notes
    )
    assert "target calls per attempt: attempts called once 3" in verdict.notes


def test_a_missing_alert_a_stray_one_and_a_second_delivery_are_violations(run: RunBuilder) -> None:
    job = _doomed_with_alerts(run)
    _alerted(run, job, 0, arrivals=(0.5, 3.0))  # delivered twice for one try, no worker killed in between
    _alerted(run, job, 20)
    run.alerts[job].append({"key_slot": key(30), "condition": "failed", "status": "SENT"})  # never failed
    # (a slot after the cut may still be running while the records and the alerts are read: its
    # alert, written after its record was read, is not held against it)
    run.alerts[job].append({"key_slot": key(60), "condition": "failed", "status": "SENT"})
    verdict = run.judge(cut=50)
    details = sorted((v.kind, v.slot, v.detail) for v in verdict.violations)
    assert details == [
        ("alert", key(0), "the failed alert reached doomed-00 2 times for 1 recorded tries"),
        ("alert", key(30), "a failed alert for a slot that did not fail (no record)"),
        ("alert", key(40), "ended FAILED but has no failed alert"),
    ]


def test_an_alert_made_while_the_records_were_read_is_not_a_stray_one(run: RunBuilder) -> None:
    # Given a slot still waiting for its retry when its record was read, which then failed for good
    # (its alert made) before the alert ledger was read: the collection's own race, not a stray alert
    job = _doomed_with_alerts(run)
    for slot in (0, 20, 40):
        _alerted(run, job, slot)
    run.alerts_before = {job: [dict(a) for a in run.alerts[job]]}
    run.ran(job, 60, requests=[(1, 60.11, 60.19, 500)], final=S.RETRY_WAIT)
    _alerted(run, job, 60)
    assert run.judge(cut=50).ok
    # But one already in the ledger read before the records, for a slot that had not failed, is
    # (judged with the slot owed: a cut after it; a slot after the cut is not compared at all)
    run.alerts_before[job].append({"key_slot": key(60), "condition": "failed", "status": "SENT"})
    details = [(v.kind, v.slot, v.detail) for v in run.judge(cut=70).violations if v.kind == "alert"]
    assert details == [("alert", key(60), "a failed alert for a slot that did not fail (RETRY_WAIT)")]


def test_an_alert_left_sending_or_sent_without_arriving_is_a_violation_and_failed_tries_are_counted(
    run: RunBuilder,
) -> None:
    job = _doomed_with_alerts(run)
    _alerted(run, job, 0, arrivals=(0.5, 2.0, 7.0), tries=3, status="FAILED")  # an endpoint that fails
    _alerted(run, job, 20, arrivals=(), status="SENDING")
    _alerted(run, job, 40, arrivals=())
    verdict = run.judge(cut=50)
    details = sorted((v.kind, v.slot, v.detail) for v in verdict.violations)
    assert details == [
        ("alert", key(20), "the failed alert was left SENDING"),
        ("alert", key(40), "the failed alert is recorded SENT to doomed-00 but never reached it"),
    ]
    assert any("failed FAILED 1" in note and "tries recorded 5" in note for note in verdict.notes)


def test_an_alert_still_being_delivered_when_the_ledger_is_read_is_counted_not_judged(
    run: RunBuilder,
) -> None:
    job = _doomed_with_alerts(run)
    _alerted(run, job, 0)
    _alerted(run, job, 20)
    _alerted(run, job, 40, arrivals=(0.5, 11.0), status="SENDING")  # its first rule on its second try
    run.alerts[job][-1].update(deliveries=[], claimed_at=at(80).isoformat())  # collected at 80: fresh
    verdict = run.judge(cut=50)
    assert verdict.ok, verdict.violations
    assert any("failed still being delivered 1" in note for note in verdict.notes)


def test_a_second_delivery_after_a_killed_worker_is_not_a_duplicate(run: RunBuilder) -> None:
    job = _doomed_with_alerts(run)
    _alerted(run, job, 0, arrivals=(0.5, 3.0))
    _alerted(run, job, 20)
    _alerted(run, job, 40)
    run.kill("worker-1", 1.0)
    verdict = run.judge(cut=50)
    assert verdict.ok, verdict.violations
    assert any("re-sent after a lost worker 1" in note for note in verdict.notes)


def test_an_attempt_answered_by_the_target_that_the_receiver_never_saw_is_named(run: RunBuilder) -> None:
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    run.ran(job, 0, requests=[])  # recorded SUCCEEDED, but no request reached the target
    run.ran(job, 5)
    verdict = run.judge(cut=8)
    assert ("target calls", key(0)) in [(v.kind, v.slot) for v in verdict.violations]
    assert (
        "target calls per attempt: answered attempts never called 1, attempts called once 1" in verdict.notes
    )


# --------------------------------------------------------------------------- backfill


def _backfilled(run: RunBuilder, ids: tuple[str, str] = ("b1", "b1")) -> str:
    job = run.job("backfill-00", "backfill", "* * * * *", first=60)
    for backfill_id, when in zip(ids, (5.0, 5.5), strict=True):
        run.ledger.write(
            "backfill",
            key="backfill-00",
            job_id=job,
            sent=ts(when),
            answered=ts(when + 0.1),
            status=202,
            job={"id": backfill_id, "slots": 3},
            spec={"start": key(-240), "end": key(-60)},
        )
    return job


def _mark(run: RunBuilder, job: str, backfill_id: str | None = "b1") -> None:
    run.executions[job] = [  # the slots before the registration ran through the backfill
        e.model_copy(update={"backfill": backfill_id}) if e.scheduled_at < T0 else e
        for e in run.executions[job]
    ]


def test_backfilled_slots_are_owed_once_and_not_counted_as_fire_delay(run: RunBuilder) -> None:
    job = _backfilled(run)
    for slot in (-240, -180, -120):  # run by the backfill, minutes after their instants
        run.ran(job, slot, attempts=[(S.SUCCEEDED, 10 + slot / 100, 11 + slot / 100, None)])
    run.ran(job, 60)  # the job's own scheduled slot
    _mark(run, job)
    verdict = run.judge(cut=70)
    assert kinds(verdict) == [] and verdict.slots == 4 and verdict.executed_once == 4
    assert any("backfilled (past slots: late by design) 3" in note for note in verdict.notes)


def test_a_backfilled_slot_run_twice_missing_or_outside_its_backfill_is_named(run: RunBuilder) -> None:
    job = _backfilled(run, ids=("b1", "b2"))
    run.ran(
        job, -240, attempts=[(S.SUCCEEDED, 8, 9, None)], requests=[(1, 8.1, 8.2, 200), (1, 8.3, 8.4, 200)]
    )
    run.ran(job, -180, attempts=[(S.SUCCEEDED, 9, 10, None)])
    run.ran(job, 60)
    _mark(run, job, None)
    verdict = run.judge(cut=70)
    assert set(kinds(verdict)) == {"backfill", "duplicate", "missed"}
    assert any("several backfills" in str(v) for v in verdict.violations)
    assert any("ran outside its backfill" in str(v) for v in verdict.violations)
    assert [v.slot for v in verdict.violations if v.kind == "missed"] == [key(-120)]


def test_a_chain_the_auditor_repaired_fails_the_run_and_is_named(run: RunBuilder) -> None:
    # Given every owed slot ran once, but the chain auditor repaired a chain during the run
    job = run.job("rate-00", "rate", "rate(5 seconds)", first=0)
    for slot in range(0, 25, 5):
        run.ran(job, slot)
    run.chain_repairs.append(
        {
            "job_id": job,
            "repair": "clock",
            "error": "chain repaired (clock): no timer of slot 2026-11-30T10:00:10Z",
            "next_slot": "2026-11-30T10:00:20Z",
            "missed_from": "2026-11-30T10:00:10Z",
            "missed_count": 2,
        }
    )
    verdict = run.judge(cut=20)
    # Then the verdict fails with a violation naming the repair, and its line counts it
    assert not verdict.ok and kinds(verdict) == ["chain repaired"]
    (violation,) = verdict.violations
    assert violation.job == job and violation.slot == "2026-11-30T10:00:10Z"
    assert "2 slot(s) lost" in violation.detail
    assert ", early 0, chain repairs 1, faults 3, " in verdict.line()
    # And the run's files alone judge it the same
    again = judge_dir(run.save(20, Bounds()))
    assert kinds(again) == ["chain repaired"] and ", chain repairs 1, " in again.line()
