"""boto3 clients made one way: retries, timeouts and connection pools sized for a poller.

boto3 honours ``AWS_ENDPOINT_URL`` (local mode points it at moto server), so the same code
reaches AWS or the embedded one.
"""

from __future__ import annotations

import threading
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
