"""A randomized oracle over ``after(...)`` dependencies: a DAG of 2-5 jobs, 1-3 on ``cron``/``rate``
schedules sharing the even minutes, the others ``after(...)`` one or more earlier ones (chains,
sometimes a diamond; ``overlap`` allow, skip or queue), each attempt of each slot succeeding,
failing (retryable or permanent) or timing out as drawn from the seed; 1-6 operations over 20
minutes (pause, resume, payload replace, a root's schedule replace, an after() job's parents
replaced, an after() job deleted), each at a random instant or seconds after a parent's success
or a release, the workers held meanwhile; 0-2 poller outages and 0-2 spells of idle workers; a
quarter of the cases on a store whose cheap reads are up to a second behind; then every job
resumed and every attempt succeeding for 8 minutes. The harness is :mod:`delay_oracle`'s
(:class:`test_replace_owed.Run`: the service, the poller and a worker on a manual clock).

The model (docs/schedules.md, the ``after()`` row; docs/how-it-works.md, "Changing, pausing and
resuming a job", "Overlap", "No silent loss", the consistency table). A child C's slot S
*completes* at the first event (a parent's success, a replace of C) after which every parent C
then names has succeeded S: *plain* when C named each from two seconds (plus the staleness) before
its successful attempt started ("a child registered less than about a second before its parent's
slot starts may miss that one slot"), *linked-late* when later, *unlinked* when one succeeded
before C named it; at a replace that drops parents, a *drop* ("runs the child's slots its
remaining parents have all succeeded for since its last run"). The checks:

- A1: no slot of any job calls its target twice for one attempt, nor succeeds twice;
- A2: C runs S only once S completed, and not if it completed while C was paused (MISSED is final);
- A3: S completed plainly while C was enabled runs; or, C paused, resumed or replaced since, is
  recorded (SKIPPED, SUPERSEDED); an overlap skip's SKIPPED counts; completed while C was paused,
  it is recorded MISSED (documented: not caught up); C deleted since: anything goes;
- A3-drop: the same for a drop of a slot after C's last run that each dropped parent would have
  had and had not ended without success;
- A4: every scheduled job runs every slot of the settled period (no chain stops); A5: no raise;
- A6: in the settled period an ``overlap: queue`` child's queued slot starts within a poll's step
  and a lease of the end of the slot before it ("as soon as the slots before it have ended"); A7:
  a slot a parent failed, skipped, missed or had excluded is recorded for a child nothing touched.

Where the docs are silent or ambiguous :attr:`Driver.notes` counts instead of failing: a slot
neither run nor recorded because a parent never ran it (``unrecorded-parent-failed``),
``unlinked-*`` and ``linked-late-*`` completions, drops the code does not owe (``drop-decided``,
``drop-not-its-slot``, ``drop-before-last-run``), and a completed slot SUPERSEDED by a replace of C
that added a parent before a worker took it (``superseded``).

Many seeds: ``python tests/integration/after_oracle.py 0 500 [-v]``; one: ``--seed N``.
"""

from __future__ import annotations

import json
import random
import sys
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: the paths pytest's rootdir conftest gives
    _here = Path(__file__).resolve().parent
    sys.path[:0] = [str(_here), str(_here.parent), str(_here.parents[1] / "layers" / "core" / "python")]

from test_replace_owed import Run, _Secrets

from execution_harness import LONG, SHORT
from factories import spec
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.execution import Delivery
from punctual.execution.ports import Claim, ClaimOutcome
from punctual.models import ExecutionStatus, Job, JobState
from punctual.store.memory import MemoryStore
from punctual.store.memory.fidelity import Fidelity
from punctual.timing.slots import next_slot, schedule_of
from punctual.usecases.job_errors import JobError

TENANT = "default"
# Roots: registered together at T0 (a whole minute), so every pair shares the even minutes (a
# child whose parents share no slot is refused, docs/schedules.md)
ROOT_SCHEDULES = ["cron(* * * * ? *)", "cron(0/2 * * * ? *)", "rate(1 minute)", "rate(2 minutes)"]
# A root's schedule replaced: cron only (a rate counts afresh from a change, off the even minutes)
NEW_SCHEDULES = ["cron(* * * * ? *)", "cron(0/2 * * * ? *)"]
OPS = ["pause", "resume", "replace-payload", "replace-schedule", "replace-parents", "delete"]
T0 = datetime(2026, 12, 1, 9, 58, 0, tzinfo=UTC)
OPS_S = 1200.0  # operations, outages and idle spells in [T0, T0 + 20 min)
FINAL_OFF = OPS_S + 0.7  # every job resumed; from then on every attempt succeeds
END_OFF = FINAL_OFF + 480.0
LIVE_FROM = FINAL_OFF + 60.0  # A4, A6: the settled period
LIVE_TO = END_OFF - 120.0
COMPLETE_BY = END_OFF - 60.0  # A3: completions later than this may still be on their way
LEASE_S, TIMEOUT_S = 8, 30
RECEIVES = 20  # receives per queue and tick, until one finds nothing
LINK_MARGIN_S = 2.0  # "a child registered less than about a second before its parent's slot starts"
HOOK = {"type": "http", "url": "https://example.com/hook"}
QUEUES = (SHORT, LONG)
UNRUN = ("MISSED", "SKIPPED", "SUPERSEDED", "EXCLUDED")
ENDED_FOR_GOOD = ("FAILED", "TIMED_OUT", "SKIPPED", "MISSED", "EXCLUDED")  # children recorded for these


def at(off: float) -> datetime:
    return T0 + timedelta(seconds=off)


def off_of(t: datetime) -> float:
    return round((t - T0).total_seconds(), 6)


def instant(slot: str) -> datetime:
    return datetime.strptime(slot, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


# ----------------------------------------------------------------------------- cases


@dataclass
class JobDef:
    id: str
    schedule: str  # a root's schedule, or "after(...)"
    attempts: int = 1  # retry.max_attempts
    base_s: int = 5  # retry.base_seconds (fixed backoff, no jitter)
    policy: str = "all"  # catchup.policy
    overlap: str = "allow"

    @property
    def parents(self) -> tuple[str, ...]:
        if not self.schedule.startswith("after("):
            return ()
        return tuple(p.strip() for p in self.schedule[6:-1].split(","))


@dataclass
class Op:
    """An operation on ``job`` at ``off``; or, ``after`` "success", ``wait`` s after the first
    success of ``watch`` from ``off`` on, or, ``after`` "release", after the first poll from
    ``off`` on that released a message; the workers taking nothing for ``hold`` s from it."""

    off: float
    op: str
    job: str
    arg: str | None = None  # replace-schedule: the schedule; replace-parents: "a,b"
    after: str | None = None
    watch: str | None = None
    wait: float = 0.0
    hold: float = 0.0


@dataclass
class Case:
    seed: int
    jobs: list[JobDef]
    ops: list[Op]
    outages: list[tuple[float, float]]  # pollers down (start, end offsets), disjoint, sorted
    spells: list[tuple[float, float]]  # workers take nothing
    step: float
    bad: float = 0.25  # the share of slots that fail, time out or fail once, before FINAL_OFF
    stale: float = 0.0  # the store's eventually consistent reads up to this many seconds behind

    def describe(self) -> str:
        jobs = [[j.id, j.schedule, j.attempts, j.base_s, j.policy, j.overlap] for j in self.jobs]
        ops = [[o.off, o.op, o.job, o.arg, o.after, o.watch, o.wait, o.hold] for o in self.ops]
        rest = {"outages": self.outages, "spells": self.spells, "step": self.step, "bad": self.bad}
        return json.dumps({"seed": self.seed, "jobs": jobs, "ops": ops, **rest, "stale": self.stale})


def gen(seed: int) -> Case:
    rnd = random.Random(seed)
    n = rnd.randint(2, 5)
    roots = rnd.randint(1, max(1, min(n - 1, 2 if n < 5 else 3)))
    jobs: list[JobDef] = []
    for i in range(n):
        attempts, base = rnd.choice([1, 2, 3]), rnd.choice([5, 20, 45])
        if i < roots:
            schedule = rnd.choice(ROOT_SCHEDULES)
            jobs.append(JobDef(f"j{i}", schedule, attempts, base, rnd.choice(["all", "latest", "none"])))
            continue
        pool = [f"j{x}" for x in range(i)]
        k = min(len(pool), rnd.choice([1, 1, 2, 2, 3]))
        if i >= 2 and rnd.random() < 0.5:  # chains: the job just before is a parent
            parents = sorted({pool[-1], *rnd.sample(pool, k - 1)} if k > 1 else {pool[-1]})
        else:
            parents = sorted(rnd.sample(pool, k))
        jobs.append(JobDef(f"j{i}", f"after({', '.join(parents)})", attempts, base))
    if n >= 4 and roots == 1 and rnd.random() < 0.4:  # a diamond: j0 -> j1, j2 -> j3
        jobs[1].schedule, jobs[2].schedule, jobs[3].schedule = "after(j0)", "after(j0)", "after(j1, j2)"
    children = [j for j in jobs if j.parents]
    ops: list[Op] = []
    for _ in range(rnd.randint(1, 6)):
        kind = rnd.choice(OPS)
        if kind in ("replace-parents", "delete") or (children and rnd.random() < 0.5):
            target = rnd.choice(children) if children else jobs[0]
        else:
            target = rnd.choice(jobs)
        if kind == "replace-schedule" and target.parents:
            kind = "replace-payload"
        if kind in ("replace-parents", "delete") and not target.parents:
            kind = "pause"
        arg = None
        if kind == "replace-schedule":
            arg = rnd.choice(NEW_SCHEDULES)
        elif kind == "replace-parents":
            pool = [f"j{x}" for x in range(int(target.id[1:]))]
            arg = ",".join(sorted(rnd.sample(pool, min(len(pool), rnd.choice([1, 1, 2, 3])))))
        off = rnd.randint(5, int(OPS_S) - 60) + rnd.choice([0.3, 0.5, 0.9])
        mode = rnd.choice([None, None, "success", "release"] if target.parents else [None, None, "release"])
        if mode is None:
            ops.append(Op(off, kind, target.id, arg))
            continue
        hold = float(rnd.randint(1, 12))
        watch = rnd.choice(target.parents) if mode == "success" else None
        ops.append(Op(off, kind, target.id, arg, mode, watch, round(rnd.uniform(0.1, hold + 2), 1), hold))
    ops.sort(key=lambda o: o.off)
    outages = _windows(rnd, rnd.choice([0, 0, 1, 2]), 10, 600)
    spells = _windows(rnd, rnd.choice([0, 1, 2]), 3, 90)
    step, bad = rnd.choice([1.0, 1.0, 2.0, 5.0]), rnd.choice([0.1, 0.25, 0.4])
    case = Case(seed, jobs, ops, outages, spells, step, bad)
    # drawn last: the earlier draws of a seed stay as they were
    for jd in children:
        jd.overlap = rnd.choice(["allow", "allow", "skip", "queue"])
    case.stale = rnd.choice([0.0, 0.0, 0.0, 1.0])
    return case


def _windows(rnd: random.Random, n: int, shortest: int, longest: int) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for _ in range(n):
        a = rnd.randint(0, int(OPS_S) - 20) + rnd.choice([0.1, 0.6])
        b = min(a + rnd.randint(shortest, longest), OPS_S)
        if all(b < x or a > y for x, y in out):
            out.append((a, b))
    return sorted(out)


def fate(case: Case, job: str, slot: str) -> str:
    """What a slot's attempts do before FINAL_OFF: ok, once (fails its first attempt), fail
    (every attempt, retryable), permanent (fails at once, no retry) or timeout (every attempt)."""
    r = random.Random(f"{case.seed}/fate/{job}/{slot}").random()
    if r >= case.bad:
        return "ok"
    return ["fail", "timeout", "once", "permanent"][min(3, int(r / case.bad * 4))]


def duration(case: Case, job: str, slot: str, attempt: int) -> float:
    rnd = random.Random(f"{case.seed}/{job}/{slot}/{attempt}")
    return round(rnd.choice([0.0, rnd.uniform(0, 5), rnd.uniform(5, 20)]), 1)


# ----------------------------------------------------------------------------- driver


@dataclass
class Held:
    job: str
    slot: str
    end: float
    claim: Claim
    result: TargetResult
    queue: str
    receipt: str


@dataclass
class Call:
    job: str
    slot: str
    attempt: int
    seq: int
    off: float
    ok: bool


@dataclass
class View:
    """A job as it stood from an event on (absent from a view: gone)."""

    state: str
    parents: tuple[str, ...]
    job: Job | None = field(default=None, compare=False, repr=False)


@dataclass
class Driver:
    """Runs a case on a fresh :class:`Run`: what ran when, and how the jobs stood when. Events
    (calls, ends, changes) are numbered in order (``seq``; ``offs``: their offsets)."""

    case: Case
    run: Run = field(init=False)
    seq: int = 0
    offs: dict[int, float] = field(default_factory=dict)
    payloads: dict[str, int] = field(default_factory=dict)
    schedules: dict[str, str] = field(default_factory=dict)
    held: list[Held] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    successes: dict[tuple[str, str], int] = field(default_factory=dict)  # (job, slot) -> seq
    ended: dict[tuple[str, str], int] = field(default_factory=dict)  # ended without success -> seq
    views: list[tuple[int, dict[str, View]]] = field(default_factory=list)  # (seq, jobs from then on)
    changes: list[tuple[int, float, str, str]] = field(default_factory=list)  # (seq, off, op, job)
    refused: list[tuple[float, str, str, str]] = field(default_factory=list)
    workers_from: float = -1.0
    notes: Counter[str] = field(default_factory=Counter)
    noted: list[tuple[str, str]] = field(default_factory=list)
    recs: dict[str, dict[str, Any]] = field(default_factory=dict)  # records(), read once

    def __post_init__(self) -> None:
        clock: list[Any] = []
        stale = Fidelity(self.case.stale, seed=self.case.seed, clock=lambda: clock[0].now().timestamp())
        self.run = Run(T0, MemoryStore(fidelity=stale if self.case.stale else None))
        clock.append(self.run.clock)
        self.run.jobs.secrets = _Secrets()
        self.run.worker = self.run.rig.worker(lease_s=LEASE_S, target=self)  # type: ignore[arg-type]

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        """The target: records each call, answers by the slot's fate (from FINAL_OFF on: ok)."""
        now = self.now()
        what = "ok" if now >= FINAL_OFF else fate(self.case, ctx.job_id, ctx.slot)
        what = ("fail" if ctx.attempt == 1 else "ok") if what == "once" else what
        self.calls.append(Call(ctx.job_id, ctx.slot, ctx.attempt, self.tick(), now, what == "ok"))
        if what in ("ok", "permanent"):
            return TargetResult.ok() if what == "ok" else TargetResult.permanent("HTTP 400")
        result = TargetResult.retryable("HTTP 503" if what == "fail" else "timed out calling example.com")
        result.timed_out = what == "timeout"
        return result

    def tick(self) -> int:
        self.seq += 1
        self.offs[self.seq] = self.now()
        return self.seq

    def now(self) -> float:
        return off_of(self.run.clock.now())

    def spec(self, jd: JobDef, schedule: str | None = None) -> Any:
        retry = {"max_attempts": jd.attempts, "backoff": "fixed", "base_seconds": jd.base_s, "jitter": False}
        return spec(
            schedule or self.schedules[jd.id],
            target=HOOK,
            payload={"job": jd.id, "v": self.payloads[jd.id]},
            retry=retry,
            timeout_seconds=TIMEOUT_S,
            catchup={"policy": jd.policy, "window_seconds": 3600},
            overlap=jd.overlap,
        )

    def view(self) -> None:
        jobs: dict[str, View] = {}
        for jd in self.case.jobs:
            job = self.run.rig.store.get_job(TENANT, jd.id)
            if job is not None and job.state is not JobState.DELETED:
                jobs[jd.id] = View(job.state.value, schedule_of(job).parents, job)
        self.views.append((self.tick(), jobs))

    def go(self) -> None:
        case, run = self.case, self.run
        for jd in case.jobs:
            self.payloads[jd.id], self.schedules[jd.id] = 0, jd.schedule
            run.jobs.register(TENANT, self.spec(jd), job_id=jd.id)
        self.view()
        timed = [o for o in case.ops if o.after is None]
        waiting = [o for o in case.ops if o.after is not None]
        fired: list[tuple[float, Op]] = []  # (when, op) of the operations that waited
        tick = case.step
        while True:
            nexts = [(tick, 3)]
            if self.held:
                nexts.append((min(h.end for h in self.held), 0))
            if timed:
                nexts.append((timed[0].off, 1))
            if fired:
                nexts.append((min(f[0] for f in fired), 2))
            if self.now() < FINAL_OFF:
                nexts.append((FINAL_OFF, 4))
            when, kind = min(nexts)
            if when > END_OFF:
                break
            run.clock.set(at(when))
            if kind == 0:
                fired += self.finish_due(waiting)
            elif kind == 1:
                self.apply(timed.pop(0))
            elif kind == 2:
                due = min(fired, key=lambda f: f[0])
                fired.remove(due)
                self.apply(due[1])
            elif kind == 4:
                self.final_resume()
            else:
                tick = round(tick + case.step, 6)
                sends = run.rig.queues.sends
                if not self.down(when):
                    run.rig.poll()
                if run.rig.queues.sends > sends:
                    fired += self.watched(waiting, None)
                self.beat()
                if not self.idle(when):
                    fired += self.take(waiting)
        while self.held:  # every run still held ends
            run.clock.set(at(max(self.now(), min(h.end for h in self.held))))
            self.finish_due(waiting)

    def down(self, when: float) -> bool:
        return when < FINAL_OFF and any(a <= when < b for a, b in self.case.outages)

    def idle(self, when: float) -> bool:
        return when < self.workers_from or (
            when < FINAL_OFF and any(a <= when < b for a, b in self.case.spells)
        )

    def apply(self, op: Op) -> None:
        jobs, now = self.run.jobs, self.now()
        jd = next(j for j in self.case.jobs if j.id == op.job)
        before = self.run.rig.store.get_job(TENANT, op.job)
        try:
            if op.op == "pause":
                jobs.pause(TENANT, op.job)
            elif op.op == "resume":
                jobs.resume(TENANT, op.job)
            elif op.op == "delete":
                jobs.delete(TENANT, op.job)
            else:
                self.payloads[op.job] += op.op == "replace-payload"
                schedule = op.arg if op.op == "replace-schedule" else None
                if op.op == "replace-parents":
                    schedule = f"after({', '.join((op.arg or '').split(','))})"
                jobs.replace(TENANT, op.job, self.spec(jd, schedule))
                self.schedules[op.job] = schedule or self.schedules[op.job]
        except JobError as exc:
            self.refused.append((now, op.op, op.job, f"{type(exc).__name__}: {exc}"))
            return
        after = self.run.rig.store.get_job(TENANT, op.job)
        if before is not None and after is not None and after.version == before.version:
            return  # a pause when paused, a resume when enabled: nothing changed
        self.view()
        self.changes.append((self.seq, now, op.op, op.job))

    def final_resume(self) -> None:
        for jd in self.case.jobs:
            job = self.run.rig.store.get_job(TENANT, jd.id)
            if job is not None and job.state is JobState.PAUSED:
                self.run.jobs.resume(TENANT, jd.id)
                self.view()
                self.changes.append((self.seq, self.now(), "resume", jd.id))

    def watched(self, waiting: list[Op], job: str | None) -> list[tuple[float, Op]]:
        """The operations waiting for a success of ``job`` (None: for a poll that released
        something): due ``wait`` s on, the workers held ``hold`` s."""
        now, out = self.now(), []
        mode = "release" if job is None else "success"
        for op in [o for o in waiting if o.after == mode and o.watch == job and o.off <= now]:
            waiting.remove(op)
            if now + max(op.wait, op.hold) < OPS_S:  # only normal running after the operations
                out.append((round(now + op.wait, 6), op))
                self.workers_from = max(self.workers_from, now + op.hold)
        return out

    def take(self, waiting: list[Op]) -> list[tuple[float, Op]]:
        """Workers take every visible message: a claimed run starts now and is held."""
        worker, queues = self.run.worker, self.run.rig.queues
        for queue in QUEUES:
            for received in self.receive(queue):
                message = received.message
                claim = worker.claim(message, Delivery(queue, received.receipt, received.receive_count))
                if not claim.claimed:
                    if claim.outcome is ClaimOutcome.WAITING:
                        queues.change_visibility(queue, received.receipt, claim.return_after_s or 1)
                    else:
                        queues.delete(queue, received.receipt)
                    ex = claim.execution
                    if ex is not None and ex.status.terminal and ex.status is not ExecutionStatus.SUCCEEDED:
                        self.ended.setdefault((message.job_id, message.slot), self.tick())
                    continue
                result = worker.run(claim)
                assert claim.execution is not None
                lasts = duration(self.case, message.job_id, message.slot, claim.execution.attempt)
                end = round(self.now() + (TIMEOUT_S if result.timed_out else lasts), 6)
                self.held.append(
                    Held(message.job_id, message.slot, end, claim, result, queue, received.receipt)
                )
        return self.finish_due(waiting)

    def receive(self, queue: str) -> Iterator[Any]:
        """Every message visible now, batch after batch: the memory queue hands out one message
        of a FIFO group per receive (SQS several, in order), and an overlap-queue job's slots
        share one group."""
        for _ in range(RECEIVES):
            batch = self.run.rig.queues.receive(queue, 10, 0, LEASE_S)
            if not batch:
                break
            yield from batch  # each handled (deleted, returned or held) before the next receive

    def beat(self) -> None:
        for held in self.held:
            if held.claim.live:
                self.run.worker.heartbeat_if_due(held.claim)

    def finish_due(self, waiting: list[Op]) -> list[tuple[float, Op]]:
        now, fired = self.now(), []
        for held in sorted((h for h in self.held if h.end <= now), key=lambda h: h.end):
            self.held.remove(held)
            seq = self.tick()  # a success's children are sent inside finish
            done = self.run.worker.finish(held.claim, held.result)
            if not (held.claim.released or held.claim.detached):
                self.run.rig.queues.delete(held.queue, held.receipt)
            key = (held.job, held.slot)
            if done.status is ExecutionStatus.SUCCEEDED:
                self.successes.setdefault(key, seq)
                fired += self.watched(waiting, held.job)
            elif done.status is not None and done.status.terminal:
                self.ended.setdefault(key, seq)
        return fired


# ----------------------------------------------------------------------------- the model


def view_at(d: Driver, seq: int) -> dict[str, View]:
    """The jobs as they stood at event ``seq`` (the last view written at or before it)."""
    found = d.views[0][1]
    for s, jobs in d.views:
        if s > seq:
            break
        found = jobs
    return found


def view_at_off(d: Driver, off: float) -> dict[str, View]:
    seqs = [s for s, o in d.offs.items() if o <= off]
    return view_at(d, max(seqs)) if seqs else d.views[0][1]


@dataclass
class Completion:
    seq: int
    kind: str  # "plain", "drop", "linked-late" or "unlinked"
    state: str  # the child's state then
    event: str  # "success" or "replace"
    old: tuple[str, ...] = ()  # drop: the parents before the replace


def completion(d: Driver, child: str, slot: str) -> Completion | None:
    """The first event after which every parent ``child`` then named had succeeded ``slot``
    (the module docstring says which kind)."""
    events = sorted(
        [(seq, "success") for (_, s), seq in d.successes.items() if s == slot]
        + [(seq, "replace") for seq, _, op, job in d.changes if job == child and op.startswith("replace")]
    )
    started = {c.job: c.off for c in d.calls if c.slot == slot and c.ok}
    for seq, what in events:
        c = view_at(d, seq).get(child)
        if c is None or not c.parents:
            continue
        succeeded = [d.successes.get((p, slot)) for p in c.parents]
        if any(s is None or s > seq for s in succeeded):
            continue
        kind = "plain"
        for p, s in zip(c.parents, succeeded, strict=True):
            then = view_at(d, s or 0).get(child)
            if then is None or p not in then.parents:
                kind = "unlinked"
                break
            before = view_at_off(d, started[p] - LINK_MARGIN_S - d.case.stale).get(child)
            if before is None or p not in before.parents:
                kind = "linked-late"
        if kind == "plain" and what == "replace":
            before = view_at(d, seq - 1).get(child)
            return Completion(seq, "drop", c.state, what, before.parents if before else ())
        return Completion(seq, kind, c.state, what)
    return None


def records(d: Driver, job: str) -> dict[str, Any]:
    """slot -> the job's record (read once, at the end of the case)."""
    if job not in d.recs:
        items = d.run.rig.store.list_executions(TENANT, job, limit=2000).items
        d.recs[job] = {r.slot: r for r in items}
    return d.recs[job]


def recorded(d: Driver, job: str, slot: str) -> Any:
    """The record of ``job``'s ``slot``, a range record's included."""
    recs = records(d, job)
    if slot in recs:
        return recs[slot]
    ranges = (r for r in recs.values() if getattr(r, "last_slot", None))
    return next((r for r in ranges if r.slot <= slot <= r.last_slot), None)


def _decided(d: Driver, jobs: dict[str, View], job_id: str, slot: str, seq: int, depth: int = 0) -> bool:
    """Whether ``job_id``'s ``slot`` had ended without success by event ``seq`` (an after() job's:
    one of its parents' had, as ``jobs`` stood)."""
    rec = recorded(d, job_id, slot)
    if d.ended.get((job_id, slot), 1 << 60) <= seq or (
        rec is not None
        and rec.status.terminal
        and rec.status is not ExecutionStatus.SUCCEEDED
        and rec.finished_at is not None
        and off_of(rec.finished_at) <= d.offs[seq]
    ):
        return True
    v = jobs.get(job_id)
    if v is None or not v.parents or depth > 8:
        return False
    return any(_decided(d, jobs, p, slot, seq, depth + 1) for p in v.parents)


def _would_have(jobs: dict[str, View], job_id: str, slot: str, depth: int = 0) -> bool:
    """Whether ``job_id`` (as ``jobs`` stood) has ``slot`` at all: one of its schedule's slots,
    or, an after() job, one all its parents have."""
    v = jobs.get(job_id)
    if v is None or v.job is None or depth > 8:
        return False
    if v.parents:
        return all(_would_have(jobs, p, slot, depth + 1) for p in v.parents)
    return next_slot(v.job, instant(slot) - timedelta(seconds=1)) == instant(slot)


def drop_kind(d: Driver, child: str, slot: str, comp: Completion) -> str | None:
    """A drop completion the docs leave open (a note), or None: the docs have it run. Open: a
    dropped parent had ended the slot without success (the code: "the old spec decided it"), or
    would never have had it, or the slot is before the child's last run ("since its last run")."""
    then = view_at(d, comp.seq - 1)
    dropped = [p for p in comp.old if p not in view_at(d, comp.seq)[child].parents]
    if any(_decided(d, then, p, slot, comp.seq) for p in dropped):
        return "drop-decided"
    ran = [c.slot for c in d.calls if c.job == child and c.seq < comp.seq]
    if ran and max(ran) > slot:
        return "drop-before-last-run"
    if not all(_would_have(then, p, slot) for p in dropped):
        return "drop-not-its-slot"
    return None


def note(d: Driver, kind: str, detail: str) -> None:
    d.notes[kind] += 1
    d.noted.append((kind, detail))


# ----------------------------------------------------------------------------- checks


def check(case: Case) -> tuple[list[tuple[str, str]], Driver]:
    """Failures as (rule, detail); the driver holds the notes (what the docs leave open)."""
    d = Driver(case)
    try:
        d.go()
    except Exception as exc:
        tb = traceback.format_exc().strip().splitlines()
        return [("A5", f"{type(exc).__name__}: {exc} @ {tb[-3].strip() if len(tb) > 2 else ''}")], d
    fails: list[tuple[str, str]] = []
    per: Counter[tuple[str, str, int]] = Counter((c.job, c.slot, c.attempt) for c in d.calls)
    twice = sorted(k for k, n in per.items() if n > 1)
    oks: Counter[tuple[str, str]] = Counter((c.job, c.slot) for c in d.calls if c.ok)
    twice += sorted((j, s, -1) for (j, s), n in oks.items() if n > 1)
    if twice:
        fails.append(("A1", f"called twice (job, slot, attempt; -1: succeeded twice): {twice}"))
    slots = sorted({s for _, s in d.successes} | {s for _, s in d.ended} | {c.slot for c in d.calls})
    for jd in case.jobs:
        if any(jd.id in v and v[jd.id].parents for _, v in d.views):
            for slot in slots:
                fails += check_child_slot(d, jd, slot)
    fails += check_queue_turns(d) + check_chains(d)
    return fails, d


def check_child_slot(d: Driver, jd: JobDef, slot: str) -> list[tuple[str, str]]:
    """A2 and A3 for one slot of an after() job (or one that was)."""
    child = jd.id
    comp = completion(d, child, slot)
    call = next((c for c in d.calls if c.job == child and c.slot == slot), None)
    rec = recorded(d, child, slot)
    status = rec.status.value if rec is not None else None
    if call is not None and (comp is None or comp.seq > call.seq):
        return [
            ("A2", f"{child} {slot} ran ({call.attempt}, at {call.off}) before its parents all succeeded")
        ]
    if comp is None:
        return unrecorded_parent_failed(d, child, slot, status)
    comp_off = d.offs[comp.seq]
    # "a job paused or replaced less than a second ago may still start the one slot released for
    # its old version" (the store's staleness)
    ops = [(s, off, op) for s, off, op, job in d.changes if job == child]
    recent = [op for s, off, op in ops if s < comp.seq and off > comp_off - d.case.stale]
    if call is not None and comp.state == "PAUSED" and comp.kind == "plain" and not recent:
        return [("A2", f"{child} {slot} completed while {child} was paused, yet ran at {call.off}")]
    if call is not None or comp_off > COMPLETE_BY:
        return []
    changed = [op for s, _, op in ops if s > comp.seq] + recent
    error = getattr(rec, "error", None)
    detail = f"{child} {slot}: {comp.kind} completion at {comp_off} ({comp.state}), record {status} {error!r}"
    detail += f", changed after: {changed}"
    kind = drop_kind(d, child, slot, comp) if comp.kind == "drop" else None
    if comp.kind in ("unlinked", "linked-late") or kind:
        note(d, kind or f"{comp.kind}-at-{comp.event}", detail)
        return []
    if "delete" in changed or child not in view_at(d, d.seq):
        return []  # deleted since: its slots do not run, whatever their record says
    rule = "A3-drop" if comp.kind == "drop" else "A3"
    if comp.state == "PAUSED":
        return [] if rec is not None else [(rule, f"{detail}: completed while paused, no record")]
    if rec is None:
        return [(rule, f"{detail}: neither run nor recorded")]
    if status == "SKIPPED" and jd.overlap == "skip" and (error or "").startswith("overlap"):
        return []  # overlap skip: the slot before it still ran
    if not changed:
        return [(rule, f"{detail}: not run, {child} unchanged")]
    if status == "SUPERSEDED":
        note(d, "superseded", detail)
    elif status not in UNRUN:
        return [(rule, f"{detail}: not run")]
    return []


def unrecorded_parent_failed(d: Driver, child: str, slot: str, status: str | None) -> list[tuple[str, str]]:
    """A7 (docs/schedules.md, the after() row); a slot a parent never ran: noted, as documented."""
    view = view_at_off(d, off_of(instant(slot)))
    c = view.get(child)  # (a slot its other parents lack is not the child's: no record owed)
    if status is not None or c is None or c.state != "ENABLED" or not _would_have(view, child, slot):
        return []
    failed, final = [], []
    for p in c.parents:
        rec = recorded(d, p, slot)
        if (p, slot) in d.ended or (rec is not None and rec.status is not ExecutionStatus.SUCCEEDED):
            failed.append(f"{p}:{rec.status.value if rec is not None else 'ended'}")
            if rec is not None and rec.status.value in ENDED_FOR_GOOD:
                final.append(p)
    untouched = not any(job in (child, *c.parents) for _, _, _, job in d.changes)
    if final and untouched:
        return [("A7", f"{child} {slot}: parents {failed} failed it for good; no record of {child}")]
    if failed:
        note(d, "unrecorded-parent-failed", f"{child} {slot}: parents {failed}; no record of {child}")
    return []


def check_queue_turns(d: Driver) -> list[tuple[str, str]]:
    """A6: in the settled period an overlap-queue child's queued slot starts within a poll's step
    and a lease of the end of the slot before it."""
    fails = []
    for jd in d.case.jobs:
        if jd.overlap != "queue":
            continue
        runs = sorted((r for r in records(d, jd.id).values() if r.started_at), key=lambda r: r.started_at)
        for a, b in pairwise(runs):
            comp = completion(d, jd.id, b.slot)
            if a.finished_at is None or comp is None or off_of(a.finished_at) < LIVE_FROM:
                continue
            late = off_of(b.started_at) - max(d.offs[comp.seq], off_of(a.finished_at))
            if late > d.case.step + LEASE_S + 2:
                fails.append(("A6", f"{jd.id} {b.slot} started {late:.1f} s after it could ({a.slot} ended)"))
    return fails


def check_chains(d: Driver) -> list[tuple[str, str]]:
    """A4: every scheduled job runs every slot of its schedule in the settled period."""
    fails = []
    for jd in d.case.jobs:
        job = d.run.rig.store.get_job(TENANT, jd.id)
        if job is None or schedule_of(job).parents or job.state is JobState.DELETED:
            continue
        due, t = [], at(LIVE_FROM)
        while (t := next_slot(job, t)) is not None and t <= at(LIVE_TO):  # type: ignore[assignment]
            due.append(t.strftime("%Y-%m-%dT%H:%M:%SZ"))
        missing = [
            (s, getattr(recorded(d, jd.id, s), "status", None)) for s in due if (jd.id, s) not in d.successes
        ]
        if missing:
            fails.append(("A4", f"{jd.id} ({job.schedule}, {job.state.value}) did not run {missing}"))
    return fails


# ----------------------------------------------------------------------------- many seeds


def main(argv: list[str]) -> int:
    """``LO HI [-v]``: seeds LO..HI-1 and a summary (``-v``: each failing case and its failures);
    ``--seed N``: one case, its failures, notes and refused operations."""
    verbose, args = "-v" in argv, [a for a in argv if a != "-v"]
    one = bool(args) and args[0] == "--seed"
    lo, hi = (int(args[1]), int(args[1]) + 1) if one else (int(args[0]), int(args[1])) if args else (0, 100)
    failed: dict[str, list[int]] = {}
    notes: Counter[str] = Counter()
    noted: dict[str, list[int]] = {}
    for seed in range(lo, hi):
        case = gen(seed)
        fails, d = check(case)
        notes.update(d.notes)
        for kind in d.notes:
            noted.setdefault(kind, []).append(seed)
        for rule in sorted({r for r, _ in fails}):
            failed.setdefault(rule, []).append(seed)
        if (fails and verbose) or one:
            print(case.describe())
            more = [f"note {kind}: {detail}" for kind, detail in d.noted] + [f"refused: {d.refused}"]
            lines = [f"{rule}: {detail}" for rule, detail in fails] + (more if one else [])
            print("".join(f"  {line}\n" for line in lines), end="", flush=True)
    bad = sorted({s for seeds in failed.values() for s in seeds})
    print(f"seeds {lo}..{hi - 1}: {hi - lo - len(bad)} passed, {len(bad)} failed")
    for rule, seeds in sorted(failed.items()):
        print(f"  {rule}: {len(seeds)} seeds, first {seeds[:12]}")
    for kind, n in sorted(notes.items()):
        print(f"  note {kind}: {n} slots in {len(noted[kind])} seeds, first {noted[kind][:8]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
