"""A release that meets a calendar that is gone records the slot and alerts, never runs it silently.

Job writes check that each calendar they name exists, and a delete refuses a calendar in use, so
a missing calendar is a fault (a table restored in part, an item deleted by hand). Before issue
29 the release left it out and ran the job's holiday slots as if it had no such calendar. Now the
slot is recorded MISSED (``calendar missing``), its event and ``missed`` alert go out, and the
chain goes on; a calendar an eventually consistent read is only behind on is read again, never
called missing.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import pytest

from execution_harness import LAYOUT, SHORT, FakeTarget, Rig
from factories import spec
from punctual.delivery.notifications import Alerter, EventPublisher, MemoryEventSink, Notifier
from punctual.delivery.notifications.events import SLOT_MISSED
from punctual.dispatch.queues import MessageKind, QueueRouting
from punctual.models import AlertStatus, Execution, ExecutionStatus, Job
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.timing.timers import TimerKind, slot_key
from punctual.usecases.backfill_runner import BackfillRunner
from punctual.usecases.calendar_service import CalendarService
from punctual.usecases.calendars import Calendar, CalendarSpec
from punctual.usecases.job_errors import JobConflictError
from punctual.usecases.jobs import JobService

T0 = datetime(2026, 12, 24, 8, 0, tzinfo=UTC)  # a Thursday: the 24th is in the calendar
HOOK = {"type": "http", "url": "https://alerts.example.com/hook"}


class BehindStore(MemoryStore):
    """A store whose eventually consistent calendar reads are behind (they find none)."""

    def batch_get_calendars(
        self, keys: Iterable[tuple[str, str]], consistent: bool = False
    ) -> dict[tuple[str, str], Calendar]:
        return super().batch_get_calendars(keys, consistent) if consistent else {}


def world(store: MemoryStore) -> tuple[Rig, JobService, CalendarService]:
    clock = ManualClock(T0 - timedelta(hours=1))
    events = MemoryEventSink()
    rig = Rig(store, clock, notifier=Notifier(EventPublisher(events), Alerter(store, FakeTarget(), clock)))
    jobs = JobService(store, rig.queues, clock, LAYOUT, QueueRouting((SHORT,), ()))
    calendars = CalendarService(store, clock)
    calendars.put("default", "holidays", CalendarSpec(dates=["2026-12-24"]))
    return rig, jobs, calendars


def released_without_calendar(store: MemoryStore, rig: Rig, job: Job) -> Execution | None:
    """The record of ``job``'s slot at T0, released after its calendar was lost behind the API's
    back (its use record and then its item)."""
    store.use_calendars("default", job.id, ["holidays"], present=False)
    store.delete_calendar("default", "holidays")
    rig.clock.set(T0 + timedelta(seconds=1))
    rig.poll()
    return store.get_execution("default", job.id, slot_key(T0))


def test_a_slot_whose_calendar_is_gone_is_recorded_missed_and_alerted_not_run() -> None:
    # Given a daily job that excludes a calendar, with a rule on missed
    store = MemoryStore()
    rig, jobs, _ = world(store)
    job, _ = jobs.register(
        "default",
        spec(
            "cron(0 8 * * ? *)", exclude_calendars=["holidays"], alerts=[{"on": ["missed"], "target": HOOK}]
        ),
    )
    # And the calendar lost behind the API's back, when its slot is due
    record = released_without_calendar(store, rig, job)
    # Then it was not sent to run: recorded MISSED, naming the calendar, and its alert handed over
    assert record is not None and record.status is ExecutionStatus.MISSED
    assert record.error is not None and record.error.startswith("calendar missing: 'holidays'")
    sent = [m for m in rig.queues.all_messages(SHORT)]
    assert [m.kind for m in sent] == [MessageKind.ALERT]
    # And the worker makes the missed alert; the slot's event is out; the chain goes on
    worker = rig.worker()
    rig.work_until_idle(worker)
    [alert] = store.list_alerts("default", job.id, 10)
    assert (alert.key_slot, alert.condition.value, alert.status) == (slot_key(T0), "missed", AlertStatus.SENT)
    assert "calendar missing" in alert.body["summary"]
    events = rig.notifier.events.sink.events
    assert [(e.detail_type, e.detail["slot"]) for e in events] == [(SLOT_MISSED, slot_key(T0))]
    nxt = rig.timers(T0 + timedelta(seconds=1), T0 + timedelta(days=2), TimerKind.FIRE)
    assert [t.due for t in nxt] == [T0 + timedelta(days=1)]
    assert rig.target.calls == []


def test_a_delay_chain_goes_on_past_a_slot_whose_calendar_is_gone() -> None:
    # QA28: "the chain goes on" held for clock jobs only: a delay() job's next timer is written by
    # its run's end, and the slot recorded MISSED had none, so the job never fired again
    store = MemoryStore()
    rig, jobs, _ = world(store)
    job, _ = jobs.register("default", spec("delay(1 hour)", exclude_calendars=["holidays"]))
    record = released_without_calendar(store, rig, job)
    assert record is not None and record.status is ExecutionStatus.MISSED
    nxt = rig.timers(T0 + timedelta(seconds=1), T0 + timedelta(days=2), TimerKind.FIRE)
    assert [t.slot for t in nxt] == [slot_key(T0 + timedelta(hours=1))]  # an hour after the slot


def test_a_calendar_an_eventually_consistent_read_missed_is_read_again_not_called_missing() -> None:
    # Given a release whose eventually consistent read of the calendar is behind
    store = BehindStore()
    rig, jobs, _ = world(store)
    job, _ = jobs.register("default", spec("cron(0 8 * * ? *)", exclude_calendars=["holidays"]))
    # When the holiday's slot is due
    rig.clock.set(T0 + timedelta(seconds=1))
    rig.poll()
    # Then the consistent read decides it: EXCLUDED by the calendar, as it should be
    record = store.get_execution("default", job.id, slot_key(T0))
    assert record is not None and record.status is ExecutionStatus.EXCLUDED
    assert rig.queues.all_messages(SHORT) == []


def test_a_backfill_of_a_job_whose_calendar_is_gone_is_refused_naming_it() -> None:
    """QA22: a backfill planned without a calendar it did not find, so it ran the job's slots on
    the calendar's days (the release records them MISSED instead); and it read the calendars
    eventually consistently, so one created a moment ago could be missed the same way."""
    store = BehindStore()
    rig, jobs, _ = world(store)
    job, _ = jobs.register("default", spec("cron(0 8 * * ? *)", exclude_calendars=["holidays"]))
    rig.clock.set(T0 + timedelta(days=2))
    runner = BackfillRunner(store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), ()))
    # The calendar, only behind on the first read, still excludes the 24th
    planned = runner.start("default", job.id, T0 - timedelta(days=1), T0 + timedelta(days=1))
    assert (len(planned.slots), planned.excluded) == (1, 1)
    # And once it is gone behind the API's back, a backfill says so and runs nothing
    store.use_calendars("default", job.id, ["holidays"], present=False)
    store.delete_calendar("default", "holidays")
    with pytest.raises(JobConflictError, match="calendar missing: 'holidays'"):
        runner.start("default", job.id, T0 - timedelta(days=2), T0 + timedelta(days=1))
    steps = rig.timers(T0, rig.clock.now() + timedelta(minutes=1), TimerKind.BACKFILL)
    assert [t.slot for t in steps] == [planned.id]  # the refused one has no driver
