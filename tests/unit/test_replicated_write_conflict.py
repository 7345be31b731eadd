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


class ConflictsOnBatchWrites:
    """A moto client whose first ``batch_write_item`` calls meet another Region's write."""

    def __init__(self, client: Any, conflicts: int) -> None:
        self._client, self.conflicts, self.batch_writes = client, conflicts, 0

    def batch_write_item(self, **request: Any) -> Any:
        self.batch_writes += 1
        if self.conflicts:
            self.conflicts -= 1
            raise ClientError(
                {"Error": {"Code": "ReplicatedWriteConflictException", "Message": "x"}}, "BatchWriteItem"
            )
        return self._client.batch_write_item(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_next_timers_meeting_another_regions_write_of_them_are_written(dynamo_client: Any) -> None:
    """QA22: BatchWriteItem answers ReplicatedWriteConflictException too (its error list in the
    DynamoDB API model), and the poller writes each next timer with it as every other Region's
    poller writes the same timer at the same moment. It was not retried: the chunk's release
    failed after its sends, its timers were released again at the next pass (sent twice) and the
    next timers written a pass late."""
    from datetime import UTC, datetime, timedelta

    from punctual.store.dynamo import DynamoStore
    from punctual.timing.timers import Lane, TimerKind, TimerLayout, slot_key

    layout = TimerLayout(shard_count=1, near_shard_count=1, far_threshold_s=180)
    now = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    due = now + timedelta(minutes=10)
    timer = layout.make(
        now=now, due=due, job_id="j", tenant="default", slot=slot_key(due), attempt=1, kind=TimerKind.FIRE,
        job_version=1,
    )  # fmt: skip
    client = ConflictsOnBatchWrites(dynamo_client, conflicts=2)
    store = DynamoStore(
        ConflictRetryingClient(client, ConflictRetry(attempts=4), sleep=lambda _: None), "punctual-test"
    )
    store.put_timers([timer])
    assert client.batch_writes == 3
    assert store.query_timers(Lane.FAR, due.replace(second=0), timer.shard) == [timer]
