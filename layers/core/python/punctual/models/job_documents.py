"""A job's JSON document: as stored (:func:`stored_document`), and as its store read it, kept beside
the :class:`Job` made from it.

A stored document leaves out the fields at an empty default (None at any depth; "", 0, False, an
empty list or mapping of the job and its target: about a third of a job's document, whose parse
each trigger pays twice, the poller's read and the worker's read of what the message carries, about
2 µs each). A reader fills them in from the model's defaults, as every version's model does for a
field its document does not hold: such a default is never changed (``tests/unit/test_job_documents.py``
pins them), and a document written in full, by an earlier version, reads as before. An older
version reads it too (its models have these fields' defaults, or ignore a field they do not know).

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
from functools import lru_cache
from itertools import compress
from typing import Any, get_args

from pydantic import BaseModel

from punctual.models.jobs import Job
from punctual.models.targets import Target

# Fields a job's stored document leaves out (the store keeps them beside it); a document that
# holds any of them (written by hand) is not used as the job's dump.
KEPT_BESIDE = frozenset({"dependents", "trigger_rate", "signing_secret_enc", "signing_secret_prev_enc"})

# id(job) -> (the job, weakly; its field values when noted; the document)
_NOTES: dict[int, tuple[weakref.ref[Job], tuple[object, ...], str]] = {}


def note_document(job: Job, document: str) -> None:
    """Note that ``document`` is ``job``'s JSON document: read alone, it is ``job`` (what
    :func:`stored_document` would say; the text may differ in form, written by an earlier version)."""
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


def empty_defaults(model: type[BaseModel]) -> tuple[tuple[str, Any], ...]:
    """``model``'s dumped fields whose default is empty, each with that default."""
    found = []
    for name, field in model.model_fields.items():
        default = field.get_default(call_default_factory=True)
        if not field.exclude and not isinstance(default, BaseModel) and not default:
            found.append((name, default))
    return tuple(found)


class _Empties:
    """Which of a model's fields are at an empty default that a dump's ``exclude_none`` does not
    leave out ("", 0, False, [] or {}: every field of a job's models that may be None defaults to
    None, which the tests pin). Each holds one type, whose only falsy value is its default."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.names = tuple(name for name, default in empty_defaults(model) if default is not None)
        self._values = operator.itemgetter(*self.names) if len(self.names) > 1 else None  # (a tuple)

    def flags(self, model: BaseModel) -> tuple[bool, ...]:
        """Whether each of the fields is at its default, told in C calls (two or more of them)."""
        if self._values is None:
            return tuple(not model.__dict__[name] for name in self.names)
        return tuple(map(operator.not_, self._values(model.__dict__)))


_JOB_EMPTY = _Empties(Job)
_TARGET_EMPTY = {choice: _Empties(choice) for choice in get_args(get_args(Target)[0])}


@lru_cache(maxsize=1024)
def _exclusion(job: tuple[bool, ...], target: type[BaseModel], in_target: tuple[bool, ...]) -> dict[str, Any]:
    """A dump's ``exclude`` of the fields these flags say are empty: made once for each such
    pattern, which few jobs do not share (a Python loop over them cost 1 µs a dump). Not to be
    changed: a dump only reads it."""
    exclude: dict[str, Any] = dict.fromkeys(compress(_JOB_EMPTY.names, job), True)
    exclude["target"] = set(compress(_TARGET_EMPTY[target].names, in_target))
    return exclude


def stored_document(job: Job) -> str:
    """``job``'s document as the store writes it (and a message carries it): its JSON dump less the
    fields at an empty default (None at any depth, and the job's and its target's other empty
    ones). Less text to write than the full dump, in about the same time."""
    target = type(job.target)
    exclude = _exclusion(_JOB_EMPTY.flags(job), target, _TARGET_EMPTY[target].flags(job.target))
    return job.model_dump_json(exclude=exclude, exclude_none=True)
