"""Backfill steps and calendar exclusion against both stores (DynamoDB under moto proves the
BACKFILL timer rows, the backfill record's conditions and the calendars' batch read)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

import pytest

from execution_harness import LAYOUT, LONG, SHORT, Rig
from factories import spec
from punctual.dispatch.queues import QueueRouting
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.base import JobStore
from punctual.usecases.backfill_runner import BackfillRunner
from punctual.usecases.backfills import BackfillState
from punctual.usecases.calendar_service import CalendarService
from punctual.usecases.calendars import CalendarSpec
from punctual.usecases.jobs import JobService

ROUTING = QueueRouting((SHORT,), (LONG,))


@pytest.fixture
def rig(store: JobStore, t0: datetime) -> Rig:
    return Rig(store, ManualClock(t0))


def test_a_backfill_with_an_excluded_day_runs_each_other_slot_once(rig: Rig) -> None:
    # Given an hourly job registered through the use cases, excluding yesterday's calendar day
    CalendarService(rig.store, rig.clock).put("default", "y", CalendarSpec(dates=["2026-11-29"]))
    jobs = JobService(rig.store, rig.queues, rig.clock, LAYOUT, ROUTING)
    job, _ = jobs.register("default", spec("cron(0 * * * ? *)", exclude_calendars=["y"]))
    day = datetime.fromisoformat("2026-11-30T00:00:00+00:00")
    # When [yesterday 21:00, today 04:00) is backfilled twice, three at a time
    runner = BackfillRunner(rig.store, rig.queues, rig.clock, LAYOUT, ROUTING, max_parallel=3, step_s=2.0)
    backfill = runner.start("default", job.id, day - timedelta(hours=3), day + timedelta(hours=4))
    assert runner.start("default", job.id, day - timedelta(hours=3), day + timedelta(hours=4)) == backfill
    assert (len(backfill.slots), backfill.excluded) == (4, 3)
    worker = rig.worker()
    for _ in range(30):
        rig.poll()
        assert len(rig.queues.all_messages()) <= 3
        rig.work_until_idle(worker)
        rig.clock.advance(2)
        current = runner.get("default", job.id, backfill.id)
        if current.state is not BackfillState.RUNNING:
            break
    # Then the four slots of today ran once each, and the excluded day's slots not at all
    assert current.state is BackfillState.DONE and runner.progress(current) == {"SUCCEEDED": 4}
    assert Counter(slot for slot, _ in rig.target.calls_for(job.id)) == {key: 1 for key in backfill.slots}


def test_the_release_path_records_an_excluded_slot_once(rig: Rig) -> None:
    calendars = CalendarService(rig.store, rig.clock)
    calendars.put("default", "today", CalendarSpec(timezone="Europe/Berlin", dates=["2026-11-30"]))
    jobs = JobService(rig.store, rig.queues, rig.clock, LAYOUT, ROUTING)
    job, _ = jobs.register("default", spec("rate(10 seconds)", exclude_calendars=["today"]))
    rig.clock.advance(25)
    rig.poll()
    rig.poll()
    records = rig.history(job)
    assert [r.status for r in records] == [ExecutionStatus.EXCLUDED] * 2
    assert {r.error for r in records} == {"excluded by calendar 'today' (version 1)"}
    assert rig.queues.all_messages() == []
