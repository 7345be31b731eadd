"""QA17 (qa4b): ``GET /v1/jobs/{id}/upcoming`` against what the job's chain releases.

The chain (``punctual.timing.slots.plan_release``) releases slots in slot order: a timer at the
dispatch instant of the next unreleased slot sends it and every later slot whose dispatch instant
has come. A jittered slot whose own dispatch instant comes before an earlier slot's is released
with that earlier slot, not at its own ``fires_at``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from factories import job as make_job
from punctual.models import Job
from punctual.timing.slots import dispatch_instant, plan_release
from punctual.usecases.next_fire import release_instants, upcoming_slots

NOW = datetime(2026, 12, 5, 19, 53, 48, tzinfo=UTC)


def _chain_releases(job: Job, first: datetime, until: datetime) -> dict[datetime, datetime]:
    """When each slot is released by a chain whose first timer is ``first``'s, pollers on time."""
    released: dict[datetime, datetime] = {}
    slot: datetime | None = first
    while slot is not None:
        due = dispatch_instant(job, slot)
        if due > until:
            break
        plan = plan_release(job, slot, due, due=due)
        assert not plan.missed, plan.missed  # pollers on time: nothing is missed
        for one in plan.release:
            released[one] = due
        slot = plan.next_slot
    return released


def _upcoming(job: Job, now: datetime = NOW) -> dict[datetime, datetime]:
    """What the route answers: each slot and its ``fires_at``."""
    slots = upcoming_slots(job, now, (), 30)
    return dict(zip(slots, release_instants(job, slots), strict=True))


def test_upcoming_fires_at_is_when_the_chain_releases_a_jittered_slot() -> None:
    job = make_job("jbig", "rate(10 seconds)", now=NOW, jitter_seconds=60, anchor=NOW)
    predicted = _upcoming(job)
    first = min(predicted)
    released = _chain_releases(job, first, NOW + timedelta(minutes=4))
    wrong = {
        slot: (fires_at, released[slot])
        for slot, fires_at in predicted.items()
        if slot in released and released[slot] != fires_at
    }
    assert not wrong, f"{len(wrong)} of {len(predicted)} slots' fires_at is not their release: {wrong}"


def test_upcoming_keeps_a_slot_whose_dispatch_instant_passed_but_waits_for_an_earlier_one() -> None:
    # Given the chain's head 19:53:58 due at 19:54:52, and 19:54:08 due at 19:54:08: at 19:54:20
    # the later slot has not gone (it goes with the head)
    job = make_job("jbig", "rate(10 seconds)", now=NOW, jitter_seconds=60, anchor=NOW)
    released = _chain_releases(job, min(_upcoming(job)), NOW + timedelta(minutes=4))
    now = NOW + timedelta(seconds=32)
    predicted = _upcoming(job, now)
    still_to_go = {slot: at for slot, at in released.items() if at > now and slot <= max(predicted)}
    assert {s: predicted.get(s) for s in still_to_go} == still_to_go
