"""The execution record's stored document: defaults left out, the same record read back."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from punctual.models import AttemptRecord, Execution, ExecutionStatus
from punctual.store.dynamo import DynamoStore
from punctual.store.dynamo.execution_docs import execution_doc, execution_from_doc

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
_texts = st.text(min_size=0, max_size=12)
_instants = st.none() | st.integers(min_value=-86_400, max_value=86_400 * 40).map(
    lambda s: T0 + timedelta(seconds=s, microseconds=(s * 7919) % 1000 * 1000)
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
    slot=st.sampled_from(["2026-11-30T10:00:00Z", "2026-11-30T10:00:00Z~abc", ""]),
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


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_records)
def test_every_record_reads_back_the_same(record: Execution) -> None:
    # Given any record; when its document is written and read back
    again = execution_from_doc(execution_doc(record))
    # Then it is the same record, field for field (the defaults left out are filled in again)
    assert again == record
    assert again.model_dump() == record.model_dump()
    # And a document in full (as earlier versions wrote it) reads the same too
    assert execution_from_doc(record.model_dump_json()) == record


def _running() -> Execution:
    return Execution(
        job_id="job-1",
        slot="2026-11-30T10:00:00Z",
        scheduled_at=T0,
        status=ExecutionStatus.RUNNING,
        started_at=T0,
        owner="0" * 32,
        lease_until=T0 + timedelta(minutes=6),
    )


class _Capture:
    """A DynamoDB client that keeps the items put."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def put_item(self, **request: Any) -> dict[str, Any]:
        self.items.append(request["Item"])
        return {}


def test_the_stored_document_leaves_defaults_out() -> None:
    # Given a record on the common path (a RUNNING first attempt: no error, result, backfill, ...)
    client = _Capture()
    store = DynamoStore(client, "t")
    record = _running()
    # When the store writes it
    store.save_execution(record, None, 1_767_225_600)
    doc = client.items[0]["doc"]["S"]
    # Then its document holds only what differs from the defaults, and reads back the same
    assert set(json.loads(doc)) == {"job_id", "slot", "scheduled_at", "status", "started_at", "lease_until", "owner"}
    assert len(doc) < len(record.model_dump_json()) * 0.6
    assert store._execution_from_item(client.items[0]) == record
