"""moto's WSGI app behind a server that keeps connections open.

moto server runs on werkzeug's development server, which closes the connection after
every response ("Connection: close", on purpose: ``http.server`` cannot drain a request
body it did not read). So every AWS call local mode makes opens a TCP connection, starts
a server thread and tears both down, and the thread then waits 10 ms for stray input;
each side pays that per call, and botocore's connection pool never reuses a connection.

Here the handler is moto's own (its ``make_environ``: the same WSGI environ, headers with
underscores included); only the transport changes: HTTP/1.1 keep-alive, the request body
read to its ``Content-Length`` before the app runs (a chunked body, which botocore never
sends to these APIs, is left to werkzeug's path, which closes the connection), the
response sent in one write with its length, and ``TCP_NODELAY`` so that a small answer is
never held back waiting for an acknowledgement. One thread per connection, as before. With a
:class:`~local.bulk_gate.BulkGate`, bulk requests take turns inside moto (``local/bulk_gate.py``).
"""

from __future__ import annotations

import io
import logging
import socket
import threading
from contextlib import nullcontext
from typing import Any

from local.bulk_gate import BulkGate

log = logging.getLogger("local.aws")

_SKIPPED_HEADERS = frozenset({"content-length", "connection", "transfer-encoding"})


def _handler_class(gate: BulkGate | None = None) -> type:
    from moto.moto_server.werkzeug_app import MotoRequestHandler

    class KeepAliveHandler(MotoRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass  # one line per call otherwise

        def run_wsgi(self) -> None:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                self.close_connection = True
                super().run_wsgi()
                return
            if self.headers.get("Expect", "").lower().strip() == "100-continue":
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
            environ = self.make_environ()
            environ["wsgi.input"] = io.BytesIO(body)
            self.environ = environ
            reply: list[Any] = []

            def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                reply[:] = [status, headers]
                return chunks.append

            chunks: list[bytes] = []
            try:
                with gate.admit(self.headers.get("X-Amz-Target", ""), body) if gate else nullcontext():
                    result = self.server.app(environ, start_response)
                    try:
                        chunks.extend(result)
                    finally:
                        if hasattr(result, "close"):
                            result.close()
                status, headers = reply
            except Exception:
                log.exception("moto failed on %s %s", self.command, self.path)
                self.close_connection = True
                status, headers, chunks = "500 INTERNAL SERVER ERROR", [], [b"internal error"]
            payload = b"".join(chunks)
            lines = [f"HTTP/1.1 {status}", f"Server: {self.version_string()}"]
            lines.append(f"Date: {self.date_time_string()}")
            lines += [f"{k}: {v}" for k, v in headers if k.lower() not in _SKIPPED_HEADERS]
            code = int(status.split(None, 1)[0])
            if not (100 <= code < 200 or code in (204, 304)):
                lines.append(f"Content-Length: {len(payload)}")
            if self.close_connection:
                lines.append("Connection: close")
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
            self.wfile.write(head + (b"" if self.command == "HEAD" else payload))

    return KeepAliveHandler


class KeepAliveMotoServer:
    """``moto.server.ThreadedMotoServer``'s interface (start, stop, host and port), kept alive."""

    def __init__(self, ip_address: str, port: int, gate: BulkGate | None = None) -> None:
        self._ip_address = ip_address
        self._port = port
        self._gate = gate  # bulk requests take turns (local/bulk_gate.py); None: all at once
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(
            self._ip_address, self._port, app, threaded=True, request_handler=_handler_class(self._gate)
        )
        self._server.daemon_threads = True  # a connection a client left open never blocks the exit
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto-server", daemon=True)
        self._thread.start()

    def get_host_and_port(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
