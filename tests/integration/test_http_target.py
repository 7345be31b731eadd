"""The webhook adapter against a real HTTP(S) server on 127.0.0.1.

The server runs in this process on a free port; every test shuts it down, and a test
that leaves a request hanging releases it first. Signatures are verified with the
``standardwebhooks`` package, not with our own code.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from punctual.delivery.targets import DefaultTargetInvoker
from punctual.delivery.targets.base import Outcome, SlotContext, TargetResult
from punctual.delivery.targets.webhooks.adapter import (
    MAX_RESPONSE_BYTES,
    RETRY_AFTER_CAP_S,
    HttpTargetAdapter,
)
from punctual.delivery.targets.webhooks.transport import PinnedConnectionFactory
from punctual.models import HttpTarget
from punctual.runtime.clock import ManualClock
from punctual.runtime.settings import Settings
from punctual.security.signing_secrets import generate_signing_secret

LOOPBACK = ("127.0.0.0/8",)
SECRET = generate_signing_secret()

Route = Callable[[BaseHTTPRequestHandler], None]


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    """A webhook receiver: records every request and answers as the test's routes say."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[Seen] = []
        self.routes: dict[str, Route] = {}
        self.release = threading.Event()  # set at shutdown: frees handlers that hold a request
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                receiver.requests.append(Seen(self.command, self.path, dict(self.headers.items()), body))
                receiver.routes.get(path, answer(200, b"ok"))(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.start()

    def url(self, path: str = "/hook", host: str = "127.0.0.1", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.port}{path}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()  # joins the handler threads
        self.thread.join()


def answer(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Route:
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return route


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    try:
        yield server
    finally:
        server.close()


def ctx(*, secrets: tuple[str, ...] = (SECRET,), timeout_s: float = 5, attempt: int = 1) -> SlotContext:
    return SlotContext(
        job_id="billing-sync",
        tenant="acme",
        slot="2026-11-30T10:00:00Z",
        scheduled_at=datetime(2026, 11, 30, 10, tzinfo=UTC),
        attempt=attempt,
        timeout_s=timeout_s,
        signing_secrets=secrets,
    )


def adapter(**kwargs: Any) -> HttpTargetAdapter:
    kwargs.setdefault("allow_cidrs", LOOPBACK)
    return HttpTargetAdapter(**kwargs)


def call(url: str, payload: Any = None, *, context: SlotContext | None = None, **target: Any) -> TargetResult:
    return adapter().invoke(HttpTarget(url=url, **target), payload, context or ctx())


# --------------------------------------------------------------------------- success and signing


def test_a_2xx_succeeds_and_the_request_is_signed_the_standard_webhooks_way(receiver: Receiver) -> None:
    payload = {"invoice": 42, "note": "café"}
    result = call(receiver.url("/hook?src=punctual"), payload)

    assert result.outcome is Outcome.SUCCEEDED, result.summary
    [seen] = receiver.requests
    assert seen.method == "POST"
    assert seen.path == "/hook?src=punctual"
    assert json.loads(seen.body) == payload
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.headers["Idempotency-Key"] == "billing-sync:2026-11-30T10:00:00Z"
    assert seen.headers["webhook-id"] == "billing-sync:2026-11-30T10:00:00Z"
    assert Webhook(SECRET).verify(seen.body, seen.headers) == payload
    assert result.detail["status"] == 200


def test_every_attempt_of_a_slot_carries_the_same_webhook_id(receiver: Receiver) -> None:
    call(receiver.url(), {"n": 1}, context=ctx(attempt=1))
    call(receiver.url(), {"n": 1}, context=ctx(attempt=2))
    first, second = receiver.requests
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"]


def test_a_forged_or_other_secret_does_not_verify(receiver: Receiver) -> None:
    call(receiver.url(), {"n": 1})
    [seen] = receiver.requests
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_signing_secret()).verify(seen.body, seen.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(seen.body + b" ", seen.headers)


def test_during_rotation_both_secrets_sign_and_either_verifies(receiver: Receiver) -> None:
    new, previous = generate_signing_secret(), SECRET
    call(receiver.url(), {"n": 1}, context=ctx(secrets=(new, previous)))
    [seen] = receiver.requests
    assert len(seen.headers["webhook-signature"].split(" ")) == 2
    assert Webhook(new).verify(seen.body, seen.headers) == {"n": 1}
    assert Webhook(previous).verify(seen.body, seen.headers) == {"n": 1}
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_signing_secret()).verify(seen.body, seen.headers)


def stored_before(url: str, headers: dict[str, str]) -> HttpTarget:
    """A target stored before registration refused reserved headers (validation bypassed)."""
    return HttpTarget.model_construct(
        type="http", url=url, method="POST", headers=headers, follow_redirects=False
    )


def test_the_job_cannot_override_routing_or_signature_headers(receiver: Receiver) -> None:
    headers = {"X-Api-Key": "k-123", "Host": "internal.example", "webhook-signature": "v1,forged"}
    result = adapter().invoke(stored_before(receiver.url(), headers), {"n": 1}, ctx())
    assert result.outcome is Outcome.SUCCEEDED
    [seen] = receiver.requests
    assert seen.headers["X-Api-Key"] == "k-123"
    assert seen.headers["Host"] == f"127.0.0.1:{receiver.port}"
    assert "forged" not in seen.headers["webhook-signature"]
    assert Webhook(SECRET).verify(seen.body, seen.headers) == {"n": 1}


def test_the_tenant_header_tells_two_tenants_alike_job_ids_apart(receiver: Receiver) -> None:
    """Job ids repeat across tenants (one schedule name): the receiver keys on tenant and key."""
    theirs = dataclasses.replace(ctx(), tenant="globex")
    call(receiver.url(), {"n": 1})
    call(receiver.url(), {"n": 1}, context=theirs)
    # And a job's own header of that name (stored before it was the worker's) cannot claim another
    adapter().invoke(stored_before(receiver.url(), {"punctual-tenant": "globex"}), {"n": 1}, ctx())
    seen = [(r.headers["Punctual-Tenant"], r.headers["Idempotency-Key"]) for r in receiver.requests]
    key = "billing-sync:2026-11-30T10:00:00Z"
    assert seen == [("acme", key), ("globex", key), ("acme", key)]
    assert [list(r.headers).count("Punctual-Tenant") for r in receiver.requests] == [1, 1, 1]


def _fencing_signatures(secret: str, seen: Seen) -> set[str]:
    """The fencing signature as README spells it, computed here without the adapter's code."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    fencing_key = hmac.new(key, b"punctual-fencing-token", hashlib.sha256).digest()
    h = seen.headers
    signed = f"{h['webhook-id']}.{h['webhook-timestamp']}.{h['Punctual-Fencing-Token']}.".encode() + seen.body
    return {"v1," + base64.b64encode(hmac.new(fencing_key, signed, hashlib.sha256).digest()).decode()}


def test_every_request_carries_a_fencing_token_whose_number_grows_with_the_attempt(
    receiver: Receiver,
) -> None:
    call(receiver.url(), {"n": 1}, context=ctx(attempt=1))
    call(receiver.url(), {"n": 1}, context=ctx(attempt=3))
    first, second = receiver.requests
    tokens = [r.headers["Punctual-Fencing-Token"] for r in (first, second)]
    assert tokens == ["billing-sync:2026-11-30T10:00:00Z:1", "billing-sync:2026-11-30T10:00:00Z:3"]
    # The token is the idempotency key and, after its last colon, the fencing number.
    for seen, token in zip((first, second), tokens, strict=True):
        key, _, number = token.rpartition(":")
        assert key == seen.headers["Idempotency-Key"] == seen.headers["webhook-id"]
        assert number.isdigit()
    assert int(tokens[0].rpartition(":")[2]) < int(tokens[1].rpartition(":")[2])


def test_the_fencing_signature_binds_the_token_to_the_signed_request(receiver: Receiver) -> None:
    new, previous = generate_signing_secret(), SECRET
    call(receiver.url(), {"n": 1}, context=ctx(secrets=(new, previous), attempt=2))
    [seen] = receiver.requests
    sent = set(seen.headers["Punctual-Fencing-Signature"].split(" "))
    assert sent == _fencing_signatures(new, seen) | _fencing_signatures(previous, seen)
    # A changed token (a replay claiming a newer attempt) no longer verifies.
    forged = Seen(
        seen.method, seen.path, {**seen.headers, "Punctual-Fencing-Token": "billing-sync:x:9"}, seen.body
    )
    assert not _fencing_signatures(SECRET, forged) & sent
    # Its key is derived: it never passes as a Standard Webhooks signature of another body.
    token = seen.headers["Punctual-Fencing-Token"]
    as_webhook = {**seen.headers, "webhook-signature": seen.headers["Punctual-Fencing-Signature"]}
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(f"{token}.".encode() + seen.body, as_webhook)


def test_without_a_secret_the_fencing_token_is_sent_unsigned(receiver: Receiver) -> None:
    call(receiver.url(), {"n": 1}, context=ctx(secrets=()))
    [seen] = receiver.requests
    assert seen.headers["Punctual-Fencing-Token"] == "billing-sync:2026-11-30T10:00:00Z:1"
    assert "Punctual-Fencing-Signature" not in seen.headers
    assert "webhook-signature" not in seen.headers


def test_the_job_cannot_set_the_fencing_headers(receiver: Receiver) -> None:
    headers = {"punctual-fencing-token": "billing-sync:x:999", "Punctual-Fencing-Signature": "v1,forged"}
    adapter().invoke(stored_before(receiver.url(), headers), {"n": 1}, ctx(attempt=2))
    [seen] = receiver.requests
    assert seen.headers["Punctual-Fencing-Token"] == "billing-sync:2026-11-30T10:00:00Z:2"
    assert seen.headers["Punctual-Fencing-Signature"] in " ".join(_fencing_signatures(SECRET, seen))


def test_a_receiver_keeping_the_highest_fencing_number_refuses_the_superseded_attempt(
    receiver: Receiver,
) -> None:
    # The receiver README describes: per idempotency key, the highest number seen wins.
    highest: dict[str, int] = {}

    def fenced(handler: BaseHTTPRequestHandler) -> None:
        key, _, number = handler.headers["Punctual-Fencing-Token"].rpartition(":")
        if int(number) < highest.get(key, 0):
            answer(409, b"superseded")(handler)
            return
        highest[key] = int(number)
        answer(200, b"done")(handler)

    receiver.routes["/hook"] = fenced
    # Attempt 2 (a takeover) reaches the receiver first; the lost attempt 1 arrives late.
    newer = call(receiver.url(), {"n": 1}, context=ctx(attempt=2))
    late = call(receiver.url(), {"n": 1}, context=ctx(attempt=1))
    assert newer.outcome is Outcome.SUCCEEDED
    assert late.outcome is Outcome.PERMANENT and "409" in late.summary


def test_a_get_sends_no_body_and_signs_the_empty_body(receiver: Receiver) -> None:
    result = call(receiver.url(), {"ignored": True}, method="GET")
    assert result.outcome is Outcome.SUCCEEDED
    [seen] = receiver.requests
    assert (seen.method, seen.body) == ("GET", b"")
    assert "Content-Type" not in seen.headers
    Webhook(SECRET).verify(b"", seen.headers, json_parse=False)


def test_a_string_payload_with_a_non_json_content_type_is_sent_as_is(receiver: Receiver) -> None:
    call(receiver.url(), "plain <text>", method="PUT", headers={"Content-Type": "text/plain"})
    [seen] = receiver.requests
    assert (seen.method, seen.body, seen.headers["Content-Type"]) == ("PUT", b"plain <text>", "text/plain")


@pytest.mark.parametrize(
    "content_type", ["application/x-ndjson", "application/jsonl", "application/json-seq", "text/x-json"]
)
def test_a_string_payload_is_sent_as_is_for_every_media_type_registration_calls_non_json(
    receiver: Receiver, content_type: str
) -> None:
    # Registration refuses a JSON payload for these types (not application/json nor +json): the
    # string the job must carry is the body, not a JSON string literal of it (QA22: "json" in the
    # type's name sent '"{\\"a\\":1}\\n..."' to a JSON-lines receiver)
    lines = '{"a":1}\n{"b":"<slot>"}\n'
    invoker = DefaultTargetInvoker(None, Settings(target_allow_cidrs=list(LOOPBACK)))
    target = HttpTarget(url=receiver.url(), headers={"Content-Type": content_type})
    assert invoker.invoke(target, lines, ctx()).outcome is Outcome.SUCCEEDED
    [seen] = receiver.requests
    assert seen.body == b'{"a":1}\n{"b":"2026-11-30T10:00:00Z"}\n'
    Webhook(SECRET).verify(seen.body, seen.headers, json_parse=False)


def test_the_invoker_renders_placeholders_and_honours_the_allow_list(receiver: Receiver) -> None:
    invoker = DefaultTargetInvoker(None, Settings(target_allow_cidrs=list(LOOPBACK)))
    result = invoker.invoke(HttpTarget(url=receiver.url()), {"run": "<job_id>/<attempt>"}, ctx(attempt=2))
    assert result.outcome is Outcome.SUCCEEDED
    assert json.loads(receiver.requests[0].body) == {"run": "billing-sync/2"}

    closed = DefaultTargetInvoker(None, Settings())  # no allow-list: loopback is refused
    refused = closed.invoke(HttpTarget(url=receiver.url()), {}, ctx())
    assert refused.outcome is Outcome.PERMANENT and "loopback" in refused.summary
    assert len(receiver.requests) == 1


def test_a_malformed_secret_is_a_permanent_failure_and_nothing_is_sent(receiver: Receiver) -> None:
    result = call(receiver.url(), {}, context=ctx(secrets=("whsec_bad!",)))
    assert result.outcome is Outcome.PERMANENT and "secret" in result.summary
    assert receiver.requests == []


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize("status", [500, 502, 503, 504, 408, 429])
def test_server_errors_timeouts_and_throttling_are_retryable(receiver: Receiver, status: int) -> None:
    receiver.routes["/hook"] = answer(status, b"try later")
    result = call(receiver.url(), {})
    assert result.outcome is Outcome.RETRYABLE
    assert str(status) in result.summary and "try later" in result.summary
    assert result.pause_job is False


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 409, 413, 422])
def test_other_client_errors_are_permanent(receiver: Receiver, status: int) -> None:
    receiver.routes["/hook"] = answer(status, b'{"error":"nope"}')
    result = call(receiver.url(), {})
    assert result.outcome is Outcome.PERMANENT
    assert result.pause_job is False
    assert result.detail["body"] == '{"error":"nope"}'


def test_410_gone_is_permanent_and_pauses_the_job(receiver: Receiver) -> None:
    receiver.routes["/hook"] = answer(410, b"unsubscribed")
    result = call(receiver.url(), {})
    assert result.outcome is Outcome.PERMANENT
    assert result.pause_job is True
    assert "410" in result.summary and "paused" in result.summary


def test_retry_after_seconds_is_passed_on(receiver: Receiver) -> None:
    receiver.routes["/hook"] = answer(429, headers={"Retry-After": "120"})
    result = call(receiver.url(), {})
    assert (result.outcome, result.retry_after_s) == (Outcome.RETRYABLE, 120.0)


def test_retry_after_as_an_http_date_is_measured_from_the_clock(receiver: Receiver) -> None:
    now = datetime(2026, 11, 30, 10, 0, 5, tzinfo=UTC)
    when = format_datetime(now + timedelta(seconds=90), usegmt=True)
    receiver.routes["/hook"] = answer(503, headers={"Retry-After": when})
    result = adapter(clock=ManualClock(now)).invoke(HttpTarget(url=receiver.url()), {}, ctx())
    assert (result.outcome, result.retry_after_s) == (Outcome.RETRYABLE, 90.0)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("soon", None),  # unreadable: ignored
        ("9" * 400, RETRY_AFTER_CAP_S),  # more than a float holds: "a long time", capped
        ("9" * 5000, RETRY_AFTER_CAP_S),  # more digits than Python turns into an int
        ("Fri, 31 Dec 9999 23:59:59 GMT", RETRY_AFTER_CAP_S),  # QA22: a date too (it was ~2.5e11 s)
        ("\u00b2", None),  # "²" is a digit to str.isdigit, but not one of HTTP's
        ("1\u00b3", None),  # "¹²³" too: HTTP's delay-seconds are ASCII digits
    ],
)
def test_a_hostile_retry_after_is_read_as_http_reads_it_not_an_adapter_error(
    receiver: Receiver, value: str, seconds: float | None
) -> None:
    # QA: 400 nines were "internal error in the http adapter: OverflowError" with a traceback
    receiver.routes["/hook"] = answer(503, headers={"Retry-After": value})
    result = call(receiver.url(), {})
    assert (result.outcome, result.retry_after_s) == (Outcome.RETRYABLE, seconds)
    assert result.summary.startswith("HTTP 503")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_refused_connection_is_retryable() -> None:
    result = call(f"http://127.0.0.1:{_free_port()}/hook", {})
    assert result.outcome is Outcome.RETRYABLE
    assert "network error" in result.summary
    assert result.timed_out is False


@pytest.mark.parametrize("interim", [b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n", b""])
def test_informational_answers_before_the_final_one_are_read_past(receiver: Receiver, interim: bytes) -> None:
    """A 103 Early Hints (or 102 Processing) then a 200 is a success, not "HTTP 103 (unexpected
    status)" and a retry of a call the receiver acted on."""

    def hints_then_ok(handler: BaseHTTPRequestHandler) -> None:
        handler.wfile.write(interim + b"HTTP/1.1 102 Processing\r\n\r\n")
        handler.wfile.flush()
        answer(200, b"done")(handler)

    receiver.routes["/hook"] = hints_then_ok
    result = call(receiver.url(), {})
    assert result.outcome is Outcome.SUCCEEDED, result.summary


def test_a_connection_dropped_without_an_answer_is_retryable(receiver: Receiver) -> None:
    def hang_up(handler: BaseHTTPRequestHandler) -> None:
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)

    receiver.routes["/hook"] = hang_up
    result = call(receiver.url(), {})
    assert result.outcome is Outcome.RETRYABLE
    assert "network error" in result.summary


def test_a_receiver_that_never_answers_times_out(receiver: Receiver) -> None:
    receiver.routes["/hook"] = lambda handler: receiver.release.wait()
    result = call(receiver.url(), {}, context=ctx(timeout_s=0.3))
    assert result.outcome is Outcome.RETRYABLE
    assert result.timed_out is True


def test_a_receiver_that_trickles_its_headers_is_cut_off_at_the_job_timeout(receiver: Receiver) -> None:
    # Each byte arrives well within any per-read socket timeout; only a deadline on the
    # whole exchange stops this.
    def trickle(handler: BaseHTTPRequestHandler) -> None:
        handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
        try:
            while not receiver.release.wait(0.05):
                handler.wfile.write(b"X")
                handler.wfile.flush()
        except OSError:
            pass

    receiver.routes["/hook"] = trickle
    result = call(receiver.url(), {}, context=ctx(timeout_s=0.5))
    assert (result.outcome, result.timed_out) == (Outcome.RETRYABLE, True)


def _status_then(status: int, then: Callable[[BaseHTTPRequestHandler], None]) -> Route:
    """Answers ``status`` (header section complete: a body of 100 bytes is announced), sends 5 of
    them, then does ``then``."""

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Length", "100")
        handler.end_headers()
        handler.wfile.write(b"start")
        handler.wfile.flush()
        then(handler)

    return route


def _hold(receiver: Receiver) -> Callable[[BaseHTTPRequestHandler], None]:
    return lambda handler: receiver.release.wait()


def _reset(handler: BaseHTTPRequestHandler) -> None:
    handler.close_connection = True
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    handler.connection.close()


@pytest.mark.parametrize("then", ["slow", "reset"])
def test_a_2xx_is_the_answer_even_when_its_body_is_cut_off(receiver: Receiver, then: str) -> None:
    # "any 2xx is success": the receiver answered, and acted; a body slower than the job's timeout
    # or a connection reset in it made the answer a retryable time-out or network error, so the slot
    # was sent again (and recorded TIMED_OUT) after the receiver had said it was done (QA22)
    receiver.routes["/hook"] = _status_then(200, _hold(receiver) if then == "slow" else _reset)
    result = call(receiver.url(), {}, context=ctx(timeout_s=0.5))
    assert (result.outcome, result.timed_out) == (Outcome.SUCCEEDED, False), result.summary
    assert result.detail["status"] == 200
    assert result.detail["body_cut"] is True and result.detail["body"].startswith("start")


def test_a_4xx_whose_body_is_cut_off_is_still_final(receiver: Receiver) -> None:
    receiver.routes["/hook"] = _status_then(404, _reset)
    result = call(receiver.url(), {})
    assert result.outcome is Outcome.PERMANENT and "HTTP 404" in result.summary


def test_a_name_lookup_slower_than_the_job_timeout_ends_as_a_timeout(receiver: Receiver) -> None:
    # getaddrinfo takes no timeout; a resolver stuck for longer than the job must not hold the run.
    answered = threading.Event()

    def stuck(host: str, port: Any, family: int = 0, type: int = 0) -> list[tuple[Any, ...]]:
        receiver.release.wait(5)  # until the test ends (5 s at most, should the bound be missing)
        answered.set()
        return _to_loopback(host, port)

    result = adapter(resolver=stuck).invoke(
        HttpTarget(url=receiver.url(host="hooks.example.test")), {}, ctx(timeout_s=0.3)
    )
    assert (result.outcome, result.timed_out) == (Outcome.RETRYABLE, True)
    assert "resolving hooks.example.test" in result.summary
    assert not answered.is_set() and receiver.requests == []


def test_redirect_hops_share_one_deadline(receiver: Receiver) -> None:
    # Each hop answers well inside the timeout; together they do not.
    def slow_redirect(handler: BaseHTTPRequestHandler) -> None:
        receiver.release.wait(0.3)
        answer(307, headers={"Location": "/hook"})(handler)

    receiver.routes["/hook"] = slow_redirect
    result = call(receiver.url(), {}, context=ctx(timeout_s=1), follow_redirects=True)
    assert (result.outcome, result.timed_out) == (Outcome.RETRYABLE, True)
    assert 2 <= len(receiver.requests) < 6  # cut off before the redirect limit


def test_the_response_body_read_stops_at_64_kb(receiver: Receiver) -> None:
    # An endless body: a reader without a cap would hang here until the job timeout.
    def endless(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.end_headers()  # HTTP/1.0, no length: the body runs until the server closes
        chunk = b"x" * 16384
        try:
            while not receiver.release.is_set():
                handler.wfile.write(chunk)
        except OSError:
            pass

    receiver.routes["/hook"] = endless
    result = call(receiver.url(), {}, context=ctx(timeout_s=10))
    assert result.outcome is Outcome.SUCCEEDED
    assert result.timed_out is False
    assert result.detail["body_bytes_read"] == MAX_RESPONSE_BYTES
    assert result.detail["body_truncated"] is True
    assert len(result.detail["body"]) <= 1024


def test_a_large_error_body_is_summarised_briefly(receiver: Receiver) -> None:
    receiver.routes["/hook"] = answer(500, b"E" * 200_000)
    result = call(receiver.url(), {})
    assert result.outcome is Outcome.RETRYABLE
    assert len(result.summary) < 300
    assert result.detail["body_bytes_read"] == MAX_RESPONSE_BYTES


# --------------------------------------------------------------------------- redirects


def test_redirects_are_not_followed_unless_the_job_allows_them(receiver: Receiver) -> None:
    receiver.routes["/hook"] = answer(302, headers={"Location": "/elsewhere"})
    result = call(receiver.url(), {})
    assert result.outcome is Outcome.PERMANENT
    assert "not followed" in result.summary
    assert [r.path for r in receiver.requests] == ["/hook"]


def test_an_allowed_307_keeps_method_and_body_and_is_signed_again(receiver: Receiver) -> None:
    receiver.routes["/hook"] = answer(307, headers={"Location": "/moved"})
    result = call(receiver.url(), {"n": 7}, follow_redirects=True)
    assert result.outcome is Outcome.SUCCEEDED
    first, second = receiver.requests
    assert first.path == "/hook"
    assert (second.method, second.path, json.loads(second.body)) == ("POST", "/moved", {"n": 7})
    assert Webhook(SECRET).verify(second.body, second.headers) == {"n": 7}
    assert result.detail["redirects"] == ["307 " + receiver.url("/moved")]


def test_a_303_turns_into_a_get_without_body(receiver: Receiver) -> None:
    receiver.routes["/hook"] = answer(303, headers={"Location": "/status"})
    sent = {"Content-Type": "application/json; charset=utf-8", "Content-Language": "de", "X-Team": "data"}
    result = call(receiver.url(), {"n": 7}, follow_redirects=True, headers=sent)
    assert result.outcome is Outcome.SUCCEEDED
    first, second = receiver.requests[:2]
    assert (second.method, second.body) == ("GET", b"")
    Webhook(SECRET).verify(b"", second.headers, json_parse=False)  # QA22: and no body's headers
    before, after = ({k.lower(): v for k, v in seen.headers.items()} for seen in (first, second))
    assert before["content-type"] == sent["Content-Type"] and after["x-team"] == "data"
    assert "content-type" not in after and "content-language" not in after


def test_every_redirect_hop_is_checked_by_the_guard(receiver: Receiver) -> None:
    receiver.routes["/hook"] = answer(302, headers={"Location": "http://169.254.169.254/latest/meta-data/"})
    result = call(receiver.url(), {}, follow_redirects=True)
    assert result.outcome is Outcome.PERMANENT
    assert "blocked" in result.summary and "link-local" in result.summary
    assert len(receiver.requests) == 1


def test_a_redirect_loop_stops(receiver: Receiver) -> None:
    receiver.routes["/hook"] = answer(302, headers={"Location": "/hook"})
    result = call(receiver.url(), {}, follow_redirects=True)
    assert result.outcome is Outcome.PERMANENT
    assert "redirects" in result.summary
    assert len(receiver.requests) == 6  # the first request and five hops


def test_credentials_do_not_follow_a_redirect_to_another_origin(receiver: Receiver) -> None:
    other = Receiver()
    try:
        receiver.routes["/hook"] = answer(308, headers={"Location": other.url("/in")})
        headers = {"Authorization": "Bearer secret-token", "X-Trace": "t-1"}
        result = call(receiver.url(), {"n": 1}, follow_redirects=True, headers=headers)
        assert result.outcome is Outcome.SUCCEEDED
        assert receiver.requests[0].headers["Authorization"] == "Bearer secret-token"
        [arrived] = other.requests
        assert "Authorization" not in arrived.headers
        assert arrived.headers["X-Trace"] == "t-1"
        assert Webhook(SECRET).verify(arrived.body, arrived.headers) == {"n": 1}
    finally:
        other.close()


# --------------------------------------------------------------------------- host names, pinning, TLS


def _to_loopback(host: str, port: Any, family: int = 0, type: int = 0) -> list[tuple[Any, ...]]:
    return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]


def test_a_host_name_is_sent_as_host_while_the_socket_goes_to_the_checked_address(receiver: Receiver) -> None:
    result = adapter(resolver=_to_loopback).invoke(
        HttpTarget(url=receiver.url(host="hooks.example.test")), {"n": 1}, ctx()
    )
    assert result.outcome is Outcome.SUCCEEDED, result.summary
    assert receiver.requests[0].headers["Host"] == f"hooks.example.test:{receiver.port}"


@pytest.fixture(scope="module")
def tls_material(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, bytes]:
    """A throwaway CA and a server certificate for hooks.example.test (key, cert, CA PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Punctual test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hooks.example.test")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("hooks.example.test")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    key_path, cert_path = folder / "server.key", folder / "server.pem"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path, ca.public_bytes(serialization.Encoding.PEM)


@pytest.fixture
def tls_receiver(tls_material: tuple[Path, Path, bytes]) -> Iterator[tuple[Receiver, list[str | None]]]:
    key_path, cert_path, _ = tls_material
    server_names: list[str | None] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    context.sni_callback = lambda sock, name, ctx: server_names.append(name)  # type: ignore[assignment,misc]
    server = Receiver(tls=context)
    try:
        yield server, server_names
    finally:
        server.close()


def _trusting(ca_pem: bytes) -> PinnedConnectionFactory:
    return PinnedConnectionFactory(ssl.create_default_context(cadata=ca_pem.decode()))


def test_https_sends_the_host_name_as_sni_and_checks_the_certificate_against_it(
    tls_receiver: tuple[Receiver, list[str | None]], tls_material: tuple[Path, Path, bytes]
) -> None:
    server, server_names = tls_receiver
    https = adapter(resolver=_to_loopback, connection_factory=_trusting(tls_material[2]))
    result = https.invoke(
        HttpTarget(url=server.url(host="hooks.example.test", scheme="https")), {"n": 1}, ctx()
    )
    assert result.outcome is Outcome.SUCCEEDED, result.summary
    assert server_names == ["hooks.example.test"]
    [seen] = server.requests
    assert seen.headers["Host"] == f"hooks.example.test:{server.port}"
    assert Webhook(SECRET).verify(seen.body, seen.headers) == {"n": 1}


def test_https_refuses_a_certificate_for_another_name(
    tls_receiver: tuple[Receiver, list[str | None]], tls_material: tuple[Path, Path, bytes]
) -> None:
    server, _ = tls_receiver
    https = adapter(resolver=_to_loopback, connection_factory=_trusting(tls_material[2]))
    result = https.invoke(HttpTarget(url=server.url(host="other.example.test", scheme="https")), {}, ctx())
    assert result.outcome is Outcome.RETRYABLE
    assert "certificate" in result.summary
    assert server.requests == []


def test_https_refuses_an_untrusted_certificate(tls_receiver: tuple[Receiver, list[str | None]]) -> None:
    server, _ = tls_receiver
    result = adapter(resolver=_to_loopback).invoke(
        HttpTarget(url=server.url(host="hooks.example.test", scheme="https")), {}, ctx()
    )
    assert result.outcome is Outcome.RETRYABLE
    assert "certificate" in result.summary
    assert server.requests == []


# --------------------------------------------------------------------------- cancel (lease lost, shutdown)


def test_a_cancelled_run_cuts_its_call_short_long_before_the_job_timeout(receiver: Receiver) -> None:
    # Given a receiver that holds the request, and a job whose timeout is ten minutes
    arrived = threading.Event()

    def hold(handler: BaseHTTPRequestHandler) -> None:
        arrived.set()
        receiver.release.wait()

    receiver.routes["/hook"] = hold
    context = ctx(timeout_s=600)
    results: list[TargetResult] = []
    caller = threading.Thread(target=lambda: results.append(call(receiver.url(), {"a": 1}, context=context)))
    caller.start()
    try:
        assert arrived.wait(30), "the request never reached the receiver"
        # When the run is cancelled (its worker lost the lease, or shuts down)
        context.cancel.set()
        caller.join(60)  # far below the job's timeout: only the cancel can end the call this soon
        assert not caller.is_alive()
    finally:
        receiver.release.set()
        caller.join(10)
    # Then the call was cut short, and the result says so: not an answer from the receiver
    [result] = results
    assert result.stopped and result.outcome is Outcome.RETRYABLE
    assert "cancelled" in result.summary and not result.timed_out


def test_a_run_cancelled_before_its_request_leaves_sends_nothing(receiver: Receiver) -> None:
    context = ctx()
    context.cancel.set()
    result = call(receiver.url(), {"a": 1}, context=context)
    assert result.stopped and receiver.requests == []
