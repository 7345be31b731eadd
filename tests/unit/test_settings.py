"""Settings: one definition, and the variable names derived from it."""

from __future__ import annotations

import pytest

from punctual.runtime.settings import Settings


def test_a_fields_variable_is_its_name_under_the_prefix() -> None:
    assert Settings.variable("shard_count") == "PUNCTUAL_SHARD_COUNT"
    assert Settings.from_env({"PUNCTUAL_SHARD_COUNT": "7"}).shard_count == 7


def test_a_name_that_is_no_setting_has_no_variable() -> None:
    with pytest.raises(KeyError, match="'table' is not a setting"):
        Settings.variable("table")
