"""Execution records in DynamoDB, and the per-job turn of overlap skip/queue jobs."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from punctual.models import Execution, ExecutionStatus
from punctual.store.base import (
    ExecutionConflictError,
    ExecutionKey,
    ExecutionRepository,
    Expect,
    Page,
    Turn,
)
from punctual.store.dynamo import schema
from punctual.store.dynamo.base import DynamoBase
from punctual.store.dynamo.execution_docs import execution_from_item, record_attributes
from punctual.store.dynamo.keys import _MAX_UNPROCESSED_ROUNDS
from punctual.store.dynamo.schema import _n, _s, expired
from punctual.store.listing import LIST_SCAN_BUDGET


class DynamoExecutions(DynamoBase, ExecutionRepository):
    """Execution records in DynamoDB, and the per-job turn of overlap skip/queue jobs."""

    @staticmethod
    def _turn_of(item: dict[str, Any] | None) -> Turn:
        if not item:
            return Turn()
        since = item.get("since", {}).get("S")
        return Turn(
            holder=item.get("holder", {}).get("S"),
            since=datetime.fromisoformat(since) if since else None,
            waiting=tuple(sorted(item.get("waiting", {}).get("SS", []))),
        )

    def take_turn(
        self, tenant: str, job_id: str, slot: str, now: datetime, replacing: str | None = None
    ) -> Turn:
        try:
            reply = self.client.update_item(
                TableName=self.table,
                Key=schema.turn_key(tenant, job_id),
                **schema.take_turn(slot, now, replacing).fields(),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return self._turn_of(exc.response.get("Item"))
        return self._turn_of(reply.get("Attributes"))

    def wait_for_turn(self, tenant: str, job_id: str, slot: str) -> None:
        self.client.update_item(
            TableName=self.table,
            Key=schema.turn_key(tenant, job_id),
            **schema.wait_for_turn(slot).fields(),
        )

    def pass_turn(self, tenant: str, job_id: str, slot: str, now: datetime) -> str | None:
        key = schema.turn_key(tenant, job_id)
        for _ in range(_MAX_UNPROCESSED_ROUNDS):
            item = self.client.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item")
            turn = self._turn_of(item)
            if turn.holder != slot:
                return None
            try:
                if turn.waiting:
                    following = turn.waiting[0]
                    self.client.update_item(
                        TableName=self.table,
                        Key=key,
                        **schema.hand_turn(slot, following, now).fields(),
                    )
                    return following
                self.client.update_item(
                    TableName=self.table,
                    Key=key,
                    **schema.free_turn(slot).fields(),
                )
                return None
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
        raise RuntimeError(f"could not pass the turn of job {job_id}")

    # ---------------------------------------------------------------- executions

    @staticmethod
    def _execution_from_item(item: dict[str, Any]) -> Execution:
        return execution_from_item(item)

    def save_execution(self, execution: Execution, expect: Expect | None, ttl_epoch_s: int) -> None:
        item = {
            **schema.execution_key(execution.tenant, execution.job_id, execution.slot),
            "status": _s(execution.status.value),
            "attempt": _n(execution.attempt),
            **record_attributes(execution),
            "expires_at": _n(ttl_epoch_s),
        }
        condition = schema.save_execution(
            [status.value for status in expect.statuses] if expect and expect.statuses else None,
            expect.attempt if expect else None,
            expect.owner if expect else None,
            bool(expect and expect.check_owner),
            new=expect is None,
        )
        request: dict[str, Any] = {
            "TableName": self.table,
            "Item": item,
            **condition.fields(),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        try:
            self.client.put_item(**request)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            old = exc.response.get("Item")
            if old == item and execution.owner is not None:
                # This very write, applied: botocore sent it again after its response was lost
                # (a read timeout). An owner is fresh at each start, so no other writer's item
                # is this one; judged a conflict, a claim found its own RUNNING record "live" and
                # waited its lease out (the slot late by the lease, or more).
                return
            current = self._execution_from_item(old) if old and "doc" in old else None
            message = (
                "execution already exists" if expect is None else "execution is not in the expected state"
            )
            raise ExecutionConflictError(message, current) from None

    def get_execution(
        self, tenant: str, job_id: str, slot: str, live_at: int | None = None
    ) -> Execution | None:
        reply = self.client.get_item(
            TableName=self.table,
            Key=schema.execution_key(tenant, job_id, slot),
            ConsistentRead=True,
        )
        item = reply.get("Item")
        return self._execution_from_item(item) if item and not expired(item, live_at) else None

    def batch_get_executions(
        self, keys: Iterable[ExecutionKey], consistent: bool = True
    ) -> dict[ExecutionKey, Execution]:
        unique = sorted(set(keys))
        items = self._batch_get([schema.execution_key(t, j, s) for t, j, s in unique], consistent)
        found = (self._execution_from_item(item) for item in items)
        return {(e.tenant, e.job_id, e.slot): e for e in found}

    def list_executions(
        self,
        tenant: str,
        job_id: str,
        limit: int,
        cursor: str | None = None,
        status: ExecutionStatus | None = None,
        newest_first: bool = True,
        live_at: int | None = None,
    ) -> Page[Execution]:
        items: list[Execution] = []
        request: dict[str, Any] = {
            "TableName": self.table,
            **schema.history(tenant, job_id, status.value if status is not None else None).fields(),
            "ScanIndexForward": not newest_first,
            "ConsistentRead": True,
        }
        if cursor:
            request["ExclusiveStartKey"] = schema.execution_key(tenant, job_id, cursor)
        examined = 0
        while True:
            # A status filter reads at most LIST_SCAN_BUDGET records a page (DynamoDB reads the
            # filtered-out ones too): a rare status in a long history is a short page with a cursor.
            request["Limit"] = max(limit - len(items), 1) if status is None else 100
            reply = self.client.query(**request)
            last = reply.get("LastEvaluatedKey")
            examined += int(reply.get("ScannedCount", 0))
            for item in reply.get("Items", []):
                if expired(item, live_at):  # DynamoDB deletes it lazily, up to days later
                    continue
                items.append(self._execution_from_item(item))
                if len(items) == limit:
                    return Page(items, items[-1].slot)
            if not last:
                return Page(items, None)
            if status is not None and examined >= LIST_SCAN_BUDGET:
                return Page(items, last["sk"]["S"].removeprefix(schema.EXEC_PREFIX))
            request["ExclusiveStartKey"] = last
