"""Schedule groups in DynamoDB: one item per group in its tenant's listing partition.

``pk=tenant#<tenant>  sk=group#<name>`` beside the tenant's job listing (``job#<id>``), so the
groups of a tenant are one query in name order; ``updated_at`` (ISO, milliseconds) is the
version every change is conditional on.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from punctual.store.base import (
    GroupConflictError,
    GroupExistsError,
    Page,
    ScheduleGroup,
    ScheduleGroupRepository,
)
from punctual.store.dynamo import schema
from punctual.store.dynamo.base import DynamoBase
from punctual.store.dynamo.schema import _s, tenant_pk
from punctual.timing.instants import format_instant_ms


def _item(group: ScheduleGroup) -> dict[str, Any]:
    token = {"client_token": _s(group.client_token)} if group.client_token else {}
    return {
        **token,
        **schema.group_key(group.tenant, group.name),
        "name": _s(group.name),
        "state": _s(group.state),
        "created_at": _s(format_instant_ms(group.created_at)),
        "updated_at": _s(format_instant_ms(group.updated_at)),
        "tags": {"M": {key: _s(value) for key, value in group.tags.items()}},
    }


def _group(tenant: str, item: dict[str, Any]) -> ScheduleGroup:
    return ScheduleGroup(
        tenant=tenant,
        name=item["name"]["S"],
        state=item["state"]["S"],
        created_at=datetime.fromisoformat(item["created_at"]["S"]),
        updated_at=datetime.fromisoformat(item["updated_at"]["S"]),
        tags={key: value["S"] for key, value in item.get("tags", {}).get("M", {}).items()},
        client_token=item["client_token"]["S"] if "client_token" in item else None,
    )


def _failed_condition(exc: ClientError) -> bool:
    return str(exc.response["Error"]["Code"]) == "ConditionalCheckFailedException"


class DynamoGroups(DynamoBase, ScheduleGroupRepository):
    """Schedule groups in DynamoDB."""

    def create_group(self, group: ScheduleGroup) -> None:
        try:
            self.client.put_item(TableName=self.table, Item=_item(group), **schema.CREATE.fields())
        except ClientError as exc:
            if _failed_condition(exc):
                raise GroupExistsError(f"schedule group {group.name!r} exists") from None
            raise

    def get_group(self, tenant: str, name: str) -> ScheduleGroup | None:
        item = self.client.get_item(
            TableName=self.table,
            Key=schema.group_key(tenant, name),
            ConsistentRead=True,
        ).get("Item")
        return _group(tenant, item) if item else None

    def list_groups(
        self, tenant: str, limit: int, cursor: str | None = None, prefix: str | None = None
    ) -> Page[ScheduleGroup]:
        found: list[ScheduleGroup] = []
        start: dict[str, Any] | None = schema.group_key(tenant, cursor) if cursor else None
        while True:
            request: dict[str, Any] = {
                "TableName": self.table,
                **schema.partition(tenant_pk(tenant), schema.group_sk(prefix or "")).fields(),
                "Limit": limit - len(found),
                "ConsistentRead": True,
            }
            if start:
                request["ExclusiveStartKey"] = start
            reply = self.client.query(**request)
            found.extend(_group(tenant, item) for item in reply.get("Items", []))
            start = reply.get("LastEvaluatedKey")
            if len(found) >= limit:
                return Page(found, found[-1].name if start else None)
            if not start:
                return Page(found, None)

    def update_group(self, group: ScheduleGroup, expected_updated_at: datetime) -> None:
        try:
            self.client.put_item(
                TableName=self.table,
                Item=_item(group),
                **schema.unchanged_group(format_instant_ms(expected_updated_at)).fields(),
            )
        except ClientError as exc:
            if _failed_condition(exc):
                raise GroupConflictError(
                    f"schedule group {group.name!r} is gone or changed meanwhile"
                ) from None
            raise

    def delete_group(self, tenant: str, name: str) -> None:
        self.client.delete_item(TableName=self.table, Key=schema.group_key(tenant, name))
