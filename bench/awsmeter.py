"""Counting every AWS request the code makes, and what DynamoDB and SQS would bill for it.

:class:`Meter` hooks boto3's default session (``before-parameter-build`` and ``after-call``),
so every client made after :meth:`Meter.install` is counted: the core's shared clients
(``punctual.runtime.aws``), the ones ``Worker.from_settings`` makes, the tick's. Each request is
filed under the current *phase* (poller, worker, event source, history, ...), its service
and operation, and the kind of item it touched (job, timer, near, exec, wm, tenant).

moto does not report ``ConsumedCapacity``, so capacity is computed from item sizes with
DynamoDB's published rules (the functions below are pure and unit-tested):

* item size: attribute names plus values (strings in UTF-8 bytes, numbers about one byte per
  two significant digits plus one, maps and lists 3 bytes plus 1 per element);
* writes: 1 write unit per started KB of the larger of the item before and after; a
  transaction's items count twice; a batch write's items one by one;
* the audit index's writes apart (``index_wru``): an item in the index before or after a write
  (it carries an audit segment) costs the index a write unit per started KB of its entry (its
  keys and projected attributes), at the standard price, transaction or not;
* reads: 1 read unit per started 4 KB, half of it eventually consistent; BatchGetItem per
  item (a missing item still costs the minimum); Query per started 4 KB of all items it read,
  at least one unit even when it finds nothing;
* SQS: one billed request per started 64 KB of payload, per call.
* EventBridge PutEvents: one billed event per entry (per started 64 KB of its detail).
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from punctual.store.dynamo.schema import AUDIT_PROJECTION, AUDIT_SEGMENT
from punctual.store.dynamo.sizes import item_bytes, number_bytes, value_bytes

WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4096
SQS_CHUNK_BYTES = 64 * 1024


# --------------------------------------------------------------------------- item sizes


# DynamoDB's count of an item's bytes is the core's (punctual.store.dynamo.sizes: the stores refuse a job
# whose items would pass 400 KB by the same count); the meter bills by it.
number_size = number_bytes
value_size = value_bytes


def item_size(item: Mapping[str, Mapping[str, Any]] | None) -> int:
    """Bytes of a whole item: every attribute name plus its value."""
    return item_bytes(dict(item)) if item else 0


_INDEXED = frozenset({AUDIT_SEGMENT, "pk", "sk", *AUDIT_PROJECTION})


def index_entry_size(item: Mapping[str, Mapping[str, Any]] | None) -> int:
    """Bytes of an item's entry in the audit index: its keys and projected attributes (0: the item
    is not in the index)."""
    if not item or AUDIT_SEGMENT not in item:
        return 0
    return item_size({name: value for name, value in item.items() if name in _INDEXED})


def index_write_units(before: int, after: int) -> int:
    """Write units the audit index takes for one item write whose entry was ``before`` bytes and is
    ``after`` (0: not in the index), at the standard price (an index is not written in the
    transaction's two phases)."""
    return write_units(before, after) if before or after else 0


def write_units(*sizes: int, transactional: bool = False) -> int:
    """Write units of one item write: the larger of before/after, per started KB (at least 1)."""
    units = max(1, math.ceil(max(sizes, default=0) / WRITE_UNIT_BYTES))
    return units * (2 if transactional else 1)


def read_units(size: int, consistent: bool) -> float:
    """Read units of one item read (GetItem, or one BatchGetItem item): per started 4 KB."""
    units = max(1, math.ceil(size / READ_UNIT_BYTES))
    return units if consistent else units / 2


def query_units(sizes: Iterable[int], consistent: bool) -> float:
    """Read units of one Query page: all items it read summed, per started 4 KB (at least 1)."""
    return read_units(sum(sizes), consistent)


def sqs_requests(payload_bytes: int) -> int:
    """Billed SQS requests of one call: one per started 64 KB of payload (at least 1)."""
    return max(1, math.ceil(payload_bytes / SQS_CHUNK_BYTES))


# --------------------------------------------------------------------------- the meter


@dataclass
class Tally:
    calls: int = 0
    billed: int = 0  # SQS: billed requests (64 KB chunks); other services: calls
    wru: float = 0.0
    rru: float = 0.0
    index_wru: float = 0.0  # the audit index's writes (a secondary index is billed apart)
    items: int = 0  # items read or written
    payload_bytes: int = 0  # SQS message bodies; DynamoDB item bytes read or written
    timers: int = 0  # timers written (a packed item holds several)

    def add(self, other: Tally) -> None:
        self.calls += other.calls
        self.billed += other.billed
        self.wru += other.wru
        self.rru += other.rru
        self.index_wru += other.index_wru
        self.items += other.items
        self.payload_bytes += other.payload_bytes
        self.timers += other.timers


def _kind_of_key(pk: str, sk: str = "") -> str:
    """What an item is, from its key (the layout in punctual/store/dynamo/keys.py)."""
    if pk.startswith("job#"):
        if sk.startswith("exec#"):
            return "exec"
        if sk.startswith("dep#") or sk.startswith("child#"):
            return "dependency"
        return "job"
    for prefix in ("timer#", "near#", "wm#", "tenant#", "load#", "progress#"):
        if pk.startswith(prefix):
            return prefix[:-1]
    return "other"


def _s(attr: Mapping[str, Any] | None) -> str:
    return str(attr.get("S", "")) if attr else ""


@dataclass
class Meter:
    """Counts requests per (phase, service.operation, item kind), and their capacity.

    ``peek`` is an un-hooked DynamoDB client used to size the items a ``Select=COUNT`` query
    counted; ``peek_item(table, key)`` reads an item before and after a write (DynamoDB bills
    the larger of the two) without a request (default: through ``peek``). Neither is counted.
    """

    peek: Any = None
    peek_item: Any = None
    phase: str = "setup"
    tallies: dict[tuple[str, str, str], Tally] = field(default_factory=lambda: defaultdict(Tally))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def install(self, events: Any) -> None:
        events.register("before-parameter-build", self._before)
        events.register("after-call", self._after)

    # ------------------------------------------------------------------ hooks

    def _before(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        context["bench_params"] = params
        context["bench_phase"] = self.phase
        if model.service_model.service_name == "dynamodb" and (self.peek or self.peek_item) is not None:
            context["bench_before"] = self._sizes_before(model.name, params)

    def _after(
        self, http_response: Any, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        params = context.get("bench_params", {})
        phase = context.get("bench_phase", self.phase)
        service = model.service_model.service_name
        operation = model.name
        if service == "dynamodb":
            kind, tally = self._dynamodb(operation, params, parsed, context.get("bench_before", {}))
        elif service == "sqs":
            kind, tally = self._sqs(operation, params, parsed)
            if operation == "ReceiveMessage" and not tally.items:
                phase += " (empty)"
        elif service == "events" and operation == "PutEvents":
            # EventBridge bills each entry (per started 64 KB of it) as one published event.
            entries = params.get("Entries", [])
            billed = sum(max(1, math.ceil(len(str(e.get("Detail", "")).encode()) / 65536)) for e in entries)
            kind, tally = "event", Tally(calls=1, billed=billed, items=len(entries))
        else:
            kind, tally = "", Tally(calls=1, billed=1)
        with self.lock:
            self.tallies[(phase, f"{service}.{operation}", kind)].add(tally)

    # ------------------------------------------------------------------ DynamoDB

    def _get_item(self, table: str, key: Mapping[str, Any]) -> Mapping[str, Any] | None:
        if self.peek_item is not None:
            item: Mapping[str, Any] | None = self.peek_item(table, dict(key))
            return item
        reply = self.peek.get_item(TableName=table, Key=dict(key), ConsistentRead=True)
        return reply.get("Item")

    def _sizes_before(self, operation: str, params: Mapping[str, Any]) -> dict[Any, int]:
        """Each written item's size before the write, and its audit index entry's (key
        ``("index", k)``)."""
        if operation in ("PutItem", "UpdateItem", "DeleteItem"):
            key = params.get("Key") or {k: params["Item"][k] for k in ("pk", "sk")}
            item = self._get_item(params["TableName"], key)
            return {"item": item_size(item), ("index", "item"): index_entry_size(item)}
        if operation == "TransactWriteItems":
            out: dict[Any, int] = {}
            for index, entry in enumerate(params.get("TransactItems", [])):
                ((_action, body),) = entry.items()
                key = body.get("Key") or {k: body["Item"][k] for k in ("pk", "sk")}
                item = self._get_item(body["TableName"], key)
                out[index], out[("index", index)] = item_size(item), index_entry_size(item)
            return out
        return {}

    def _dynamodb(
        self, operation: str, params: Mapping[str, Any], parsed: Mapping[str, Any], before: Mapping[Any, int]
    ) -> tuple[str, Tally]:
        tally = Tally(calls=1, billed=1)
        consistent = bool(params.get("ConsistentRead", False))
        if operation == "GetItem":
            key = params["Key"]
            size = item_size(parsed.get("Item"))
            tally.rru = read_units(size, consistent)
            tally.items = 1 if parsed.get("Item") else 0
            tally.payload_bytes = size
            return _kind_of_key(_s(key.get("pk")), _s(key.get("sk"))), tally
        if operation == "BatchGetItem":
            kinds = set()
            for table, request in params["RequestItems"].items():
                wanted = len(request["Keys"])
                got = parsed.get("Responses", {}).get(table, [])
                unprocessed = len(parsed.get("UnprocessedKeys", {}).get(table, {}).get("Keys", []))
                cons = bool(request.get("ConsistentRead", False))
                tally.rru += sum(read_units(item_size(item), cons) for item in got)
                tally.payload_bytes += sum(item_size(item) for item in got)
                tally.rru += read_units(0, cons) * max(0, wanted - len(got) - unprocessed)  # misses
                tally.items += len(got)
                kinds.update(_kind_of_key(_s(k.get("pk")), _s(k.get("sk"))) for k in request["Keys"])
            return "+".join(sorted(kinds)), tally
        if operation == "Query":
            values = params.get("ExpressionAttributeValues", {})
            pk = _s(values.get(":pk"))
            prefix = ""
            for name in (":ex", ":c", ":job"):
                if name in values:
                    prefix = _s(values[name])
            kind = _kind_of_key(pk, prefix)
            if params.get("Select") == "COUNT":
                # No items come back: read them with the peek client to know their size.
                peek_params = {k: v for k, v in params.items() if k != "Select"}
                sizes = [item_size(i) for i in self.peek.query(**peek_params).get("Items", [])]
                kind += " (count)"
            else:
                sizes = [item_size(i) for i in parsed.get("Items", [])]
            tally.rru = query_units(sizes, consistent)
            tally.items = len(sizes)
            tally.payload_bytes = sum(sizes)
            return kind, tally
        if operation == "PutItem":
            item = params["Item"]
            tally.wru = write_units(item_size(item), before.get("item", 0))
            tally.index_wru = index_write_units(before.get(("index", "item"), 0), index_entry_size(item))
            tally.items = 1
            tally.payload_bytes = item_size(item)
            return _kind_of_key(_s(item.get("pk")), _s(item.get("sk"))), tally
        if operation in ("UpdateItem", "DeleteItem"):
            key = params["Key"]
            now = self._get_item(params["TableName"], key) if operation == "UpdateItem" else None
            tally.wru = write_units(before.get("item", 0), item_size(now))
            tally.index_wru = index_write_units(before.get(("index", "item"), 0), index_entry_size(now))
            tally.items = 1
            return _kind_of_key(_s(key.get("pk")), _s(key.get("sk"))), tally
        if operation == "BatchWriteItem":
            kinds = set()
            for requests in params["RequestItems"].values():
                for request in requests:
                    body = request.get("PutRequest", {}).get("Item") or request.get("DeleteRequest", {}).get(
                        "Key"
                    )
                    size = item_size(request["PutRequest"]["Item"]) if "PutRequest" in request else 0
                    tally.wru += write_units(size)
                    if "PutRequest" in request:  # (an overwritten entry's size is not known: as new)
                        tally.index_wru += index_write_units(
                            0, index_entry_size(request["PutRequest"]["Item"])
                        )
                    tally.items += 1
                    tally.payload_bytes += size
                    kind = _kind_of_key(_s(body.get("pk")), _s(body.get("sk")))
                    if kind in ("timer", "near") and "PutRequest" in request:
                        tally.timers += int(body["n"]["N"]) if "n" in body else 1
                    kinds.add(kind)
            return "+".join(sorted(kinds)), tally
        if operation == "TransactWriteItems":
            kinds = set()
            for index, entry in enumerate(params.get("TransactItems", [])):
                ((action, body),) = entry.items()
                key = body.get("Key") or {k: body["Item"][k] for k in ("pk", "sk")}
                now = body["Item"] if action == "Put" else None
                if action == "Update":
                    now = self._get_item(body["TableName"], key)
                tally.wru += write_units(item_size(now), before.get(index, 0), transactional=True)
                if action != "ConditionCheck":
                    tally.index_wru += index_write_units(
                        before.get(("index", index), 0), index_entry_size(now)
                    )
                tally.items += 1
                kinds.add(_kind_of_key(_s(key.get("pk")), _s(key.get("sk"))))
            return "+".join(sorted(kinds)), tally
        return "", tally

    # ------------------------------------------------------------------ SQS

    @staticmethod
    def _sqs(operation: str, params: Mapping[str, Any], parsed: Mapping[str, Any]) -> tuple[str, Tally]:
        url = str(params.get("QueueUrl", ""))
        kind = "fifo" if url.endswith(".fifo") else "standard"
        payload = 0
        if operation == "SendMessageBatch":
            payload = sum(len(e["MessageBody"].encode()) for e in params.get("Entries", []))
            items = len(params.get("Entries", []))
        elif operation == "SendMessage":
            payload = len(params.get("MessageBody", "").encode())
            items = 1
        elif operation == "ReceiveMessage":
            messages = parsed.get("Messages", [])
            payload = sum(len(m.get("Body", "").encode()) for m in messages)
            items = len(messages)
        elif operation in ("DeleteMessageBatch", "ChangeMessageVisibilityBatch"):
            items = len(params.get("Entries", []))
        else:
            items = 1
        return kind, Tally(calls=1, billed=sqs_requests(payload), items=items, payload_bytes=payload)

    # ------------------------------------------------------------------ reading

    def snapshot(self) -> dict[tuple[str, str, str], Tally]:
        with self.lock:
            out: dict[tuple[str, str, str], Tally] = {}
            for key, tally in self.tallies.items():
                copy = Tally()
                copy.add(tally)
                out[key] = copy
            return out

    def reset(self) -> None:
        with self.lock:
            self.tallies.clear()


def subtract(
    load: Mapping[tuple[str, str, str], Tally], base: Mapping[tuple[str, str, str], Tally]
) -> dict[tuple[str, str, str], Tally]:
    """``load`` minus ``base``, key by key (what the load added over an idle run)."""
    out: dict[tuple[str, str, str], Tally] = {}
    for key in set(load) | set(base):
        a, b = load.get(key, Tally()), base.get(key, Tally())
        out[key] = Tally(
            calls=a.calls - b.calls,
            billed=a.billed - b.billed,
            wru=a.wru - b.wru,
            rru=a.rru - b.rru,
            items=a.items - b.items,
            payload_bytes=a.payload_bytes - b.payload_bytes,
            timers=a.timers - b.timers,
        )
    return out
