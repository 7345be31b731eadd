"""Patches to moto, applied only inside the local ``aws`` process, so that local mode stays
usable with a few thousand jobs.

moto 5.2.5 answers correctly but does some things whose cost grows with the *whole table*
or the whole queue, or with nothing useful at all:

1. ``Table.query`` on the base table looks at every item of the table to find those of one
   partition (``[i for i in self.all_items() if i.hash_key == hash_key]``). Punctual reads a
   timer bucket every second per near shard, and a job's history, by partition.
   **Patch:** for a base-table query, hand the original code only the items of that
   partition (a thread-local scope makes ``all_items`` return them for this call only).
   Index queries and scans are untouched.
2. ``transact_write_items`` deep-copies every table it touches before it starts, to roll
   back on failure. Punctual registers, replaces and deletes jobs in transactions, so each
   registration copies the table. **Patch:** snapshot only the items the transaction
   names (its keys are unique within a transaction: moto refuses it otherwise), let the
   original run with the table "copies" being the tables themselves, and on failure put
   those items back. Tables with a stream keep the original behaviour (a rollback must
   also undo stream records).
3. An SQS queue computes its attributes, ``ApproximateNumberOf*`` counts included, for
   every message sent (``_validate_message`` and ``send_message`` read one attribute
   from the full dict) and several times per message received (the retention check);
   each count asks every message in the queue for the time, which moto computes through
   two ``datetime`` calls. A burst of a few thousand slots then takes minutes.
   **Patch:** the visible-message list and the three counts read the clock once per call
   and compare each message's ``visible_at`` / ``delayed_until`` with it, exactly as
   ``Message.visible`` and ``Message.delayed`` do.
4. The server finds the service of every request under one global lock, listing moto's
   package directory (``listdir`` and an ``isdir`` per service) each time.
   **Patch:** that list is computed once (the installed package does not change).

Everything else (conditions, cancellation reasons, ordering, paging, projections) is
moto's own code. ``tests/e2e/test_motopatch.py`` runs the queries and transactions
Punctual makes against a patched and an unpatched backend and compares every answer.

The patches are written for one moto version; on another, :func:`apply` does nothing and
says so (the equivalence test then shows whether they still fit).
"""

from __future__ import annotations

import copy
import logging
import threading
from typing import Any

log = logging.getLogger("local.motopatch")

PATCHED_FOR = "5.2.5"

_scope = threading.local()
_originals: dict[str, Any] = {}  # what apply() replaced, for revert()


class _CopyShim:
    """``copy`` as seen by moto's DynamoDB backend: deep copies of a *table* are skipped when asked."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        from moto.dynamodb.models.table import Table

        if getattr(_scope, "keep_tables", False) and isinstance(value, Table):
            return value  # the transaction snapshots the items it touches instead
        return copy.deepcopy(value, memo)


def _key_of(table: Any, attributes: dict[str, Any]) -> tuple[Any, Any] | None:
    from moto.dynamodb.models.dynamo_type import DynamoType

    try:
        hash_key = DynamoType(attributes[table.hash_key_attr])
        range_key = DynamoType(attributes[table.range_key_attr]) if table.range_key_attr else None
    except (KeyError, TypeError):
        return None  # moto's own validation rejects the transaction
    return hash_key, range_key


def _snapshot(
    backend: Any, transact_items: list[dict[str, Any]]
) -> list[tuple[Any, Any, Any, bool, Any]] | None:
    """(table, hash, range, partition existed, item copy or None) per item; None: no fast path."""
    snapshots = []
    for entry in transact_items:
        if len(entry) != 1:
            return None
        op_type, op = next(iter(entry.items()))
        try:
            table = backend.get_table(op.get("TableName"))
        except Exception:
            return None
        if table.stream_shard is not None or not table.range_key_attr:
            return None
        key = _key_of(table, op.get("Item") if op_type == "Put" else op.get("Key") or {})
        if key is None:
            return None
        hash_key, range_key = key
        existed = hash_key in table.items
        current = table.items[hash_key].get(range_key) if existed else None
        snapshots.append((table, hash_key, range_key, existed, copy.deepcopy(current)))
    return snapshots


def _restore(snapshots: list[tuple[Any, Any, Any, bool, Any]]) -> None:
    for table, hash_key, range_key, existed, item in reversed(snapshots):
        if item is not None:
            table.items[hash_key][range_key] = item
        elif hash_key in table.items:
            table.items[hash_key].pop(range_key, None)
            if not existed and not table.items[hash_key]:
                del table.items[hash_key]


def apply() -> bool:
    """Patch moto's DynamoDB in this process (idempotent); False when the version does not match."""
    if _originals:
        return True
    import moto
    import moto.dynamodb.models as backend_module
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    if moto.__version__ != PATCHED_FOR:
        log.warning(
            "moto %s is not %s: running unpatched (slower with many jobs)", moto.__version__, PATCHED_FOR
        )
        return False

    original_all_items = Table.all_items
    original_query = Table.query
    original_transact = DynamoDBBackend.transact_write_items

    def all_items(self: Any) -> Any:
        partition = getattr(_scope, "partition", None)
        if partition is not None and partition[0] is self:
            return list(partition[1])
        return original_all_items(self)

    def query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)
        if index_name or hash_key is None or not self.range_key_attr:
            return original_query(self, hash_key, *args, **kwargs)
        items = self.items[hash_key].values() if hash_key in self.items else ()
        _scope.partition = (self, list(items))
        try:
            return original_query(self, hash_key, *args, **kwargs)
        finally:
            _scope.partition = None

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        snapshots = _snapshot(self, transact_items) if len(transact_items) <= 100 else None
        if snapshots is None:
            return original_transact(self, transact_items)
        _scope.keep_tables = True
        try:
            return original_transact(self, transact_items)
        except Exception:
            _restore(snapshots)
            raise
        finally:
            _scope.keep_tables = False

    _originals.update(
        all_items=original_all_items,
        query=original_query,
        transact_write_items=original_transact,
        copy=backend_module.copy,  # type: ignore[attr-defined]
    )
    Table.all_items = all_items  # type: ignore[method-assign]
    Table.query = query  # type: ignore[method-assign]
    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    backend_module.copy = _CopyShim()  # type: ignore[attr-defined,assignment]
    _patch_sqs()
    _patch_module_list()
    return True


def _patch_sqs() -> None:
    import moto.sqs.models as sqs_models
    from moto.sqs.models import Queue

    def now_ms() -> float:
        return float(sqs_models.unix_time_millis())  # type: ignore[attr-defined]

    def messages(self: Any) -> list[Any]:
        now = now_ms()
        return [m for m in self._messages if now > m.visible_at and not now < m.delayed_until]

    def not_visible(self: Any) -> int:
        now = now_ms()
        return sum(1 for m in self._messages if not now > m.visible_at)

    def delayed(self: Any) -> int:
        now = now_ms()
        return sum(1 for m in self._messages if now < m.delayed_until)

    _originals.update(
        sqs_messages=Queue.__dict__["messages"],
        sqs_not_visible=Queue.__dict__["approximate_number_of_messages_not_visible"],
        sqs_delayed=Queue.__dict__["approximate_number_of_messages_delayed"],
    )
    Queue.messages = property(messages)  # type: ignore[assignment,method-assign]
    Queue.approximate_number_of_messages_not_visible = property(not_visible)  # type: ignore[assignment,method-assign]
    Queue.approximate_number_of_messages_delayed = property(delayed)  # type: ignore[assignment,method-assign]


def _patch_module_list() -> None:
    from moto import backends

    modules = tuple(backends.list_of_moto_modules())
    _originals["list_of_moto_modules"] = backends.list_of_moto_modules
    backends.list_of_moto_modules = lambda: modules


def revert() -> None:
    """Undo :func:`apply` (tests compare patched and unpatched moto in one process)."""
    if not _originals:
        return
    import moto.dynamodb.models as backend_module
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    Table.all_items = _originals["all_items"]  # type: ignore[method-assign]
    Table.query = _originals["query"]  # type: ignore[method-assign]
    DynamoDBBackend.transact_write_items = _originals["transact_write_items"]  # type: ignore[method-assign]
    backend_module.copy = _originals["copy"]  # type: ignore[attr-defined]
    from moto import backends
    from moto.sqs.models import Queue

    Queue.messages = _originals["sqs_messages"]  # type: ignore[method-assign]
    Queue.approximate_number_of_messages_not_visible = _originals["sqs_not_visible"]  # type: ignore[method-assign]
    Queue.approximate_number_of_messages_delayed = _originals["sqs_delayed"]  # type: ignore[method-assign]
    backends.list_of_moto_modules = _originals["list_of_moto_modules"]
    _originals.clear()


def applied() -> bool:
    return bool(_originals)
