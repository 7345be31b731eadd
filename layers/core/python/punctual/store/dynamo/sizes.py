"""Sizes in bytes, as DynamoDB counts them: the job item and every item that copies its document.

DynamoDB refuses an item over 400 KB (409,600 bytes), counted as the UTF-8 length of every
attribute name plus the size of every value ("Service, account, and table quotas in Amazon
DynamoDB": item size; "Item sizes and formats" in the developer guide): a string is its UTF-8
length, a number about one byte per two significant digits plus one, a boolean or null one
byte, a list or map three bytes plus one byte and the size of each member (and each member's
name). The API's own limits count characters (a header value of 8,192 characters, a name of
128): an ``é`` is two bytes and many characters are four, so a job inside every limit can still
be an item DynamoDB refuses with ``ValidationException``, which used to reach the API as a 500.

:func:`check_job_size` measures the items a job is stored in, and refuses (``ItemTooLargeError``,
answered 413 naming the largest parts) a job whose largest item would pass
:data:`JOB_ITEM_LIMIT_BYTES`: the job item (its ``doc`` and attributes) and its tenant listing (a
copy of the ``doc``); :func:`check_reply_size` does the same, before anything is stored, for
the record ``POST /v1/jobs`` with an ``Idempotency-Key`` keeps (the reply: the job as JSON,
every non-ASCII character escaped to six or twelve bytes). The limit keeps
:data:`RESERVE_BYTES` for what later writes add to the job item without a new check (counters,
the previous signing secret of a rotation). Both stores check it, so the in-memory store
refuses what DynamoDB would.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Any

from punctual.models import Job, JobSpec
from punctual.store.base import ItemTooLargeError
from punctual.store.dynamo.schema import job_attributes  # what the DynamoDB store writes: measure that

ITEM_LIMIT_BYTES = 400 * 1024  # DynamoDB's maximum item size
RESERVE_BYTES = 4 * 1024  # skipped/dependents counters, a rotated secret, key growth
JOB_ITEM_LIMIT_BYTES = ITEM_LIMIT_BYTES - RESERVE_BYTES

# The key of each item (the longest forms: a tenant id and a job id of their maximum lengths).
_KEY_BYTES = len("pk") + len("sk") + 2 * (len("job#") + 256 + 1 + 64)
# The idempotency record's attributes besides ``data`` (Powertools: status, expiration,
# in_progress_expiration, validation hash, expires_at) and the reply's wrapper around the job.
_IDEMPOTENCY_OVERHEAD_BYTES = 512


def value_bytes(value: dict[str, Any]) -> int:
    """The size of one attribute value in DynamoDB's wire form (``{"S": ...}``, ``{"N": ...}``, ...)."""
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        return number_bytes(str(inner))
    if kind == "B":
        return len(inner) if isinstance(inner, bytes | bytearray) else len(str(inner).encode()) * 3 // 4
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(member.encode()) for member in inner)
    if kind == "NS":
        return sum(number_bytes(member) for member in inner)
    if kind == "BS":
        return sum(len(member) for member in inner)
    if kind == "L":
        return 3 + sum(1 + value_bytes(member) for member in inner)
    if kind == "M":
        return 3 + sum(1 + len(name.encode()) + value_bytes(member) for name, member in inner.items())
    raise ValueError(f"unknown attribute type {kind!r}")


def item_bytes(item: dict[str, dict[str, Any]]) -> int:
    """The size of an item: each attribute's name (UTF-8) and value."""
    return sum(len(name.encode()) + value_bytes(value) for name, value in item.items())


def number_bytes(text: str) -> int:
    """A number's bytes: about one per two significant digits (leading and trailing zeros are
    trimmed), plus one; text that is not a number counts its characters."""
    try:
        digits = Decimal(text).normalize().as_tuple().digits
    except InvalidOperation:
        return len(text)
    significant = len(digits) if any(digits) else 1
    return (significant + 1) // 2 + 1


def job_item_sizes(job: Job) -> dict[str, int]:
    """The bytes of each item that holds ``job``'s document, by item name: with the document as
    long as any version writes it. This one leaves out the fields at an empty default
    (:func:`punctual.models.job_documents.stored_document`); an earlier one, run again after a
    rollback, writes them all, and a job it cannot write again would stop where it stands."""
    attributes = job_attributes(job)
    listing = {"state": attributes["state"], "doc": attributes["doc"]}
    whole = job.model_dump_json()  # (the secrets are excluded by the model: attributes of their own)
    longer = max(len(whole.encode()) - value_bytes(attributes["doc"]), 0)
    return {
        "the job item": _KEY_BYTES + item_bytes(attributes) + longer,
        "the tenant's job listing": _KEY_BYTES + item_bytes(listing) + longer,
    }


def reply_record_bytes(spec: JobSpec) -> int:
    """The bytes of the record ``POST /v1/jobs`` with an ``Idempotency-Key`` keeps: Powertools
    stores the reply (the job as JSON) with ``json.dumps``, which escapes every non-ASCII
    character (an ``é`` is six bytes there, two in the job item)."""
    reply = json.dumps({"job": spec.model_dump(mode="json"), "secret_enc": None}, sort_keys=True)
    return _KEY_BYTES + _IDEMPOTENCY_OVERHEAD_BYTES + len("data") + len(reply.encode())


def largest_parts(job: JobSpec, count: int = 3) -> list[tuple[str, int]]:
    """The job's largest fields (dotted paths, to one level inside the target), in bytes of JSON."""
    doc = json.loads(job.model_dump_json())
    parts: list[tuple[str, int]] = []
    for name, value in doc.items():
        if name == "target" and isinstance(value, dict):
            parts += [(f"target.{key}", _json_bytes(inner)) for key, inner in value.items()]
        else:
            parts.append((name, _json_bytes(value)))
    return sorted(parts, key=lambda part: -part[1])[:count]


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def check_job_size(job: Job) -> None:
    """Refuse a job whose largest stored item would pass :data:`JOB_ITEM_LIMIT_BYTES`.

    Raises
    ------
    ItemTooLargeError
        Naming the item, its size, the limit and the job's largest parts.
    """
    item, size = max(job_item_sizes(job).items(), key=lambda pair: pair[1])
    if size > JOB_ITEM_LIMIT_BYTES:
        raise _too_large(item, size, largest_parts(job))


def check_reply_size(spec: JobSpec) -> None:
    """Refuse, before anything is stored, a creation whose idempotency record would not fit."""
    size = reply_record_bytes(spec)
    if size > JOB_ITEM_LIMIT_BYTES:
        raise _too_large(
            "the idempotency record of its creation (non-ASCII escaped)", size, largest_parts(spec)
        )


def _too_large(item: str, size: int, parts: list[tuple[str, int]]) -> ItemTooLargeError:
    named = ", ".join(f"{name} {nbytes:,} bytes" for name, nbytes in parts)
    return ItemTooLargeError(
        f"the job is too large to store: {item} would be {size:,} bytes, more than the"
        f" {JOB_ITEM_LIMIT_BYTES:,} allowed (DynamoDB's item limit is {ITEM_LIMIT_BYTES:,}"
        f" bytes, counted in UTF-8); its largest parts: {named}",
        field=parts[0][0] if parts else "",
        size=size,
        limit=JOB_ITEM_LIMIT_BYTES,
    )
