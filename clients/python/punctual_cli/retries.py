"""When :class:`~punctual_cli.client.PunctualClient` sends a request again (standard library only).

The API answers 429 (the tenant's request quota) and 503 (storage shedding load, another request
on the same items) having done nothing, with ``Retry-After`` saying when to come back
(docs/api.md): such a request is sent again, whatever its method. A request that got no answer
is sent again only when doing it twice is doing it once: a ``GET``, ``HEAD``, or a ``POST`` with
an ``Idempotency-Key``; a ``PUT`` or ``DELETE`` too when it never reached the API (the connection
failed), but not once sent (no answer in time, a connection dropped after): it may have been
done, and done again it is a 412 or 404 that says otherwise. API Gateway's 502 and 504 (the
API's function failed or timed out, maybe after it acted) are such a request sent and not
answered, and so is its bare 500 (Lambda's service exceptions: the function may have run). A create
or a run-now is sent with an ``Idempotency-Key`` the client makes (:func:`once_key`) when the caller
gave none, so every retry of one answers the job or slot the first made. No other error is retried (a 4xx is
the request's own fault), except a 409 that says the first request with the same
``Idempotency-Key`` is still running: the keyed request is sent again after its ``Retry-After``.

The wait is ``Retry-After`` (delay seconds, or an HTTP date read against the answer's ``Date``,
the server's clock), else capped exponential backoff with full jitter; never past the policy's
total deadline: a wait that would end after it is not made, and the last error is raised.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

RETRIED_STATUSES = frozenset({429, 503})
# API Gateway's own answers when the API's function failed (502: it crashed or answered malformed)
# or gave no answer in time (504): the request may have been done, so these are an answer lost,
# sent again only when that can be repeated (as a timeout is)
LOST_ANSWER_STATUSES = frozenset({502, 504})
# API Gateway's own 500 (its body this message alone, no problem details): Lambda refused to invoke
# the API's function (throttled: its reserved concurrency, apiReservedConcurrency, full), or a
# Lambda service exception, after which the function may have run (QA30 review: a create sent again
# on it made two jobs): an answer lost, as a 502 or 504 is.
GATEWAY_REJECTED = {"message": "Internal server error"}
# A 409 whose problem is this: the first request with the same Idempotency-Key is still running;
# the same request again, once it ended, answers its reply (docs/api.md)
IN_PROGRESS_TYPE = "request-in-progress"
_SAFE_METHODS = frozenset({"GET", "HEAD"})
_UNSENT_METHODS = _SAFE_METHODS | {"PUT", "DELETE"}  # idempotent, but not to be told so twice


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a request is tried.

    Parameters
    ----------
    max_attempts
        Tries of one request in all (1: never sent again).
    deadline_s
        No wait ends later than this many seconds after the first try began.
    base_s, cap_s
        Backoff without ``Retry-After``: a random wait up to ``min(cap_s, base_s * 2**n)``
        before the n-th retry (n from 0).
    sleep, clock, rand
        Waiting, a monotonic clock (seconds) and a random number in [0, 1): tests pass their own.
    """

    max_attempts: int = 4
    deadline_s: float = 60.0
    base_s: float = 0.5
    cap_s: float = 20.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    rand: Callable[[], float] = field(default=random.random, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if min(self.deadline_s, self.base_s, self.cap_s) < 0:
            raise ValueError("deadline_s, base_s and cap_s must not be negative")

    def backoff(self, retry: int) -> float:
        """The wait before retry number ``retry`` (0 for the first) when none was asked for."""
        return self.rand() * min(self.cap_s, self.base_s * 2.0 ** min(retry, 64))


def in_progress(status: int, problem: Mapping[str, object], headers: Mapping[str, str]) -> bool:
    """Whether an answer is the API's "a request with this Idempotency-Key is still being
    processed" (409, Retry-After): the keyed request is sent again after it, as a 429 is."""
    keyed = _keyed(headers)
    kind = str(problem.get("type", ""))
    return keyed and status == 409 and kind.endswith(IN_PROGRESS_TYPE)  # urn:punctual:problem:...


def gateway_500(status: int, problem: Mapping[str, object]) -> bool:
    """Whether an answer is API Gateway's own 500 (Lambda throttled the API's function, or failed
    around it): the request may have been done, as after a 502."""
    return status == 500 and dict(problem) == GATEWAY_REJECTED


def once_key(given: str | None) -> str:
    """The ``Idempotency-Key`` of a create or run-now: ``given``, else one made for this call, so a
    retry (after a lost answer) answers what the first try did instead of doing it again."""
    return given or f"punctual-client-{uuid.uuid4()}"


def repeatable(method: str, headers: Mapping[str, str], sent: bool) -> bool:
    """Whether a request that got no answer may be sent again; ``sent``: it reached the API."""
    keyed = _keyed(headers)
    return method.upper() in (_SAFE_METHODS if sent else _UNSENT_METHODS) or (
        method.upper() == "POST" and keyed
    )


def _keyed(headers: Mapping[str, str]) -> bool:
    return any(name.lower() == "idempotency-key" and value for name, value in headers.items())


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The seconds an answer's ``Retry-After`` asks to wait (None: absent or unreadable).

    An HTTP date is counted from the answer's ``Date`` (the server's clock: the client's may be
    off), else from this machine's clock; a date past is no wait.
    """
    found = {name.lower(): value for name, value in headers.items()}
    value = (found.get("retry-after") or "").strip()
    if value.isascii() and value.isdigit():
        return float(value)  # (any number of digits: a huge one is inf, past every deadline)
    when = _http_date(value)
    if when is None:
        return None
    now = _http_date(found.get("date") or "") or datetime.now(UTC)
    return max((when - now).total_seconds(), 0.0)


def _http_date(text: str) -> datetime | None:
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
