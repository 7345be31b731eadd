"""QA17 (qa4b): a request the API received but did not answer in time is not "cannot reach".

``punctual jobs create`` against an API that took the request and did not answer within the
client's timeout said ``cannot reach URL: timed out``, as for a refused connection, though the
job may have been created: a script that retries it without an ``--idempotency-key`` makes two.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from punctual_cli.client import ApiError, PunctualClient
from punctual_cli.retries import RetryPolicy


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A server that accepts connections, reads, and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def test_a_create_with_no_answer_in_time_says_it_may_have_been_done(silent_endpoint: str) -> None:
    client = PunctualClient(endpoint=silent_endpoint, tenant="t", timeout_s=0.3)
    with pytest.raises(ApiError) as caught:
        client.create_job(
            {"schedule": "rate(1 hour)", "target": {"type": "http", "url": "https://x.example"}}
        )
    said = str(caught.value)
    assert caught.value.status == 0
    assert "cannot reach" not in said, said
    assert "may have been done" in said, said


def test_a_refused_connection_is_still_cannot_reach() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    with pytest.raises(ApiError, match="cannot reach"):
        once = RetryPolicy(max_attempts=1)  # (a GET is tried again: tests/integration/test_client_retries.py)
        PunctualClient(endpoint=f"http://127.0.0.1:{port}", timeout_s=0.3, retry=once).get_job("x")
