"""The server-side request forgery (SSRF) guard of webhooks.

:func:`guard_url` decides whether a URL may be called. Registration calls it without
DNS (``resolve=False``) to refuse an obviously forbidden URL with a 4xx; the adapter
(:mod:`punctual.delivery.targets.webhooks.adapter`) calls :func:`check_addresses` with DNS
before every request and redirect hop, and connects only to the addresses it returns.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlsplit

__all__ = [
    "MAX_URL_CHARS",
    "BlockedTargetError",
    "IPAddress",
    "IPNetwork",
    "ParsedUrl",
    "Resolver",
    "UnresolvedTargetError",
    "address_block_reason",
    "check_addresses",
    "check_not_own_endpoint",
    "guard_url",
    "parse_allow_cidrs",
    "parse_url",
]

log = logging.getLogger("punctual.delivery")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_URL_CHARS = 2048

_ALLOWED_SCHEMES = {"http": 80, "https": 443}
_HOST_LABEL_RE = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\Z")
_NUMERIC_LABEL_RE = re.compile(r"^(0x[0-9a-f]*|[0-9]+)\Z")
# Loopback whatever a resolver says: RFC 6761's, and the names /etc/hosts gives loopback on common
# Linux images (QA23: localhost6 and localhost4 passed registration and were refused only at the call)
_LOCALHOST_NAMES = (
    "localhost",
    "localhost.localdomain",
    "ip6-localhost",
    "ip6-loopback",
    "localhost4",
    "localhost4.localdomain4",
    "localhost6",
    "localhost6.localdomain6",
)


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
        ("::ffff:0:0:0/96", "IPv4-translated IPv6 address (::ffff:0:0:0/96)"),  # RFC 2765 (QA17)
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
class ParsedUrl:
    """A URL that passed the syntax checks, with its host in canonical form."""

    url: str
    scheme: str
    host: str  # ASCII, lower case, no brackets, no trailing dot
    port: int
    literal: IPAddress | None
    target: str  # path and query, as sent in the request line

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)

    @property
    def shown(self) -> str:
        """The URL without its query string and fragment (which may carry tokens): what records
        and logs name."""
        return f"{self.scheme}://{self.url.split('://', 1)[1].split('?', 1)[0].split('#', 1)[0]}"


def parse_url(url: str) -> ParsedUrl:
    """Check a URL's syntax and scheme and canonicalise its host; raise BlockedTargetError."""

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
    return ParsedUrl(url, scheme, host, port or _ALLOWED_SCHEMES[scheme], literal, target)


# --------------------------------------------------------------------------- the guard


Resolver = Callable[..., Sequence[tuple[Any, ...]]]
"""The shape of :func:`socket.getaddrinfo`: ``resolver(host, port, family, type)``."""


def _resolve(parsed: ParsedUrl, resolver: Resolver) -> list[IPAddress]:
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


def check_addresses(
    parsed: ParsedUrl,
    allow: Sequence[IPNetwork],
    resolve: bool,
    resolver: Resolver,
) -> tuple[IPAddress, ...]:
    """The addresses ``parsed`` may be connected to (see :func:`guard_url`)."""
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
            if parsed.literal is not None:
                raise BlockedTargetError(parsed.url, reason)
            # The address a name resolves to stays in the operators' log: the reason goes to the
            # job's tenant, to whom it would map the deployment's internal DNS (QA23)
            # (not its query: QA24, a token in it went into the logs, which records leave it out of)
            shown = parsed.shown
            log.warning("blocked target %s: %r resolves to %s (%s)", shown, parsed.host, address, reason)
            raise BlockedTargetError(parsed.url, f"{parsed.host!r} resolves to a {reason}")
    return tuple(addresses)


_EVERY_ADDRESS = (ipaddress.IPv4Network("0.0.0.0/0"), ipaddress.IPv6Network("::/0"))


def check_not_own_endpoint(
    parsed: ParsedUrl,
    addresses: Sequence[IPAddress],
    endpoints: Sequence[str],
    resolver: Resolver,
) -> None:
    """Refuse ``parsed`` (connecting to ``addresses``) when it is one of the deployment's own AWS
    endpoints (``endpoints``: the SDK's ``AWS_ENDPOINT_URL``, local mode's moto server).

    Such an endpoint takes any request that reaches it as the deployment's own: a webhook with
    an ``X-Amz-Target`` header would act on the stack's table and queues, which no target may
    (QA23: one deleted local mode's table). Refused on the endpoint's port: its host name, any of
    its addresses, and any loopback address when it is on loopback (a server there may answer on
    all of them). Raises :class:`BlockedTargetError`.
    """
    for endpoint in endpoints:
        try:
            own = parse_url(endpoint)
        except BlockedTargetError:
            continue  # not a URL a webhook could name
        if own.port != parsed.port:
            continue
        try:
            theirs = check_addresses(own, _EVERY_ADDRESS, True, resolver)
        except BlockedTargetError:
            theirs = ()  # it does not resolve here: its name is still its own
        loopback = any(address.is_loopback for address in theirs)
        if parsed.host == own.host or any(
            address in theirs or (loopback and address.is_loopback) for address in addresses
        ):
            raise BlockedTargetError(
                parsed.url, f"port {own.port} of {own.host} is this deployment's own AWS endpoint"
            )


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
    parsed = parse_url(url)
    return check_addresses(parsed, allow, resolve, resolver or socket.getaddrinfo)
