"""moto server: bulk requests take turns, so that they cannot starve everyone else's.

In AWS a BatchGetItem of 100 keys does not slow another client's GetItem: each request is
served on its own. moto server answers every request on its own thread of one Python process,
so all requests share one interpreter lock, handed round-robin between runnable threads every
few milliseconds. When a burst is released, the pollers have a hundred or more bulk requests in
flight at once (each poller releases eight chunks side by side, each chunk a BatchGetItem of
100 jobs, ten SendMessageBatch of ten and a BatchWriteItem of next timers; every poller of a
group releases every slot), and a worker's claim — a few small requests, each needing a few
milliseconds of the lock — waits a whole round of them for each slice: measured, a second and
a half from the receipt of the first slots' messages to their first call, while the moto
process was no faster for running the bulk requests side by side (the lock lets one run).

:class:`BulkGate` admits at most ``at_once`` *bulk* requests into moto at a time — a batch
request of more than one item (:func:`bulk_items`: BatchGetItem, BatchWriteItem,
SendMessageBatch) or a Scan — and lets every other request through at once. The bulk requests
wait their turn in the server's thread (in arrival order, as the lock hands it over), so
together they run about as fast as before, and a small request competes with at most
``at_once`` of them. Nothing is refused, reordered within a client or answered differently:
only when a bulk request starts changes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

BULK_AT_ONCE = 1  # one interpreter lock runs one at a time: a second only slows small requests
_BATCHES = {
    "DynamoDB_20120810.BatchGetItem": "RequestItems",
    "DynamoDB_20120810.BatchWriteItem": "RequestItems",
    "AmazonSQS.SendMessageBatch": "Entries",
}
_ALWAYS_BULK = {"DynamoDB_20120810.Scan"}


def bulk_items(target: str, body: bytes) -> int:
    """How many items a request names, when it is a batch request (0 otherwise).

    ``target`` is the JSON protocol's ``X-Amz-Target`` header (DynamoDB's and SQS's protocol
    in botocore), ``body`` the request's JSON body. A Scan counts as bulk whatever its size.
    """
    if target in _ALWAYS_BULK:
        return 2
    field = _BATCHES.get(target)
    if field is None or not body:
        return 0
    try:
        document = json.loads(body)
    except ValueError:
        return 0
    if not isinstance(document, dict):
        return 0
    items = document.get(field)
    if isinstance(items, list):  # SQS: Entries
        return len(items)
    if isinstance(items, dict):  # DynamoDB: table -> {"Keys": [...]} or [write requests]
        return sum(_table_items(value) for value in items.values())
    return 0


def _table_items(value: Any) -> int:
    if isinstance(value, list):
        return len(value)
    if isinstance(value, Mapping) and isinstance(value.get("Keys"), list):
        return len(value["Keys"])
    return 0


class BulkGate:
    """At most ``at_once`` bulk requests inside moto at a time (see the module docstring)."""

    def __init__(self, at_once: int = BULK_AT_ONCE) -> None:
        if at_once < 1:
            raise ValueError("at least one bulk request must be admitted at a time")
        self._slots = threading.Semaphore(at_once)

    @contextmanager
    def admit(self, target: str, body: bytes) -> Iterator[bool]:
        """Hold a bulk request until its turn (a small one passes at once); yields whether it
        was bulk."""
        if bulk_items(target, body) <= 1:
            yield False
            return
        with self._slots:
            yield True
