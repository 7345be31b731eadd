"""A job's stored document leaves out the fields at an empty default, and reads back as the job.

Every version's model reads a field a document does not hold as its default: a default that may be
left out is never changed (a stored job would change with it), which the list below pins.
"""

from __future__ import annotations

import json
from typing import Any, get_args

from hypothesis import HealthCheck, given, settings
from pydantic import BaseModel
from test_carried_read import TARGETS, _job, jobs

from punctual.dispatch.queues import job_from_spec, spec_of
from punctual.models import ACCEPTED, Job
from punctual.models.job_documents import empty_defaults, stored_document
from punctual.models.targets import EcsTarget, HttpTarget, SqsTarget

# Changing one of these defaults changes every stored job that leaves the field out: add a new
# field here freely, but give a changed default a new field (or write the documents in full).
JOB_EMPTY_DEFAULTS = (
    ("name", ""),
    ("description", ""),
    ("start_at", None),
    ("end_at", None),
    ("payload", None),
    ("jitter_seconds", 0),
    ("max_lateness_seconds", None),
    ("dst", None),
    ("tags", {}),
    ("dead_letter", None),
    ("events_bus", None),
    ("delete_after_completion", False),
    ("scheduler", None),
    ("alerts", []),
    ("exclude_calendars", []),
    ("next_fire_at", None),
    ("skipped_slots", 0),
    ("paused_at", None),
    ("state_reason", None),
    ("spec_version", 0),
    ("owed_from", None),
    ("delay_after", None),
    ("overlap_checks_until", None),
    ("restarts", []),
)


def test_the_defaults_a_document_may_leave_out_are_the_ones_pinned() -> None:
    assert empty_defaults(Job) == JOB_EMPTY_DEFAULTS
    assert empty_defaults(HttpTarget) == (
        ("rate_budget_per_second", None),
        ("headers", {}),
        ("follow_redirects", False),
    )
    assert empty_defaults(SqsTarget) == (
        ("rate_budget_per_second", None),
        ("role_arn", None),
        ("message_group_id", None),
    )
    assert empty_defaults(EcsTarget) == (
        ("rate_budget_per_second", None),
        ("role_arn", None),
        ("security_groups", []),
        ("assign_public_ip", False),
        ("container_name", None),
    )


def _less_empties(full: Any, lean: Any) -> bool:
    """``lean`` is ``full`` less object members whose value is empty (None, "", 0, False, [], {})."""
    if isinstance(full, dict) and isinstance(lean, dict):
        return set(lean) <= set(full) and all(
            _less_empties(full[key], lean[key]) if key in lean else not full[key] for key in full
        )
    if isinstance(full, list) and isinstance(lean, list):
        return len(full) == len(lean) and all(map(_less_empties, full, lean))
    return bool(full == lean)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs())
def test_a_stored_document_reads_back_as_the_job(job: Job) -> None:
    document = stored_document(job)
    full = json.loads(job.model_dump_json())
    lean = json.loads(document)
    assert lean.get("payload") == full["payload"]  # the payload as it is, its empty values too
    assert _less_empties(full, lean)  # the rest: only fields at an empty value left out
    beside = {"dependents": 0, "trigger_rate": 0, "signing_secret_enc": None}
    assert Job.model_validate_json(document, context=ACCEPTED) == job.model_copy(update=beside)
    assert Job.model_validate_json(job.model_dump_json(), context=ACCEPTED) == job.model_copy(update=beside)
    assert job_from_spec(spec_of(job)) == job  # the carried form: the store's document and counters


def test_an_empty_payload_or_a_falsy_one_is_kept() -> None:
    for payload in (0, "", [], {}, False):
        job = _job(TARGETS[0], payload, {})
        assert json.loads(stored_document(job))["payload"] == payload
        assert Job.model_validate_json(stored_document(job)).payload == payload


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    found = [m for arg in get_args(annotation) for m in _models_in(arg)]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        found.append(annotation)
    return found


def test_every_field_of_a_jobs_models_that_may_be_none_defaults_to_none() -> None:
    # A stored document leaves out None at any depth (a dump's exclude_none): it must read back as None.
    seen: set[type[BaseModel]] = set()
    wrong: list[str] = []
    todo: list[type[BaseModel]] = [Job]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            may_be_none = type(None) in get_args(field.annotation) or field.annotation is Any
            if may_be_none and (
                field.is_required() or field.get_default(call_default_factory=True) is not None
            ):
                wrong.append(f"{model.__name__}.{name}")
            todo.extend(_models_in(field.annotation))
    assert len(seen) >= 15 and wrong == []
