"""Injected AWS throttling for chaos runs: the service's throttling error under botocore's retries.

A ``before-send`` hook answers a share of a client's requests with the throttling error the
service would send, so botocore's retry policy, and Punctual's own retries above it, handle
it exactly as they would a real one. Every injected fault is appended to a per-process file
under the log directory (append-only, so a process killed with -9 loses nothing that was
written), which the chaos verdict counts.

Local mode only, never in the Lambda layer: :func:`install_throttling` patches botocore so
that every DynamoDB and SQS client a process makes from then on is throttled (the core's,
local mode's event source mapping, the worker's). The chaos driver's processes call it for
``--throttle-rate`` (:mod:`local.chaos.faults.procs`); any local-mode component does when
``PUNCTUAL_FAULT_THROTTLE_RATE`` is above zero (:func:`install_from_env`, logging under
``PUNCTUAL_FAULT_LOG_DIR``).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import threading
from pathlib import Path
from typing import Any

from botocore.awsrequest import AWSResponse

# The error each service answers with when it throttles (all of them use the JSON protocol here).
_THROTTLE_CODES = {
    "dynamodb": "ProvisionedThroughputExceededException",
    "sqs": "RequestThrottled",
}
_DEFAULT_CODE = "ThrottlingException"


class _RawBody:
    """The minimal file-like body botocore reads an error response from."""

    def __init__(self, payload: bytes) -> None:
        self._payload = payload

    def stream(self, **_: Any) -> Any:
        yield self._payload

    def read(self, *_: Any, **__: Any) -> bytes:
        data, self._payload = self._payload, b""
        return data


class ThrottleInjector:
    """Answers ``rate`` of a client's requests with a throttling error."""

    def __init__(self, service: str, rate: float, rng: random.Random, log_dir: str | None = None) -> None:
        self.service = service
        self.rate = rate
        self.rng = rng
        self.injected = 0
        self._lock = threading.Lock()
        self._log: Path | None = Path(log_dir) / f"faults-{os.getpid()}.jsonl" if log_dir else None
        if self._log:
            self._log.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, request: Any, **kwargs: Any) -> AWSResponse | None:
        with self._lock:
            if self.rng.random() >= self.rate:
                return None
            self.injected += 1
        code = _THROTTLE_CODES.get(self.service, _DEFAULT_CODE)
        operation = kwargs.get("event_name", "").rsplit(".", 1)[-1]
        if self._log:
            with self._log.open("a") as out:
                out.write(
                    json.dumps({"kind": "throttle", "service": self.service, "operation": operation}) + "\n"
                )
        body = json.dumps({"__type": code, "message": "injected by Punctual chaos"}).encode()
        headers = {"x-amzn-query-error": f"{code};Sender", "content-type": "application/x-amz-json-1.0"}
        return AWSResponse(request.url, 400, headers, _RawBody(body))


def install(
    client: Any, service: str, rate: float, seed: int | None = None, log_dir: str | None = None
) -> ThrottleInjector:
    """Attach a throttle injector to a boto3 client; returns it (its ``injected`` counts)."""
    injector = ThrottleInjector(service, rate, random.Random(seed), log_dir)
    client.meta.events.register(f"before-send.{client.meta.service_model.endpoint_prefix}", injector)
    return injector


RATE_ENV = "PUNCTUAL_FAULT_THROTTLE_RATE"
LOG_DIR_ENV = "PUNCTUAL_FAULT_LOG_DIR"
THROTTLED_SERVICES = ("dynamodb", "sqs")


def install_throttling(rate: float, seed: int | None, log_dir: str | None) -> None:
    """Throttle every DynamoDB and SQS client made in this process from now on.

    Each client gets its own injector, seeded ``seed * 1000 + n`` for the n-th client made
    (unseeded when ``seed`` is None).
    """
    from botocore.session import Session

    original = Session.create_client
    made = itertools.count()

    def create_client(self: Session, service_name: str, *args: Any, **kwargs: Any) -> Any:
        client = original(self, service_name, *args, **kwargs)
        if service_name in THROTTLED_SERVICES:
            client_seed = None if seed is None else seed * 1000 + next(made)
            install(client, service_name, rate, seed=client_seed, log_dir=log_dir)
        return client

    Session.create_client = create_client  # botocore is untyped here (Any): no ignore needed


def install_from_env() -> bool:
    """Install throttling when ``PUNCTUAL_FAULT_THROTTLE_RATE`` asks for it; return whether it did."""
    rate = float(os.environ.get(RATE_ENV, "0") or 0)
    if rate <= 0:
        return False
    if rate >= 1:
        raise ValueError(f"{RATE_ENV} must be below 1")
    install_throttling(rate, None, os.environ.get(LOG_DIR_ENV) or None)
    return True
