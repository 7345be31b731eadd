"""The JobStore contract, run against the in-memory store and DynamoDB (moto)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from factories import job
from punctual.models import Execution, ExecutionStatus, JobState
from punctual.store.base import (
    ExecutionConflictError,
    Expect,
    GraphChangedError,
    GraphRead,
    JobExistsError,
    TenantLimitError,
    VersionConflictError,
)
from punctual.store.listing import LIST_SCAN_BUDGET
from punctual.timing.timers import Lane, TimerKind, TimerLayout, slot_key

LAYOUT = TimerLayout(shard_count=4, near_shard_count=2, far_threshold_s=180)


def _timer(t0: datetime, job_id: str = "job-1", seconds: int = 600, attempt: int = 1):  # type: ignore[no-untyped-def]
    due = t0 + timedelta(seconds=seconds)
    return LAYOUT.make(
        now=t0,
        due=due,
        job_id=job_id,
        tenant="default",
        slot=slot_key(due),
        attempt=attempt,
        kind=TimerKind.FIRE,
        job_version=1,
    )


def test_create_get_and_duplicate(store, t0):  # type: ignore[no-untyped-def]
    created = job("a", now=t0)
    store.create_job(created, _timer(t0, "a"), max_jobs=10)
    assert store.get_job("default", "a") == created
    assert store.get_job("other", "a") is None  # tenants never see each other's jobs
    with pytest.raises(JobExistsError):
        store.create_job(created, None, max_jobs=10)


def test_tenant_limit(store, t0):  # type: ignore[no-untyped-def]
    store.create_job(job("a", now=t0), None, max_jobs=2)
    store.create_job(job("b", now=t0), None, max_jobs=2)
    with pytest.raises(TenantLimitError):
        store.create_job(job("c", now=t0), None, max_jobs=2)
    store.create_job(job("c", now=t0, tenant="t2"), None, max_jobs=2)  # another tenant's count
    store.delete_job("default", "a")
    store.create_job(job("c", now=t0), None, max_jobs=2)  # deleting frees a place


def test_replace_is_version_checked(store, t0):  # type: ignore[no-untyped-def]
    original = job("a", now=t0)
    store.create_job(original, None, max_jobs=10)
    paused = original.model_copy(update={"state": JobState.PAUSED, "version": 2})
    store.replace_job(paused, expected_version=1)
    with pytest.raises(VersionConflictError) as lost:
        store.replace_job(original.model_copy(update={"version": 2}), expected_version=1)
    assert lost.value.current_version == 2
    stored = store.get_job("default", "a")
    assert stored.state is JobState.PAUSED and stored.version == 2
    with pytest.raises(VersionConflictError):
        store.replace_job(job("missing", now=t0), expected_version=1)


def test_delete_with_version(store, t0):  # type: ignore[no-untyped-def]
    store.create_job(job("a", now=t0), None, max_jobs=10)
    with pytest.raises(VersionConflictError):
        store.delete_job("default", "a", expected_version=5)
    store.delete_job("default", "a", expected_version=1)
    assert store.get_job("default", "a") is None
    with pytest.raises(VersionConflictError):
        store.delete_job("default", "a")


def test_list_pages_filters_and_tenants(store, t0):  # type: ignore[no-untyped-def]
    for i in range(7):
        tags = {"team": "a" if i % 2 else "b"}
        store.create_job(job(f"j{i}", now=t0, tags=tags), None, max_jobs=100)
    store.create_job(job("x", now=t0, tenant="other"), None, max_jobs=100)
    seen, cursor = [], None
    while True:
        page = store.list_jobs("default", limit=3, cursor=cursor)
        seen += [j.id for j in page.items]
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == [f"j{i}" for i in range(7)]
    tagged = store.list_jobs("default", limit=10, tag="team=a")
    assert [j.id for j in tagged.items] == ["j1", "j3", "j5"]
    assert [j.id for j in store.list_jobs("default", limit=10, tag="team").items] == seen
    assert store.list_jobs("default", limit=10, tag="nope").items == []
    store.replace_job(
        store.get_job("default", "j2").model_copy(update={"state": JobState.PAUSED, "version": 2}), 1
    )
    assert [j.id for j in store.list_jobs("default", 10, state=JobState.PAUSED).items] == ["j2"]


def test_a_filtered_listing_examines_a_bounded_number_of_jobs_a_page(store, t0, monkeypatch):  # type: ignore[no-untyped-def]
    """A filter few jobs match answers short pages and a cursor that goes on: never a read of the
    tenant's every job in one request (QA: 20,000 jobs, 200 queries and 51 s for one empty page)."""
    import punctual.store.dynamo.jobs as dynamo_jobs
    import punctual.store.memory.jobs as memory_jobs

    for module in (dynamo_jobs, memory_jobs):
        monkeypatch.setattr(module, "LIST_SCAN_BUDGET", 4)
    for i in range(11):
        store.create_job(
            job(f"j{i:02d}", now=t0, tags={"team": "a" if i in (1, 9) else "b"}), None, max_jobs=100
        )
    pages, cursor = [], None
    while True:
        page = store.list_jobs("default", limit=10, cursor=cursor, tag="team=a")
        pages.append([j.id for j in page.items])
        cursor = page.cursor
        if cursor is None:
            break
    assert pages == [["j01"], [], ["j09"]]  # four jobs examined a page, the last page three
    assert [j.id for j in store.list_jobs("default", limit=2).items] == [
        "j00",
        "j01",
    ]  # unfiltered: as before


def test_a_job_created_at_a_deleted_jobs_id_starts_past_its_last_version(store, t0):  # type: ignore[no-untyped-def]
    assert store.first_version("default", "j") == 1
    store.create_job(job("j", now=t0), None, max_jobs=10)
    store.replace_job(store.get_job("default", "j").model_copy(update={"version": 2}), 1)
    store.delete_job("default", "j", 2, tombstone_until=int(t0.timestamp()) + 86_400)
    assert store.first_version("default", "j") == 3
    assert store.first_version("other", "j") == 1  # per tenant


def test_batch_get_jobs(store, t0):  # type: ignore[no-untyped-def]
    for i in range(130):  # more than one BatchGetItem call
        store.create_job(job(f"j{i:03d}", now=t0), None, max_jobs=1000)
    keys = [("default", f"j{i:03d}") for i in range(130)] + [("default", "missing")]
    found = store.batch_get_jobs(keys)
    assert len(found) == 130 and ("default", "missing") not in found


def test_timers_are_immutable_and_queried_in_due_order(store, t0):  # type: ignore[no-untyped-def]
    timers = [_timer(t0, f"j{i}", seconds=600 + (i * 7) % 50) for i in range(20)]
    store.put_timers(timers)
    store.put_timers(timers[:5])  # a repeat writes nothing new
    minute = timers[0].due.replace(second=0, microsecond=0)
    found = []
    for shard in range(LAYOUT.shard_count):
        found += store.query_timers(Lane.FAR, minute, shard)
    assert sorted(t.identity for t in found) == sorted(t.identity for t in timers)
    for shard in range(LAYOUT.shard_count):
        dues = [t.due_ms for t in store.query_timers(Lane.FAR, minute, shard)]
        assert dues == sorted(dues)
    one = timers[0]
    ranged = store.query_timers(Lane.FAR, minute, one.shard, one.due_ms, one.due_ms)
    assert one in ranged and all(t.due_ms == one.due_ms for t in ranged)


def test_watermarks_only_move_forward(store, t0):  # type: ignore[no-untyped-def]
    assert store.get_watermarks(Lane.FAR, [0, 1, 70]) == {}
    store.advance_watermarks(Lane.FAR, [0, 1, 70], t0)
    store.advance_watermarks(Lane.FAR, [1], t0 + timedelta(minutes=2))
    store.advance_watermarks(Lane.FAR, [0, 1], t0 - timedelta(minutes=5))  # never backward
    marks = store.get_watermarks(Lane.FAR, [0, 1, 70, 3])
    assert marks == {0: t0, 1: t0 + timedelta(minutes=2), 70: t0}
    assert store.get_watermarks(Lane.NEAR, [0]) == {}


def _execution(t0: datetime, slot_offset: int = 0, **kw):  # type: ignore[no-untyped-def]
    at = t0 + timedelta(minutes=slot_offset)
    data = {
        "job_id": "a",
        "slot": slot_key(at),
        "scheduled_at": at,
        "status": ExecutionStatus.RUNNING,
        "owner": "w1",
        "attempt": 1,
    }
    data.update(kw)
    return Execution(**data)


def test_execution_conditional_writes(store, t0):  # type: ignore[no-untyped-def]
    first = _execution(t0)
    store.save_execution(first, None, ttl_epoch_s=1)
    # The same write again (its answer lost, the SDK sent it again) finds itself: no conflict
    store.save_execution(first, None, ttl_epoch_s=1)
    with pytest.raises(ExecutionConflictError) as dup:  # another owner's start of the slot
        store.save_execution(first.model_copy(update={"owner": "w2"}), None, ttl_epoch_s=1)
    assert dup.value.current == first
    done = first.model_copy(update={"status": ExecutionStatus.SUCCEEDED})
    with pytest.raises(ExecutionConflictError):  # fenced: another owner
        store.save_execution(done, Expect(frozenset({ExecutionStatus.RUNNING}), 1, owner="w2"), 1)
    with pytest.raises(ExecutionConflictError):  # wrong attempt
        store.save_execution(done, Expect(frozenset({ExecutionStatus.RUNNING}), 2, owner="w1"), 1)
    store.save_execution(done, Expect(frozenset({ExecutionStatus.RUNNING}), 1, owner="w1"), 1)
    assert store.get_execution("default", "a", first.slot).status is ExecutionStatus.SUCCEEDED
    # Already finished: the same end again is that write; another end is refused
    store.save_execution(done, Expect(frozenset({ExecutionStatus.RUNNING}), 1, owner="w1"), 1)
    failed = first.model_copy(update={"status": ExecutionStatus.FAILED})
    with pytest.raises(ExecutionConflictError):
        store.save_execution(failed, Expect(frozenset({ExecutionStatus.RUNNING}), 1, owner="w1"), 1)


def test_history_newest_first_paged_and_filtered(store, t0):  # type: ignore[no-untyped-def]
    for i in range(5):
        status = ExecutionStatus.FAILED if i % 2 else ExecutionStatus.SUCCEEDED
        store.save_execution(_execution(t0, i, status=status), None, ttl_epoch_s=1)
    store.save_execution(_execution(t0, 0, job_id="b"), None, ttl_epoch_s=1)
    page1 = store.list_executions("default", "a", limit=2)
    page2 = store.list_executions("default", "a", limit=2, cursor=page1.cursor)
    page3 = store.list_executions("default", "a", limit=2, cursor=page2.cursor)
    slots = [e.slot for e in page1.items + page2.items + page3.items]
    assert slots == [slot_key(t0 + timedelta(minutes=i)) for i in (4, 3, 2, 1, 0)]
    failed = store.list_executions("default", "a", limit=10, status=ExecutionStatus.FAILED)
    assert [e.slot for e in failed.items] == [slot_key(t0 + timedelta(minutes=i)) for i in (3, 1)]
    keys = [("default", "a", slot_key(t0)), ("default", "b", slot_key(t0)), ("default", "a", "nope")]
    assert len(store.batch_get_executions(keys)) == 2


def test_a_record_whose_ttl_passed_is_not_read_at_a_live_instant(store, t0):  # type: ignore[no-untyped-def]
    """QA22: DynamoDB deletes an item whose TTL passed lazily (up to ~48 h later), and reads return
    it until then: the API listed history and alerts past their expiry ("readable until it
    expires"). Read at ``live_at``, an item expired by then is gone; the engine's reads still see it."""
    now = int(t0.timestamp())
    for i in range(4):  # the two oldest expired a second ago, the others expire now or later
        store.save_execution(_execution(t0, i), None, ttl_epoch_s=now - 1 if i < 2 else now + i - 2)
    page = store.list_executions("default", "a", limit=2, live_at=now)
    assert [e.slot for e in page.items] == [slot_key(t0 + timedelta(minutes=i)) for i in (3, 2)]
    rest = store.list_executions("default", "a", limit=2, cursor=page.cursor, live_at=now)
    assert rest.items == [] and rest.cursor is None
    assert store.get_execution("default", "a", slot_key(t0), live_at=now) is None
    assert store.get_execution("default", "a", slot_key(t0 + timedelta(minutes=2)), live_at=now) is not None
    assert store.get_execution("default", "a", slot_key(t0)) is not None  # no instant: as stored
    assert len(store.list_executions("default", "a", limit=10).items) == 4
    assert store.create_alert(_alert(t0, "2026-11-30T10:00:00Z"), now - 1)
    assert store.create_alert(_alert(t0, "2026-11-30T09:00:00Z"), now + 60)
    assert store.create_alert(_alert(t0, "2026-11-30T08:00:00Z"), now - 5)
    listed = store.list_alerts("default", "job-1", 1, live_at=now)
    assert [a.key_slot for a in listed] == ["2026-11-30T09:00:00Z"]
    assert len(store.list_alerts("default", "job-1", 10)) == 3


@pytest.mark.slow
def test_a_rare_status_is_paged_through_a_long_history(store, t0, monkeypatch):  # type: ignore[no-untyped-def]
    """QA22: a status filter read the whole history in one request (DynamoDB reads the records it
    filters out): a FAILED slot under a month of a frequent job's successes, hundreds of thousands
    of records, timed the request out. A page reads at most LIST_SCAN_BUDGET records, and its
    cursor goes on from the last one read; following it finds every match once."""
    store.save_execution(_execution(t0, 0, status=ExecutionStatus.FAILED), None, ttl_epoch_s=1)
    for i in range(1, LIST_SCAN_BUDGET + 51):
        store.save_execution(_execution(t0, i, status=ExecutionStatus.SUCCEEDED), None, ttl_epoch_s=1)
    pages, cursor = [], None
    while True:
        page = store.list_executions("default", "a", 10, cursor, ExecutionStatus.FAILED)
        pages.append([e.slot for e in page.items])
        if page.cursor is None:
            break
        cursor = page.cursor
    assert pages[0] == [] and [slot for page in pages for slot in page] == [slot_key(t0)]
    # Without a filter a page is as long as asked (the chaos judge reads a whole history at once),
    # also where DynamoDB ends a query's reply at 1 MB (moto does not: a reply of 500 stands for it).
    if hasattr(store, "client"):
        query = store.client.query
        monkeypatch.setattr(store.client, "query", lambda **request: query(**{**request, "Limit": 500}))
    assert len(store.list_executions("default", "a", LIST_SCAN_BUDGET + 100).items) == LIST_SCAN_BUDGET + 51


def test_dependencies(store, t0):  # type: ignore[no-untyped-def]
    for parent in ("p1", "p2"):
        store.create_job(job(parent, now=t0), None, max_jobs=10)
    store.set_dependents("default", "child", ["p1", "p2"], present=True)
    store.set_dependents("default", "child", ["p1"], present=True)  # a repeat counts once
    assert store.list_dependents("default", "p1") == ["child"]
    assert store.get_job("default", "p1").dependents == 1
    # the count is the store's: a replace by a writer that does not know it keeps it
    store.replace_job(job("p1", now=t0).model_copy(update={"version": 2}), expected_version=1)
    assert store.get_job("default", "p1").dependents == 1
    assert store.record_parent_success("default", "child", "s1", "p1", 1) == {"p1"}
    assert store.record_parent_success("default", "child", "s1", "p1", 1) == {"p1"}
    assert store.record_parent_success("default", "child", "s1", "p2", 1) == {"p1", "p2"}
    assert store.claim_child_dispatch("default", "child", "s1") is True
    assert store.claim_child_dispatch("default", "child", "s1") is False
    store.set_dependents("default", "child", ["p1"], present=False)
    store.set_dependents("default", "child", ["p1"], present=False)
    assert store.list_dependents("default", "p1") == []
    assert store.get_job("default", "p1").dependents == 0
    assert store.batch_get_jobs([("default", "p2")], consistent=False)[("default", "p2")].dependents == 1
    assert store.list_dependents("default", "p2") == ["child"]


def test_a_job_gains_a_parent_only_on_the_dependency_graph_it_read(store, t0):  # type: ignore[no-untyped-def]
    for job_id in ("a", "b", "c"):
        store.create_job(job(job_id, now=t0), None, max_jobs=10)
    assert store.dependency_graph("default") == 0
    a, c = (job(j, now=t0).model_copy(update={"version": 2}) for j in ("a", "c"))
    store.replace_job(a, 1, parents_added=("b",), graph=GraphRead(0, {"b": 1}))
    assert store.dependency_graph("default") == 1
    # A write that read the graph before that one is refused, and changes nothing
    with pytest.raises(GraphChangedError):
        store.replace_job(c, 1, parents_added=("b",), graph=GraphRead(0, {"b": 1}))
    assert store.get_job("default", "c").version == 1
    assert store.list_dependents("default", "b") == ["a"] and store.get_job("default", "b").dependents == 1
    # ... and so is one whose new parent is not at the version its check read (created again)
    with pytest.raises(GraphChangedError):
        store.replace_job(c, 1, parents_added=("b",), graph=GraphRead(1, {"b": 7}))
    assert store.get_job("default", "c").version == 1 and store.dependency_graph("default") == 1
    store.replace_job(c, 1, parents_added=("b",), graph=GraphRead(1, {"b": 1}))
    assert store.dependency_graph("default") == 2 and store.list_dependents("default", "b") == ["a", "c"]
    # A write without a graph (no new parent) leaves it, and each tenant's is its own
    store.replace_job(a.model_copy(update={"version": 3}), 2)
    assert store.dependency_graph("default") == 2 and store.dependency_graph("other") == 0


def test_skipped_counter(store, t0):  # type: ignore[no-untyped-def]
    store.create_job(job("a", now=t0), None, max_jobs=10)
    store.add_skipped("default", "a", 3)
    store.add_skipped("default", "a", 2)
    store.add_skipped("default", "missing", 2)  # no error, no item created
    assert store.get_job("default", "a").skipped_slots == 5
    assert store.get_job("default", "missing") is None


def test_progress_marks_only_move_forward_and_cover_their_group(store, t0):  # type: ignore[no-untyped-def]
    from punctual.store.base import progress_of

    # Given marks of one minute under two groupings (a re-planned minute)
    store.put_progress(t0, 0, 2, 5_000)
    store.put_progress(t0, 0, 2, 3_000)  # behind: ignored
    store.put_progress(t0, 1, 2, 7_000)
    store.put_progress(t0, 0, 1, 4_000)
    store.put_progress(t0 + timedelta(minutes=1), 0, 1, 9_000)  # another minute
    # Then each shard's progress is the furthest mark that covers it
    marks = store.get_progress(t0)
    assert sorted((m.group, m.group_count, m.through_ms) for m in marks) == [
        (0, 1, 4_000),
        (0, 2, 5_000),
        (1, 2, 7_000),
    ]
    assert progress_of(marks, 4) == 5_000 and progress_of(marks, 3) == 7_000
    assert store.get_progress(t0 - timedelta(minutes=1)) == []


def test_a_send_bound_only_moves_forward_beside_its_groups_release_mark(store, t0):  # type: ignore[no-untyped-def]
    from punctual.store.progress import progress_of, sent_bounds

    # Given a group whose poller bounded its sends before any release mark, another with both,
    # and a third (a poller from before the bound) with a release mark only
    store.put_sent_bound(t0, 0, 3, 9_000)
    store.put_sent_bound(t0, 0, 3, 6_000)  # behind: ignored
    store.put_sent_bound(t0, 1, 3, 12_000)
    store.put_progress(t0, 1, 3, 4_000)
    store.put_sent_bound(t0, 1, 3, 15_000)
    store.put_progress(t0, 2, 3, 5_000)
    marks = store.get_progress(t0)
    # Then each figure is kept, unmixed: the release mark of a group with a bound only is absent
    assert sorted((m.group, m.through_ms, m.sent_to_ms) for m in marks) == [
        (0, None, 9_000),
        (1, 4_000, 15_000),
        (2, 5_000, None),
    ]
    assert progress_of(marks, 0) is None and progress_of(marks, 1) == 4_000
    # And a drain of some shards knows the furthest bound of the groups that cover them, and the
    # release marks of those that wrote none
    assert sent_bounds(marks, [0, 3]) == (9_000, set())
    assert sent_bounds(marks, [0, 1, 2]) == (15_000, {5_000})
    assert sent_bounds(marks, [2]) == (None, {5_000})
    assert sent_bounds(marks, []) == (None, set())


def test_a_jobs_turn_is_held_by_one_slot_and_handed_on_oldest_first(store, t0):  # type: ignore[no-untyped-def]
    take, wait, hand = store.take_turn, store.wait_for_turn, store.pass_turn
    # Given slot a holding the turn
    assert take("t", "j", "a", t0).holder == "a"
    assert take("t", "j", "a", t0 + timedelta(seconds=5)).since == t0  # taking it again keeps it
    # When b and c try: the turn stays with a; they wait (out of order), c twice
    assert take("t", "j", "c", t0).holder == "a"
    wait("t", "j", "c")
    wait("t", "j", "b")
    wait("t", "j", "c")
    assert take("t", "j", "b", t0).waiting == ("b", "c")
    # Then only the holder can pass it, and it goes to the oldest waiting slot
    assert hand("t", "j", "b", t0) is None
    assert hand("t", "j", "a", t0 + timedelta(minutes=1)) == "b"
    turn = take("t", "j", "c", t0)
    assert (turn.holder, turn.since, turn.waiting) == ("b", t0 + timedelta(minutes=1), ("c",))
    assert hand("t", "j", "b", t0) == "c"
    assert hand("t", "j", "c", t0) is None  # nobody waits: the turn is free
    assert take("t", "j", "d", t0 + timedelta(minutes=2)).holder == "d"
    # And a stale holder can be replaced, by name only
    assert take("t", "j", "e", t0, replacing="x").holder == "d"
    turn = take("t", "j", "e", t0 + timedelta(minutes=3), replacing="d")
    assert (turn.holder, turn.since) == ("e", t0 + timedelta(minutes=3))
    assert take("t", "other", "z", t0).holder == "z"  # per job


# --------------------------------------------------------------------------- schedule groups


def test_schedule_groups_create_list_update_delete(store, t0):  # type: ignore[no-untyped-def]
    from punctual.store.base import GroupConflictError, GroupExistsError, ScheduleGroup

    # Given groups of two tenants
    for name in ("reports", "billing", "batch-1", "batch-2", "batch-3"):
        store.create_group(ScheduleGroup("default", name, t0, t0, tags={"team": name}))
    store.create_group(ScheduleGroup("other", "reports", t0, t0))
    with pytest.raises(GroupExistsError):
        store.create_group(ScheduleGroup("default", "reports", t0, t0))
    # Then a tenant lists its own, in name order, by prefix and in pages
    first = store.list_groups("default", 2)
    assert [g.name for g in first.items] == ["batch-1", "batch-2"] and first.cursor
    rest = store.list_groups("default", 10, first.cursor)
    assert [g.name for g in rest.items] == ["batch-3", "billing", "reports"] and rest.cursor is None
    prefixed = store.list_groups("default", 2, None, "batch")
    assert [g.name for g in prefixed.items] == ["batch-1", "batch-2"]
    assert [g.name for g in store.list_groups("default", 2, prefixed.cursor, "batch").items] == ["batch-3"]
    assert store.get_group("default", "reports").tags == {"team": "reports"}
    store.create_group(ScheduleGroup("other", "tokened", t0, t0, client_token="token-1"))
    assert store.get_group("other", "tokened").client_token == "token-1"
    assert store.get_group("default", "billing").client_token is None
    assert store.get_group("other", "billing") is None
    # When a group is updated with the instant it was read at, it changes; a stale write is refused
    found = store.get_group("default", "reports")
    later = t0 + timedelta(seconds=1)
    changed = ScheduleGroup("default", "reports", found.created_at, later, "DELETING", {})
    store.update_group(changed, found.updated_at)
    with pytest.raises(GroupConflictError):
        store.update_group(changed, found.updated_at)
    assert store.get_group("default", "reports").state == "DELETING"
    # And deleting it leaves the other tenant's group of the same name
    store.delete_group("default", "reports")
    assert store.get_group("default", "reports") is None
    with pytest.raises(GroupConflictError):
        store.update_group(changed, later)
    assert store.get_group("other", "reports") is not None
    # Groups are not jobs: the job listing does not see them
    assert store.list_jobs("default", 10).items == []


# --------------------------------------------------------------------------- alerts


def _alert(t0: datetime, slot: str, condition: str = "failed", owner: str = "w1", at: datetime | None = None):  # type: ignore[no-untyped-def]
    from punctual.models import Alert, AlertCondition

    at = at or t0
    return Alert(
        tenant="default",
        job_id="job-1",
        key_slot=slot,
        condition=AlertCondition(condition),
        created_at=at,
        claimed_at=at,
        owner=owner,
        body={"slot": slot},
    )


def test_an_alert_create_or_takeover_sent_again_after_its_answer_was_lost_is_made(lost_answers, t0):  # type: ignore[no-untyped-def]
    """QA25: a create (or takeover) of an alert applied before its answer was lost, sent again by
    the SDK, found the alert it had just written and answered False: its raiser read it as another
    worker's, live, delivered nothing and armed no sweep; the alert stayed SENDING, never sent."""
    from punctual.models import AlertStatus

    ttl = int(t0.timestamp()) + 86400
    first = _alert(t0, "2026-11-30T10:00:00Z")
    assert lost_answers.create_alert(first, ttl)
    assert not lost_answers.create_alert(_alert(t0, "2026-11-30T10:00:00Z", owner="w2"), ttl)
    later = t0 + timedelta(seconds=600)
    taken = first.model_copy(update={"owner": "w2", "claimed_at": later, "status": AlertStatus.SENDING})
    assert lost_answers.take_over_alert(taken, "w1", later, ttl)
    assert not lost_answers.take_over_alert(taken.model_copy(update={"owner": "w3"}), "w1", later, ttl)


def test_an_alert_is_made_once_per_slot_and_condition_and_taken_over_only_when_stale(store, t0):  # type: ignore[no-untyped-def]
    from punctual.models import AlertCondition, AlertDelivery, AlertStatus

    ttl = int(t0.timestamp()) + 86400
    first = _alert(t0, "2026-11-30T10:00:00Z")
    assert store.create_alert(first, ttl)
    # A second create of the same key loses, whoever makes it
    assert not store.create_alert(_alert(t0, "2026-11-30T10:00:00Z", owner="w2"), ttl)
    # Another condition or slot is another alert
    assert store.create_alert(_alert(t0, "2026-11-30T10:00:00Z", "late"), ttl)
    assert store.create_alert(_alert(t0, "2026-11-30T10:01:00Z"), ttl)
    # The owner records its progress, which renews its claim
    renewed = first.model_copy(
        update={
            "claimed_at": t0 + timedelta(seconds=30),
            "deliveries": [AlertDelivery(rule=0, status=AlertStatus.SENT, tries=1)],
        }
    )
    assert store.save_alert(renewed, ttl)
    # A takeover needs the owner it read, and a claim older than the stale bound
    later = t0 + timedelta(seconds=60)
    taken = renewed.model_copy(update={"owner": "w2", "claimed_at": later})
    assert not store.take_over_alert(taken, "w1", t0 + timedelta(seconds=30), ttl)  # renewed since
    assert not store.take_over_alert(taken, "w9", later, ttl)  # not the owner it read
    assert store.take_over_alert(taken, "w1", later, ttl)
    assert not store.take_over_alert(taken.model_copy(update={"owner": "w3"}), "w1", later, ttl)
    # Then only the new owner saves, and what the first owner delivered is kept
    assert not store.save_alert(first.model_copy(update={"status": AlertStatus.SENT}), ttl)
    assert store.save_alert(taken.model_copy(update={"status": AlertStatus.SENT}), ttl)
    # A finished alert is never taken over, however old
    done = taken.model_copy(update={"owner": "w3"})
    assert not store.take_over_alert(done, "w2", later + timedelta(days=1), ttl)
    got = store.get_alert("default", "job-1", "2026-11-30T10:00:00Z", AlertCondition.FAILED)
    assert got is not None and got.owner == "w2" and got.status is AlertStatus.SENT
    assert [d.rule for d in got.deliveries] == [0]
    listed = [(a.key_slot, a.condition.value) for a in store.list_alerts("default", "job-1", 10)]
    assert listed == [
        ("2026-11-30T10:01:00Z", "failed"),
        ("2026-11-30T10:00:00Z", "late"),
        ("2026-11-30T10:00:00Z", "failed"),
    ]
    assert len(store.list_alerts("default", "job-1", 2)) == 2
    assert store.list_alerts("default", "job-2", 10) == []
    # Alerts live beside the history without showing in it
    assert store.list_executions("default", "job-1", 10).items == []


def test_the_api_reads_history_and_alerts_strongly(dynamo_client):  # type: ignore[no-untyped-def]
    """QA22: a job's alerts (GET /v1/jobs/{id}/alerts) were read eventually consistently, unlike
    every other read the API makes: an alert raised a moment ago could be missing from the list
    that a client reads because of it (a webhook, an execution event)."""
    from punctual.store.dynamo import DynamoStore

    seen: list[tuple[str, bool]] = []

    class Spy:
        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(dynamo_client, name)

        def query(self, **request):  # type: ignore[no-untyped-def]
            seen.append((request["KeyConditionExpression"], request.get("ConsistentRead", False)))
            return dynamo_client.query(**request)

    store = DynamoStore(Spy(), "punctual-test")
    store.list_alerts("default", "job-1", 10)
    store.list_executions("default", "job-1", 10)
    assert len(seen) == 2 and all(consistent for _, consistent in seen), seen


def test_a_failure_streak_counts_its_failures_and_ends_only_as_it_was_read(store, t0):  # type: ignore[no-untyped-def]
    from punctual.store.base import Streak

    ttl = int(t0.timestamp()) + 86400
    s0, s1, s2 = "2026-11-30T10:00:00Z", "2026-11-30T10:01:00Z", "2026-11-30T10:02:00Z"
    assert store.get_streak("default", "job-1") is None
    assert store.open_streak("default", "job-1", s0, ttl) == s0
    assert store.open_streak("default", "job-1", s1, ttl) == s0
    # A repeat of the latest failure (its after-effects run again) counts nothing
    assert store.open_streak("default", "job-1", s1, ttl) == s0
    read = store.get_streak("default", "job-1")
    assert read == Streak(s0, 2, s1)
    # A failure joins after the read: the streak as read cannot be ended any more
    assert store.open_streak("default", "job-1", s2, ttl) == s0
    assert not store.replace_streak("default", "job-1", read, None)
    now = store.get_streak("default", "job-1")
    assert now == Streak(s0, 3, s2)
    # What joined is kept as a streak of its own; then that one ends as read
    assert store.replace_streak("default", "job-1", now, Streak(s2, 1, s2))
    assert not store.replace_streak("default", "job-1", now, None)
    assert store.get_streak("default", "job-1") == Streak(s2, 1, s2)
    assert store.replace_streak("default", "job-1", Streak(s2, 1, s2), None)
    assert store.get_streak("default", "job-1") is None
    assert not store.replace_streak("default", "job-1", Streak(s2, 1, s2), None)
    # A new failure opens a new streak
    assert store.open_streak("default", "job-1", s2, ttl) == s2


def test_an_alert_throttle_sends_one_per_interval_and_counts_the_rest(store, t0):  # type: ignore[no-untyped-def]
    assert store.throttle_alert("default", "job-1", 0, t0, 600) == 0
    assert store.throttle_alert("default", "job-1", 0, t0 + timedelta(seconds=10), 600) is None
    assert store.throttle_alert("default", "job-1", 0, t0 + timedelta(seconds=20), 600) is None
    assert store.throttle_alert("default", "job-1", 1, t0 + timedelta(seconds=20), 600) == 0  # another rule
    assert store.throttle_alert("default", "job-1", 0, t0 + timedelta(seconds=600), 600) == 2
    assert store.throttle_alert("default", "job-1", 0, t0 + timedelta(seconds=601), 600) is None


def test_a_throttled_rule_sends_the_recovery_of_an_alert_it_sent_once(store, t0):  # type: ignore[no-untyped-def]
    # QA21: the rule sent `failed`, and held the `recovered` that followed within its interval, for good
    at = [t0 + timedelta(seconds=s) for s in range(0, 100, 10)]
    assert store.throttle_alert("default", "job-1", 0, at[0], 600) == 0  # failed: sent, the rule open
    assert store.throttle_alert("default", "job-1", 0, at[1], 600, resolves=True) == 0  # recovered: sent
    assert store.throttle_alert("default", "job-1", 0, at[2], 600, resolves=True) is None  # closed: held
    assert store.throttle_alert("default", "job-1", 0, at[3], 600) is None  # failed: held (the interval)
    assert (
        store.throttle_alert("default", "job-1", 0, at[4], 600, resolves=True) is None
    )  # nothing sent to close
    assert (
        store.throttle_alert("default", "job-1", 0, t0 + timedelta(seconds=700), 600) == 3
    )  # sent: open again
    assert store.throttle_alert("default", "job-1", 0, t0 + timedelta(seconds=710), 600, resolves=True) == 0
    assert store.throttle_alert("default", "job-1", 1, at[5], 600, resolves=True) == 0  # a rule's first alert


def test_a_rate_budget_instant_is_held_by_one_slot_and_read_back_strongly(store, t0):  # type: ignore[no-untyped-def]
    # Given a budget's instants around a minute's end (its reservations span two partitions)
    end = t0.replace(second=0, microsecond=0) + timedelta(minutes=1)
    first, second = end - timedelta(microseconds=220_000), end + timedelta(microseconds=330_000)
    expires = int(end.timestamp()) + 86_400
    # When slots take them: free, so taken; again by the same slot, still its (a repeat)
    assert store.reserve_budget_instant("acme", "hooks.example.com", first, "job-a/s1", expires)
    assert store.reserve_budget_instant("acme", "hooks.example.com", first, "job-a/s1", expires)
    assert store.reserve_budget_instant("acme", "hooks.example.com", second, "job-b/s1", expires)
    # Then another slot cannot take a held instant; another tenant's or target's budget is apart
    assert not store.reserve_budget_instant("acme", "hooks.example.com", first, "job-c/s1", expires)
    assert store.reserve_budget_instant("other", "hooks.example.com", first, "job-c/s1", expires)
    assert store.reserve_budget_instant("acme", "api.example.com", first, "job-c/s1", expires)
    # and a read of a range answers its instants and their owners, both ends included
    held = store.budget_reservations("acme", "hooks.example.com", first, second)
    assert held == {first: "job-a/s1", second: "job-b/s1"}
    assert store.budget_reservations(
        "acme", "hooks.example.com", first + timedelta(microseconds=1), second
    ) == {second: "job-b/s1"}
    assert store.budget_reservations("acme", "hooks.example.com", end, end + timedelta(seconds=5)) == {
        second: "job-b/s1"
    }
    assert store.budget_reservations("nobody", "hooks.example.com", first, second) == {}


def test_waiting_child_slots_are_the_newest_undispatched_ones(store) -> None:  # type: ignore[no-untyped-def]
    for minute in range(5):
        store.record_parent_success("default", "c", f"2026-11-30T10:0{minute}:00Z", "a", 2_000_000_000)
    store.record_parent_success("default", "c", "2026-11-30T10:04:00Z", "b", 2_000_000_000)
    store.claim_child_dispatch("default", "c", "2026-11-30T10:03:00Z")
    store.record_parent_success("default", "other", "2026-11-30T10:05:00Z", "a", 2_000_000_000)

    # an older slot behind a dispatched one is still listed (parents' slots end out of order)
    assert store.waiting_child_slots("default", "c", 50) == [
        ("2026-11-30T10:04:00Z", frozenset({"a", "b"})),
        ("2026-11-30T10:02:00Z", frozenset({"a"})),
        ("2026-11-30T10:01:00Z", frozenset({"a"})),
        ("2026-11-30T10:00:00Z", frozenset({"a"})),
    ]
    assert store.waiting_child_slots("default", "c", 3) == [  # the newest 3 items read
        ("2026-11-30T10:04:00Z", frozenset({"a", "b"})),
        ("2026-11-30T10:02:00Z", frozenset({"a"})),
    ]
    assert store.waiting_child_slots("elsewhere", "c", 50) == []


def test_runs_in_flight_counters(store):  # type: ignore[no-untyped-def]
    # punctual.execution.inflight: per lane and tenant, windows summed over their shards
    for shard in range(10):  # (shards past the store's wrap round)
        store.add_runs_in_flight("short/a", 7, shard, 1, 2_000_000_000)
    assert store.add_runs_in_flight("short/a", 7, 2, 1, 2_000_000_000) >= 2  # the shard's count after
    store.add_runs_in_flight("short/a", 7, 2, -1, 2_000_000_000)
    store.add_runs_in_flight("short/a", 7, 3, -1, 2_000_000_000)
    store.add_runs_in_flight("short/a", 8, 0, 1, 2_000_000_000)
    store.add_runs_in_flight("short/a", 8, 0, -1, 2_000_000_000)
    store.add_runs_in_flight("short/a", 8, 5, -1, 2_000_000_000)  # a take-back of a mark lost
    store.add_runs_in_flight("long/a", 7, 0, 4, 2_000_000_000)
    assert store.runs_in_flight("short/a", (7, 8, 9)) == {7: 9, 8: 0, 9: 0}
    assert store.runs_in_flight("long/a", (7,)) == {7: 4}
    assert store.runs_in_flight("short/b", (7,)) == {7: 0}
    assert store.hot_in_flight((7, 8)) == set()
    store.mark_hot_in_flight("short/a", 7, 2_000_000_000)
    store.mark_hot_in_flight("short/a", 7, 2_000_000_000)  # a repeat adds nothing
    store.mark_hot_in_flight("long/b", 8, 2_000_000_000)
    store.mark_hot_in_flight("short/c", 9, 2_000_000_000)
    assert store.hot_in_flight((7, 8)) == {"short/a", "long/b"}
