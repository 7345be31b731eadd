"""Injected throttling goes through botocore's retries and Punctual's own, like the real thing."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from punctual import faults
from punctual.store.dynamo import DynamoStore, table_definition


def test_injected_throttles_are_retried_and_logged(aws, tmp_path) -> None:  # type: ignore[no-untyped-def]
    client = boto3.client(
        "dynamodb", region_name="us-east-1", config=Config(retries={"mode": "standard", "max_attempts": 10})
    )
    client.create_table(**table_definition("t"))
    injector = faults.install(client, "dynamodb", rate=0.3, seed=11, log_dir=str(tmp_path))
    store = DynamoStore(client, "t")
    # When 16 reads run against a table that throttles 30 % of requests
    for i in range(16):
        assert store.get_job("default", f"j{i}") is None
    # Then every read succeeded through retries, and every fault was counted and logged
    assert injector.injected >= 3
    lines = [json.loads(line) for f in tmp_path.iterdir() for line in f.read_text().splitlines()]
    assert len(lines) == injector.injected
    assert {line["service"] for line in lines} == {"dynamodb"}


def test_without_retries_the_error_is_the_services_throttling_code(aws) -> None:  # type: ignore[no-untyped-def]
    client = boto3.client(
        "sqs", region_name="us-east-1", config=Config(retries={"mode": "standard", "max_attempts": 1})
    )
    faults.install(client, "sqs", rate=0.999999, seed=1)
    with pytest.raises(ClientError) as throttled:
        client.list_queues()
    assert throttled.value.response["Error"]["Code"] == "RequestThrottled"


def test_from_env_is_off_unless_asked(aws, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    client = boto3.client("sqs", region_name="us-east-1")
    monkeypatch.delenv("PUNCTUAL_FAULT_THROTTLE_RATE", raising=False)
    assert faults.from_env(client, "sqs") is None
    monkeypatch.setenv("PUNCTUAL_FAULT_THROTTLE_RATE", "1.5")
    with pytest.raises(ValueError, match="below 1"):
        faults.from_env(client, "sqs")
