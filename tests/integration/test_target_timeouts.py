"""AWS targets against a slow AWS endpoint on 127.0.0.1: the job's timeout bounds the call.

The endpoint is a plain HTTP server that holds every request until the test ends (or,
for the control cases, answers at once). The adapters reach it through the production
client factory (:class:`Boto3ClientFactory` with ``endpoint_url``), so what is proved is
that the clients they are given are built from the job's timeout. Job timeouts are a
second or less; nothing asserts wall-clock time, only that the answer is a timeout and
not the slow server's.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest

from punctual.delivery.targets.aws_clients import Boto3ClientFactory
from punctual.delivery.targets.aws_services import (
    LambdaTargetAdapter,
    SqsTargetAdapter,
    StepFunctionsTargetAdapter,
)
from punctual.delivery.targets.base import Outcome, SlotContext
from punctual.models import LambdaTarget, SqsTarget, StepFunctionsTarget

REGION = "us-east-1"
ACCOUNT = "123456789012"
FUNCTION = LambdaTarget(function_arn=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:slow")
QUEUE = SqsTarget(queue_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:work")
MACHINE = StepFunctionsTarget(state_machine_arn=f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:flow")

Answer = Callable[[BaseHTTPRequestHandler], None]


class SlowAws:
    """An AWS endpoint that records requests and holds each one until released."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.answer: Answer | None = None  # None: hold the request until the test ends
        self.release = threading.Event()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                endpoint.requests.append(self.path)
                if endpoint.answer is None:
                    endpoint.release.wait(10)  # a client without the bound would wait this long
                    return
                endpoint.answer(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def reply(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Answer:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return answer


@pytest.fixture
def slow() -> Iterator[SlowAws]:
    endpoint = SlowAws()
    try:
        yield endpoint
    finally:
        endpoint.close()


@pytest.fixture
def clients(slow: SlowAws) -> Boto3ClientFactory:
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )
    return Boto3ClientFactory(session, endpoint_url=slow.url)


def ctx(timeout_s: float) -> SlotContext:
    return SlotContext(
        job_id="nightly-export",
        tenant="acme",
        slot="2026-11-30T10:00:00Z",
        scheduled_at=datetime(2026, 11, 30, 10, tzinfo=UTC),
        attempt=1,
        timeout_s=timeout_s,
    )


def test_a_lambda_answering_after_the_job_timeout_ends_as_a_retryable_timeout(
    slow: SlowAws, clients: Boto3ClientFactory
) -> None:
    # Before: the Lambda client waited 905 s whatever the job's timeout (the lease is timeout + 60 s).
    adapter = LambdaTargetAdapter(clients, read_margin_s=0.2)
    result = adapter.invoke(FUNCTION, {"rows": 3}, ctx(timeout_s=0.5))
    assert (result.outcome, result.timed_out) == (Outcome.RETRYABLE, True), result.summary
    assert "ReadTimeout" in result.summary
    assert len(slow.requests) == 1  # one try: the SDK never starts the function twice


def test_a_lambda_answering_in_time_succeeds_through_the_same_bounded_client(
    slow: SlowAws, clients: Boto3ClientFactory
) -> None:
    slow.answer = reply(200, {"rows": 3}, {"X-Amz-Executed-Version": "$LATEST"})
    result = LambdaTargetAdapter(clients, read_margin_s=0.2).invoke(FUNCTION, {"rows": 3}, ctx(timeout_s=0.5))
    assert result.outcome is Outcome.SUCCEEDED, result.summary
    assert json.loads(result.detail["response"]) == {"rows": 3}


def test_an_sqs_send_hanging_past_the_job_timeout_ends_as_a_retryable_timeout(
    slow: SlowAws, clients: Boto3ClientFactory
) -> None:
    # Before: 30 s per read and three SDK tries, for a job of one second.
    result = SqsTargetAdapter(clients).invoke(QUEUE, {"rows": 3}, ctx(timeout_s=1))
    assert (result.outcome, result.timed_out) == (Outcome.RETRYABLE, True), result.summary
    assert len(slow.requests) == 1  # no SDK retry: a second try would not fit in the second


def test_a_step_functions_start_hanging_past_the_job_timeout_ends_as_a_retryable_timeout(
    slow: SlowAws, clients: Boto3ClientFactory
) -> None:
    result = StepFunctionsTargetAdapter(clients).invoke(MACHINE, {"rows": 3}, ctx(timeout_s=1))
    assert (result.outcome, result.timed_out) == (Outcome.RETRYABLE, True), result.summary
    assert len(slow.requests) == 1
