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
_clients: dict[tuple[str, bool], Any] = {}

# The scheduler's own calls (DynamoDB, SQS sends, deletes and visibility changes, Step Functions,
# KMS, Secrets Manager, ...) answer in milliseconds. One whose response has not come in
# READ_TIMEOUT_S will not come (a response lost on its way, a black-holed connection): botocore's
# standard retries (read timeouts included) send it again on a fresh connection. At 30 s, as it
# was, one such call stalled a poller's release for 30 s, and a minute planned lean runs one
# poller per group: every slot of those seconds was more than 10 s late (docs/chaos.md, lean
# minutes). Every write of the claim and release paths tolerates finding itself applied (a
# FIFO send's deduplication id, idempotent timer and mark writes, an execution put or an alert's
# create or takeover that finds the very item it writes: punctual.store.dynamo).
CONNECT_TIMEOUT_S = 2
READ_TIMEOUT_S = 5
# An SQS long poll (the ECS worker's ReceiveMessage, WaitTimeSeconds up to 20) legitimately waits:
# its own client waits that long more.
LONG_POLL_MAX_S = 20


def client(service: str, long_poll: bool = False) -> Any:
    """A shared, thread-safe boto3 client for ``service`` (one per process), with the hot path's
    short timeouts; ``long_poll``: a second one whose reads wait out an SQS long poll."""
    with _lock:
        key = (service, long_poll)
        if key not in _clients:
            import boto3
            from botocore.config import Config

            config = Config(
                retries={"mode": "standard", "max_attempts": 8},
                max_pool_connections=64,
                connect_timeout=CONNECT_TIMEOUT_S,
                read_timeout=READ_TIMEOUT_S + (LONG_POLL_MAX_S if long_poll else 0),
            )
            # Chaos runs throttle these from outside the layer (local.chaos.faults.throttle).
            _clients[key] = boto3.client(service, config=config)
        return _clients[key]


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
