"""The verdict: the ledger against what the receiver saw and what the table stored.

Inputs (all saved in the run directory, so ``python -m local.chaos verdict DIR`` can judge a
run again): ``ledger.jsonl`` (what was asked, :mod:`local.chaos.ledger`), ``faults.jsonl``
(what was injected) and the throttling logs, ``receiver.json`` (every request the webhook
receiver saw: ``Idempotency-Key``, attempt, arrival, answer), ``executions.json`` (every
execution record of every job, read from DynamoDB on the local moto server, owners and
attempt lists included), ``dlq.json`` and ``failed.json`` (the dead-letter and
failed-executions queues at the end).

For every slot (owed or optional, see :mod:`local.chaos.ledger`):

duplicates
    no attempt reaches the receiver twice; nothing reaches it after the slot's record says
    SUCCEEDED; no attempt beyond the record's; two 2xx answers only when the earlier
    attempt's worker was lost (its attempt is TIMED_OUT "lease expired", and a worker of
    that runtime was killed while it ran: the target's idempotency key is what makes that
    re-run's side effect once);
early
    the first request arrives no earlier than the slot's instant minus the largest clock
    offset a poller had (``Bounds.skew_s``) and a slack for timestamps (``Bounds.slack_s``);
owners
    attempts of one slot never overlap on the record; no late result of a superseded
    worker (a live worker whose lease was taken over); two attempts in flight at the
    receiver at once only if a worker of that runtime was killed between the two arrivals;
    every attempt that ended "lease expired" is explained by a kill;
retries
    an attempt after a failed one starts no earlier than the instant the retry policy gives
    (recomputed with the worker's own seeded jitter) minus the skew;
dependencies
    an ``after(A, B)`` slot runs only when A and B both succeeded for it, and after both;
outcome
    every owed slot ends SUCCEEDED, the receiver having answered its final attempt 2xx
    (jobs meant to fail: FAILED or TIMED_OUT after ``max_attempts``, never a 2xx);
    anything else is *missed*, with a diagnosis.

target calls, alerts
    counted in :mod:`local.chaos.verdict_counts`: each attempt calls the target at most once,
    and exactly once when its record holds the target's answer; each (slot, condition) has one
    alert, ended SENT, FAILED or HELD (never left SENDING), whose copies reached their endpoints
    no more often than their recorded tries (unless a worker was lost in between), and every
    failed slot has its ``failed`` alert. Violations of kinds ``target calls`` and ``alert``; the
    notes give the counts.

A late slot is not a violation by itself (the run waits for it up to the settle bound), but
the run is held to its **fire delay**:

fire delay
    measured once per owed slot: from the slot's release instant (its instant plus the
    job's ``jitter_seconds`` offset, :func:`punctual.schedules.jitter_offset_s`, as the
    ledger recorded the spec) to the first request that reached the receiver for it; beside
    it the *claim delay*, to the moment the worker claimed the slot's first attempt (the
    record's ``started_at`` of attempt 1). The one-line verdict gives p50, p99 and max
    (nearest rank) and how many slots they are over; a p99 above ``Bounds.max_p99_delay_s``
    (10 s) is a violation of kind ``lateness``, and the run fails.

    Which slots count: every owed slot of the time-scheduled kinds (:data:`TIME_KINDS`: rate,
    cron, at and their variants) that reached the receiver, whatever a kill did to it: each is
    put in one of three categories (:mod:`local.chaos.lateness`: untouched, its worker died
    before calling the target, its run was cut mid-way, with the re-run's delay from the death),
    and the p99 over all of them is what the run is held to. Left out, each counted in the notes,
    are slots whose lateness is large by design:

    * ``delay(...)`` slots (each due after the previous run ended) and ``after(...)``
      slots (due when both parents succeeded): their instant is another run's end;
    * retries: an attempt after a failure waits for its backoff instant (judged by
      ``retries`` instead), so a slot's delay is its first request's;
    * backfilled slots (past slots, late by design);
    * slots that are only optional: before a pause, update or the end of the run (within
      the ledger's guard), during a pause, released by a resume's catch-up, skipped because
      a pause came before they started, before the first slot a registration reported;
      that covers the old-version slots an update could delay (later ones are dropped as
      stale) and the slots a pause/resume releases late;
    * slots that never reached the receiver (they are *missed* and fail the run anyway).
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from local.chaos import repairs
from local.chaos.lateness import Delays, SlotDelay, by_category, categorize
from local.chaos.lateness import notes as lateness_notes
from local.chaos.ledger import (
    BACKFILLED,
    GUARD_S,
    JobRecord,
    Run,
    SlotExpectation,
    at_epoch,
    backfilled_slots,
    instant,
    load,
    read_jsonl,
    slot_key,
    time_slots,
)
from local.chaos.verdict_counts import AlertCounts, TargetCalls
from punctual.execution import LEASE_LOST_NOTE
from punctual.models import AttemptRecord, Execution, ExecutionStatus, RetryPolicy
from punctual.retries import next_retry_at, seeded_random
from punctual.schedules import jitter_offset_s, parse_schedule

LAMBDA_WORKERS = ("worker-1", "worker-2", "worker-3", "worker-chaos")
ECS_WORKERS = ("ecs-worker", "ecs-chaos")
TIME_KINDS = ("rate", "slow", "cron", "pair", "at", "flaky", "doomed", "ecs", "backfill")
SUPERSEDED_MARK = "(superseded)"
MAX_P99_DELAY_S = 10.0
LATENESS = "lateness"
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


def _ts(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def _ok(record: dict[str, Any]) -> bool:
    return 200 <= int(record.get("status") or 0) < 300


def _kills(faults: Iterable[dict[str, Any]], names: tuple[str, ...]) -> list[float]:
    return sorted(float(f["t"]) for f in faults if f.get("event") == "kill" and f.get("target") in names)


def _held_by_killed(faults: Iterable[dict[str, Any]]) -> dict[tuple[str, str], list[float]]:
    """(job id, slot) -> when a worker holding a delivery of it was killed (the kill's ``held``)."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for fault in faults:
        if fault.get("event") != "kill":
            continue
        for item in fault.get("held") or []:
            if isinstance(item, dict) and item.get("job_id") and item.get("slot"):
                out[(str(item["job_id"]), str(item["slot"]))].append(float(fault["t"]))
    return out


def _killed_between(kills: list[float], start: float, end: float) -> bool:
    return any(start <= t <= end for t in kills)


def _lease_lost(attempt: AttemptRecord) -> bool:
    return attempt.status is S.TIMED_OUT and (attempt.error or "").startswith(LEASE_LOST_NOTE)


def _rel(t: float | None, base: float) -> str:
    return "-" if t is None else f"{t - base:+.1f}s"


def _delay_seconds(schedule: str) -> int:
    parsed = parse_schedule(schedule, "UTC")
    period = getattr(parsed, "period", None)
    return int(period.total_seconds()) if isinstance(period, timedelta) else 0


def _ceil_s(moment: datetime) -> datetime:
    whole = moment.replace(microsecond=0)
    return whole if whole == moment else whole + timedelta(seconds=1)


# --------------------------------------------------------------------------- expectations


def delay_slots(job: JobRecord, executions: dict[str, Execution], cut: float) -> dict[str, SlotExpectation]:
    """The chain of a ``delay(N)`` job: the first slot, then each N after the previous run ended.

    Never a slot at or before the previous one: a chain that names its own slot again has stopped.
    """
    n = _delay_seconds(job.spec["schedule"])
    low = math.ceil(job.registered_sent) + n
    high = math.ceil(job.registered_answered) + n
    ran = sorted(executions)
    first = next((s for s in ran if low <= instant(s).timestamp() <= high), None)
    out: dict[str, SlotExpectation] = {}
    if first is None:
        moment = at_epoch(high)
        out[slot_key(moment)] = SlotExpectation(
            slot_key(moment), moment, high <= cut, "first slot (registration + delay)", 1
        )
        return out
    current: str | None = first
    for _ in range(100_000):
        if current is None:
            break
        moment = instant(current)
        out[current] = SlotExpectation(current, moment, moment.timestamp() <= cut, "delay chain", 1)
        record = executions.get(current)
        if record is None or not record.status.terminal or record.finished_at is None:
            break
        if record.status is S.SKIPPED:
            break
        # The spec: the next run N after this one ended, and a chain always moves forward (a run a
        # skewed poller released early can end before its own slot: the next is still after it).
        nxt = _ceil_s(max(record.finished_at, moment)) + timedelta(seconds=n)
        current = slot_key(nxt)
    return out


def after_slots(
    job: JobRecord, parents: list[dict[str, Execution]], cut: float
) -> dict[str, SlotExpectation]:
    """Slots both parents succeeded for; owed when the later success was before the cut."""
    out: dict[str, SlotExpectation] = {}
    if not parents:
        return out
    common = set.intersection(*(set(p) for p in parents))
    for slot in sorted(common):
        records = [p[slot] for p in parents]
        if not all(r.status is S.SUCCEEDED for r in records):
            continue
        last = max((_ts(r.finished_at) or math.inf) for r in records)
        out[slot] = SlotExpectation(slot, instant(slot), last <= cut, "both parents succeeded", 1)
    return out


# --------------------------------------------------------------------------- judging


class Judge:
    def __init__(self, data: RunData) -> None:
        self.data = data
        self.run = data.run
        self.bounds = data.bounds
        self.verdict = Verdict()
        self.lambda_kills = _kills(data.faults, LAMBDA_WORKERS)
        self.ecs_kills = _kills(data.faults, ECS_WORKERS)
        self.by_job: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        for record in data.receiver:
            if record.get("job") and record.get("slot"):
                self.by_job[str(record["job"])][str(record["slot"])].append(record)
        self.records: dict[str, dict[str, Execution]] = {
            job_id: {e.slot: e for e in items} for job_id, items in data.executions.items()
        }
        self.dead = {(str(m.get("job_id")), str(m.get("slot"))) for m in data.dead_letters}
        self.reported = {(str(m.get("job_id")), str(m.get("slot"))) for m in data.failure_reports}
        self.held = _held_by_killed(data.faults)
        self.delays: list[SlotDelay] = []
        self.excluded: Counter[str] = Counter()
        self.retry_lateness: list[float] = []
        self.optional_ran = 0
        self.reruns_after_loss = 0
        self.takeovers = 0
        self.owed_by_kind: Counter[str] = Counter()
        self.calls = TargetCalls(data.receiver_at or data.collected_at)
        self.alert_counts = AlertCounts(
            data.alert_arrivals, data.collected_at, data.alerts_before, data.run.cut
        )

    def violate(self, kind: str, job: JobRecord, slot: str, detail: str) -> None:
        self.verdict.violations.append(Violation(kind, job.key, slot, detail))

    def kills_for(self, job: JobRecord) -> list[float]:
        return self.ecs_kills if job.runtime == "ecs" else self.lambda_kills

    # ------------------------------------------------------------------ per job

    def expectations(self, job: JobRecord) -> dict[str, SlotExpectation]:
        cut = self.run.cut
        mine = self.records.get(job.job_id, {})
        if job.kind in TIME_KINDS:
            slots = time_slots(job, cut, self.data.collected_at, self.bounds.skew_s, self.bounds.guard_s)
            return {**slots, **backfilled_slots(job)}
        if job.kind == "delay":
            return delay_slots(job, mine, cut)
        if job.kind == "after":
            parents = [self.records.get(self.run.jobs[p].job_id, {}) for p in job.parents]
            return after_slots(job, parents, cut)
        raise ValueError(f"unknown job kind {job.kind!r}")

    def judge_job(self, job: JobRecord) -> None:
        expected = self.expectations(job)
        records = self.records.get(job.job_id, {})
        requests = self.by_job.get(job.job_id, {})
        for slot in sorted(set(expected) | set(records) | set(requests)):
            exp = expected.get(slot)
            record = records.get(slot)
            seen = sorted(requests.get(slot, []), key=lambda r: float(r["arrived"]))
            if exp is None:
                if seen or (record is not None and record.status is not S.SKIPPED):
                    status = record.status.value if record else "no record"
                    self.violate(
                        "phantom",
                        job,
                        slot,
                        f"ran but is no slot of its schedule during the run ({status}, "
                        f"{len(seen)} request(s))",
                    )
                continue
            duplicate = self.check_duplicates(job, slot, record, seen)
            self.check_early(job, exp, record, seen)
            self.check_owners(job, slot, record, seen)
            self.check_retries(job, slot, record, seen)
            if job.kind == "after" and (seen or record is not None):
                self.check_parents(job, slot, record, seen)
            if exp.reason == BACKFILLED:
                self.check_backfilled(job, slot, record)
            ended = self.ended_as_expected(job, slot, record, seen)
            if exp.owed and not ended and self.skipped_by_pause(job, exp, record, seen):
                exp = SlotExpectation(slot, exp.instant, False, "not started before a pause", exp.version)
            if exp.owed:
                self.verdict.slots += 1
                self.owed_by_kind[job.kind] += 1
                if ended and not duplicate:
                    self.verdict.executed_once += 1
                elif not ended:
                    self.verdict.missed += 1
                    self.verdict.pending.append(f"{job.key} {slot}")
                    self.violate("missed", job, slot, self.diagnose(job, slot, exp, record, seen))
                self.measure_delay(job, exp, record, seen)
            elif seen:
                self.optional_ran += 1

    def check_backfilled(self, job: JobRecord, slot: str, record: Execution | None) -> None:
        """A backfilled slot ran through its backfill (the record names it), and every request for
        the same range named the same backfill (a repeated request started nothing new)."""
        ids = {backfill_id for _, _, backfill_id in job.backfills}
        if len(ids) > 1:
            self.violate("backfill", job, slot, f"one range, several backfills: {sorted(ids)}")
        if record is not None and record.backfill not in ids:
            self.violate(
                "backfill", job, slot, f"ran outside its backfill (record names {record.backfill!r})"
            )

    def release_instant(self, job: JobRecord, exp: SlotExpectation) -> float:
        """The slot's instant plus the jitter of the spec version it belongs to."""
        jitter = next((e.jitter_s for e in job.epochs if e.version == exp.version), 0)
        if jitter <= 0:
            return exp.instant.timestamp()
        return exp.instant.timestamp() + jitter_offset_s(job.job_id, exp.instant, jitter)

    def measure_delay(
        self, job: JobRecord, exp: SlotExpectation, record: Execution | None, seen: list[dict[str, Any]]
    ) -> None:
        """The fire (and claim) delay of one owed slot, if it counts (see the module docstring)."""
        if job.kind not in TIME_KINDS:
            self.excluded[f"{job.kind}(...) slots"] += 1
            return
        if exp.reason == BACKFILLED:
            self.excluded["backfilled (past slots: late by design)"] += 1
            return
        if not seen:
            self.excluded["never reached the receiver"] += 1
            return
        release = self.release_instant(job, exp)
        arrived = float(seen[0]["arrived"])
        held_at = self.held.get((job.job_id, exp.slot), [])
        category, rerun = categorize(release, record, seen, self.kills_for(job), held_at)
        claimed: float | None = None
        if record is not None:
            one = next((a for a in record.attempts if a.attempt == 1), None)
            if one is not None:
                claimed = _ts(one.started_at)
            elif record.attempt == 1:
                claimed = _ts(record.started_at)
        claim_s = None if claimed is None else claimed - release
        self.delays.append(SlotDelay(job.key, exp.slot, arrived - release, claim_s, category, rerun))

    def judge_delays(self) -> None:
        verdict = self.verdict
        verdict.delays = sorted(self.delays, key=lambda d: d.fire_s)
        verdict.fire_delay = Delays.of(d.fire_s for d in self.delays)
        verdict.claim_delay = Delays.of(d.claim_s for d in self.delays if d.claim_s is not None)
        verdict.categories = by_category(self.delays)
        verdict.reruns = Delays.of(d.rerun_s for d in self.delays if d.rerun_s is not None)
        verdict.delay_excluded = dict(sorted(self.excluded.items()))
        verdict.max_p99_delay_s = self.bounds.max_p99_delay_s
        fire = verdict.fire_delay
        if fire is None or not verdict.too_late:
            return
        latest = ", ".join(f"{d.job} {d.slot} {d.fire_s:.1f} s" for d in reversed(verdict.delays[-5:]))
        verdict.violations.append(
            Violation(
                LATENESS,
                "",
                "",
                f"fire delay p99 {fire.p99:.2f} s is over the bound of {self.bounds.max_p99_delay_s:g} s "
                f"(p50 {fire.p50:.2f} s, max {fire.max:.2f} s, {fire.count} slots; the latest: {latest})",
            )
        )

    def skipped_by_pause(
        self, job: JobRecord, exp: SlotExpectation, record: Execution | None, seen: list[dict[str, Any]]
    ) -> bool:
        """A slot due before a pause that had not started when the pause came is skipped, as documented.

        Its record says SKIPPED ("job is paused"), written after the pause request was sent,
        and nothing of it reached the receiver.
        """
        if record is None or record.status is not S.SKIPPED or seen or record.finished_at is None:
            return False
        done = record.finished_at.timestamp()
        return any(
            e.ended_by == "pause"
            and e.ends_sent is not None
            and exp.instant.timestamp() < e.ends_sent <= done
            for e in job.epochs
        )

    # ------------------------------------------------------------------ checks

    def check_duplicates(
        self, job: JobRecord, slot: str, record: Execution | None, seen: list[dict[str, Any]]
    ) -> bool:
        """Count every request that should not have happened once, name each reason."""
        extra: set[int] = set()  # indexes into seen
        first_of: dict[Any, int] = {}
        for index, request in enumerate(seen):
            attempt = request.get("attempt")
            if attempt in first_of:
                extra.add(index)
                self.violate(
                    "duplicate",
                    job,
                    slot,
                    f"attempt {attempt} reached the receiver again at "
                    f"{_rel(float(request['arrived']), float(seen[first_of[attempt]]['arrived']))} "
                    "after its first request",
                )
            else:
                first_of[attempt] = index
        keys = {r.get("key") for r in seen}
        if keys and keys != {f"{job.job_id}:{slot}"}:
            self.violate("duplicate", job, slot, f"requests carried Idempotency-Key {sorted(map(str, keys))}")
        if seen and record is None:
            self.violate(
                "unrecorded",
                job,
                slot,
                f"{len(seen)} request(s) reached the receiver with no execution record",
            )
            return True
        if record is not None:
            done = (
                record.finished_at.timestamp()
                if record.status is S.SUCCEEDED and record.finished_at is not None
                else math.inf
            )
            final = record.attempt if record.status is S.SUCCEEDED else None
            by_attempt = {a.attempt: a for a in record.attempts}
            for index, request in enumerate(seen):
                attempt = int(request.get("attempt") or 0)
                reason = ""
                if attempt > record.attempt:
                    reason = (
                        f"attempt {attempt} reached the receiver; the record ends at attempt "
                        f"{record.attempt} ({record.status.value})"
                    )
                elif float(request["arrived"]) > done:
                    reason = f"attempt {attempt} arrived after the slot had SUCCEEDED"
                elif _ok(request) and attempt != final and attempt != record.attempt:
                    # (a 2xx for the record's own attempt is that attempt: ended, or never recorded)
                    past = by_attempt.get(attempt)
                    if past is not None and _lease_lost(past):
                        self.reruns_after_loss += 1  # its worker died after the side effect (see owners)
                        continue
                    state = f"{past.status.value} {past.error or ''}".strip() if past else "not on the record"
                    reason = (
                        f"attempt {attempt} was answered {request.get('status')} but the record says "
                        f"{state}; "
                        "the slot ran again"
                    )
                if reason:
                    if index not in extra:
                        self.violate("duplicate", job, slot, reason)
                    extra.add(index)
        self.verdict.duplicates += len(extra)
        return bool(extra)

    def check_early(
        self, job: JobRecord, exp: SlotExpectation, record: Execution | None, seen: list[dict[str, Any]]
    ) -> None:
        if job.kind == "after" or exp.instant is None:
            return
        floor = exp.instant.timestamp() - self.bounds.skew_s - self.bounds.slack_s
        starts = [float(r["arrived"]) for r in seen]
        if record is not None:
            starts += [t for a in record.attempts if (t := _ts(a.started_at)) is not None]
            if record.started_at is not None:
                starts.append(record.started_at.timestamp())
        if starts and min(starts) < floor:
            self.verdict.early += 1
            self.violate(
                "early",
                job,
                exp.slot,
                f"started {exp.instant.timestamp() - min(starts):.2f}s before its instant "
                f"(allowed: {self.bounds.skew_s:.2f}s of clock skew + {self.bounds.slack_s:.2f}s)",
            )

    def check_owners(
        self, job: JobRecord, slot: str, record: Execution | None, seen: list[dict[str, Any]]
    ) -> None:
        kills = self.kills_for(job)
        if record is not None:
            ordered = sorted(record.attempts, key=lambda a: a.attempt)
            owners = [a.owner for a in ordered if a.owner]
            for a in ordered:
                if SUPERSEDED_MARK in (a.error or ""):
                    self.violate(
                        "owners",
                        job,
                        slot,
                        f"attempt {a.attempt} was still running after its lease was taken over: {a.error}",
                    )
                if _lease_lost(a):
                    self.takeovers += 1
                    base = instant(slot).timestamp()
                    start, end = _ts(a.started_at), _ts(a.finished_at)
                    if start is not None and end is not None and not _killed_between(kills, start - 1, end):
                        self.violate(
                            "owners",
                            job,
                            slot,
                            f"attempt {a.attempt}'s lease lapsed ({_rel(start, base)} to {_rel(end, base)}) "
                            f"though no {job.runtime} worker was killed",
                        )
            for a, b in itertools.pairwise(ordered):
                a_end, b_start = _ts(a.finished_at), _ts(b.started_at)
                if a_end is not None and b_start is not None and b_start < a_end - 0.001:
                    self.violate(
                        "owners",
                        job,
                        slot,
                        f"attempt {b.attempt} started {a_end - b_start:.3f}s before attempt "
                        f"{a.attempt} ended",
                    )
            if len(owners) != len(set(owners)):
                self.violate("owners", job, slot, "one owner token held two attempts")
        for i, first in enumerate(seen):
            first_end = float(first["answered"]) if first.get("answered") is not None else math.inf
            for second in seen[i + 1 :]:
                if second.get("attempt") == first.get("attempt"):
                    continue  # a duplicate, judged there
                arrived = float(second["arrived"])
                if arrived >= first_end:
                    continue
                if _killed_between(kills, float(first["arrived"]), arrived):
                    continue  # the first one's worker died: a takeover, its request orphaned
                self.violate(
                    "owners",
                    job,
                    slot,
                    f"attempts {first.get('attempt')} and {second.get('attempt')} were in flight at the "
                    "receiver "
                    f"at once and no {job.runtime} worker was killed in between",
                )

    def check_retries(
        self, job: JobRecord, slot: str, record: Execution | None, seen: list[dict[str, Any]]
    ) -> None:
        if record is None:
            return
        policy = RetryPolicy.model_validate(job.spec.get("retry") or {})
        ordered = sorted(record.attempts, key=lambda a: a.attempt)
        starts = {a.attempt: a.started_at for a in ordered}
        if record.started_at is not None:
            starts.setdefault(record.attempt, record.started_at)
        arrivals: dict[int, float] = {}
        for request in seen:
            attempt = int(request.get("attempt") or 0)
            arrivals.setdefault(attempt, float(request["arrived"]))
        tolerance = self.bounds.skew_s + self.bounds.slack_s
        for a in ordered:
            if a.status not in (S.FAILED, S.TIMED_OUT) or _lease_lost(a) or a.finished_at is None:
                continue
            nxt = a.attempt + 1
            if nxt not in starts and nxt not in arrivals:
                continue
            due = next_retry_at(
                policy,
                failed_attempt=a.attempt - record.releases,
                failed_at=a.finished_at,
                scheduled_at=record.scheduled_at,
                rng=seeded_random(job.job_id, slot, a.attempt),
            )
            if due is None:
                self.violate("retries", job, slot, f"attempt {nxt} ran although the policy allowed no retry")
                continue
            began = [t for t in (_ts(starts.get(nxt)), arrivals.get(nxt)) if t is not None]
            if min(began) < due.timestamp() - tolerance:
                self.violate(
                    "retries",
                    job,
                    slot,
                    f"attempt {nxt} started {due.timestamp() - min(began):.2f}s before its backoff instant",
                )
            else:
                self.retry_lateness.append(min(began) - due.timestamp())

    def check_parents(
        self, job: JobRecord, slot: str, record: Execution | None, seen: list[dict[str, Any]]
    ) -> None:
        finishes: list[float] = []
        answers: list[float] = []
        for key in job.parents:
            parent = self.run.jobs[key]
            done = self.records.get(parent.job_id, {}).get(slot)
            if done is None or done.status is not S.SUCCEEDED or done.finished_at is None:
                self.violate(
                    "dependency", job, slot, f"ran though parent {key} did not succeed for this slot"
                )
                return
            finishes.append(done.finished_at.timestamp())
            ok = [float(r["answered"]) for r in self.by_job.get(parent.job_id, {}).get(slot, []) if _ok(r)]
            if ok:
                answers.append(min(ok))
        starts = [float(r["arrived"]) for r in seen]
        if record is not None:
            starts += [t for a in record.attempts if (t := _ts(a.started_at)) is not None]
            if record.started_at is not None:
                starts.append(record.started_at.timestamp())
        if starts and min(starts) < max(finishes) - self.bounds.slack_s:
            self.violate(
                "dependency",
                job,
                slot,
                f"started {max(finishes) - min(starts):.2f}s before its parents ended",
            )
        if seen and answers and float(seen[0]["arrived"]) < max(answers):
            self.violate(
                "dependency", job, slot, "reached the receiver before both parents' successful answers"
            )

    def ended_as_expected(
        self, job: JobRecord, slot: str, record: Execution | None, seen: list[dict[str, Any]]
    ) -> bool:
        if record is None:
            return False
        if job.meant_to_fail:
            if record.status not in (S.FAILED, S.TIMED_OUT):
                if record.status.terminal:
                    self.violate("terminal", job, slot, f"meant to fail, ended {record.status.value}")
                return False
            if any(_ok(r) for r in seen):
                self.violate("terminal", job, slot, "meant to fail, yet the receiver answered 2xx")
            if record.attempt - record.releases < job.max_attempts:
                self.violate(
                    "terminal",
                    job,
                    slot,
                    f"ended {record.status.value} after {record.attempt} of {job.max_attempts} attempts",
                )
            if self.data.failure_reports and (job.job_id, slot) not in self.reported:
                self.violate(
                    "terminal", job, slot, "ended failed but no report reached the failed-executions queue"
                )
            return True
        if record.status is not S.SUCCEEDED:
            return False
        return any(_ok(r) and r.get("attempt") == record.attempt for r in seen)

    def diagnose(
        self,
        job: JobRecord,
        slot: str,
        exp: SlotExpectation,
        record: Execution | None,
        seen: list[dict[str, Any]],
    ) -> str:
        base = exp.instant.timestamp() if exp.instant is not None else self.run.cut
        parts = [f"owed ({exp.reason})"]
        if record is None:
            parts.append("no execution record")
        else:
            lease = ""
            if record.lease_until is not None:
                lapsed = self.data.collected_at - record.lease_until.timestamp()
                lease = f", lease {'lapsed ' + format(lapsed, '.0f') + 's ago' if lapsed > 0 else 'live'}"
            parts.append(
                f"record {record.status.value} attempt {record.attempt}{lease}"
                + (f" ({record.error})" if record.error else "")
            )
            if record.attempts:
                history = "; ".join(
                    f"{a.attempt} {a.status.value} "
                    f"{_rel(_ts(a.started_at), base)}..{_rel(_ts(a.finished_at), base)}"
                    + (f" {a.error}" if a.error else "")
                    for a in record.attempts
                )
                parts.append(f"attempts [{history}]")
        if seen:
            parts.append(
                "receiver: "
                + ", ".join(
                    f"attempt {r.get('attempt')} at {_rel(float(r['arrived']), base)} -> "
                    f"{r.get('status') or 'no answer'}"
                    for r in seen
                )
            )
        else:
            parts.append("receiver saw nothing")
        if (job.job_id, slot) in self.dead:
            parts.append("its message is in the dead-letter queue")
        kills = [
            f"{f['target']} {_rel(float(f['t']), base)}"
            for f in self.data.faults
            if f.get("event") == "kill" and -10 <= float(f["t"]) - base <= 120
        ]
        if kills:
            parts.append("kills: " + ", ".join(kills))
        return "; ".join(parts)

    # ------------------------------------------------------------------ all of it

    def judge(self) -> Verdict:
        for job in self.run.jobs.values():
            self.judge_job(job)
            records = self.records.get(job.job_id, {})
            self.calls.count(job, records, self.by_job.get(job.job_id, {}), self.violate)
            alerts = self.data.alerts.get(job.job_id, [])
            self.alert_counts.count(job, records, alerts, self.kills_for(job), self.violate)
        self.judge_delays()
        self.verdict.violations += [Violation(*v) for v in repairs.violations(self.data.chain_repairs)]
        faults: Counter[str] = Counter()
        for fault in self.data.faults:
            kind = str(fault.get("event"))
            if kind == "kill":
                faults[f"kill -9 {fault.get('target')}"] += 1
            elif kind in ("duplicate", "skewed-poller"):
                faults[kind] += 1
        for event in self.run.events:
            if event["event"] in ("pause", "resume", "update") and int(event.get("status", 0)) == 200:
                faults[f"{event['event']}"] += 1
        faults.update(self.data.throttles)
        self.verdict.faults = dict(sorted(faults.items()))
        self.verdict.notes = self.notes()
        return self.verdict

    def own_dead_letters(self) -> int:
        resent = {
            (f.get("job_id"), f.get("slot"), f.get("attempt"), f.get("released_at"))
            for f in self.data.faults
            if f.get("event") == "duplicate"
        }
        return sum(
            1
            for m in self.data.dead_letters
            if (m.get("job_id"), m.get("slot"), m.get("attempt"), m.get("released_at")) not in resent
        )

    def notes(self) -> list[str]:
        verdict = self.verdict
        claim = verdict.claim_delay
        left_out = ", ".join(f"{k} {v}" for k, v in verdict.delay_excluded.items()) or "none"
        return [
            "faults: " + ", ".join(f"{k} {v}" for k, v in verdict.faults.items()),
            "owed slots by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(self.owed_by_kind.items())),
            f"{verdict.delay_text()}, from the release instant to the first request at the receiver; "
            f"bound: p99 at most {self.bounds.max_p99_delay_s:g} s",
            "claim delay (to attempt 1's claim) "
            + (f"{claim.text()} ({claim.count} slots)" if claim else "- (0 slots)"),
            *lateness_notes(verdict.categories, verdict.reruns),
            f"owed slots left out of the fire delay: {left_out}",
            "latest fire delays: "
            + (", ".join(f"{d.job} {d.slot} {d.fire_s:.1f} s" for d in reversed(verdict.delays[-5:])) or "-"),
            "retry lateness after the backoff instant: max "
            + (f"{max(self.retry_lateness):.1f} s" if self.retry_lateness else "-"),
            f"optional slots that ran: {self.optional_ran}; attempts taken over after a lost worker: "
            f"{self.takeovers}; 2xx re-runs after a lost worker: {self.reruns_after_loss}; "
            f"dead-lettered messages: {len(self.data.dead_letters)} ({self.own_dead_letters()} of them the "
            "system's own, not re-sent by the driver)",
            self.calls.note(),
            self.alert_counts.note(),
        ]


def judge(data: RunData) -> Verdict:
    """The verdict of one run (see the module docstring)."""
    return Judge(data).judge()


def judge_dir(run_dir: Path, max_p99_delay_s: float | None = None) -> Verdict:
    """Judge a run from its files; ``max_p99_delay_s`` overrides the bound the run recorded."""
    data = RunData.read(run_dir)
    if max_p99_delay_s is not None:
        data.bounds = replace(data.bounds, max_p99_delay_s=max_p99_delay_s)
    return judge(data)
