"""The timer key migration (issue 28, finding 2): a stack upgraded while its jobs fire loses no
slot and runs none twice.

The old layout is written by the old code path: ``OldLayout`` is this version's layout with the
previous version's key encoding (copied below: sort key ``<due>#<job>#<slot>#<attempt>``, shard
``hash(job id)``), so registration, the poller's next timers (rows and packs) and the worker's
retry timers of the "old stack" are laid out as they were. The new stack's pollers and worker
take over at an instant inside a minute; ``punctual-admin migrate-keys`` (here its class, in
small pages, once crashing between its put and its delete) runs while they release.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, UpperBound
from factories import spec
from punctual.admin import main as admin_main
from punctual.admin.key_migration import TimerKeyMigration
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.polling import Poller, PollerConfig
from punctual.execution import Delivery, JobServicePauser, MemoryFailureSink, Worker, WorkerConfig
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.store.dynamo import DynamoStore
from punctual.timing.timers import Lane, Timer, TimerKind, TimerLayout, shard_of, slot_key, stable_hash, to_ms
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import Node, Simulation

TABLE = "punctual-test"  # the table tests/conftest.py's dynamo_client fixture creates


# --------------------------------------------------------------------------- the previous version's keys


def old_sort_key(due_ms: int, job_id: str, slot: str, attempt: int) -> str:
    return f"{due_ms:013d}#{job_id}#{slot}#{attempt}"


def old_shard(job_id: str, shard_count: int) -> int:
    return stable_hash(job_id) % shard_count


class OldTimer(Timer):
    """A timer keyed as the previous version keyed it."""

    @property
    def sk(self) -> str:
        return old_sort_key(self.due_ms, self.job_id, self.slot, self.attempt)


@dataclass(frozen=True)
class OldLayout(TimerLayout):
    """The previous version's placement: every writer that builds timers through it writes
    old-layout rows and packs."""

    def make(self, **kwargs: Any) -> Timer:
        t = super().make(**kwargs)
        count = self.shard_count if t.lane is Lane.FAR else self.near_shard_count
        return OldTimer(
            t.lane, old_shard(t.job_id, count), t.due_ms, t.job_id, t.tenant, t.slot, t.attempt,
            t.kind, t.job_version, t.owner,
        )  # fmt: skip


OLD = OldLayout(LAYOUT.shard_count, LAYOUT.near_shard_count, LAYOUT.far_threshold_s)


class Upgrading:
    """A poller deployment that runs the old version's minute polls before ``upgrade_minute``
    and the new version's from then on."""

    def __init__(self, old: Poller, new: Poller, upgrade_minute: datetime) -> None:
        self.old, self.new, self.upgrade_minute = old, new, upgrade_minute

    def minute_poll(self, minute: datetime, group: int = 0, group_count: int = 1) -> Any:
        poller = self.old if minute < self.upgrade_minute else self.new
        return poller.minute_poll(minute, group, group_count)


def worker(
    store: DynamoStore, sim: Simulation, clock: ManualClock, target: FakeTarget, layout: TimerLayout
) -> Worker:
    settings = WorkerConfig(layout=layout, short_queue_urls=(SHORT,), long_queue_urls=(LONG,))
    return Worker(
        store, sim.queues, target, clock, settings, metrics=RecordingMetrics(), failures=MemoryFailureSink(),
        rng=lambda job_id, slot, attempt: UpperBound(),
        pauser=JobServicePauser(store, sim.queues, clock, settings),
    )  # fmt: skip


def work(sim: Simulation, node: Worker) -> None:
    for _ in range(50):
        got = sim.queues.receive(SHORT, 10, 0, 900)
        if not got:
            return
        for received in got:
            handled = node.process(
                received.message, Delivery(SHORT, received.receipt, received.receive_count)
            )
            if handled.ack:
                sim.queues.delete(SHORT, received.receipt)


def timer_items(client: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    request: dict[str, Any] = {"TableName": TABLE}
    while True:
        reply = client.scan(**request)
        items += [i for i in reply["Items"] if i["pk"]["S"].startswith(("timer#", "near#"))]
        if "LastEvaluatedKey" not in reply:
            return items
        request["ExclusiveStartKey"] = reply["LastEvaluatedKey"]


def old_layout_rows_due_after(client: Any, instant_ms: int) -> list[str]:
    """Lone rows keyed the old way, and packs holding an entry in an old shard, due after the instant."""
    found = []
    for item in timer_items(client):
        timers = DynamoStore._timers_from_pack(item) if "tm" in item else [DynamoStore._timer_from_item(item)]
        for t in timers:
            count = LAYOUT.shard_count if t.lane is Lane.FAR else LAYOUT.near_shard_count
            new_shard = t.shard == shard_of(t.tenant, t.job_id, count)
            stale_key = "tm" not in item and item["sk"]["S"] != t.sk
            if t.due_ms > instant_ms and (stale_key or not new_shard):
                found.append(item["sk"]["S"])
    return found


# --------------------------------------------------------------------------- the upgrade


def test_a_stack_upgraded_while_jobs_fire_loses_no_slot_and_runs_none_twice(
    dynamo_client: Any, t0: datetime
) -> None:
    # Given the old stack: jobs of two tenants registered and run by the old version, whose
    # timers (registration, next timers, a retry's) are in the old layout
    store = DynamoStore(dynamo_client, TABLE)
    clock = ManualClock(t0 - timedelta(seconds=30))
    new_config = PollerConfig(
        layout=LAYOUT, short_queue_urls=(SHORT,), long_queue_urls=(LONG,), concurrency=2
    )
    old_config = PollerConfig(layout=OLD, short_queue_urls=(SHORT,), long_queue_urls=(LONG,), concurrency=2)
    sim = Simulation(store, clock, config=new_config)
    routing = QueueRouting((SHORT,), (LONG,))
    old_jobs = JobService(store, sim.queues, clock, OLD, routing)
    new_jobs = JobService(store, sim.queues, clock, LAYOUT, routing)

    def flaky(ctx: SlotContext) -> TargetResult:
        return (
            TargetResult.retryable("HTTP 503")
            if ctx.job_id == "flaky" and ctx.attempt == 1
            else TargetResult.ok()
        )

    target = FakeTarget(flaky)
    expected: dict[tuple[str, str], list[datetime]] = {}
    end = t0 + timedelta(minutes=12)

    def register(
        service: JobService, tenant: str, job_id: str, schedule: str, first: datetime, every: timedelta | None
    ) -> None:
        service.register(tenant, spec(schedule, start_at=first.isoformat()), job_id=job_id)
        slots, at = [], first
        while at < end - timedelta(seconds=40) and (every or not slots):
            slots.append(at)
            if every is None:
                break
            at += every
        expected[(tenant, job_id)] = slots

    for tenant, offset in (("alice", 3), ("bob", 17)):
        start = t0 + timedelta(seconds=offset)
        register(old_jobs, tenant, "minutely", "rate(1 minute)", start, timedelta(minutes=1))  # near lane
        register(old_jobs, tenant, "five", "rate(5 minutes)", start, timedelta(minutes=5))  # far: moved
        register(
            old_jobs, tenant, "ten", "rate(10 minutes)", start + timedelta(seconds=5), timedelta(minutes=10)
        )
        # (its own id per tenant: in the old layout two tenants' alike ids due at one instant
        # were one row, the bug the migration cannot undo; far, due soon at the migration)
        register(old_jobs, tenant, f"quarter-{tenant}", "cron(*/4 * * * ? *)", t0, timedelta(minutes=4))
        at = t0 + timedelta(minutes=7, seconds=offset)
        register(old_jobs, tenant, "once", f"at({at.strftime('%Y-%m-%dT%H:%M:%S')})", at, None)  # far: moved
    register(old_jobs, "alice", "flaky", "rate(2 minutes)", t0 + timedelta(seconds=40), timedelta(minutes=2))

    upgrade = t0 + timedelta(minutes=2, seconds=20)  # inside minute 2: its old poller runs on
    old_worker = worker(store, sim, clock, target, OLD)
    new_worker = worker(store, sim, clock, target, LAYOUT)
    deployment = Upgrading(
        Poller(store, sim.queues, clock, old_config),
        Poller(store, sim.queues, clock, new_config),
        t0 + timedelta(minutes=3),
    )

    # When the new version takes over at `upgrade` (workers at once, pollers from the next
    # minute), a job is registered by it, and the migration runs in small pieces from 20 s
    # after, crashing once between a put and its delete (its first delete)
    migration = TimerKeyMigration(store, LAYOUT, clock, segments=3, page_size=2)
    reports: list[Any] = []
    crashes: list[str] = []
    real_delete = dynamo_client.delete_item

    def crash_once(**kwargs: Any) -> Any:
        if not crashes:
            crashes.append(kwargs["Key"]["sk"]["S"])
            raise ConnectionError("the operator's session died")
        return real_delete(**kwargs)

    def migrate_step() -> None:
        dynamo_client.delete_item = real_delete if crashes else crash_once
        try:
            reports.append(migration.run(max_pages=1))
        except ConnectionError:
            reports.append(None)
        finally:
            dynamo_client.delete_item = real_delete

    after = upgrade + timedelta(seconds=20)
    events: list[tuple[datetime, Any]] = [(upgrade - timedelta(seconds=1), lambda: work(sim, old_worker))]
    events += [(t0 + timedelta(seconds=s), lambda: work(sim, old_worker)) for s in range(0, 140, 5)]
    events += [(upgrade + timedelta(seconds=s), lambda: work(sim, new_worker)) for s in range(0, 700, 5)]
    events.append(
        (
            upgrade + timedelta(seconds=10),
            lambda: register(
                new_jobs,
                "bob",
                "late",
                "rate(3 minutes)",
                t0 + timedelta(minutes=3, seconds=30),
                timedelta(minutes=3),
            ),
        )
    )
    events += [(after + timedelta(seconds=s), migrate_step) for s in range(0, 120, 3)]
    sim.run(
        [t0 + timedelta(minutes=k) for k in range(12)],
        until=end + timedelta(seconds=20),
        pollers=[Node(deployment, 0.0)],  # type: ignore[arg-type]
        events=events,
    )
    work(sim, new_worker)

    # Then the migration finished, moved far-ahead timers, left those due soon, and survived its crash
    assert crashes and None in reports
    done = [r for r in reports if r is not None and r.complete]
    assert done, [r.summary() for r in reports if r is not None]
    # (how many items that is depends on how the pollers packed the far timers: each pack moves whole)
    assert done[0].counts["moved"] >= 3 and done[0].counts["removed"] >= 3, done[0].summary()
    assert done[0].counts["due_soon"] + done[0].counts["past"] >= 1, done[0].summary()
    # And every slot of every job ran, each attempt once (the flaky job's slots twice: a retry)
    calls = Counter((c.tenant, c.job_id, c.slot, c.attempt) for c in target.calls)
    assert max(calls.values()) == 1, [k for k, n in calls.items() if n > 1]
    for (tenant, job_id), slots in expected.items():
        ran = sorted({slot for (t, j, slot, _) in calls if (t, j) == (tenant, job_id)})
        assert ran[: len(slots)] == [slot_key(s) for s in slots], (tenant, job_id)
        attempts = {a for (t, j, _, a) in calls if (t, j) == (tenant, job_id)}
        assert attempts == ({1, 2} if job_id == "flaky" else {1}), (tenant, job_id)
        records = store.list_executions(tenant, job_id, limit=50).items
        assert {r.status for r in records if r.slot in ran} == {ExecutionStatus.SUCCEEDED}, (tenant, job_id)
    # And no old-layout timer due later than the threshold is left, and a second pass moves nothing
    assert old_layout_rows_due_after(dynamo_client, to_ms(clock.now()) + LAYOUT.far_threshold_s * 1000) == []
    again = TimerKeyMigration(store, LAYOUT, clock, segments=3).run(restart=True)
    assert again.complete and again.counts["moved"] == 0, again.summary()


def test_a_dry_run_counts_and_writes_nothing(dynamo_client: Any, t0: datetime) -> None:
    # Given old-layout timers: one far ahead, one due in a minute
    store = DynamoStore(dynamo_client, TABLE)
    clock = ManualClock(t0)
    service = JobService(store, None, clock, OLD, QueueRouting((SHORT,), (LONG,)))  # type: ignore[arg-type]
    service.register(
        "alice", spec("rate(1 day)", start_at=(t0 + timedelta(hours=2)).isoformat()), job_id="daily"
    )
    service.register(
        "alice", spec("rate(1 day)", start_at=(t0 + timedelta(minutes=1)).isoformat()), job_id="soon"
    )
    before = sorted((i["pk"]["S"], i["sk"]["S"]) for i in timer_items(dynamo_client))
    # When a dry run counts them
    report = TimerKeyMigration(store, LAYOUT, clock, segments=2).run(dry_run=True)
    # Then it would move one, leave one, and wrote nothing (no timer, no progress)
    assert (report.counts["moved"], report.counts["due_soon"], report.counts["removed"]) == (1, 1, 0)
    assert sorted((i["pk"]["S"], i["sk"]["S"]) for i in timer_items(dynamo_client)) == before
    assert (
        dynamo_client.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "meta#migrate-keys"}},
        )["Items"]
        == []
    )
    # And the real run moves the far one to the key a new writer would use, which the poller reads
    TimerKeyMigration(store, LAYOUT, clock, segments=2).run()
    job = store.get_job("alice", "daily")
    assert job is not None
    due = t0 + timedelta(hours=2)
    wanted = LAYOUT.make(
        now=clock.now(), due=due, job_id="daily", tenant="alice", slot=slot_key(due), attempt=1,
        kind=TimerKind.FIRE, job_version=job.version,
    )  # fmt: skip
    assert [t.sk for t in store.query_timers(wanted.lane, due, wanted.shard)] == [wanted.sk]


def test_the_command_resumes_reports_and_refuses_bad_input(
    dynamo_client: Any, t0: datetime, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from punctual.runtime import aws

    aws.reset()
    monkeypatch.setenv("PUNCTUAL_TABLE_NAME", TABLE)
    # Given a table whose timers were never written: nothing to do
    assert admin_main(["migrate-keys"]) == 0
    assert "nothing to move" in capsys.readouterr().out
    # Given old-layout timers (two shards laid out, as the table records)
    store = DynamoStore(dynamo_client, TABLE, LAYOUT)
    far = datetime.now(t0.tzinfo) + timedelta(hours=3)
    JobService(
        store, None, ManualClock(far - timedelta(hours=1)), OLD, QueueRouting((SHORT,), (LONG,))
    ).register(  # type: ignore[arg-type]
        "alice", spec("rate(1 day)", start_at=far.isoformat()), job_id="daily"
    )
    # When the command runs, twice
    assert admin_main(["migrate-keys", "--segments", "2"]) == 0
    first = capsys.readouterr().out
    assert admin_main(["migrate-keys", "--segments", "2"]) == 0
    second = capsys.readouterr().out
    # Then the first moved the timer and the second found every segment done: it says so and reads
    # nothing (it printed the read estimate of a full scan and the old counts as if it had run)
    assert "moved 1 (1 old items deleted)" in first and "complete" in first
    assert second.startswith(f"table {TABLE}: already complete") and "read units" not in second, second
    assert "moved 1" in second  # (what that run did)
    assert old_layout_rows_due_after(dynamo_client, 0) == []
    # And bad input is one line and exit status 2
    assert admin_main(["migrate-keys", "--segments", "0"]) == 2
    assert admin_main(["migrate-keys", "--table", "absent"]) == 2
    assert admin_main(["frob"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("punctual-admin: error: ") for line in err), err
    # And --restart scans again
    assert admin_main(["migrate-keys", "--segments", "2", "--restart"]) == 0
    assert "read units" in capsys.readouterr().out
    aws.reset()


def test_the_command_without_a_region_says_how_to_give_one(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from punctual.runtime import aws

    for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("PUNCTUAL_TABLE_NAME", TABLE)
    aws.reset()
    try:
        # It exited 1 with "AWS error: You must specify a region."; no region is bad input
        assert admin_main(["migrate-keys"]) == 2
    finally:
        aws.reset()
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("punctual-admin: error: no AWS region") and "AWS_DEFAULT_REGION" in line


class Grouped:
    """A poller that runs one shard group of ``count`` (the state machine's Map gives each its own)."""

    def __init__(self, poller: Poller, group: int, count: int) -> None:
        self.poller, self.group, self.count = poller, group, count

    def minute_poll(self, minute: datetime, group: int = 0, group_count: int = 1) -> Any:
        return self.poller.minute_poll(minute, self.group, self.count)


def test_a_timer_whose_bucket_a_poller_has_read_is_left_where_it_is(dynamo_client: Any, t0: datetime) -> None:
    # Given two shard groups whose pollers read their far buckets 8 s apart (skewed clocks), and
    # an old-layout timer due 30 s into minute M whose old shard is read by the later group and
    # whose tenant-layout shard by the earlier one
    def group(shard: int) -> int:
        return shard % 2

    job_id = next(
        f"job-{n}"
        for n in range(1000)
        if group(old_shard(f"job-{n}", LAYOUT.shard_count)) == 1
        and group(shard_of("alice", f"job-{n}", LAYOUT.shard_count)) == 0
    )
    store = DynamoStore(dynamo_client, TABLE)
    minute = t0 + timedelta(minutes=10)
    clock = ManualClock(t0)
    config = PollerConfig(layout=LAYOUT, short_queue_urls=(SHORT,), long_queue_urls=(LONG,), concurrency=1)
    sim = Simulation(store, clock, config=config)
    due = minute + timedelta(seconds=30)
    JobService(store, sim.queues, clock, OLD, QueueRouting((SHORT,), (LONG,))).register(
        "alice", spec(f"at({due.strftime('%Y-%m-%dT%H:%M:%S')})"), job_id=job_id
    )
    early, late = sim.poller(offset_s=4.0), sim.poller(offset_s=-4.0)  # start at M - 14 s and M - 6 s
    nodes = [Node(Grouped(early.poller, 0, 2), 4.0), Node(Grouped(late.poller, 1, 2), -4.0)]  # type: ignore[arg-type]
    # When the migration runs between the two reads
    reports: list[Any] = []
    migrate = (
        minute - timedelta(seconds=10),
        lambda: reports.append(TimerKeyMigration(store, LAYOUT, clock).run()),
    )
    clock.set(minute - timedelta(seconds=20))
    sim.run([minute], until=minute + timedelta(minutes=1, seconds=20), pollers=nodes, events=[migrate])
    # Then it left the timer where the later poller reads it, and the slot was released once
    assert reports and reports[0].counts["due_soon"] == 1 and reports[0].counts["moved"] == 0
    assert sim.slots(job_id) == [slot_key(due)]
