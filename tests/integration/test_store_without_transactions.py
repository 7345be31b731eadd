"""The DynamoDB store on a table that refuses transactions (an MRSC global table).

DynamoDB's multi-Region strong consistency does not support ``TransactWriteItems``
(docs/multi-region.md, F9 and section 3). With ``transactions=False`` the store writes each of
its transactions one item at a time (``punctual.store.dynamo.sequenced``), the decisive item first
and the earlier writes undone when a later condition fails. The store's own tests of the jobs,
their versions, quotas and dependency links run here again, on a moto client that refuses
transactions as an MRSC table does.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

# The shared store suite's tests, collected here again on this store (imported: pytest runs them).
from test_store import (  # noqa: F401
    test_create_get_and_duplicate,
    test_delete_with_version,
    test_dependencies,
    test_list_pages_filters_and_tenants,
    test_replace_is_version_checked,
    test_tenant_limit,
)
from test_store_calendars import (  # noqa: F401
    test_a_calendar_brought_back_after_its_item_was_lost_counts_the_jobs_that_name_it,
    test_a_calendar_in_use_is_not_deleted_and_names_its_jobs,
    test_a_job_write_and_its_calendar_uses_are_one_transaction,
    test_a_stale_use_is_dropped_only_while_its_job_is_unchanged,
)
from test_tenant_quotas import (  # noqa: F401
    test_a_replacement_is_checked_on_its_difference_and_a_deletion_frees_the_rate,
    test_a_single_job_above_the_whole_quota_is_refused,
    test_registration_beyond_the_trigger_quota_is_refused_naming_it,
    test_the_job_quota_names_itself,
)

from factories import job, spec
from punctual.dispatch.queues import MemoryQueues, QueueRouting
from punctual.runtime.clock import ManualClock
from punctual.store.base import TenantLimitError, TransactionConflictError
from punctual.store.conflicts import ConflictRetry
from punctual.store.dynamo import DynamoStore, schema
from punctual.store.dynamo.conflicts import ConflictRetryingClient
from punctual.usecases.jobs import JobService

TABLE = "punctual-test"


class RefusesTransactions:
    """A boto3 DynamoDB client whose table refuses transactions, as an MRSC global table does."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.single_writes = 0

    def transact_write_items(self, **request: Any) -> Any:
        raise ClientError(
            {"Error": {"Code": "ValidationException", "Message": "transactions are not supported"}},
            "TransactWriteItems",
        )

    def __getattr__(self, name: str) -> Any:
        if name in ("put_item", "update_item", "delete_item"):
            self.single_writes += 1
        return getattr(self._client, name)


@pytest.fixture
def refusing(dynamo_client: Any) -> RefusesTransactions:
    return RefusesTransactions(dynamo_client)


@pytest.fixture
def store(refusing: RefusesTransactions) -> DynamoStore:
    """Overrides the shared suite's store: DynamoDB without transactions."""
    return DynamoStore(refusing, TABLE, transactions=False)


def test_the_table_here_refuses_transactions(refusing: RefusesTransactions, t0: datetime) -> None:
    # Given the store as it is by default (transactions on) over this client, job writes fail:
    # the client models the MRSC table, and the suite above runs without transactions
    with pytest.raises(ClientError, match="not supported"):
        DynamoStore(refusing, TABLE).create_job(job("a", now=t0), None, max_jobs=10)


def test_a_refused_registration_leaves_nothing_behind(store: DynamoStore, t0: datetime) -> None:
    # Given a tenant at its job quota
    store.create_job(job("a", now=t0), None, max_jobs=1)
    # When another job is registered, its item and listing are written before the quota refuses it
    with pytest.raises(TenantLimitError):
        store.create_job(job("b", now=t0), None, max_jobs=1)
    # Then both were undone: no job, no listing, and the count is still one
    assert store.get_job("default", "b") is None
    assert [j.id for j in store.list_jobs("default", limit=10).items] == ["a"]
    store.delete_job("default", "a")
    store.create_job(job("b", now=t0), None, max_jobs=1)  # the place a's deletion freed
    assert [j.id for j in store.list_jobs("default", limit=10).items] == ["b"]


class DeleteLandsMidCreate(RefusesTransactions):
    """Another Region deletes the job right after the create's first write (the job item)."""

    def __init__(self, client: Any, other: DynamoStore) -> None:
        super().__init__(client)
        self.other, self.armed = other, True

    def __getattr__(self, name: str) -> Any:
        call = super().__getattr__(name)
        if name != "put_item":
            return call

        def put_item(**request: Any) -> Any:
            reply = call(**request)
            if self.armed and self.lands_after(request["Item"]):
                self.armed = False
                self.land()
            return reply

        return put_item

    def lands_after(self, item: dict[str, Any]) -> bool:
        return bool(item["sk"]["S"] == "job")

    def land(self) -> None:
        self.other.delete_job("default", "a")  # the other Region's DELETE, between the writes


def test_a_listing_a_racing_delete_left_without_its_job_is_removed_by_a_delete(
    dynamo_client: Any, t0: datetime
) -> None:
    """QA (multi-Region): a create and a delete of one id at once left a listing with no job,
    listed as ENABLED while GET and DELETE answered 404, and nothing removed it."""
    from punctual.dispatch.queues import MemoryQueues, QueueRouting
    from punctual.runtime.clock import ManualClock
    from punctual.timing.timers import TimerLayout
    from punctual.usecases.job_errors import JobNotFoundError
    from punctual.usecases.jobs import JobService

    other = DynamoStore(RefusesTransactions(dynamo_client), TABLE, transactions=False)
    store = DynamoStore(DeleteLandsMidCreate(dynamo_client, other), TABLE, transactions=False)
    store.create_job(job("a", now=t0), None, max_jobs=10)
    assert store.get_job("default", "a") is None
    assert [j.id for j in store.list_jobs("default", limit=10).items] == ["a"]  # the ghost
    # A delete of it is still 404, and takes the listing away
    clock = ManualClock(t0)
    service = JobService(store, MemoryQueues(now=clock.now), clock, TimerLayout(), QueueRouting(("q",), ()))
    with pytest.raises(JobNotFoundError):
        service.delete("default", "a")
    assert store.list_jobs("default", limit=10).items == []
    # A live job's listing is never taken so
    store.create_job(job("b", now=t0), None, max_jobs=10)
    assert not store.drop_listing_without_job("default", "b")
    assert [j.id for j in store.list_jobs("default", limit=10).items] == ["b"]


class FailsOneWrite(RefusesTransactions):
    """Refuses the ``fail_at``-th single-item write with ``error`` every time it is tried: another
    Region writing that item for longer than the store retries (``ReplicatedWriteConflictException``),
    or no answer from DynamoDB at all (a connection error, not a ``ClientError``)."""

    def __init__(self, client: Any, fail_at: int, error: Exception) -> None:
        super().__init__(client)
        self.fail_at, self.error, self.failing = fail_at, error, None

    def __getattr__(self, name: str) -> Any:
        call = super().__getattr__(name)
        if name not in ("put_item", "update_item", "delete_item"):
            return call

        def write(**request: Any) -> Any:
            key = request.get("Key") or {n: request["Item"][n] for n in ("pk", "sk")}
            if self.single_writes == self.fail_at and self.failing is None:
                self.failing = key
            if key == self.failing:
                raise self.error
            return call(**request)

        return write


def _replicated_write_conflict() -> Exception:
    return ClientError({"Error": {"Code": "ReplicatedWriteConflictException", "Message": "x"}}, "PutItem")


@pytest.mark.parametrize("fail_at", [2, 3, 4])
@pytest.mark.parametrize(
    "error", [_replicated_write_conflict, lambda: EndpointConnectionError(endpoint_url="x")]
)
def test_a_job_write_cut_short_by_an_error_leaves_nothing_behind(
    dynamo_client: Any, t0: datetime, fail_at: int, error: Any
) -> None:
    """QA22 (multi-Region): a conflict that outlived the retries, or a connection error, on a
    create's listing, quota or first timer left the job item alone in the table: the API answered
    503 ("nothing was written, try again"), the retry 409 (the job exists) and the job, without its
    first timer, fired nothing."""
    from punctual.timing.timers import TimerLayout
    from punctual.usecases.job_errors import JobNotFoundError

    clock, layout = ManualClock(t0), TimerLayout()
    failing = FailsOneWrite(dynamo_client, fail_at, error())
    policy = ConflictRetry(attempts=2)
    store = DynamoStore(
        ConflictRetryingClient(failing, policy, sleep=lambda _: None), TABLE, transactions=False
    )
    service = JobService(store, MemoryQueues(now=clock.now), clock, layout, QueueRouting(("q",), ()))
    # When a create's write number fail_at (listing, quota or first timer) keeps failing
    with pytest.raises((TransactionConflictError, EndpointConnectionError)):
        service.register("default", spec(), job_id="a")
    # Then the writes before it were undone: no job, no listing, no timer, the quota as it was
    with pytest.raises(JobNotFoundError):
        service.get("default", "a")
    assert store.list_jobs("default", limit=10).items == []
    assert [
        i["pk"]["S"] for i in dynamo_client.scan(TableName=TABLE)["Items"] if "timer" in i["pk"]["S"]
    ] == []
    # And a retry of the create, the fault gone, makes the whole job
    healthy = DynamoStore(dynamo_client, TABLE, transactions=False)
    JobService(healthy, MemoryQueues(now=clock.now), clock, layout, QueueRouting(("q",), ())).register(
        "default", spec(), job_id="a"
    )
    assert [j.id for j in healthy.list_jobs("default", limit=10).items] == ["a"]
    meta = dynamo_client.get_item(TableName=TABLE, Key={"pk": {"S": "tenant#default"}, "sk": {"S": "#meta"}})
    assert meta["Item"]["job_count"] == {"N": "1"}


def test_a_replacement_cut_short_by_an_error_leaves_the_job_as_it_was(
    dynamo_client: Any, t0: datetime
) -> None:
    """QA22: the same on a replacement: its new version stayed with the old listing and the new
    schedule's first timer unwritten, so the old timer (of the old version) fired nothing either."""
    from punctual.timing.timers import TimerLayout

    clock, layout = ManualClock(t0), TimerLayout()
    healthy = DynamoStore(dynamo_client, TABLE, transactions=False)
    routing = QueueRouting(("q",), ())
    JobService(healthy, MemoryQueues(now=clock.now), clock, layout, routing).register(
        "default", spec(), job_id="a"
    )
    failing = FailsOneWrite(dynamo_client, 2, _replicated_write_conflict())  # the listing
    store = DynamoStore(ConflictRetryingClient(failing, ConflictRetry(attempts=2), sleep=lambda _: None), TABLE,
                        transactions=False)  # fmt: skip
    service = JobService(store, MemoryQueues(now=clock.now), clock, layout, routing)
    with pytest.raises(TransactionConflictError):
        service.replace("default", "a", spec("rate(5 minutes)"), expected_version=1)
    kept = healthy.get_job("default", "a")
    assert kept is not None and kept.version == 1 and kept.schedule == "rate(1 minute)"


class FailsDeletes(RefusesTransactions):
    """Each delete of the item at ``key`` raises ``error``; after each write, what another Region's
    API reads of the job ``job_id`` at that instant is recorded in ``seen``."""

    def __init__(self, client: Any, key: dict[str, Any], other: DynamoStore, job_id: str) -> None:
        super().__init__(client)
        self.key, self.other, self.job_id, self.seen = key, other, job_id, []

    def __getattr__(self, name: str) -> Any:
        call = super().__getattr__(name)
        if name not in ("put_item", "update_item", "delete_item"):
            return call

        def write(**request: Any) -> Any:
            if name == "delete_item" and request["Key"] == self.key:
                raise EndpointConnectionError(endpoint_url="x")
            reply = call(**request)
            try:
                self.seen.append("absent" if self.other.get_job("default", self.job_id) is None else "job")
            except Exception as exc:
                self.seen.append(type(exc).__name__)
            return reply

        return write


def test_a_delete_of_a_missing_job_leaves_no_item_at_its_id_whatever_fails(
    dynamo_client: Any, t0: datetime
) -> None:
    """QA22 (multi-Region): the check that no job is there (a DELETE of a missing id, which drops a
    listing left without its job) was written as an update, which made an empty job item at the id
    and deleted it again: a GET meanwhile answered 500 (KeyError 'doc'), a create of the id 409.
    When that delete failed (a conflict that outlived the retries, no answer, the process
    stopped), the item stayed: the id answered 500 to every GET and 409 to every create, for good."""
    healthy = DynamoStore(dynamo_client, TABLE, transactions=False)
    failing = FailsDeletes(dynamo_client, schema.job_key("default", "a"), healthy, "a")
    store = DynamoStore(ConflictRetryingClient(failing, ConflictRetry(attempts=1)), TABLE, transactions=False)
    # When a DELETE of the missing job a checks that no job is there, its deletes of a's item failing
    with pytest.raises(EndpointConnectionError):  # the delete of nothing that says no job is there
        store.drop_listing_without_job("default", "a")
    # Then no reader saw an item at a, and none is left: not found, and free to be created
    assert set(failing.seen) <= {"absent"}, failing.seen
    assert healthy.get_job("default", "a") is None
    healthy.create_job(job("a", now=t0), None, max_jobs=10)
    # And the check still tells a job there from none: a job's listing stays, a lone one goes
    assert not healthy.drop_listing_without_job("default", "a")
    assert [j.id for j in healthy.list_jobs("default", limit=10).items] == ["a"]
    dynamo_client.delete_item(TableName=TABLE, Key=schema.job_key("default", "a"))
    assert healthy.drop_listing_without_job("default", "a")
    assert healthy.list_jobs("default", limit=10).items == []


class CreateLandsMidGroup(DeleteLandsMidCreate):
    """Another request registers a job of the tenant right after a group's first write of job ``b``."""

    def __init__(self, client: Any, other: DynamoStore, t0: datetime) -> None:
        super().__init__(client, other)
        self.t0 = t0

    def lands_after(self, item: dict[str, Any]) -> bool:
        return bool(item["pk"] == schema.job_key("default", "b")["pk"])

    def land(self) -> None:
        self.other.create_job(job("c", now=self.t0), None, max_jobs=10)  # its own ADD of the count


def test_a_job_group_undone_for_a_job_that_exists_keeps_a_concurrent_registrations_count(
    dynamo_client: Any, t0: datetime
) -> None:
    """A batch's group was written counter first: a job of it that existed (a repeated batch) undid
    the counter's update by putting back the item it had read, over another registration's count
    made meanwhile; the tenant's job count (and trigger rate) then stayed one low for good."""
    healthy = DynamoStore(dynamo_client, TABLE, transactions=False)
    healthy.create_job(job("a", now=t0), None, max_jobs=10)
    store = DynamoStore(CreateLandsMidGroup(dynamo_client, healthy, t0), TABLE, transactions=False)
    # When a group of b and a (a registered already) is written, and c registered during it
    taken = store.create_job_group([(job("b", now=t0), None), (job("a", now=t0), None)], max_jobs=10)
    # Then the group is refused for a, nothing of it is left, and a and c are both counted
    assert taken == ("a",)
    assert sorted(j.id for j in healthy.list_jobs("default", limit=10).items) == ["a", "c"]
    meta = dynamo_client.get_item(TableName=TABLE, Key=schema.tenant_meta_key("default"))
    assert meta["Item"]["job_count"] == {"N": "2"}


def test_a_job_group_past_the_quota_leaves_nothing_behind(store: DynamoStore, t0: datetime) -> None:
    # Given a tenant one job short of its quota, a group of two is refused whole, naming the quota
    store.create_job(job("a", now=t0), None, max_jobs=2)
    with pytest.raises(TenantLimitError, match="1 jobs; 2 more would pass 2"):
        store.create_job_group([(job("b", now=t0), None), (job("c", now=t0), None)], max_jobs=2)
    assert [j.id for j in store.list_jobs("default", limit=10).items] == ["a"]
    assert store.create_job_group([(job("b", now=t0), None)], max_jobs=2) == ()
