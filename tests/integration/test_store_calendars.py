"""The calendar and backfill parts of the JobStore contract, against memory and DynamoDB (moto)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from punctual.backfills import Backfill, BackfillState
from punctual.calendars import Calendar
from punctual.store.base import CalendarInUseError, CalendarNotFoundError, CalendarVersionError


def _calendar(t0: datetime, name: str = "holidays", version: int = 1, tenant: str = "default") -> Calendar:
    return Calendar(
        name=name,
        tenant=tenant,
        version=version,
        timezone="Europe/Berlin",
        dates=["2026-12-25"],
        ranges=[{"start": "2026-12-30", "end": "2027-01-01"}],
        created_at=t0,
        updated_at=t0,
    )


def test_calendar_create_replace_are_version_checked(store, t0):  # type: ignore[no-untyped-def]
    store.put_calendar(_calendar(t0), None)
    with pytest.raises(CalendarVersionError) as exists:
        store.put_calendar(_calendar(t0), None)  # a second create loses
    assert exists.value.current_version == 1
    store.put_calendar(_calendar(t0, version=2), 1)
    with pytest.raises(CalendarVersionError) as stale:
        store.put_calendar(_calendar(t0, version=2), 1)  # a replace from a stale read loses
    assert stale.value.current_version == 2
    found = store.get_calendar("default", "holidays")
    assert found is not None and found.version == 2 and found.dates == ["2026-12-25"]
    assert store.get_calendar("other", "holidays") is None  # tenants never see each other's


def test_calendar_listing_pages_by_name_and_batch_get(store, t0):  # type: ignore[no-untyped-def]
    for name in ("c", "a", "b"):
        store.put_calendar(_calendar(t0, name), None)
    store.put_calendar(_calendar(t0, "z", tenant="t2"), None)
    first = store.list_calendars("default", 2)
    assert [c.name for c in first.items] == ["a", "b"] and first.cursor == "b"
    rest = store.list_calendars("default", 2, first.cursor)
    assert [c.name for c in rest.items] == ["c"] and rest.cursor is None
    found = store.batch_get_calendars([("default", "a"), ("default", "nope"), ("t2", "z")])
    assert set(found) == {("default", "a"), ("t2", "z")}


def test_a_calendar_in_use_is_not_deleted_and_names_its_jobs(store, t0):  # type: ignore[no-untyped-def]
    store.put_calendar(_calendar(t0), None)
    store.use_calendars("default", "job-b", ["holidays"], present=True)
    store.use_calendars("default", "job-a", ["holidays"], present=True)
    with pytest.raises(CalendarNotFoundError):
        store.use_calendars("default", "job-a", ["missing"], present=True)
    with pytest.raises(CalendarInUseError) as used:
        store.delete_calendar("default", "holidays")
    assert used.value.jobs == ["job-a", "job-b"]
    assert store.calendar_users("default", "holidays") == ["job-a", "job-b"]
    store.use_calendars("default", "job-a", ["holidays"], present=False)
    store.use_calendars("default", "job-b", ["holidays"], present=False)
    with pytest.raises(CalendarVersionError):
        store.delete_calendar("default", "holidays", expected_version=7)
    store.delete_calendar("default", "holidays", expected_version=1)
    assert store.get_calendar("default", "holidays") is None
    with pytest.raises(CalendarVersionError) as gone:
        store.delete_calendar("default", "holidays")
    assert gone.value.current_version is None


def _backfill(t0: datetime, revision: int = 1, **more: object) -> Backfill:
    fields: dict[str, object] = {
        "id": "0123456789abcdef0123",
        "tenant": "default",
        "job_id": "job-1",
        "start": t0 - timedelta(days=1),
        "end": t0,
        "max_parallel": 2,
        "tick_s": 2.0,
        "slots": ["2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"],
        "revision": revision,
        "created_at": t0,
        "updated_at": t0,
    }
    return Backfill.model_validate({**fields, **more})


def test_a_backfill_is_created_once_and_advanced_by_revision(store, t0):  # type: ignore[no-untyped-def]
    first = _backfill(t0)
    assert store.create_backfill(first) == first
    racing = _backfill(t0 + timedelta(seconds=1), max_parallel=3)
    assert store.create_backfill(racing) == first  # the second create gets the first record back
    moved = first.model_copy(update={"released": 2, "tick": 1, "revision": 2})
    assert store.update_backfill(moved, expected_revision=1)
    assert not store.update_backfill(moved.model_copy(update={"released": 1}), expected_revision=1)
    assert store.get_backfill("default", "job-1", first.id) == moved
    cancelled = moved.model_copy(update={"state": BackfillState.CANCELLED, "revision": 3})
    assert store.update_backfill(cancelled, expected_revision=2)
    again = _backfill(t0, revision=4, tick=2)
    assert store.create_backfill(again, replacing=cancelled) == again  # a cancelled one is replaced
    assert store.create_backfill(_backfill(t0, revision=5), replacing=cancelled) == again
    assert store.get_backfill("default", "job-1", "ffffffffffffffffffff") is None
