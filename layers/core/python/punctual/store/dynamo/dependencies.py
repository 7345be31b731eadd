"""Dependencies in DynamoDB: a child's parents per slot, a parent's dependants."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from punctual.store.base import DependencyRepository
from punctual.store.dynamo import schema
from punctual.store.dynamo.base import DynamoBase
from punctual.store.dynamo.schema import job_pk


class DynamoDependencies(DynamoBase, DependencyRepository):
    """Dependencies in DynamoDB: a child's parents per slot, a parent's dependants."""

    # ---------------------------------------------------------------- dependencies

    def record_parent_success(
        self, tenant: str, child_id: str, slot: str, parent_id: str, ttl_epoch_s: int
    ) -> frozenset[str]:
        reply = self.client.update_item(
            TableName=self.table,
            Key=schema.dependency_key(tenant, child_id, slot),
            **schema.record_parent(parent_id, ttl_epoch_s).fields(),
            ReturnValues="ALL_NEW",
        )
        return frozenset(reply["Attributes"]["parents"]["SS"])

    def claim_child_dispatch(self, tenant: str, child_id: str, slot: str) -> bool:
        return self._write_if(
            "update_item", Key=schema.dependency_key(tenant, child_id, slot), **schema.claim_child().fields()
        )

    def set_dependents(self, tenant: str, child_id: str, parents: Sequence[str], present: bool) -> None:
        for parent in parents:
            key = schema.dependent_key(tenant, parent, child_id)
            # The link and the parent's count change together, and only if the link changes.
            link: dict[str, Any] = (
                {
                    "Put": {
                        "TableName": self.table,
                        "Item": key,
                        **schema.CREATE.fields(),
                    }
                }
                if present
                else {
                    "Delete": {
                        "TableName": self.table,
                        "Key": key,
                        **schema.EXISTS.fields(),
                    }
                }
            )
            count = {
                "Update": {
                    "TableName": self.table,
                    "Key": schema.job_key(tenant, parent),
                    **schema.count_dependent(1 if present else -1).fields(),
                }
            }
            try:
                self.client.transact_write_items(TransactItems=[link, count])
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "TransactionCanceledException":
                    raise
                # The link was already as wanted, or the parent is gone: nothing to count.
                reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
                if (
                    reasons
                    and reasons[0] != "ConditionalCheckFailed"
                    and reasons[1:2] != ["ConditionalCheckFailed"]
                ):
                    raise

    def list_dependents(self, tenant: str, parent_id: str) -> list[str]:
        children: list[str] = []
        request: dict[str, Any] = {
            "TableName": self.table,
            **schema.partition(job_pk(tenant, parent_id), schema.CHILD_PREFIX).fields(),
        }
        while True:
            reply = self.client.query(**request)
            children.extend(
                item["sk"]["S"].removeprefix(schema.CHILD_PREFIX) for item in reply.get("Items", [])
            )
            last = reply.get("LastEvaluatedKey")
            if not last:
                return sorted(children)
            request["ExclusiveStartKey"] = last
