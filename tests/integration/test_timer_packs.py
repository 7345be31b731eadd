"""Timer packs: the poller's next timers share items, and every read sees each timer once.

The store contract (tests/integration/test_store.py) already runs against both stores;
these tests pin what packing must keep true on DynamoDB (moto), checked against the
in-memory store as the reference: the same timers come back, in due order, for any due
range, whatever the grouping of the writes.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import pytest

from punctual.store.dynamo import DynamoStore
from punctual.store.memory import MemoryStore
from punctual.timing.timers import LOAD_KINDS, Lane, Timer, TimerKind, minute_of, slot_key, to_ms

KINDS = list(TimerKind)

TABLE = "punctual-test"  # the table tests/conftest.py's dynamo_client fixture creates


def _timer(lane: Lane, minute: datetime, offset_ms: int, n: int, *, shard: int = 0, **extra: Any) -> Timer:
    due_ms = to_ms(minute) + offset_ms
    values: dict[str, Any] = {
        "job_id": f"01JDZ{n:021d}",
        "tenant": f"arn:aws:iam::123456789012:role/team-{n % 3}",
        "slot": slot_key(minute + timedelta(milliseconds=offset_ms)),
        "attempt": 1 + n % 4,
        "kind": KINDS[n % len(KINDS)],
        "job_version": 1 + n % 7,
        "owner": f"worker-{n}" if n % 5 == 0 else None,
    }
    values.update(extra)
    return Timer(lane=lane, shard=shard, due_ms=due_ms, **values)


def _items(client: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    request: dict[str, Any] = {"TableName": TABLE}
    while True:
        reply = client.scan(**request)
        items += reply["Items"]
        if "LastEvaluatedKey" not in reply:
            return items
        request["ExclusiveStartKey"] = reply["LastEvaluatedKey"]


def _both(dynamo_client: Any) -> tuple[DynamoStore, MemoryStore]:
    return DynamoStore(dynamo_client, TABLE), MemoryStore()


@pytest.mark.parametrize("lane", list(Lane))
def test_a_release_writes_few_items_and_reads_back_every_timer(dynamo_client, t0, lane):  # type: ignore[no-untyped-def]
    dynamo, memory = _both(dynamo_client)
    minute = minute_of(t0 + timedelta(minutes=5))
    # 150 timers in one bucket, due over the minute at whole seconds (the common case).
    timers = [_timer(lane, minute, (n % 60) * 1000, n) for n in range(150)]
    dynamo.put_timers(timers)
    memory.put_timers(timers)
    items = _items(dynamo_client)
    assert len(items) < len(timers) / 2  # packed, not one row each
    assert all(int(item.get("n", {"N": "1"})["N"]) <= 64 for item in items)
    got = dynamo.query_timers(lane, minute, 0)
    assert got == memory.query_timers(lane, minute, 0)  # same timers, same (due) order
    load = sum(1 for t in timers if t.kind in LOAD_KINDS)
    assert dynamo.count_timers(lane, minute, 0) == memory.count_timers(lane, minute, 0) == load


def test_lease_timers_are_no_load(dynamo_client, t0):  # type: ignore[no-untyped-def]
    # The LEASE timers burst tasks write land minutes later: counted as load, they made the tick
    # ask for a second, phantom burst (issue 32). Alone (one row each) or packed, they count 0.
    dynamo, memory = _both(dynamo_client)
    minute = minute_of(t0 + timedelta(minutes=5))
    leases = [_timer(Lane.FAR, minute, n * 10, n, kind=TimerKind.LEASE, owner=f"w{n}") for n in range(40)]
    fires = [_timer(Lane.FAR, minute, n * 10, 100 + n, kind=TimerKind.FIRE) for n in range(7)]
    for store in (dynamo, memory):
        for lease in leases[:10]:
            store.put_timers([lease])  # as heartbeats write them: one row each
        store.put_timers(leases[10:] + fires)  # and packed among fire timers
        assert store.count_timers(Lane.FAR, minute, 0) == 7


def test_a_pack_written_before_load_counts_counts_all_its_timers(dynamo_client, t0):  # type: ignore[no-untyped-def]
    dynamo = DynamoStore(dynamo_client, TABLE)
    minute = minute_of(t0 + timedelta(minutes=5))
    dynamo.put_timers([_timer(Lane.FAR, minute, n * 10, n, kind=TimerKind.LEASE) for n in range(5)])
    for item in _items(dynamo_client):
        dynamo_client.update_item(
            TableName=TABLE, Key={"pk": item["pk"], "sk": item["sk"]}, UpdateExpression="REMOVE nf"
        )
    assert dynamo.count_timers(Lane.FAR, minute, 0) == 5  # unknown kinds: counted, as before


def test_repeats_and_regroupings_never_duplicate_a_timer(dynamo_client, t0):  # type: ignore[no-untyped-def]
    dynamo, memory = _both(dynamo_client)
    minute = minute_of(t0)
    timers = [_timer(Lane.NEAR, minute, 250 * n, n) for n in range(80)]
    dynamo.put_timers(timers)
    before = len(_items(dynamo_client))
    dynamo.put_timers(timers)  # a poller repeating its release writes the same items
    assert len(_items(dynamo_client)) == before
    # Another poller packs an overlapping set differently (a crash between send and write).
    dynamo.put_timers(timers[::3])
    dynamo.put_timers(timers[5:9])
    memory.put_timers(timers)
    assert dynamo.query_timers(Lane.NEAR, minute, 0) == memory.query_timers(Lane.NEAR, minute, 0)
    lo, hi = to_ms(minute) + 1_000, to_ms(minute) + 7_250
    assert dynamo.query_timers(Lane.NEAR, minute, 0, lo, hi) == memory.query_timers(
        Lane.NEAR, minute, 0, lo, hi
    )


def test_any_due_range_matches_the_reference(dynamo_client, t0):  # type: ignore[no-untyped-def]
    dynamo, memory = _both(dynamo_client)
    rng = random.Random(7)
    minute = minute_of(t0)
    batch: list[Timer] = []
    for n in range(300):
        batch.append(_timer(Lane.NEAR, minute, rng.randrange(0, 60_000), n))
        if rng.random() < 0.1:  # releases of uneven size, some of one timer (written as a row)
            dynamo.put_timers(batch)
            memory.put_timers(batch)
            batch = []
    dynamo.put_timers(batch)
    memory.put_timers(batch)
    base = to_ms(minute)
    bounds = [(None, None), (None, base + 30_000), (base + 59_999, None)]
    for _ in range(25):
        lo = base + rng.randrange(-2_000, 60_000)
        bounds.append((lo, lo + rng.choice([0, 1, 999, 1_000, 1_001, 7_000, 20_000])))
    for lo, hi in bounds:
        expected = memory.query_timers(Lane.NEAR, minute, 0, lo, hi)
        assert dynamo.query_timers(Lane.NEAR, minute, 0, lo, hi) == expected, (lo, hi)


def test_slots_that_are_not_plain_instants_survive_a_pack(dynamo_client, t0):  # type: ignore[no-untyped-def]
    dynamo = DynamoStore(dynamo_client, TABLE)
    minute = minute_of(t0)
    odd = [
        _timer(Lane.FAR, minute, 0, 1, slot="2026-11-30T10:00:00Z~manual-01JDZ"),  # manual trigger
        _timer(Lane.FAR, minute, 0, 2, slot="2026-11-30T09:59:30Z"),  # jitter: due after the slot
        _timer(Lane.FAR, minute, 5, 3, tenant='tenant "with" quotes, commas\tand tabs'),
        _timer(Lane.FAR, minute, 9, 5, owner="ecs-task/abc#1"),
    ]
    dynamo.put_timers(odd)
    assert len(_items(dynamo_client)) == 1
    assert sorted(dynamo.query_timers(Lane.FAR, minute, 0), key=lambda t: t.sk) == sorted(
        odd, key=lambda t: t.sk
    )


def test_near_polls_are_eventually_consistent_and_full_reads_strongly(dynamo_client, t0):  # type: ignore[no-untyped-def]
    seen: list[bool] = []

    class Spy:
        def query(self, **request: Any) -> Any:
            seen.append(request["ConsistentRead"])
            return dynamo_client.query(**request)

    store = DynamoStore(Spy(), TABLE)
    minute = minute_of(t0)
    store.query_timers(Lane.NEAR, minute, 0, to_ms(minute), to_ms(minute) + 1_000)  # a poll
    store.query_timers(Lane.NEAR, minute, 0)  # the final read
    store.query_timers(Lane.FAR, minute, 0, to_ms=to_ms(minute))  # a catch-up drain
    assert seen == [False, True, True]
