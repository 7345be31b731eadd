"""Injected throttling goes through botocore's retries and Punctual's own, like the real thing."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.session import Session

from local.chaos.faults import throttle
from punctual.store.dynamo import DynamoStore, table_definition


def test_injected_throttles_are_retried_and_logged(aws, tmp_path) -> None:  # type: ignore[no-untyped-def]
    client = boto3.client(
        "dynamodb", region_name="us-east-1", config=Config(retries={"mode": "standard", "max_attempts": 10})
    )
    client.create_table(**table_definition("t"))
    injector = throttle.install(client, "dynamodb", rate=0.3, seed=11, log_dir=str(tmp_path))
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
    throttle.install(client, "sqs", rate=0.999999, seed=1)
    with pytest.raises(ClientError) as throttled:
        client.list_queues()
    assert throttled.value.response["Error"]["Code"] == "RequestThrottled"


def test_throttling_from_the_environment_is_off_unless_asked(aws, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Given botocore's client factory, restored after the test whatever is installed on it
    monkeypatch.setattr(Session, "create_client", Session.create_client)
    unpatched = Session.create_client
    monkeypatch.delenv(throttle.RATE_ENV, raising=False)
    assert throttle.install_from_env() is False
    assert Session.create_client is unpatched
    monkeypatch.setenv(throttle.RATE_ENV, "1.5")
    with pytest.raises(ValueError, match="below 1"):
        throttle.install_from_env()
    assert Session.create_client is unpatched


def test_throttling_from_the_environment_reaches_every_client_made_afterwards(  # type: ignore[no-untyped-def]
    aws, monkeypatch, tmp_path
) -> None:
    monkeypatch.setattr(Session, "create_client", Session.create_client)
    monkeypatch.setenv(throttle.RATE_ENV, "0.999999")
    monkeypatch.setenv(throttle.LOG_DIR_ENV, str(tmp_path))
    # When a process asks for throttling, then makes an SQS client without retries
    assert throttle.install_from_env() is True
    client = boto3.client(
        "sqs", region_name="us-east-1", config=Config(retries={"mode": "standard", "total_max_attempts": 1})
    )
    # Then its request is answered with the service's throttling error, and logged
    with pytest.raises(ClientError) as throttled:
        client.list_queues()
    assert throttled.value.response["Error"]["Code"] == "RequestThrottled"
    [log] = tmp_path.iterdir()
    assert [json.loads(line)["operation"] for line in log.read_text().splitlines()] == ["ListQueues"]
