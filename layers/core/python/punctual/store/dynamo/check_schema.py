"""The requests that stand for a transaction's ``ConditionCheck`` where the table takes no
transactions (:mod:`punctual.store.dynamo.sequenced`): writes that change nothing and create nothing.

Where the item is there, an update of an attribute no item has (:data:`schema.UNCHANGED`); where it
is not, a delete of nothing. Each adds the item's presence to the check's condition, so neither
acts on an item in the other state (QA22: an update alone made the absent item).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from punctual.store.dynamo.schema import UNCHANGED

PRESENCE_ATTRIBUTE = "pk"  # the partition key, which every item has: whether a checked item is there


def check_writes(check: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The update to send where the checked item is there, and the delete where it is not."""
    condition = check.get("ConditionExpression")
    names = {**check.get("ExpressionAttributeNames", {}), "#check_key": PRESENCE_ATTRIBUTE}
    request: dict[str, Any] = {"TableName": check["TableName"], "Key": check["Key"]}
    if "ExpressionAttributeValues" in check:
        request["ExpressionAttributeValues"] = check["ExpressionAttributeValues"]
    both = f" AND ({condition})" if condition else ""
    unchanged = UNCHANGED.fields()
    update = {
        **request,
        "UpdateExpression": unchanged["UpdateExpression"],
        "ExpressionAttributeNames": {**names, **unchanged["ExpressionAttributeNames"]},
        "ConditionExpression": f"attribute_exists(#check_key){both}",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    delete = {
        **request,
        "ExpressionAttributeNames": names,
        "ConditionExpression": f"attribute_not_exists(#check_key){both}",
    }
    return update, delete
