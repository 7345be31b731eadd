"""A run that lost its lease while its target hangs (ignoring its cancel) lets its message go: it
comes back as the record's lease lapses, for another worker to take the run over, whichever lane
held it (QA30 review of the keeper's adoption: the ECS task's adopted message, like a Lambda
batch's held one, was renewed as long as the run's thread lived, and the slot silently stopped).

In-memory store and queues on a manual clock; the keeper stepped once a (virtual) second.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from execution_harness import LONG, SHORT, FakeTarget, Rig
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.execution.keeper import TICK_S
from punctual.execution.worker_service import WorkerService
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore


class FailingStore(MemoryStore):
    failing = False

    def save_execution(self, *args: Any, **kwargs: Any) -> None:
        if self.failing:
            raise RuntimeError("store throttled")
        super().save_execution(*args, **kwargs)


def failing_rig(t0: datetime, **job: Any) -> tuple[FailingStore, Rig, Any]:
    store = FailingStore()
    rig = Rig(store, ManualClock(t0))
    return store, rig, rig.add_job(**job)


@pytest.mark.parametrize("lease_s", [10, 60])
def test_an_ecs_runs_message_comes_back_for_a_peer_once_its_lease_is_lost_while_its_target_hangs(
    t0: datetime, lease_s: int
) -> None:
    # Given an ECS task whose store fails from 1 s into the run (its lease is lost: the run is
    # stopped), and a target that does not return for 120 s (it ignores the cancel)
    store, rig, job = failing_rig(t0, timeout_seconds=7200, runtime="ecs")
    seen_by_peer: list[float] = []
    claims: list[Any] = []

    def runs(ctx: SlotContext) -> TargetResult:
        started = rig.clock.now()
        for second in range(120):
            rig.clock.advance(TICK_S)
            store.failing = second >= 1
            service.keeper.step()
            if rig.queues.receive(LONG, 10, 0, 0):  # (a peer's receive; visibility 0: left visible)
                seen_by_peer.append((rig.clock.now() - started).total_seconds())
        store.failing = False
        return TargetResult.ok()

    worker = rig.worker(lease_timers=True, lease_s=lease_s, message_lease_s=8, target=FakeTarget(runs))
    claim = worker.claim

    def claimed(*args: Any, **kwargs: Any) -> Any:
        claims.append(claim(*args, **kwargs))
        return claims[-1]

    worker.claim = claimed  # type: ignore[method-assign]
    service = WorkerService(worker, [LONG], wait_s=0)
    rig.send(rig.message(job, t0), queue=LONG)
    [item] = rig.queues.receive(LONG, 1, 0, worker.config.message_visibility_s)
    # When it runs
    service._execute(LONG, item, rig.clock.now())
    # Then its lease was lost (the record's lease lapsed under it), and its message came back for
    # another worker within the lease and the message lease, not once the hung target returned
    assert claims[0].lost
    assert seen_by_peer and seen_by_peer[0] <= lease_s + 8, seen_by_peer[:3]


@pytest.mark.parametrize("lease_s", [10, 60])
def test_a_lambda_batchs_run_lets_its_message_go_once_its_lease_is_lost_while_it_hangs(
    t0: datetime, lease_s: int
) -> None:
    # Given a run a Lambda batch holds, whose store fails from 1 s in
    store, rig, job = failing_rig(t0, timeout_seconds=600)
    worker = rig.worker(lease_s=lease_s, message_lease_s=8)
    keeper, claim = rig.held_run(worker, job, t0)
    seen_by_peer: list[float] = []
    # When its target hangs two minutes (the run's thread registered all along), its keeper ticking
    for second in range(120):
        rig.clock.advance(TICK_S)
        store.failing = second >= 1
        keeper.step()
        if rig.queues.receive(SHORT, 10, 0, 0):
            seen_by_peer.append(second + 1.0)
    # Then its lease was lost and its message came back within the lease and the message lease
    assert claim.lost
    assert seen_by_peer and seen_by_peer[0] <= lease_s + 8, seen_by_peer[:3]
    assert keeper.held == 0
