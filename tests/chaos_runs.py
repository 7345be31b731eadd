"""Hand-made chaos runs for the verdict's tests: :class:`RunBuilder` writes a ledger, receiver
records and execution records the way a run writes them (tests/unit/test_chaos_verdict*.py)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from local.chaos.ledger import LedgerWriter, load
from local.chaos.verdict import judge
from local.chaos.verdict_data import MAX_P99_DELAY_S, Bounds, RunData, Verdict
from punctual.models import AttemptRecord, Execution, ExecutionStatus

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
        catchup: str | None = None,
    ) -> str:
        job_id = f"id-{job_key}"
        spec: dict[str, Any] = {
            "schedule": schedule,
            "retry": retry or STEADY,
            "runtime": runtime,
            "jitter_seconds": jitter,
        }
        if alerts:
            spec["alerts"] = alerts
        if catchup is not None:
            spec["catchup"] = {"policy": catchup}
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
        self,
        job_key: str,
        op: str,
        when: float,
        version: int,
        state: str,
        first: float | None,
        schedule: str = "rate(5 seconds)",
    ) -> None:
        """A pause, resume or update answered 200; ``first`` (next_fire_at) keeps its milliseconds."""
        nxt = None
        if first is not None:
            nxt = at(first).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            nxt = nxt.replace(".000Z", "Z")
        body = {
            "id": f"id-{job_key}",
            "version": version,
            "schedule": schedule,
            "state": state,
            "next_fire_at": nxt,
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


def kinds(verdict: Verdict) -> list[str]:
    return sorted(v.kind for v in verdict.violations)


def fire_at(run: RunBuilder, job: str, slot: float, delay: float) -> None:
    """Slot ``slot`` claimed ``delay - 0.01`` s after its instant, its request arriving ``delay`` s after it."""
    run.ran(job, slot, attempts=[(S.SUCCEEDED, slot + delay - 0.01, slot + delay + 0.05, None)])


def late_run(run: RunBuilder, delays: list[float]) -> float:
    """One rate(20 seconds) job whose slot i fires delays[i] late; returns the cut (the last slot)."""
    job = run.job("rate-00", "rate", "rate(20 seconds)", first=0)
    for index, delay in enumerate(delays):
        fire_at(run, job, index * 20, delay)
    return (len(delays) - 1) * 20
