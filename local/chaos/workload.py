"""The workload: a seeded mix of jobs, registered through the API, and changes made while they fire.

Every job's webhook points at the local receiver (``/hook/<key>``); its URL says how the
receiver answers (``fail=N``: 500 to the first N requests of each slot; ``delay=S``: hold
the answer S seconds, a run that lasts), and its payload carries job, slot, attempt and
scheduled instant, so every request the receiver records says what it was.

Kinds (the ``kind`` the verdict judges by):

``rate``      ``rate(N seconds)``, N in 1..10; some are *mutable* (paused and resumed, or
              replaced with another period or payload while they fire)
``slow``      ``rate(N seconds)`` whose receiver holds each request a few seconds (so that
              a ``kill -9`` lands mid-run); a ``late`` rule (2 s) to an endpoint that fails its
              first try
``cron``      every minute, Unix and AWS syntax (also parents of an ``after``)
``pair``      ``rate(10 seconds)`` with one shared ``start_at``, so two of them share slots
              and can be parents of an ``after``
``after``     ``after(A, B)`` of two crons or of a pair
``at``        one-time ``at(...)`` inside the run
``flaky``     fails N times per slot (500), then succeeds; fixed or jittered backoff
``doomed``    always fails: must end FAILED (or TIMED_OUT) after ``max_attempts``; carries an
              alert rule on ``failed`` to an endpoint that fails its first try (the receiver's
              ``/alert/<name>?fail=1``: the alert ledger); an ECS one (``doomed-ecs``) also has
              ``failed`` and ``late`` rules to endpoints that hang past the sender's timeout
              (``?hang=12``: every try times out, the alert ends FAILED)
``delay``     ``delay(N seconds)``: each run N after the previous one ended
``ecs``       ``runtime=ecs``, each run held by the receiver for tens of seconds
``backfill``  every minute, and backfilled over a few minutes before it was registered (the same
              request sent twice, a moment apart, while the faults run): each of those past
              slots must run exactly once, marked as backfilled
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from local.chaos.ledger import LedgerWriter

PAYLOAD = {"job": "<job_id>", "slot": "<slot>", "attempt": "<attempt>", "scheduled_at": "<scheduled_at>"}
LAMBDA_TIMEOUT_S = 10  # the chaos jobs' timeout on the Lambda lane (seconds)
ECS_TIMEOUT_S = 120
# Jobs that should succeed keep trying: a run lost to a kill -9 is an attempt too.
# An alert endpoint that holds every answer longer than the sender's 10 s timeout: it hangs.
HANGS = "?hang=12"
STEADY_RETRY = {"max_attempts": 10, "backoff": "fixed", "base_seconds": 1, "max_seconds": 1, "jitter": False}

Api = Callable[[str, str, Any], tuple[int, Any]]


@dataclass
class JobPlan:
    """One job of the workload, before it is registered."""

    key: str
    kind: str
    schedule: str = ""
    parents: tuple[str, ...] = ()
    fail: int = 0
    hold_s: float = 0.0
    retry: dict[str, Any] = field(default_factory=lambda: dict(STEADY_RETRY))
    runtime: str = "lambda"
    timeout_s: int = LAMBDA_TIMEOUT_S
    start_at: str | None = None
    meant_to_fail: bool = False
    mutable: bool = False
    # Alert rules, each (conditions, endpoint query, late_after_seconds): to the receiver's
    # /alert/<key>-<i><query>, whose query says how it answers (fail=N, hang=S).
    alerts: tuple[tuple[tuple[str, ...], str, int], ...] = ()
    backfill: tuple[str, str] | None = None  # the range [start, end) to backfill during the run

    def hook(self, receiver_url: str) -> str:
        query = {k: v for k, v in (("fail", self.fail), ("delay", self.hold_s)) if v}
        return f"{receiver_url}/hook/{self.key}" + (f"?{urlencode(query)}" if query else "")

    def spec(self, receiver_url: str, ids: dict[str, str]) -> dict[str, Any]:
        schedule = self.schedule
        if self.parents:
            schedule = f"after({', '.join(ids[p] for p in self.parents)})"
        spec: dict[str, Any] = {
            "name": f"chaos {self.key}",
            "schedule": schedule,
            "target": {"type": "http", "url": self.hook(receiver_url)},
            "payload": PAYLOAD,
            "timeout_seconds": self.timeout_s,
            "retry": self.retry,
            "runtime": self.runtime,
            "tags": {"chaos": self.kind},
        }
        if self.start_at:
            spec["start_at"] = self.start_at
        if self.alerts:
            spec["alerts"] = []
            for index, (on, query, late_after) in enumerate(self.alerts):
                target = {"type": "http", "url": f"{receiver_url}/alert/{self.key}-{index}{query}"}
                rule: dict[str, Any] = {"on": list(on), "target": target}
                if late_after:
                    rule["late_after_seconds"] = late_after
                spec["alerts"].append(rule)
        return spec


@dataclass(frozen=True)
class Scale:
    """How many jobs of each kind."""

    rate_periods: tuple[int, ...]
    mutable: int
    slow: int
    cron_pairs: int
    rate_pairs: int
    at: int
    flaky: int
    doomed: int
    delay: int
    ecs: int
    ecs_hold_s: tuple[float, float]
    backfill: int = 1
    doomed_ecs: int = 1  # a doomed ECS job whose alert endpoints hang

    @classmethod
    def for_duration(cls, seconds: float) -> Scale:
        if seconds <= 150:  # the short run in `make test`: tens of jobs on a busy 2-core machine
            return cls((2, 3, 5, 7, 10), 2, 1, 1, 1, 2, 2, 1, 1, 2, (5.0, 8.0))
        # The long run: longer, not much heavier (moto serves every process from one core).
        return cls((1, 3, 4, 5, 7, 10), 3, 1, 1, 1, 5, 2, 1, 2, 2, (15.0, 30.0))


def _aligned(moment: datetime, step_s: int) -> datetime:
    seconds = int(moment.timestamp())
    return datetime.fromtimestamp(seconds - seconds % step_s + step_s, tz=UTC)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def plan_jobs(rng: random.Random, scale: Scale, now: datetime, faults_s: float) -> list[JobPlan]:
    """The jobs, parents before children; ``now`` is about when they are registered."""
    jobs: list[JobPlan] = []
    periods = list(scale.rate_periods)
    rng.shuffle(periods)
    for index, period in enumerate(periods):
        jobs.append(JobPlan(f"rate-{index:02d}", "rate", f"rate({period} second{'s' if period > 1 else ''})"))
    for job in rng.sample(jobs, min(scale.mutable, len(jobs))):
        job.mutable = True
    for index in range(scale.slow):
        period = rng.choice((8, 10, 12))
        late = ((("late",), "?fail=1", 2),)
        jobs.append(JobPlan(f"slow-{index:02d}", "slow", f"rate({period} seconds)", hold_s=3.0, alerts=late))
    for index in range(scale.cron_pairs):
        a, b = f"cron-{index:02d}a", f"cron-{index:02d}b"
        jobs.append(JobPlan(a, "cron", "* * * * *"))
        jobs.append(JobPlan(b, "cron", "cron(* * * * ? *)"))
        jobs.append(JobPlan(f"after-cron-{index:02d}", "after", parents=(a, b)))
    start = _iso(_aligned(now + timedelta(seconds=12), 10))
    for index in range(scale.rate_pairs):
        a, b = f"pair-{index:02d}a", f"pair-{index:02d}b"
        jobs.append(JobPlan(a, "pair", "rate(10 seconds)", start_at=start))
        jobs.append(JobPlan(b, "pair", "rate(10 seconds)", start_at=start))
        jobs.append(JobPlan(f"after-pair-{index:02d}", "after", parents=(a, b)))
    for index in range(scale.at):
        offset = rng.uniform(15, max(20.0, faults_s - 5))
        moment = (now + timedelta(seconds=offset)).replace(microsecond=0)
        jobs.append(JobPlan(f"at-{index:02d}", "at", f"at({moment.strftime('%Y-%m-%dT%H:%M:%S')})"))
    for index in range(scale.flaky):
        retry: dict[str, Any]
        if index % 2 == 0:
            retry = {
                "max_attempts": 10,
                "backoff": "fixed",
                "base_seconds": 3,
                "max_seconds": 3,
                "jitter": False,
            }
        else:
            retry = {
                "max_attempts": 10,
                "backoff": "exponential",
                "base_seconds": 1,
                "max_seconds": 4,
                "jitter": True,
            }
        jobs.append(
            JobPlan(
                f"flaky-{index:02d}",
                "flaky",
                f"rate({rng.choice((15, 20))} seconds)",
                fail=1 + index % 2,
                retry=retry,
            )
        )
    for index in range(scale.doomed):
        jobs.append(
            JobPlan(
                f"doomed-{index:02d}",
                "doomed",
                "rate(20 seconds)",
                fail=1000,
                retry={
                    "max_attempts": 3,
                    "backoff": "fixed",
                    "base_seconds": 2,
                    "max_seconds": 2,
                    "jitter": False,
                },
                meant_to_fail=True,
                alerts=((("failed",), "?fail=1", 0),),
            )
        )
    for index in range(scale.doomed_ecs):
        jobs.append(
            JobPlan(
                f"doomed-ecs-{index:02d}",
                "doomed",
                "rate(20 seconds)",
                fail=1000,
                retry={
                    "max_attempts": 2,
                    "backoff": "fixed",
                    "base_seconds": 2,
                    "max_seconds": 2,
                    "jitter": False,
                },
                runtime="ecs",
                timeout_s=ECS_TIMEOUT_S,
                meant_to_fail=True,
                alerts=((("failed",), HANGS, 0), (("failed",), "?fail=1", 0), (("late",), HANGS, 1)),
            )
        )
    for index in range(scale.delay):
        jobs.append(JobPlan(f"delay-{index:02d}", "delay", f"delay({rng.choice((4, 5, 6))} seconds)"))
    for index in range(scale.ecs):
        hold = round(rng.uniform(*scale.ecs_hold_s), 1)
        jobs.append(
            JobPlan(
                f"ecs-{index:02d}",
                "ecs",
                f"rate({int(hold * 2 + 10)} seconds)",
                hold_s=hold,
                runtime="ecs",
                timeout_s=ECS_TIMEOUT_S,
            )
        )
    # A range that ends before the job is registered: its slots are owed by the backfill alone.
    backfill_end = now.replace(second=0, microsecond=0) - timedelta(minutes=1)
    backfill_range = (_iso(backfill_end - timedelta(minutes=4)), _iso(backfill_end))
    for index in range(scale.backfill):
        jobs.append(JobPlan(f"backfill-{index:02d}", "backfill", "* * * * *", backfill=backfill_range))
    return jobs


@dataclass(frozen=True)
class Mutation:
    """A change made to a job while it fires, ``at_s`` after the faults started."""

    at_s: float
    key: str
    op: str  # pause | resume | update | backfill
    schedule: str | None = None  # update: the new schedule (None: the payload changes)
    backfill: tuple[str, str] | None = None  # backfill: the range [start, end)


def plan_mutations(rng: random.Random, jobs: list[JobPlan], faults_s: float) -> list[Mutation]:
    """Pause/resume pairs and updates of the mutable jobs, spread over the run."""
    out: list[Mutation] = []
    mutable = [job for job in jobs if job.mutable]
    rounds = max(1, int(faults_s // 150))
    for job in mutable:
        window = faults_s / rounds
        for r in range(rounds):
            begin = r * window + rng.uniform(0.1, 0.5) * window
            if rng.random() < 0.5:
                out.append(Mutation(begin, job.key, "pause"))
                out.append(Mutation(begin + rng.uniform(3, min(20, window * 0.4)), job.key, "resume"))
            elif rng.random() < 0.5:
                period = rng.choice((2, 3, 4, 6, 8))
                out.append(Mutation(begin, job.key, "update", f"rate({period} seconds)"))
            else:
                out.append(Mutation(begin, job.key, "update"))
    for job in (job for job in jobs if job.backfill):
        # The same request twice, a moment apart: the second must start nothing new.
        begin = rng.uniform(2, max(3.0, min(10.0, faults_s / 4)))
        out.append(Mutation(begin, job.key, "backfill", backfill=job.backfill))
        out.append(Mutation(begin + rng.uniform(0.2, 1.5), job.key, "backfill", backfill=job.backfill))
    return sorted(out, key=lambda m: m.at_s)


class Workload:
    """Registers the jobs and applies mutations through the API, writing each call to the ledger."""

    def __init__(self, api: Api, receiver_url: str, ledger: LedgerWriter) -> None:
        self.api = api
        self.receiver_url = receiver_url
        self.ledger = ledger
        self.ids: dict[str, str] = {}
        self.specs: dict[str, dict[str, Any]] = {}
        self.plans: dict[str, JobPlan] = {}
        # Each job's versions as the API answered them: (answered at, version), oldest first
        self.versions: dict[str, list[tuple[float, int]]] = {}

    def version_at(self, job_id: str, moment: float) -> int:
        """The job's version the API had answered at ``moment`` (what a release then carried)."""
        known = [version for answered, version in self.versions.get(job_id, []) if answered <= moment]
        return known[-1] if known else 1

    def _answered(self, job_id: str, answered: float, reply: Any) -> None:
        if isinstance(reply, dict) and isinstance(reply.get("version"), int):
            self.versions.setdefault(job_id, []).append((answered, int(reply["version"])))

    def register(self, jobs: list[JobPlan]) -> None:
        for job in jobs:
            spec = job.spec(self.receiver_url, self.ids)
            sent = time.time()
            status, body = self.api("POST", "/v1/jobs", spec)
            answered = time.time()
            self.ledger.write(
                "register",
                key=job.key,
                kind=job.kind,
                spec=spec,
                fail_times=job.fail,
                meant_to_fail=job.meant_to_fail,
                parents=list(job.parents),
                sent=sent,
                answered=answered,
                status=status,
                job=body,
            )
            if status != 201 or not isinstance(body, dict):
                raise RuntimeError(f"registering {job.key} failed: HTTP {status} {body}")
            self.ids[job.key] = str(body["id"])
            self._answered(str(body["id"]), answered, body)
            self.specs[job.key] = spec
            self.plans[job.key] = job

    def apply(self, mutation: Mutation) -> tuple[int, Any]:
        job_id = self.ids[mutation.key]
        body: Any = None
        if mutation.op == "backfill":
            assert mutation.backfill is not None
            body = {"start": mutation.backfill[0], "end": mutation.backfill[1], "max_parallel": 2}
            method, path = "POST", f"/v1/jobs/{job_id}/backfill"
        elif mutation.op == "update":
            spec = dict(self.specs[mutation.key])
            if mutation.schedule:
                spec["schedule"] = mutation.schedule
            else:
                spec["payload"] = {**PAYLOAD, "revision": str(int(time.time()))}
            body = spec
            method, path = "PUT", f"/v1/jobs/{job_id}"
        else:
            method, path = "POST", f"/v1/jobs/{job_id}/{mutation.op}"
        sent = time.time()
        status, reply = self.api(method, path, body)
        answered = time.time()
        self.ledger.write(
            mutation.op,
            key=mutation.key,
            job_id=job_id,
            sent=sent,
            answered=answered,
            status=status,
            job=reply,
            spec=body,
        )
        if status == 200:
            self._answered(job_id, answered, reply)
        if status == 200 and body is not None and mutation.op == "update":
            self.specs[mutation.key] = body
        return status, reply
