"""The carried read's validator of types alone leaves out the rules of nested models too.

pydantic-core reuses a complete model class's own validator for a nested model without a model
validator (a target, a policy), and that validator runs every rule of the class: the validator of
types alone is built so that it does not (:func:`punctual.models.base.validator_without`).
"""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, ValidationError, field_validator

from factories import job
from punctual.dispatch.queues import spec_of
from punctual.models import Job
from punctual.models.base import validator_without
from punctual.models.jobs import _CARRIED_TYPES


def _document(**target: object) -> str:
    data = json.loads(spec_of(job()))
    data["target"].update(target)
    return json.dumps(data)


def test_a_nested_targets_rules_are_not_run_by_the_types_alone() -> None:
    # A url of another scheme is a string (its type), refused by HttpTarget's rule alone.
    document = _document(url="ftp://example.com/x")
    with pytest.raises(ValidationError, match="url must start with http"):
        Job.model_validate_json(document)
    read = _CARRIED_TYPES.validate_json(document)
    assert isinstance(read, Job) and read.target.url == "ftp://example.com/x"  # type: ignore[union-attr]
    with pytest.raises(ValidationError):  # its types still hold
        _CARRIED_TYPES.validate_json(_document(url=7))


class _Inner(BaseModel):
    n: int

    @field_validator("n")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("n must be positive")
        return value


class _Outer(BaseModel):
    inner: _Inner


def test_a_named_nested_rule_is_left_out_and_the_classes_stay_complete() -> None:
    without = validator_without(_Outer, {"_Inner._positive"})
    assert without.validate_python({"inner": {"n": -1}}).inner.n == -1
    assert _Inner.__pydantic_complete__ and _Outer.__pydantic_complete__
    with pytest.raises(ValidationError, match="n must be positive"):  # the class's own, unchanged
        _Outer.model_validate({"inner": {"n": -1}})
