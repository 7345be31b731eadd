"""The DynamoDB store's shared state: the client, the table, the timer layout and its check."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from punctual.store.base import (
    LayoutMismatchError,
)
from punctual.store.dynamo.keys import (
    _BATCH_GET_MAX,
    _MAX_UNPROCESSED_ROUNDS,
    _backoff,
    _n,
    _s,
)
from punctual.store.dynamo.schema import CREATE, LAYOUT_KEY
from punctual.timers import Lane, Timer, TimerLayout


class DynamoBase:
    """What every aggregate's DynamoDB implementation shares.

    Parameters
    ----------
    client
        A boto3 DynamoDB client (low level: attribute values are built here).
    table_name
        The table, with string keys ``pk`` and ``sk``.
    layout
        The timer layout this process uses (None: no layout is recorded or checked).
    """

    def __init__(self, client: Any, table_name: str, layout: TimerLayout | None = None) -> None:
        self.client = client
        self.table = table_name
        self.layout = layout
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

    def _write_if(self, operation: str, **request: Any) -> bool:
        """One conditional write (``put_item``, ``update_item``, ...) on the table: False when
        its condition failed, True when it was written; any other error is raised."""
        try:
            getattr(self.client, operation)(TableName=self.table, **request)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True

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
                raise RuntimeError("BatchGetItem left keys unprocessed after repeated retries")
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
