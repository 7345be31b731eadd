"""Fault injection for chaos runs: AWS throttling injected under botocore's retry layer.

Enabled only when ``PUNCTUAL_FAULT_THROTTLE_RATE`` is above zero (never in a deployment's
settings). A ``before-send`` hook answers a share of requests with the throttling error the
service would send, so botocore's retry policy, and Punctual's own retries above it, handle
it exactly as they would a real one. Every injected fault is appended to a per-process file
under ``PUNCTUAL_FAULT_LOG_DIR`` (append-only, so a process killed with -9 loses nothing that
was written), which the chaos verdict counts.
"""

from __future__ import annotations

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


def from_env(client: Any, service: str) -> ThrottleInjector | None:
    """Install the injector when ``PUNCTUAL_FAULT_THROTTLE_RATE`` asks for one."""
    rate = float(os.environ.get("PUNCTUAL_FAULT_THROTTLE_RATE", "0") or 0)
    if rate <= 0:
        return None
    if rate >= 1:
        raise ValueError("PUNCTUAL_FAULT_THROTTLE_RATE must be below 1")
    return install(client, service, rate, None, os.environ.get("PUNCTUAL_FAULT_LOG_DIR") or None)
