"""One chaos run, start to verdict.

1. Start ``punctual-local up --no-demo`` with :mod:`local.harness` (free loopback ports,
   its own process group, a private state directory), deploying the synthesised template as
   it is: the deployment's leases (7 s on a message, 12 s on a record), heartbeats, queues and
   restart figures, so that what the run measures is what a deployment does (``visibility_s``
   may still lower the short queue's visibility timeout, for experiments).
2. Register the workload (:mod:`local.chaos.workload`), start the driver's own processes (a
   throttled Lambda worker and ECS worker; the skewed poller comes with the first fault).
3. Inject the planned faults for ``seconds`` (:mod:`local.chaos.faults.driver`; with ``phase``,
   only a kill every 2-4 s of that phase's processes, :mod:`local.chaos.faults.sustained`);
   that instant is the *cut*: slots due by then are owed.
4. Settle, fault-free (the skewed poller stops; nothing is killed or re-sent): until every
   owed slot has ended as expected and no alert claimed during the faults is SENDING (a killed
   deliverer's alert is finished by its sweep), or ``settle_max_s`` passes. Its default is the
   longest legitimate recovery, with margin: a message a killed worker held returns within its
   message lease (7 s), one it had received but not leased is re-sent by the pollers (4 s), a
   killed run is taken over as its message comes back (7 s), a killed process restarts after at
   most 10 s of back-off, an ECS run lasts up to 30 s, and retries back off.
5. Collect the receiver's records, every execution (DynamoDB on the local moto server), the
   dead-letter and failed-executions queues, then stop everything (process groups killed)
   and judge (:mod:`local.chaos.verdict`).
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from local import harness
from local.chaos import repairs
from local.chaos.faults.driver import FaultDriver, FaultOptions, ReceiverFollower, plan_faults
from local.chaos.faults.procs import ChaosProcess, procs_argv
from local.chaos.faults.sustained import plan_sustained
from local.chaos.ledger import LedgerWriter, load, read_jsonl
from local.chaos.verdict import judge, judge_dir
from local.chaos.verdict_data import MAX_P99_DELAY_S, Bounds, RunData, Verdict
from local.chaos.workload import Scale, Workload, plan_jobs, plan_mutations
from local.config import DEFAULT_STATE_DIR

TENANT = "chaos"
WARM_UP_S = 150.0  # the longest a sustained-fault phase waits for a minute planned on its load
PHASE_WORKERS = 3  # worker Lambda processes in a sustained-fault phase (the mixed run has 2 + its own)


@dataclass(frozen=True)
class ChaosConfig:
    seconds: float = 600.0
    seed: int = 0
    run_dir: Path | None = None
    settle_max_s: float | None = None
    visibility_s: int | None = None  # None: the template's short-queue visibility timeout
    faults: FaultOptions = field(default_factory=FaultOptions)
    max_p99_delay_s: float = MAX_P99_DELAY_S  # the verdict's bound on the p99 fire delay
    phase: str = ""  # a sustained-fault phase (pollers, workers, both): only its kills

    @property
    def settle_bound_s(self) -> float:
        if self.settle_max_s is not None:
            return self.settle_max_s
        return 150.0 if self.seconds <= 150 else 240.0


def chaos_template(run_dir: Path, visibility_s: int | None) -> Path:
    """The template local mode deploys (a copy, kept with the run), with the short queue's
    visibility timeout lowered when ``visibility_s`` asks."""
    from local.template import load_template, read_blueprint

    template = load_template(DEFAULT_STATE_DIR / "cache")
    for queue in read_blueprint(template).queues_of("short") if visibility_s is not None else []:
        template["Resources"][queue.logical_id]["Properties"]["VisibilityTimeout"] = visibility_s
    path = run_dir / "template.json"
    path.write_text(json.dumps(template))
    return path


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


class ChaosRun:
    """Runs one chaos run (see the module docstring); :meth:`run` returns the verdict."""

    def __init__(self, config: ChaosConfig, echo: Callable[[str], None]) -> None:
        self.config = config
        self.echo = echo
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        self.run_dir = config.run_dir or DEFAULT_STATE_DIR / "chaos" / f"{stamp}-seed{config.seed}"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.local_state = self.run_dir / "local"
        self.local_state.mkdir(exist_ok=True)
        self.fault_logs = self.run_dir / "fault-logs"
        self.fault_logs.mkdir(exist_ok=True)
        self.ledger = LedgerWriter(self.run_dir / "ledger.jsonl")
        self.fault_log = LedgerWriter(self.run_dir / "faults.jsonl")
        self.processes: dict[str, ChaosProcess] = {}

    # ------------------------------------------------------------------ plumbing

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return self.local.api(method, path, body)

    def clients(self) -> tuple[Any, Any]:
        import boto3
        from botocore.config import Config

        session = boto3.session.Session(
            aws_access_key_id="local", aws_secret_access_key="local", region_name="us-east-1"
        )
        endpoint = self.local.aws_url
        # Bounded calls: a fault the driver cannot inject in time is logged as failed, not waited for.
        config = Config(connect_timeout=3, read_timeout=15, retries={"max_attempts": 3, "mode": "standard"})
        return (
            session.client("dynamodb", endpoint_url=endpoint, config=config),
            session.client("sqs", endpoint_url=endpoint, config=config),
        )

    def own_process(self, component: str, name: str, seed: int, **extra: Any) -> ChaosProcess:
        options: dict[str, Any] = {
            "state_dir": self.local_state,
            "aws_port": _port(self.local.aws_url),
            "api_port": _port(self.local.api_url),
            "receiver_port": _port(self.local.receiver_url),
            "throttle_rate": self.config.faults.throttle_rate,
            "throttle_seed": seed,
            "fault_log_dir": self.fault_logs,
            **extra,
        }
        return ChaosProcess(
            name,
            procs_argv(component, name, options),
            harness.child_env(),
            self.run_dir / f"{name}.log",
        )

    # ------------------------------------------------------------------ the run

    def run(self) -> Verdict:
        config = self.config
        rng = random.Random(config.seed)
        template = chaos_template(self.run_dir, config.visibility_s)
        self.echo(f"chaos: seed {config.seed}, {config.seconds:.0f}s of faults, state in {self.run_dir}")
        # A sustained-fault phase injects no throttling, so the driver's own (throttled) processes
        # are not needed: local mode runs one more worker Lambda process instead, and every worker
        # the phase kills is restarted as the cloud would (supervised, forked from its zygote).
        extra = ("--workers", str(PHASE_WORKERS)) if config.phase else ()
        faults = config.faults
        self.local = harness.start(
            self.local_state,
            "--no-demo",
            "--template",
            str(template),
            "--stale-reads",
            str(faults.stale_reads_s),
            "--transaction-conflicts",
            str(faults.transaction_conflicts),
            *extra,
            tenant=TENANT,
        )
        follower = ReceiverFollower(self.local.receiver_url)
        try:
            self.local.wait_ready()
            from local.resources import Deployment

            deployment = Deployment.read(self.local_state / "run" / "deployment.json")
            dynamodb, sqs = self.clients()
            jobs = plan_jobs(rng, Scale.for_duration(config.seconds), datetime.now(UTC), config.seconds)
            if config.phase:  # only kills: no mutation, skew, re-send (nor throttling: see the CLI)
                plan = plan_sustained(rng, config.seconds, config.phase)
            else:
                mutations = plan_mutations(rng, jobs, config.seconds)
                plan = plan_faults(rng, config.seconds, config.faults, mutations)
            skew = max([0.0, *(f.offset_s for f in plan if f.kind == "skew")])
            bounds = Bounds(skew_s=skew, max_p99_delay_s=config.max_p99_delay_s)
            (self.run_dir / "plan.txt").write_text("".join(f"+{f.at_s:7.2f}s {f.describe()}\n" for f in plan))
            self.ledger.write(
                "run",
                seed=config.seed,
                seconds=config.seconds,
                phase=config.phase,
                faults=asdict(config.faults),
                visibility_s=config.visibility_s,
                bounds=asdict(bounds),
                api=self.local.api_url,
                aws=self.local.aws_url,
                receiver=self.local.receiver_url,
            )
            kinds: dict[str, int] = {}
            for f in plan:
                kinds[f.kind] = kinds.get(f.kind, 0) + 1
            self.echo(
                f"chaos: {len(jobs)} jobs; fault plan ({self.run_dir / 'plan.txt'}): "
                + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
            )
            workload = Workload(self.api, self.local.receiver_url, self.ledger)
            workload.register(jobs)
            self.ledger.write("phase", name="registered")
            for name, component in (("worker-chaos", "worker"), ("ecs-chaos", "ecs-worker")):
                seed = rng.randrange(1 << 30)  # (drawn either way: a seed gives the same plan)
                if not config.phase:
                    self.processes[name] = self.own_process(component, name, seed)
                    self.processes[name].start()
            if config.phase:
                self.warm_up()
            skew_seed = rng.randrange(1 << 30)

            def make_skewed(offset: float) -> ChaosProcess:
                return self.own_process("poller", "poller-skewed", skew_seed, clock_offset=offset)

            follower.start()
            driver = FaultDriver(
                plan=plan,
                state_dir=self.local_state,
                log=self.fault_log,
                follower=follower,
                workload=workload,
                sqs=sqs,
                short_queue_urls=deployment.short_queue_urls,
                long_queue_urls=deployment.long_queue_urls,
                processes=self.processes,
                make_skewed=make_skewed,
                rng=random.Random(rng.randrange(1 << 30)),
                echo=self.echo,
            )
            stop = threading.Event()
            timer = threading.Timer(config.seconds, stop.set)
            timer.start()
            self.ledger.write("phase", name="faults_start")
            try:
                driver.run(stop)
            finally:
                timer.cancel()
            self.ledger.write("phase", name="faults_end")
            skewed = self.processes.pop("poller-skewed", None)
            if skewed is not None:
                skewed.stop(timeout_s=5)
            self.echo("chaos: faults stopped; settling")
            self.settle(follower, dynamodb, deployment.table_name, bounds)
            time.sleep(config.faults.stale_reads_s)  # what was written last is seen by every read
            self.collect(follower, dynamodb, sqs, deployment)
            self.report_fidelity()
        finally:
            follower.stop()
            for process in self.processes.values():
                process.stop(timeout_s=10)
            self.local.stop()
        return judge_dir(self.run_dir)

    def warm_up(self, bound_s: float = WARM_UP_S) -> None:
        """A sustained-fault phase starts on a deployment that is running its load: once a minute
        is planned with it (two pollers per group; a minute after a fresh registration or an idle
        one is planned idle, with one), at most ``bound_s``."""
        plans = self.local_state / "run" / "minutes"
        started = time.monotonic()
        while time.monotonic() - started < bound_s:
            now = datetime.now(UTC).strftime("m-%Y%m%dT%H%M")
            for path in sorted(plans.glob("m-*.json")):
                try:
                    plan = json.loads(path.read_text())
                except (OSError, ValueError):
                    continue
                if path.stem >= now and len(plan.get("pollers", [])) > len(plan.get("groups", [])):
                    self.echo(f"chaos: {path.stem} runs two pollers per group: the faults start")
                    self.ledger.write("phase", name="warm")
                    return
            time.sleep(1.0)
        self.echo(f"chaos: no minute with two pollers per group after {bound_s:.0f}s: starting anyway")

    # ------------------------------------------------------------------ settle and collect

    def report_fidelity(self) -> None:
        """What the moto server's DynamoDB simulation did (local/moto_fidelity.py), to the ledger."""
        path = self.local_state / "run" / "fidelity.json"
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.5)  # written every 2 s
        if not path.exists():
            return
        found = json.loads(path.read_text())
        self.ledger.write("fidelity", **found)
        self.echo(
            f"chaos: DynamoDB as it behaves: reads up to {found['stale_read_s']:g} s behind"
            f" ({found['stale_answers']} items answered behind), {found['conflict_share']:.0%} of the"
            f" writes on items a transaction holds cancelled ({found['conflicts']} conflicts)"
        )

    def executions(self, dynamodb: Any, table: str) -> dict[str, list[Any]]:
        from punctual.store.dynamo import DynamoStore

        store = DynamoStore(dynamodb, table)
        run = load(self.run_dir / "ledger.jsonl")
        return {
            job.job_id: store.list_executions(TENANT, job.job_id, limit=1_000_000, newest_first=False).items
            for job in run.jobs.values()
        }

    def alerts(self, dynamodb: Any, table: str) -> dict[str, list[Any]]:
        """The alert ledger: every alert record of every job of the run."""
        from punctual.store.dynamo import DynamoStore

        store = DynamoStore(dynamodb, table)
        run = load(self.run_dir / "ledger.jsonl")
        return {job.job_id: store.list_alerts(TENANT, job.job_id, 1000) for job in run.jobs.values()}

    def sending_alerts(self, dynamodb: Any, table: str, before: float) -> list[str]:
        """The alerts still SENDING under a claim made (or renewed) before ``before``, the end of
        the faults: their deliverer may have been killed, and their sweep is due. (The jobs go on
        failing and alerting while the run settles; those alerts are fault-free.)"""
        return [
            f"{alert.job_id} {alert.key_slot} {alert.condition.value}"
            for alerts in self.alerts(dynamodb, table).values()
            for alert in alerts
            if alert.status.value == "SENDING" and alert.claimed_at.timestamp() < before
        ]

    def snapshot(self, follower: ReceiverFollower, dynamodb: Any, table: str, bounds: Bounds) -> RunData:
        receiver_at = time.time()  # before the read: see collect
        follower.refresh()
        receiver = follower.snapshot()
        return RunData(
            run=load(self.run_dir / "ledger.jsonl"),
            faults=read_jsonl(self.run_dir / "faults.jsonl"),
            throttles=Counter(),
            receiver=receiver,
            executions=self.executions(dynamodb, table),
            dead_letters=[],
            failure_reports=[],
            collected_at=time.time(),
            bounds=bounds,
            receiver_at=receiver_at,
        )

    def settle(self, follower: ReceiverFollower, dynamodb: Any, table: str, bounds: Bounds) -> None:
        """Wait until every owed slot ended as expected, at most the settle bound."""
        started = time.monotonic()
        faults_end = time.time()
        deadline = started + self.config.settle_bound_s
        while True:
            verdict = judge(self.snapshot(follower, dynamodb, table, bounds))
            waited = time.monotonic() - started
            # An alert whose deliverer was killed is finished by its sweep, about a minute on.
            sending = [] if verdict.pending else self.sending_alerts(dynamodb, table, faults_end)
            if not verdict.pending and not sending:
                self.echo(
                    f"chaos: every owed slot and every alert has ended ({waited:.0f}s after the faults)"
                )
                break
            if time.monotonic() >= deadline:
                self.echo(f"chaos: settle bound of {self.config.settle_bound_s:.0f}s reached")
                break
            if verdict.pending:
                shown = ", ".join(verdict.pending[:4])
                self.echo(
                    f"chaos: {len(verdict.pending)} owed slot(s) not ended yet ({shown}); {waited:.0f}s"
                )
            else:
                self.echo(
                    f"chaos: {len(sending)} alert(s) still SENDING ({', '.join(sending[:4])}); {waited:.0f}s"
                )
            time.sleep(5.0)
        self.ledger.write("phase", name="settled")

    def collect(self, follower: ReceiverFollower, dynamodb: Any, sqs: Any, deployment: Any) -> None:
        follower.stop()  # the receiver's records first, then the table: every request has its record
        # Taken before the receiver is read: the receiver journals a request before answering it,
        # so an attempt that ended before this instant has its request in what is read next; one
        # that ended after may not (it was taken while the alert ledger below was read).
        receiver_at = time.time()
        follower.refresh()
        receiver = follower.snapshot()
        # The alert ledger before the records too: an alert is made after its slot's record, so
        # every alert read first has its record read after (the verdict's "did not fail" check).
        alerts_before = self.alerts(dynamodb, deployment.table_name)
        executions = self.executions(dynamodb, deployment.table_name)
        dead: list[dict[str, Any]] = []
        for url in deployment.dead_letter_urls:
            dead.extend(_drain(sqs, url))
        failed = _reports(sqs, deployment, executions)
        alerts = self.alerts(dynamodb, deployment.table_name)
        collected = {
            "collected_at": time.time(),
            "receiver_at": receiver_at,
            "receiver": receiver,
            "alerts": {
                job_id: [a.model_dump(mode="json") for a in items] for job_id, items in alerts.items()
            },
            "alerts_before": {
                job_id: [a.model_dump(mode="json") for a in items] for job_id, items in alerts_before.items()
            },
            "alert_arrivals": _alert_arrivals(follower.url),
            "chain_repairs": repairs.fetch(follower.url),  # the chain auditor's: expected none
            "executions": {
                job_id: [e.model_dump(mode="json") for e in items] for job_id, items in executions.items()
            },
            "dead_letters": dead,
            "failure_reports": failed,
        }
        (self.run_dir / "collected.json").write_text(json.dumps(collected))
        self.ledger.write("phase", name="collected")


def _alert_arrivals(receiver_url: str) -> list[dict[str, Any]]:
    """Every alert the receiver got (``GET /alerts``)."""
    try:
        with urllib.request.urlopen(f"{receiver_url}/alerts", timeout=10) as reply:
            return list(json.loads(reply.read())["alerts"])
    except (OSError, ValueError, KeyError):
        return []


REPORTS_WAIT_S = 30.0


def _reports(sqs: Any, deployment: Any, executions: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The failed-executions reports, waited for: a worker publishes a slot's report just after
    it writes the record FAILED, so a slot that ended as the records were read may have its report
    a moment later. Drained until every failed record read has one, or :data:`REPORTS_WAIT_S`."""
    urls = [deployment.failed_queue_url, *getattr(deployment, "extra_failed_urls", [])]
    urls = [url for url in urls if url]
    if not urls:
        return []
    wanted = {
        (job_id, record.slot)
        for job_id, records in executions.items()
        for record in records
        if record.status.value in ("FAILED", "TIMED_OUT")
    }
    deadline = time.monotonic() + REPORTS_WAIT_S
    reports: list[dict[str, Any]] = []
    while True:
        for url in urls:
            reports.extend(_drain(sqs, url))  # (a received report stays hidden: read once)
        have = {(str(r.get("job_id")), str(r.get("slot"))) for r in reports}
        if wanted <= have or time.monotonic() > deadline:
            return reports
        time.sleep(1.0)


def _drain(sqs: Any, url: str, rounds: int = 200) -> list[dict[str, Any]]:
    """Every message of a queue nobody else reads (dead letters, failure reports), parsed."""
    out: list[dict[str, Any]] = []
    for _ in range(rounds):
        reply = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0, VisibilityTimeout=300
        )
        messages = reply.get("Messages", [])
        if not messages:
            break
        for message in messages:
            try:
                body = json.loads(message["Body"])
            except ValueError:
                body = {"raw": message["Body"]}
            out.append(body if isinstance(body, dict) else {"raw": body})
    return out
