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

The run's inputs, the verdict's shape and the evidence index live in
:mod:`local.chaos.verdict_data`; the per-slot checks below (duplicates to outcome) in
:mod:`local.chaos.verdict_checks`; this module derives each job's expected slots, walks them, and
measures the fire delay.

A late slot is not a violation by itself (the run waits for it up to the settle bound), but
the run is held to its **fire delay**:

fire delay
    measured once per owed slot: from the slot's release instant (its instant plus the
    job's ``jitter_seconds`` offset, :func:`punctual.timing.schedules.jitter_offset_s`, as the
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
      slots (due when both parents succeeded): their instant is another run's end (their fire
      delay from it, :meth:`Judge.chained_release`, is a note of its own);
    * retries: an attempt after a failure waits for its backoff instant (judged by
      ``retries`` instead), so a slot's delay is its first request's;
    * backfilled slots (past slots, late by design), and slots due while a job was paused that
      its resume owes (catch-up ``all``: they wait for the resume);
    * slots that are only optional: before a pause, update or the end of the run (within
      the ledger's guard), during a pause, released by a resume's catch-up, skipped because
      a pause came before they started, before the first slot a registration reported;
      that covers the old-version slots an update could delay (later ones are dropped as
      stale) and the slots a pause/resume releases late;
    * slots that never reached the receiver (they are *missed* and fail the run anyway).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from local.chaos import repairs
from local.chaos.lateness import Delays, SlotDelay, by_category, categorize, latest
from local.chaos.lateness import notes as lateness_notes
from local.chaos.ledger import (
    BACKFILLED,
    CAUGHT_UP,
    JobRecord,
    SlotExpectation,
    at_epoch,
    backfilled_slots,
    instant,
    slot_key,
    time_slots,
)
from local.chaos.verdict_checks import SlotChecks
from local.chaos.verdict_counts import AlertCounts, TargetCalls
from local.chaos.verdict_data import (
    LATENESS,
    Evidence,
    RunData,
    S,
    Verdict,
    Violation,
    epoch_s,
)
from punctual.models import Execution
from punctual.timing.schedules import jitter_offset_s, parse_schedule

TIME_KINDS = ("rate", "slow", "cron", "pair", "at", "flaky", "doomed", "ecs", "backfill")


# --------------------------------------------------------------------------- expectations helpers


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
        last = max((epoch_s(r.finished_at) or math.inf) for r in records)
        out[slot] = SlotExpectation(slot, instant(slot), last <= cut, "both parents succeeded", 1)
    return out


# --------------------------------------------------------------------------- judging


class Judge:
    def __init__(self, data: RunData) -> None:
        self.data = data
        self.run = data.run
        self.bounds = data.bounds
        self.verdict = Verdict()
        self.evidence = Evidence(data)
        self.checks = SlotChecks(self.evidence, self.verdict)
        self.by_job = self.evidence.by_job
        self.records = self.evidence.records
        self.held = self.evidence.held
        self.delays: list[SlotDelay] = []
        self.excluded: Counter[str] = Counter()
        self.chained: list[float] = []  # delay(...) and after(...) slots' fire delays (chained_release)
        self.optional_ran = 0
        self.owed_by_kind: Counter[str] = Counter()
        self.calls = TargetCalls(data.receiver_at or data.collected_at)
        self.alert_counts = AlertCounts(
            data.alert_arrivals, data.collected_at, data.alerts_before, data.run.cut
        )

    def violate(self, kind: str, job: JobRecord, slot: str, detail: str) -> None:
        self.checks.violate(kind, job, slot, detail)

    def kills_for(self, job: JobRecord) -> list[float]:
        return self.evidence.kills_for(job)

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
            duplicate = self.checks.check_duplicates(job, slot, record, seen)
            self.checks.check_early(job, exp, record, seen)
            self.checks.check_owners(job, slot, record, seen)
            self.checks.check_retries(job, slot, record, seen)
            if job.kind == "after" and (seen or record is not None):
                self.checks.check_parents(job, slot, record, seen)
            if exp.reason == BACKFILLED:
                self.check_backfilled(job, slot, record)
            ended = self.checks.ended_as_expected(job, slot, record, seen)
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
                    self.violate("missed", job, slot, self.checks.diagnose(job, slot, exp, record, seen))
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

    def chained_release(self, job: JobRecord, exp: SlotExpectation) -> float:
        """When a ``delay(...)`` or ``after(...)`` slot was due by its own rule: the chain's next
        instant (the previous run's end plus N), or when the later of its parents ended (its worker
        sends the child's slot then)."""
        if job.kind != "after":
            return exp.instant.timestamp()
        parents = [self.records.get(self.run.jobs[p].job_id, {}).get(exp.slot) for p in job.parents]
        ends = [epoch_s(p.finished_at) for p in parents if p is not None]
        return max((end for end in ends if end is not None), default=exp.instant.timestamp())

    def measure_delay(
        self, job: JobRecord, exp: SlotExpectation, record: Execution | None, seen: list[dict[str, Any]]
    ) -> None:
        """The fire (and claim) delay of one owed slot, if it counts (see the module docstring)."""
        if job.kind not in TIME_KINDS:
            self.excluded[f"{job.kind}(...) slots"] += 1
            if seen:  # reported beside, from the instant its own rule gives (not held to the bound)
                self.chained.append(float(seen[0]["arrived"]) - self.chained_release(job, exp))
            return
        if exp.reason == BACKFILLED:
            self.excluded["backfilled (past slots: late by design)"] += 1
            return
        if exp.reason == CAUGHT_UP:
            self.excluded["due while paused, run by the resume (late by design)"] += 1
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
                claimed = epoch_s(one.started_at)
            elif record.attempt == 1:
                claimed = epoch_s(record.started_at)
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
        verdict.violations.append(
            Violation(
                LATENESS,
                "",
                "",
                f"fire delay p99 {fire.p99:.2f} s is over the bound of {self.bounds.max_p99_delay_s:g} s "
                f"(p50 {fire.p50:.2f} s, max {fire.max:.2f} s, {fire.count} slots; "
                f"the latest: {latest(verdict.delays)})",
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
            "fire delay of the delay(...) and after(...) slots from their own rule's instant (the chain's"
            " next, the later parent's end), not held to the bound: " + _delay_text(Delays.of(self.chained)),
            f"latest fire delays: {latest(verdict.delays)}",
            "retry lateness after the backoff instant: max "
            + (f"{max(self.checks.retry_lateness):.1f} s" if self.checks.retry_lateness else "-"),
            f"optional slots that ran: {self.optional_ran}; attempts taken over after a lost worker: "
            f"{self.checks.takeovers}; 2xx re-runs after a lost worker: {self.checks.reruns_after_loss}; "
            f"dead-lettered messages: {len(self.data.dead_letters)} ({self.own_dead_letters()} of them the "
            "system's own, not re-sent by the driver)",
            self.calls.note(),
            self.alert_counts.note(),
        ]


def _delay_text(delays: Delays | None) -> str:
    return f"{delays.text()} ({delays.count} slots)" if delays is not None else "- (0 slots)"


def judge(data: RunData) -> Verdict:
    """The verdict of one run (see the module docstring)."""
    return Judge(data).judge()


def judge_dir(run_dir: Path, max_p99_delay_s: float | None = None) -> Verdict:
    """Judge a run from its files; ``max_p99_delay_s`` overrides the bound the run recorded."""
    data = RunData.read(run_dir)
    if max_p99_delay_s is not None:
        data.bounds = replace(data.bounds, max_p99_delay_s=max_p99_delay_s)
    return judge(data)
