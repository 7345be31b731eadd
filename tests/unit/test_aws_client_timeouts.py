"""The scheduler's own AWS clients (punctual.runtime.aws): a response that does not come is given up
in seconds and the call sent again, never waited on for half a minute (QA25: one black-holed
response stalled a lean minute's only poller for 30 s, every slot of those seconds > 10 s late)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from punctual.dispatch.queues import SqsQueues
from punctual.runtime import aws

DEADLINE_S = 20.0  # the first answer is held longer than that: only a retry can answer in time


class _BlackHole(ThreadingHTTPServer):
    """A DynamoDB endpoint whose first response never comes (held until the test ends); it
    answers the next requests at once."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests = 0
        self.release = threading.Event()
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: _BlackHole

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with self.server.lock:
            self.server.requests += 1
            first = self.server.requests == 1
        if first:
            self.server.release.wait(60)  # the response lost on its way
            return
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def black_hole(monkeypatch: pytest.MonkeyPatch) -> Iterator[_BlackHole]:
    server = _BlackHole()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    aws.reset()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()
    aws.reset()


def test_a_call_whose_response_never_comes_is_sent_again_within_seconds(black_hole: _BlackHole) -> None:
    outcome: list[Any] = []
    call = threading.Thread(
        target=lambda: outcome.append(
            aws.client("dynamodb").get_item(TableName="t", Key={"pk": {"S": "a"}, "sk": {"S": "b"}})
        ),
        daemon=True,
    )
    call.start()
    call.join(DEADLINE_S)
    assert not call.is_alive(), "the call still waits for the response that never comes"
    assert black_hole.requests == 2 and "Item" not in outcome[0]


def test_a_long_poll_goes_through_a_client_that_waits_it_out() -> None:
    """An SQS ReceiveMessage that waits (the ECS worker's long poll, up to 20 s) is not a response
    that never comes: its client reads longer than the poll; a receive that does not wait keeps
    the hot path's client."""
    hot, polls = _Recorder(), _Recorder()
    queues = SqsQueues(hot, poll_client=lambda: polls)
    queues.receive("q", 10, 20, 30)
    queues.receive("q", 10, 0, 30)
    assert (polls.calls, hot.calls) == (1, 1)
    config = aws.client("sqs", long_poll=True).meta.config
    assert config.read_timeout > aws.LONG_POLL_MAX_S >= 20
    assert aws.client("sqs").meta.config.read_timeout < 10


class _Recorder:
    def __init__(self) -> None:
        self.calls = 0

    def receive_message(self, **_: Any) -> dict[str, Any]:
        self.calls += 1
        return {"Messages": []}
