"""Connections pinned to checked addresses, under one deadline.

A webhook's host name is resolved once (by :class:`DeadlineResolver`, which stops
waiting at the job's deadline), every answer is checked by the guard, and the socket
is opened to a checked address (:class:`PinnedConnectionFactory`) while the ``Host``
header, TLS server name (SNI) and certificate check still use the host name. A
resolver that answers differently on a second lookup (DNS rebinding) therefore cannot
redirect the request to an address that was never checked. :class:`Watchdog` closes
the socket when the deadline passes or the run is cancelled.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

from punctual.delivery.targets.webhooks.guard import IPAddress, Resolver
from punctual.runtime.stop_signal import Cancellation

__all__ = [
    "ConnectionFactory",
    "DeadlineResolver",
    "PinnedConnectionFactory",
    "PinnedHTTPConnection",
    "PinnedHTTPSConnection",
    "ResolveTimedOut",
    "Watchdog",
]


class FinalResponse(http.client.HTTPResponse):
    """A response whose status is the final one: every 1xx informational answer before it (102
    Processing, 103 Early Hints) is read past, as RFC 9110 section 15.2 asks of a client;
    ``http.client`` reads past 100 Continue only, and would take a 103 for the answer."""

    def _read_status(self) -> tuple[str, int, str]:
        while True:
            version, status, reason = super()._read_status()  # type: ignore[misc]  # (not in the stubs)
            if not 101 < status < 200:  # 100: read past by the caller; 101: never asked for
                return version, status, reason
            http.client.parse_headers(self.fp)  # the interim answer's header section, discarded


class PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to ``host`` whose socket goes to one checked ``address``.

    ``host`` still supplies the ``Host`` header; the name is never resolved again.
    """

    response_class = FinalResponse

    def __init__(self, host: str, port: int, address: IPAddress, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((str(self.address), self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class PinnedHTTPSConnection(PinnedHTTPConnection):
    """As :class:`PinnedHTTPConnection`, with TLS: SNI and certificate check use ``host``."""

    default_port = http.client.HTTPS_PORT

    def __init__(
        self, host: str, port: int, address: IPAddress, timeout: float, context: ssl.SSLContext
    ) -> None:
        super().__init__(host, port, address, timeout)
        self.ssl_context = context

    def connect(self) -> None:
        super().connect()
        self.sock = self.ssl_context.wrap_socket(self.sock, server_hostname=self.host)


class ConnectionFactory(Protocol):
    """Opens the connection for one request to one checked address."""

    def __call__(
        self, scheme: str, host: str, port: int, address: IPAddress, timeout: float
    ) -> http.client.HTTPConnection: ...


class PinnedConnectionFactory:
    """The default :class:`ConnectionFactory`: pinned HTTP(S) connections.

    Parameters
    ----------
    ssl_context : ssl.SSLContext, optional
        Defaults to :func:`ssl.create_default_context` (system trust store,
        certificate and host name verification on).
    """

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context or ssl.create_default_context()

    def __call__(
        self, scheme: str, host: str, port: int, address: IPAddress, timeout: float
    ) -> http.client.HTTPConnection:
        if scheme == "https":
            return PinnedHTTPSConnection(host, port, address, timeout, self.ssl_context)
        return PinnedHTTPConnection(host, port, address, timeout)


class Watchdog:
    """Closes a connection's socket when the job's deadline passes, or when the run is cancelled.

    Socket timeouts bound each read, not the whole exchange: a receiver that
    trickles one byte at a time could otherwise hold a worker far past its
    timeout. Shutting the socket down makes the blocked read return at once.
    ``cancel`` (the run's :attr:`SlotContext.cancel`) cuts the call short the same way:
    the worker lost the lease, or shuts down and hands the attempt on.
    """

    POLL_S = 0.2  # how often a cancellable call looks at its cancel event

    def __init__(
        self, conn: http.client.HTTPConnection, seconds: float, cancel: Cancellation | None = None
    ) -> None:
        self.fired = False
        self.cancelled = False
        self._conn = conn
        self._deadline = time.monotonic() + max(seconds, 0.0)
        self._cancel = cancel
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="webhook-watchdog", daemon=True)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def _watch(self) -> None:
        while True:
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                break
            if self._cancel is not None and self._cancel.is_set():
                self.cancelled = True
                break
            step = remaining if self._cancel is None else min(remaining, self.POLL_S)
            if self._done.wait(step):
                return
        self._fire()

    def _fire(self) -> None:
        self.fired = True  # set before the shutdown, so the reader sees it when its read returns
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed: nothing to interrupt
                sock.shutdown(socket.SHUT_RDWR)


class ResolveTimedOut(Exception):
    """Name resolution did not answer before the job's deadline."""


class DeadlineResolver:
    """Runs a resolver under the job's deadline.

    ``getaddrinfo`` takes no timeout (the system's resolver may retry for tens of
    seconds), so the lookup runs on a daemon thread and the caller stops waiting at
    the deadline; the thread ends whenever the lookup does, and its answer is dropped.
    """

    def __init__(self, resolver: Resolver, deadline: float) -> None:
        self._resolver = resolver
        self._deadline = deadline

    def __call__(self, *args: Any) -> Sequence[tuple[Any, ...]]:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise ResolveTimedOut
        outcome: list[Any] = []
        done = threading.Event()

        def lookup() -> None:
            try:
                outcome.append(self._resolver(*args))
            except BaseException as exc:  # handed to the waiting caller
                outcome.append(exc)
            done.set()

        threading.Thread(target=lookup, name="webhook-resolve", daemon=True).start()
        if not done.wait(remaining):
            raise ResolveTimedOut
        answer = outcome[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer  # type: ignore[no-any-return]
