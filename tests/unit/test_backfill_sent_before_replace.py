"""A backfill's slots already sent (in the queue) when the job is replaced: one the new spec does not
have is not run (recorded SUPERSEDED, saying why), one it has runs once under the new spec (QA30:
the sent slots were recorded SUPERSEDED, then sent again by the backfill's re-send and run under the
new spec, slots its new schedule never has)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from test_backfill_replaced import DAY, HOURLY, T0, _rig, _run

from factories import spec
from punctual.models import ExecutionStatus
from punctual.timing.timers import slot_key
from punctual.usecases.backfill_runner import RESEND_AFTER_S
from punctual.usecases.backfills import BackfillState


@pytest.mark.parametrize(
    ("new", "ran_hours"),
    [
        ({"schedule": HOURLY, "payload": {"fixed": True}}, range(6)),  # the same slots: all run, once
        ({"schedule": "cron(30 * * * ? *)"}, []),  # another schedule: none of its slots
        ({"schedule": HOURLY, "start_at": "2026-11-30T01:30:00Z"}, [2, 3, 4, 5]),  # its window's
        ({"schedule": "delay(5 minutes)"}, []),  # a delay() job has no fixed slots
    ],
)
def test_slots_sent_before_a_replace_run_only_when_the_new_spec_has_them(
    new: dict[str, Any], ran_hours: list[int] | range
) -> None:
    rig, jobs, runner = _rig(max_parallel=4)
    jobs.register("default", spec(HOURLY), job_id="job-1")
    # Given a backfill of six hourly slots whose first four are sent, none claimed yet
    started = runner.start("default", "job-1", DAY, DAY + timedelta(hours=6))
    rig.poll()
    sent = rig.store.get_backfill("default", "job-1", started.id)
    assert sent is not None and sent.released == 4
    # When the job is replaced, and the workers get to the messages later
    jobs.replace("default", "job-1", spec(**new))
    rig.clock.advance(30)
    worker = rig.worker()
    _run(rig, worker, int(3 * RESEND_AFTER_S / 2))  # past the backfill's re-sends of unrecorded slots
    # Then each slot the new spec has ran once; the others never, and their records say why
    done = rig.store.get_backfill("default", "job-1", started.id)
    assert done is not None and done.state is BackfillState.DONE, done
    ran = [slot_key(DAY + timedelta(hours=h)) for h in ran_hours]
    backfilled = [slot for slot, _ in rig.target.calls_for("job-1") if slot < slot_key(T0)]
    assert backfilled == ran  # (a delay() job's own slots come after T0)
    for hour in range(4):
        record = rig.store.get_execution("default", "job-1", slot_key(DAY + timedelta(hours=hour)))
        assert record is not None
        if hour in ran_hours:
            assert record.status is ExecutionStatus.SUCCEEDED, record
        else:
            assert record.status is ExecutionStatus.SUPERSEDED, record
            assert record.error is not None and "released for version 1" in record.error
    assert (done.slots, done.dropped) == (ran, 6 - len(ran))
    assert runner.progress(done) == ({"SUCCEEDED": len(ran)} if ran else {})
