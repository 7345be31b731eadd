"""A message that waits is sent afresh before its queue would dead-letter it (QA24).

A copy of a slot (the pollers' re-send, another Region's release) that meets the run under a
live lease is returned until the lease ends, and the run's heartbeats keep renewing it: each
return one more receive, a run of a minute or more dead-lettered the copy, and the dead-letter
alarm fired for a slot that ran once and well. The copy is not dropped either (it may be the only
message left to take the run over): near the queue's maxReceiveCount it is sent again, with
``resend`` one more, and the old one deleted (punctual.execution.parking.Parking.resend_waiting).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from execution_harness import SHORT, Rig
from punctual.execution import Delivery
from punctual.execution.parking import RESEND_WAITING_FROM
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
LIMIT = 10  # cdk.json's maxReceiveCount


def _copy_meets_a_live_run(
    seconds: int, die_at: int | None = None
) -> tuple[Rig, list[tuple[int, int, int, str]]]:
    """A worker claims the slot and heartbeats every 5 s (until ``die_at``) while the pollers'
    copy (resend 1) is received by another worker whenever it is visible: (second, receive
    count, resend, outcome) of each receive."""
    rig = Rig(MemoryStore(), ManualClock(T0))
    job = rig.add_job(timeout_seconds=300)
    holder = rig.worker(lease_s=8, max_receive_count=LIMIT)
    other = rig.worker(lease_s=8, max_receive_count=LIMIT)
    message = rig.message(job, T0)
    run = holder.claim(message)
    rig.send(dataclasses.replace(message, resend=1))
    receives = []
    for second in range(1, seconds + 1):
        rig.clock.advance(1)
        if second % 5 == 0 and (die_at is None or second < die_at):
            holder.heartbeat(run, message=False)
        for r in rig.queues.receive(SHORT, 10, 0, 30):
            handled = other.process(r.message, Delivery(SHORT, r.receipt, r.receive_count))
            receives.append((second, r.receive_count, r.message.resend, handled.outcome))
            if handled.ack:
                rig.queues.delete(SHORT, r.receipt)
    return rig, receives


def test_a_copy_waiting_on_a_two_minute_run_never_reaches_the_dead_letter_limit() -> None:
    rig, receives = _copy_meets_a_live_run(120)
    # it waited the whole run, received every lease...
    assert len(receives) > LIMIT and {outcome for *_, outcome in receives} == {"waiting"}
    # ...never as far as the receive the queue dead-letters (nor the one before it returned)
    assert max(count for _, count, _, _ in receives) <= LIMIT - 1
    # sent afresh each time it came near: a message of its own (group and deduplication id)
    resends = sorted({resend for _, _, resend, _ in receives})
    assert resends[0] == 1 and resends[1:] == list(
        range(RESEND_WAITING_FROM + 1, RESEND_WAITING_FROM + len(resends))
    )
    assert len(resends) >= 3
    # always one message of the slot in the queue, never two
    assert len(rig.queues.all_messages(SHORT)) == 1
    assert rig.metrics.total("WaitingMessagesResent") == len(resends) - 1
    # and the slot runs once: the holder's run, the copy never called the target
    assert rig.target.calls == []


def test_the_copy_sent_afresh_still_takes_the_run_over_when_its_holder_dies() -> None:
    # Given a copy sent afresh twice while the run lived, when the holder dies at 100 s
    rig, receives = _copy_meets_a_live_run(130, die_at=100)
    # then the fresh copy (resend past the pollers') takes the run over once the lease lapsed
    claimed = [r for r in receives if r[3] != "waiting"]
    assert len(claimed) == 1
    second, _, resend, outcome = claimed[0]
    assert resend > RESEND_WAITING_FROM and 100 < second <= 100 + 8 + 9
    assert outcome == ExecutionStatus.SUCCEEDED.value
    assert [(c.slot, c.attempt) for c in rig.target.calls] == [(rig.target.calls[0].slot, 2)]
    assert max(count for _, count, _, _ in receives) <= LIMIT - 1
    assert rig.queues.all_messages(SHORT) == []


def test_a_message_far_from_the_limit_is_returned_as_before() -> None:
    rig = Rig(MemoryStore(), ManualClock(T0))
    job = rig.add_job(timeout_seconds=300)
    holder = rig.worker(lease_s=8, max_receive_count=LIMIT)
    message = rig.message(job, T0)
    holder.claim(message)
    rig.send(dataclasses.replace(message, resend=1))
    (r,) = rig.queues.receive(SHORT, 10, 0, 30)
    for count, resent in ((LIMIT - 2, False), (LIMIT - 1, True)):
        handled = holder.process(r.message, Delivery(SHORT, r.receipt, count))
        assert (handled.outcome, handled.ack) == ("waiting", resent)
    assert rig.queues.sends == 2  # the copy, then the one sent afresh
