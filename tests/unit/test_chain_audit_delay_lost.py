"""reviewA: a delay() chain whose released message is gone (dead-lettered) waits the pending window (99e256e5)."""

from __future__ import annotations

from datetime import datetime

from audit_harness import LONG, SHORT, AuditRig

from factories import spec
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore


def test_a_delay_chain_whose_released_message_was_dead_lettered_is_repaired_within_the_grace(
    t0: datetime,
) -> None:
    rig = AuditRig(MemoryStore(), ManualClock(t0))
    rig.jobs.register("default", spec("delay(20 seconds)"), job_id="job")
    rig.run(3)
    work = rig.work

    def dead_letter() -> None:  # its message goes to the DLQ (poison, maxReceiveCount), never run
        for queue in (SHORT, LONG):
            for received in rig.queues.receive(queue, 100, 0, 900):
                rig.queues.delete(queue, received.receipt)

    rig.work = dead_letter
    rig.run(1, audit_at_s=None)
    rig.work = work
    before = len(rig.target.calls)
    rig.run(int(__import__("os").environ.get("MINS", "30")))
    print(
        "repairs", [(r.kind, r.next_slot) for r in rig.repairs], "calls after", len(rig.target.calls) - before
    )
    assert rig.repairs  # the stopped chain is mended within the audit grace (120 s here), not after 70 min
