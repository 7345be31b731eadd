"""The worker's cheaper ways of building records equal the ways they replace.

``running(None, ...)`` builds a slot's first RUNNING record at once instead of copying the QUEUED
record ``new_record`` makes; ``Ledger.ttl`` adds the retention to a UTC instant's timestamp; the
records' ``model_copy`` makes the copy in one step. Each is compared with the slow form over
generated inputs (backfilled slots or not, odd attempts and versions, instants with and without
microseconds, zones). ``DeliveryThreads.settle`` returns at once with nothing in flight, and
still raises a delivery's fatal end.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from unittest import mock
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from punctual.delivery.notifications import DeliveryThreads
from punctual.dispatch.queues import DispatchMessage
from punctual.execution import records
from punctual.execution.ports import WorkerConfig
from punctual.execution.records import Ledger, new_record, running
from punctual.models import AttemptRecord, Execution, ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key

instants = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
texts = st.text(min_size=1, max_size=12)


@st.composite
def messages(draw: st.DrawFn) -> DispatchMessage:
    at = draw(instants)
    backfill = draw(st.sampled_from(["", "bf-1", "bf-2+deps", "bf-3:deps"]))
    return DispatchMessage(
        tenant=draw(texts),
        job_id=draw(texts),
        slot=draw(st.sampled_from([slot_key(at), slot_key(at) + "~manual-1", "odd"])),
        scheduled_at=draw(st.sampled_from([at.isoformat(), at.isoformat().replace("+00:00", "Z")])),
        attempt=draw(st.integers(1, 200)),
        job_version=draw(st.integers(1, 10**6)),
        kind=draw(st.sampled_from(["fire", "manual", "backfill", "child", "turn", "retry"])),
        released_at=at.isoformat(),
        backfill=backfill,
    )


@settings(max_examples=300, deadline=None)
@given(messages(), instants, st.integers(1, 3600), st.sampled_from([None, "x"]))
def test_a_first_running_record_equals_the_queued_one_copied(
    message: DispatchMessage, now: datetime, lease_s: int, blocked_by: str | None
) -> None:
    with mock.patch.object(records, "new_owner", return_value="f" * 32):
        copied = running(
            new_record(message, ExecutionStatus.QUEUED), message, now, lease_s, attempt=message.attempt
        )
        built = running(None, message, now, lease_s, attempt=message.attempt)
        copied_b = running(
            new_record(message, ExecutionStatus.QUEUED), message, now, lease_s, blocked_by=blocked_by
        )
        built_b = running(None, message, now, lease_s, blocked_by=blocked_by)
    for slow, fast in ((copied, built), (copied_b, built_b)):
        assert fast == slow
        assert fast.model_fields_set == slow.model_fields_set
        assert fast.model_dump_json() == slow.model_dump_json()
        assert list(fast.__dict__) == list(slow.__dict__)


@settings(max_examples=300, deadline=None)
@given(
    st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)),
    st.sampled_from([UTC, ZoneInfo("Europe/Paris"), ZoneInfo("America/New_York")]),
    st.integers(0, 3650),
)
def test_the_ttl_is_the_retention_after_now(naive: datetime, zone: ZoneInfo, days: int) -> None:
    now = naive.replace(tzinfo=zone)
    ledger = Ledger(
        MemoryStore(), ManualClock(datetime(2026, 1, 1, tzinfo=UTC)), WorkerConfig(retention_days=days)
    )
    assert ledger.ttl(now) == int((now + timedelta(days=days)).timestamp())


@settings(max_examples=200, deadline=None)
@given(messages(), instants, st.sampled_from(list(ExecutionStatus)), st.none() | texts)
def test_a_record_copy_equals_pydantics(
    message: DispatchMessage, now: datetime, status: ExecutionStatus, error: str | None
) -> None:
    record = new_record(message, ExecutionStatus.QUEUED)
    update = {"status": status, "finished_at": now, "error": error}
    fast, slow = record.model_copy(update=update), BaseModel.model_copy(record, update=update)
    assert fast == slow and fast.model_fields_set == slow.model_fields_set
    assert fast.__pydantic_private__ == slow.__pydantic_private__
    assert fast.__pydantic_extra__ == slow.__pydantic_extra__
    assert record.model_copy() == BaseModel.model_copy(record)
    attempt = AttemptRecord(attempt=1, status=status)
    assert attempt.model_copy(update={"error": error}) == BaseModel.model_copy(
        attempt, update={"error": error}
    )
    fast.status = ExecutionStatus.QUEUED  # the copy is its own: the record is not changed
    assert record.status is ExecutionStatus.QUEUED and slow.status is status


def test_a_copy_owns_its_fields_set() -> None:
    record = Execution(job_id="j", slot="s", scheduled_at=datetime(2026, 1, 1, tzinfo=UTC), status="QUEUED")
    before = set(record.model_fields_set)
    record.model_copy(update={"error": "x"})
    assert record.model_fields_set == before


def test_settle_with_nothing_in_flight_still_raises_a_delivery_that_died() -> None:
    """The early return of DeliveryThreads.settle (nothing running) keeps a fatal end for it."""
    deliveries = DeliveryThreads()
    assert deliveries.settle() == 0 and deliveries.pending == 0

    def dying() -> None:
        raise KeyboardInterrupt

    deliveries.submit(dying)
    for _ in range(500):  # the thread ends (leaves the set) before settle is called
        if not deliveries.pending:
            break
        time.sleep(0.01)
    assert deliveries.pending == 0
    with pytest.raises(KeyboardInterrupt):
        deliveries.settle(5)
    assert deliveries.settle() == 0  # raised once


def test_a_record_waiting_for_its_retry_outlives_the_longest_retry_wait() -> None:
    """QA26: a record waits for its retry with no write for up to retry.max_seconds (7 days); with
    a retention shorter than that (retentionDays accepts 1) it expired first, and the retry, finding
    no record, was dropped: the slot gone with nothing to say so. A RETRY_WAIT record is now kept
    RETRY_WAIT_KEPT_S past the retention; the other statuses keep the retention alone."""
    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    store = MemoryStore()
    ledger = Ledger(store, ManualClock(now), WorkerConfig(retention_days=1))
    message = DispatchMessage(
        tenant="t", job_id="j", slot=slot_key(now), scheduled_at=slot_key(now), attempt=1, job_version=1
    )
    run = running(None, message, now, 60, attempt=1)
    ledger.save(run, None, None)
    key = ("t", "j", slot_key(now))
    assert store._expires_at[key] == int(now.timestamp()) + 86_400
    waiting = run.model_copy(update={"status": ExecutionStatus.RETRY_WAIT, "finished_at": now})
    ledger.save(waiting, run, records.owned_by(run))
    longest_retry = now + timedelta(days=7)  # retry.max_seconds at most
    assert store._expires_at[key] > int((longest_retry + timedelta(days=1)).timestamp())
