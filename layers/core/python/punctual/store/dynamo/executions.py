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
from punctual.store.dynamo.base import DynamoBase
from punctual.store.dynamo.keys import (
    _MAX_UNPROCESSED_ROUNDS,
    _n,
    _s,
    job_pk,
)


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

    def _turn_key(self, tenant: str, job_id: str) -> dict[str, Any]:
        return {"pk": _s(job_pk(tenant, job_id)), "sk": _s("turn")}

    def take_turn(
        self, tenant: str, job_id: str, slot: str, now: datetime, replacing: str | None = None
    ) -> Turn:
        condition = "attribute_not_exists(holder) OR holder = :s"
        values: dict[str, Any] = {":s": _s(slot), ":ss": {"SS": [slot]}, ":now": _s(now.isoformat())}
        # ``since`` is when the holder took the turn: kept when it takes it again; restarted
        # when it takes the turn over from a stale holder.
        since = "if_not_exists(since, :now)"
        if replacing is not None:
            condition += " OR holder = :r"
            values[":r"] = _s(replacing)
            since = ":now"
        try:
            reply = self.client.update_item(
                TableName=self.table,
                Key=self._turn_key(tenant, job_id),
                UpdateExpression=f"SET since = {since}, holder = :s DELETE waiting :ss",
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
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
            Key=self._turn_key(tenant, job_id),
            UpdateExpression="ADD waiting :ss",
            ExpressionAttributeValues={":ss": {"SS": [slot]}},
        )

    def pass_turn(self, tenant: str, job_id: str, slot: str, now: datetime) -> str | None:
        key = self._turn_key(tenant, job_id)
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
                        UpdateExpression="SET holder = :n, since = :now DELETE waiting :ns",
                        ConditionExpression="holder = :s AND contains(waiting, :n)",
                        ExpressionAttributeValues={
                            ":s": _s(slot),
                            ":n": _s(following),
                            ":ns": {"SS": [following]},
                            ":now": _s(now.isoformat()),
                        },
                    )
                    return following
                self.client.update_item(
                    TableName=self.table,
                    Key=key,
                    UpdateExpression="REMOVE holder, since",
                    # A slot that started waiting meanwhile gets the turn on the next round.
                    ConditionExpression="holder = :s AND attribute_not_exists(waiting)",
                    ExpressionAttributeValues={":s": _s(slot)},
                )
                return None
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
        raise RuntimeError(f"could not pass the turn of job {job_id}")

    # ---------------------------------------------------------------- executions

    @staticmethod
    def _execution_from_item(item: dict[str, Any]) -> Execution:
        return Execution.model_validate_json(item["doc"]["S"])

    def save_execution(self, execution: Execution, expect: Expect | None, ttl_epoch_s: int) -> None:
        item = {
            "pk": _s(job_pk(execution.tenant, execution.job_id)),
            "sk": _s(f"exec#{execution.slot}"),
            "status": _s(execution.status.value),
            "attempt": _n(execution.attempt),
            "doc": _s(execution.model_dump_json()),
            "expires_at": _n(ttl_epoch_s),
        }
        if execution.owner:
            item["owner"] = _s(execution.owner)
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        if expect is None:
            condition = "attribute_not_exists(pk)"
        else:
            parts = ["attribute_exists(pk)"]
            if expect.statuses:
                names["#st"] = "status"
                keys = []
                for i, status in enumerate(sorted(expect.statuses)):
                    values[f":st{i}"] = _s(status.value)
                    keys.append(f":st{i}")
                parts.append(f"#st IN ({', '.join(keys)})")
            if expect.attempt is not None:
                parts.append("attempt = :att")
                values[":att"] = _n(expect.attempt)
            if expect.owner is not None:
                names["#ow"] = "owner"
                parts.append("#ow = :ow")
                values[":ow"] = _s(expect.owner)
            elif expect.check_owner:
                names["#ow"] = "owner"
                parts.append("attribute_not_exists(#ow)")
            condition = " AND ".join(parts)
        request: dict[str, Any] = {
            "TableName": self.table,
            "Item": item,
            "ConditionExpression": condition,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if names:
            request["ExpressionAttributeNames"] = names
        if values:
            request["ExpressionAttributeValues"] = values
        try:
            self.client.put_item(**request)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            old = exc.response.get("Item")
            current = self._execution_from_item(old) if old and "doc" in old else None
            message = (
                "execution already exists" if expect is None else "execution is not in the expected state"
            )
            raise ExecutionConflictError(message, current) from None

    def get_execution(self, tenant: str, job_id: str, slot: str) -> Execution | None:
        reply = self.client.get_item(
            TableName=self.table,
            Key={"pk": _s(job_pk(tenant, job_id)), "sk": _s(f"exec#{slot}")},
            ConsistentRead=True,
        )
        item = reply.get("Item")
        return self._execution_from_item(item) if item else None

    def batch_get_executions(self, keys: Iterable[ExecutionKey]) -> dict[ExecutionKey, Execution]:
        unique = sorted(set(keys))
        items = self._batch_get([{"pk": _s(job_pk(t, j)), "sk": _s(f"exec#{s}")} for t, j, s in unique])
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
    ) -> Page[Execution]:
        items: list[Execution] = []
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :ex)",
            "ExpressionAttributeValues": {":pk": _s(job_pk(tenant, job_id)), ":ex": _s("exec#")},
            "ScanIndexForward": not newest_first,
            "ConsistentRead": True,
        }
        if status is not None:
            request["FilterExpression"] = "#st = :st"
            request["ExpressionAttributeNames"] = {"#st": "status"}
            request["ExpressionAttributeValues"][":st"] = _s(status.value)
        if cursor:
            request["ExclusiveStartKey"] = {"pk": _s(job_pk(tenant, job_id)), "sk": _s(f"exec#{cursor}")}
        while True:
            request["Limit"] = max(limit - len(items), 1) if status is None else 100
            reply = self.client.query(**request)
            for item in reply.get("Items", []):
                items.append(self._execution_from_item(item))
                if len(items) == limit:
                    return Page(items, items[-1].slot)
            last = reply.get("LastEvaluatedKey")
            if not last:
                return Page(items, None)
            request["ExclusiveStartKey"] = last
