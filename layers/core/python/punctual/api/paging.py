"""Opaque ``next_token`` values, bound to the tenant, the route and the filters that made them.

A token is ``base64url(JSON {"c": store cursor, "s": scope digest}) . base64url(HMAC)``.
The scope digest covers the tenant, the route (``jobs`` or ``executions:<job id>``) and
every filter, so a token replayed by another tenant, on another job's history or with
other filters is refused (400) instead of silently starting somewhere else. The HMAC,
keyed by ``PUNCTUAL_TOKEN_KEY``, makes a forged or altered token a 400 too. Neither part
would let a caller read another tenant's data even without it: the store always queries
the caller's own partition; the binding is what makes a mistake visible.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from punctual.api.problems import ApiProblem

MAX_TOKEN_CHARS = 2048
# A page's items as Lambda's response carries them (JSON escaped twice) stop at this, under its 6 MB
REPLY_BUDGET_BYTES = 5 * 1024 * 1024


class _Listed(Protocol):
    def model_dump_json(self) -> str: ...


Listed = TypeVar("Listed", bound=_Listed)


def carried_bytes(text: str) -> int:
    """The bytes ``text`` (a reply's JSON) takes in Lambda's response, which holds it as a JSON
    string again: a quote is 4 bytes, a non-ASCII character 7 (``\\uXXXX``, escaped twice)."""
    return len(json.dumps(text))


def within_reply(
    items: Sequence[Listed], cursor: str | None, key: Callable[[Listed], str]
) -> tuple[list[Listed], str | None]:
    """``items`` (in the store's order) up to what a reply carries under Lambda's 6 MB, and the
    cursor to go on from: the last one kept's ``key`` (a job's id, a record's slot) when the page is
    cut, else ``cursor`` (a page may be shorter than its limit, docs/api.md). At least one item is
    kept (a job is under 1 MB, a record far less). QA: 30 jobs of 250 KB payloads made a 7.5 MB
    page, API Gateway's 502 for every listing; QA32: 100 records of 20 attempts, each failed with
    500 characters of Japanese, an 8 MB page of history (the CLI's runs list --all reads 100)."""
    kept: list[Listed] = []
    carried = 0
    for item in items:
        carried += carried_bytes(item.model_dump_json())
        if kept and carried > REPLY_BUDGET_BYTES:
            return kept, key(kept[-1])
        kept.append(item)
    return kept, cursor


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _invalid(detail: str) -> ApiProblem:
    return ApiProblem(400, "invalid-next-token", "Invalid next_token", detail, [("query.next_token", detail)])


class TokenCodec:
    """Wraps store cursors into tokens and back.

    Parameters
    ----------
    key
        The HMAC key (any length; at least 32 random bytes in a deployment).
    """

    def __init__(self, key: bytes) -> None:
        if not key:
            raise ValueError("a paging token key must not be empty")
        self._key = key

    @staticmethod
    def scope(tenant: str, route: str, filters: Mapping[str, object]) -> str:
        """A digest of what a token is valid for."""
        raw = json.dumps([tenant, route, sorted((k, str(v)) for k, v in filters.items() if v is not None)])
        return hashlib.sha256(raw.encode()).hexdigest()[:32]

    def _mac(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode("ascii"), hashlib.sha256).digest())

    def encode(self, cursor: str | None, scope: str) -> str | None:
        """The token for the next page, or None when there is none."""
        if cursor is None:
            return None
        payload = _b64(json.dumps({"c": cursor, "s": scope}, separators=(",", ":")).encode())
        return f"{payload}.{self._mac(payload)}"

    def decode(self, token: str | None, scope: str) -> str | None:
        """The store cursor inside ``token`` (None for no token).

        Raises
        ------
        ApiProblem
            400 when the token is malformed, altered, or issued for another scope.
        """
        if token is None or token == "":
            return None
        # Tokens this API issues are ASCII (base64url and one dot). Anything else is refused here,
        # before the comparison: hmac.compare_digest raises TypeError on a non-ASCII str.
        if not isinstance(token, str) or not token.isascii():
            raise _invalid("next_token is not a token this API issued")
        if len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
            raise _invalid("next_token is not a token this API issued")
        payload, mac = token.split(".")
        if not hmac.compare_digest(self._mac(payload).encode("ascii"), mac.encode("ascii")):
            raise _invalid("next_token is not a token this API issued (or it was altered)")
        try:
            data = json.loads(_unb64(payload))
        except (binascii.Error, ValueError):
            raise _invalid("next_token is not a token this API issued") from None
        if not isinstance(data, dict) or not isinstance(data.get("c"), str):
            raise _invalid("next_token is not a token this API issued")
        if data.get("s") != scope:
            raise _invalid(
                "next_token belongs to another query; pass the same filters (and caller) as the "
                "request that returned it"
            )
        cursor: str = data["c"]
        return cursor
