"""Signed HTTP webhooks that cannot be turned against the network.

Two public pieces:

* :func:`guard_url` is the server-side request forgery (SSRF) check. Registration
  calls it without DNS (``resolve=False``) to refuse an obviously forbidden URL
  with a 4xx; the adapter calls it with DNS before every request and redirect hop.
* :class:`HttpTargetAdapter` sends the job's payload, signed the Standard Webhooks
  way, over a connection *pinned* to an address the guard checked: the host name
  is resolved once, every answer is checked, and the socket is opened to the
  first checked address while the ``Host`` header, TLS server name (SNI) and
  certificate check still use the original host name. A resolver that answers
  differently on a second lookup (DNS rebinding) therefore cannot redirect the
  request to an address that was never checked.

Only the standard library is used (``http.client``, ``ssl``, ``socket``): the
runtime layer ships no HTTP client library.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import http.client
import ipaddress
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol
from urllib.parse import SplitResult, urljoin, urlsplit

from punctual.clock import Clock, SystemClock
from punctual.models import RESERVED_HEADERS
from punctual.secrets import SecretsError, signing_key
from punctual.targets.base import SlotContext, TargetResult

__all__ = [
    "MAX_RESPONSE_BYTES",
    "BlockedTargetError",
    "ConnectionFactory",
    "HttpTargetAdapter",
    "IPAddress",
    "PinnedConnectionFactory",
    "Resolver",
    "UnresolvedTargetError",
    "address_block_reason",
    "guard_url",
    "parse_allow_cidrs",
    "parse_retry_after",
    "sign_fencing_token",
    "sign_webhook",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_RESPONSE_BYTES = 64 * 1024  # response body read cap; the rest is never read
MAX_URL_CHARS = 2048
MAX_REDIRECTS = 5
SUMMARY_BODY_CHARS = 200  # body excerpt in the one-line summary
DETAIL_BODY_CHARS = 1024  # body excerpt kept in the result detail
USER_AGENT = "Punctual-Webhooks/1"
FENCING_TOKEN_HEADER = "Punctual-Fencing-Token"
FENCING_SIGNATURE_HEADER = "Punctual-Fencing-Signature"
# The fencing signature's key is derived from the signing secret's, so it can never
# double as a Standard Webhooks signature of some other request.
FENCING_KEY_LABEL = b"punctual-fencing-token"

_ALLOWED_SCHEMES = {"http": 80, "https": 443}
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Headers a job may not set (refused at registration; dropped here from jobs stored before).
_RESERVED_HEADERS = RESERVED_HEADERS
# Dropped from the job's headers when a redirect leaves the original origin.
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
_HOST_LABEL_RE = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
_NUMERIC_LABEL_RE = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_LOCALHOST_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


class BlockedTargetError(ValueError):
    """A URL the scheduler refuses to call.

    Attributes
    ----------
    url : str
        The URL as given.
    reason : str
        Why it is refused, short enough for an API error or an execution record.
    """

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"target URL refused: {reason}")
        self.url = url
        self.reason = reason


class UnresolvedTargetError(BlockedTargetError):
    """The host name did not resolve (a DNS failure: may succeed on a later attempt)."""


# --------------------------------------------------------------------------- addresses

# Ordered: the first match names the reason. Anything not listed that is not
# globally routable is refused too ("not globally routable").
_V4_BLOCKS: tuple[tuple[ipaddress.IPv4Network, str], ...] = tuple(
    (ipaddress.IPv4Network(net), why)
    for net, why in (
        ("0.0.0.0/8", "unspecified address ('this network', 0.0.0.0/8)"),
        ("127.0.0.0/8", "loopback address (127.0.0.0/8)"),
        ("10.0.0.0/8", "private address (10.0.0.0/8)"),
        ("172.16.0.0/12", "private address (172.16.0.0/12)"),
        ("192.168.0.0/16", "private address (192.168.0.0/16)"),
        ("169.254.0.0/16", "link-local address (169.254.0.0/16, includes instance metadata)"),
        ("100.64.0.0/10", "carrier-grade NAT address (100.64.0.0/10)"),
        ("198.18.0.0/15", "benchmarking address (198.18.0.0/15)"),
        ("224.0.0.0/4", "multicast address (224.0.0.0/4)"),
        ("255.255.255.255/32", "broadcast address"),
        ("240.0.0.0/4", "reserved address (240.0.0.0/4)"),
        ("192.0.0.0/24", "IETF protocol assignment (192.0.0.0/24)"),
        ("192.0.2.0/24", "documentation address (192.0.2.0/24)"),
        ("198.51.100.0/24", "documentation address (198.51.100.0/24)"),
        ("203.0.113.0/24", "documentation address (203.0.113.0/24)"),
        ("192.88.99.0/24", "6to4 relay anycast address (192.88.99.0/24)"),
    )
)
_V6_BLOCKS: tuple[tuple[ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.IPv6Network(net), why)
    for net, why in (
        ("::/128", "unspecified address (::)"),
        ("::1/128", "loopback address (::1)"),
        ("::ffff:0:0/96", "IPv4-mapped IPv6 address (::ffff:0:0/96)"),
        ("::/96", "IPv4-compatible IPv6 address (::/96)"),
        ("64:ff9b:1::/48", "local-use NAT64 address (64:ff9b:1::/48)"),
        ("fc00::/7", "unique local address (fc00::/7)"),
        ("fe80::/10", "link-local address (fe80::/10)"),
        ("fec0::/10", "site-local address (fec0::/10)"),
        ("ff00::/8", "multicast address (ff00::/8)"),
        ("100::/64", "discard-only address (100::/64)"),
        ("2001:db8::/32", "documentation address (2001:db8::/32)"),
        ("2001::/32", "Teredo address (2001::/32)"),
    )
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def parse_allow_cidrs(cidrs: Iterable[str | IPNetwork]) -> tuple[IPNetwork, ...]:
    """Parse an operator allow-list (``PUNCTUAL_TARGET_ALLOW_CIDRS``).

    Parameters
    ----------
    cidrs : iterable of str or network
        CIDR blocks such as ``"127.0.0.0/8"`` or ``"10.1.2.3/32"``.

    Returns
    -------
    tuple of IPv4Network or IPv6Network

    Raises
    ------
    ValueError
        A block that is not a network (host bits set are refused: say what you mean).
    """
    networks: list[IPNetwork] = []
    for cidr in cidrs:
        if isinstance(cidr, ipaddress.IPv4Network | ipaddress.IPv6Network):
            networks.append(cidr)
        else:
            try:
                networks.append(ipaddress.ip_network(cidr.strip(), strict=True))
            except ValueError as exc:
                raise ValueError(f"invalid CIDR in target allow-list: {cidr!r} ({exc})") from None
    return tuple(networks)


def address_block_reason(address: IPAddress, allow: Sequence[IPNetwork] = ()) -> str | None:
    """Say why a target may not connect to ``address``, or None when it may.

    Parameters
    ----------
    address : IPv4Address or IPv6Address
        A resolved or literal address.
    allow : sequence of networks
        Operator allow-list; an address inside one of them is always allowed.

    Returns
    -------
    str or None
        The reason the address is refused (loopback, private, link-local, ...).
    """
    if any(address.version == net.version and address in net for net in allow):
        return None
    if isinstance(address, ipaddress.IPv4Address):
        for v4net, why in _V4_BLOCKS:
            if address in v4net:
                return why
    else:
        if address.scope_id:
            return "IPv6 address with a zone index"
        for v6net, why in _V6_BLOCKS:
            if address in v6net:
                return why
        # Addresses that embed an IPv4 address reach it: judge the embedded one.
        embedded: ipaddress.IPv4Address | None = address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            inner = address_block_reason(embedded)
            if inner is not None:
                return f"IPv6 address embedding a forbidden IPv4 address: {inner}"
    if not address.is_global:
        return "address is not globally routable"
    return None


def _parse_ipv4_loose(host: str) -> ipaddress.IPv4Address | None:
    """Parse the IPv4 spellings that ``inet_aton`` and browsers accept.

    One to four dot-separated parts, each decimal, octal (leading ``0``) or hex
    (``0x``); the last part fills the remaining bytes: ``127.1``, ``0x7f.1``,
    ``0177.0.0.1`` and ``2130706433`` are all 127.0.0.1. Returns None when ``host``
    is not such a spelling.
    """
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values: list[int] = []
    for part in parts:
        if re.fullmatch(r"0x[0-9a-f]*", part):
            values.append(int(part[2:] or "0", 16))
        elif re.fullmatch(r"0[0-7]+", part):
            values.append(int(part, 8))
        elif re.fullmatch(r"[0-9]+", part) and not (len(part) > 1 and part[0] == "0"):
            values.append(int(part, 10))
        else:
            return None
    *head, last = values
    if any(value > 0xFF for value in head) or last >= 1 << (8 * (5 - len(values))):
        return None
    number = 0
    for value in head:
        number = number << 8 | value
    number = number << (8 * (5 - len(values))) | last
    return ipaddress.IPv4Address(number)


@dataclass(frozen=True)
class _ParsedUrl:
    url: str
    scheme: str
    host: str  # ASCII, lower case, no brackets, no trailing dot
    port: int
    literal: IPAddress | None
    target: str  # path and query, as sent in the request line

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)


def _parse_url(url: str) -> _ParsedUrl:
    def refuse(reason: str) -> BlockedTargetError:
        return BlockedTargetError(url, reason)

    if not isinstance(url, str) or not url:
        raise refuse("URL is empty")
    if len(url) > MAX_URL_CHARS:
        raise refuse(f"URL is longer than {MAX_URL_CHARS} characters")
    # Parsers disagree about whitespace, control characters and backslashes:
    # refuse them rather than guess which host another parser would see.
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F or ch == "\\" for ch in url):
        raise refuse("URL contains whitespace, control characters or backslashes")
    try:
        parts: SplitResult = urlsplit(url)
    except ValueError as exc:
        raise refuse(f"URL cannot be parsed: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _ALLOWED_SCHEMES:
        raise refuse(f"scheme {scheme or '(none)'!r} is not allowed; only http and https")
    if not parts.netloc:
        raise refuse("URL has no host")
    if "@" in parts.netloc:
        raise refuse("credentials in the URL (user@host) are not allowed; send them in a header")
    try:
        port = parts.port
    except ValueError:
        raise refuse("URL has an invalid port") from None
    if port == 0:
        raise refuse("port 0 is not allowed")
    raw_host = parts.hostname or ""
    if not raw_host:
        raise refuse("URL has no host")

    literal: IPAddress | None = None
    bracketed = parts.netloc.rpartition("@")[2].startswith("[")
    if bracketed:
        if "%" in raw_host:
            raise refuse("IPv6 zone indexes are not allowed")
        try:
            literal = ipaddress.IPv6Address(raw_host)
        except ValueError:
            raise refuse(f"invalid IPv6 address {raw_host!r}") from None
        host = str(literal)
    else:
        try:
            host = raw_host.encode("idna").decode("ascii").lower()
        except UnicodeError:
            raise refuse(f"invalid host name {raw_host!r}") from None
        if host.endswith("."):
            host = host[:-1]
        if not host or len(host) > 253:
            raise refuse("invalid host name length")
        labels = host.split(".")
        if _NUMERIC_LABEL_RE.match(labels[-1]):
            # A numeric last label makes the host an IPv4 address (WHATWG URL),
            # however it is spelled; one we cannot read is refused, not resolved.
            literal = _parse_ipv4_loose(host)
            if literal is None:
                raise refuse(f"host {raw_host!r} looks numeric but is not a valid IPv4 address")
            host = str(literal)
        elif not all(_HOST_LABEL_RE.match(label) for label in labels):
            raise refuse(f"invalid host name {raw_host!r}")
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    return _ParsedUrl(url, scheme, host, port or _ALLOWED_SCHEMES[scheme], literal, target)


# --------------------------------------------------------------------------- the guard


Resolver = Callable[..., Sequence[tuple[Any, ...]]]
"""The shape of :func:`socket.getaddrinfo`: ``resolver(host, port, family, type)``."""


def _resolve(parsed: _ParsedUrl, resolver: Resolver) -> list[IPAddress]:
    try:
        answers = resolver(parsed.host, parsed.port, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UnresolvedTargetError(parsed.url, f"host {parsed.host!r} did not resolve: {exc}") from None
    addresses: list[IPAddress] = []
    for answer in answers:
        sockaddr = answer[4]
        try:
            address = ipaddress.ip_address(str(sockaddr[0]))
        except ValueError:
            raise BlockedTargetError(
                parsed.url, f"resolver returned a non-IP answer {sockaddr[0]!r}"
            ) from None
        if isinstance(address, ipaddress.IPv6Address) and len(sockaddr) >= 4 and sockaddr[3]:
            raise BlockedTargetError(parsed.url, f"host {parsed.host!r} resolved to a scoped IPv6 address")
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise UnresolvedTargetError(parsed.url, f"host {parsed.host!r} resolved to no address")
    return addresses


def _guard(
    parsed: _ParsedUrl,
    allow: Sequence[IPNetwork],
    resolve: bool,
    resolver: Resolver,
) -> tuple[IPAddress, ...]:
    if parsed.literal is not None:
        addresses: list[IPAddress] = [parsed.literal]
    elif parsed.host in _LOCALHOST_NAMES or parsed.host.endswith(".localhost"):
        # RFC 6761: these names mean loopback whatever a resolver says; never ask DNS.
        addresses = [ipaddress.IPv4Address("127.0.0.1")]
    elif resolve:
        addresses = _resolve(parsed, resolver)
    else:
        return ()
    # Every answer is checked: one forbidden address refuses the URL, so a
    # multi-answer record cannot smuggle a private address in behind a public one.
    for address in addresses:
        reason = address_block_reason(address, allow)
        if reason is not None:
            shown = "" if parsed.literal is not None else f" {parsed.host!r} resolves to {address}:"
            raise BlockedTargetError(parsed.url, f"{shown} {reason}".strip())
    return tuple(addresses)


def guard_url(
    url: str,
    allow_cidrs: Iterable[str | IPNetwork] = (),
    *,
    resolve: bool = True,
    resolver: Resolver | None = None,
) -> tuple[IPAddress, ...]:
    """Check that ``url`` may be called, and return the addresses that were checked.

    Only ``http`` and ``https`` are accepted; credentials in the URL, whitespace,
    control characters and backslashes are refused; IPv4 literals are read in
    every spelling ``inet_aton`` accepts (``2130706433``, ``0177.0.0.1``,
    ``0x7f.1``, ``127.1``). Loopback, private, link-local (instance metadata),
    carrier-grade NAT, benchmarking, multicast, unspecified, reserved and
    documentation ranges, and their IPv6 forms (``::1``, ``fc00::/7``,
    ``fe80::/10``, IPv4-mapped ``::ffff:0:0/96``, and NAT64/6to4 addresses that
    embed a forbidden IPv4 address) are refused unless an ``allow_cidrs`` block
    contains the address.

    Parameters
    ----------
    url : str
        The target URL.
    allow_cidrs : iterable of str or network, optional
        Operator allow-list (``PUNCTUAL_TARGET_ALLOW_CIDRS``); empty by default.
    resolve : bool, default True
        Resolve the host name and check every answer. With ``False`` (registration,
        no network) only the scheme, the URL syntax, IP literals and the
        ``localhost`` names are checked, and a host name yields an empty tuple.
    resolver : callable, optional
        ``getaddrinfo``-shaped resolver; :func:`socket.getaddrinfo` by default.

    Returns
    -------
    tuple of IPv4Address or IPv6Address
        The checked addresses, in resolver order; a connection must go to one of
        them, never to a fresh lookup. Empty only when ``resolve`` is False and
        the host is a name.

    Raises
    ------
    BlockedTargetError
        The URL is refused; ``reason`` says why.
    UnresolvedTargetError
        The host name did not resolve (subclass of :class:`BlockedTargetError`).
    """
    allow = parse_allow_cidrs(allow_cidrs)
    parsed = _parse_url(url)
    return _guard(parsed, allow, resolve, resolver or socket.getaddrinfo)


# --------------------------------------------------------------------------- signing


def sign_webhook(msg_id: str, timestamp: int, body: bytes, secrets: Sequence[str]) -> str:
    """The Standard Webhooks ``webhook-signature`` header value.

    Parameters
    ----------
    msg_id : str
        ``webhook-id``: the same for every attempt of one slot, so receivers dedupe on it.
    timestamp : int
        ``webhook-timestamp``, seconds since the epoch.
    body : bytes
        The exact request body.
    secrets : sequence of str
        ``whsec_…`` secrets, current first; during rotation both sign, so a
        receiver holding either one verifies the request.

    Returns
    -------
    str
        Space-separated ``v1,<base64 HMAC-SHA256 of "id.timestamp.body">`` entries.

    Raises
    ------
    SecretsError
        A secret is malformed.
    """
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(signing_key(secret), signed, hashlib.sha256).digest()).decode()
        for secret in secrets
    )


def sign_fencing_token(msg_id: str, timestamp: int, token: str, body: bytes, secrets: Sequence[str]) -> str:
    """The ``Punctual-Fencing-Signature`` header value: the fencing token, signed.

    ``webhook-signature`` (Standard Webhooks) covers ``webhook-id``,
    ``webhook-timestamp`` and the body, not other headers; this signature binds the
    ``Punctual-Fencing-Token`` to the same request. Its key is derived, so it can
    never pass for a Standard Webhooks signature::

        key  = base64decode(secret without "whsec_")
        fkey = HMAC-SHA256(key, "punctual-fencing-token")
        sig  = base64(HMAC-SHA256(fkey, "<webhook-id>.<webhook-timestamp>.<token>." + body))

    Parameters
    ----------
    msg_id : str
        ``webhook-id`` (the idempotency key).
    timestamp : int
        ``webhook-timestamp``.
    token : str
        ``Punctual-Fencing-Token``: ``<job_id>:<slot>:<attempt>``.
    body : bytes
        The exact request body.
    secrets : sequence of str
        ``whsec_…`` secrets, current first (both sign during a rotation).

    Returns
    -------
    str
        Space-separated ``v1,<base64>`` entries, one per secret.

    Raises
    ------
    SecretsError
        A secret is malformed.
    """
    signed = f"{msg_id}.{timestamp}.{token}.".encode() + body
    entries = []
    for secret in secrets:
        fencing_key = hmac.new(signing_key(secret), FENCING_KEY_LABEL, hashlib.sha256).digest()
        digest = hmac.new(fencing_key, signed, hashlib.sha256).digest()
        entries.append("v1," + base64.b64encode(digest).decode())
    return " ".join(entries)


# --------------------------------------------------------------------------- connections


class PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to ``host`` whose socket goes to one checked ``address``.

    ``host`` still supplies the ``Host`` header; the name is never resolved again.
    """

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


class _Watchdog:
    """Closes a connection's socket when the job's deadline passes, or when the run is cancelled.

    Socket timeouts bound each read, not the whole exchange: a receiver that
    trickles one byte at a time could otherwise hold a worker far past its
    timeout. Shutting the socket down makes the blocked read return at once.
    ``cancel`` (the run's :attr:`SlotContext.cancel`) cuts the call short the same way:
    the worker lost the lease, or shuts down and hands the attempt on.
    """

    POLL_S = 0.2  # how often a cancellable call looks at its cancel event

    def __init__(
        self, conn: http.client.HTTPConnection, seconds: float, cancel: threading.Event | None = None
    ) -> None:
        self.fired = False
        self.cancelled = False
        self._conn = conn
        self._deadline = time.monotonic() + max(seconds, 0.0)
        self._cancel = cancel
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="webhook-watchdog", daemon=True)

    def __enter__(self) -> _Watchdog:
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


class _ResolveTimedOut(Exception):
    """Name resolution did not answer before the job's deadline."""


class _DeadlineResolver:
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
            raise _ResolveTimedOut
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
            raise _ResolveTimedOut
        answer = outcome[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- the adapter


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Read a ``Retry-After`` header: delay seconds or an HTTP date.

    Parameters
    ----------
    value : str or None
        The header value.
    now : datetime
        The current instant (aware), for the HTTP-date form.

    Returns
    -------
    float or None
        Seconds to wait (never negative), or None when absent or unreadable.
    """
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(int(value))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - now).total_seconds(), 0.0)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _redacted(parsed: _ParsedUrl) -> str:
    """The URL without its query string (which may carry tokens) for records."""
    return f"{parsed.scheme}://{parsed.url.split('://', 1)[1].split('?', 1)[0].split('#', 1)[0]}"


@dataclass
class _Response:
    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes
    truncated: bool


class HttpTargetAdapter:
    """Calls webhooks (``type: http``): signed, SSRF-guarded, pinned, bounded.

    Every request carries ``Idempotency-Key: <job_id>:<slot>``, the Standard
    Webhooks headers ``webhook-id`` (the same key), ``webhook-timestamp`` and
    ``webhook-signature`` (one ``v1,`` entry per secret in ``ctx.signing_secrets``;
    absent when the job has no secret), and ``Punctual-Fencing-Token:
    <job_id>:<slot>:<attempt>`` (:attr:`SlotContext.fencing_token`) with its
    ``Punctual-Fencing-Signature`` (:func:`sign_fencing_token`; absent without a
    secret). Outcomes: 2xx succeeds; 408, 429, 5xx, network errors, TLS failures
    and timeouts are retryable (``Retry-After`` passed on as ``retry_after_s``);
    410 is permanent and pauses the job; other 4xx, redirects the job does not
    follow, and URLs the guard refuses are permanent. At most
    :data:`MAX_RESPONSE_BYTES` of the response body are read, and the whole
    exchange ends at ``ctx.timeout_s``: name resolution, connect, request and
    response of every redirect hop share one deadline (a watchdog closes the
    socket when it passes, so a receiver trickling bytes cannot stretch it).

    Parameters
    ----------
    allow_cidrs : iterable of str or network, optional
        Operator allow-list for :func:`guard_url`.
    clock : Clock, optional
        Source of ``webhook-timestamp`` and of "now" for ``Retry-After`` dates.
    resolver : callable, optional
        ``getaddrinfo``-shaped resolver (tests, DNS-rebinding checks).
    connection_factory : ConnectionFactory, optional
        Opens the pinned connection; :class:`PinnedConnectionFactory` by default.
    max_response_bytes : int, optional
        Body read cap.
    max_redirects : int, optional
        Hops followed when the target allows redirects.
    """

    def __init__(
        self,
        allow_cidrs: Iterable[str | IPNetwork] = (),
        *,
        clock: Clock | None = None,
        resolver: Resolver | None = None,
        connection_factory: ConnectionFactory | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        max_redirects: int = MAX_REDIRECTS,
    ) -> None:
        self.allow = parse_allow_cidrs(allow_cidrs)
        self.clock: Clock = clock or SystemClock()
        self.resolver: Resolver = resolver or socket.getaddrinfo
        self.connection_factory: ConnectionFactory = connection_factory or PinnedConnectionFactory()
        self.max_response_bytes = max_response_bytes
        self.max_redirects = max_redirects

    # -- public

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        """Send one signed request (following allowed redirects) and classify the answer.

        Parameters
        ----------
        target : HttpTarget
            ``url``, ``method``, ``headers``, ``follow_redirects``.
        payload : Any
            The rendered payload: JSON-encoded, or sent as-is when it is a string
            and the job set a non-JSON ``Content-Type``. ``None`` sends no body.
        ctx : SlotContext
            Slot identity, timeout and signing secrets.

        Returns
        -------
        TargetResult
            Never raises for a failed call.
        """
        deadline = time.monotonic() + max(ctx.timeout_s, 0.001)
        user_headers = {str(k): str(v) for k, v in (getattr(target, "headers", None) or {}).items()}
        method = str(getattr(target, "method", "POST")).upper()
        try:
            body = self._encode_body(payload, user_headers)
        except (TypeError, ValueError) as exc:
            return TargetResult.permanent(f"payload cannot be encoded as JSON: {exc}")
        url = str(target.url)
        follow = bool(getattr(target, "follow_redirects", False))
        first_origin: tuple[str, str, int] | None = None
        hops: list[str] = []

        resolver = _DeadlineResolver(self.resolver, deadline)
        for _hop in range(self.max_redirects + 1):
            try:
                parsed = _parse_url(url)
                addresses = _guard(parsed, self.allow, True, resolver)
            except _ResolveTimedOut:
                return self._fail_timeout(parsed, hops)
            except UnresolvedTargetError as exc:
                return self._fail(exc.reason, retryable=True, hops=hops)
            except BlockedTargetError as exc:
                return self._fail(f"blocked: {exc.reason}", retryable=False, hops=hops)
            if first_origin is None:
                first_origin = parsed.origin
            headers = {
                k: v
                for k, v in user_headers.items()
                if parsed.origin == first_origin or k.lower() not in _CREDENTIAL_HEADERS
            }
            try:
                outgoing = self._headers(headers, body if method not in ("GET", "HEAD") else None, ctx)
            except SecretsError as exc:
                return TargetResult.permanent(f"signing secret is malformed: {exc}")
            if ctx.cancelled:  # asked to stop before this request left: it is never sent
                return TargetResult.stopped_early(
                    f"stopped before calling {parsed.host}: the run was cancelled"
                )

            result = self._exchange(parsed, addresses, method, outgoing, body, deadline, ctx.cancel)
            if isinstance(result, TargetResult):
                result.detail.setdefault("url", _redacted(parsed))
                if hops:
                    result.detail["redirects"] = hops
                return result
            response = result
            if response.status in _REDIRECT_STATUSES and response.headers.get("location"):
                location = urljoin(url, response.headers["location"]).split("#", 1)[0]
                if not follow:
                    return self._classified(
                        TargetResult.permanent(
                            f"HTTP {response.status} redirect to {_one_line(location, 200)} not followed "
                            "(the job does not allow redirects)"
                        ),
                        parsed,
                        response,
                        hops,
                    )
                if parsed.scheme == "https" and location.lower().startswith("http://"):
                    return self._classified(
                        TargetResult.permanent("redirect from https to http refused"), parsed, response, hops
                    )
                hops.append(f"{response.status} {_one_line(location, 200)}")
                if response.status == 303 or (response.status in (301, 302) and method == "POST"):
                    method, body = "GET", b""
                url = location
                continue
            return self._classified(self._classify(response), parsed, response, hops)
        return TargetResult.permanent(f"more than {self.max_redirects} redirects")

    # -- internals

    @staticmethod
    def _encode_body(payload: Any, headers: Mapping[str, str]) -> bytes:
        if payload is None:
            return b""
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
        if isinstance(payload, str) and content_type and "json" not in content_type.lower():
            return payload.encode()
        return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()

    def _headers(self, user: Mapping[str, str], body: bytes | None, ctx: SlotContext) -> dict[str, str]:
        headers = {k: v for k, v in user.items() if k.lower() not in _RESERVED_HEADERS}
        lowered = {k.lower() for k in headers}
        if body and "content-type" not in lowered:
            headers["Content-Type"] = "application/json"
        if "user-agent" not in lowered:
            headers["User-Agent"] = USER_AGENT
        timestamp = int(self.clock.now().timestamp())
        key = ctx.idempotency_key
        token = ctx.fencing_token
        headers["Idempotency-Key"] = key
        headers["webhook-id"] = key
        headers["webhook-timestamp"] = str(timestamp)
        headers[FENCING_TOKEN_HEADER] = token
        if ctx.signing_secrets:
            headers["webhook-signature"] = sign_webhook(key, timestamp, body or b"", ctx.signing_secrets)
            headers[FENCING_SIGNATURE_HEADER] = sign_fencing_token(
                key, timestamp, token, body or b"", ctx.signing_secrets
            )
        return headers

    def _exchange(
        self,
        parsed: _ParsedUrl,
        addresses: Sequence[IPAddress],
        method: str,
        headers: Mapping[str, str],
        body: bytes,
        deadline: float,
        cancel: threading.Event | None = None,
    ) -> _Response | TargetResult:
        send_body = body if method not in ("GET", "HEAD") else b""
        last_error = ""
        # Try the checked addresses in order; a failed *connect* moves on, nothing
        # else does (the request may already have reached the receiver).
        for address in addresses:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            conn = self.connection_factory(parsed.scheme, parsed.host, parsed.port, address, remaining)
            watchdog = _Watchdog(conn, remaining, cancel)
            try:
                with watchdog:
                    try:
                        conn.connect()
                    except (OSError, ssl.SSLError) as exc:
                        if isinstance(exc, ssl.SSLCertVerificationError):
                            return TargetResult.retryable(
                                f"TLS certificate check failed: {exc.verify_message}"
                            )
                        if watchdog.fired or isinstance(exc, TimeoutError):
                            return self._cut_short(parsed, watchdog)
                        last_error = f"connection to {address} failed: {exc}"
                        continue
                    try:
                        conn.request(method, parsed.target, body=send_body or None, headers=dict(headers))
                        response = conn.getresponse()
                        data = response.read(self.max_response_bytes + 1)
                        if watchdog.fired:
                            # The cut-off socket reads as an early end: what was parsed
                            # is a fragment, never an answer.
                            return self._cut_short(parsed, watchdog)
                        truncated = len(data) > self.max_response_bytes
                        return _Response(
                            status=response.status,
                            reason=response.reason,
                            headers={k.lower(): v for k, v in response.getheaders()},
                            body=data[: self.max_response_bytes],
                            truncated=truncated,
                        )
                    except (OSError, http.client.HTTPException, ssl.SSLError) as exc:
                        if watchdog.fired or isinstance(exc, TimeoutError):
                            return self._cut_short(parsed, watchdog)
                        return TargetResult.retryable(f"network error: {type(exc).__name__}: {exc}")
            finally:
                conn.close()
        if not last_error:
            return self._timeout(parsed)
        return TargetResult.retryable(f"network error: {last_error}")

    @classmethod
    def _cut_short(cls, parsed: _ParsedUrl, watchdog: _Watchdog) -> TargetResult:
        if watchdog.cancelled:
            return TargetResult.stopped_early(f"stopped calling {parsed.host}: the run was cancelled")
        return cls._timeout(parsed)

    @staticmethod
    def _timeout(parsed: _ParsedUrl) -> TargetResult:
        result = TargetResult.retryable(f"timed out calling {parsed.host}")
        result.timed_out = True
        return result

    @classmethod
    def _fail_timeout(cls, parsed: _ParsedUrl, hops: list[str]) -> TargetResult:
        result = cls._timeout(parsed)
        result.summary = f"timed out resolving {parsed.host}"
        result.detail["url"] = _redacted(parsed)
        if hops:
            result.detail["redirects"] = hops
        return result

    def _classify(self, response: _Response) -> TargetResult:
        status = response.status
        text = f"HTTP {status} {response.reason}".strip()
        excerpt = _one_line(response.body.decode("utf-8", "replace"), SUMMARY_BODY_CHARS)
        with_body = f"{text}: {excerpt}" if excerpt else text
        if 200 <= status < 300:
            return TargetResult.ok(text)
        retry_after = parse_retry_after(response.headers.get("retry-after"), self.clock.now())
        if status in (408, 429) or 500 <= status < 600:
            return TargetResult.retryable(with_body, retry_after_s=retry_after)
        if status == 410:
            return TargetResult.permanent(f"{with_body} (receiver asked to stop: job paused)", pause_job=True)
        if 400 <= status < 500:
            return TargetResult.permanent(with_body)
        if 300 <= status < 400:
            return TargetResult.permanent(f"{with_body} (unexpected redirect status)")
        return TargetResult.retryable(f"{with_body} (unexpected status)", retry_after_s=retry_after)

    @staticmethod
    def _classified(
        result: TargetResult, parsed: _ParsedUrl, response: _Response, hops: list[str]
    ) -> TargetResult:
        result.detail.update(
            status=response.status,
            url=_redacted(parsed),
            body=response.body[:DETAIL_BODY_CHARS].decode("utf-8", "replace"),
            body_bytes_read=len(response.body),
            body_truncated=response.truncated,
        )
        if hops:
            result.detail["redirects"] = hops
        return result

    @staticmethod
    def _fail(reason: str, *, retryable: bool, hops: list[str]) -> TargetResult:
        result = TargetResult.retryable(reason) if retryable else TargetResult.permanent(reason)
        if hops:
            result.detail["redirects"] = hops
        return result
