"""The poller, against the in-memory store and DynamoDB (moto): issue 3's eight cases."""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from factories import spec
from punctual.dispatch.polling import Poller
from punctual.models import Execution, ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobStore
from punctual.timing.timers import Lane, TimerKind, minute_of, slot_key
from punctual.usecases.jobs import JobService, QueueRouting
from simulation import LAYOUT, SHORT, Simulation


class Crash(BaseException):
    """A process dying: not an Exception, so nothing in the poller catches it."""


def service(store: JobStore, clock: ManualClock, sim: Simulation) -> JobService:
    return JobService(store, sim.queues, clock, LAYOUT, QueueRouting((SHORT,), ("queue://long",)))


def minutes(first: datetime, count: int) -> list[datetime]:
    return [first + timedelta(minutes=i) for i in range(count)]


@pytest.fixture
def clock(t0: datetime) -> ManualClock:
    return ManualClock(t0 - timedelta(minutes=5))


@pytest.fixture
def sim(store: JobStore, clock: ManualClock) -> Simulation:
    return Simulation(store, clock)


def test_rate_job_fires_every_slot_once_and_on_time(store, clock, sim, t0):  # type: ignore[no-untyped-def]
    # Given a job every 20 seconds and a cron job every minute, registered 5 minutes ahead
    jobs = service(store, clock, sim)
    rate, _ = jobs.register("default", spec("rate(20 seconds)", start_at=t0.isoformat()))
    cron, _ = jobs.register("default", spec("cron(* * * * ? *)"))
    # When pollers run minute after minute for three minutes
    sim.run(minutes(t0 - timedelta(minutes=5), 8), until=t0 + timedelta(minutes=3))
    # Then every slot was released exactly once, at its instant
    expected_rate = [slot_key(t0 + timedelta(seconds=20 * i)) for i in range(9)]
    assert sim.slots(rate.id) == expected_rate
    expected_cron = [slot_key(t0 - timedelta(minutes=4) + timedelta(minutes=i)) for i in range(7)]
    assert sim.slots(cron.id) == expected_cron
    for at, message in sim.queues.log:
        assert at == datetime.fromisoformat(message.scheduled_at)  # released at its instant


def test_crash_after_send_before_next_timer(store, clock, sim, t0):  # type: ignore[no-untyped-def]
    # Given a job every minute
    jobs = service(store, clock, sim)
    job, _ = jobs.register("default", spec("rate(1 minute)", start_at=t0.isoformat()))
    sim.run(minutes(t0 - timedelta(minutes=5), 5), until=t0 - timedelta(seconds=15))
    # When the poller of t0 dies after sending the slot, before writing the next timer
    crashing = sim.poller(store=_CrashOnce(store, "put_timers"))
    with pytest.raises(Crash):
        sim.run([t0], until=t0 + timedelta(minutes=1, seconds=30), pollers=[crashing])
    assert sim.slots(job.id) == [slot_key(t0)]
    # Then a new poller of the same minute resends the same dedup id (dropped) and writes the
    # next timer once, and the chain goes on
    sim.run(
        [t0, t0 + timedelta(minutes=1), t0 + timedelta(minutes=2)],
        until=t0 + timedelta(minutes=2, seconds=30),
    )
    assert sim.slots(job.id) == [slot_key(t0 + timedelta(minutes=i)) for i in range(3)]
    assert sim.queues.sends > len(sim.sent())  # the resend happened and was deduplicated
    next_minute = minute_of(t0 + timedelta(minutes=1))
    rows = [t for s in range(LAYOUT.near_shard_count) for t in store.query_timers(Lane.NEAR, next_minute, s)]
    assert [t.slot for t in rows if t.job_id == job.id] == [slot_key(t0 + timedelta(minutes=1))]


def test_two_pollers_with_skewed_clocks(store, clock, sim, t0):  # type: ignore[no-untyped-def]
    # Given jobs of several kinds, and two pollers on the same shards, clocks 5 s apart
    jobs = service(store, clock, sim)
    ids = [
        jobs.register("default", spec(s, start_at=t0.isoformat()))[0].id
        for s in ("rate(7 seconds)", "rate(1 minute)", "cron(* * * * ? *)", "cron(0/2 * * * ? *)")
    ]
    fast, slow = sim.poller(+2.5), sim.poller(-2.5)
    # When both run the same minutes
    sim.run(minutes(t0 - timedelta(minutes=5), 9), until=t0 + timedelta(minutes=3), pollers=[fast, slow])
    # Then one message per (job, slot), and none released earlier than its instant minus the skew
    keys = [(m.job_id, m.slot) for m in sim.sent()]
    assert len(keys) == len(set(keys))
    # (the fast poller releases up to 2.5 s early, so the slot at 182 s is in too)
    assert sim.slots(ids[0]) == [slot_key(t0 + timedelta(seconds=7 * i)) for i in range(27)]
    for at, message in sim.queues.log:
        assert at >= datetime.fromisoformat(message.scheduled_at) - timedelta(seconds=2.5)
    # and no duplicate next timers: one row per (job, slot)
    rows = Counter()
    for m in minutes(t0, 4):
        for lane, count in ((Lane.FAR, LAYOUT.shard_count), (Lane.NEAR, LAYOUT.near_shard_count)):
            for s in range(count):
                rows.update((t.job_id, t.slot) for t in store.query_timers(lane, m, s))
    assert rows and max(rows.values()) == 1


def test_poller_dies_mid_minute_next_one_resumes(store, clock, sim, t0):  # type: ignore[no-untyped-def]
    # Given 40 jobs due across the minute t0 (far timers, several shards)
    jobs = service(store, clock, sim)
    ids = [
        jobs.register("default", spec("rate(1 hour)", start_at=(t0 + timedelta(seconds=i)).isoformat()))[0].id
        for i in range(0, 60, 3)
    ]
    ids += [jobs.register("default", spec(f"cron({i} * * * ? *)"))[0].id for i in (0, 1)]
    # When the poller of t0 dies on its fifth send
    dying = sim.poller(queues=_CrashOnce(sim.queues, "send", after=4))
    with pytest.raises(Crash):
        sim.run([t0], until=t0 + timedelta(minutes=2), pollers=[dying])
    # Then the next minute's poller drains t0's bucket from the watermark: nothing missed
    sim.run([t0 + timedelta(minutes=1)], until=t0 + timedelta(minutes=2))
    released = {m.job_id for m in sim.sent()}
    assert set(ids[:20]) <= released
    assert Counter((m.job_id, m.slot) for m in sim.sent()).most_common(1)[0][1] == 1


@pytest.mark.parametrize(
    ("policy", "expected_minutes"),
    [("all", [0, 3, 6, 9, 12]), ("latest", [0, 9, 12]), ("none", [0, 12])],
)
def test_ten_minute_outage_catch_up(store, clock, sim, t0, policy, expected_minutes):  # type: ignore[no-untyped-def]
    # Given a job every three minutes that fired at t0
    jobs = service(store, clock, sim)
    job, _ = jobs.register(
        "default", spec("rate(3 minutes)", start_at=t0.isoformat(), catchup={"policy": policy})
    )
    sim.run(minutes(t0 - timedelta(minutes=1), 2), until=t0 + timedelta(seconds=80))
    assert sim.slots(job.id) == [slot_key(t0)]
    # When no poller runs for ten minutes, and then they run again
    clock.set(t0 + timedelta(minutes=10, seconds=40))
    back = t0 + timedelta(minutes=11)
    sim.run([back, back + timedelta(minutes=1)], until=back + timedelta(minutes=1, seconds=5))
    # Then the slots missed meanwhile follow the policy, and the next slot fires on time
    assert sim.slots(job.id) == [slot_key(t0 + timedelta(minutes=m)) for m in expected_minutes]
    assert store.get_job("default", job.id).skipped_slots == 5 - len(expected_minutes)


def test_stale_versions_are_not_released(store, clock, sim, t0):  # type: ignore[no-untyped-def]
    jobs = service(store, clock, sim)
    paused, _ = jobs.register("default", spec("rate(1 minute)", start_at=t0.isoformat()))
    deleted, _ = jobs.register("default", spec("rate(1 minute)", start_at=t0.isoformat()))
    changed, _ = jobs.register("default", spec("rate(1 minute)", start_at=t0.isoformat()))
    new_spec = spec("rate(1 minute)", start_at=(t0 + timedelta(seconds=30)).isoformat())
    # When, while their timers are due, one is paused, one deleted, one re-specified,
    # and the paused one is resumed a minute later
    events = [
        (t0 - timedelta(seconds=30), lambda: jobs.pause("default", paused.id)),
        (t0 - timedelta(seconds=30), lambda: jobs.delete("default", deleted.id)),
        (t0 - timedelta(seconds=30), lambda: jobs.replace("default", changed.id, new_spec)),
        (t0 + timedelta(minutes=1, seconds=5), lambda: jobs.resume("default", paused.id)),
    ]
    sim.run(minutes(t0 - timedelta(minutes=5), 8), until=t0 + timedelta(minutes=2, seconds=5), events=events)
    # Then nothing of the stale versions is released; the new spec fires on its own slots
    assert sim.slots(deleted.id) == []
    assert sim.slots(changed.id) == [slot_key(t0 + timedelta(seconds=30 + 60 * i)) for i in range(2)]
    # And the slots due while paused are the resume's to decide: under the default catch-up
    # 'all' t0 and t0+1m run once the job is resumed, then t0+2m on time; none is MISSED
    assert sim.slots(paused.id) == [slot_key(t0 + timedelta(minutes=m)) for m in (0, 1, 2)]
    assert store.get_job("default", paused.id).skipped_slots == 0


def test_near_lane_on_time(store, clock, sim, t0):  # type: ignore[no-untyped-def]
    jobs = service(store, clock, sim)
    clock.set(t0 - timedelta(seconds=20))
    # A job registered 20 s before its first slot, a retry 2 s out, a rate(1 second) chain
    fresh, _ = jobs.register("default", spec("cron(* * * * ? *)"))
    every_second, _ = jobs.register("default", spec("rate(1 second)"))
    retried, _ = jobs.register("default", spec("rate(1 day)", start_at=(t0 - timedelta(hours=1)).isoformat()))
    slot = slot_key(t0 - timedelta(hours=1))
    store.save_execution(
        Execution(
            job_id=retried.id,
            slot=slot,
            scheduled_at=t0 - timedelta(hours=1),
            attempt=1,
            status=ExecutionStatus.RETRY_WAIT,
        ),
        None,
        ttl_epoch_s=1,
    )
    store.put_timers(
        [
            LAYOUT.make(
                now=clock.now(),
                due=t0 + timedelta(seconds=2),
                job_id=retried.id,
                tenant="default",
                slot=slot,
                attempt=2,
                kind=TimerKind.RETRY,
                job_version=1,
            )
        ]
    )
    assert fresh.next_fire_at == t0
    sim.run(minutes(t0 - timedelta(minutes=1), 2), until=t0 + timedelta(seconds=10))
    assert sim.slots(fresh.id) == [slot_key(t0)]
    assert sim.slots(every_second.id) == [
        slot_key(t0 - timedelta(seconds=19) + timedelta(seconds=i)) for i in range(29)
    ]
    retry = [m for m in sim.sent(retried.id) if m.attempt == 2]
    assert len(retry) == 1 and retry[0].kind == "retry"
    for at, message in sim.queues.log:
        assert at == datetime.fromisoformat(message.scheduled_at)


@pytest.mark.parametrize("skew_s", [-5.0, -1.0, 0.0, 3.0, 5.0])
def test_far_timer_never_lands_in_a_bucket_already_read(skew_s: float, t0: datetime) -> None:
    # A writer whose clock is off by skew_s writes timers for every due instant from 0 to
    # 10 minutes out; every far timer's bucket is read (at its minute minus the lead, by a
    # poller whose clock may be off the other way) after the true write time.
    lead = timedelta(seconds=10)
    for offset_ms in range(0, 600_000, 250):
        true_now = t0 + timedelta(milliseconds=offset_ms % 997)
        writer_now = true_now + timedelta(seconds=skew_s)
        due = true_now + timedelta(milliseconds=offset_ms)
        timer = LAYOUT.make(
            now=writer_now,
            due=due,
            job_id="j",
            tenant="t",
            slot="s",
            attempt=1,
            kind=TimerKind.FIRE,
            job_version=1,
        )
        if timer.lane is Lane.FAR:
            read_at_true = minute_of(timer.due) - lead - timedelta(seconds=5)
            assert read_at_true > true_now


def test_throttling_and_partial_failures(store, clock, sim, t0):  # type: ignore[no-untyped-def]
    # Given 30 jobs, and a store and queue that fail one call in three with throttling
    jobs = service(store, clock, sim)
    ids = [
        jobs.register("default", spec("rate(30 seconds)", start_at=t0.isoformat()))[0].id for _ in range(30)
    ]
    flaky = sim.poller(store=_Flaky(store, random.Random(7)), queues=_Flaky(sim.queues, random.Random(8)))
    sim.run(
        minutes(t0 - timedelta(minutes=5), 7), until=t0 + timedelta(minutes=1, seconds=40), pollers=[flaky]
    )
    # Then every slot was still released, once, and none more than the mission's 10 s late (a
    # read or send that failed is tried again: a slot may be a few seconds late, never lost)
    for job_id in ids:
        assert sim.slots(job_id) == [slot_key(t0 + timedelta(seconds=30 * i)) for i in range(4)]
    for at, message in sim.queues.log:
        assert at - datetime.fromisoformat(message.scheduled_at) <= timedelta(seconds=10), message


def test_backlog_counts_due_timers_left_unreleased(store, clock, sim, t0):  # type: ignore[no-untyped-def]
    from punctual.runtime.observability import RecordingMetrics

    jobs = service(store, clock, sim)
    for _ in range(3):
        jobs.register("default", spec("rate(1 hour)", start_at=t0.isoformat()))
    clock.set(t0 - timedelta(seconds=10))
    metrics = RecordingMetrics()
    run = Poller(store, sim.queues, clock, sim.config, metrics).minute_poll(t0)
    run.start()
    clock.set(t0 + timedelta(seconds=1))
    assert run.backlog(clock.now()) == 3  # due, held, not yet released
    run.step()
    assert run.backlog(clock.now()) == 0
    assert metrics.values["Backlog"] == [3] and metrics.total("SlotsReleased") == 3


def test_sqs_partial_batch_failures_are_retried() -> None:
    from punctual.dispatch.queues import DispatchMessage, SqsQueues

    class FakeSqs:
        def __init__(self) -> None:
            self.calls = 0
            self.delivered: list[str] = []

        def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
            self.calls += 1
            if self.calls == 1:
                raise ClientError(
                    {"Error": {"Code": "ThrottlingException", "Message": "slow"}}, "SendMessageBatch"
                )
            failed = [e for e in Entries[::2]] if self.calls == 2 else []
            ok = [e for e in Entries if e not in failed]
            self.delivered += [e["MessageDeduplicationId"] for e in ok]
            return {
                "Successful": [{"Id": e["Id"]} for e in ok],
                "Failed": [{"Id": e["Id"], "Code": "InternalError", "SenderFault": False} for e in failed],
            }

    fake = FakeSqs()
    messages = [DispatchMessage("t", f"j{i}", "s", "2026-01-01T00:00:00Z", 1, 1) for i in range(10)]
    SqsQueues(fake).send("q", messages)
    assert sorted(fake.delivered) == sorted(m.dedup_id for m in messages)
    assert fake.calls == 3


def test_a_thousand_jobs_in_one_minute_on_moto(t0: datetime) -> None:
    """1,000 jobs due in the same minute across all shards, DynamoDB and SQS FIFO on moto (the
    bigger bursts are measured by the benchmarks)."""
    import boto3
    from moto import mock_aws

    from punctual.dispatch.polling import Poller, PollerConfig
    from punctual.dispatch.queues import DispatchMessage, SqsQueues
    from punctual.store.dynamo import DynamoStore, job_pk, table_definition
    from punctual.store.memory import MemoryStore
    from punctual.timing.timers import shard_of

    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(**table_definition("t"))
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="short.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        store = DynamoStore(ddb, "t")
        clock = ManualClock(t0 - timedelta(minutes=10))
        received: list[DispatchMessage] = []

        class Draining(SqsQueues):
            def send(self, queue_url, messages):  # type: ignore[no-untyped-def, override]
                super().send(queue_url, messages)
                while True:  # drain as the test goes: moto slows down as a queue deepens
                    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
                    if not got:
                        return
                    for raw in got:
                        received.append(DispatchMessage.from_body(raw["Body"]))
                        sqs.delete_message(QueueUrl=url, ReceiptHandle=raw["ReceiptHandle"])

        queues = Draining(sqs)
        # Seed with batch writes: moto copies the whole table on every transaction, which
        # would make 1,000 registrations quadratic. Same items as JobService.register writes.
        jobs = JobService(MemoryStore(), queues, clock, LAYOUT, QueueRouting((url,)))
        due: dict[str, datetime] = {}
        rows = []
        for i in range(1000):
            start = t0 + timedelta(seconds=(i * 7919) % 60)  # 60 instants, shuffled over the minute
            job, _ = jobs.register("default", spec("rate(1 day)", start_at=start.isoformat()))
            due[job.id] = start
            rows.append({"pk": {"S": job_pk("default", job.id)}, "sk": {"S": "job"}, **store._job_attrs(job)})
        for i in range(0, len(rows), 25):
            ddb.batch_write_item(RequestItems={"t": [{"PutRequest": {"Item": r}} for r in rows[i : i + 25]]})
        timers = [t for b in jobs.store._buckets.values() for _, t in b]  # type: ignore[attr-defined]
        store.put_timers(timers)
        clock.set(t0 - timedelta(seconds=10))
        # (moto's Query reads the whole table: poll the near lane less often in this test)
        config = PollerConfig(layout=LAYOUT, short_queue_urls=(url,), poll_interval_s=5)
        Poller(store, queues, clock, config).run_minute(t0)
        # Then every job was released once, and each shard's jobs in due order
        assert Counter(m.job_id for m in received) == Counter(due.keys())
        for shard in range(LAYOUT.shard_count):
            order = [
                due[m.job_id] for m in received if shard_of(m.tenant, m.job_id, LAYOUT.shard_count) == shard
            ]
            assert order == sorted(order)


class _CrashOnce:
    """Wraps a store or queue; the named call dies (Crash) once, after ``after`` good calls."""

    def __init__(self, inner: Any, method: str, after: int = 0) -> None:
        self._inner = inner
        self._method = method
        self._after = after
        self._done = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name != self._method or self._done:
            return attr

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if self._after > 0:
                self._after -= 1
                return attr(*args, **kwargs)
            self._done = True
            raise Crash()

        return wrapped


class _Flaky:
    """Wraps a store or queue: one call in three fails with a throttling error."""

    def __init__(self, inner: Any, rng: random.Random) -> None:
        self._inner = inner
        self._rng = rng

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if self._rng.random() < 1 / 3:
                raise ClientError(
                    {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "x"}}, name
                )
            return attr(*args, **kwargs)

        return wrapped
