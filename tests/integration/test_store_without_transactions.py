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
from botocore.exceptions import ClientError

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

from factories import job
from punctual.store.base import TenantLimitError
from punctual.store.dynamo import DynamoStore

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
