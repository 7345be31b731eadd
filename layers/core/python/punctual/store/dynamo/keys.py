"""Shared helpers of the DynamoDB mixins: batch sizes, the timer pack layout, reading stored
documents leniently, retry backoff, the table definition. Every key and expression is in
:mod:`.schema` (re-exported here: ``_s``, ``_n``, ``job_pk``, ``tenant_pk``)."""

from __future__ import annotations

import json
import logging
import random
import time
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from botocore.exceptions import ClientError
from pydantic import ValidationError

from punctual.store.base import (
    UnreadableJob,
)
from punctual.store.dynamo.schema import AUDIT_SEGMENT, audit_index_definition
from punctual.store.dynamo.schema import _n as _n
from punctual.store.dynamo.schema import _s as _s
from punctual.store.dynamo.schema import job_pk as job_pk
from punctual.store.dynamo.schema import tenant_pk as tenant_pk
from punctual.timing.timers import (
    Lane,
    TimerKind,
    slot_instant,
    slot_key,
)

WATERMARK_CHUNK = 64  # shards per watermark item: one write per chunk per poller per minute
logger = logging.getLogger(__name__)
_BATCH_GET_MAX = 100
_BATCH_WRITE_MAX = 25
_MAX_UNPROCESSED_ROUNDS = 12
# Timer packs: at most this many timers per item (~4 KB), all due within one window of the
# lane. A far bucket is read whole, so a pack may span its minute; a near bucket is read by
# due range, and a range read looks one window further back.
_PACK_MAX = 64
# Each divides a minute: a pack window lies in one minute, one bucket (DynamoTimers._timer_rows).
_PACK_SPAN_MS = {Lane.FAR: 60_000, Lane.NEAR: 1_000}
_KIND_CODE = {
    TimerKind.FIRE: "f",
    TimerKind.RETRY: "r",
    TimerKind.LEASE: "l",
    TimerKind.CHILD: "c",
    TimerKind.CATCHUP: "k",
    TimerKind.QUEUED: "q",
    TimerKind.BACKFILL: "b",
    TimerKind.RESUME: "u",
    TimerKind.ALERT: "a",
    TimerKind.RELINK: "x",
}
_KIND_OF_CODE = {code: kind for kind, code in _KIND_CODE.items()}


# A poller's packs name the same few slots over and over (every job due in one second shares
# its slot): both conversions are pure, so a bounded cache answers the repeats.
@lru_cache(maxsize=4096)
def _slot_of_second(second: int) -> str:
    return slot_key(datetime.fromtimestamp(second, tz=UTC))


@lru_cache(maxsize=4096)
def _packed_slot(slot: str) -> str | int:
    """How a pack writes a slot: a plain slot key as its epoch second (10 bytes, not 22), any
    other slot (a manual trigger's ``~suffix``, a BACKFILL timer's backfill id) as it is."""
    if "~" in slot:
        return slot
    try:
        second = int(slot_instant(slot).timestamp())
    except ValueError:  # not a slot's instant (a BACKFILL timer names its backfill)
        return slot
    return second if second >= 0 and _slot_of_second(second) == slot else slot


def _doc_of(item: dict[str, Any]) -> dict[str, Any]:
    try:
        doc = json.loads(item.get("doc", {}).get("S", ""))
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _first_errors(exc: Exception) -> str:
    """A short reason: the first three problems pydantic found, one line."""
    if isinstance(exc, ValidationError):
        parts = [
            f"{'.'.join(str(p) for p in error['loc']) or 'job'}: {error['msg']}" for error in exc.errors()[:3]
        ]
        more = exc.error_count() - len(parts)
        return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
    return " ".join(str(exc).split())[:300]


def _unreadable(
    item: dict[str, Any],
    doc: dict[str, Any] | None,
    reason: str,
    tenant: str | None = None,
    job_id: str | None = None,
) -> UnreadableJob:
    doc = doc if doc is not None else {}
    version = item.get("version", {}).get("N") or doc.get("version") or 0
    found = UnreadableJob(
        tenant=str(tenant or doc.get("tenant") or item["pk"]["S"].split("#", 2)[1]),
        id=str(job_id or doc.get("id") or item["pk"]["S"].split("#", 2)[-1]),
        version=int(version) if str(version).isdigit() else 0,
        state=str(item.get("state", {}).get("S") or doc.get("state") or "ENABLED"),
        reason=reason[:1000],
        doc=doc,
        signing_secret_enc=item.get("secret", {}).get("S"),
        signing_secret_prev_enc=item.get("secret_prev", {}).get("S"),
        trigger_rate=int(item.get("tpm", {}).get("N") or 0),
        dependents=int(item.get("dependents", {}).get("N") or 0),
    )
    logger.warning(
        "stored job %s of tenant %s cannot be read by this version's model (shown as unreadable): %s",
        found.id,
        found.tenant,
        found.reason,
    )
    return found


class UnprocessedItemsError(ClientError):  # type: ignore[misc]  # (botocore has no stubs here)
    """DynamoDB left a batch's items unprocessed through every retry: the table is throttling, and
    this is its throttling error (``ProvisionedThroughputExceededException``), as a single read or
    write would have raised: the API answers 503 with ``Retry-After`` (QA22: a RuntimeError, 500)."""

    def __init__(self, operation: str) -> None:
        message = f"{operation} left items unprocessed after repeated retries"
        error = {"Code": "ProvisionedThroughputExceededException", "Message": message}
        super().__init__({"Error": error}, operation)


def _backoff(round_no: int) -> None:
    # Full jitter, capped: unprocessed items mean the table is throttling us.
    time.sleep(random.uniform(0, min(2.0, 0.02 * (2**round_no))))


def table_definition(table_name: str) -> dict[str, Any]:
    """The CreateTable request local mode and tests use (the CDK app declares the same keys)."""
    return {
        "TableName": table_name,
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": AUDIT_SEGMENT, "AttributeType": "N"},
        ],
        "GlobalSecondaryIndexes": [audit_index_definition()],
        "BillingMode": "PAY_PER_REQUEST",
    }
