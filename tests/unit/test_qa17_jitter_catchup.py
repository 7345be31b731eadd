"""QA17 (qa4b): a jittered chain on time misses nothing, whatever its catch-up policy.

With ``jitter_seconds`` longer than the gap between slots, a slot's dispatch instant can come
before an earlier slot's; the chain sends it with that earlier slot. Its lateness is counted from
then, not from its own dispatch instant: a chain released on time has no late slot to drop.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from factories import job as make_job
from punctual.timing.slots import dispatch_instant, plan_release
from punctual.usecases.next_fire import upcoming_slots

NOW = datetime(2026, 12, 5, 19, 53, 48, tzinfo=UTC)


def test_a_chain_on_time_misses_no_jittered_slot_whatever_its_catchup_policy() -> None:
    """A slot held back behind an earlier slot's longer jitter is not late: catch-up ``none`` and
    ``latest`` dropped a quarter of a healthy chain's slots as MISSED (jitter_seconds 150, every 10 s)."""
    for policy in ("none", "latest", "all"):
        job = make_job(
            "j", "rate(10 seconds)", now=NOW, jitter_seconds=150, anchor=NOW, catchup={"policy": policy}
        )
        slot: datetime | None = upcoming_slots(job, NOW, (), 1)[0]
        released, missed = 0, []
        while slot is not None and dispatch_instant(job, slot) < NOW + timedelta(minutes=30):
            due = dispatch_instant(job, slot)
            plan = plan_release(job, slot, due, due=due)
            released += len(plan.release)
            missed += plan.missed
            slot = plan.next_slot
        assert missed == [] and released > 150, (policy, released, missed[:3])
