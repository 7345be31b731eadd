"""A write that meets ``ReplicatedWriteConflictException`` (another Region of an MRSC global table
writing the same item at that instant) is retried, and then its own condition decides.

This is the claim of every slot in a multi-Region deployment: N Regions' workers claim the same
execution record within milliseconds (docs/multi-region.md, F10 and section 5).
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from punctual.store.base import TransactionConflictError
from punctual.store.conflicts import ConflictRetry
from punctual.store.dynamo.base import DynamoBase
from punctual.store.dynamo.conflicts import ConflictRetryingClient, is_conflict


def _error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, "PutItem")


class ScriptedClient:
    """Answers each put_item with the next scripted error, or success when none is left."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.calls: list[dict[str, Any]] = []

    def put_item(self, **request: Any) -> dict[str, Any]:
        self.calls.append(request)
        if self.answers:
            raise _error(self.answers.pop(0))
        return {}


def _store(client: ScriptedClient, waits: list[float]) -> DynamoBase:
    retrying = ConflictRetryingClient(client, ConflictRetry(attempts=4), sleep=waits.append)
    return DynamoBase(retrying, "punctual")


def test_replicated_write_conflict_is_a_conflict_to_retry() -> None:
    assert is_conflict(_error("ReplicatedWriteConflictException"))
    assert not is_conflict(_error("ConditionalCheckFailedException"))
    assert not is_conflict(_error("ValidationException"))


def test_claim_meeting_another_regions_write_is_retried_then_lost_by_its_condition() -> None:
    # Given another Region writing the execution record at the instant of this claim, and
    # having won it by the time the claim is tried again
    client = ScriptedClient("ReplicatedWriteConflictException", "ConditionalCheckFailedException")
    waits: list[float] = []

    # When the claim (a conditional put) is made
    written = _store(client, waits)._write_if("put_item", Item={"pk": {"S": "exec"}})

    # Then it was tried again after a wait, and its condition said no: the duplicate is dropped
    assert written is False
    assert len(client.calls) == 2 and len(waits) == 1


def test_claim_meeting_a_conflict_that_clears_is_written() -> None:
    client = ScriptedClient("ReplicatedWriteConflictException", "ReplicatedWriteConflictException")
    waits: list[float] = []
    assert _store(client, waits)._write_if("put_item", Item={"pk": {"S": "exec"}}) is True
    assert len(client.calls) == 3


def test_a_conflict_that_outlives_the_retries_is_raised_as_one() -> None:
    client = ScriptedClient(*["ReplicatedWriteConflictException"] * 4)
    with pytest.raises(TransactionConflictError):
        _store(client, [])._write_if("put_item", Item={"pk": {"S": "exec"}})
    assert len(client.calls) == 4
