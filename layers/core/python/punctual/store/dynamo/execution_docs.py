"""The stored document of an execution record: the fields that differ from the model's defaults.

Every trigger leaves a record behind for the retention period (30 days by default), written twice
(claim and finish) and read by history pages. Most of a record's fields hold their defaults on the
common path (no error, no result, no backfill, one slot, no releases, ...): written out they made
about a third of the item (a RUNNING record's document was 436 characters, 240 without them),
stored for a month per trigger. So the document leaves them out, and reading fills them in again
from the model: the same record either way (``tests/unit/test_execution_docs.py`` checks the
round trip over generated records). Documents written in full, by earlier versions, read as before.
"""

from __future__ import annotations

from punctual.models import Execution


def execution_doc(execution: Execution) -> str:
    """The record's document: JSON of every field that differs from its default (nested attempt
    records alike)."""
    return execution.model_dump_json(exclude_defaults=True)


def execution_from_doc(doc: str) -> Execution:
    """The record a document holds, written by :func:`execution_doc` or in full."""
    return Execution.model_validate_json(doc)
