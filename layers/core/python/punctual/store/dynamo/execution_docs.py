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

from datetime import timedelta
from typing import Any

from pydantic_core import from_json

from punctual.models import Execution
from punctual.store.dynamo.keys import _packed_slot
from punctual.store.dynamo.schema import EXEC_PREFIX
from punctual.timing.timers import slot_instant


def record_attributes(execution: Execution) -> dict[str, dict[str, str]]:
    """The record's ``doc`` (every field that differs from its default, nested attempt records
    alike, less the slot, the owner, and the instant when it is the slot's own) and ``owner``
    attributes."""
    exclude = {"slot", "owner"} if execution.owner else {"slot"}
    if _at_slot_instant(execution):
        exclude.add("scheduled_at")
    doc = execution.model_dump_json(exclude_defaults=True, exclude=exclude)
    if execution.owner:
        return {"doc": {"S": doc}, "owner": {"S": execution.owner}}
    return {"doc": {"S": doc}}  # an empty owner stays in the document (exclude_defaults keeps "")


_UTC_OFFSET = timedelta(0)


def _at_slot_instant(execution: Execution) -> bool:
    """The record starts at its slot's own instant (no jitter, UTC, whole second): the instant
    reads back from the slot, exactly. Told by the slot's epoch second, which the timer packs
    keep for each slot text (:func:`.keys._packed_slot`, an int only for a slot key that is
    its second's own), not by formatting the instant (1 µs of each of a record's two writes)."""
    at = execution.scheduled_at
    if at.microsecond or at.utcoffset() != _UTC_OFFSET:
        return False
    second = _packed_slot(execution.slot)
    return type(second) is int and second == at.timestamp()


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
