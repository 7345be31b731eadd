"""A randomized oracle over one job's edits, pauses, resumes and rotations with poller outages (the
service, the poller and a worker on a manual clock, :class:`test_replace_owed.Run`).

A case: one job on a schedule of :data:`SCHEDULES`, a catch-up policy, 1-4 operations at random
instants of 20 minutes (off whole seconds: a change in a slot's very instant is left out), 0-2
poller outages of at most 12 minutes (the harness polls a 15-minute look-back), then the job
resumed and pollers running normally for 3 minutes.

The model (docs/how-it-works.md, "Changing, pausing and resuming a job"): a timing is (schedule,
anchor); rate slots count from the anchor, which a schedule change resets. A slot of the timing in
force at its instant while the job is enabled is owed; a pause owes the slots from its instant to
its resume on the timing in force at the resume. The checks: R1 no slot runs twice; R2 no slot
runs that is not owed; R3 every owed slot due before the final period ran or has a record; R3b
every slot of the final period ran; R4 nothing raises; R5 (policy all) every owed slot ran, but
one recorded MISSED "job replaced: ...".
"""

from __future__ import annotations

import json
import random
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from test_replace_owed import Run, _records, _Secrets

from factories import spec

SCHEDULES = ["cron(* * * * ? *)", "cron(0/2 * * * ? *)", "cron(0/5 * * * ? *)", "rate(3 minutes)"]
POLICIES = ["all", "latest", "none"]
OPS = ["replace-schedule", "replace-payload", "replace-identical", "pause", "resume", "rotate"]
T0 = datetime(2026, 12, 1, 9, 57, 30, tzinfo=UTC)
FINAL = T0 + timedelta(minutes=20, seconds=0.7)
END = FINAL + timedelta(minutes=3)
HOOK = {"type": "http", "url": "https://example.com/hook"}


def sk(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_sk(s: str) -> datetime:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def ceil_s(t: datetime) -> datetime:
    w = t.replace(microsecond=0)
    return w if w == t else w + timedelta(seconds=1)


@dataclass
class Case:
    seed: int
    schedule: str
    policy: str
    ops: list[tuple[float, str, Any]]  # (offset seconds from T0, op, arg)
    outages: list[tuple[float, float]]  # (start offset, end offset), disjoint, sorted
    step: float
    lag: bool = False  # each operation comes with the slots due by it released, no worker at them yet

    def describe(self) -> str:
        fields = {"schedule": self.schedule, "policy": self.policy, "ops": self.ops, "outages": self.outages}
        return json.dumps({"seed": self.seed, **fields, "step": self.step, "lag": self.lag})


def gen(seed: int) -> Case:
    rnd = random.Random(seed)
    n = rnd.randint(1, 4)
    ops = []
    for _ in range(n):
        off = rnd.randint(5, 1195) + rnd.choice([0.3, 0.5, 0.9])
        op = rnd.choice(OPS)
        arg = rnd.choice(SCHEDULES) if op == "replace-schedule" else None
        ops.append((off, op, arg))
    ops.sort()
    outages: list[tuple[float, float]] = []
    for _ in range(rnd.choice([0, 1, 1, 2, 2])):
        a = rnd.randint(0, 1180) + rnd.choice([0.1, 0.6])
        b = min(a + rnd.randint(10, 720), FINAL_OFF)
        if all(b < x or a > y for x, y in outages):
            outages.append((a, b))
    outages.sort()
    case = Case(seed, rnd.choice(SCHEDULES), rnd.choice(POLICIES), ops, outages, rnd.choice([1.0, 5.0]))
    case.lag = rnd.random() < 0.5  # drawn last: the earlier draws of a seed are as they were
    return case


FINAL_OFF = (FINAL - T0).total_seconds()
END_OFF = (END - T0).total_seconds()


# ----------------------------------------------------------------------------- oracle model


def slots_of(
    timing: tuple[str, datetime], lo: datetime, hi: datetime, lo_incl: bool = False
) -> list[datetime]:
    """Slots of ``timing`` in (lo, hi] (or [lo, hi])."""
    schedule, anchor = timing
    out = []
    if schedule.startswith("rate"):
        t = anchor + timedelta(seconds=180)
        while t <= hi:
            if t > lo or (lo_incl and t >= lo):
                out.append(t)
            t += timedelta(seconds=180)
        return out
    k = {"cron(* * * * ? *)": 1, "cron(0/2 * * * ? *)": 2, "cron(0/5 * * * ? *)": 5}[schedule]
    t = lo.replace(second=0, microsecond=0)
    while t <= hi:
        if (t > lo or (lo_incl and t >= lo)) and t.minute % k == 0:
            out.append(t)
        t += timedelta(minutes=1)
    return out


@dataclass
class Model:
    owed_enabled: set[str] = field(default_factory=set)
    pause_owed: set[str] = field(default_factory=set)
    final_enabled: set[str] = field(default_factory=set)  # owed_enabled in [FINAL, END-10s]


def model(case: Case) -> Model:
    m = Model()
    timing = (case.schedule, ceil_s(T0))
    enabled = True
    seg_start = T0
    paused_at: datetime | None = None
    events = [(T0 + timedelta(seconds=off), op, arg) for off, op, arg in case.ops]
    events.append((FINAL, "final-resume", None))
    for at, op, arg in events:
        # close segment [seg_start, at)
        if enabled:
            m.owed_enabled |= {sk(s) for s in slots_of(timing, seg_start, at)}
        if op == "replace-schedule":
            if arg != timing[0]:
                timing = (arg, ceil_s(at))
        elif op == "pause":
            if enabled:
                enabled, paused_at = False, at
        elif op in ("resume", "final-resume") and not enabled:
            assert paused_at is not None
            m.pause_owed |= {sk(s) for s in slots_of(timing, paused_at, at, lo_incl=True)}
            enabled, paused_at = True, None
        seg_start = at
    final = {sk(s) for s in slots_of(timing, FINAL, END)}
    m.owed_enabled |= final
    m.final_enabled = {s for s in final if parse_sk(s) <= END - timedelta(seconds=10)}
    return m


# ----------------------------------------------------------------------------- driver


class Driver:
    """Runs a case on a fresh :class:`Run`."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self.run = Run(T0)
        self.run.jobs.secrets = _Secrets()
        self.payload = 0
        self.schedule = case.schedule

    def spec(self) -> Any:
        catchup = {"policy": self.case.policy, "window_seconds": 3600}
        return spec(self.schedule, target=HOOK, payload={"v": self.payload}, catchup=catchup)

    def go(self) -> None:
        run, case = self.run, self.case
        run.jobs.register("default", self.spec(), job_id="j")
        points: list[tuple[float, int, str, Any]] = [(off, 1, op, arg) for off, op, arg in case.ops]
        for a, b in case.outages:
            points += [(a, 0, "outage-start", None), (b, 0, "outage-end", None)]
        points += [
            (FINAL_OFF, 0, "outage-end", None),
            (FINAL_OFF, 2, "resume", None),
            (END_OFF, 3, "end", None),
        ]
        points.sort(key=lambda p: (p[0], p[1]))
        down = False
        for off, _, what, arg in points:
            t = T0 + timedelta(seconds=off)
            if run.clock.now() < t:
                if down:
                    run.clock.set(t)  # pollers down: time passes unpolled
                else:
                    run.until(t, step_s=case.step)
            if case.lag and not down and what in OPS:
                run.clock.set(t)
                run.rig.poll()  # released by the operation's instant; the workers are behind
            if what == "outage-start":
                down = True
            elif what == "outage-end" and down:
                down = False
                run.rig.poll()
                run.rig.work_until_idle(run.worker)
            elif what.startswith("replace"):
                self.schedule = arg if what == "replace-schedule" else self.schedule
                self.payload += what == "replace-payload"
                run.jobs.replace("default", "j", self.spec())
            elif what == "pause":
                run.jobs.pause("default", "j")
            elif what == "resume":
                run.jobs.resume("default", "j")
            elif what == "rotate":
                run.jobs.rotate_secret("default", "j")


def covered(records: dict[str, tuple[str, str | None]], run: Run) -> dict[str, tuple[str, str | None]]:
    """slot -> (status, error), range records expanded over slot..last_slot."""
    out = dict(records)
    items = run.rig.store.list_executions("default", "j", limit=500).items
    for r in items:
        if getattr(r, "last_slot", None):
            out[f"range:{r.slot}..{r.last_slot}"] = (r.status.value, r.error)
    return out


def in_range(slot: str, cov: dict[str, Any]) -> bool:
    for key in cov:
        if key.startswith("range:"):
            a, b = key[6:].split("..")
            if a <= slot <= b:
                return True
    return False


def check(case: Case) -> tuple[list[tuple[str, str]], Driver, Model]:
    """Failures as (rule, detail)."""
    m = model(case)
    d = Driver(case)
    fails: list[tuple[str, str]] = []
    try:
        d.go()
    except Exception as exc:
        tb = traceback.format_exc().strip().splitlines()
        return [("R4", f"{type(exc).__name__}: {exc} @ {tb[-3].strip() if len(tb) > 2 else ''}")], d, m
    ran = d.run.ran()
    recs = covered(_records(d.run), d.run)
    allowed = m.owed_enabled | m.pause_owed
    final_s = sk(FINAL)
    twice = sorted(s for s, c in ran.items() if c != 1)
    if twice:
        fails.append(("R1", f"ran more than once: {twice}"))
    extra = sorted(s for s in ran if s not in allowed)
    if extra:
        fails.append(("R2", f"ran but never owed: {extra}"))
    lost = sorted(
        s for s in allowed if s < final_s and s not in ran and s not in recs and not in_range(s, recs)
    )
    if lost:
        fails.append(("R3", f"owed, not run, no record: {lost}"))
    notrun = sorted(s for s in m.final_enabled if s not in ran)
    if notrun:
        fails.append(("R3b", f"normal running, not run: {notrun} (records: {[recs.get(s) for s in notrun]})"))
    if case.policy == "all":
        bad = sorted(
            s
            for s in allowed
            if s < final_s
            and s not in ran
            and not (s in recs and recs[s][0] == "MISSED" and (recs[s][1] or "").startswith("job replaced"))
        )
        if bad:
            fails.append(("R5", f"policy all, owed slot not run: {[(s, recs.get(s)) for s in bad]}"))
    return fails, d, m
