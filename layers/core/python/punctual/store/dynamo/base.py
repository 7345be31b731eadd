"""The DynamoDB store's shared state: the client, the table, the timer layout and its check."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from punctual.store.base import (
    LayoutMismatchError,
)
from punctual.store.dynamo import dependency_schema, schema
from punctual.store.dynamo.conflicts import ConflictRetryingClient
from punctual.store.dynamo.keys import (
    _BATCH_GET_MAX,
    _MAX_UNPROCESSED_ROUNDS,
    UnprocessedItemsError,
    _backoff,
    _n,
    _s,
)
from punctual.store.dynamo.schema import CREATE, LAYOUT_KEY
from punctual.store.dynamo.sequenced import write_in_order
from punctual.timing.timers import Lane, Timer, TimerLayout


class DynamoBase:
    """What every aggregate's DynamoDB implementation shares.

    Parameters
    ----------
    client
        A boto3 DynamoDB client (low level: attribute values are built here). Its writes are
        retried on transaction conflicts (:mod:`.conflicts`), in this one place.
    table_name
        The table, with string keys ``pk`` and ``sk``.
    layout
        The timer layout this process uses (None: no layout is recorded or checked).
    transactions
        False on a table that refuses ``TransactWriteItems`` (an MRSC global table): the store's
        transactions are then written one item at a time (:mod:`.sequenced`).
    marks_scope
        Whose watermarks and progress marks these are: "" (one Region: the deployment's), or a
        Region's name on a multi-Region table, where each Region's pollers trust only their own
        Region's marks: another Region's mark says what *its* queues were given, which a lost
        Region takes with it (docs/multi-region.md, the double fault).
    """

    def __init__(
        self,
        client: Any,
        table_name: str,
        layout: TimerLayout | None = None,
        transactions: bool = True,
        marks_scope: str = "",
    ) -> None:
        self.client = client if isinstance(client, ConflictRetryingClient) else ConflictRetryingClient(client)
        self.table = table_name
        self.layout = layout
        self.transactions = transactions
        self.marks_scope = marks_scope
        self._layout_checked = layout is None

    # ---------------------------------------------------------------- layout

    def check_layout(self) -> None:
        """Refuse to touch timers with shard counts other than the table's (once per process).

        The first process to write or read timers records its counts in the table (a
        conditional put, so two first processes agree); every later one compares. Only
        processes built with a ``layout`` check; tests and tools that pass none do not.
        """
        if self._layout_checked or self.layout is None:
            return
        key = LAYOUT_KEY
        want = {"far": self.layout.shard_count, "near": self.layout.near_shard_count}
        item = self.client.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item")
        if item is None:
            try:
                self.client.put_item(
                    TableName=self.table,
                    Item={**key, "far": _n(want["far"]), "near": _n(want["near"])},
                    **CREATE.fields(),
                )
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                item = self.client.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item")
        if item is not None:
            have = {"far": int(item["far"]["N"]), "near": int(item["near"]["N"])}
            if have != want:
                raise LayoutMismatchError(
                    f"table {self.table!r} holds timers laid out for {have['far']} far / {have['near']} near"
                    f" shards, but this process is configured for {want['far']} / {want['near']}"
                    " (PUNCTUAL_SHARD_COUNT / PUNCTUAL_NEAR_SHARD_COUNT; cdk.json shardCount /"
                    " nearShardCount): shard counts are fixed when a table is first used; deploy with"
                    f" shardCount={have['far']} and nearShardCount={have['near']}"
                )
        self._layout_checked = True

    def audit_segment_of(self, tenant: str, job_id: str) -> int | None:
        """The audit segment a job's items are enrolled under (its far shard); None for a store
        built without a layout, which enrols nothing (``enrol_for_audit`` adds them later)."""
        if self.layout is None:
            return None
        return self.layout.shard_for(Lane.FAR, tenant, job_id)

    def _write_if(self, operation: str, own_item: bool = False, **request: Any) -> bool:
        """One conditional write (``put_item``, ``update_item``, ...) on the table: False when
        its condition failed, True when it was written; any other error is raised. ``own_item``:
        a put of an item that holds a fresh owner of its own, so finding exactly that item is
        this write, applied before its answer was lost (the SDK sent it again): written."""
        if own_item:
            request["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        try:
            getattr(self.client, operation)(TableName=self.table, **request)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return own_item and exc.response.get("Item") == request["Item"]
            raise
        return True

    def _add_link(
        self, tenant: str, parent: str, child_id: str, version: int | None = None
    ) -> list[dict[str, Any]]:
        """The transaction items that record ``child_id`` as a dependent of ``parent``: the link
        (only if it is not there) and the parent's count (only on a parent that exists, and with
        ``version``, only at that version: its old item comes back when that fails)."""
        key = dependency_schema.dependent_key(tenant, parent, child_id)
        count = self._dependent_count(tenant, parent, 1, version)
        if version is not None:
            count["Update"]["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        return [{"Put": {"TableName": self.table, "Item": key, **schema.CREATE.fields()}}, count]

    def _remove_link(self, tenant: str, parent: str, child_id: str) -> list[dict[str, Any]]:
        """The transaction items that remove ``child_id`` as a dependent of ``parent`` (only if
        the link is there), and count it off the parent."""
        key = dependency_schema.dependent_key(tenant, parent, child_id)
        return [
            {"Delete": {"TableName": self.table, "Key": key, **schema.EXISTS.fields()}},
            self._dependent_count(tenant, parent, -1),
        ]

    def _dependent_count(
        self, tenant: str, parent: str, delta: int, version: int | None = None
    ) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self.table,
                "Key": schema.job_key(tenant, parent),
                **dependency_schema.count_dependent(delta, version).fields(),
            }
        }

    def _transact(self, items: list[dict[str, Any]]) -> None:
        """One ``TransactWriteItems``; on a table without transactions (MRSC) the same items one
        at a time, with the same cancellation reasons on a failed condition (:mod:`.sequenced`)."""
        if self.transactions:
            self.client.transact_write_items(TransactItems=items)
        else:
            write_in_order(self.client, items)

    def _transact_with_links(
        self, items: list[dict[str, Any]], links: dict[str, list[dict[str, Any]]]
    ) -> None:
        """Write ``items`` and the link pairs of ``links`` (parent -> :meth:`_add_link` or
        :meth:`_remove_link`) in one transaction.

        A pair whose condition fails (the link already as wanted, or the parent gone) is left out
        and the rest is tried again; a failure among ``items`` is raised for the caller to read (its
        ``CancellationReasons`` index ``items`` as given).
        """
        pending = dict(links)
        while True:
            parents = list(pending)
            try:
                self._transact(items + [i for p in parents for i in pending[p]])
                return
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "TransactionCanceledException":
                    raise
                reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
                failed = "ConditionalCheckFailed"
                if failed in reasons[: len(items)]:
                    raise
                done = [
                    parent
                    for n, parent in enumerate(parents)
                    if failed in reasons[len(items) + 2 * n : len(items) + 2 * n + 2]
                ]
                if not done:
                    raise
                for parent in done:
                    del pending[parent]
                if not items and not pending:
                    return

    def _batch_get(self, keys: list[dict[str, Any]], consistent: bool = True) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for start in range(0, len(keys), _BATCH_GET_MAX):
            request: dict[str, Any] = {
                self.table: {"Keys": keys[start : start + _BATCH_GET_MAX], "ConsistentRead": consistent}
            }
            for round_no in range(_MAX_UNPROCESSED_ROUNDS):
                reply = self.client.batch_get_item(RequestItems=request)
                found.extend(reply.get("Responses", {}).get(self.table, []))
                request = reply.get("UnprocessedKeys") or {}
                if not request:
                    break
                _backoff(round_no)
            else:
                raise UnprocessedItemsError("BatchGetItem")
        return found

    @staticmethod
    def _timer_item(timer: Timer) -> dict[str, Any]:
        item = {
            "pk": _s(timer.pk),
            "sk": _s(timer.sk),
            "tenant": _s(timer.tenant),
            "job_id": _s(timer.job_id),
            "slot": _s(timer.slot),
            "attempt": _n(timer.attempt),
            "kind": _s(timer.kind.value),
            "job_version": _n(timer.job_version),
            "due_ms": _n(timer.due_ms),
            "expires_at": _n(timer.expires_at),
        }
        if timer.owner:
            item["owner"] = _s(timer.owner)
        return item
