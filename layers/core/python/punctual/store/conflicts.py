"""Transaction conflicts, told apart from failed conditions and retried with backoff: the one place.

DynamoDB runs transactions with optimistic concurrency. A ``TransactWriteItems`` that touches an
item another transaction holds is cancelled (``TransactionCanceledException`` whose
``CancellationReasons`` say ``TransactionConflict`` for that item), and a plain ``PutItem``,
``UpdateItem`` or ``DeleteItem`` on such an item is refused (``TransactionConflictException``).
Neither is a failed condition, nothing was written, and botocore retries neither (they are not
in its throttling or transient lists). See "Transaction conflict handling in DynamoDB" in the
DynamoDB developer guide (docs.aws.amazon.com/amazondynamodb/latest/developerguide/
transaction-apis.html#transaction-conflict-handling).

Both stores run each write through :func:`retry_conflicts`: the DynamoDB store through its
client (:mod:`punctual.store.dynamo.conflicts`), the in-memory store when it simulates conflicts
(:mod:`punctual.store.memory.fidelity`). A conflict is retried with full-jitter exponential
backoff; one that outlives :data:`CONFLICT_RETRY` raises :class:`TransactionConflictError`.
A cancellation that names a failed condition is the caller's to read (a version check lost, an
item already there), never retried here.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from punctual.store.base import TransactionConflictError

log = logging.getLogger("punctual.store")

T = TypeVar("T")


@dataclass(frozen=True)
class ConflictRetry:
    """How often and how patiently a conflicting write is tried again.

    ``attempts`` tries in all; before try *n* + 1 a full-jitter wait of up to
    ``min(cap_s, base_s * 2**(n - 1))``. The defaults wait at most about 2.5 s in all: a
    transaction holds its items for milliseconds, so a conflict that lasts longer is a hot
    item, which the caller should see (an API answers 503) rather than wait out.
    """

    attempts: int = 8
    base_s: float = 0.02
    cap_s: float = 1.0

    def delay_s(self, retry: int, rng: random.Random | None = None) -> float:
        """The wait before retry number ``retry`` (1 for the first)."""
        ceiling = min(self.cap_s, self.base_s * 2 ** (retry - 1))
        return (rng or random).uniform(0.0, ceiling)


CONFLICT_RETRY = ConflictRetry()


def retry_conflicts(
    call: Callable[[], T],
    is_conflict: Callable[[Exception], bool],
    what: str,
    policy: ConflictRetry = CONFLICT_RETRY,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    """``call()``, tried again after each exception ``is_conflict`` recognises.

    Raises
    ------
    TransactionConflictError
        The last of ``policy.attempts`` tries met a conflict too (the cause is chained).
    Exception
        Anything ``call`` raised that is not a conflict, unchanged.
    """
    for attempt in range(1, policy.attempts + 1):
        try:
            return call()
        except Exception as exc:
            if not is_conflict(exc):
                raise
            if attempt == policy.attempts:
                log.warning("%s met a transaction conflict %d times; giving up", what, attempt)
                raise TransactionConflictError(
                    f"{what} kept meeting another transaction on the same item"
                    f" ({attempt} tries); nothing was written, try again shortly"
                ) from exc
            log.info("%s met a transaction conflict (try %d); retrying", what, attempt)
            sleep(policy.delay_s(attempt, rng))
    raise AssertionError("unreachable: the loop returns or raises")
