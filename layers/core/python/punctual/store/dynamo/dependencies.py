"""Dependencies in DynamoDB: a child's parents per slot, a parent's dependants."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from punctual.store.base import DependencyRepository
from punctual.store.dynamo import schema
from punctual.store.dynamo.base import DynamoBase
from punctual.store.dynamo.schema import job_pk


def link_items(table: str, tenant: str, parent: str, child_id: str, present: bool) -> list[dict[str, Any]]:
    """The two transaction items that record (``present``) or remove ``child_id`` as a dependent
    of ``parent``: the link, and the parent job's count, each conditional so that the count
    moves only with the link and only on a parent that exists."""
    key = schema.dependent_key(tenant, parent, child_id)
    link: dict[str, Any] = (
        {"Put": {"TableName": table, "Item": key, **schema.CREATE.fields()}}
        if present
        else {"Delete": {"TableName": table, "Key": key, **schema.EXISTS.fields()}}
    )
    count = {
        "Update": {
            "TableName": table,
            "Key": schema.job_key(tenant, parent),
            **schema.count_dependent(1 if present else -1).fields(),
        }
    }
    return [link, count]


def transact_with_links(
    client: Any, items: list[dict[str, Any]], links: dict[str, list[dict[str, Any]]]
) -> None:
    """Write ``items`` and the link pairs of ``links`` (parent -> :func:`link_items`) in one transaction.

    A pair whose condition fails (the link already as wanted, or the parent gone) is left out and
    the rest is tried again; a failure among ``items`` is raised for the caller to read (its
    ``CancellationReasons`` index ``items`` as given).
    """
    pending = dict(links)
    while True:
        parents = list(pending)
        try:
            client.transact_write_items(TransactItems=items + [i for p in parents for i in pending[p]])
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
        # One transaction per parent: a parent gone or a link already as wanted leaves the others.
        for parent in parents:
            transact_with_links(
                self.client, [], {parent: link_items(self.table, tenant, parent, child_id, present)}
            )

    def list_dependents(self, tenant: str, parent_id: str) -> list[str]:
        children: list[str] = []
        request: dict[str, Any] = {
            "TableName": self.table,
            **schema.partition(job_pk(tenant, parent_id), schema.CHILD_PREFIX).fields(),
            # Strongly consistent: a child linked a moment before its parent's slot ended must
            # not be left out of that slot (only parents with dependents make this read).
            "ConsistentRead": True,
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
