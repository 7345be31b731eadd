"""reviewA: a late release's catch-up of more than GAP_STEPS slots, workers down, end_at reached."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from audit_harness import AuditRig

from factories import spec
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore


def test_a_late_release_catching_up_more_than_eight_slots_is_not_recorded_missed(t0: datetime) -> None:
    rig = AuditRig(MemoryStore(), ManualClock(t0))
    end = t0 + timedelta(minutes=25, seconds=30)
    job, _ = rig.jobs.register(
        "default", spec("rate(1 minute)", end_at=end.isoformat(), catchup={"policy": "all"}), job_id="job"
    )
    rig.run(4)
    work = rig.work
    rig.work = lambda: None  # workers down from here
    # pollers down 12 minutes (nothing runs): the next release is late and catches up
    rig.clock.advance(12 * 60)
    rig.run(25)
    sent = Counter(rig.sent_slots(job))
    print("sent", len(sent), sorted(sent))
    print("timers", [(t.slot, t.due.isoformat()) for t in rig.chain_timers(job)])
    print(
        "repairs",
        [
            (r.kind, r.reason if hasattr(r, "reason") else "", r.missed_count, r.next_slot)
            for r in rig.repairs
        ],
    )
    missed = [r for r in rig.history(job) if r.status is ExecutionStatus.MISSED]
    print("missed", [(r.slot, getattr(r, "last_slot", None)) for r in missed])
    rig.work = work
    rig.run(3)
    ran = Counter(c.slot for c in rig.target.calls if c.job_id == job.id and c.attempt == 1)
    print("ran", len(ran))
    assert rig.repairs == []
    assert not missed
