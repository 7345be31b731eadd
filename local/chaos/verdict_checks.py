"""The per-slot checks of a chaos verdict (the rules are in :mod:`local.chaos.verdict`'s docstring).

:class:`SlotChecks` judges one slot's requests at the receiver and its execution record against
the run's :class:`~local.chaos.verdict_data.Evidence`: duplicates, early starts, owners, retries,
dependencies and the outcome, and writes the diagnosis of a missed slot. Each violation goes into
the verdict it was given; the counts the notes report (takeovers, re-runs after a lost worker,
retry lateness) are kept here.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from local.chaos.ledger import (
    JobRecord,
    SlotExpectation,
    instant,
)
from local.chaos.verdict_data import (
    Evidence,
    S,
    Verdict,
    Violation,
    answered_ok,
    epoch_s,
    killed_between,
    lease_lost,
    relative,
)
from punctual.models import Execution, RetryPolicy
from punctual.timing.retries import next_retry_at, seeded_random

SUPERSEDED_MARK = "(superseded)"


class SlotChecks:
    """The checks of one slot at a time, over the evidence of the whole run."""

    def __init__(self, evidence: Evidence, verdict: Verdict) -> None:
        self.evidence = evidence
        self.data = evidence.data
        self.run = evidence.run
        self.bounds = evidence.bounds
        self.records = evidence.records
        self.by_job = evidence.by_job
        self.dead = evidence.dead
        self.reported = evidence.reported
        self.verdict = verdict
        self.retry_lateness: list[float] = []
        self.reruns_after_loss = 0
        self.takeovers = 0

    def violate(self, kind: str, job: JobRecord, slot: str, detail: str) -> None:
        self.verdict.violations.append(Violation(kind, job.key, slot, detail))

    def kills_for(self, job: JobRecord) -> list[float]:
        return self.evidence.kills_for(job)

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
                    f"{relative(float(request['arrived']), float(seen[first_of[attempt]]['arrived']))} "
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
                elif answered_ok(request) and attempt != final and attempt != record.attempt:
                    # (a 2xx for the record's own attempt is that attempt: ended, or never recorded)
                    past = by_attempt.get(attempt)
                    if past is not None and lease_lost(past):
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
            starts += [t for a in record.attempts if (t := epoch_s(a.started_at)) is not None]
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
                if lease_lost(a):
                    self.takeovers += 1
                    base = instant(slot).timestamp()
                    start, end = epoch_s(a.started_at), epoch_s(a.finished_at)
                    if start is not None and end is not None and not killed_between(kills, start - 1, end):
                        self.violate(
                            "owners",
                            job,
                            slot,
                            f"attempt {a.attempt}'s lease lapsed ({relative(start, base)} to "
                            f"{relative(end, base)}) "
                            f"though no {job.runtime} worker was killed",
                        )
            for a, b in itertools.pairwise(ordered):
                a_end, b_start = epoch_s(a.finished_at), epoch_s(b.started_at)
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
                if killed_between(kills, float(first["arrived"]), arrived):
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
            if a.status not in (S.FAILED, S.TIMED_OUT) or lease_lost(a) or a.finished_at is None:
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
            began = [t for t in (epoch_s(starts.get(nxt)), arrivals.get(nxt)) if t is not None]
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
            ok = [
                float(r["answered"])
                for r in self.by_job.get(parent.job_id, {}).get(slot, [])
                if answered_ok(r)
            ]
            if ok:
                answers.append(min(ok))
        starts = [float(r["arrived"]) for r in seen]
        if record is not None:
            starts += [t for a in record.attempts if (t := epoch_s(a.started_at)) is not None]
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
            if any(answered_ok(r) for r in seen):
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
        return any(answered_ok(r) and r.get("attempt") == record.attempt for r in seen)

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
                    f"{relative(epoch_s(a.started_at), base)}..{relative(epoch_s(a.finished_at), base)}"
                    + (f" {a.error}" if a.error else "")
                    for a in record.attempts
                )
                parts.append(f"attempts [{history}]")
        if seen:
            parts.append(
                "receiver: "
                + ", ".join(
                    f"attempt {r.get('attempt')} at {relative(float(r['arrived']), base)} -> "
                    f"{r.get('status') or 'no answer'}"
                    for r in seen
                )
            )
        else:
            parts.append("receiver saw nothing")
        if (job.job_id, slot) in self.dead:
            parts.append("its message is in the dead-letter queue")
        kills = [
            f"{f['target']} {relative(float(f['t']), base)}"
            for f in self.data.faults
            if f.get("event") == "kill" and -10 <= float(f["t"]) - base <= 120
        ]
        if kills:
            parts.append("kills: " + ", ".join(kills))
        return "; ".join(parts)
