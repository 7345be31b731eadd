"""Whether a storage request that failed may still have been applied.

A request the SDK could not send (no connection: ``botocore``'s ``ConnectionError``) or that
DynamoDB refused (a failed condition, a throttle, a cancelled transaction) changed nothing. Two
failures say nothing of the outcome: one that got no answer (a read timeout, a connection closed
before the answer: ``HTTPClientError``) and DynamoDB's own ``InternalServerError``, for a write.
What was counted for such a write (a job's peaks) is kept: too high is what a recount repairs,
too low lets a tenant past its quota (QA29).
"""

from __future__ import annotations

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as SdkConnectionError

STORAGE_FAILED_CODES = frozenset({"InternalServerError"})
READ_OPERATIONS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"})


def storage_failed(exc: ClientError) -> bool:
    """Whether ``exc`` is DynamoDB's own failure (HTTP 500), not a refusal."""
    return str(exc.response.get("Error", {}).get("Code", "")) in STORAGE_FAILED_CODES


def may_have_landed(exc: BaseException) -> bool:
    """Whether the write that raised ``exc`` may have been applied (see the module notes)."""
    if isinstance(exc, HTTPClientError) and not isinstance(exc, SdkConnectionError):
        return True
    return isinstance(exc, ClientError) and storage_failed(exc) and exc.operation_name not in READ_OPERATIONS
