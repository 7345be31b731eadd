"""The SSRF guard: which URLs a webhook may call, however the address is spelled.

No I/O here: resolvers and connections are fakes, so these tests also prove that the
adapter connects to the address the guard checked and never looks the name up again.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from punctual.delivery.targets.base import Outcome, SlotContext
from punctual.delivery.targets.webhooks.adapter import HttpTargetAdapter
from punctual.delivery.targets.webhooks.guard import (
    BlockedTargetError,
    UnresolvedTargetError,
    address_block_reason,
    guard_url,
    parse_allow_cidrs,
)
from punctual.models import HttpTarget

PUBLIC_V4 = "93.184.216.34"
PUBLIC_V6 = "2606:2800:220:1:248:1893:25c8:1946"

# (url, words the refusal reason must contain). Every spelling must be refused
# without DNS (resolve=False), which is what registration runs.
BLOCKED: list[tuple[str, str]] = [
    # loopback, every way inet_aton reads it
    ("http://127.0.0.1/", "loopback"),
    ("http://127.0.0.1:8080/hook", "loopback"),
    ("http://127.255.255.254/", "loopback"),
    ("http://2130706433/", "loopback"),  # decimal
    ("http://017700000001/", "loopback"),  # one octal number
    ("http://0x7f000001/", "loopback"),  # one hex number
    ("http://0177.0.0.1/", "loopback"),  # octal parts
    ("http://0x7f.0x0.0x0.0x1/", "loopback"),  # hex parts
    ("http://0x7f.1/", "loopback"),  # hex, short form
    ("http://127.1/", "loopback"),  # short form
    ("http://127.0.1/", "loopback"),  # three parts
    ("http://0x7F.1/", "loopback"),  # upper-case hex
    ("http://%31%32%37.0.0.1/", "numeric"),  # percent-encoded digits
    ("http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/", "loopback"),  # full-width digits (IDNA maps them)
    ("http://127\u30020\u30020\u30021/", "loopback"),  # ideographic full stops
    ("http://127.0.0.1./", "loopback"),  # trailing dot
    ("HTTP://127.0.0.1/", "loopback"),  # upper-case scheme
    ("hTtPs://127.0.0.1/", "loopback"),
    ("http://localhost/", "loopback"),
    ("http://LOCALHOST./", "loopback"),  # trailing dot, upper case
    ("http://api.localhost/", "loopback"),  # RFC 6761 names never go to DNS
    ("http://localhost6/", "loopback"),  # /etc/hosts loopback names (QA23: passed registration)
    ("http://localhost4.localdomain4:8080/", "loopback"),
    # IPv6 loopback and IPv4 inside IPv6
    ("http://[::1]/", "loopback"),
    ("http://[0:0:0:0:0:0:0:1]/", "loopback"),
    ("http://[::ffff:127.0.0.1]/", "IPv4-mapped"),
    ("http://[::ffff:7f00:1]/", "IPv4-mapped"),
    ("http://[::ffff:169.254.169.254]/", "IPv4-mapped"),
    ("http://[::ffff:8.8.8.8]/", "IPv4-mapped"),  # every mapped address, public or not
    ("http://[::ffff:0:7f00:1]/", "IPv4-translated"),  # RFC 2765 (QA17 security review)
    ("http://[::ffff:0:a9fe:a9fe]/", "IPv4-translated"),
    ("http://[::127.0.0.1]/", "IPv4-compatible"),
    ("http://[64:ff9b::a9fe:a9fe]/", "link-local"),  # NAT64 of the metadata address
    ("http://[2002:7f00:1::]/", "loopback"),  # 6to4 of 127.0.0.1
    ("http://[2002:a00:1::]/", "private"),  # 6to4 of 10.0.0.1
    # private IPv4
    ("http://10.0.0.1/", "private"),
    ("http://10.255.255.255/", "private"),
    ("http://012.0.0.1/", "private"),  # octal 10.0.0.1
    ("http://167772161/", "private"),  # decimal 10.0.0.1
    ("http://172.16.0.1/", "private"),
    ("http://172.31.255.254/", "private"),
    ("http://192.168.1.1/", "private"),
    ("http://0xc0.0xa8.1.1/", "private"),  # hex 192.168.1.1
    ("http://3232235777/", "private"),  # decimal 192.168.1.1
    # link-local and cloud metadata
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://169.254.170.2/v2/credentials", "link-local"),  # ECS container credentials
    ("http://2852039166/", "link-local"),  # decimal 169.254.169.254
    ("http://0xa9.0xfe.0xa9.0xfe/", "link-local"),
    ("http://0251.0376.0251.0376/", "link-local"),  # octal
    ("http://[fe80::1]/", "link-local"),
    ("http://[fe80::a9fe:a9fe]/", "link-local"),
    ("http://[fd00:ec2::254]/", "unique local"),  # IMDS over IPv6
    ("http://[fc00::1]/", "unique local"),
    ("http://[fdff:ffff::1]/", "unique local"),
    # shared, benchmarking, multicast, unspecified, reserved
    ("http://100.64.0.1/", "carrier-grade NAT"),
    ("http://100.127.255.254/", "carrier-grade NAT"),
    ("http://198.18.0.1/", "benchmarking"),
    ("http://198.19.255.254/", "benchmarking"),
    ("http://224.0.0.1/", "multicast"),
    ("http://239.255.255.250/", "multicast"),
    ("http://[ff02::1]/", "multicast"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://0/", "unspecified"),
    ("http://[::]/", "unspecified"),
    ("http://255.255.255.255/", "broadcast"),
    ("http://240.0.0.1/", "reserved"),
    ("http://192.0.2.10/", "documentation"),
    ("http://[2001:db8::1]/", "documentation"),
    # schemes, credentials, parser confusion
    ("ftp://example.com/file", "scheme"),
    ("file:///etc/passwd", "scheme"),
    ("gopher://example.com:70/", "scheme"),
    ("javascript:alert(1)", "scheme"),
    ("//example.com/no-scheme", "scheme"),
    ("http://evil@127.0.0.1/", "credentials"),
    ("http://user:pass@example.com/", "credentials"),
    ("http://127.0.0.1@evil.example.com/", "credentials"),
    ("http://127.0.0.1#@evil.example.com/", "loopback"),  # the fragment hides nothing
    ("http://evil.example.com\\@127.0.0.1/", "backslash"),
    ("http://127.0.0.1 /", "whitespace"),
    ("http://exa\tmple.com/", "whitespace"),
    ("http://example.com\r\nX-Injected: 1/", "control"),
    ("http:///path-only", "no host"),
    ("http://example.com:0/", "port 0"),
    ("http://example.com:99999/", "invalid port"),
    ("http://[fe80::1%25eth0]/", "zone"),
    ("http://256.0.0.1/", "numeric"),  # numeric last label that is not an address
    ("http://08.0.0.1/", "numeric"),  # not octal, not decimal
    ("http://1.2.3.4.5/", "numeric"),
    ("http://example.123/", "numeric"),
    ("http://exa_mple..com/", "invalid host"),
    ("http://" + "a" * 64 + ".com/", "invalid host"),
    ("http://example.com/" + "x" * 2100, "longer than"),
]

ALLOWED_LITERALS: list[tuple[str, str]] = [
    (f"http://{PUBLIC_V4}/", PUBLIC_V4),
    (f"https://{PUBLIC_V4}:8443/hook?x=1", PUBLIC_V4),
    ("http://1572395042/", PUBLIC_V4),  # decimal spelling of a public address is fine
    ("http://8.8.8.8/", "8.8.8.8"),
    ("http://100.128.0.1/", "100.128.0.1"),  # just past CGNAT
    ("http://172.32.0.1/", "172.32.0.1"),  # just past 172.16/12
    ("http://198.20.0.1/", "198.20.0.1"),  # just past benchmarking
    (f"http://[{PUBLIC_V6}]/", PUBLIC_V6),
    ("http://[64:ff9b::808:808]/", "64:ff9b::808:808"),  # NAT64 of a public address
]


def test_the_table_is_large_enough() -> None:
    assert len(BLOCKED) >= 40


@pytest.mark.parametrize(("url", "reason"), BLOCKED)
def test_forbidden_urls_are_refused_without_dns(url: str, reason: str) -> None:
    with pytest.raises(BlockedTargetError) as caught:
        guard_url(url, resolve=False)
    assert reason.lower() in caught.value.reason.lower()
    assert caught.value.url == url


@pytest.mark.parametrize(("url", "reason"), BLOCKED)
def test_forbidden_urls_are_refused_with_dns_too(url: str, reason: str) -> None:
    # Literal addresses never reach the resolver; a name that does is answered publicly,
    # so a refusal here comes from the URL itself.
    with pytest.raises(BlockedTargetError):
        guard_url(url, resolver=_answers(PUBLIC_V4))


@pytest.mark.parametrize(("url", "address"), ALLOWED_LITERALS)
def test_public_literals_are_allowed_and_returned(url: str, address: str) -> None:
    assert guard_url(url, resolve=False) == (ipaddress.ip_address(address),)


def test_a_host_name_without_dns_passes_syntax_checks_only() -> None:
    assert guard_url("https://Hooks.Example.com./in", resolve=False) == ()


def test_an_internationalised_name_is_checked_in_its_ascii_form() -> None:
    seen: list[str] = []
    guard_url("https://bücher.example/hook", resolver=_answers(PUBLIC_V4, seen=seen))
    assert seen == ["xn--bcher-kva.example"]


# --------------------------------------------------------------------------- allow-list


def test_the_allow_list_opens_exactly_its_blocks() -> None:
    allow = ("127.0.0.0/8", "10.1.2.0/24")
    assert guard_url("http://127.0.0.1:9000/", allow, resolve=False) == (ipaddress.ip_address("127.0.0.1"),)
    assert guard_url("http://0x7f.1/", allow, resolve=False)  # every spelling of it
    assert guard_url("http://10.1.2.3/", allow, resolve=False)
    with pytest.raises(BlockedTargetError, match="private"):
        guard_url("http://10.1.3.1/", allow, resolve=False)
    with pytest.raises(BlockedTargetError, match="loopback"):
        guard_url("http://[::1]/", allow, resolve=False)  # an IPv4 block does not open IPv6
    with pytest.raises(BlockedTargetError, match="IPv4-mapped"):
        guard_url("http://[::ffff:127.0.0.1]/", allow, resolve=False)


def test_the_allow_list_does_not_open_other_schemes() -> None:
    with pytest.raises(BlockedTargetError, match="scheme"):
        guard_url("ftp://127.0.0.1/", ("127.0.0.0/8",), resolve=False)


@pytest.mark.parametrize("cidr", ["127.0.0.1/8", "not-a-cidr", "10.0.0.0/33"])
def test_a_bad_allow_list_entry_is_an_error(cidr: str) -> None:
    with pytest.raises(ValueError, match="allow-list"):
        parse_allow_cidrs([cidr])


# --------------------------------------------------------------------------- resolution


def _answers(*addresses: str, seen: list[str] | None = None) -> Any:
    """A getaddrinfo stand-in answering ``addresses`` for any name."""

    def resolve(host: str, port: Any, family: int = 0, type: int = 0) -> list[tuple[Any, ...]]:
        if seen is not None:
            seen.append(host)
        out: list[tuple[Any, ...]] = []
        for address in addresses:
            if ":" in address:
                out.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0)))
            else:
                out.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)))
        return out

    return resolve


def test_every_resolved_address_is_checked() -> None:
    with pytest.raises(BlockedTargetError) as caught:
        guard_url("https://hooks.example.com/", resolver=_answers(PUBLIC_V4, "10.0.0.5"))
    assert "hooks.example.com" in caught.value.reason
    assert "private address (10.0.0.0/8)" in caught.value.reason
    # the address itself is for the operators' log, not the job's tenant (QA23: internal DNS)
    assert "10.0.0.5" not in caught.value.reason


@pytest.mark.parametrize(
    "url",
    ["https://hooks.example.com/run?api_key=s3cr3t-token", "http://localhost:8080/run?api_key=s3cr3t-token"],
)
def test_the_operators_log_of_a_blocked_name_leaves_out_the_query(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """QA24: the log line named the whole URL, its query string (which carries the tokens the
    records leave out) included, into the workers' and the API's logs."""
    with pytest.raises(BlockedTargetError):
        guard_url(url, resolver=_answers("10.0.0.5"))
    assert "blocked target" in caplog.text and "/run" in caplog.text  # still says what and where
    assert "s3cr3t-token" not in caplog.text and "api_key" not in caplog.text


def test_resolved_addresses_come_back_in_order_without_duplicates() -> None:
    checked = guard_url("https://hooks.example.com/", resolver=_answers(PUBLIC_V4, PUBLIC_V6, PUBLIC_V4))
    assert checked == (ipaddress.ip_address(PUBLIC_V4), ipaddress.ip_address(PUBLIC_V6))


@pytest.mark.parametrize("answer", ["127.0.0.1", "169.254.169.254", "::1", "::ffff:10.0.0.1", "fd00::1"])
def test_a_name_resolving_to_a_forbidden_address_is_refused(answer: str) -> None:
    with pytest.raises(BlockedTargetError):
        guard_url("https://innocent.example.com/", resolver=_answers(answer))


def test_a_name_that_does_not_resolve_is_an_unresolved_error() -> None:
    def failing(*_: Any) -> Sequence[tuple[Any, ...]]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with pytest.raises(UnresolvedTargetError, match="did not resolve"):
        guard_url("https://nowhere.example.com/", resolver=failing)


def test_localhost_never_reaches_the_resolver() -> None:
    seen: list[str] = []
    with pytest.raises(BlockedTargetError, match="loopback"):
        guard_url("http://localhost:8080/", resolver=_answers(PUBLIC_V4, seen=seen))
    assert seen == []


# --------------------------------------------------------------------------- every spelling


_FORBIDDEN_V4 = [
    ipaddress.IPv4Network(n)
    for n in (
        "127.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "169.254.0.0/16",
        "100.64.0.0/10",
    )
]


def _spell(number: int, parts: int, radix: list[str]) -> str:
    """Write a 32-bit address as ``parts`` numbers (the last one fills the rest), each in a radix."""
    sizes = [1] * (parts - 1) + [5 - parts]
    fields: list[int] = []
    shift = 32
    for size in sizes:
        shift -= 8 * size
        fields.append((number >> shift) & ((1 << (8 * size)) - 1))
    out = []
    for value, base in zip(fields, radix, strict=False):
        if base == "hex":
            out.append(hex(value))
        elif base == "oct":
            out.append("0" + format(value, "o"))
        else:
            out.append(str(value))
    return ".".join(out)


_spellings = st.tuples(
    st.integers(min_value=1, max_value=4),
    st.lists(st.sampled_from(["dec", "oct", "hex"]), min_size=4, max_size=4),
)


@given(
    network=st.sampled_from(_FORBIDDEN_V4),
    offset=st.integers(min_value=0, max_value=2**20),
    spelling=_spellings,
)
def test_any_spelling_of_a_forbidden_address_is_refused(
    network: ipaddress.IPv4Network, offset: int, spelling: tuple[int, list[str]]
) -> None:
    address = network[offset % network.num_addresses]
    text = _spell(int(address), *spelling)
    with pytest.raises(BlockedTargetError):
        guard_url(f"http://{text}/", resolve=False)


@given(number=st.integers(min_value=0, max_value=2**32 - 1), spelling=_spellings)
def test_literals_are_read_as_the_system_resolver_reads_them(
    number: int, spelling: tuple[int, list[str]]
) -> None:
    # inet_aton is the reading getaddrinfo gives numeric hosts: ours must agree with it,
    # or a URL could be judged as one address and connected to another.
    text = _spell(number, *spelling)
    system = ipaddress.IPv4Address(struct.unpack("!I", socket.inet_aton(text))[0])
    assert system == ipaddress.IPv4Address(number)
    try:
        checked = guard_url(f"http://{text}/", resolve=False)
    except BlockedTargetError as exc:
        assert address_block_reason(system) is not None, exc.reason
    else:
        assert checked == (system,)


# --------------------------------------------------------------------------- DNS rebinding


class _FakeResponse:
    status = 204
    reason = "No Content"
    length = 0  # (http.client's: body bytes left to read)

    def getheaders(self) -> list[tuple[str, str]]:
        return []

    def read1(self, amount: int = -1) -> bytes:
        return b""


class _FakeConnection:
    """Stands in for the pinned connection: records where it was asked to go."""

    def __init__(
        self, opened: list[tuple[str, str, int, str]], scheme: str, host: str, port: int, address: Any
    ):
        self.sock = None
        opened.append((scheme, host, port, str(address)))

    def connect(self) -> None:
        pass

    def request(self, method: str, target: str, body: bytes | None = None, headers: Any = None) -> None:
        pass

    def getresponse(self) -> _FakeResponse:
        return _FakeResponse()

    def close(self) -> None:
        pass


def _ctx() -> SlotContext:
    return SlotContext(
        job_id="job-1",
        tenant="default",
        slot="2026-11-30T10:00:00Z",
        scheduled_at=datetime(2026, 11, 30, 10, tzinfo=UTC),
        attempt=1,
        timeout_s=5,
        signing_secrets=("whsec_" + "A" * 43 + "=",),
    )


def test_rebinding_resolver_cannot_steer_the_connection_to_a_private_address() -> None:
    # Given a resolver that answers a public address first and loopback on every later lookup
    lookups: list[str] = []

    def rebinding(host: str, port: Any, family: int = 0, type: int = 0) -> list[tuple[Any, ...]]:
        lookups.append(host)
        address = PUBLIC_V4 if len(lookups) == 1 else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    opened: list[tuple[str, str, int, str]] = []
    adapter = HttpTargetAdapter(
        resolver=rebinding,
        connection_factory=lambda scheme, host, port, address, timeout: _FakeConnection(  # type: ignore[arg-type,return-value]
            opened, scheme, host, port, address
        ),
    )
    # When the webhook is called
    result = adapter.invoke(HttpTarget(url="https://hooks.example.com/in"), {"a": 1}, _ctx())
    # Then the name was looked up once and the socket went to the checked public address,
    # with the original host name for Host and TLS
    assert result.outcome is Outcome.SUCCEEDED, result.summary
    assert lookups == ["hooks.example.com"]
    assert opened == [("https", "hooks.example.com", 443, PUBLIC_V4)]


def test_a_mixed_answer_never_opens_a_connection() -> None:
    opened: list[tuple[str, str, int, str]] = []
    adapter = HttpTargetAdapter(
        resolver=_answers(PUBLIC_V4, "127.0.0.1"),
        connection_factory=lambda scheme, host, port, address, timeout: _FakeConnection(  # type: ignore[arg-type,return-value]
            opened, scheme, host, port, address
        ),
    )
    result = adapter.invoke(HttpTarget(url="https://hooks.example.com/in"), {"a": 1}, _ctx())
    assert result.outcome is Outcome.PERMANENT
    assert "blocked" in result.summary and "loopback address (127.0.0.0/8)" in result.summary
    assert opened == []


def test_a_dns_failure_is_retryable_not_blocked() -> None:
    def failing(*_: Any) -> Sequence[tuple[Any, ...]]:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    adapter = HttpTargetAdapter(resolver=failing)
    result = adapter.invoke(HttpTarget(url="https://hooks.example.com/in"), None, _ctx())
    assert result.outcome is Outcome.RETRYABLE
    assert "did not resolve" in result.summary
