"""The store contract where DynamoDB is not a dict: overwrites, stale reads, conflicts, item sizes.

One suite with ``test_store.py`` and ``test_store_calendars.py`` (the ``test_store*`` files): every
operation of the store port runs against the in-memory store and against DynamoDB on moto
(:func:`test_every_store_operation_is_in_the_contract_suite` keeps it so). Here both run with the
simulation of what DynamoDB does and moto does not: the in-memory store with its
:class:`~punctual.store.memory.fidelity.Fidelity`, DynamoDB on moto with
:mod:`local.moto_fidelity` (the same simulation behind moto's API); the answers must agree.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from factories import job
from fidelity_harness import MaxLag
from punctual.models import JobState
from punctual.runtime.clock import ManualClock
from punctual.store.base import (
    ItemTooLargeError,
    JobStore,
    ParentNotFoundError,
    TenantLimitError,
    TransactionConflictError,
    TriggerRateLimitError,
    VersionConflictError,
)
from punctual.store.conflicts import CONFLICT_RETRY
from punctual.store.dynamo.sizes import ITEM_LIMIT_BYTES, JOB_ITEM_LIMIT_BYTES, item_bytes, job_item_sizes
from punctual.store.job_groups import JobGroupRepository
from punctual.store.memory import MemoryStore
from punctual.store.memory.fidelity import OTHER_OPERATIONS, STALE_READS, WRITES, Fidelity
from punctual.timing.timers import Lane, TimerKind, TimerLayout, minute_of, slot_key
from punctual.usecases.calendars import Calendar

TABLE = "punctual-test"  # tests/conftest.py's table
LAYOUT = TimerLayout(shard_count=4, near_shard_count=2, far_threshold_s=180)
T = "default"


@dataclass
class Faithful:
    """A store with DynamoDB's stale reads (one second, read at the top of the range) and
    scripted conflicts, and the clock its versions are stamped with."""

    kind: str
    store: JobStore
    clock: ManualClock
    inject: Callable[[int], None]  # the next n writes (of any operation) meet a conflict

    def later(self, seconds: float) -> None:
        self.clock.advance(seconds)


@pytest.fixture(params=["memory", "dynamo"])
def faithful(request: pytest.FixtureRequest, t0: datetime) -> Iterator[Faithful]:
    clock = ManualClock(t0)

    def seconds() -> float:
        return clock.now().timestamp()

    if request.param == "memory":
        fidelity = Fidelity(stale_read_s=1.0, rng=MaxLag(1), clock=seconds)
        store = MemoryStore(fidelity=fidelity)
        yield Faithful("memory", store, clock, lambda n: fidelity.inject_conflict(times=n))
        return
    from local import moto_fidelity
    from punctual.store.dynamo import DynamoStore
    from punctual.store.dynamo.conflicts import ConflictRetryingClient

    client = request.getfixturevalue("dynamo_client")
    simulated = moto_fidelity.MotoFidelity(stale_read_s=1.0, clock=seconds, rng=MaxLag(1))
    with moto_fidelity.installed(simulated):
        dynamo = DynamoStore(ConflictRetryingClient(client, sleep=lambda _: None), TABLE)  # no real backoff
        yield Faithful("dynamo", dynamo, clock, lambda n: simulated.inject_conflict(times=n))


def _timer(t0: datetime, job_id: str, version: int, seconds: int = 600, lane_now: datetime | None = None):  # type: ignore[no-untyped-def]
    due = t0 + timedelta(seconds=seconds)
    return LAYOUT.make(
        now=lane_now or t0,
        due=due,
        job_id=job_id,
        tenant=T,
        slot=slot_key(due),
        attempt=1,
        kind=TimerKind.FIRE,
        job_version=version,
    )


def _bucket(store: JobStore, timer: Any, from_ms: int | None = None) -> list[Any]:
    return store.query_timers(timer.lane, minute_of(timer.due), timer.shard, from_ms)


# ---------------------------------------------------------------- overwrites


def test_a_timer_put_again_at_a_new_version_replaces_the_row(faithful: Faithful, t0: datetime) -> None:
    store = faithful.store
    store.put_timers([_timer(t0, "a", 1)])
    store.put_timers([_timer(t0, "a", 2)])  # the same key: DynamoDB's put replaces the row
    assert [(t.job_id, t.job_version) for t in _bucket(store, _timer(t0, "a", 1))] == [("a", 2)]


def test_a_timer_put_again_at_an_older_version_leaves_the_newer_one(faithful: Faithful, t0: datetime) -> None:
    store = faithful.store
    original = job("a", now=t0)
    store.create_job(original, None, max_jobs=10)
    store.replace_job(original.model_copy(update={"version": 3}), 1, [_timer(t0, "a", 3)])  # a row
    store.put_timers([_timer(t0, "a", 1)])  # a poller that read the job at version 1, a moment late
    store.put_timers([_timer(t0, "a", 1), _timer(t0, "b", 1)])  # ...and in a pack with another
    found = {t.job_id: t.job_version for t in _bucket(store, _timer(t0, "a", 1))}
    assert found["a"] == 3


def test_a_lone_timer_whose_slot_is_not_an_instant_is_written_and_read(
    faithful: Faithful, t0: datetime
) -> None:
    store = faithful.store
    due = t0 + timedelta(seconds=600)
    step = LAYOUT.make(
        now=t0,
        due=due,
        job_id="a",
        tenant=T,
        slot="45caa1a5e6062bd22268",
        attempt=3,
        kind=TimerKind.BACKFILL,
        job_version=1,
    )
    store.put_timers([step])  # a backfill's step names its backfill, not a slot
    assert _bucket(store, step) == [step]


def test_a_replace_whose_next_slot_is_unchanged_leaves_the_new_version_timer(
    faithful: Faithful, t0: datetime
) -> None:
    store = faithful.store
    original = job("a", now=t0)
    store.create_job(original, _timer(t0, "a", 1), max_jobs=10)
    store.replace_job(original.model_copy(update={"version": 2}), 1, [_timer(t0, "a", 2)])
    assert [t.job_version for t in _bucket(store, _timer(t0, "a", 1))] == [2]


# ---------------------------------------------------------------- stale reads


def test_eventually_consistent_job_reads_are_behind_and_strong_ones_are_not(
    faithful: Faithful, t0: datetime
) -> None:
    store = faithful.store
    created = job("a", now=t0)
    store.create_job(created, None, max_jobs=10)
    faithful.later(0.5)
    # A read that may be behind does not see a job created half a second ago; a strong one does
    assert store.get_job(T, "a", consistent=False) is None
    assert store.batch_get_jobs([(T, "a")], consistent=False) == {}
    assert store.get_job(T, "a") == created
    assert store.batch_get_jobs([(T, "a")]) == {(T, "a"): created}
    faithful.later(1.0)
    store.replace_job(created.model_copy(update={"version": 2, "state": JobState.PAUSED}), 1)
    faithful.later(0.5)
    # A replace half a second ago: the old version, then the new one once a second has passed
    behind = store.get_job(T, "a", consistent=False)
    assert behind is not None and behind.version == 1
    faithful.later(0.6)
    caught_up = store.get_job(T, "a", consistent=False)
    assert caught_up is not None and caught_up.version == 2
    store.delete_job(T, "a")
    faithful.later(0.5)
    # A job deleted half a second ago is still there for a read that is behind
    assert set(store.batch_get_jobs([(T, "a")], consistent=False)) == {(T, "a")}
    assert store.get_job(T, "a") is None


def test_eventually_consistent_calendar_reads_are_behind(faithful: Faithful, t0: datetime) -> None:
    store = faithful.store
    calendar = Calendar(
        tenant=T, name="holidays", timezone="UTC", dates=["2026-12-25"], created_at=t0, updated_at=t0
    )
    store.put_calendar(calendar, None)
    faithful.later(0.5)
    assert store.get_calendar(T, "holidays", consistent=False) is None
    assert store.batch_get_calendars([(T, "holidays")]) == {}  # eventually consistent by default
    assert store.batch_get_calendars([(T, "holidays")], consistent=True) == {(T, "holidays"): calendar}
    assert store.get_calendar(T, "holidays") == calendar


def test_a_near_lane_poll_may_miss_a_timer_written_a_moment_ago(faithful: Faithful, t0: datetime) -> None:
    store = faithful.store
    timer = _timer(t0, "a", 1, seconds=30)
    assert timer.lane is Lane.NEAR
    store.put_timers([timer])
    faithful.later(0.5)
    # A ranged read (the near lane's poll) is eventually consistent; a whole-bucket read is not
    assert _bucket(store, timer, from_ms=timer.due_ms - 5_000) == []
    assert _bucket(store, timer) == [timer]
    faithful.later(0.6)
    assert _bucket(store, timer, from_ms=timer.due_ms - 5_000) == [timer]


# ---------------------------------------------------------------- conflicts


def _jobs(store: JobStore) -> list[tuple[str, int]]:
    return [(j.id, j.version) for j in store.list_jobs(T, 100).items]


_CONTENDED: dict[str, Callable[[JobStore, datetime], None]] = {
    "create_job": lambda store, t0: store.create_job(job("b", now=t0), _timer(t0, "b", 1), max_jobs=10),
    "replace_job": lambda store, t0: store.replace_job(job("a", now=t0).model_copy(update={"version": 2}), 1),
    "delete_job": lambda store, t0: store.delete_job(T, "a", expected_version=1),
    "add_skipped": lambda store, t0: store.add_skipped(T, "a", 3),
    "set_dependents": lambda store, t0: store.set_dependents(T, "child", ["a"], present=True),
    "create_job_group": lambda store, t0: _grouped(store).create_job_group(
        [(job("b", now=t0), _timer(t0, "b", 1))], max_jobs=10
    ),
}


def _grouped(store: JobStore) -> JobGroupRepository:
    assert isinstance(store, JobGroupRepository)
    return store


@pytest.mark.parametrize("operation", sorted(_CONTENDED))
def test_a_write_that_meets_a_conflict_is_retried_and_done_once(
    faithful: Faithful, t0: datetime, operation: str
) -> None:
    store = faithful.store
    store.create_job(job("a", now=t0), None, max_jobs=10)
    faithful.inject(CONFLICT_RETRY.attempts - 1)  # every try but the last meets a conflict
    _CONTENDED[operation](store, t0)
    after = {
        "create_job": [("a", 1), ("b", 1)],
        "replace_job": [("a", 2)],
        "delete_job": [],
        "add_skipped": [("a", 1)],
        "set_dependents": [("a", 1)],
        "create_job_group": [("a", 1), ("b", 1)],
    }[operation]
    assert _jobs(store) == after
    if operation == "add_skipped":
        found = store.get_job(T, "a")
        assert found is not None and found.skipped_slots == 3  # counted once
    if operation == "set_dependents":
        found = store.get_job(T, "a")
        assert found is not None and found.dependents == 1 and store.list_dependents(T, "a") == ["child"]


@pytest.mark.parametrize("operation", sorted(_CONTENDED))
def test_a_conflict_that_outlives_the_retries_writes_nothing(
    faithful: Faithful, t0: datetime, operation: str
) -> None:
    store = faithful.store
    store.create_job(job("a", now=t0), None, max_jobs=10)
    before = store.get_job(T, "a")
    faithful.inject(CONFLICT_RETRY.attempts)
    with pytest.raises(TransactionConflictError):
        _CONTENDED[operation](store, t0)
    assert _jobs(store) == [("a", 1)] and store.get_job(T, "a") == before
    assert store.list_dependents(T, "a") == []
    assert store.tenant_trigger_rate(T) == job("a", now=t0).trigger_rate


def test_a_failed_condition_is_not_retried_as_a_conflict(faithful: Faithful, t0: datetime) -> None:
    store = faithful.store
    store.create_job(job("a", now=t0), None, max_jobs=10)
    with pytest.raises(VersionConflictError):
        store.replace_job(job("a", now=t0).model_copy(update={"version": 3}), 2)


def test_a_delete_conditions_on_the_dependents_count_it_was_given(faithful: Faithful, t0: datetime) -> None:
    store = faithful.store
    store.create_job(job("p", now=t0), None, max_jobs=10)
    store.create_job(job("c", "after(p)", now=t0), None, max_jobs=10, parents=["p"])
    # A count other than the stored one (a child linked since the caller read it) fails the
    # delete at the same version; the stored count deletes it
    for stale in (0, 2):
        with pytest.raises(VersionConflictError) as failed:
            store.delete_job(T, "p", 1, expected_dependents=stale)
        assert failed.value.current_version == 1
    assert store.get_job(T, "p") is not None
    store.delete_job(T, "c", 1, parents=["p"])
    store.delete_job(T, "p", 1, expected_dependents=0)  # its count back at 0 (stored, not absent)
    assert store.get_job(T, "p") is None


def test_a_job_and_its_links_are_written_together(faithful: Faithful, t0: datetime) -> None:
    store = faithful.store
    for parent in ("p1", "p2", "p3"):
        store.create_job(job(parent, now=t0), None, max_jobs=10)
    # A link already there (an older writer's) is kept and counted once; a parent gone (deleted
    # since the write read it) fails the write: nothing is stored
    store.set_dependents(T, "child", ["p1"], present=True)
    with pytest.raises(ParentNotFoundError):
        store.create_job(
            job("child", "after(p1, p2, gone)", now=t0), None, max_jobs=10, parents=["p1", "p2", "gone"]
        )
    assert store.get_job(T, "child") is None and store.list_dependents(T, "p2") == []
    store.create_job(job("child", "after(p1, p2)", now=t0), None, max_jobs=10, parents=["p1", "p2"])
    assert [store.list_dependents(T, p) for p in ("p1", "p2", "gone")] == [["child"], ["child"], []]
    counts = {p: store.get_job(T, p).dependents for p in ("p1", "p2", "p3")}  # type: ignore[union-attr]
    assert counts == {"p1": 1, "p2": 1, "p3": 0}
    # A replace moves them in the same transaction
    moved = job("child", "after(p2, p3)", now=t0).model_copy(update={"version": 2})
    store.replace_job(moved, 1, parents_added=["p2", "p3"], parents_removed=["p1"])
    counts = {p: store.get_job(T, p).dependents for p in ("p1", "p2", "p3")}  # type: ignore[union-attr]
    assert counts == {"p1": 0, "p2": 1, "p3": 1}
    assert [store.list_dependents(T, p) for p in ("p1", "p2", "p3")] == [[], ["child"], ["child"]]
    # And a delete removes them with the job
    store.delete_job(T, "child", 2, parents=["p2", "p3"])
    assert [store.get_job(T, p).dependents for p in ("p2", "p3")] == [0, 0]  # type: ignore[union-attr]
    assert [store.list_dependents(T, p) for p in ("p2", "p3")] == [[], []]


# ---------------------------------------------------------------- item sizes


def _big(t0: datetime, header_chars: int, headers: int = 30, job_id: str = "big") -> Any:
    target = {
        "type": "http",
        "url": "https://example.com/hook",
        "headers": {f"x-h{i}": "é" * header_chars for i in range(headers)},
    }
    return job(job_id, now=t0, target=target)


def test_a_job_over_dynamodbs_item_limit_in_bytes_is_refused_by_both_stores(
    faithful: Faithful, t0: datetime
) -> None:
    store = faithful.store
    # 30 header values of 8,192 "é": inside every character limit, 491,520 bytes of UTF-8
    too_big = _big(t0, 8192)
    with pytest.raises(ItemTooLargeError) as refused:
        store.create_job(too_big, None, max_jobs=10)
    assert refused.value.field == "target.headers" and refused.value.size > JOB_ITEM_LIMIT_BYTES
    assert store.get_job(T, "big") is None and store.list_jobs(T, 10).items == []
    # One just under the limit is stored, and read back whole
    fits = _big(t0, 6600)
    assert max(job_item_sizes(fits).values()) <= JOB_ITEM_LIMIT_BYTES
    store.create_job(fits, None, max_jobs=10)
    assert store.get_job(T, "big") == fits
    with pytest.raises(ItemTooLargeError):
        store.replace_job(_big(t0, 8192).model_copy(update={"version": 2}), 1)


def test_sizes_count_as_dynamodb_counts(dynamo_client: Any, t0: datetime) -> None:
    """The size model against moto's own count of the stored item (moto counts a number by its
    characters, DynamoDB by its digits: the two differ by a few bytes on a job item)."""
    from moto.backends import get_backend

    from punctual.store.dynamo import DynamoStore
    from punctual.store.dynamo.schema import job_attributes, job_key

    store = DynamoStore(dynamo_client, TABLE)
    big = _big(t0, 5000, headers=20)
    store.create_job(big, None, max_jobs=10)
    key = job_key(T, "big")
    stored = get_backend("dynamodb")["123456789012"]["us-east-1"].get_item(TABLE, key)
    ours = item_bytes({**key, **job_attributes(big)})
    assert abs(stored.size() - ours) <= 20, (stored.size(), ours)
    assert ours > 20 * 5000 * 2  # UTF-8: two bytes per "é"
    # name + value: "é" is 2 bytes; 123.4500 has 5 significant digits: 3 bytes + 1; a boolean 1
    assert item_bytes({"s": {"S": "é"}, "n": {"N": "123.4500"}, "b": {"BOOL": True}}) == (1 + 2) + (1 + 4) + (
        1 + 1
    )
    assert ITEM_LIMIT_BYTES == 409_600


# ---------------------------------------------------------------- the rest of the port


def test_turns_are_taken_waited_for_and_passed(faithful: Faithful, t0: datetime) -> None:
    store = faithful.store
    first = store.take_turn(T, "a", "s1", t0)
    assert first.holder == "s1" and first.since == t0
    store.wait_for_turn(T, "a", "s2")
    store.wait_for_turn(T, "a", "s2")  # idempotent
    assert store.take_turn(T, "a", "s2", t0).holder == "s1"  # not free: s2 keeps waiting
    assert store.pass_turn(T, "a", "s1", t0 + timedelta(seconds=1)) == "s2"
    assert store.pass_turn(T, "a", "s1", t0) is None  # no longer the holder
    assert store.pass_turn(T, "a", "s2", t0) is None  # nobody waits: the turn is free
    assert store.take_turn(T, "a", "s3", t0).holder == "s3"
    turn = store.get_turn(T, "a")
    assert turn is not None and turn.holder == "s3"
    assert store.get_turn(T, "nobody") is None


def test_a_tenants_burst_quotas(faithful: Faithful) -> None:
    store = faithful.store
    assert store.get_peaks(T) == (None, 0)
    assert store.put_peaks(T, '{"p": 1}', 0) and not store.put_peaks(T, '{"p": 2}', 0)
    assert store.get_peaks(T) == ('{"p": 1}', 1)
    assert store.join_backfills(T, "a/1", 2) and store.join_backfills(T, "a/2", 2)
    assert not store.join_backfills(T, "a/3", 2) and store.join_backfills(T, "a/1", 2)  # a repeat
    store.leave_backfills(T, "a/1")
    store.leave_backfills(T, "a/1")  # idempotent
    assert store.running_backfills(T) == ["a/2"]
    assert store.take_backfill_slots(T, "w1", 7, 10, 2_000_000_000) == 7
    assert store.take_backfill_slots(T, "w1", 7, 10, 2_000_000_000) == 3
    assert store.take_backfill_slots(T, "w2", 1, 10, 2_000_000_000) == 1


def test_the_minute_load_ledger_and_the_tenant_data_keys(faithful: Faithful, t0: datetime) -> None:
    from punctual.store.keyring import TenantKeyRecord
    from punctual.store.loads import MinuteLoad

    store = faithful.store
    minute = minute_of(t0 + timedelta(minutes=3))
    store.add_minute_loads({minute: MinuteLoad(5, 2)}, shard=1)
    store.add_minute_loads({minute: MinuteLoad(3, 0)}, shard=2)
    store.add_minute_loads({minute: MinuteLoad(-1, -1)}, shard=1)  # taken back
    faithful.later(1.1)  # an eventually consistent read: a moment on, it has every write
    assert store.get_minute_load(minute) == MinuteLoad(7, 1)
    assert store.get_tenant_key(T, 1) is None
    first = TenantKeyRecord(T, 1, b"wrapped-1", t0)
    assert store.put_tenant_key(first) == first
    assert store.put_tenant_key(TenantKeyRecord(T, 1, b"wrapped-2", t0)) == first  # first writer wins
    assert store.get_tenant_key(T, 1) == first


def test_the_audit_scan_may_be_behind_a_moment_then_lists_every_job(t0: datetime) -> None:
    # Given the in-memory store with DynamoDB's stale reads (the audit index is eventually consistent)
    clock = ManualClock(t0)
    fidelity = Fidelity(stale_read_s=1.0, rng=MaxLag(1), clock=lambda: clock.now().timestamp())
    store = MemoryStore(fidelity=fidelity)
    for n in range(6):
        store.create_job(job(f"j{n}", now=t0), None, max_jobs=10)

    def listed() -> set[str]:
        pages = [store.audit_page(segment, 2, 100) for segment in range(2)]
        return {item.id for page in pages for item in page.items}

    # When it is scanned at once, a job written a moment ago may be missing (read at the lag's top)
    assert listed() == set()
    # Then a second on, every job is in some segment's page, once
    clock.advance(1.1)
    assert listed() == {f"j{n}" for n in range(6)}


def test_counters_of_a_tenant(faithful: Faithful, t0: datetime) -> None:
    store = faithful.store
    store.create_job(job("a", now=t0, trigger_rate=60), None, max_jobs=10)
    assert store.tenant_trigger_rate(T) == 60
    assert [store.count_request(T, "w1", 2, 0) for _ in range(3)] == [True, True, False]
    assert store.count_request(T, "w2", 2, 0) is True
    timers = [_timer(t0, f"j{i}", 1) for i in range(6)]
    store.put_timers(timers)
    minute = minute_of(timers[0].due)
    assert sum(store.count_timers(Lane.FAR, minute, shard) for shard in range(LAYOUT.shard_count)) == 6


def test_a_job_group_is_written_whole_or_not_at_all(faithful: Faithful, t0: datetime) -> None:
    """Issue 32: new jobs a group a transaction, the tenant's counter updated once for all."""
    store = _grouped(faithful.store)
    faithful.store.create_job(job("a", now=t0, trigger_rate=60), None, max_jobs=10)
    group = [(job(n, now=t0, trigger_rate=60), _timer(t0, n, 1)) for n in ("b", "c", "d")]
    # A job of the group that exists already: named, and nothing of the group is written
    assert store.create_job_group([*group, (job("a", now=t0), None)], max_jobs=10) == ("a",)
    assert _jobs(faithful.store) == [("a", 1)] and faithful.store.tenant_trigger_rate(T) == 60
    # A group that would take the tenant past its quota: refused whole
    with pytest.raises(TenantLimitError):
        store.create_job_group(group, max_jobs=3)
    with pytest.raises(TriggerRateLimitError):
        store.create_job_group(group, max_jobs=10, max_trigger_rate=200)
    assert _jobs(faithful.store) == [("a", 1)] and faithful.store.tenant_trigger_rate(T) == 60
    # Within it: every job with its first timer, counted once each
    assert store.create_job_group(group, max_jobs=4, max_trigger_rate=240) == ()
    assert _jobs(faithful.store) == [(n, 1) for n in "abcd"] and faithful.store.tenant_trigger_rate(T) == 240
    assert all(_bucket(faithful.store, timer) for _, timer in group)
    with pytest.raises(TenantLimitError):  # the count is 4: the quota holds for the next create
        faithful.store.create_job(job("e", now=t0), None, max_jobs=4)
    # More than a transaction's 100 items: refused by both, nothing written
    many = [(job(f"m{n}", now=t0), _timer(t0, f"m{n}", 1)) for n in range(34)]
    with pytest.raises(ValueError, match="100"):
        store.create_job_group(many, max_jobs=100)
    assert len(_jobs(faithful.store)) == 4


def test_a_job_group_at_a_full_quota_names_its_job_that_exists(faithful: Faithful, t0: datetime) -> None:
    # The counter's condition and a job's fail together (a repeated batch at the quota): the job
    # is named (answered exists), then the rest alone meets the quota, nothing written
    store = _grouped(faithful.store)
    for held in ("a", "x", "y"):
        faithful.store.create_job(job(held, now=t0), None, max_jobs=3)
    assert store.create_job_group([(job("b", now=t0), None), (job("a", now=t0), None)], max_jobs=3) == ("a",)
    with pytest.raises(TenantLimitError):
        store.create_job_group([(job("b", now=t0), None)], max_jobs=3)
    assert _jobs(faithful.store) == [("a", 1), ("x", 1), ("y", 1)]


def test_every_store_operation_is_in_the_contract_suite() -> None:
    operations = {n for n, v in inspect.getmembers(JobStore) if getattr(v, "__isabstractmethod__", False)}
    # (and the ports a store may have beside it, which their callers check for)
    operations |= {
        n for n, v in inspect.getmembers(JobGroupRepository) if getattr(v, "__isabstractmethod__", False)
    }
    # ... and the simulation knows what each one is in DynamoDB (a transaction, a plain write, a
    # read that may be behind, or an item no transaction writes)
    assert operations == set(WRITES) | set(STALE_READS) | OTHER_OPERATIONS
    suite = "".join(path.read_text() for path in sorted(Path(__file__).parent.glob("test_store*.py")))
    called = set(re.findall(r"store\.(\w+)\(", suite))
    assert operations <= called, sorted(operations - called)
