"""An ECS task dates its received messages' visibility (the message lease the keeper renews from)
early, never late, and not from before its long poll (QA30 review: dated before a receive that
waited 15 s, a 2 s run paid a visibility request at once)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from execution_harness import LONG, FakeTarget, Rig
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.execution.worker_service import RECEIVE_LAG_S, WorkerService
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore


def polling(rig: Rig, waits_s: float, answers_s: float) -> list[datetime]:
    """The rig's receive as SQS answers a long poll: ``waits_s`` until a message is handed out
    (its visibility starts), ``answers_s`` more until the answer is back. The hand-outs, listed."""
    handed_out: list[datetime] = []
    real = rig.queues.receive

    def receive(*args: Any) -> Any:
        rig.clock.advance(waits_s)
        handed_out.append(rig.clock.now())
        received = real(*args)
        rig.clock.advance(answers_s)
        return received

    rig.queues.receive = receive  # type: ignore[method-assign]
    return handed_out


@pytest.mark.parametrize(
    "waits_s, answers_s",
    [(0.0, 0.05), (0.0, 0.9), (3.0, 0.05), (15.0, 0.0), (15.0, 0.9), (20.0, RECEIVE_LAG_S)],
)
def test_a_receive_is_dated_no_later_than_its_visibility_started_and_at_most_an_answers_time_before(
    t0: datetime, waits_s: float, answers_s: float
) -> None:
    # Given a task whose receive waits waits_s for its message, the answer taking answers_s
    rig = Rig(MemoryStore(), ManualClock(t0))
    job = rig.add_job(runtime="ecs")
    service = WorkerService(rig.worker(lease_timers=True), [LONG], wait_s=20)
    rig.send(rig.message(job, t0), queue=LONG)
    handed_out = polling(rig, waits_s, answers_s)
    # When it receives
    [_], received_at = service._receive(LONG, 10)
    # Then the message's visibility is dated no later than it started (the keeper renews it in
    # time), and no earlier than an answer's time before (nor before the request was sent)
    assert t0 <= received_at <= handed_out[0]
    assert (handed_out[0] - received_at).total_seconds() <= RECEIVE_LAG_S


def test_a_claim_after_a_long_poll_adds_no_visibility_request(t0: datetime) -> None:
    # Given a task whose receive long-polled 15 s before its message came, and a 2 s run
    rig = Rig(MemoryStore(), ManualClock(t0))
    job = rig.add_job(timeout_seconds=7200, runtime="ecs")
    calls: list[object] = []
    real = rig.queues.change_visibility_batch

    def counted(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    rig.queues.change_visibility_batch = counted  # type: ignore[method-assign]

    def runs(ctx: SlotContext) -> TargetResult:
        for _ in range(2):
            rig.clock.advance(1.0)
            service.keeper.step()
        return TargetResult.ok()

    worker = rig.worker(lease_timers=True, lease_s=60, message_lease_s=8, target=FakeTarget(runs))
    service = WorkerService(worker, [LONG], wait_s=20)
    rig.send(rig.message(job, t0), queue=LONG)
    polling(rig, 15.0, 0.05)
    [item], received_at = service._receive(LONG, 1)
    # When it is claimed, run and finished
    assert service._execute(LONG, item, received_at)
    # Then no visibility request was made for it: its receive's 8 s covered the 2 s run
    assert calls == []
