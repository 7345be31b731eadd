"""The local API Gateway reads a chunked request body as API Gateway does (QA: it was read as
none, so a valid job sent chunked answered 422 "body: Field required")."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from local.api_gateway import LocalApiServer


def _echo(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {
        "statusCode": 200,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps({"body": event["body"]}),
    }


def _send(url: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("POST", "/v1/jobs", body=body, headers=headers)
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def _chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


def test_a_chunked_body_reaches_the_handler_whole() -> None:
    with LocalApiServer(_echo) as server:
        status, data = _send(
            server.url, _chunked(b'{"schedule": ', b'"rate(1 hour)"}'), {"Transfer-Encoding": "chunked"}
        )
        assert status == 200 and json.loads(data)["body"] == '{"schedule": "rate(1 hour)"}'
        status, data = _send(server.url, _chunked(), {"Transfer-Encoding": "chunked"})
        assert status == 200 and json.loads(data)["body"] is None  # an empty one is none
        status, data = _send(server.url, b'{"a": 1}', {"Content-Length": "8"})
        assert status == 200 and json.loads(data)["body"] == '{"a": 1}'


def test_a_malformed_chunk_is_a_400_problem() -> None:
    with LocalApiServer(_echo) as server:
        status, data = _send(server.url, b"zz\r\nab\r\n0\r\n\r\n", {"Transfer-Encoding": "chunked"})
        assert status == 400 and json.loads(data)["title"] == "Bad chunked body"


@pytest.mark.parametrize("length", ["abc", "-5", "8, 8"])
def test_a_content_length_that_is_no_size_is_a_400_problem(length: str) -> None:
    """QA22: int() of the header raised, and local mode answered 502 Internal server error
    (API Gateway answers 400)."""
    with LocalApiServer(_echo) as server:
        status, data = _send(server.url, b'{"a": 1}', {"Content-Length": length})
        assert status == 400 and json.loads(data)["title"] == "Bad Content-Length"


def test_a_client_gone_before_the_answer_is_not_a_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    """QA: a client that closed its connection before the answer (a probe, a browser leaving the
    console) left two tracebacks in local mode's log (BrokenPipeError while answering, then again
    while answering that with a 502)."""
    import socket
    import struct
    import threading

    asked = threading.Event()

    def slow(event: dict[str, Any], context: Any) -> dict[str, Any]:
        asked.set()
        gone.wait(10)
        return {"statusCode": 200, "headers": {}, "body": "x" * 4_000_000}

    gone = threading.Event()
    with LocalApiServer(slow) as server:
        host, port = server.url.removeprefix("http://").split(":")
        client = socket.create_connection((host, int(port)), timeout=10)
        client.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\n\r\n")
        assert asked.wait(10)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset
        client.close()
        gone.set()
        status, _ = _send(server.url, None, {})  # the server still answers the next one
    assert status == 200
    assert "Traceback" not in capfd.readouterr().err
