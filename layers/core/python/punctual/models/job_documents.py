"""A job's JSON document as its store read it, kept beside the :class:`Job` made from it.

Every message a poller sends carries its job (:func:`punctual.dispatch.queues.spec_of`): the job's
JSON dump, about a fifth of the poller's own CPU per trigger when pydantic serializes the model
again. The DynamoDB store has just read that document: when the document says exactly what the job
read from it holds (its version, state and skipped count agree with the item's attributes, and it
holds none of the fields kept beside it), the store notes it here, and the message carries it as
it is.

The note belongs to one :class:`Job` object and is dropped with it (a weak reference). Jobs are
never changed in place (a change is a ``model_copy``, a new object, which has no note), and the
note is checked against the object's field values anyway: a note whose object's fields were
replaced since is not used.
"""

from __future__ import annotations

import operator
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from punctual.models.jobs import Job

# Fields a job's stored document leaves out (the store keeps them beside it); a document that
# holds any of them (written by hand) is not used as the job's dump.
KEPT_BESIDE = frozenset({"dependents", "trigger_rate", "signing_secret_enc", "signing_secret_prev_enc"})

# id(job) -> (the job, weakly; its field values when noted; the document)
_NOTES: dict[int, tuple[weakref.ref[Job], tuple[object, ...], str]] = {}


def note_document(job: Job, document: str) -> None:
    """Note that ``document`` is ``job``'s JSON document: what ``job.model_dump_json()`` would say
    (the same fields and values; the text may differ in form, written by an earlier version)."""
    key = id(job)

    def forget(_: object, key: int = key) -> None:
        _NOTES.pop(key, None)

    _NOTES[key] = (weakref.ref(job, forget), tuple(job.__dict__.values()), document)


def document_of(job: Job) -> str | None:
    """The document noted for ``job``, while its fields are the ones it was noted with; else None."""
    note = _NOTES.get(id(job))
    if note is None:
        return None
    ref, values, document = note
    if ref() is not job:
        return None
    current = job.__dict__.values()
    # Every field the very object it was noted with (compared in C: map over operator.is_)
    if len(current) != len(values) or not all(map(operator.is_, current, values)):
        return None
    return document
