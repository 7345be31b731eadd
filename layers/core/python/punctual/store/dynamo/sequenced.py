"""A transaction's writes one item at a time, for a table that refuses transactions.

A DynamoDB global table with multi-Region strong consistency (MRSC) does not support
``TransactWriteItems`` (docs/multi-region.md, F9 and section 3). The store's transactions are all
of one shape: the first item carries the condition that decides (a job created only if absent, or
replaced only at the version read), the later ones are derived items (listing, first timer) and
counters with conditions of their own (a tenant's quota, a dependency link). :func:`write_in_order`
runs such a list as single-item writes, in order, each returning the item it replaced. When one
fails its condition, the writes before it are undone (the item each replaced is put back, or the
item it created deleted), and a ``TransactionCanceledException`` is raised with the
``CancellationReasons`` a transaction would have had, so the callers read the outcome as they do
today.

What this is not: atomic or isolated. A process that dies between two writes leaves the first
ones in place (a job without its listing or first timer: the chain checker repairs a missing
chain, the next update rewrites the listing); a reader can see the job before its listing; an
undo puts back the item as it was before this sequence, over a concurrent writer's change to a
derived item. The decisive write comes first so that none of this can make two jobs of one id, or
replace a job that someone else changed.
"""

from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import ClientError

from punctual.store.dynamo.check_schema import check_writes

log = logging.getLogger("punctual.store")

CONDITION_FAILED = "ConditionalCheckFailedException"
KEY_ATTRIBUTES = ("pk", "sk")  # the table's key (store.dynamo.sizes counts the same two)
_OPERATIONS = {
    "Put": "put_item",
    "Update": "update_item",
    "Delete": "delete_item",
    "ConditionCheck": "update_item",
}
# A ConditionCheck becomes writes that change nothing and create nothing (:func:`_check`).


def write_in_order(client: Any, items: list[dict[str, Any]]) -> None:
    """Write ``items`` (``TransactItems`` entries: ``Put``, ``Update``, ``Delete``,
    ``ConditionCheck``) one by one.

    Raises
    ------
    ClientError
        ``TransactionCanceledException`` when an item's condition failed (that item's reason
        ``ConditionalCheckFailed``, with the old item when it asked for it; the writes before it
        undone); any other error of a write (a ``ClientError`` or not: a conflict the client's
        retries gave up on, a connection error), unchanged, after the same undo.
    """
    done: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
    for index, entry in enumerate(items):
        ((kind, body),) = entry.items()
        if kind not in _OPERATIONS:
            raise ValueError(f"{kind} has no single-item write (transaction item {index})")
        key = {name: body["Item"][name] for name in KEY_ATTRIBUTES} if kind == "Put" else body["Key"]
        try:
            if kind == "ConditionCheck":
                _check(client, body)
                continue
            reply = getattr(client, _OPERATIONS[kind])(**body, ReturnValues="ALL_OLD")
        except Exception as exc:
            # Any error, not only a refusal: a conflict that outlived the client's retries
            # (TransactionConflictError, whose 503 says nothing was written) or no answer at all
            # (QA22: they left the job item without its listing and first timer, firing nothing)
            _undo(client, done)
            response = exc.response if isinstance(exc, ClientError) else {}
            if response.get("Error", {}).get("Code") != CONDITION_FAILED:
                raise
            raise _cancelled(len(items), index, response.get("Item")) from exc
        done.append((body["TableName"], key, reply.get("Attributes")))


def _check(client: Any, check: dict[str, Any]) -> None:
    """A ``ConditionCheck``, as writes that change nothing and create nothing: where the item is
    there, an update of an attribute no item has (:data:`~punctual.store.dynamo.schema.UNCHANGED`);
    where it is not, a delete of nothing. Each adds the item's presence to the check's condition, so
    neither acts on an item in the other state (QA22: an update alone made the absent item, a job
    item without its document that readers met as a 500 and creates as a 409, and that stayed for
    good when the delete meant to take it away failed).

    Raises
    ------
    ClientError
        ``ConditionalCheckFailedException`` when the condition does not hold (with the item, when
        the check asked for it).
    """
    update, delete = check_writes(check)
    try:
        client.update_item(**update)
        return
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != CONDITION_FAILED or "Item" in exc.response:
            if check.get("ReturnValuesOnConditionCheckFailure") != "ALL_OLD":
                exc.response.pop("Item", None)
            raise  # the item is there and fails the condition (or another error)
    client.delete_item(**delete)


def _undo(client: Any, done: list[tuple[str, dict[str, Any], dict[str, Any] | None]]) -> None:
    """Put back what each write replaced, newest first; a write that created an item deletes it."""
    for table, key, old in reversed(done):
        try:
            if old is None:
                client.delete_item(TableName=table, Key=key)
            else:
                client.put_item(TableName=table, Item=old)
        except Exception:  # the next undo is still tried; the caller gets the first error
            log.exception("undoing a write to %s failed: the item stays as written", key)


def _cancelled(count: int, index: int, old: dict[str, Any] | None) -> ClientError:
    reasons: list[dict[str, Any]] = [{"Code": "None"} for _ in range(count)]
    reasons[index] = {"Code": "ConditionalCheckFailed", **({"Item": old} if old else {})}
    return ClientError(
        {
            "Error": {
                "Code": "TransactionCanceledException",
                "Message": f"item {index} failed its condition (written one item at a time)",
            },
            "CancellationReasons": reasons,
        },
        "TransactWriteItems",
    )
