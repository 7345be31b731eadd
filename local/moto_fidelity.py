"""moto's DynamoDB, as stale and as contentious as DynamoDB: behind reads and transaction conflicts.

moto answers every read from the latest write and runs transactions one after another, so no
test against it can meet the two things DynamoDB does that the core must survive. This module
wraps moto's DynamoDB request handlers (in the local ``aws`` process, or in-process around
``mock_aws`` in tests) with the simulation of :mod:`punctual.store.memory.fidelity`:

* **Stale reads.** ``GetItem``, ``BatchGetItem`` and ``Query`` without ``ConsistentRead``
  answer each item as it was at a random instant up to ``stale_read_s`` seconds earlier (the
  handlers record every item's versions as they are written): an item created since is
  absent, one changed since is its earlier version, one deleted since is still there
  (``GetItem``/``BatchGetItem``; a ``Query`` does not bring a deleted item back). Reads with a
  projection or on an index answer as moto does.
* **Transaction conflicts.** An item a ``TransactWriteItems`` has written is one a transaction
  may hold. A transaction touching such an item is cancelled, with ``conflict_share``
  probability, as DynamoDB cancels one that meets another transaction:
  ``TransactionCanceledException``, ``CancellationReasons`` ``TransactionConflict`` for that
  item and ``None`` for the others. A ``PutItem``, ``UpdateItem`` or ``DeleteItem`` on such an
  item is refused the same way with ``TransactionConflictException``. Nothing is written
  either way. Tests script exact conflicts with :meth:`MotoFidelity.inject_conflict`.
* **Item sizes.** A put of an item over 400 KB, counted as DynamoDB counts
  (:mod:`punctual.store.dynamo.sizes`), is refused with ``ValidationException`` ("Item size has
  exceeded the maximum allowed size"; in a transaction, a ``ValidationError`` cancellation
  reason), which moto checks only for updates.

``punctual-local up --stale-reads SECONDS --transaction-conflicts SHARE`` turns both on in local
mode; the chaos run in ``make test`` runs with both on. The ``aws`` process writes what it
injected to ``<state>/run/fidelity.json`` every few seconds (``stale_answers``, ``conflicts``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from punctual.store.memory.fidelity import (
    CONFLICT_MESSAGE,
    TRANSACTION,
    WRITE,
    Contention,
    History,
    Kind,
)

log = logging.getLogger("local.moto_fidelity")

# DynamoDB operation (moto handler method) -> what it is.
_SINGLE_WRITES = {"put_item": "PutItem", "update_item": "UpdateItem", "delete_item": "DeleteItem"}
_TRANSACTION = "transact_write_items"
_BATCH_WRITE = "batch_write_item"
_READS = ("get_item", "batch_get_item", "query")


class ItemRef(NamedTuple):
    """One item: its table and the string form of its key (``sk`` empty on a hash-only table)."""

    table: str
    pk: str
    sk: str


def _key_text(value: dict[str, Any] | None) -> str:
    if not value:
        return ""
    return str(next(iter(value.values())))


@dataclass
class MotoFidelity:
    """The simulation's settings and state (one per moto process, installed with :func:`install`).

    Parameters
    ----------
    stale_read_s
        L: an eventually consistent read answers each item as it was up to L seconds earlier.
    conflict_share
        The share of writes, on items a transaction has written, that meet a conflict.
    seed, rng
        The randomness of both (``rng`` wins; None and no seed: unseeded).
    clock
        Seconds (monotonic by default).
    """

    stale_read_s: float = 0.0
    conflict_share: float = 0.0
    seed: int | None = None
    clock: Callable[[], float] = time.monotonic
    rng: Any = None

    def __post_init__(self) -> None:
        if not 0 <= self.conflict_share < 1:
            raise ValueError("the conflict share must be in [0, 1)")
        if self.stale_read_s < 0:
            raise ValueError("stale reads cannot be a negative number of seconds behind")
        self.rng = self.rng or random.Random(self.seed)
        self.history = History(self.stale_read_s)
        self.contention = Contention(self.conflict_share, self.rng)
        self.lock = threading.RLock()
        self.stale_answers = 0

    @property
    def conflicts(self) -> int:
        return self.contention.injected

    def inject_conflict(
        self, operation: str | None = None, item: Callable[[ItemRef], bool] | None = None, times: int = 1
    ) -> None:
        """Make the next ``times`` requests of ``operation`` (``TransactWriteItems``, ``PutItem``,
        ``UpdateItem``, ``DeleteItem``; None: any) touching an item ``item`` accepts meet a conflict."""
        wanted = operation

        def matches(key: Any) -> bool:
            return item is None or item(key)

        for _ in range(times):
            self.contention.scripted.append((wanted, matches))

    def summary(self) -> dict[str, Any]:
        return {
            "stale_read_s": self.stale_read_s,
            "conflict_share": self.conflict_share,
            "stale_answers": self.stale_answers,
            "conflicts": self.conflicts,
        }

    # ------------------------------------------------------------------ items

    def _ref(self, handler: Any, table_name: str, attrs: dict[str, Any]) -> ItemRef:
        table = handler.dynamodb_backend.get_table(table_name)
        sk = attrs.get(table.range_key_attr) if table.range_key_attr else None
        return ItemRef(table_name, _key_text(attrs.get(table.hash_key_attr)), _key_text(sk))

    def _now_value(self, handler: Any, ref: ItemRef, key: dict[str, Any]) -> dict[str, Any] | None:
        item = handler.dynamodb_backend.get_item(ref.table, key)
        return copy.deepcopy(item.to_json()["Attributes"]) if item is not None else None

    def _key_of(self, handler: Any, table_name: str, attrs: dict[str, Any]) -> dict[str, Any]:
        table = handler.dynamodb_backend.get_table(table_name)
        names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
        return {name: attrs[name] for name in names if name in attrs}

    def _older(self, ref: ItemRef, current: dict[str, Any] | None) -> dict[str, Any] | None:
        when = self.clock() - self.rng.uniform(0.0, self.stale_read_s)
        value, behind = self.history.as_of(ref, when, current)
        if behind:
            self.stale_answers += 1
            return copy.deepcopy(value) if value is not None else None
        return current

    # ------------------------------------------------------------------ writes

    def write(self, handler: Any, method: str, original: Callable[[Any], Any]) -> Any:
        body = handler.body
        if method == _TRANSACTION:
            targets = []
            for entry in body.get("TransactItems", []):
                (action, request), *_ = entry.items()
                attrs = request.get("Item") if action == "Put" else request.get("Key")
                targets.append((request["TableName"], attrs or {}))
            kind: Kind = TRANSACTION
            operation = "TransactWriteItems"
        elif method == _BATCH_WRITE:
            targets = []
            for table_name, requests in body.get("RequestItems", {}).items():
                for request in requests:
                    (action, detail), *_ = request.items()
                    attrs = detail.get("Item") if action == "PutRequest" else detail.get("Key")
                    targets.append((table_name, attrs or {}))
            kind = WRITE
            operation = "BatchWriteItem"
        else:
            attrs = body.get("Item") if method == "put_item" else body.get("Key")
            targets = [(body["TableName"], attrs or {})]
            kind = WRITE
            operation = _SINGLE_WRITES[method]
        _check_sizes(method, body, targets)
        with self.lock:
            refs = [self._ref(handler, table, attrs) for table, attrs in targets]
            keys = [self._key_of(handler, table, attrs) for table, attrs in targets]
            if method != _BATCH_WRITE:
                index = self.contention.decide(operation, kind, refs)
                if index is not None:
                    raise _conflict(kind, index, len(refs))
            recording = self.stale_read_s > 0
            if recording:
                for ref, key in zip(refs, keys, strict=True):
                    if not self.history.known(ref):
                        self.history.record(ref, -math.inf, self._now_value(handler, ref, key))
            try:
                result = original(handler)
            finally:
                if recording:
                    now = self.clock()
                    for ref, key in zip(refs, keys, strict=True):
                        self.history.record(ref, now, self._now_value(handler, ref, key))
            if kind == TRANSACTION:
                self.contention.held.update(refs)
            return result

    # ------------------------------------------------------------------ reads

    def read(self, handler: Any, method: str, original: Callable[[Any], Any]) -> Any:
        body = handler.body
        result = original(handler)
        if self.stale_read_s <= 0:
            return result
        answer = result.result
        with self.lock:
            if method == "get_item":
                if not _eventual(body):
                    return result
                ref = self._ref(handler, body["TableName"], body["Key"])
                found = self._older(ref, answer.get("Item"))
                if found is None:
                    answer.pop("Item", None)
                else:
                    answer["Item"] = found
            elif method == "batch_get_item":
                for table_name, request in body.get("RequestItems", {}).items():
                    if not _eventual(request):
                        continue
                    current = {
                        self._ref(handler, table_name, item): item
                        for item in answer.get("Responses", {}).get(table_name, [])
                    }
                    rows = []
                    for key in request.get("Keys", []):
                        ref = self._ref(handler, table_name, key)
                        found = self._older(ref, current.get(ref))
                        if found is not None:
                            rows.append(found)
                    answer.setdefault("Responses", {})[table_name] = rows
            elif _eventual(body) and not body.get("IndexName") and "Items" in answer:
                rows = []
                for item in answer["Items"]:
                    found = self._older(self._ref(handler, body["TableName"], item), item)
                    if found is not None:
                        rows.append(found)
                answer["Items"] = rows
                answer["Count"] = len(rows)
        return result


def _check_sizes(method: str, body: dict[str, Any], targets: list[tuple[str, dict[str, Any]]]) -> None:
    """Refuse a put of an item over 400 KB, as DynamoDB does (moto checks only updates)."""
    from moto.dynamodb.exceptions import ItemSizeTooLarge, TransactionCanceledException

    from punctual.store.dynamo.sizes import ITEM_LIMIT_BYTES, item_bytes

    if method in ("update_item", "delete_item"):
        return
    if method == _TRANSACTION:
        puts = ["Put" in entry for entry in body.get("TransactItems", [])]
    elif method == _BATCH_WRITE:
        puts = ["PutRequest" in r for requests in body.get("RequestItems", {}).values() for r in requests]
    else:
        puts = [True]
    oversized = {
        n
        for n, (is_put, (_, attrs)) in enumerate(zip(puts, targets, strict=True))
        if is_put and item_bytes(attrs) > ITEM_LIMIT_BYTES
    }
    if not oversized:
        return
    if method != _TRANSACTION:
        raise ItemSizeTooLarge()
    message = ItemSizeTooLarge.item_size_too_large_msg
    raise TransactionCanceledException(
        [
            ("ValidationError", message, None) if n in oversized else (None, None, None)
            for n in range(len(targets))
        ]
    )


def _eventual(request: dict[str, Any]) -> bool:
    """A read moto would answer as it is now but DynamoDB may answer from behind."""
    projected = request.get("ProjectionExpression") or request.get("AttributesToGet")
    return not request.get("ConsistentRead", False) and not projected


def _conflict(kind: Kind, index: int, count: int) -> Exception:
    from moto.dynamodb.exceptions import ERROR_TYPE_PREFIX, DynamodbException, TransactionCanceledException

    if kind == TRANSACTION:
        reasons = [
            ("TransactionConflict", CONFLICT_MESSAGE, None) if n == index else (None, None, None)
            for n in range(count)
        ]
        return TransactionCanceledException(reasons)
    return DynamodbException(ERROR_TYPE_PREFIX + "TransactionConflictException", CONFLICT_MESSAGE)


# --------------------------------------------------------------------------- installing

_active: MotoFidelity | None = None
_originals: dict[str, Any] = {}


def install(fidelity: MotoFidelity) -> MotoFidelity:
    """Wrap moto's DynamoDB handlers (once per process) and make ``fidelity`` the active settings."""
    global _active
    from moto.dynamodb.responses import DynamoHandler

    if not _originals:
        for method in (*_SINGLE_WRITES, _TRANSACTION, _BATCH_WRITE):
            _originals[method] = getattr(DynamoHandler, method)
            setattr(DynamoHandler, method, _wrap_write(method, _originals[method]))
        for method in _READS:
            _originals[method] = getattr(DynamoHandler, method)
            setattr(DynamoHandler, method, _wrap_read(method, _originals[method]))
    _active = fidelity
    return fidelity


def uninstall() -> None:
    """Put moto's handlers back."""
    global _active
    from moto.dynamodb.responses import DynamoHandler

    for method, original in _originals.items():
        setattr(DynamoHandler, method, original)
    _originals.clear()
    _active = None


@contextlib.contextmanager
def installed(fidelity: MotoFidelity) -> Iterator[MotoFidelity]:
    """:func:`install` for the duration of a ``with`` block (tests)."""
    install(fidelity)
    try:
        yield fidelity
    finally:
        uninstall()


def _wrap_write(method: str, original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def handler_method(self: Any) -> Any:
        fidelity = _active
        return original(self) if fidelity is None else fidelity.write(self, method, original)

    handler_method.__name__ = method
    return handler_method


def _wrap_read(method: str, original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def handler_method(self: Any) -> Any:
        fidelity = _active
        return original(self) if fidelity is None else fidelity.read(self, method, original)

    handler_method.__name__ = method
    return handler_method


def report_to(
    path: Path, fidelity: MotoFidelity, stop: threading.Event, every_s: float = 2.0
) -> threading.Thread:
    """Write ``fidelity``'s counts to ``path`` every ``every_s`` seconds until ``stop`` (and once then)."""

    def loop() -> None:
        while True:
            stopping = stop.wait(every_s)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(fidelity.summary()))
                tmp.replace(path)
            except OSError:
                log.exception("could not write %s", path)
            if stopping:
                return

    thread = threading.Thread(target=loop, name="fidelity-report", daemon=True)
    thread.start()
    return thread
