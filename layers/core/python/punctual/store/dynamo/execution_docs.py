"""An execution record's item attributes: its document, without what the item holds already.

Every trigger leaves a record behind for the retention period (30 days by default), written twice
(claim and finish) and read by history pages. Written in full, most of its document was fields at
their defaults on the common path (no error, no result, no backfill, one slot, no releases, ...)
and fields the item holds anyway: the slot (the sort key, ``exec#<slot>``), the owner (an
attribute of its own, which the write conditions compare) and, for a slot without jitter, its
instant (the slot's own). A RUNNING record's document was 431 characters; without them it is
about 130, stored for a month per trigger.

So the document leaves them out, and reading puts them back: defaults from the model, the slot
from the sort key, the instant from the slot, the owner from its attribute. The same record either way
(``tests/unit/test_execution_docs.py`` checks the round trip over generated records); documents
written in full, by earlier versions, read as before (their fields win over the item's).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic_core import SchemaSerializer, core_schema, from_json

from punctual.models import AttemptRecord, Execution, ExecutionStatus
from punctual.models.base import plain_model
from punctual.store.dynamo.keys import _packed_slot
from punctual.store.dynamo.schema import EXEC_PREFIX
from punctual.timing.timers import slot_instant


def record_attributes(execution: Execution) -> dict[str, dict[str, str]]:
    """The record's ``doc`` (every field that differs from its default, nested attempt records
    alike, less the slot, the owner, and the instant when it is the slot's own) and ``owner``
    attributes."""
    at_slot = _at_slot_instant(execution)
    doc = _lean_document(execution, at_slot) if _FIELDS_AS_WRITTEN else None
    if doc is None:  # a record of an unusual shape: pydantic writes it (the same text, or its error)
        exclude = {"slot", "owner"} if execution.owner else {"slot"}
        if at_slot:
            exclude.add("scheduled_at")
        doc = execution.model_dump_json(exclude_defaults=True, exclude=exclude)
    if execution.owner:
        return {"doc": {"S": doc}, "owner": {"S": execution.owner}}
    return {"doc": {"S": doc}}  # an empty owner stays in the document (exclude_defaults keeps "")


_UTC_OFFSET = timedelta(0)
_last_slot_instant: tuple[object, object, bool] = (object(), object(), False)  # (none asked yet)


def _at_slot_instant(execution: Execution) -> bool:
    """The record starts at its slot's own instant (no jitter, UTC, whole second): the instant
    reads back from the slot, exactly. Told by the slot's epoch second, which the timer packs
    keep for each slot text (:func:`.keys._packed_slot`, an int only for a slot key that is
    its second's own), not by formatting the instant (1 µs of each of a record's two writes).
    The last answer is kept by its instant and slot objects (both immutable): an ended record
    shares them with the RUNNING record written before it."""
    global _last_slot_instant
    at = execution.scheduled_at
    slot = execution.slot
    last = _last_slot_instant
    if at is last[0] and slot is last[1]:
        return last[2]
    if at.microsecond or (at.tzinfo is not UTC and at.utcoffset() != _UTC_OFFSET):
        answer = False
    else:
        second = _packed_slot(slot)
        answer = type(second) is int and second == at.timestamp()
    _last_slot_instant = (at, slot, answer)  # (swapped whole: threads may share it)
    return answer


# What pydantic writes for a string (serde_json): the quote, the backslash and the control characters
# escaped (\b \f \n \r \t, the rest as \u00xx), everything else as it is. json's own function for
# that (ensure_ascii off) writes the same, and refuses anything but a string (a TypeError).
_escape: Callable[[str], str] = json.encoder.encode_basestring

# The fields :func:`_lean_document` writes, in the models' order, with the defaults it leaves out.
# Should the models change (a field, its order or its default), every record takes pydantic's
# dump until the encoder follows (``tests/unit/test_execution_doc_encoder.py`` fails meanwhile).
_WRITTEN_FIELDS: dict[str, Any] = {
    "job_id": None,
    "tenant": "default",
    "slot": None,
    "scheduled_at": None,
    "attempt": 1,
    "status": None,
    "started_at": None,
    "finished_at": None,
    "error": None,
    "lease_until": None,
    "owner": None,
    "job_version": 1,
    "attempts": [],  # (its factory's)
    "result": None,
    "releases": 0,
    "blocked_by": None,
    "backfill": None,
    "backfill_dependants": False,
    "last_slot": None,
    "slot_count": 1,
    "retry_after_s": None,
    "told_at": None,
}
_WRITTEN_ATTEMPT_FIELDS: dict[str, Any] = {
    "attempt": None,
    "status": None,
    "started_at": None,
    "finished_at": None,
    "error": None,
    "owner": None,
}


def _defaults(model: type[Execution] | type[AttemptRecord]) -> dict[str, Any]:
    return {
        name: None if field.is_required() else field.get_default(call_default_factory=True, validated_data={})
        for name, field in model.model_fields.items()
    }


_FIELDS_AS_WRITTEN = (
    plain_model(Execution)  # (no serializer or validator of their own: review 19)
    and plain_model(AttemptRecord)
    and _defaults(Execution) == _WRITTEN_FIELDS
    and list(Execution.model_fields) == list(_WRITTEN_FIELDS)
    and _defaults(AttemptRecord) == _WRITTEN_ATTEMPT_FIELDS
    and list(AttemptRecord.model_fields) == list(_WRITTEN_ATTEMPT_FIELDS)
    # (and no setting of how they are written: an instant's form, say)
    and not any(key.startswith("ser_") for key in {**Execution.model_config, **AttemptRecord.model_config})
)


def _lean_document(execution: Execution, at_slot: bool) -> str | None:
    """The record's document as :func:`record_attributes` has pydantic write it (``exclude_defaults``,
    less the slot, a set owner, and the instant when ``at_slot``), written here field by field: a
    quarter of pydantic's cost, most of it its walk of the fields left at their defaults.

    For the record's common shape only: every value of its exact type (an int, a status, an
    instant, a string), no Retry-After hint (a float), text that UTF-8 can hold. For anything else
    None, and pydantic writes the record (the same text, or the same error).
    """
    if type(execution) is not Execution:
        return None
    v = execution.__dict__
    try:
        text = '{"job_id":' + _escape(v["job_id"])
        if v["tenant"] != "default":
            text += ',"tenant":' + _escape(v["tenant"])
        if not at_slot:
            text += ',"scheduled_at":' + _instant(v["scheduled_at"])
        if v["attempt"] != 1:
            text += ',"attempt":' + _int(v["attempt"])
        if type(v["status"]) is not ExecutionStatus:
            raise TypeError
        run = _run_part(v)
        text += ',"status":' + _escape(v["status"]) + run  # (a StrEnum: its text is its value)
        if v["lease_until"] is not None:
            text += ',"lease_until":' + _instant(v["lease_until"])
        owner = v["owner"]
        if not owner and owner is not None:  # a set owner is an attribute of its own
            text += ',"owner":' + _escape(owner)
        if v["job_version"] != 1:
            text += ',"job_version":' + _int(v["job_version"])
        attempts = v["attempts"]
        if type(attempts) is not list:
            raise TypeError
        if attempts:
            text += ',"attempts":['
            for i, attempt in enumerate(attempts):
                text += (
                    _attempt_document(attempt, v, run) if i == 0 else "," + _attempt_document(attempt, v, run)
                )
            text += "]"
        if (
            v["result"],
            v["releases"],
            v["blocked_by"],
            v["backfill"],
            v["backfill_dependants"],
            v["last_slot"],
            v["slot_count"],
            v["retry_after_s"],
            v["told_at"],
        ) != _DEFAULT_TAIL:  # (each compared as pydantic compares it with its default: ==)
            text += _tail(v)
        text += "}"
        if not text.isascii():
            text.encode()  # a lone surrogate: pydantic refuses it (its error, not ours)
    except (TypeError, KeyError, UnicodeEncodeError):  # (KeyError: a field its __dict__ lacks)
        return None
    return text


# The last fields' defaults: on the common path all of them.
_DEFAULT_TAIL = (None, 0, None, None, False, None, 1, None, None)


def _tail(v: dict[str, Any]) -> str:
    text = ""
    if v["result"] is not None:
        text += ',"result":' + _escape(v["result"])
    if v["releases"] != 0:
        text += ',"releases":' + _int(v["releases"])
    if v["blocked_by"] is not None:
        text += ',"blocked_by":' + _escape(v["blocked_by"])
    if v["backfill"] is not None:
        text += ',"backfill":' + _escape(v["backfill"])
    if v["backfill_dependants"] is not False:
        if v["backfill_dependants"] is not True:
            raise TypeError
        text += ',"backfill_dependants":true'
    if v["last_slot"] is not None:
        text += ',"last_slot":' + _escape(v["last_slot"])
    if v["slot_count"] != 1:
        text += ',"slot_count":' + _int(v["slot_count"])
    if v["retry_after_s"] is not None:  # a float: pydantic's form of it
        raise TypeError
    if v["told_at"] is not None:
        text += ',"told_at":' + _instant(v["told_at"])
    return text


def _attempt_document(attempt: AttemptRecord, record: dict[str, Any], run: str) -> str:
    """An attempt's entry; ``run``: the record's own start, end and error (``record``'s values),
    which the entry of the attempt that ended it repeats."""
    if type(attempt) is not AttemptRecord:
        raise TypeError
    v = attempt.__dict__
    if type(v["attempt"]) is not int or type(v["status"]) is not ExecutionStatus:
        raise TypeError
    if not (
        v["started_at"] is record["started_at"]
        and v["finished_at"] is record["finished_at"]
        and v["error"] is record["error"]
    ):
        run = _run_part(v)
    text = f'{{"attempt":{v["attempt"]},"status":{_escape(v["status"])}' + run
    if v["owner"] is not None:
        text += ',"owner":' + _escape(v["owner"])
    return text + "}"


def _run_part(v: dict[str, Any]) -> str:
    """A record's or an attempt's start, end and error: the fields both have, in the same order."""
    text = ""
    if v["started_at"] is not None:
        text += ',"started_at":' + _instant(v["started_at"])
    if v["finished_at"] is not None:
        text += ',"finished_at":' + _instant(v["finished_at"])
    if v["error"] is not None:
        text += ',"error":' + _escape(v["error"])
    return text


def _int(value: Any) -> str:
    if type(value) is not int:  # (a bool, a float: pydantic's form of it)
        raise TypeError
    return str(value)


# pydantic's own writer of an instant (ISO 8601, microseconds when not zero, ``Z`` for UTC): the
# text the record's fields get, at half the cost of ``isoformat``.
_instant_json = SchemaSerializer(core_schema.datetime_schema()).to_json

# The last two instants written, and their text: a record's attempt list repeats its own instants,
# and an ended record the start its RUNNING record wrote (a tuple swapped whole: threads may share it).
_recent: tuple[object, str, object, str] = (object(), "", object(), "")  # (nothing written yet)


def _instant(at: Any) -> str:
    """An instant as pydantic writes it, quoted."""
    global _recent
    recent = _recent
    if at is recent[0]:
        return recent[1]
    if at is recent[2]:
        text = recent[3]
    else:
        if type(at) is not datetime:
            raise TypeError
        text = _instant_json(at).decode()
    _recent = (at, text, recent[0], recent[1])
    return text


def execution_from_item(item: dict[str, Any]) -> Execution:
    """The record an item holds, written by :func:`record_attributes` or in full."""
    data = from_json(item["doc"]["S"])
    if not isinstance(data, dict):
        raise ValueError("execution document is not a JSON object")
    if "slot" not in data:
        data["slot"] = item["sk"]["S"].removeprefix(EXEC_PREFIX)
    if "scheduled_at" not in data:
        data["scheduled_at"] = slot_instant(data["slot"])
    if "owner" not in data and "owner" in item:
        data["owner"] = item["owner"]["S"]
    return Execution.model_validate(data)
