"""Shared by the AWS target tests (test_aws_targets.py, test_aws_target_ecs.py): moto with a
client factory that records its calls, a slot context, and a Stubber'd client for the answers
moto never gives."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from punctual.delivery.targets.aws_clients import CallTimeouts
from punctual.delivery.targets.base import SlotContext

REGION = "us-east-1"
ACCOUNT = "123456789012"
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


class Clients:
    """A client factory like the one local mode passes: cached clients, calls recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []
        self.timeouts: list[CallTimeouts | None] = []  # what each call asked for (moto ignores them)
        self._cache: dict[tuple[str, str], Any] = {}

    def __call__(
        self, service: str, region: str | None = None, *, timeouts: CallTimeouts | None = None
    ) -> Any:
        self.calls.append((service, region))
        self.timeouts.append(timeouts)
        key = (service, region or REGION)
        if key not in self._cache:
            self._cache[key] = boto3.client(service, region_name=key[1])
        return self._cache[key]

    def capture(self, service: str, operation: str) -> list[dict[str, Any]]:
        """Record the parameters of every ``operation`` call made through this factory's client."""
        seen: list[dict[str, Any]] = []
        self(service).meta.events.register(
            f"provide-client-params.{self(service).meta.service_model.endpoint_prefix}.{operation}",
            lambda params, **_: seen.append(dict(params)),
        )
        self.calls.clear()
        return seen


@pytest.fixture
def clients() -> Iterator[Clients]:
    with mock_aws(config={"lambda": {"use_docker": False}}):
        yield Clients()


def ctx(
    *,
    job_id: str = "nightly-export",
    slot: str = "2026-11-30T10:00:00Z",
    attempt: int = 1,
    tenant: str = "acme",
    timeout_s: float = 300,
    heartbeat: Callable[[], bool] = lambda: True,
) -> SlotContext:
    return SlotContext(
        job_id=job_id,
        tenant=tenant,
        slot=slot,
        scheduled_at=T0,
        attempt=attempt,
        timeout_s=timeout_s,
        heartbeat=heartbeat,
    )


def stubbed(service: str) -> tuple[Any, Stubber, Callable[..., Any]]:
    """A real client with a Stubber on it, and a factory that always returns it."""
    client = boto3.client(service, region_name=REGION)
    return client, Stubber(client), lambda *_args, **_kwargs: client
