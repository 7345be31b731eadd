"""Serve a Lambda API handler over HTTP on loopback, as API Gateway would call it.

Each HTTP request becomes an API Gateway REST (v1) proxy event, the handler is called
with it and a stand-in Lambda context, and its proxy reply becomes the HTTP response.
Local mode serves the API on :8080 with it; tests serve it on a free port.

Requests are handled one at a time, as one Lambda container does: the resolver keeps
the current event in module state.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from local.config import LoopbackServer

ProxyHandler = Callable[[dict[str, Any], Any], Mapping[str, Any]]

MAX_REQUEST_BYTES = 10 * 1024 * 1024  # API Gateway's own limit
INVOCATION_BUDGET_MS = 29_000  # API Gateway's integration timeout
# The account of local mode's AWS (moto's, MOTO_ACCOUNT_ID else its default), which STS's
# GetCallerIdentity answers there: the ARNs the API makes (schedules, groups) name it, so a script
# that builds one from GetCallerIdentity names the same (QA: 000000000000 here, 123456789012 there).
LOCAL_ACCOUNT = os.environ.get("MOTO_ACCOUNT_ID") or "123456789012"


@dataclass
class LocalLambdaContext:
    """What Powertools reads from a Lambda context."""

    function_name: str = "punctual-api-local"
    memory_limit_in_mb: int = 512
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    invoked_function_arn: str = f"arn:aws:lambda:us-east-1:{LOCAL_ACCOUNT}:function:punctual-api-local"
    function_version: str = "$LATEST"
    log_group_name: str = "/aws/lambda/punctual-api-local"
    log_stream_name: str = "local"
    started: float = field(default_factory=time.monotonic)

    def get_remaining_time_in_millis(self) -> int:
        return max(0, INVOCATION_BUDGET_MS - int((time.monotonic() - self.started) * 1000))


def proxy_event(
    method: str,
    raw_path: str,
    headers: Mapping[str, str] | list[tuple[str, str]],
    body: bytes | None,
    source_ip: str = "127.0.0.1",
    identity: Mapping[str, str | None] | None = None,
    stage: str = "local",
) -> dict[str, Any]:
    """An API Gateway REST proxy event for one HTTP request.

    Parameters
    ----------
    method
        The HTTP method.
    raw_path
        Path and query string as sent (``/v1/jobs?limit=2``); the path stays URL-encoded.
    headers
        Request headers (repeated headers as a list of pairs).
    body
        The raw body; text when it is UTF-8, else base64 (``isBase64Encoded``).
    identity
        ``requestContext.identity`` fields to set (``userArn``, ``caller``, ``accountId``).
    """
    split = urlsplit(raw_path)
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    multi_headers: dict[str, list[str]] = {}
    for name, value in pairs:
        multi_headers.setdefault(name, []).append(value)
    query = parse_qs(split.query, keep_blank_values=True)
    text: str | None = None
    encoded = False
    if body:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text, encoded = base64.b64encode(body).decode("ascii"), True
    now = time.time()
    request_id = str(uuid.uuid4())
    ident: dict[str, str | None] = {
        "cognitoIdentityPoolId": None,
        "accountId": None,
        "cognitoIdentityId": None,
        "caller": None,
        "sourceIp": source_ip,
        "principalOrgId": None,
        "accessKey": None,
        "cognitoAuthenticationType": None,
        "cognitoAuthenticationProvider": None,
        "userArn": None,
        "userAgent": next((v[-1] for k, v in multi_headers.items() if k.lower() == "user-agent"), None),
        "user": None,
    }
    ident.update(identity or {})
    return {
        "resource": "/{proxy+}",
        "path": split.path or "/",
        "httpMethod": method.upper(),
        "headers": {name: values[-1] for name, values in multi_headers.items()} or None,
        "multiValueHeaders": multi_headers or None,
        "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
        "multiValueQueryStringParameters": query or None,
        "pathParameters": {"proxy": (split.path or "/").lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "resourceId": "local",
            "resourcePath": "/{proxy+}",
            "httpMethod": method.upper(),
            "extendedRequestId": request_id,
            "requestTime": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            # As a custom domain mapped at its root: no stage in the URL the caller used.
            "path": split.path or "/",
            "accountId": LOCAL_ACCOUNT,
            "protocol": "HTTP/1.1",
            "stage": stage,
            "domainPrefix": "localhost",
            "requestTimeEpoch": int(now * 1000),
            "requestId": request_id,
            "identity": ident,
            "domainName": "localhost",
            "apiId": "local",
        },
        "body": text,
        "isBase64Encoded": encoded,
    }


def _reply_headers(reply: Mapping[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for name, values in (reply.get("multiValueHeaders") or {}).items():
        for value in values:
            out.append((name, str(value)))
        seen.add(name.lower())
    for name, value in (reply.get("headers") or {}).items():
        if name.lower() not in seen:
            out.append((name, str(value)))
    return out


def _make_request_handler(
    proxy: ProxyHandler, lock: threading.Lock, identity: Mapping[str, str | None] | None
) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        server_version = "punctual-local"
        protocol_version = "HTTP/1.1"
        # Headers and body are two writes: without TCP_NODELAY the body waits for the client's
        # delayed ACK (40 ms a request on Linux).
        disable_nagle_algorithm = True

        def _serve(self) -> None:
            chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
            given = (self.headers.get("Content-Length") or "0").strip()
            if not (given.isascii() and given.isdigit()):  # QA22: int() raised, answered 502
                self.send_error(400, "Bad Content-Length", f"Content-Length {given[:40]!r} is not a size")
                return
            length = int(given)
            body: bytes | None = b""
            if chunked:
                try:
                    body = self._chunks()
                except ValueError:
                    self.send_error(400, "Bad chunked body", "a chunk size is not hexadecimal")
                    return
            elif 0 < length <= MAX_REQUEST_BYTES:
                body = self.rfile.read(length)
            if length > MAX_REQUEST_BYTES or body is None:
                self._write(413, [("Content-Type", "application/json")], b'{"message":"Request Too Long"}')
                self.close_connection = True
                return
            event = proxy_event(
                self.command,
                self.path,
                list(self.headers.items()),
                body or None,
                source_ip=self.client_address[0],
                identity=identity,
            )
            with lock:
                reply = proxy(event, LocalLambdaContext())
            payload = reply.get("body") or ""
            data = base64.b64decode(payload) if reply.get("isBase64Encoded") else str(payload).encode()
            self._write(int(reply.get("statusCode", 502)), _reply_headers(reply), data)

        def _chunks(self) -> bytes | None:
            """A chunked request body (QA: it was read as none: 422 "body: Field required"); None
            past the size API Gateway takes."""
            parts: list[bytes] = []
            size = 0
            while True:
                line = self.rfile.readline(1024).split(b";", 1)[0].strip()
                chunk = int(line or b"0", 16)
                if chunk == 0:
                    while self.rfile.readline(1024).strip():  # trailers, up to the blank line
                        pass
                    return b"".join(parts)
                size += chunk
                if size > MAX_REQUEST_BYTES:
                    return None
                parts.append(self.rfile.read(chunk))
                self.rfile.readline(8)  # the chunk's CRLF

        def _write(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
            length = len(data)
            if self.command == "HEAD" and not data:
                # HEAD: no body, but the length the GET's would have (RFC 9110 8.6), as the handler
                # gives it (QA: Content-Length: 0).
                given = [value.strip() for name, value in headers if name.lower() == "content-length"]
                length = int(given[-1]) if given and given[-1].isdigit() else 0
            self.send_response(status)
            for name, value in headers:
                if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _guarded(self) -> None:
            try:
                self._serve()
            except (BrokenPipeError, ConnectionResetError):
                # The client went away before the answer (a probe, a closed browser tab): there is
                # no one to answer (QA: it was logged as two tracebacks, the 502 failing too).
                self.close_connection = True
            except Exception as exc:  # the handler raised: answer as API Gateway does (502)
                body = json.dumps({"message": "Internal server error", "error": type(exc).__name__}).encode()
                self._write(502, [("Content-Type", "application/json")], body)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _guarded

        def __getattr__(self, name: str) -> Any:
            # Every other method (TRACE, CONNECT, PROPFIND, ...) goes to the handler too, which
            # answers it as API Gateway's ANY method would (405 with Allow), never a 501 page.
            if name.startswith("do_") and name[3:].isalpha():
                return self._guarded
            raise AttributeError(name)

        def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
            # Malformed request lines and the like: a problem document, not the default HTML page.
            body = json.dumps(
                {
                    "type": "about:blank",
                    "title": message or "Bad request",
                    "status": code,
                    "detail": explain or "",
                }
            ).encode()
            self.close_connection = True
            try:
                self.send_response(code, message)
                self.send_header("Content-Type", "application/problem+json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                if self.command != "HEAD" and code >= 200 and code not in (204, 304):
                    self.wfile.write(body)
            except OSError:  # the client is gone
                return

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the handler logs
            return None

    return _Handler


class LocalApiServer:
    """An HTTP server on ``host:port`` (port 0: a free one) in a background thread.

    Parameters
    ----------
    proxy
        A Lambda handler taking API Gateway REST proxy events (``functions/api/handler.py``).
    host, port
        Where to listen; loopback by default.
    identity
        ``requestContext.identity`` fields every event carries (tests of cloud tenancy).

    Examples
    --------
    >>> with LocalApiServer(handler) as server:  # doctest: +SKIP
    ...     urllib.request.urlopen(server.url + "/v1/jobs")
    """

    def __init__(
        self,
        proxy: ProxyHandler,
        host: str = "127.0.0.1",
        port: int = 0,
        identity: Mapping[str, str | None] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self.httpd = LoopbackServer((host, port), _make_request_handler(proxy, self._lock, identity))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> LocalApiServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="punctual-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join()
            self._thread = None
        self.httpd.server_close()

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted (local mode)."""
        try:
            self.httpd.serve_forever()
        finally:
            self.httpd.server_close()

    def __enter__(self) -> LocalApiServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
