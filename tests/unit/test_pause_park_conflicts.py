"""A paused job's slot due before the pause, met by a poller that could not record it as owed (the
job kept changing under its version-checked write), is recorded MISSED, not dropped with its timer:
the chain auditor does not look at paused jobs, so nothing else would ever have recorded it (QA27)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from execution_harness import LAYOUT, LONG, SHORT, Rig
from factories import spec
from punctual.dispatch.polling.pauses import PARK_GAVE_UP
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.base import VersionConflictError
from punctual.store.memory import MemoryStore
from punctual.timing.timers import slot_key
from punctual.usecases.jobs import JobService, QueueRouting


def test_a_slot_owed_by_a_pause_that_cannot_be_parked_is_recorded_missed(
    t0: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = Rig(MemoryStore(), ManualClock(t0))
    jobs = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    jobs.register("default", spec("rate(1 minute)"), job_id="r")
    due = t0 + timedelta(minutes=1)
    rig.advance_to(due + timedelta(seconds=20))  # the slot is due, the poller has not met it yet
    jobs.pause("default", "r")  # so the resume owes it, once a poller parks it on the job

    def conflict(*args: Any, **kwargs: Any) -> None:
        raise VersionConflictError("the job changed meanwhile")

    monkeypatch.setattr(rig.store, "replace_job", conflict)  # every park write meets a change
    rig.poll()
    records = {r.slot: r for r in rig.store.list_executions("default", "r", limit=10).items}
    assert slot_key(due) in records
    assert records[slot_key(due)].status is ExecutionStatus.MISSED
    assert records[slot_key(due)].error == PARK_GAVE_UP


def test_a_slot_another_poller_parked_on_the_last_try_is_not_recorded_missed(
    t0: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The third conflict was another poller parking this very slot (the same timer released twice,
    an uncertain release): the resume owes it, so it is no MISSED slot (it was recorded MISSED too,
    and the resume's run of it then met that record)."""
    rig = Rig(MemoryStore(), ManualClock(t0))
    jobs = JobService(rig.store, rig.queues, rig.clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    jobs.register("default", spec("rate(1 minute)"), job_id="r")
    due = t0 + timedelta(minutes=1)
    rig.advance_to(due + timedelta(seconds=20))
    jobs.pause("default", "r")
    write = rig.store.replace_job
    tries: list[int] = []

    def conflict(job: Any, expected_version: Any = None, **kwargs: Any) -> None:
        tries.append(1)
        if len(tries) == 3:  # the other poller's park of the same slot lands first
            current = rig.store.get_job("default", "r")
            assert current is not None
            parked = current.model_copy(update={"owed_from": job.owed_from, "version": current.version + 1})
            write(parked, expected_version=current.version)
        raise VersionConflictError("the job changed meanwhile")

    monkeypatch.setattr(rig.store, "replace_job", conflict)
    rig.poll()
    monkeypatch.setattr(rig.store, "replace_job", write)
    job = rig.store.get_job("default", "r")
    assert job is not None and job.owed_from == slot_key(due)  # owed: the resume runs it
    records = {r.slot: r for r in rig.store.list_executions("default", "r", limit=10).items}
    assert slot_key(due) not in records
