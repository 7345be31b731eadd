"""What a receiver answers, as the webhook adapter records it (a real server on 127.0.0.1)."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler

from test_http_target import Receiver, call
from test_http_target import receiver as receiver  # the fixture

from punctual.delivery.targets.base import Outcome


def test_what_a_receiver_sends_that_does_not_print_stays_out_of_the_summary(receiver: Receiver) -> None:
    """QA28: the execution's error held a receiver's reason phrase and body as sent: ESC and BEL
    reached the terminal of whoever listed the executions (``punctual jobs executions``), and a NUL
    made SQS refuse the dead letter's ERROR_MESSAGE, so the dead letter was lost. What does not
    print reads as U+FFFD; the text around it stays."""

    def route(handler: BaseHTTPRequestHandler) -> None:
        body = b"\x1b[2J\x00boom\xef\xbf\xbf\x08 done"
        handler.wfile.write(
            b"HTTP/1.1 500 Oops\x1b]0;owned\x07\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        )

    receiver.routes["/hook"] = route
    result = call(receiver.url(), {})
    assert result.outcome is Outcome.RETRYABLE
    assert result.summary.startswith("HTTP 500 Oops\ufffd]0;owned\ufffd: ")
    assert "boom" in result.summary and result.summary.endswith(" done")
    assert result.summary.isprintable()
