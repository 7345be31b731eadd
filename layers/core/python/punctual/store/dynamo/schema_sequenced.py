"""The request shapes of :mod:`.sequenced` (a transaction written one item at a time on a table
without transactions), beside :mod:`.schema`, which holds every other key and expression of the
table: an item's primary key, and a ``ConditionCheck`` as an update that changes nothing."""

from __future__ import annotations

from typing import Any

KEY_ATTRIBUTES = ("pk", "sk")
# A ConditionCheck written alone: an update with the check's condition that removes an attribute
# no item has, so it changes nothing.
CHECK_ATTRIBUTE = "__condition_check__"


def check_as_update(check: dict[str, Any]) -> dict[str, Any]:
    """A transaction's ``ConditionCheck`` request as an ``UpdateItem`` request that writes nothing."""
    names = {**check.get("ExpressionAttributeNames", {}), "#check": CHECK_ATTRIBUTE}
    return {**check, "UpdateExpression": "REMOVE #check", "ExpressionAttributeNames": names}


def key_of(item: dict[str, Any]) -> dict[str, Any]:
    """The primary key of a whole item (its ``pk`` and ``sk``)."""
    return {name: item[name] for name in KEY_ATTRIBUTES}
