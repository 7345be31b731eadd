"""Fixtures every suite shares: fake AWS credentials, a moto table, and a store per backend."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

# Fake credentials before any boto3 client is built: nothing here may reach real AWS.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_SECURITY_TOKEN", "testing")
os.environ.setdefault("AWS_SESSION_TOKEN", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "PunctualTest")
os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "punctual")
os.environ.pop("AWS_ENDPOINT_URL", None)

# The repository root on the path (infra/, local/, bench/): any one suite or file runs on its own.
if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TABLE = "punctual-test"


@pytest.fixture
def aws() -> Iterator[None]:
    """An in-process moto AWS for the duration of one test."""
    from moto import mock_aws

    from punctual.runtime import composition

    composition.reset()  # a container and clients cached by an earlier test belong to its mock
    with mock_aws():
        yield
    composition.reset()


@pytest.fixture
def dynamo_client(aws: None):  # type: ignore[no-untyped-def]
    import boto3

    from punctual.store.dynamo import table_definition

    client = boto3.client("dynamodb", region_name="us-east-1")
    client.create_table(**table_definition(TABLE))
    return client


class LostAnswers:
    """A DynamoDB client whose put_item answers are lost once applied: each put is applied, then
    sent again, as botocore's retry after a read timeout sends it, and the retry's answer returned."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def put_item(self, **request: Any) -> Any:
        self._client.put_item(**request)  # applied; its answer never came
        return self._client.put_item(**request)


@pytest.fixture
def lost_answers(dynamo_client: Any) -> Any:
    """A DynamoStore whose puts are each applied, then sent again (:class:`LostAnswers`)."""
    from execution_harness import LAYOUT
    from punctual.store.dynamo import DynamoStore

    return DynamoStore(LostAnswers(dynamo_client), TABLE, LAYOUT)


@pytest.fixture(params=["memory", "dynamo"])
def store(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """Each store test runs against both implementations."""
    if request.param == "memory":
        from punctual.store.memory import MemoryStore

        return MemoryStore()
    from punctual.store.dynamo import DynamoStore

    client = request.getfixturevalue("dynamo_client")
    return DynamoStore(client, TABLE)


@pytest.fixture
def t0() -> datetime:
    """A fixed instant tests start from: a Monday, 10:00:00 UTC."""
    return datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
