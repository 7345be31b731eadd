"""Dependencies in DynamoDB: a child's parents per slot, a parent's dependants."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from punctual.store.base import DependencyRepository
from punctual.store.dynamo import dependency_schema, schema
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
            Key=dependency_schema.dependency_key(tenant, child_id, slot),
            **dependency_schema.record_parent(parent_id, ttl_epoch_s).fields(),
            ReturnValues="ALL_NEW",
        )
        return frozenset(reply["Attributes"]["parents"]["SS"])

    def dependency_graph(self, tenant: str) -> int:
        item = self.client.get_item(
            TableName=self.table, Key=dependency_schema.graph_key(tenant), ConsistentRead=True
        ).get("Item")
        return dependency_schema.graph_version(item)

    def claim_child_dispatch(self, tenant: str, child_id: str, slot: str) -> bool:
        return self._write_if(
            "update_item",
            Key=dependency_schema.dependency_key(tenant, child_id, slot),
            **dependency_schema.claim_child().fields(),
        )

    def waiting_child_slots(self, tenant: str, child_id: str, limit: int) -> list[tuple[str, frozenset[str]]]:
        request: dict[str, Any] = {
            "TableName": self.table,
            **schema.partition(job_pk(tenant, child_id), dependency_schema.DEPENDENCY_PREFIX).fields(),
            "ScanIndexForward": False,  # newest slot first
            "ConsistentRead": True,  # a parent's success a moment ago counts
        }
        waiting: list[tuple[str, frozenset[str]]] = []
        read = 0
        while read < limit:
            reply = self.client.query(**request, Limit=min(limit - read, 100))
            items = reply.get("Items", [])
            read += len(items)
            waiting += [
                found for item in items if (found := dependency_schema.waiting_child_slot(item)) is not None
            ]
            if "LastEvaluatedKey" not in reply or not items:
                break
            request["ExclusiveStartKey"] = reply["LastEvaluatedKey"]
        return waiting

    def set_dependents(self, tenant: str, child_id: str, parents: Sequence[str], present: bool) -> None:
        # One transaction per parent: a parent gone or a link already as wanted leaves the others.
        for parent in parents:
            pair = self._add_link if present else self._remove_link
            self._transact_with_links([], {parent: pair(tenant, parent, child_id)})

    def list_dependents(self, tenant: str, parent_id: str) -> list[str]:
        children: list[str] = []
        request: dict[str, Any] = {
            "TableName": self.table,
            **schema.partition(job_pk(tenant, parent_id), dependency_schema.CHILD_PREFIX).fields(),
            # Strongly consistent: a child linked a moment before its parent's slot ended must
            # not be left out of that slot (only parents with dependents make this read).
            "ConsistentRead": True,
        }
        while True:
            reply = self.client.query(**request)
            children.extend(
                item["sk"]["S"].removeprefix(dependency_schema.CHILD_PREFIX)
                for item in reply.get("Items", [])
            )
            last = reply.get("LastEvaluatedKey")
            if not last:
                return sorted(children)
            request["ExclusiveStartKey"] = last
