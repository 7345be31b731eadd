"""``plain_model``: the guard of the execution records' hand-made builds and documents. A record
model that gains a validator, a serializer or a computed field is built and written by pydantic
again (review 19: the guards knew the fields and defaults only)."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    PlainSerializer,
    computed_field,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from punctual.models import AttemptRecord, Execution
from punctual.models.base import plain_model


class _Plain(BaseModel):
    name: str = ""
    count: int = 0


class _FieldValidator(_Plain):
    @field_validator("name")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.strip()


class _ModelValidator(_Plain):
    @model_validator(mode="after")
    def _check(self) -> _ModelValidator:
        return self


class _FieldSerializer(_Plain):
    @field_serializer("name")
    def _upper(self, value: str) -> str:
        return value.upper()


class _ModelSerializer(_Plain):
    @model_serializer
    def _all(self) -> dict[str, object]:
        return {"n": self.name}


class _Computed(_Plain):
    @computed_field  # type: ignore[prop-decorator]
    @property
    def twice(self) -> int:
        return self.count * 2


class _AnnotatedAfter(BaseModel):
    name: Annotated[str, AfterValidator(str.strip)] = ""


class _AnnotatedBefore(BaseModel):
    name: Annotated[str, BeforeValidator(str)] = ""


class _AnnotatedSerializer(BaseModel):
    name: Annotated[str, PlainSerializer(str.upper)] = ""


def test_the_record_models_are_plain() -> None:
    assert plain_model(Execution) and plain_model(AttemptRecord)
    assert plain_model(_Plain)


@pytest.mark.parametrize(
    "model",
    [
        _FieldValidator,
        _ModelValidator,
        _FieldSerializer,
        _ModelSerializer,
        _Computed,
        _AnnotatedAfter,
        _AnnotatedBefore,
        _AnnotatedSerializer,
    ],
)
def test_a_model_with_a_rule_or_a_serializer_of_its_own_is_not_plain(model: type[BaseModel]) -> None:
    assert not plain_model(model)
