"""The execution record's item: its document leaves out defaults and what the item holds already,
and reads back the same record."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from punctual.models import AttemptRecord, Execution, ExecutionStatus
from punctual.store.dynamo import DynamoStore
from punctual.store.dynamo.execution_docs import _at_slot_instant
from punctual.timing.timers import slot_key

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
_texts = st.text(min_size=0, max_size=12)
_instants = st.none() | st.integers(min_value=-86_400, max_value=86_400 * 40).map(
    lambda s: T0 + timedelta(seconds=s, microseconds=(s % 3 == 0) * (s % 997) * 1000)
)
_statuses = st.sampled_from(list(ExecutionStatus))
_attempts = st.builds(
    AttemptRecord,
    attempt=st.integers(min_value=1, max_value=20),
    status=_statuses,
    started_at=_instants,
    finished_at=_instants,
    error=st.none() | _texts,
    owner=st.none() | _texts,
)
_records = st.builds(
    Execution,
    job_id=st.text(min_size=1, max_size=12),
    tenant=st.sampled_from(["default", "acme", ""]),
    slot=st.sampled_from(["2026-11-30T10:00:00Z", "2026-11-30T10:00:00Z~abc", "exec#x", ""]),
    scheduled_at=_instants.filter(lambda v: v is not None),
    attempt=st.integers(min_value=0, max_value=30),
    status=_statuses,
    started_at=_instants,
    finished_at=_instants,
    error=st.none() | _texts,
    lease_until=_instants,
    owner=st.none() | _texts,
    job_version=st.integers(min_value=0, max_value=10**6),
    attempts=st.lists(_attempts, max_size=4),
    result=st.none() | _texts,
    releases=st.integers(min_value=0, max_value=5),
    blocked_by=st.none() | _texts,
    backfill=st.none() | _texts,
    backfill_dependants=st.booleans(),
    last_slot=st.none() | _texts,
    slot_count=st.integers(min_value=0, max_value=10_000),
)


# Half the records start at their slot's own instant (no jitter): the document leaves it out.
_records = st.tuples(_records, st.booleans()).map(
    lambda pair: pair[0].model_copy(update={"slot": slot_key(pair[0].scheduled_at)}) if pair[1] else pair[0]
)


class _Capture:
    """A DynamoDB client that keeps the items put."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def put_item(self, **request: Any) -> dict[str, Any]:
        self.items.append(request["Item"])
        return {}


def _written(record: Execution) -> tuple[DynamoStore, dict[str, Any]]:
    client = _Capture()
    store = DynamoStore(client, "t")
    store.save_execution(record, None, 1_767_225_600)
    return store, client.items[0]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_records)
def test_every_record_reads_back_the_same(record: Execution) -> None:
    # Given any record; when the store writes its item and reads it back
    store, item = _written(record)
    again = store._execution_from_item(item)
    # Then it is the same record, field for field (what the document left out is filled in again)
    assert again == record
    assert again.model_dump() == record.model_dump()
    # And an item whose document is in full (as earlier versions wrote it) reads the same too
    full = {**item, "doc": {"S": record.model_dump_json()}}
    assert store._execution_from_item(full) == record


def test_the_stored_document_leaves_out_defaults_and_what_the_item_holds() -> None:
    # Given a record on the common path (a RUNNING first attempt: no error, result, backfill, ...)
    record = Execution(
        job_id="job-1",
        slot="2026-11-30T10:00:00Z",
        scheduled_at=T0,
        status=ExecutionStatus.RUNNING,
        started_at=T0,
        owner="0" * 32,
        lease_until=T0 + timedelta(minutes=6),
    )
    # When the store writes it
    store, item = _written(record)
    doc = item["doc"]["S"]
    # Then its document holds only what differs from the defaults and is not in the item already
    # (the slot is the sort key's, its instant the slot's, the owner an attribute of its own)
    assert set(json.loads(doc)) == {"job_id", "status", "started_at", "lease_until"}
    assert item["sk"]["S"].endswith(record.slot) and item["owner"]["S"] == record.owner
    assert len(doc) < len(record.model_dump_json()) / 2
    assert store._execution_from_item(item) == record


@settings(max_examples=300, deadline=None)
@given(
    second=st.integers(min_value=0, max_value=10**10),
    moved=st.sampled_from(
        [timedelta(0), timedelta(microseconds=1), timedelta(seconds=1), timedelta(hours=1)]
    ),
    zone=st.sampled_from([UTC, timezone(timedelta(0)), timezone(timedelta(hours=2))]),
    suffix=st.sampled_from(["", "~m1"]),
)
def test_a_record_at_its_slots_instant_is_told_as_by_its_slot_key(
    second: int, moved: timedelta, zone: Any, suffix: str
) -> None:
    slot_at = datetime.fromtimestamp(second, tz=UTC)
    at = (slot_at + moved).astimezone(zone)
    record = Execution(
        job_id="j", slot=slot_key(slot_at) + suffix, scheduled_at=at, status=ExecutionStatus.RUNNING
    )
    # How it was told before: the instant formatted as a slot key
    expected = at.microsecond == 0 and at.utcoffset() == timedelta(0) and slot_key(at) == record.slot
    assert _at_slot_instant(record) is expected
