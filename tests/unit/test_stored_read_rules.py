"""A stored job's read calls the job's rules itself (:func:`punctual.models.jobs.read_accepted`):
whatever a document breaks, alone or together, it reads as the full validation reads it, the same
job or the same error."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.models import ACCEPTED, Job
from punctual.models.jobs import _STORED_RULES, _rules_of, read_accepted

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)

BASE: dict[str, Any] = json.loads(
    Job.model_validate(
        {
            "id": "job-1",
            "schedule": "rate(5 minutes)",
            "target": {"type": "http", "url": "https://example.com/hook"},
            "payload": {"n": 1},
            "created_at": T0,
            "updated_at": T0,
            "anchor": T0,
        }
    ).model_dump_json(exclude_none=True)
)

# Each breaks (or keeps) one of the rules the read calls itself, or one pydantic still calls.
EDITS: dict[str, Any] = {
    "id with a space": {"id": "job 1"},
    "id with a final newline (a stored id's old rule)": {"id": "job-1\n"},
    "empty id": {"id": ""},
    "unknown zone": {"timezone": "Mars/Olympus"},
    "zone of a stored job": {"timezone": "Europe/Berlin"},
    "deep payload": {"payload": json.loads("[" * 40 + "]" * 40)},
    "big payload": {"payload": "x" * (256 * 1024 + 1)},
    "payload of many members": {"payload": list(range(10_001))},
    "payload null": {"payload": None},
    "no payload": {"payload": ...},
    "end before start": {"start_at": "2027-01-01T00:00:00Z", "end_at": "2026-01-01T00:00:00Z"},
    "no slot in range": {
        "schedule": "cron(0 3 1 1 ? *)",
        "start_at": "2026-02-01T00:00:00Z",
        "end_at": "2026-03-01T00:00:00Z",
    },
    "lambda too long": {"timeout_seconds": 900},
    "ecs long": {"timeout_seconds": 900, "runtime": "ecs"},
    "unparsable schedule": {"schedule": "rate(0 minutes)"},
    "retry cap below base": {"retry": {"base_seconds": 10, "max_seconds": 5}},
    "retry fine": {"retry": {"base_seconds": 1, "max_seconds": 5}},
    "GET with a payload (input only)": {"target": {"type": "http", "url": "https://e.x/", "method": "GET"}},
    "text target with JSON payload": {
        "target": {"type": "http", "url": "https://e.x/", "headers": {"Content-Type": "text/plain"}}
    },
    "bad url": {"target": {"type": "http", "url": "ftp://e.x/"}},
    "alert target bad url": {
        "alerts": [{"on": "failed", "target": {"type": "http", "url": "ftp://e.x/"}}],
    },
    "wrong type": {"version": "three"},
    "at with repeat both (input only)": {"schedule": "at(2027-01-01T00:00:00)", "dst": {"repeat": "both"}},
    "after with jitter (input only)": {"schedule": "after(job-0)", "jitter_seconds": 5},
}


def _document(names: list[str]) -> str:
    data = json.loads(json.dumps(BASE))
    for name in names:
        for key, value in EDITS[name].items():
            if value is ...:
                data.pop(key, None)
            else:
                data[key] = value
    return json.dumps(data)


def _read(read: Any, document: str) -> tuple[str, Any]:
    try:
        job = read(document)
    except ValueError as exc:
        return "error", str(exc)
    return "job", (job, job.model_fields_set, type(job.target))


def _full(document: str) -> Job:
    return Job.model_validate_json(document, context=ACCEPTED)


@pytest.mark.parametrize("name", sorted(EDITS))
def test_a_document_that_breaks_or_keeps_one_rule_reads_as_in_full(name: str) -> None:
    document = _document([name])
    assert _read(read_accepted, document) == _read(_full, document)


@settings(max_examples=300, deadline=None)
@given(names=st.lists(st.sampled_from(sorted(EDITS)), unique=True, max_size=5))
def test_a_document_that_breaks_several_rules_reads_as_in_full(names: list[str]) -> None:
    document = _document(names)
    assert _read(read_accepted, document) == _read(_full, document)


def test_the_rules_it_calls_are_each_called_at_one_place() -> None:
    # A rule the schema calls at two places (a target's, which an alert's target has too) could
    # not be called by the read for both: it must be refused when the read is built.
    assert len(_rules_of(Job, _STORED_RULES)) == len(_STORED_RULES)
    with pytest.raises(ValueError):
        _rules_of(Job, ("HttpTarget._url_scheme",))
    with pytest.raises(ValueError):
        _rules_of(Job, ("JobSpec._no_such_rule",))
