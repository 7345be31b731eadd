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
5. A queue keeps its messages in one list, and moto finds a message by scanning it: every
   FIFO send scans it for the dedup id (and computes all the queue's attributes, counts
   included, three times: ``_validate_message`` and ``send_message`` read one of them);
   every delete scans it twice and rebuilds it, every ``ChangeMessageVisibility`` scans it;
   every receive lists all visible messages, computes all attributes twice per message
   it returns (the retention check), and deep-copies each. A burst of N slots is then
   O(N^2): 1,000 took minutes. A receive that finds only blocked groups spins (it waits
   for "any visible message", which is true at once) until its wait time ends.
   **Patch:** the list becomes an insertion-ordered dict with indexes by dedup id and by
   receipt handle (:class:`_Messages`, list-like for moto's own code); send reads only
   ``ContentBasedDeduplication``; delete and visibility changes look the handle up (a
   miss falls back to moto's scan, so an unknown handle fails as before); receive walks
   the messages in order and stops after ``count`` (same filters, same order, same group
   blocking, same receive counts, redrive and retention check, a shallow copy where moto
   deep-copies a message it then only reads), and a waiting receive sleeps on the
   queue's condition, woken by sends, deletes and visibility changes, and when the next message
   in flight or delayed becomes visible (QA30: once a second, so a message back from its
   visibility timeout was received up to 1 s late, which SQS answers at once). Sends, receives,
   deletes and visibility changes of one queue hold its lock, so concurrent receivers never get
   one message twice.
6. moto's response serializer walks each DynamoDB attribute value member by member
   through its shape (ten members, each looked up under several aliases): most of the
   CPU of a Query or GetItem answer. **Patch:** an ``AttributeValue`` that is already in
   wire form (``S``, ``N``, ``BOOL``, ``NULL``, ``SS``, ``NS``, ``M``, ``L`` with the
   types the wire uses, recursively) is written as it is, which is what the walk
   produces for it; anything else (binary, stray keys) takes moto's walk.
7. Every ``Item`` and ``Message`` moto ever creates (copies included) is appended to a
   class-wide list for moto's debug dashboard (``/moto-api/``), so the process only grows.
   **Patch:** those two lists keep nothing (the dashboard no longer lists items and messages).
8. A DynamoDB write is not atomic in moto: ``update_item`` reads the item, checks its condition,
   then writes (an item created by an update is put whole), with nothing held in between, and
   the server answers each request on its own thread. Two concurrent updates of one item then
   lose one of them (two parents of an ``after(...)`` child recording their success at once each
   saw only its own, and the child was never sent: found by the chaos phases), and two
   conditional claims can both pass. DynamoDB applies each write to an item atomically.
   **Patch:** the backend's writes (put, update, delete, batch and transactional writes) hold one
   lock (reentrant: a batch write puts through ``put_item``), so each is applied whole before the
   next starts. The handler's ``UpdateItem`` (it copies the stored item before the write) holds it
   too, and so does copying or serialising an item, which a read does while another thread may
   be changing that item in place (it raised "dictionary changed size during iteration").

9. moto refuses an update of an item over ~405 KB counting the attribute it replaces twice, its
   old value and its new one (``LimitedSizeDict.__setitem__``): a job of a 200 KB payload (256 KB
   allowed) could be created but not paused, resumed, replaced or rotated (a 500, QA21), which
   DynamoDB, counting the item as it will be, accepts. **Patch:** the replaced value is not
   counted; the limit is moto's own.

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
        # moto's own loops over the live dicts, and a put of a new partition on another request
        # thread meanwhile (an index Query beside registrations) raised "dictionary changed size
        # during iteration", a 500 (QA). The same list, sorted as moto sorts it, from copies (one
        # list() of a dict's values is one step that no other thread interleaves).
        if self.range_key_attr:
            items = [item for stored in list(self.items.values()) for item in list(stored.values())]
        else:
            items = list(self.items.values())
        return sorted(items, key=lambda x: (x.hash_key, x.range_key) if x.range_key else x.hash_key)

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
    _patch_sqs_index()
    _patch_serializer()
    _patch_module_list()
    _untrack()
    _patch_atomic_writes()
    _patch_item_size()
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


def _swap(owner: Any, name: str, value: Any) -> None:
    """Set ``owner.name`` (a class attribute), remembering the original for :func:`revert`."""
    _originals.setdefault("swapped", []).append((owner, name, owner.__dict__[name]))
    setattr(owner, name, value)


class _Messages:
    """A queue's messages in the order they were sent, standing in for moto's list.

    Iteration, ``len``, ``in``, ``append``, ``remove`` and indexing behave as on the list
    (iteration walks a snapshot, so moto's own code may mutate while it iterates), while
    removal is O(1) and :attr:`by_dedup` / :attr:`by_receipt` find a message without a
    scan. ``by_receipt`` is a cache: a miss is checked by scanning (see :func:`_find`).
    """

    __slots__ = ("by_dedup", "by_receipt", "order")

    def __init__(self, messages: Any = ()) -> None:
        self.order: dict[Any, None] = {}
        self.by_dedup: dict[Any, list[Any]] = {}
        self.by_receipt: dict[str, Any] = {}
        for message in messages:
            self.append(message)

    def append(self, message: Any) -> None:
        self.order[message] = None
        self.by_dedup.setdefault(message.deduplication_id, []).append(message)
        for handle in message.all_receipt_handles:
            if handle is not None:
                self.by_receipt[handle] = message

    def remove(self, message: Any) -> None:
        if message not in self.order:
            raise ValueError("message not in queue")
        del self.order[message]
        same = self.by_dedup.get(message.deduplication_id, [])
        if message in same:
            same.remove(message)
        if not same:
            self.by_dedup.pop(message.deduplication_id, None)
        for handle in message.all_receipt_handles:
            if handle is not None and self.by_receipt.get(handle) is message:
                del self.by_receipt[handle]

    def received(self, message: Any) -> None:
        """``message`` got a new receipt handle (moto keeps the old ones valid too)."""
        self.by_receipt[message.receipt_handle] = message

    def __iter__(self) -> Any:
        return iter(list(self.order))

    def __len__(self) -> int:
        return len(self.order)

    def __bool__(self) -> bool:
        return bool(self.order)

    def __contains__(self, message: Any) -> bool:
        return message in self.order

    def __getitem__(self, index: Any) -> Any:
        return list(self.order)[index]

    def __eq__(self, other: object) -> bool:
        return list(self.order) == (list(other) if isinstance(other, _Messages | list) else other)

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list

    def __repr__(self) -> str:
        return repr(list(self.order))


def _container(queue: Any) -> _Messages:
    """The queue's :class:`_Messages` (a list set by unpatched code is converted once)."""
    messages = queue._messages
    if not isinstance(messages, _Messages):
        messages = queue._messages = _Messages(messages)
    return messages


def _find(messages: _Messages, receipt_handle: str) -> Any:
    """The message that had ``receipt_handle`` (first in order, as moto's scan), or None."""
    message = messages.by_receipt.get(receipt_handle)
    if message is not None and message in messages.order and message.had_receipt_handle(receipt_handle):
        return message
    return next((m for m in messages.order if m.had_receipt_handle(receipt_handle)), None)


def _flag(value: Any) -> Any:
    """A queue attribute as ``Queue.attributes`` shows it (booleans as "true" / "false")."""
    return str(value).lower() if isinstance(value, bool) else value


def _patch_sqs_index() -> None:
    import moto.sqs.models as sqs_models
    from moto.sqs.exceptions import InvalidParameterValue, ReceiptHandleIsInvalid
    from moto.sqs.models import DEDUPLICATION_TIME_IN_SECONDS, Queue, SQSBackend, _filter_message_attributes

    original_init = Queue.__init__
    original_attributes = Queue.__dict__["attributes"]
    original_send = SQSBackend.send_message
    original_send_batch = SQSBackend.send_message_batch

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self._messages = _Messages(self._messages)

    def attributes(self: Any) -> dict[str, Any]:
        if getattr(_scope, "sending", 0) and not self.lambda_event_source_mappings:
            # All a send reads: the dict moto would build, less the O(depth) counts and the rest.
            if not self.fifo_queue:
                return {}
            return {"ContentBasedDeduplication": _flag(self.content_based_deduplication)}
        return original_attributes.fget(self)  # type: ignore[no-any-return]

    def sending(original: Any) -> Any:
        def send(self: Any, *args: Any, **kwargs: Any) -> Any:
            _scope.sending = getattr(_scope, "sending", 0) + 1
            try:
                return original(self, *args, **kwargs)
            finally:
                _scope.sending -= 1

        return send

    def add_message(self: Any, message: Any) -> None:
        messages = _container(self)
        with self._messages_lock:
            deduplicated = _flag(self.content_based_deduplication) == "true" or message.deduplication_id
            if self.fifo_queue and deduplicated:
                for m in messages.by_dedup.get(message.deduplication_id, ()):
                    diff = message.sent_timestamp - m.sent_timestamp
                    if diff / 1000 < DEDUPLICATION_TIME_IN_SECONDS:
                        return
            messages.append(message)
            self._messages_lock.notify_all()
        _event_source_mappings(self, message)

    def delete_message(self: Any, receipt_handle: str) -> None:
        if receipt_handle in self.deleted_messages:
            return  # already deleted: moto accepts it again
        messages = _container(self)
        with self._messages_lock:
            message = _find(messages, receipt_handle)
            if message is None:
                raise ReceiptHandleIsInvalid()
            messages.remove(message)
            self.pending_messages.discard(message)
            self.deleted_messages.update(message.all_receipt_handles)
            self._messages_lock.notify_all()  # its group may be free now

    def change_message_visibility(
        self: Any, queue_name: str, receipt_handle: str, visibility_timeout: int
    ) -> None:
        queue = self.get_queue(queue_name)
        messages = _container(queue)
        with queue._messages_lock:
            message = _find(messages, receipt_handle)
            if message is None:
                raise ReceiptHandleIsInvalid
            visibility_timeout_msec = int(visibility_timeout) * 1000
            given_visibility_timeout = sqs_models.unix_time_millis() + visibility_timeout_msec  # type: ignore[attr-defined]
            if given_visibility_timeout - message.sent_timestamp > 43200 * 1000:
                raise InvalidParameterValue(
                    f"Value {visibility_timeout} for parameter VisibilityTimeout is invalid. Reason: Total "
                    "VisibilityTimeout for the message is beyond the limit [43200 seconds]"
                )
            message.change_visibility(visibility_timeout)
            if message.visible and message in queue.pending_messages:
                queue.pending_messages.remove(message)
            queue._messages_lock.notify_all()

    def purge_queue(self: Any, queue_name: str) -> None:
        queue = self.get_queue(queue_name)
        now = sqs_models.unix_time()  # type: ignore[attr-defined]
        if (
            sqs_models.sqs_enforce_strict_queue_purge_behaviour()  # type: ignore[attr-defined]
            and queue.last_purged_at is not None
            and now - queue.last_purged_at < 60
        ):
            raise sqs_models.PurgeQueueInProgress(queue.name)  # type: ignore[attr-defined]
        with queue._messages_lock:
            queue.last_purged_at = now
            queue._messages = _Messages()
            queue._pending_messages = set()

    def retention_ok(self: Any, queue_name: str, message: Any) -> bool:
        retention_period = self.get_queue(queue_name).message_retention_period
        return bool(retention_period + message.sent_timestamp / 1000 > sqs_models.unix_time())  # type: ignore[attr-defined]

    def select(
        backend: Any, queue: Any, queue_name: str, count: int, visibility_timeout: int, names: list[str]
    ) -> tuple[list[Any], list[Any]]:
        """One pass of moto's receive loop, walking the messages in order until ``count``."""
        result: list[Any] = []
        to_dlq: list[Any] = []
        pending = queue.pending_messages
        pending_groups = queue.pending_message_groups
        redrive = queue.dead_letter_queue is not None and queue.redrive_policy
        now = sqs_models.unix_time_millis()  # type: ignore[attr-defined]
        for message in _container(queue).order:
            if not now > message.visible_at or now < message.delayed_until:
                continue  # in flight or delayed: not in moto's ``queue.messages``
            if message in pending:
                pending.remove(message)  # visible again: its consumer timed out
                pending_groups = queue.pending_message_groups
            if message.group_id and queue.fifo_queue and message.group_id in pending_groups:
                continue  # its group is being processed
            if redrive and message.approximate_receive_count >= queue.redrive_policy["maxReceiveCount"]:
                to_dlq.append(message)
                continue
            pending.add(message)
            message.mark_received(visibility_timeout=visibility_timeout)
            _container(queue).received(message)
            reply = object.__new__(type(message))  # moto deep-copies; the copy is only read
            reply.__dict__.update(message.__dict__)
            _filter_message_attributes(reply, names)
            if not backend.is_message_valid_based_on_retention_period(queue_name, message):
                break
            result.append(reply)
            if len(result) >= count:
                break
        return result, to_dlq

    def until_visible_s(queue: Any) -> float:
        """Seconds until the next message in flight or delayed becomes visible: a waiting receive
        wakes then, as SQS answers a long poll as soon as a message is visible (QA30: it looked again
        only each second, so a message back from its visibility timeout came up to 1 s late)."""
        now = sqs_models.unix_time_millis()  # type: ignore[attr-defined]
        later = [t for m in _container(queue).order for t in (m.visible_at, m.delayed_until) if t >= now]
        return max(0.001, (min(later) - now) / 1000.0) if later else 1.0

    def receive_message(
        self: Any,
        queue_name: str,
        count: int,
        wait_seconds_timeout: int,
        visibility_timeout: int,
        message_attribute_names: list[str] | None = None,
    ) -> list[Any]:
        names = message_attribute_names or []
        queue = self.get_queue(queue_name)
        polling_end = sqs_models.unix_time() + wait_seconds_timeout  # type: ignore[attr-defined]
        while True:
            with queue._messages_lock:
                result, to_dlq = select(self, queue, queue_name, count, visibility_timeout, names)
                for message in to_dlq:
                    _container(queue).remove(message)
                if not result and not to_dlq and wait_seconds_timeout:
                    left = polling_end - sqs_models.unix_time()  # type: ignore[attr-defined]
                    if left > 0:  # (woken by a send or a visibility change; else by the clock)
                        queue._messages_lock.wait(min(left, 1.0, until_visible_s(queue)))
                        continue
            for message in to_dlq:
                queue.dead_letter_queue.add_message(message)
            if result or not wait_seconds_timeout or sqs_models.unix_time() > polling_end:  # type: ignore[attr-defined]
                return result

    for owner, name, value in (
        (Queue, "__init__", init),
        (Queue, "attributes", property(attributes)),
        (Queue, "add_message", add_message),
        (Queue, "delete_message", delete_message),
        (SQSBackend, "send_message", sending(original_send)),
        (SQSBackend, "send_message_batch", sending(original_send_batch)),
        (SQSBackend, "change_message_visibility", change_message_visibility),
        (SQSBackend, "purge_queue", purge_queue),
        (SQSBackend, "is_message_valid_based_on_retention_period", retention_ok),
        (SQSBackend, "receive_message", receive_message),
    ):
        _swap(owner, name, value)


def _event_source_mappings(queue: Any, message: Any) -> None:
    """moto's ``Queue.add_message`` after the append: hand the queue to its Lambda mappings."""
    if not queue.lambda_event_source_mappings:
        return
    from moto.sqs.models import sqs_backends

    for arn, esm in queue.lambda_event_source_mappings.items():
        if not esm.enabled:
            continue
        backend = sqs_backends[queue.account_id][queue.region]
        messages = backend.receive_message(
            queue.name, esm.batch_size, queue.receive_message_wait_time_seconds, queue.visibility_timeout
        )
        from moto.awslambda.utils import get_backend

        result = get_backend(queue.account_id, queue.region).send_sqs_batch(arn, messages, queue.queue_arn)
        # receive_message gave each message a receipt handle (moto types it optional: unreceived)
        handles = [m.receipt_handle for m in messages if m.receipt_handle is not None]
        if result:
            for handle in handles:
                backend.delete_message(queue.name, handle)
        else:
            for handle in handles:
                backend.change_message_visibility(queue.name, handle, visibility_timeout=0)


_WIRE_SCALARS = {"S": str, "N": str, "BOOL": bool, "NULL": bool}
_WIRE_SETS = frozenset({"SS", "NS"})


def _wire_form(value: Any) -> bool:
    """True when ``value`` is a DynamoDB attribute value exactly as the JSON wire carries it."""
    if type(value) is not dict or len(value) != 1:
        return False
    ((kind, inner),) = value.items()
    scalar = _WIRE_SCALARS.get(kind)
    if scalar is not None:
        return type(inner) is scalar
    if kind in _WIRE_SETS:
        return type(inner) is list and all(type(v) is str for v in inner)
    if kind == "M":
        return type(inner) is dict and all(type(k) is str and _wire_form(v) for k, v in inner.items())
    if kind == "L":
        return type(inner) is list and all(_wire_form(v) for v in inner)
    return False


def _patch_serializer() -> None:
    from moto.core.serialize import BaseJSONSerializer

    original = BaseJSONSerializer.__dict__["_serialize_type_structure"]

    def serialize_structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if key and shape.name == "AttributeValue" and _wire_form(value):
            serialized[self.get_serialized_name(shape, key)] = value
            return
        original(self, serialized, value, shape, key)

    _swap(BaseJSONSerializer, "_serialize_type_structure", serialize_structure)


class _Untracked(list):  # type: ignore[type-arg]
    """A class's ``instances_tracked`` that keeps nothing."""

    def append(self, item: Any) -> None:
        pass


def _untrack() -> None:
    from moto.dynamodb.models.dynamo_type import Item
    from moto.sqs.models import Message

    for cls in (Item, Message):
        _swap(cls, "instances_tracked", _Untracked())


_WRITES = threading.RLock()  # every DynamoDB write of this process (patch 8)


def _patch_atomic_writes() -> None:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.dynamo_type import Item
    from moto.dynamodb.responses import DynamoHandler, DynamoResult

    def atomic(original: Any) -> Any:
        def write(self: Any, *args: Any, **kwargs: Any) -> Any:
            with _WRITES:
                return original(self, *args, **kwargs)

        return write

    for name in ("put_item", "update_item", "delete_item", "transact_write_items"):
        _swap(DynamoDBBackend, name, atomic(DynamoDBBackend.__dict__[name]))
    # The handler's UpdateItem copies the stored item (for its ALL_OLD / UPDATED_* answers) before
    # it calls the backend: held too, so the copy and the write see one version of the item.
    _swap(DynamoHandler, "update_item", atomic(DynamoHandler.__dict__["update_item"]))
    # A write changes a stored item in place: copying or serialising one (a read's answer) while
    # another thread writes it raised "dictionary changed size during iteration" (a 500)
    for name in ("__deepcopy__", "to_json", "describe_attrs"):
        _swap(Item, name, atomic(Item.__dict__[name]))
    _swap(DynamoResult, "__init__", atomic(DynamoResult.__dict__["__init__"]))  # an answer's conversion


def _patch_item_size() -> None:
    from moto.dynamodb.exceptions import ItemSizeTooLarge
    from moto.dynamodb.models.dynamo_type import DynamoType, LimitedSizeDict
    from moto.dynamodb.models.utilities import bytesize

    def size(part: Any) -> int:
        return int(part.size()) if type(part) is DynamoType else bytesize(str(part))

    def __setitem__(self: Any, key: str, value: Any) -> None:
        # moto's sum of every name and value, less the value this write replaces (patch 9)
        kept = sum(size(name) + size(held) for name, held in self.items() if name != key)
        if kept + bytesize(key) + size(value) > ITEM_SIZE_LIMIT:
            raise ItemSizeTooLarge
        dict.__setitem__(self, key, value)

    _swap(LimitedSizeDict, "__setitem__", __setitem__)


ITEM_SIZE_LIMIT = 405_000  # moto's (LimitedSizeDict): between DynamoDB's 400 KB and what it takes


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

    for owner, name, value in reversed(_originals.get("swapped", [])):
        setattr(owner, name, value)  # first: patch 8 wraps the patched transact_write_items
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
