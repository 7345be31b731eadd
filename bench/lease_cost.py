"""What leases of seconds cost per run length, how fast a dead worker is replaced, and what the
poller redundancy costs (issue 30).

1. **Cost per million triggers by run length** (1 s, 1 minute, and 1 hour on the ECS lane: the
   Lambda lane stops at 15 minutes). The real worker (claim, lease keeper, Lambda batch or ECS
   heartbeats) on the in-memory store and queues, in virtual time: each run lasts its length
   while the lease keeper steps once a (virtual) second, and every request is counted: records
   written, the tenant's runs-in-flight counter (:mod:`punctual.execution.inflight`: a write each
   window of 20 s a run past its first lease beats in, and its take-back), backstop LEASE timers,
   visibility requests, and the pollers' re-send check (one
   eventually consistent read per Lambda-lane message). Priced with ``bench/prices.json``;
   batched visibility requests are shared by a batch's ten messages (the event source's batches
   at 10,000/s; the cost benchmark's own small batches would pay more). "Before" is the previous
   design, from its code: no heartbeat on the Lambda lane (its message was its lease, the queue's
   960 s), and on the ECS lane a heartbeat every 20 s (a third of its 60 s lease), each a record
   write, a LEASE timer and a visibility change. Only what the leases add is counted (the claim
   and finish writes, and the run's own compute, are the same before and after).
2. **How fast a dead worker is replaced**, in virtual time through the real code: a worker dying
   mid-run (the run's next attempt starts: its message is back at the message lease after its
   last renewal, under a live record lease, and its return is the takeover),
   one dying with a message received but not started (the message is visible again: the message
   lease, ``message_lease_s``), one dying before its handler ran (an init failure: the pollers'
   re-send runs the slot).
3. **The poller redundancy**: two pollers per shard group on minutes planned on the standard
   poller double the pollers' per-trigger costs (job reads, SQS sends, next-timer writes, poller
   Lambda time: ``bench/results/cost_per_million.json``'s rows at 10,000/s); idle (lean) minutes
   keep one poller, so the idle month is unchanged; what a second poller on those too would add
   to it (a 128 MB poller, its reads, one more state transition a minute) is printed beside.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import benchlib

sys.path.insert(0, str(benchlib.ROOT / "tests"))

from factories import job as make_job  # (tests/ is put on the path just above)
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.polling.resend import RESEND_AFTER_S, ResendWatch
from punctual.dispatch.queues import MemoryQueues, MessageKind, Visibilities, message_for
from punctual.execution import Delivery, Worker, WorkerConfig
from punctual.execution.batch import LambdaBatch
from punctual.execution.keeper import LeaseKeeper
from punctual.execution.lease import beat_interval_s
from punctual.runtime.clock import ManualClock
from punctual.runtime.settings import Settings
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerLayout, slot_key

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SHORT, LONG = "queue://short", "queue://long"
LAYOUT = TimerLayout(shard_count=16, near_shard_count=4, far_threshold_s=180)
BATCH = 10  # messages sharing a batched request (a full event source batch)
MINUTES_PER_MONTH = 43_800
# 3.9 s: under the first renewal of a held message (4 s); 4.9 s: under the 5 s bound
# and the first heartbeat (5 s at the 12 s lease)
RUNS = {
    "lambda": [("0.5 s", 0.5), ("1 s", 1), ("3.9 s", 3.9), ("4.9 s", 4.9), ("1 min", 60)],
    "ecs": [("0.5 s", 0.5), ("1 s", 1), ("3.9 s", 3.9), ("4.9 s", 4.9), ("1 min", 60), ("1 h", 3600)],
}
OLD_ECS_LEASE_S = 60  # the previous design: heartbeats every third of it


class Counted:
    """What the lease machinery asked of DynamoDB and SQS."""

    def __init__(self) -> None:
        self.record_writes = 0
        self.lease_timers = 0
        self.visibility_requests = 0.0  # SQS requests (batched ones shared by BATCH messages)
        self.reads = 0.0  # read units
        self.in_flight_writes = 0  # the tenant's runs in flight (punctual.execution.inflight)


class CountingStore(MemoryStore):
    def __init__(self, counted: Counted) -> None:
        super().__init__()
        self.counted = counted

    def save_execution(self, execution: Any, expect: Any, ttl_epoch_s: int) -> None:
        self.counted.record_writes += 1
        super().save_execution(execution, expect, ttl_epoch_s)

    def put_timers(self, timers: Any) -> None:
        self.counted.lease_timers += len(timers)
        super().put_timers(timers)

    def add_runs_in_flight(self, scope: str, window: int, shard: int, delta: int, expires_at: int) -> int:
        self.counted.in_flight_writes += 1
        return super().add_runs_in_flight(scope, window, shard, delta, expires_at)

    def batch_get_executions(self, keys: Any, consistent: bool = True) -> Any:
        wanted = list(keys)
        self.counted.reads += len(wanted) * (1.0 if consistent else 0.5)
        return super().batch_get_executions(wanted, consistent)


class CountingQueues(MemoryQueues):
    counted: Counted
    # A batched request is shared by a Lambda batch's ten messages; an ECS task's runs are renewed
    # each in a request of its own (its few runs seldom fall due at one step), counted whole
    shared: bool = True

    def change_visibility(self, queue_url: str, receipt: str, visibility_s: int) -> None:
        self.counted.visibility_requests += 1
        super().change_visibility(queue_url, receipt, visibility_s)

    def change_visibility_batch(self, queue_url: str, receipts: Any, visibility_s: Visibilities) -> list[str]:
        if self.shared:
            self.counted.visibility_requests += len(receipts) / BATCH
        else:
            self.counted.visibility_requests += -(-len(receipts) // BATCH)
        return super().change_visibility_batch(queue_url, receipts, visibility_s)


class Still(LeaseKeeper):
    """A lease keeper stepped by the simulation (no thread)."""

    def start(self) -> LeaseKeeper:
        return self


@dataclass
class Runs:
    """A target whose run lasts ``seconds`` of virtual time, the keeper stepping every second (and
    at the end of a last part-second)."""

    clock: ManualClock
    seconds: float
    keeper: LeaseKeeper | None = None
    dies_at_s: float | None = None  # the worker dies (stops stepping) this far into the run
    calls: list[tuple[int, datetime]] = field(default_factory=list)

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        self.calls.append((ctx.attempt, self.clock.now()))
        second, left = 0, float(self.seconds)
        while left > 0:
            if self.dies_at_s is not None and second >= self.dies_at_s:
                raise _Died()
            step = min(1.0, left)
            self.clock.advance(step)
            second, left = second + 1, left - step
            if self.keeper is not None:
                self.keeper.step()
        return TargetResult.ok()


class _Died(BaseException):
    """The worker's process died (nothing catches it)."""


def _rig(lane: str, counted: Counted) -> tuple[ManualClock, CountingStore, CountingQueues, Any]:
    clock = ManualClock(T0)
    store = CountingStore(counted)
    queues = CountingQueues(now=clock.now)
    queues.counted = counted
    queues.shared = lane == "lambda"
    timeout_s = 3600 if lane == "ecs" else 840
    job = make_job("job-1", "rate(1 hour)", now=T0, runtime=lane, timeout_seconds=timeout_s)
    store.create_job(job, None, max_jobs=10)
    return clock, store, queues, job


def _worker(lane: str, store: MemoryStore, queues: MemoryQueues, target: Any, clock: ManualClock) -> Worker:
    settings = Settings()
    config = WorkerConfig(
        layout=LAYOUT,
        short_queue_urls=(SHORT,),
        long_queue_urls=(LONG,),
        lease_s=settings.lease_s,
        message_lease_s=settings.message_lease_s,
        lease_timers=lane == "ecs",
        backstop_s=settings.far_threshold_s + 60,
        max_runs_in_flight=settings.max_runs_in_flight_per_tenant,
        max_long_runs_in_flight=settings.max_long_runs_in_flight_per_tenant,
    )
    return Worker(store, queues, target, clock, config)


def lease_requests(lane: str, seconds: float) -> Counted:
    """One run of ``seconds`` on ``lane``: what its lease cost beyond its claim and finish."""
    counted = Counted()
    clock, store, queues, job = _rig(lane, counted)
    target = Runs(clock, seconds)
    worker = _worker(lane, store, queues, target, clock)
    keeper = Still(worker)
    target.keeper = keeper
    message = message_for(job, slot_key(T0), T0, 1, MessageKind.FIRE, T0)
    queue = LONG if lane == "ecs" else SHORT
    queues.send(queue, [message])
    if lane == "ecs":  # its receive asks for the message lease of visibility: no request of its own
        [received] = queues.receive(queue, 1, 0, worker.config.message_visibility_s)
        keeper.adopt(queue, received.receipt, clock.now())  # held from its receive, as the task does
        worker.process(received.message, Delivery(queue, received.receipt, 1, received.message_id))
    else:  # the event source receives with the queue's 960 s; the batch leases it for seconds
        [received] = queues.receive(queue, 1, 0, 960)
        record = {
            "messageId": received.message_id,
            "receiptHandle": received.receipt,
            "body": received.message.to_body(),
            "attributes": {"MessageGroupId": received.message.group_id, "ApproximateReceiveCount": "1"},
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:short",
        }
        LambdaBatch(worker, keeper).handle({"Records": [record]}, lambda: 900.0)
        watch = ResendWatch(store, queues, [SHORT], worker.metrics, after_s=RESEND_AFTER_S)
        watch.sent(SHORT, [message], T0)  # the poller's check of what it sent
        watch.check(T0 + timedelta(seconds=RESEND_AFTER_S))
    # Every write the run asked for, counted: the keeper's beats (a heartbeat marks the run in
    # flight), then the in-flight counter's writes, made on a thread of its own (QA30 review: read
    # before them, the last take-backs were often still queued, and the figures varied run to run)
    if not (keeper.settle() and worker.in_flight.drain()):
        raise RuntimeError("the lease writes of the run were not all made within 10 s")
    counted.record_writes -= 2  # the claim and the finish: the same before and after
    return counted


def before(lane: str, seconds: float) -> Counted:
    """The previous design's lease costs for the same run (from its code, see the docstring)."""
    counted = Counted()
    if lane == "ecs":
        beats = max(0, int((seconds - 1) // (OLD_ECS_LEASE_S // 3)))
        counted.record_writes = beats
        counted.lease_timers = 1 + beats  # one at the claim, one per heartbeat
        counted.visibility_requests = beats
    return counted


def short_run_floor(prices: dict[str, Any]) -> dict[str, float]:
    """What a run on the Lambda lane under its first heartbeat adds, by part, on demand and provisioned."""
    counted = lease_requests("lambda", 0.5)  # (under its first heartbeat)
    visibility = Counted()
    visibility.visibility_requests = counted.visibility_requests
    check = Counted()
    check.reads = counted.reads
    return {
        "visibility_usd": usd_per_million(visibility, prices),
        "check_usd": usd_per_million(check, prices),
        "provisioned_usd": usd_per_million_provisioned(counted, prices),
        "provisioned_check_usd": usd_per_million_provisioned(check, prices),
    }


def usd_per_million(counted: Counted, prices: dict[str, Any]) -> float:
    wru = prices["dynamodb"]["on_demand_write_per_million"]["usd"]
    rru = prices["dynamodb"]["on_demand_read_per_million"]["usd"]
    sqs = prices["sqs"]["fifo_per_million"]["usd"]
    return (
        (counted.record_writes + counted.lease_timers + counted.in_flight_writes) * wru
        + counted.reads * rru
        + counted.visibility_requests * sqs
    )


PROVISIONED_UTILISATION = 0.7  # the capacity model's target utilisation (bench/cost_per_million.py)


def usd_per_million_provisioned(counted: Counted, prices: dict[str, Any]) -> float:
    """The same requests on a provisioned table at the model's target utilisation: a capacity unit
    serves one strongly consistent read (two eventually consistent: ``reads`` are in read units
    already) or one 1 KB write a second; SQS has no provisioned price."""
    hours = 1_000_000 / 3600 / PROVISIONED_UTILISATION
    rcu = prices["dynamodb"]["provisioned_rcu_hour"]["usd"]
    wcu = prices["dynamodb"]["provisioned_wcu_hour"]["usd"]
    sqs = prices["sqs"]["fifo_per_million"]["usd"]
    return (
        (counted.record_writes + counted.lease_timers + counted.in_flight_writes) * wcu * hours
        + counted.reads * rcu * hours
        + counted.visibility_requests * sqs
    )


# --------------------------------------------------------------------------- recovery


def _cut_mid_run(dies_at_s: float) -> float:
    """Virtual seconds from a Lambda worker's death ``dies_at_s`` into a run to its next attempt's start."""
    clock, store, queues, job = _rig("lambda", Counted())
    queues.counted = Counted()
    dying = Runs(clock, 30, dies_at_s=dies_at_s)
    worker = _worker("lambda", store, queues, dying, clock)
    message = message_for(job, slot_key(T0), T0, 1, MessageKind.FIRE, T0)
    queues.send(SHORT, [message])
    [received] = queues.receive(SHORT, 1, 0, 960)
    keeper = Still(worker)
    keeper.hold(SHORT, [received.receipt], clock.now())
    dying.keeper = keeper
    try:
        worker.process(received.message, Delivery(SHORT, received.receipt, 1, received.message_id))
    except _Died:
        died = clock.now()
    healthy = Runs(clock, 1)
    other = _worker("lambda", store, queues, healthy, clock)
    while not healthy.calls and clock.now() < died + timedelta(seconds=60):
        clock.advance(0.1)
        for item in queues.receive(SHORT, 10, 0, 960):
            other.process(item.message, Delivery(SHORT, item.receipt, item.receive_count, item.message_id))
    return (healthy.calls[0][1] - died).total_seconds()


def recovery_s() -> dict[str, float]:
    """Virtual seconds from a worker's death to the slot's recovery, through the real code."""
    out: dict[str, float] = {}
    # A worker dies mid-run: its run's next attempt starts when? At its claim, 2 s in, before the
    # batch's first renewal, and 6 s in, just after it: each time its message is back at the
    # message lease after its last renewal, under the record's live lease, and its return is the
    # takeover (the record's owner names the message: punctual.execution.records.message_back)
    for dies_at_s, label in ((0, "at its claim"), (2, "2 s in"), (6, "6 s in, after a renewal")):
        out[f"run cut {label}: death to the next attempt's start"] = _cut_mid_run(dies_at_s)
    # A message received and leased, not started: when is it visible again?
    clock, store, queues, job = _rig("lambda", Counted())
    queues.counted = Counted()
    worker = _worker("lambda", store, queues, Runs(clock, 1), clock)
    queues.send(SHORT, [message_for(job, slot_key(T0), T0, 1, MessageKind.FIRE, T0)])
    [received] = queues.receive(SHORT, 1, 0, 960)
    Still(worker).hold(SHORT, [received.receipt], clock.now())
    died = clock.now()
    while not queues.receive(SHORT, 1, 0, 960):
        clock.advance(0.1)
    out["received, not started: death to visible again"] = (clock.now() - died).total_seconds()
    # A worker that dies before its handler ran: the pollers' re-send
    clock, store, queues, job = _rig("lambda", Counted())
    queues.counted = Counted()
    healthy = Runs(clock, 1)
    worker = _worker("lambda", store, queues, healthy, clock)
    watch = ResendWatch(store, queues, [SHORT], worker.metrics, after_s=RESEND_AFTER_S)
    sent = message_for(job, slot_key(T0), T0, 1, MessageKind.FIRE, T0)
    queues.send(SHORT, [sent])
    watch.sent(SHORT, [sent], clock.now())
    queues.receive(SHORT, 1, 0, 960)  # received with the queue's timeout; the handler never ran
    died = clock.now()
    while not healthy.calls and clock.now() < died + timedelta(seconds=60):
        clock.advance(0.1)
        if (due := watch.next_check()) is not None and due <= clock.now():  # the poller, every step
            watch.check(clock.now())
        for item in queues.receive(SHORT, 10, 0, 960):
            worker.process(item.message, Delivery(SHORT, item.receipt, item.receive_count, item.message_id))
    out["died before its handler: death to the run's start"] = (healthy.calls[0][1] - died).total_seconds()
    return out


# --------------------------------------------------------------------------- redundancy


def redundancy(prices: dict[str, Any]) -> dict[str, Any]:
    """The second poller of each group: per million at 10,000/s, and per idle month."""
    path = benchlib.RESULTS_DIR / "cost_per_million.json"
    if not path.exists():
        return {}
    cost = json.loads(path.read_text())
    summary = cost["summary"]
    poller_rows = [r for r in summary["rows"] if r["phase"] == "poller"]
    per_million = sum(r["usd_per_million_at_scale"] for r in poller_rows)
    per_million += summary["poller_lambda_usd_per_million_at_10k"]
    idle = next(iter(cost["idle"].values()))
    month = idle["usd_per_month"]
    poller_reads = sum(
        line[5] * MINUTES_PER_MONTH for line in idle["requests_per_minute"] if line[0] == "poller"
    )
    transition = prices["stepfunctions"]["standard_per_thousand_transitions"]["usd"] / 1000
    lean_second = month["poller_lambda"] + poller_reads + transition * MINUTES_PER_MONTH
    return {
        "per_million_at_10k": per_million,
        "idle_month_total": month["total"],
        "idle_month_if_lean_minutes_had_two": month["total"] + lean_second,
        "lean_second_poller_month": lean_second,
    }


def main() -> None:
    prices = json.loads(benchlib.PRICES_PATH.read_text())
    settings = Settings()
    benchlib.heading(
        f"Leases of seconds (a record's {settings.lease_s} s, heartbeat every "
        f"{beat_interval_s(settings.lease_s):g} s; a message's {settings.message_lease_s} s, renewed every "
        f"{max(1, settings.message_lease_s - 3)} s, its return the takeover): $ per million triggers of "
        "what they add, by run length"
    )
    rows = []
    results: dict[str, Any] = {"runs": []}
    for lane, lengths in RUNS.items():
        for label, seconds in lengths:
            now, then = lease_requests(lane, seconds), before(lane, seconds)
            cost_now, cost_then = usd_per_million(now, prices), usd_per_million(then, prices)
            rows.append(
                (
                    lane,
                    label,
                    now.record_writes,
                    now.in_flight_writes,
                    now.lease_timers,
                    round(now.visibility_requests, 2),
                    now.reads,
                    cost_then,
                    cost_now,
                    cost_now - cost_then,
                )
            )
            results["runs"].append(
                {
                    "lane": lane,
                    "run": label,
                    "seconds": seconds,
                    "heartbeat_writes": now.record_writes,
                    "in_flight_writes": now.in_flight_writes,
                    "lease_timers": now.lease_timers,
                    "visibility_requests": now.visibility_requests,
                    "read_units": now.reads,
                    "usd_per_million_before": cost_then,
                    "usd_per_million_now": cost_now,
                    "usd_per_million_added": cost_now - cost_then,
                }
            )
    print(
        benchlib.table(
            [
                "lane",
                "run",
                "heartbeat writes",
                "in-flight writes",
                "LEASE timers",
                "visibility req.",
                "read units",
                "$/M before",
                "$/M now",
                "$/M added",
            ],
            rows,
            align="llrrrrrrrr",
        )
    )
    first_beat_s = beat_interval_s(settings.lease_s)  # shorter runs write no heartbeat
    beatless = [r for r in results["runs"] if r["seconds"] < first_beat_s]
    worst_beatless = max(r["usd_per_million_added"] for r in beatless)
    worst_short = max(r["usd_per_million_added"] for r in results["runs"] if r["seconds"] < 5)
    print(
        f"runs under {first_beat_s:g} s (no heartbeat): at most ${worst_beatless:.3f} per million more than"
        f" before; runs under 5 s: at most ${worst_short:.3f} (target <= $0.05; a run past {first_beat_s:g} s"
        " pays a heartbeat of its record, beaten the clock skew between nodes, 5 s, and 2 s before its"
        " lease ends, and a renewal of its message's visibility, shared by its batch)"
    )
    results["short_runs"] = short_run_floor(prices)
    floor = results["short_runs"]
    print(
        "  the Lambda lane's run under its first heartbeat (0.5 s): the lease on arrival "
        f"${floor['visibility_usd']:.4f} + the pollers' "
        f"re-send check ${floor['check_usd']:.4f}. The check alone is over the bound on demand: "
        "0.5 read units is the least an item read costs (BatchGetItem too), and a worker that died "
        "before its handler ran leaves nothing but the missing claim to look at (its batch waits out the "
        "queue's visibility timeout, which the event source mapping requires to be at least the "
        "function's); the one cheaper way found to read claims, a table stream read by a Lambda and "
        "published in bulk for the pollers to query, is not built (docs/delivery.md)"
    )
    print(
        f"  provisioned ({PROVISIONED_UTILISATION:.0%} utilisation): ${floor['provisioned_usd']:.4f} "
        f"per million (the check ${floor['provisioned_check_usd']:.4f})"
    )
    # Both pollers of a group check what they sent (punctual.dispatch.polling.release): on a minute
    # planned on the standard poller (two per group) the slot's record is read twice.
    floor["two_pollers_usd"] = floor["visibility_usd"] + settings.poller_replicas * floor["check_usd"]
    print(
        f"  on a minute planned on the standard poller ({settings.poller_replicas} pollers a group, each "
        f"checking what it sent) the same run pays ${floor['two_pollers_usd']:.4f}: the second check is "
        "counted in the poller redundancy's cost below, with the second poller's other reads"
    )
    benchlib.heading("A dead worker replaced (virtual seconds, the real code)")
    recovered = recovery_s()
    print(benchlib.table(["death", "seconds"], list(recovered.items())))
    benchlib.heading("The poller redundancy: two pollers per group on minutes planned on the standard poller")
    extra = redundancy(prices)
    if extra:
        print(
            f"per million triggers at 10,000/s: +${extra['per_million_at_10k']:.3f} (the second poller's job "
            "reads, sends, next-timer writes and Lambda time)"
        )
        print(
            f"idle month: ${extra['idle_month_total']:.2f} unchanged (idle minutes keep one poller); "
            f"a second poller on them too would add ${extra['lean_second_poller_month']:.2f}: "
            f"${extra['idle_month_if_lean_minutes_had_two']:.2f}"
        )
    else:
        print("(bench/results/cost_per_million.json is missing: run bench/cost_per_million.py first)")
    benchlib.write_result(
        "lease_cost",
        {
            **results,
            "lease_s": settings.lease_s,
            "message_lease_s": settings.message_lease_s,
            "beat_interval_s": beat_interval_s(settings.lease_s),
            "batch": BATCH,
            "runs_under_5_s_added_usd_per_million": worst_short,
            "runs_without_heartbeat_added_usd_per_million": worst_beatless,
            "recovery_s": recovered,
            "redundancy": extra,
            "verdicts": {"runs_under_5_s_within_5_cents": worst_short <= 0.05},
        },
    )


if __name__ == "__main__":
    main()
