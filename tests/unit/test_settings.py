"""Settings: one definition, and the variable names derived from it."""

from __future__ import annotations

import pytest

from punctual.runtime.settings import Settings, SettingsError


def test_a_fields_variable_is_its_name_under_the_prefix() -> None:
    assert Settings.variable("shard_count") == "PUNCTUAL_SHARD_COUNT"
    assert Settings.from_env({"PUNCTUAL_SHARD_COUNT": "7"}).shard_count == 7


def test_a_name_that_is_no_setting_has_no_variable() -> None:
    with pytest.raises(KeyError, match="'table' is not a setting"):
        Settings.variable("table")


@pytest.mark.parametrize("host", ["AWS_Lambda_python3.11", "AWS_ECS_FARGATE", "AWS_ECS_EC2"])
def test_local_mode_is_refused_where_aws_runs_the_process(host: str) -> None:
    # QA27: local mode trusts X-Punctual-Tenant and derives the paging-token key from the table's
    # name; a component deployed with PUNCTUAL_LOCAL_MODE would let any caller be any tenant
    with pytest.raises(SettingsError, match=r"PUNCTUAL_LOCAL_MODE is set in an AWS execution environment"):
        Settings.from_env({"PUNCTUAL_LOCAL_MODE": "1", "AWS_EXECUTION_ENV": host})
    assert not Settings.from_env({"PUNCTUAL_LOCAL_MODE": "0", "AWS_EXECUTION_ENV": host}).local_mode


def test_local_mode_is_taken_off_aws() -> None:
    assert Settings.from_env({"PUNCTUAL_LOCAL_MODE": "1"}).local_mode
