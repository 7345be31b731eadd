"""A randomized oracle over one ``delay(...)`` job (a fixed-delay chain) whose runs last 0 s to 3
minutes, changed at random instants, with poller outages and workers behind (the service, the
poller and a worker on a manual clock, :class:`test_replace_owed.Run`).

A case: one job on a schedule of :data:`SCHEDULES`; 1-5 operations of :data:`OPS` over 20
minutes, each at a random instant, or in the seconds after a slot's release while the workers
take nothing (either side of the claim's 5 s of trusting its message, ``SPEC_TRUST_S``), or in
the seconds after a slot came due while no poller has met it; 0-2 poller outages; 0-2 spells of
workers that take nothing; then the job resumed and everything running normally for 15
minutes. A run starts when a worker claims its message and ends its duration later (its lease
heartbeated meanwhile, its message kept in flight as the lease keeps it).

The model (docs/schedules.md, the ``delay()`` row; docs/how-it-works.md, "Changing, pausing and
resuming a job"): each run starts N after the previous run finished; a pause and resume, a
replace or a rotation while a run is in flight go on N after that run ends, never beside it; a
change in the seconds between a slot's release and its run starting starts the chain N after
the change, and the released slot still runs once (it may overlap the new chain's first run);
any other change restarts the chain N after it. The checks, over the runs in start order (the
registration counts as a run that ended at its instant):

- D1: no slot runs twice; no run starts before the one before it ended (no overlap), but where
  either run's slot changed between its instant and its start (a slot released, or due and not
  yet released, before a change, which docs/how-it-works.md has the new spec run once);
- D2: a run starts no earlier than N after the previous run's end (the smaller N when it changed
  meanwhile; after a slot changed between its instant and its start, N after that change; not
  checked for such a slot itself), and no later than N after the latest of the runs' ends so far
  (a slot a change cut may outlast the run after it), a change and a slot that was not run
  (superseded, skipped), or than the end of an outage or a spell of idle workers, plus a poll's
  step and a second;
- D3: the same latest start holds at the end of the case: the chain never stops;
- D4: nothing raises.

D2 is ``D2-ops`` for a pair whose first run ended among the operations (before the last
disturbance) and ``D2`` in the settled period after it.
"""

from __future__ import annotations

import json
import random
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from test_replace_owed import Run, _Secrets

from execution_harness import LONG, SHORT
from factories import spec
from punctual.delivery.targets.base import TargetResult
from punctual.execution import Delivery
from punctual.execution.ports import Claim, ClaimOutcome
from punctual.timing.timers import TimerKind, slot_instant

SCHEDULES = {"delay(30 seconds)": 30, "delay(1 minute)": 60, "delay(2 minutes)": 120}
OPS = ["replace-payload", "replace-delay", "replace-identical", "pause", "resume", "rotate"]
T0 = datetime(2026, 12, 1, 9, 59, 30, tzinfo=UTC)
OPS_S = 1200.0  # operations, outages and idle spells in [T0, T0 + 20 min)
FINAL_OFF = OPS_S + 0.7  # the job resumed if paused; then nothing but normal running
END_OFF = FINAL_OFF + 900.0
LEASE_S = 8
HOOK = {"type": "http", "url": "https://example.com/hook"}
QUEUES = (SHORT, LONG)


def at(off: float) -> datetime:
    return T0 + timedelta(seconds=off)


def off_of(t: datetime) -> float:
    return round((t - T0).total_seconds(), 6)


@dataclass
class Op:
    """An operation at ``off``; or, ``after`` "release", ``wait`` s after the first release from
    ``off`` on, the workers taking nothing for ``hold`` s from it; or, ``after`` "due", ``wait``
    s after the instant of the chain's next timer from ``off`` on, no poller meeting it for
    ``hold`` s from that instant."""

    off: float
    op: str
    arg: str | None = None  # replace-delay: the new schedule
    after: str | None = None
    wait: float = 0.0
    hold: float = 0.0


@dataclass
class Case:
    seed: int
    schedule: str
    ops: list[Op]
    outages: list[tuple[float, float]]  # pollers down (start, end offsets), disjoint, sorted
    spells: list[tuple[float, float]]  # workers take nothing
    step: float
    durations: str = "mixed"  # "mixed", "short" (<= 10 s) or "long" (60-180 s)

    def describe(self) -> str:
        ops = [[o.off, o.op, o.arg, o.after, o.wait, o.hold] for o in self.ops]
        fields = {"schedule": self.schedule, "ops": ops, "outages": self.outages, "spells": self.spells}
        return json.dumps({"seed": self.seed, **fields, "step": self.step, "durations": self.durations})


def gen(seed: int) -> Case:
    rnd = random.Random(seed)
    schedule = rnd.choice(list(SCHEDULES))
    ops: list[Op] = []
    for _ in range(rnd.randint(1, 5)):
        kind = rnd.choice(OPS)
        arg = rnd.choice(list(SCHEDULES)) if kind == "replace-delay" else None
        off = rnd.randint(5, int(OPS_S) - 60) + rnd.choice([0.3, 0.5, 0.9])
        after = rnd.choice([None, None, "release", "due"])
        if after == "release":
            hold = float(rnd.randint(1, 12))
            ops.append(Op(off, kind, arg, after, round(rnd.uniform(0.1, hold + 2), 1), hold))
        elif after == "due":
            hold = float(rnd.randint(1, 8))
            ops.append(Op(off, kind, arg, after, round(rnd.uniform(0.1, hold - 0.1), 1), hold))
        else:
            ops.append(Op(off, kind, arg))
    ops.sort(key=lambda o: o.off)
    return Case(
        seed,
        schedule,
        ops,
        _windows(rnd, rnd.choice([0, 0, 1, 2]), 10, 600),
        _windows(rnd, rnd.choice([0, 1, 2]), 3, 90),
        rnd.choice([1.0, 1.0, 2.0, 5.0]),
        rnd.choice(["mixed", "mixed", "short", "long"]),
    )


def _windows(rnd: random.Random, n: int, shortest: int, longest: int) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for _ in range(n):
        a = rnd.randint(0, int(OPS_S) - 20) + rnd.choice([0.1, 0.6])
        b = min(a + rnd.randint(shortest, longest), OPS_S)
        if all(b < x or a > y for x, y in out):
            out.append((a, b))
    return sorted(out)


def duration(case: Case, slot: str) -> float:
    """A run's duration, fixed by the case's seed and the slot."""
    rnd = random.Random(f"{case.seed}/{slot}")
    if case.durations == "short":
        return round(rnd.choice([0.0, rnd.uniform(0, 10)]), 1)
    if case.durations == "long":
        return round(rnd.uniform(60, 180), 1)
    return round(rnd.choice([0.0, rnd.uniform(0, 10), rnd.uniform(10, 60), rnd.uniform(60, 180)]), 1)


# ----------------------------------------------------------------------------- driver


@dataclass
class Held:
    slot: str
    end: float
    claim: Claim
    result: TargetResult
    queue: str
    receipt: str


@dataclass
class RunSeen:
    slot: str
    start: float
    end: float | None
    version: int


@dataclass
class Driver:
    """Runs a case on a fresh :class:`Run`: what ran when, and what changed when."""

    case: Case
    run: Run = field(init=False)
    payload: int = 0
    schedule: str = ""
    held: list[Held] = field(default_factory=list)
    runs: list[RunSeen] = field(default_factory=list)
    changes: list[tuple[float, str]] = field(default_factory=list)  # (offset, op) that landed
    periods: list[tuple[float, int]] = field(default_factory=list)  # (offset, N) from then on
    holds: list[tuple[float, float]] = field(default_factory=list)  # workers or pollers held by an op
    outcomes: list[tuple[float, str, str]] = field(default_factory=list)  # claims that ran nothing
    workers_from: float = -1.0
    polls_held: list[tuple[float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.run = Run(T0)
        self.run.jobs.secrets = _Secrets()
        self.run.worker = self.run.rig.worker(lease_s=LEASE_S)
        self.schedule = self.case.schedule

    def spec(self) -> Any:
        return spec(self.schedule, target=HOOK, payload={"v": self.payload})

    def now(self) -> float:
        return off_of(self.run.clock.now())

    def go(self) -> None:
        case, run = self.case, self.run
        run.jobs.register("default", self.spec(), job_id="j")
        self.periods.append((0.0, SCHEDULES[self.schedule]))
        timed = [o for o in case.ops if o.after is None]
        waiting = [o for o in case.ops if o.after is not None]
        fired: list[tuple[float, Op]] = []  # (when, op) of the ops that waited
        tick = case.step
        while True:
            nexts = [(tick, 3)]
            if self.held:
                nexts.append((min(h.end for h in self.held), 0))
            if timed:
                nexts.append((timed[0].off, 1))
            if fired:
                nexts.append((min(fired, key=lambda f: f[0])[0], 2))
            if self.now() < FINAL_OFF:
                nexts.append((FINAL_OFF, 1))
            when, kind = min(nexts)
            if when > END_OFF:
                break
            run.clock.set(at(when))
            if kind == 0:
                self.finish_due()
            elif kind == 1 and timed and timed[0].off == when:
                self.apply(timed.pop(0))
            elif kind == 1:
                self.final_resume()
            elif kind == 2:
                due = min(fired, key=lambda f: f[0])
                fired.remove(due)
                self.apply(due[1])
            else:
                tick = round(tick + case.step, 6)
                fired += self.wait_for_due(waiting, when)
                sends = run.rig.queues.sends
                if not self.down(when):
                    run.rig.poll()
                if run.rig.queues.sends > sends:
                    fired += self.wait_for_release(waiting, when)
                self.beat()
                if not self.idle(when):
                    self.take()
        while self.held:  # every run still held ends (its duration is finite)
            run.clock.set(at(max(self.now(), min(h.end for h in self.held))))
            self.finish_due()

    def wait_for_release(self, waiting: list[Op], when: float) -> list[tuple[float, Op]]:
        out = []
        for op in [o for o in waiting if o.after == "release" and o.off <= when]:
            waiting.remove(op)
            if when + op.wait < OPS_S:  # only normal running after the operations' 20 minutes
                out.append((round(when + op.wait, 6), op))
                self.workers_from = max(self.workers_from, when + op.hold)
                self.holds.append((when, when + op.hold))
        return out

    def wait_for_due(self, waiting: list[Op], when: float) -> list[tuple[float, Op]]:
        ready = [o for o in waiting if o.after == "due" and o.off <= when]
        if not ready:
            return []
        job = self.run.jobs.get("default", "j")
        fires = [
            off_of(t.due)
            for t in self.run.rig.timers(at(when), at(when + 600), TimerKind.FIRE)
            if t.job_id == "j" and t.job_version == job.version and off_of(t.due) >= when
        ]
        if not fires:
            return []  # a run in flight, or paused: wait for the next tick
        out = []
        for op in ready:
            waiting.remove(op)
            if min(fires) + op.hold < OPS_S:
                out.append((round(min(fires) + op.wait, 6), op))
                self.polls_held.append((min(fires), min(fires) + op.hold))
                self.holds.append((min(fires), min(fires) + op.hold))
        return out

    def down(self, when: float) -> bool:
        if any(a <= when < b for a, b in self.polls_held):
            return True
        return when < FINAL_OFF and any(a <= when < b for a, b in self.case.outages)

    def idle(self, when: float) -> bool:
        if when < self.workers_from:
            return True
        return when < FINAL_OFF and any(a <= when < b for a, b in self.case.spells)

    def apply(self, op: Op) -> None:
        jobs = self.run.jobs
        version = jobs.get("default", "j").version
        if op.op.startswith("replace"):
            if op.op == "replace-delay" and op.arg:
                self.schedule = op.arg
                self.periods.append((self.now(), SCHEDULES[op.arg]))
            self.payload += op.op == "replace-payload"
            jobs.replace("default", "j", self.spec())
        elif op.op == "pause":
            jobs.pause("default", "j")
        elif op.op == "resume":
            jobs.resume("default", "j")
        elif op.op == "rotate":
            jobs.rotate_secret("default", "j")
        if jobs.get("default", "j").version != version:  # a pause when paused changes nothing
            self.changes.append((self.now(), op.op))

    def final_resume(self) -> None:
        if self.run.jobs.get("default", "j").state.value == "PAUSED":
            self.run.jobs.resume("default", "j")
            self.changes.append((self.now(), "resume"))

    def take(self) -> None:
        """Workers take every visible message: a claimed run starts now and is held."""
        worker, queues = self.run.worker, self.run.rig.queues
        for queue in QUEUES:
            for received in queues.receive(queue, 10, 0, LEASE_S):
                message = received.message
                claim = worker.claim(message, Delivery(queue, received.receipt, received.receive_count))
                if not claim.claimed:
                    self.outcomes.append((self.now(), message.slot, claim.outcome.value))
                    if claim.outcome is ClaimOutcome.WAITING:
                        queues.change_visibility(queue, received.receipt, claim.return_after_s or 1)
                    else:
                        queues.delete(queue, received.receipt)
                    continue
                result = worker.run(claim)
                assert claim.execution is not None
                self.runs.append(RunSeen(message.slot, self.now(), None, claim.execution.job_version))
                end = round(self.now() + duration(self.case, message.slot), 6)
                self.held.append(Held(message.slot, end, claim, result, queue, received.receipt))
        self.finish_due()

    def beat(self) -> None:
        for held in self.held:
            if held.claim.live:
                self.run.worker.heartbeat_if_due(held.claim)

    def finish_due(self) -> None:
        now = self.now()
        for held in sorted((h for h in self.held if h.end <= now), key=lambda h: h.end):
            self.held.remove(held)
            self.run.worker.finish(held.claim, held.result)
            if not (held.claim.released or held.claim.detached):
                self.run.rig.queues.delete(held.queue, held.receipt)
            seen = next(r for r in self.runs if r.slot == held.slot and r.end is None)
            seen.end = now


# ----------------------------------------------------------------------------- checks


def n_between(d: Driver, lo: float, hi: float) -> tuple[int, int]:
    """The smallest and largest N in force over [lo, hi]."""
    ns = [n for t, n in d.periods if lo < t <= hi]
    ns.append(max((p for p in d.periods if p[0] <= lo), default=d.periods[0])[1])
    return min(ns), max(ns)


def latest_start(d: Driver, a: RunSeen, ended: float, until: float) -> float:
    """The latest instant the run after ``a`` may start, before a poll's step and a second: N
    after the last end of ``a`` and the runs before it (a run a change cut may outlast the run
    after it, and a change while it runs leaves the chain to it), after a change (a resume among
    them) or after a slot its claim did not run; or when an outage or idle spell ended."""
    n = n_between(d, a.start, until)[1]
    marks = [t for t, _ in d.changes] + [t for t, _, _ in d.outcomes]
    bound = max([ended, *(t for t in marks if t <= until)]) + n
    ends = [y for _, y in d.case.outages + d.case.spells + d.holds if y <= until]
    return max([bound, *ends])


def changed_before_start(d: Driver, a: RunSeen) -> float | None:
    """The last change between ``a``'s instant and its start (its chain then starts N after the
    change, and ``a`` may overlap that chain's first run), if any."""
    if a.slot == "registration":
        return None
    instant = off_of(slot_instant(a.slot))  # a change in the instant of a claim lands first
    return max((t for t, _ in d.changes if instant <= t <= a.start), default=None)


def settled_from(d: Driver) -> float:
    marks = [t for t, _ in d.changes] + [y for _, y in d.case.outages + d.case.spells + d.holds]
    return max([FINAL_OFF, *marks])


def check(case: Case) -> tuple[list[tuple[str, str]], Driver]:
    """Failures as (rule, detail)."""
    d = Driver(case)
    try:
        d.go()
    except Exception as exc:
        tb = traceback.format_exc().strip().splitlines()
        return [("D4", f"{type(exc).__name__}: {exc} @ {tb[-3].strip() if len(tb) > 2 else ''}")], d
    fails: list[tuple[str, str]] = []
    twice = sorted(s for s, c in d.run.ran().items() if c != 1)
    if twice:
        fails.append(("D1", f"ran more than once: {twice}"))
    settled = settled_from(d)
    runs = sorted(d.runs, key=lambda r: r.start)
    tol = case.step + 1.0 + 1e-6
    ended = 0.0
    for a, b in zip([RunSeen("registration", 0.0, 0.0, 1), *runs], [*runs, None], strict=True):
        assert a.end is not None
        ended = max(ended, a.end)
        until = END_OFF if b is None else b.start
        tag = "" if ended >= settled else "-ops"
        changed = changed_before_start(d, a)
        cut = b is not None and changed_before_start(d, b) is not None  # b: a cut chain's slot
        if b is not None and b.start < a.end and changed is None and not cut:
            fails.append(("D1", f"{b.slot} started at {b.start} while {a.slot} ran ({a.start}..{a.end})"))
            continue
        n_lo = n_between(d, a.start if changed is None else changed, until)[0]
        if b is not None and not cut and b.start < (a.end if changed is None else changed) + n_lo - 1e-6:
            gap = round(b.start - a.end, 3)
            fails.append(
                (f"D2{tag}", f"{b.slot} started {gap} s after {a.slot} ended ({a.end}); N >= {n_lo}")
            )
        latest = round(latest_start(d, a, ended, until) + tol, 3)
        if until > latest and b is None:
            fails.append(("D3", f"no run after {a.slot}, which ended at {a.end}; due by {latest}"))
        elif until > latest and b is not None:
            fails.append(
                (f"D2{tag}", f"{b.slot} started at {b.start}, after {latest} ({a.slot} ended {a.end})")
            )
    return fails, d
