"""What a chaos verdict reads and answers, and the evidence its checks share.

:class:`RunData` is a run's saved files (see :mod:`local.chaos.verdict`'s docstring for each);
:class:`Bounds` the tolerances it is held to; :class:`Violation` and :class:`Verdict` the
answer. :class:`Evidence` indexes the run once for every check: the receiver's requests by job
and slot, the execution records by job and slot, the dead letters and failure reports, and the
kills by worker runtime; the small functions below read one piece of it.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from local.chaos import repairs
from local.chaos.lateness import Delays, SlotDelay
from local.chaos.ledger import (
    GUARD_S,
    JobRecord,
    Run,
    load,
    read_jsonl,
)
from punctual.execution import LEASE_LOST_NOTE
from punctual.models import AttemptRecord, Execution, ExecutionStatus

LAMBDA_WORKERS = ("worker-1", "worker-2", "worker-3", "worker-chaos")
ECS_WORKERS = ("ecs-worker", "ecs-worker-2", "ecs-chaos")
MAX_P99_DELAY_S = 10.0
LATENESS = "lateness"  # the kind of the violation a p99 fire delay over its bound is
S = ExecutionStatus


@dataclass(frozen=True)
class Bounds:
    """The verdict's tolerances: correctness bounds of the design, not performance targets.

    Attributes
    ----------
    skew_s
        The largest positive clock offset any poller had: a poller whose clock runs ahead
        releases a slot that much before its instant (the design allows it; it never
        releases it twice). Early is anything earlier still.
    slack_s
        Timestamps come from different processes' reads of the same host clock, and slots
        are whole seconds; a quarter second absorbs rounding, not lateness.
    guard_s
        See :mod:`local.chaos.ledger`.
    max_p99_delay_s
        The largest p99 fire delay a run may have (see the module docstring): a target, under
        the fault mix, for how soon a slot fires after its instant.
    """

    skew_s: float = 0.0
    slack_s: float = 0.25
    guard_s: float = GUARD_S
    max_p99_delay_s: float = MAX_P99_DELAY_S


@dataclass(frozen=True)
class Violation:
    kind: str
    job: str
    slot: str
    detail: str

    def __str__(self) -> str:
        if not self.job:  # about the whole run (lateness)
            return f"{self.kind}: {self.detail}"
        return f"{self.kind}: {self.job} slot {self.slot}: {self.detail}"


@dataclass
class Verdict:
    slots: int = 0
    executed_once: int = 0
    duplicates: int = 0
    missed: int = 0
    early: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # owed slots not (yet) ended as expected
    fire_delay: Delays | None = None  # over the slots that count (module docstring)
    claim_delay: Delays | None = None
    categories: dict[str, Delays] = field(default_factory=dict)  # the fire delay by category (lateness)
    reruns: Delays | None = None  # death to the re-run's start, runs whose worker died
    delays: list[SlotDelay] = field(default_factory=list)
    delay_excluded: dict[str, int] = field(default_factory=dict)  # owed slots left out, by reason
    max_p99_delay_s: float = MAX_P99_DELAY_S

    @property
    def fault_total(self) -> int:
        return sum(self.faults.values())

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def too_late(self) -> bool:
        return self.fire_delay is not None and self.fire_delay.p99 > self.max_p99_delay_s

    def delay_text(self) -> str:
        """``fire delay p50 X s p99 Y s max Z s (N slots)``, saying so when p99 is over the bound."""
        if self.fire_delay is None:
            return "fire delay - (0 slots)"
        over = f"; p99 over the {self.max_p99_delay_s:g} s bound" if self.too_late else ""
        return f"fire delay {self.fire_delay.text()} ({self.fire_delay.count} slots{over})"

    def line(self) -> str:
        text = (
            f"slots {self.slots}, executed once {self.executed_once}, duplicates {self.duplicates}, "
            f"missed {self.missed}, early {self.early}, {repairs.count_text(self.violations)}, "
            f"faults {self.fault_total}, {self.delay_text()}"
        )
        counted = {"duplicate", "missed", "early", LATENESS, repairs.KIND}
        others = sum(1 for v in self.violations if v.kind not in counted)
        return text + (f", other violations {others}" if others else "")


@dataclass
class RunData:
    """Everything the verdict reads."""

    run: Run
    faults: list[dict[str, Any]]
    throttles: Counter[str]
    receiver: list[dict[str, Any]]
    executions: dict[str, list[Execution]]  # by job id
    dead_letters: list[dict[str, Any]]
    failure_reports: list[dict[str, Any]]
    collected_at: float
    bounds: Bounds
    alerts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # the alert ledger, by job id
    alert_arrivals: list[dict[str, Any]] = field(default_factory=list)  # the receiver's /alerts
    # The ledger read before the records: an alert made after (its slot ended while the table was
    # read, its record read before) is not one for a slot that did not fail. None: not read.
    alerts_before: dict[str, list[dict[str, Any]]] | None = None
    chain_repairs: list[dict[str, Any]] = field(
        default_factory=list
    )  # the auditor's (local/chaos/repairs.py)
    receiver_at: float | None = None  # when the receiver's records were taken (None: collected_at)

    @classmethod
    def read(cls, run_dir: Path) -> RunData:
        run = load(run_dir / "ledger.jsonl")
        faults = read_jsonl(run_dir / "faults.jsonl")
        throttles: Counter[str] = Counter()
        for path in sorted((run_dir / "fault-logs").glob("faults-*.jsonl")):
            for item in read_jsonl(path):
                throttles[f"throttle {item.get('service', '?')}"] += 1
        collected = json.loads((run_dir / "collected.json").read_text())
        executions = {
            job_id: [Execution.model_validate(item) for item in items]
            for job_id, items in collected["executions"].items()
        }
        return cls(
            run=run,
            faults=faults,
            throttles=throttles,
            receiver=list(collected["receiver"]),
            executions=executions,
            dead_letters=list(collected.get("dead_letters", [])),
            failure_reports=list(collected.get("failure_reports", [])),
            collected_at=float(collected["collected_at"]),
            bounds=Bounds(**run.meta.get("bounds", {})),
            alerts=dict(collected.get("alerts", {})),
            alert_arrivals=list(collected.get("alert_arrivals", [])),
            alerts_before=collected.get("alerts_before"),
            chain_repairs=list(collected.get("chain_repairs", [])),
            receiver_at=collected.get("receiver_at"),
        )


# --------------------------------------------------------------------------- helpers


def epoch_s(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def answered_ok(record: dict[str, Any]) -> bool:
    return 200 <= int(record.get("status") or 0) < 300


def kill_times(faults: Iterable[dict[str, Any]], names: tuple[str, ...]) -> list[float]:
    return sorted(float(f["t"]) for f in faults if f.get("event") == "kill" and f.get("target") in names)


def held_by_killed(faults: Iterable[dict[str, Any]]) -> dict[tuple[str, str], list[float]]:
    """(job id, slot) -> when a worker holding a delivery of it was killed (the kill's ``held``)."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for fault in faults:
        if fault.get("event") != "kill":
            continue
        for item in fault.get("held") or []:
            if isinstance(item, dict) and item.get("job_id") and item.get("slot"):
                out[(str(item["job_id"]), str(item["slot"]))].append(float(fault["t"]))
    return out


def killed_between(kills: list[float], start: float, end: float) -> bool:
    return any(start <= t <= end for t in kills)


def lease_lost(attempt: AttemptRecord) -> bool:
    return attempt.status is S.TIMED_OUT and (attempt.error or "").startswith(LEASE_LOST_NOTE)


def relative(t: float | None, base: float) -> str:
    return "-" if t is None else f"{t - base:+.1f}s"


class Evidence:
    """The run indexed once for the checks: requests and records by job and slot, kills by runtime."""

    def __init__(self, data: RunData) -> None:
        self.data = data
        self.run = data.run
        self.bounds = data.bounds
        self.lambda_kills = kill_times(data.faults, LAMBDA_WORKERS)
        self.ecs_kills = kill_times(data.faults, ECS_WORKERS)
        self.by_job: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        for record in data.receiver:
            if record.get("job") and record.get("slot"):
                self.by_job[str(record["job"])][str(record["slot"])].append(record)
        self.records: dict[str, dict[str, Execution]] = {
            job_id: {e.slot: e for e in items} for job_id, items in data.executions.items()
        }
        self.dead = {(str(m.get("job_id")), str(m.get("slot"))) for m in data.dead_letters}
        self.reported = {(str(m.get("job_id")), str(m.get("slot"))) for m in data.failure_reports}
        self.held = held_by_killed(data.faults)

    def kills_for(self, job: JobRecord) -> list[float]:
        """When workers of the job's runtime were killed (epoch seconds, in order)."""
        return self.ecs_kills if job.runtime == "ecs" else self.lambda_kills
