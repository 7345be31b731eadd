"""An ECS task's (and a burst task's) claimed run keeps its message in flight whatever its run
lease: held from the claim until the record's heartbeats take over, as the Lambda lane's batch
holds it, with no request of its own at the claim (QA30 review of the 8 s message lease)."""

from __future__ import annotations

from datetime import datetime

import pytest
from botocore.exceptions import ClientError

from execution_harness import LONG, SHORT, FakeTarget, Rig
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.dispatch.queues import MemoryQueues
from punctual.execution import Delivery
from punctual.execution.worker_service import WorkerService
from punctual.runtime.clock import ManualClock, OffsetClock
from punctual.store.memory import MemoryStore

LANES = [pytest.param(LONG, "ecs", id="ecs-task"), pytest.param(SHORT, "lambda", id="burst-task")]
LEASES = [10, 60, 600]


class AwsReceipts(MemoryQueues):
    """SQS refusing a stale receipt's visibility change (ReceiptHandleIsInvalid), as AWS does."""

    def change_visibility(self, queue_url: str, receipt: str, visibility_s: int) -> None:
        if not any(s.receipt == receipt for s in self.queues.get(queue_url, [])):
            raise ClientError(
                {"Error": {"Code": "ReceiptHandleIsInvalid", "Message": "stale"}}, "ChangeMessageVisibility"
            )
        super().change_visibility(queue_url, receipt, visibility_s)


@pytest.mark.parametrize("queue, runtime", LANES)
@pytest.mark.parametrize("lease_s", LEASES)
def test_a_claimed_run_keeps_its_message_from_a_peer_task_whatever_its_lease(
    t0: datetime, queue: str, runtime: str, lease_s: int
) -> None:
    # Given a task running one message (received as its loop receives it: the 8 s message lease)
    # and a peer task (clock 5 s ahead) receiving and claiming whatever it sees, each second
    rig = Rig(MemoryStore(), ManualClock(t0))
    rig.queues = AwsReceipts(now=rig.clock.now)
    job = rig.add_job(timeout_seconds=7200 if runtime == "ecs" else 840, runtime=runtime)
    peer = rig.worker(
        lease_timers=True,
        lease_s=lease_s,
        message_lease_s=8,
        target=FakeTarget(),
        clock=OffsetClock(rig.clock, 5.0),
    )
    seen_by_peer: list[tuple[float, str]] = []
    service: WorkerService | None = None
    run_s = min(2 * lease_s + 10, 7000 if runtime == "ecs" else 800)  # (past the first heartbeat)

    def runs(ctx: SlotContext) -> TargetResult:
        assert service is not None
        started = rig.clock.now()
        for _ in range(run_s):
            rig.clock.advance(1.0)
            service.keeper.step()
            for got in rig.queues.receive(queue, 10, 0, peer.config.message_visibility_s):
                claim = peer.claim(got.message, Delivery(queue, got.receipt, got.receive_count))
                seen_by_peer.append(((rig.clock.now() - started).total_seconds(), claim.outcome.value))
        return TargetResult.ok()

    worker = rig.worker(lease_timers=True, lease_s=lease_s, message_lease_s=8, target=FakeTarget(runs))
    service = WorkerService(worker, [queue], wait_s=0)
    rig.send(rig.message(job, t0), queue=queue)
    [item] = rig.queues.receive(queue, 1, 0, worker.config.message_visibility_s)
    claims = []
    original = worker.claim

    def claim(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        made = original(*args, **kwargs)  # type: ignore[arg-type]
        claims.append(made)
        return made

    worker.claim = claim  # type: ignore[method-assign]
    # When it runs past its first heartbeat (two leases, or the Lambda lane's timeout), its keeper stepping each second
    assert service._execute(queue, item)
    # Then the peer never received the message, the run kept it (not detached), and no copy was sent
    assert seen_by_peer == []
    assert [c.detached for c in claims] == [False]
    assert rig.queues.receive(queue, 10, 0, 0) == []
    assert service.keeper.held == 0  # nothing left renewed after the run


@pytest.mark.parametrize("queue, runtime", LANES)
def test_a_claimed_run_adds_no_visibility_request_at_its_claim(
    t0: datetime, queue: str, runtime: str
) -> None:
    # Given the default leases, a run shorter than the first renewal
    rig = Rig(MemoryStore(), ManualClock(t0))
    job = rig.add_job(runtime=runtime)
    requests: list[str] = []
    for name in ("change_visibility", "change_visibility_batch"):
        real = getattr(rig.queues, name)

        def counted(*args: object, _real=real, _name=name) -> object:  # type: ignore[no-untyped-def]
            requests.append(_name)
            return _real(*args)

        setattr(rig.queues, name, counted)

    def runs(ctx: SlotContext) -> TargetResult:
        rig.clock.advance(2.0)
        service.keeper.step()
        return TargetResult.ok()

    worker = rig.worker(lease_timers=True, target=FakeTarget(runs))
    service = WorkerService(worker, [queue], wait_s=0)
    rig.send(rig.message(job, t0), queue=queue)
    [item] = rig.queues.receive(queue, 1, 0, worker.config.message_visibility_s)
    # When it is claimed, run and finished
    assert service._execute(queue, item)
    # Then no visibility request was made for it: the receive's message lease covered it
    assert requests == []


@pytest.mark.parametrize("queue, runtime", LANES)
def test_a_claim_slower_than_the_message_lease_keeps_its_message_from_a_peer(
    t0: datetime, queue: str, runtime: str
) -> None:
    # Given a task whose claim takes 12 s (the store retrying its write) while its keeper steps each
    # second, and a peer receiving and claiming whatever it sees, each second
    rig = Rig(MemoryStore(), ManualClock(t0))
    job = rig.add_job(runtime=runtime)
    peer = rig.worker(lease_timers=True, target=FakeTarget())
    worker = rig.worker(lease_timers=True, target=FakeTarget())
    service = WorkerService(worker, [queue], wait_s=0)
    seen_by_peer: list[str] = []
    original = worker.claim

    def slow_claim(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        for _ in range(12):
            rig.clock.advance(1.0)
            service.keeper.step()
            for got in rig.queues.receive(queue, 10, 0, peer.config.message_visibility_s):
                delivery = Delivery(queue, got.receipt, got.receive_count, got.message_id)
                seen_by_peer.append(peer.claim(got.message, delivery).outcome.value)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    worker.claim = slow_claim  # type: ignore[method-assign]
    rig.send(rig.message(job, t0), queue=queue)
    [item] = rig.queues.receive(queue, 1, 0, worker.config.message_visibility_s)
    # When its claim lands, 12 s after the receive (past the 7 s message lease), and it runs
    assert service._execute(queue, item, rig.clock.now())
    # Then the message stayed hidden throughout (held from its receive, not from its claim): the
    # peer never saw it (its return would have been the run's takeover), and the slot ran once
    assert seen_by_peer == []
    record = rig.store.get_execution(job.tenant, job.id, item.message.slot)
    assert record is not None and (record.status.value, record.attempt) == ("SUCCEEDED", 1)
    assert service.keeper.held == 0


def test_a_heartbeat_setting_slower_than_the_lease_allows_is_refused_naming_it(t0: datetime) -> None:
    # Beaten less often than the lease less the skew and 2 s, a live run's record lease would be
    # seen lapsed by a worker whose clock is ahead: its copies would take the live run over
    rig = Rig(MemoryStore(), ManualClock(t0))
    worker = rig.worker(lease_timers=True, lease_s=12)
    with pytest.raises(ValueError, match=r"PUNCTUAL_WORKER_HEARTBEAT_S=6: at most 5 s"):
        WorkerService(worker, [LONG], wait_s=0, heartbeat_s=6)
    assert WorkerService(worker, [LONG], wait_s=0, heartbeat_s=5).keeper.beat_s == 5


def test_the_ecs_worker_exits_2_with_one_line_on_a_heartbeat_setting_it_cannot_run(
    aws: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from punctual.execution import worker_service

    for name, value in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "PUNCTUAL_TABLE_NAME": "punctual-test",
        "PUNCTUAL_LONG_QUEUE_URLS": "https://sqs.us-east-1.amazonaws.com/123456789012/long.fifo",
        "PUNCTUAL_WORKER_HEARTBEAT_S": "30",
    }.items():
        monkeypatch.setenv(name, value)
    assert worker_service.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "punctual ECS worker: PUNCTUAL_WORKER_HEARTBEAT_S=30: at most 5 s, the lease (12 s) "
        "less the clock skew between nodes and 2 s"
    ]
