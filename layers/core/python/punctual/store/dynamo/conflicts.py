"""The DynamoDB store's client: every write retried on a transaction conflict (and only then).

:class:`ConflictRetryingClient` wraps the boto3 client the store is given. Reads pass through;
``PutItem``, ``UpdateItem``, ``DeleteItem`` and ``TransactWriteItems`` go through
:func:`punctual.store.conflicts.retry_conflicts`, which tries them again while DynamoDB answers
a transaction conflict (:func:`is_conflict`) and raises
:class:`~punctual.store.base.TransactionConflictError` when the conflict outlives the retries.
Everything else (a failed condition above all) reaches the mixin that made the request, as before.

``BatchWriteItem`` is wrapped too, for ``ReplicatedWriteConflictException`` (its error list in
the DynamoDB API model names it): on a multi-Region table every Region's poller writes the same
next timers at the same moment. The store batch-writes only timers, which are immutable (a
repeat writes the same bytes), so trying a batch again is safe; its unprocessed items the store
already retries.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from punctual.store.conflicts import CONFLICT_RETRY, ConflictRetry, retry_conflicts

WRITES = frozenset({"put_item", "update_item", "delete_item", "transact_write_items", "batch_write_item"})
CONFLICT_REASON = "TransactionConflict"
CONDITION_REASON = "ConditionalCheckFailed"
# Refused writes that wrote nothing and that botocore does not retry: another transaction holds the
# item, or (a multi-Region strongly consistent table) another Region is writing it this instant
# (docs/multi-region.md, F10). After the retry the write's own condition decides.
RETRIED_CODES = frozenset({"TransactionConflictException", "ReplicatedWriteConflictException"})


def cancellation_reasons(exc: ClientError) -> list[str]:
    """The ``Code`` of each item of a cancelled transaction, in request order (``None``: no error)."""
    return [str(reason.get("Code")) for reason in exc.response.get("CancellationReasons", [])]


def is_conflict(exc: Exception) -> bool:
    """Whether ``exc`` is DynamoDB refusing a write because another transaction holds an item, or
    because another Region of an MRSC global table is writing it (``ReplicatedWriteConflictException``).

    A cancelled transaction counts only when a reason is ``TransactionConflict`` and none is a
    failed condition: a condition that failed is an answer for the caller, not a race to retry.
    """
    if not isinstance(exc, ClientError):
        return False
    code = exc.response.get("Error", {}).get("Code")
    if code in RETRIED_CODES:
        return True
    if code != "TransactionCanceledException":
        return False
    reasons = cancellation_reasons(exc)
    return CONFLICT_REASON in reasons and CONDITION_REASON not in reasons


class ConflictRetryingClient:
    """A boto3 DynamoDB client whose writes are retried on transaction conflicts.

    Parameters
    ----------
    client
        The boto3 client (attribute access other than the writes passes through to it).
    policy, sleep
        The retry policy and how to wait (tests pass a recorder).
    """

    def __init__(
        self,
        client: Any,
        policy: ConflictRetry = CONFLICT_RETRY,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self._client = client
        self._policy = policy
        self._sleep = sleep

    @property
    def wrapped(self) -> Any:
        """The boto3 client underneath."""
        return self._client

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name not in WRITES:
            return attr

        # A transaction carries a ClientRequestToken of its own, new for each try after a conflict:
        # the SDK's own retries of one try (a connection reset, a timeout whose write landed) send
        # the same token, and DynamoDB answers such a repeat within 10 minutes as the write it made,
        # not as a failed condition (QA27: a create whose answer was lost answered 409 "already
        # exists", a replace a version conflict, though each was applied).
        tokened = _with_token if name == "transact_write_items" else _as_is

        def write(**request: Any) -> Any:
            kwargs: dict[str, Any] = {"policy": self._policy}
            if self._sleep is not None:
                kwargs["sleep"] = self._sleep
            what = _what(name, request)
            return retry_conflicts(lambda: attr(**tokened(request)), is_conflict, what, **kwargs)

        return write


def _with_token(request: dict[str, Any]) -> dict[str, Any]:
    return {**request, "ClientRequestToken": uuid.uuid4().hex}


def _as_is(request: dict[str, Any]) -> dict[str, Any]:
    return request


def _what(operation: str, request: dict[str, Any]) -> str:
    """A short name of the write for logs and the error: the operation and its first key."""
    key = request.get("Key") or request.get("Item")
    if key is None and request.get("TransactItems"):
        first = request["TransactItems"][0]
        body: dict[str, Any] = next(iter(first.values()), {})
        key = body.get("Key") or body.get("Item")
    if isinstance(key, dict) and "pk" in key:
        return f"{operation} {key['pk'].get('S', '')}/{key.get('sk', {}).get('S', '')}"
    return operation
