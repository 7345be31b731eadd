"""boto3 clients made one way: retries, timeouts and connection pools sized for a poller.

The one module that makes boto3 clients and sessions: :func:`client` for the scheduler's own
calls; :func:`session` and :func:`assumed_role_session` for the target adapters' factory
(:class:`punctual.delivery.targets.aws_clients.Boto3ClientFactory`), whose clients are
configured per call (timeouts, region, execution role).

boto3 honours ``AWS_ENDPOINT_URL`` (local mode points it at moto server), so the same code
reaches AWS or the embedded one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_clients: dict[str, Any] = {}


def client(service: str) -> Any:
    """A shared, thread-safe boto3 client for ``service`` (one per process)."""
    with _lock:
        if service not in _clients:
            import boto3
            from botocore.config import Config

            config = Config(
                retries={"mode": "standard", "max_attempts": 8},
                max_pool_connections=64,
                connect_timeout=5,
                read_timeout=30,
            )
            # Chaos runs throttle these from outside the layer (local.chaos.faults.throttle).
            _clients[service] = boto3.client(service, config=config)
        return _clients[service]


def reset() -> None:
    """Forget cached clients (tests switch endpoints and credentials)."""
    with _lock:
        _clients.clear()


def session(region_name: str | None = None) -> Any:
    """A new boto3 session with the environment's credentials (the target adapters' clients)."""
    import boto3  # the Lambda runtime ships it; imported late to keep imports cheap

    return boto3.session.Session(region_name=region_name)


def assumed_role_session(fetch: Callable[[], dict[str, str]], region_name: str | None) -> Any:
    """A boto3 session whose credentials come from ``fetch`` (an ``sts:AssumeRole`` as botocore's
    metadata: ``access_key``, ``secret_key``, ``token``, ``expiry_time``), refreshed by calling it
    again before they expire."""
    import boto3
    import botocore.session
    from botocore.credentials import RefreshableCredentials

    credentials = RefreshableCredentials.create_from_metadata(
        metadata=fetch(), refresh_using=fetch, method="sts-assume-role"
    )
    core = botocore.session.get_session()
    core._credentials = credentials  # botocore's documented way to give a session fixed providers
    return boto3.session.Session(botocore_session=core, region_name=region_name)
