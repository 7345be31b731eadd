"""Two tenants' alike-named jobs never meet (issue 28, finding 2).

Job ids are unique per tenant only: a schedule created through the EventBridge Scheduler API is
job ``sch-<digest of group/name>`` in every tenant. Before the tenant was in the timer's key, two
tenants that both created ``default/nightly`` wrote one timer row: one chain overwrote (DynamoDB)
or shadowed (in memory) the other, and the losing tenant's schedule showed ENABLED and never ran
again. Each test here runs against both stores (the ``store`` fixture), through the real
registration, minute pollers (read ahead, drain, release, next timers in packs) and worker.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from api_harness import ALICE_ID, BOB, BOB_ID, ApiClient
from api_harness import api as api  # the fixture
from scheduler_harness import scheduler_client
from tenant_harness import TwoTenants, same_shards

from factories import spec
from punctual.api.scheduler.mapping import job_id_of
from punctual.models import ExecutionStatus, JobState
from punctual.store.base import JobStore
from punctual.timing.timers import Lane, minute_of, slot_key

NIGHTLY = job_id_of("default", "nightly")  # the same in every tenant
ALICE = "AROAALICE0000000000001"


def minutely(start: datetime, first: int, count: int) -> list[str]:
    return [slot_key(start + timedelta(minutes=k)) for k in range(first, first + count)]


def test_two_tenants_with_one_job_id_each_run_every_slot_once(store: JobStore, t0: datetime) -> None:
    # Given two tenants whose timers of one job id share a bucket in both lanes (the worst case:
    # one query, one pack, one drain hold both), each with `rate(1 minute)` under that id
    bob = same_shards(NIGHTLY, ALICE)
    world = TwoTenants(store, t0 - timedelta(seconds=30))
    for tenant in (ALICE, bob):
        world.jobs.register(tenant, spec("rate(1 minute)", start_at=t0.isoformat()), job_id=NIGHTLY)
    assert world.buckets(NIGHTLY, ALICE) == world.buckets(NIGHTLY, bob)
    # When pollers and a worker run for five minutes
    world.run(t0, minutes=5)
    # Then each tenant's job ran every slot, once
    expected = minutely(t0, 0, 5)
    assert world.calls(ALICE) == expected
    assert world.calls(bob) == expected
    # And each has its own history, one SUCCEEDED record per slot
    for tenant in (ALICE, bob):
        records = store.list_executions(tenant, NIGHTLY, limit=50).items
        assert sorted(r.slot for r in records) == expected
        assert {r.status for r in records} == {ExecutionStatus.SUCCEEDED}


def test_deleting_one_tenants_job_leaves_the_others_chain_alive(store: JobStore, t0: datetime) -> None:
    # Given two tenants with the same job id and expression, both running
    bob = same_shards(NIGHTLY, ALICE)
    world = TwoTenants(store, t0 - timedelta(seconds=30))
    for tenant in (bob, ALICE):  # the other order of writes: the first writer was the loser in DynamoDB
        world.jobs.register(tenant, spec("rate(1 minute)", start_at=t0.isoformat()), job_id=NIGHTLY)
    # When Bob deletes his job in the middle of the third minute
    world.run(
        t0,
        minutes=6,
        events=[(t0 + timedelta(minutes=2, seconds=30), lambda: world.jobs.delete(bob, NIGHTLY))],
    )
    # Then Bob's ran until then, and Alice's runs on, every slot once
    assert world.calls(bob) == minutely(t0, 0, 3)
    assert world.calls(ALICE) == minutely(t0, 0, 6)
    # And Alice's job still has a live chain: its next slot fires in the minute after
    world.run(t0 + timedelta(minutes=6), minutes=1)
    assert world.calls(ALICE) == minutely(t0, 0, 7)
    assert store.get_job(ALICE, NIGHTLY).state is JobState.ENABLED  # type: ignore[union-attr]


def test_retries_and_one_time_jobs_of_alike_ids_stay_apart(store: JobStore, t0: datetime) -> None:
    """The other timer kinds (a retry's, an `at()` job's) are keyed alike."""
    from punctual.delivery.targets.base import SlotContext, TargetResult

    bob = same_shards("report", ALICE)
    world = TwoTenants(store, t0 - timedelta(seconds=30))

    def alice_fails_once(ctx: SlotContext) -> TargetResult:
        first_try = ctx.tenant == ALICE and ctx.attempt == 1
        return TargetResult.retryable("HTTP 503") if first_try else TargetResult.ok()

    world.rig.target.results = [alice_fails_once]
    once = spec(f"at({(t0 + timedelta(seconds=20)).strftime('%Y-%m-%dT%H:%M:%S')})")
    for tenant in (ALICE, bob):
        world.jobs.register(tenant, once, job_id="report")
    world.run(t0, minutes=3)
    # Then Alice's slot ran twice (a retry), Bob's once, and both jobs completed
    slot = slot_key(t0 + timedelta(seconds=20))
    assert [(c.tenant, c.attempt) for c in world.rig.target.calls] in (
        [(ALICE, 1), (bob, 1), (ALICE, 2)],
        [(bob, 1), (ALICE, 1), (ALICE, 2)],
    )
    for tenant in (ALICE, bob):
        assert world.calls(tenant)[-1] == slot
        assert store.get_job(tenant, "report").state is JobState.COMPLETED  # type: ignore[union-attr]


# --------------------------------------------------------------------------- EventBridge Scheduler API


def _nightly(client: Any, queue: str, start: datetime) -> str:
    arn: str = client.create_schedule(
        Name="nightly",
        ScheduleExpression="rate(1 minute)",
        StartDate=start,
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": queue, "RoleArn": "arn:aws:iam::123456789012:role/scheduler-role"},
    )["ScheduleArn"]
    return arn


def test_two_tenants_create_the_same_schedule_through_the_scheduler_api(api: ApiClient) -> None:
    # Given Alice and Bob, two IAM principals with unmodified boto3 scheduler clients, each
    # creating default/nightly with the same expression and start (their queues differ)
    now = datetime.now(UTC)
    start = minute_of(now) + timedelta(minutes=2)
    alice, bob = scheduler_client(api), scheduler_client(api, user=BOB)
    alice_arn = _nightly(alice, "arn:aws:sqs:us-east-1:123456789012:alice-reports", start)
    bob_arn = _nightly(bob, "arn:aws:sqs:us-east-1:123456789012:bob-reports", start)
    # (ARNs keep the service's format, which has no room for a tenant: they are equal)
    assert alice_arn == bob_arn
    world = TwoTenants(api.store, now)
    # When pollers and a worker run four minutes, and Bob deletes his schedule in the third
    world.run(
        start,
        minutes=4,
        events=[(start + timedelta(minutes=2, seconds=30), lambda: bob.delete_schedule(Name="nightly"))],
    )
    # Then both ran every slot once until then, and Alice's runs on
    assert world.calls(ALICE_ID) == minutely(start, 0, 4)
    assert world.calls(BOB_ID) == minutely(start, 0, 3)
    # And each tenant's schedule (and only it) is what its own client sees
    assert alice.get_schedule(Name="nightly")["Target"]["Arn"].endswith(":alice-reports")
    with pytest.raises(Exception, match="ResourceNotFoundException"):
        bob.get_schedule(Name="nightly")
    job = api.store.get_job(ALICE_ID, NIGHTLY)
    assert job is not None and job.state is JobState.ENABLED


def test_timer_keys_differ_by_tenant_and_every_lane_spreads_alike_ids(t0: datetime) -> None:
    from punctual.timing.timers import TimerKind, TimerLayout

    layout = TimerLayout(shard_count=512, near_shard_count=32)

    def timer(tenant: str, due: datetime) -> Any:
        return layout.make(
            now=t0, due=due, job_id=NIGHTLY, tenant=tenant, slot=slot_key(due), attempt=1,
            kind=TimerKind.FIRE, job_version=1,
        )  # fmt: skip

    for due in (t0 + timedelta(seconds=5), t0 + timedelta(hours=1)):
        a, b = timer("tenant-a", due), timer("tenant-b", due)
        assert a.lane is b.lane and a.sk != b.sk
        assert a.sk.startswith(f"{a.due_ms:013d}#tenant-a#{NIGHTLY}#")
    # 1,000 tenants' `default/nightly` spread over the far shards (a popular name is not one hot partition)
    far = {timer(f"AROA{n:017d}", t0 + timedelta(hours=1)).shard for n in range(1000)}
    assert len(far) > 400
    assert {timer(f"AROA{n:017d}", t0).lane for n in range(3)} == {Lane.NEAR}
