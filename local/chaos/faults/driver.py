"""The fault driver: a seeded plan of faults, injected in real time while the workload fires.

The plan is a pure function of the seed and the run's length (:func:`plan_faults`): the same
seed gives the same faults at the same offsets against the same targets, and the run prints
it. What each fault meets depends on timing, so every injection is logged as it happens to
``faults.jsonl`` (and printed) with what the victim was doing.

Kinds:

``kill``
    ``kill -9`` of a process: local mode's own ``poller``, ``worker-1``, ``worker-2``,
    ``ecs-worker``, ``ecs-worker-2`` (the supervisor restarts them) or the driver's ``poller-skewed``,
    ``worker-chaos``, ``ecs-chaos`` (the driver restarts them). Modes: ``any`` (now),
    ``mid-batch`` (a Lambda worker holding a received batch; the poller just after a whole
    second, when it releases, or at a minute's top when the crons do) and ``mid-run`` (a
    worker whose run is in flight at the receiver). A target is left alone for a while after
    it was killed, so that it comes back and works between deaths. Each kill is logged with
    ``minute_s`` (the second of the UTC minute it happened at) and, for a Lambda worker,
    ``held``: the deliveries its batch held (job, slot, attempt), read when it died, which
    the verdict leaves out of the fire delay.
``mid-minute``
    every plan, whatever its seed, kills the ``poller`` mid-minute at least once (one in
    every :data:`MID_MINUTE_EVERY_S`): from its planned offset, the driver waits (in its own
    thread, the rest of the plan going on) for a moment between seconds 18 and 42 of a UTC
    minute, just after a whole second, with the poller up for a while, and kills it then.
    Its offset leaves :data:`MID_MINUTE_LEAD_S` before the end, time for that moment to come
    (at most 36 s) and for the restarted poller to catch up before the cut. Other kills of the
    poller are skipped while it is pending.
``skew``
    (re)start ``poller-skewed``, a second poller on the same shard group with
    ``PUNCTUAL_CLOCK_OFFSET_S`` of up to +/-``max_skew_s``, alternating signs.
``duplicate``
    re-send the body of a message that was already delivered (rebuilt from what the
    receiver saw: tenant, job, slot, attempt, scheduled instant, and the job's version when it
    arrived), signed with local mode's dispatch key as the original was, to its work queue with
    a fresh deduplication id, as SQS would after its five-minute window; ``old`` ones are
    taken from deliveries more than five minutes old when there are any.
``mutation``
    pause, resume or replace a job while it fires (:mod:`local.chaos.workload`).

Throttling is not planned here: the driver's own processes are started with
``--throttle-rate`` (:mod:`local.chaos.faults.procs`) and log each injected error.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import signal
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from local.chaos.faults.planned import MID_MINUTE, MID_MINUTE_S, PlannedFault
from local.chaos.faults.procs import ChaosProcess
from local.chaos.faults.sustained import SUSTAINED, choose_victim
from local.chaos.ledger import LedgerWriter
from local.chaos.workload import Mutation, Workload

SUPERVISED = ("poller", "poller-2", "worker-1", "worker-2", "worker-3", "ecs-worker", "ecs-worker-2")
LAMBDA_WORKERS = ("worker-1", "worker-2", "worker-3", "worker-chaos")
LAMBDA_TARGET = "a Lambda worker"
OWN = ("poller-skewed", "worker-chaos", "ecs-chaos")
KILL_WEIGHTS = {
    "worker-1": 2.0,
    "worker-2": 2.0,
    "poller": 1.5,
    "poller-2": 1.5,  # each shard group's second poller (its own process)
    "ecs-worker": 0.5,  # the ECS service's two tasks (local mode's ecs_workers): as often as one was
    "ecs-worker-2": 0.5,
    "worker-chaos": 1.0,
    "poller-skewed": 0.5,
    "ecs-chaos": 0.5,
}
# long runs need time to finish between deaths
RESPITE_S = {"ecs-worker": 30.0, "ecs-worker-2": 30.0, "ecs-chaos": 30.0}
DEFAULT_RESPITE_S = 12.0
MODE_WAIT_S = 6.0  # how long a mid-batch/mid-run kill waits for its moment before killing anyway
MID_MINUTE_EVERY_S = 120  # one mid-minute poller kill in every such stretch of the run
MID_MINUTE_LEAD_S = 40.0  # ... planned at least this long before the end (see the docstring)
MID_MINUTE_UP_S = 2.0  # the poller has run this long when it is killed mid-minute
OLD_S = 300.0  # SQS FIFO's deduplication window
TENANT = "chaos"


@dataclass(frozen=True)
class FaultOptions:
    kill_every_s: float = 5.0
    duplicate_every_s: float = 2.5
    skew_every_s: float = 120.0
    max_skew_s: float = 5.0
    throttle_rate: float = 0.05
    # DynamoDB as it behaves (local/moto_fidelity.py): reads up to this far behind, and this
    # share of the writes on items a transaction holds cancelled for a conflict.
    stale_reads_s: float = 1.0
    transaction_conflicts: float = 0.1


def plan_faults(
    rng: random.Random, seconds: float, options: FaultOptions, mutations: list[Mutation]
) -> list[PlannedFault]:
    """Every fault of a run of ``seconds``, in order: a pure function of ``rng``'s seed."""
    plan: list[PlannedFault] = []
    sign = rng.choice((-1.0, 1.0))
    at = 0.0
    while at < seconds:
        # at least 1 s off, never more than the largest asked for (--max-skew 0: no skew at all)
        offset = sign * rng.uniform(min(1.0, options.max_skew_s), options.max_skew_s)
        plan.append(PlannedFault(at, "skew", offset_s=round(offset, 2)))
        sign = -sign
        at += options.skew_every_s
    names = list(KILL_WEIGHTS)
    weights = [KILL_WEIGHTS[n] for n in names]
    at = rng.uniform(2.0, options.kill_every_s)
    while at < seconds:
        target = rng.choices(names, weights)[0]
        mode = rng.choices(("any", "mid-batch", "mid-run", "mid-takeover"), (0.25, 0.3, 0.3, 0.15))[0]
        if mode == "mid-takeover":
            target = LAMBDA_TARGET  # whichever Lambda worker runs a retried or taken-over attempt
        elif target.startswith("poller") and mode == "mid-run":
            mode = "mid-batch"
        plan.append(PlannedFault(round(at, 2), "kill", target=target, mode=mode))
        at += options.kill_every_s * rng.uniform(0.5, 1.5)
    at = rng.uniform(3.0, 3.0 + options.duplicate_every_s)
    while at < seconds:
        old = at > OLD_S + 30 and rng.random() < 0.3
        plan.append(
            PlannedFault(round(at, 2), "duplicate", count=rng.randint(1, 3), mode="old" if old else "recent")
        )
        at += options.duplicate_every_s * rng.uniform(0.5, 1.5)
    plan.extend(PlannedFault(round(m.at_s, 2), "mutation", mutation=m) for m in mutations)
    # Last, so that a seed's other faults are the ones it gave before these were planned.
    latest = seconds - MID_MINUTE_LEAD_S
    stretches = [w for w in range(0, math.ceil(seconds), MID_MINUTE_EVERY_S) if w + 3.0 <= latest] or [0]
    for start in stretches:
        high = max(start + 3.0, min(start + MID_MINUTE_EVERY_S / 2, latest))
        at = round(rng.uniform(start + 3.0, high), 2)
        plan.append(PlannedFault(at, "kill", target="poller", mode=MID_MINUTE))
    return sorted(plan, key=lambda f: f.at_s)


# --------------------------------------------------------------------------- what the receiver saw


class ReceiverFollower:
    """Keeps a copy of the receiver's records (``GET /records?since=n``), refreshed every second."""

    def __init__(self, receiver_url: str) -> None:
        self.url = receiver_url
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="chaos-follow", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=10)

    def refresh(self) -> None:
        """Append what arrived since; pending records are re-read until they are answered."""
        with self._lock:
            first_pending = next((i for i, r in enumerate(self.records) if r.get("status") is None), None)
            since = len(self.records) if first_pending is None else first_pending
        try:
            with urllib.request.urlopen(f"{self.url}/records?since={since}", timeout=10) as reply:
                fresh = json.loads(reply.read())["records"]
        except (OSError, ValueError, KeyError):
            return
        with self._lock:
            self.records[since:] = fresh

    def _follow(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(1.0)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self.records]

    def pending(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self.records if r.get("status") is None]


# --------------------------------------------------------------------------- the driver


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return False


def _age_s(pid: int) -> float:
    """How long the process has run (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _is_component(pid: int, name: str) -> bool:
    """The pid still belongs to a local-mode component process (never kill a reused pid)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    words = [w.decode(errors="replace") for w in command]
    return "local" in words or "local.chaos.faults.procs" in words


@dataclass
class FaultDriver:
    """Runs a fault plan against a running local mode."""

    plan: list[PlannedFault]
    state_dir: Path  # local mode's --state-dir
    log: LedgerWriter  # faults.jsonl
    follower: ReceiverFollower
    workload: Workload
    sqs: Any
    short_queue_urls: list[str]
    long_queue_urls: list[str]
    processes: dict[str, ChaosProcess]
    make_skewed: Callable[[float], ChaosProcess]
    rng: random.Random
    echo: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)
    started: float = 0.0
    last_kill: dict[str, float] = field(default_factory=dict)
    offsets: list[float] = field(default_factory=list)
    waiting: set[str] = field(default_factory=set)  # targets of a pending mid-minute kill
    _signer: Any = None  # see signer()

    # ------------------------------------------------------------------ running

    def run(self, stop: threading.Event) -> None:
        self.started = time.time()
        keeper = threading.Thread(target=self._keep, args=(stop,), name="chaos-keeper", daemon=True)
        keeper.start()
        waits: list[threading.Thread] = []
        for fault in self.plan:
            delay = self.started + fault.at_s - time.time()
            if stop.wait(max(delay, 0.0)):
                break  # the run's length is up (a slow machine may leave the plan's tail unplayed)
            if fault.kind == "kill" and fault.mode == MID_MINUTE:
                self.waiting.add(fault.target)
                wait = threading.Thread(
                    target=self.mid_minute, args=(fault, stop), name="chaos-mid-minute", daemon=True
                )
                wait.start()
                waits.append(wait)
                continue
            try:
                self.inject(fault)
            except Exception as exc:  # a fault that could not be injected is logged, never fatal
                self.note(fault, "failed", error=f"{type(exc).__name__}: {exc}")
        for wait in waits:  # each ends with its kill, or skipped when the run's time is up (stop)
            wait.join(timeout=2 * MID_MINUTE_EVERY_S)
        stop.set()
        keeper.join(timeout=5)

    def _keep(self, stop: threading.Event) -> None:
        """Restart the driver's own processes after they die (as the supervisor does for its own)."""
        while not stop.wait(0.5):
            for name, process in list(self.processes.items()):
                if process.check():
                    self.echo(f"chaos: restarted {name} (pid {process.pid})")

    def note(self, fault: PlannedFault, outcome: str, **fields: Any) -> None:
        record = self.log.write(
            fault.kind if outcome == "done" else f"{fault.kind}-{outcome}",
            planned_s=fault.at_s,
            offset_s=round(time.time() - self.started, 2),
            **fields,
        )
        detail = ", ".join(f"{k} {v}" for k, v in fields.items() if k not in ("t",))
        self.echo(
            f"chaos: +{record['offset_s']:.1f}s {fault.describe()}: {outcome}"
            + (f" ({detail})" if detail else "")
        )

    def inject(self, fault: PlannedFault) -> None:
        if fault.kind == "kill":
            self.kill(fault)
        elif fault.kind == "skew":
            self.skew(fault)
        elif fault.kind == "duplicate":
            self.duplicate(fault)
        elif fault.kind == "mutation":
            assert fault.mutation is not None
            status, body = self.workload.apply(fault.mutation)
            version = body.get("version") if isinstance(body, dict) else None
            done = status == (202 if fault.mutation.op == "backfill" else 200)
            self.note(fault, "done" if done else "refused", status=status, version=version)

    # ------------------------------------------------------------------ kill -9

    def pid_of(self, name: str) -> int | None:
        if name in self.processes:
            process = self.processes[name]
            return process.pid if process.running() else None
        try:
            pid = int((self.state_dir / "run" / f"{name}.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) and _is_component(pid, name) else None

    def up_s(self, name: str) -> float | None:
        """How long the process has been running (None: it is not)."""
        pid = self.pid_of(name)
        return None if pid is None else _age_s(pid)

    def inflight(self, name: str) -> list[dict[str, Any]]:
        try:
            messages = json.loads((self.state_dir / "run" / f"{name}.inflight.json").read_text())["messages"]
        except (OSError, ValueError, KeyError, TypeError):
            return []
        return [m for m in messages if isinstance(m, dict)]

    def busy(self, name: str, mode: str) -> list[str] | None:
        """What the victim is doing right now if it fits ``mode``, else None."""
        if name.startswith("poller"):
            fraction = time.time() % 1.0
            second = datetime.now(UTC).second
            top = second >= 59 or second == 0
            return ["minute top" if top else "second tick"] if 0.01 <= fraction <= 0.12 else None
        if name.startswith("ecs"):
            pending = [r for r in self.follower.pending() if "ecs" in str(r.get("name", ""))]
            if mode == "mid-run":
                return [
                    f"{r.get('name')} {r.get('slot')} attempt {r.get('attempt')}" for r in pending
                ] or None
            return [f"{len(pending)} ECS run(s) in flight"] if pending else None
        batch = self.inflight(name)
        if not batch:
            return None
        described = [f"{m.get('job_id')} {m.get('slot')} attempt {m.get('attempt')}" for m in batch]
        if mode == "mid-batch":
            return described
        in_flight = {(r.get("job"), r.get("slot")) for r in self.follower.pending()}
        running = [
            d for m, d in zip(batch, described, strict=True) if (m.get("job_id"), m.get("slot")) in in_flight
        ]
        return running or None

    def takeover_in_flight(self) -> tuple[str, list[str]] | None:
        """A Lambda worker running an attempt after the first (a retry or a takeover), if any."""
        running = {
            (r.get("job"), r.get("slot"), r.get("attempt"))
            for r in self.follower.pending()
            if int(r.get("attempt") or 0) >= 2
        }
        for name in LAMBDA_WORKERS:
            batch = self.inflight(name)
            hits = [
                f"{m.get('job_id')} {m.get('slot')} running attempt {attempt}"
                for m in batch
                for (job, slot, attempt) in running
                if (job, slot) == (m.get("job_id"), m.get("slot"))
            ]
            if hits and time.time() - self.last_kill.get(name, 0.0) >= DEFAULT_RESPITE_S:
                return name, hits
        return None

    def mid_minute(self, fault: PlannedFault, stop: threading.Event) -> None:
        """Kill the target between seconds 18 and 42 of a UTC minute, just after a whole second."""
        low, high = MID_MINUTE_S
        try:
            while not stop.is_set():
                now = time.time()
                second = now % 60.0
                if low <= second < high and 0.01 <= now % 1.0 <= 0.12:
                    pid = self.pid_of(fault.target)
                    if pid is not None and _age_s(pid) >= MID_MINUTE_UP_S:
                        busy = [f"second {second:.2f} of the minute"]
                        if self.kill_now(fault, fault.target, busy, quiet=True):
                            return
                stop.wait(0.01)
            self.note(fault, "skipped", reason="the run ended before a mid-minute moment came")
        except Exception as exc:  # logged, never fatal
            self.note(fault, "failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            self.waiting.discard(fault.target)

    def kill(self, fault: PlannedFault) -> None:
        if fault.mode == SUSTAINED:  # a sustained-fault phase: the victim is chosen now
            name = choose_victim(fault.target, self.rng, self.up_s)
            if name is None:
                self.note(fault, "skipped", reason="none of its processes is up")
                return
            self.kill_now(fault, name, self.busy(name, "mid-batch"))
            return
        if fault.target in self.waiting:
            self.note(fault, "skipped", reason="a mid-minute kill of it is pending")
            return
        if fault.mode == "mid-takeover":
            found = None
            deadline = time.monotonic() + MODE_WAIT_S
            while found is None and time.monotonic() < deadline:
                found = self.takeover_in_flight()
                time.sleep(0.05)
            if found is None:
                self.note(fault, "skipped", reason="no retried or taken-over attempt in flight")
                return
            fault = PlannedFault(fault.at_s, "kill", target=found[0], mode="mid-takeover")
        name = fault.target
        since = time.time() - self.last_kill.get(name, 0.0)
        respite = RESPITE_S.get(name, DEFAULT_RESPITE_S)
        if since < respite:
            self.note(fault, "skipped", reason=f"killed {since:.0f}s ago")
            return
        busy: list[str] | None = None
        if fault.mode == "mid-takeover":
            busy = self.busy(name, "mid-batch")
        elif fault.mode != "any":
            deadline = time.monotonic() + MODE_WAIT_S
            while time.monotonic() < deadline:
                busy = self.busy(name, fault.mode)
                if busy:
                    break
                time.sleep(0.01 if name.startswith("poller") else 0.05)
        self.kill_now(fault, name, busy)

    def kill_now(self, fault: PlannedFault, name: str, busy: list[str] | None, quiet: bool = False) -> bool:
        """``kill -9`` the target now and log it; False (logged unless ``quiet``) if it was not running."""
        pid = self.pid_of(name)
        if pid is None:
            if not quiet:
                self.note(fault, "skipped", reason="not running")
            return False
        before = self.held(name)
        if name in self.processes:
            killed = self.processes[name].kill9()
        else:
            killed = pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        if killed is None:
            if not quiet:
                self.note(fault, "skipped", reason="not running")
            return False
        self.last_kill[name] = killed_at
        held = self.held_when_dead(name, killed, before)
        self.log.write(
            "kill",
            t=killed_at,
            target=name,
            pid=killed,
            mode=fault.mode,
            busy=busy or [],
            planned_s=fault.at_s,
            minute_s=round(killed_at % 60.0, 2),
            held=held,
        )
        self.echo(
            f"chaos: +{killed_at - self.started:.1f}s kill -9 {name} (pid {killed}, {fault.mode}"
            + (f": {'; '.join(busy[:3])}" if busy else ": idle")
            + f"; second {killed_at % 60.0:.1f} of the minute)"
        )
        return True

    def held(self, name: str) -> list[dict[str, Any]]:
        """The deliveries a Lambda worker's batch holds (job id, slot, attempt); [] for the others."""
        if name not in LAMBDA_WORKERS:
            return []
        return [
            {"job_id": m.get("job_id"), "slot": m.get("slot"), "attempt": m.get("attempt")}
            for m in self.inflight(name)
            if m.get("job_id") and m.get("slot")
        ]

    def held_when_dead(self, name: str, pid: int, before: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What the worker held when it died: its batch file read once it is gone (before its
        successor returns the batch), with what it held just before the kill."""
        if name not in LAMBDA_WORKERS:
            return []
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and (
            self.processes[name].running() if name in self.processes else _alive(pid)
        ):
            time.sleep(0.005)
        out = list(before)
        out += [item for item in self.held(name) if item not in out]
        return out

    # ------------------------------------------------------------------ a second, skewed poller

    def skew(self, fault: PlannedFault) -> None:
        old = self.processes.pop("poller-skewed", None)
        if old is not None:
            old.stop(timeout_s=5)
        process = self.make_skewed(fault.offset_s)
        process.start()
        self.processes["poller-skewed"] = process
        self.offsets.append(fault.offset_s)
        self.log.write("skewed-poller", offset_s=fault.offset_s, pid=process.pid, planned_s=fault.at_s)
        self.echo(
            f"chaos: +{time.time() - self.started:.1f}s poller-skewed started, clock {fault.offset_s:+.2f}s"
        )

    # ------------------------------------------------------------------ duplicated deliveries

    def signer(self) -> Any:
        """What signs a re-sent body as local mode's processes sign theirs (their dispatch key): a
        copy SQS delivers again carries the original's signature, and an unsigned one is dropped as
        forged before any claim (every re-send was, once messages were signed)."""
        from punctual.security.message_auth import DispatchSigner

        if self._signer is None:
            key = (self.state_dir / "run" / "dispatch.key").read_text().strip()
            self._signer = DispatchSigner(key)
        return self._signer

    def duplicate(self, fault: PlannedFault) -> None:
        from punctual.dispatch.queues import DispatchMessage, MessageKind, pick_queue

        now = time.time()
        delivered = [
            r for r in self.follower.snapshot() if r.get("job") and r.get("slot") and r.get("attempt")
        ]
        old = [r for r in delivered if now - float(r["arrived"]) > OLD_S]
        pool = old if fault.mode == "old" and old else delivered
        if not pool:
            self.note(fault, "skipped", reason="nothing delivered yet")
            return
        kinds = {self.workload.ids[k]: p.kind for k, p in self.workload.plans.items()}
        runtimes = {self.workload.ids[k]: p.runtime for k, p in self.workload.plans.items()}
        for record in self.rng.sample(pool, min(fault.count, len(pool))):
            job_id = str(record["job"])
            if job_id not in kinds:
                continue
            attempt = int(record["attempt"])
            kind = MessageKind.FIRE if attempt == 1 else MessageKind.RETRY
            if attempt == 1 and kinds[job_id] == "after":
                kind = MessageKind.CHILD
            message = DispatchMessage(
                tenant=TENANT,
                job_id=job_id,
                slot=str(record["slot"]),
                scheduled_at=str(record.get("scheduled_at") or record["slot"]),
                attempt=attempt,
                job_version=self.workload.version_at(job_id, float(record["arrived"])),
                kind=kind,
                released_at=datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            )
            message = self.signer().sign(message)
            urls = self.long_queue_urls if runtimes[job_id] == "ecs" else self.short_queue_urls
            queue = pick_queue(urls or self.short_queue_urls, job_id)
            self.sqs.send_message(
                QueueUrl=queue,
                MessageBody=message.to_body(),
                MessageGroupId=message.group_id,
                MessageDeduplicationId=uuid.uuid4().hex,
            )
            age = now - float(record["arrived"])
            self.log.write(
                "duplicate",
                job_id=job_id,
                slot=message.slot,
                attempt=attempt,
                released_at=message.released_at,
                age_s=round(age, 1),
                planned_s=fault.at_s,
            )
            self.echo(
                f"chaos: +{time.time() - self.started:.1f}s re-sent {job_id[:8]} {message.slot} "
                f"attempt {attempt} "
                f"({age:.0f}s after its delivery)"
            )
