"""The Region-loss run: two or three Regions over one table, one of them lost for a minute.

1. Start the Regions (:mod:`local.regions`): Region ``a`` with the embedded AWS and the webhook
   receiver, then ``b`` (and ``c``), each with its own queues, API, poller and workers on the
   one moto table. Every Region deploys the chaos template (the short queue's visibility
   timeout lowered to 45 s, as in :mod:`local.chaos.runner`).
2. Register the seeded chaos workload (:mod:`local.chaos.workload`), each job through the next
   Region's API in turn: the API answers in every Region.
3. At ``down_at_s`` kill the lost Region (``b`` by default) whole: every process of it at once,
   ``SIGKILL``, its queues left as they were (messages in flight included). ``down_for_s``
   later start it again with the same queues; it runs until ``seconds``. That instant is the
   *cut*: slots due by then are owed.
4. Settle, collect and judge exactly as the chaos run does (:class:`ChaosRun`'s ``settle`` and
   ``collect``, :func:`local.chaos.verdict.judge_dir`): every owed slot executed once, none
   early, nothing lost, and the p99 fire delay within the bound. Besides the verdict's line,
   :func:`outage_line` gives the fire delay of the slots due while the Region was down, and
   how many owed slots that window held.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from local.chaos.faults.driver import ReceiverFollower
from local.chaos.lateness import Delays
from local.chaos.ledger import load
from local.chaos.runner import TENANT, ChaosConfig, ChaosRun, chaos_template
from local.chaos.verdict import judge_dir
from local.chaos.verdict_data import Bounds, Verdict
from local.chaos.workload import Scale, Workload, plan_jobs
from local.harness import LocalMode
from local.regions import REGION_NAMES, Regions

REGION_LOST = "region-lost"
REGION_BACK = "region-back"


@dataclass(frozen=True)
class RegionLossConfig(ChaosConfig):
    """A chaos run's settings plus the Regions and the outage.

    ``seconds`` is the whole run before settling (the cut); the lost Region is down from
    ``down_at_s`` to ``down_at_s + down_for_s``.
    """

    regions: int = 3
    lost: str = "b"
    down_at_s: float = 60.0
    down_for_s: float = 60.0
    workers: int = 2

    def check(self) -> None:
        if not 2 <= self.regions <= len(REGION_NAMES):
            raise ValueError(f"--regions: 2 to {len(REGION_NAMES)}")
        if self.lost not in REGION_NAMES[1 : self.regions]:
            raise ValueError(f"--lose: one of {', '.join(REGION_NAMES[1 : self.regions])} (a hosts the AWS)")
        inside = (
            self.down_at_s >= 0 and self.down_for_s > 0 and self.down_at_s + self.down_for_s <= self.seconds
        )
        if not inside:  # (written so that a NaN is outside too)
            raise ValueError("the outage must lie inside the run (down-at + down-for <= seconds)")
        if self.workers < 1:
            raise ValueError(f"--workers: at least 1 Lambda worker process per Region, not {self.workers}")


@dataclass
class MergedDeployment:
    """What :meth:`ChaosRun.collect` reads of a deployment, over every Region."""

    table_name: str
    dead_letter_urls: list[str]
    failed_queue_url: str
    extra_failed_urls: list[str]


class RegionLossRun(ChaosRun):
    """One Region-loss run (module docstring); :meth:`run` returns the verdict."""

    config: RegionLossConfig

    def __init__(self, config: RegionLossConfig, echo: Callable[[str], None]) -> None:
        config.check()
        super().__init__(config, echo)
        self.regions = Regions(self.run_dir / "regions", TENANT)

    def run(self) -> Verdict:
        config = self.config
        rng = random.Random(config.seed)
        template = chaos_template(self.run_dir, config.visibility_s)
        # As on an MRSC table, which refuses transactions: the store writes them one item at a time.
        self.regions.extra = (
            "--template",
            str(template),
            "--workers",
            str(config.workers),
            "--no-transactions",
        )
        self.echo(
            f"region-loss: seed {config.seed}, {config.regions} Regions, {config.seconds:.0f}s; Region"
            f" {config.lost} down from +{config.down_at_s:.0f}s for {config.down_for_s:.0f}s;"
            f" state in {self.run_dir}"
        )
        follower: ReceiverFollower | None = None
        try:
            self.regions.start(config.regions)
            self.local = self.regions.home
            follower = ReceiverFollower(self.local.receiver_url)
            bounds = Bounds(max_p99_delay_s=config.max_p99_delay_s)
            jobs = plan_jobs(rng, Scale.for_duration(config.seconds), datetime.now(UTC), config.seconds)
            self.ledger.write(
                "run",
                seed=config.seed,
                seconds=config.seconds,
                faults={},
                visibility_s=config.visibility_s,
                bounds=asdict(bounds),
                api=self.local.api_url,
                aws=self.local.aws_url,
                receiver=self.local.receiver_url,
                regions=self.regions.describe(),
                outage={"region": config.lost, "at_s": config.down_at_s, "for_s": config.down_for_s},
            )
            turns = self.regions.api_round_robin()

            def api(method: str, path: str, body: Any = None) -> tuple[int, Any]:
                _, region = next(turns)
                return region.api(method, path, body)

            Workload(api, self.local.receiver_url, self.ledger).register(jobs)
            self.ledger.write("phase", name="registered")
            self.echo(f"region-loss: {len(jobs)} jobs registered through {config.regions} Regions' APIs")
            follower.start()
            started = time.monotonic()
            self.ledger.write("phase", name="faults_start")
            self._outage(started)
            _sleep_until(started + config.seconds)
            self.ledger.write("phase", name="faults_end")
            self.echo("region-loss: the run is over; settling")
            self.settle(follower, self._dynamodb(), "punctual", bounds)
            self._collect(follower)
        finally:
            if follower is not None:
                follower.stop()
            self.regions.stop()
        return judge_dir(self.run_dir)

    def _outage(self, started: float) -> None:
        config = self.config
        _sleep_until(started + config.down_at_s)
        region = self.regions.regions[config.lost]
        components = region.pids()
        before = {name: _held(region, name) for name in components}
        pids = self.regions.kill(config.lost)
        killed_at = time.time()
        self.fault_log.write("kill-region", t=killed_at, region=config.lost, pids=pids)
        # Each process of the Region as the verdict knows a kill -9: a Lambda worker's batch (its
        # in-flight file, read before and after) is a delivery lost with it, a run it held a lease
        # on is taken over when the lease lapses, and the re-run of its target is at least once.
        for name, pid in sorted(components.items()):
            held = before[name] + [item for item in _held(region, name) if item not in before[name]]
            self.fault_log.write(
                "kill", t=killed_at, target=name, pid=pid, mode="region", region=config.lost, held=held
            )
        self.echo(f"region-loss: Region {config.lost} lost (killed {len(pids)} processes)")
        _sleep_until(started + config.down_at_s + config.down_for_s)
        self.fault_log.write("revive-region", region=config.lost)
        region = self.regions.revive(config.lost)
        self.echo(f"region-loss: Region {config.lost} back (API {region.api_url})")

    def _dynamodb(self) -> Any:
        dynamodb, _ = self.clients()
        return dynamodb

    def _collect(self, follower: ReceiverFollower) -> None:
        from local.resources import Deployment

        _, sqs = self.clients()
        regions = self.regions.regions.values()
        deployments = [Deployment.read(region.state / "run" / "deployment.json") for region in regions]
        merged = MergedDeployment(
            table_name=deployments[0].table_name,
            dead_letter_urls=[url for d in deployments for url in d.dead_letter_urls],
            failed_queue_url=deployments[0].failed_queue_url,
            extra_failed_urls=[d.failed_queue_url for d in deployments[1:] if d.failed_queue_url],
        )
        dynamodb, _ = self.clients()
        self.collect(follower, dynamodb, sqs, merged)  # (every Region's failure reports: extra_failed_urls)


def _held(region: LocalMode, name: str) -> list[dict[str, Any]]:
    """The deliveries a Lambda worker of the Region holds (job id, slot, attempt); [] for others."""
    if not name.startswith("worker-"):
        return []
    return [
        {"job_id": m.get("job_id"), "slot": m.get("slot"), "attempt": m.get("attempt")}
        for m in region.inflight(name)
        if m.get("job_id") and m.get("slot")
    ]


def _sleep_until(moment: float) -> None:
    while (left := moment - time.monotonic()) > 0:
        time.sleep(min(left, 1.0))


def outage_window(run_dir: Path) -> tuple[float, float] | None:
    """When the lost Region was down (epoch seconds), from the run's fault log."""
    events = [json.loads(line) for line in (run_dir / "faults.jsonl").read_text().splitlines() if line]
    lost = next((float(e["t"]) for e in events if e.get("event") == "kill-region"), None)
    back = next((float(e["t"]) for e in events if e.get("event") == "revive-region"), None)
    return None if lost is None or back is None else (lost, back)


def outage_line(run_dir: Path, verdict: Verdict) -> str:
    """The fire delay of the counted slots due while the Region was down, and after it came back."""
    from punctual.timing.timers import slot_instant

    window = outage_window(run_dir)
    if window is None:
        return "region-loss: no outage in the fault log"
    lost, back = window
    during = [d.fire_s for d in verdict.delays if lost <= slot_instant(d.slot).timestamp() <= back]
    after = [d.fire_s for d in verdict.delays if slot_instant(d.slot).timestamp() > back]
    run = load(run_dir / "ledger.jsonl")
    region = run.meta.get("outage", {}).get("region", "?")

    def text(values: list[float]) -> str:
        found = Delays.of(values)
        return f"{found.text()} ({found.count} slots)" if found is not None else "- (0 slots)"

    return (
        f"region-loss: Region {region} down {back - lost:.0f} s; fire delay while down {text(during)};"
        f" after it came back {text(after)}"
    )
