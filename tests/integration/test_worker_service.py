"""The ECS worker: concurrency, heartbeats, and SIGTERM mid-run (a real process against moto server).

Run as a script (``python test_worker_service.py <gate dir>``) this file is the worker process
under test: ``punctual.execution.worker_service.main`` with a target whose runs are gated by files.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from punctual.delivery.targets.base import SlotContext, TargetResult

ROOT = Path(__file__).resolve().parents[2]
TABLE = "punctual-ecs-test"
REGION = "us-east-1"


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    """Poll ``condition`` until it is truthy; fail with ``what`` after a generous deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class GatedTarget:
    """A target whose runs hold until a file says go: ``started-<job>-<attempt>`` on entry,
    ``done-<job>-<attempt>`` on success. A payload ``{"hold_attempt": n}`` makes attempt n
    wait for ``go-<job>``."""

    def __init__(self, gates: Path) -> None:
        self.gates = gates

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        name = f"{ctx.job_id}-{ctx.attempt}"
        (self.gates / f"started-{name}").touch()
        if isinstance(payload, dict) and payload.get("hold_attempt") == ctx.attempt:
            while not (self.gates / f"go-{ctx.job_id}").exists():
                time.sleep(0.02)
        (self.gates / f"done-{name}").touch()
        return TargetResult.ok(f"ran {name}")


# --------------------------------------------------------------------------- SIGTERM, for real


@dataclass
class Cloud:
    endpoint: str
    dynamodb: Any
    sqs: Any
    queue_url: str
    failed_url: str


@pytest.fixture
def cloud() -> Iterator[Cloud]:
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        from punctual.store.dynamo import table_definition

        dynamodb = boto3.client("dynamodb", region_name=REGION, endpoint_url=endpoint)
        dynamodb.create_table(**table_definition(TABLE))
        sqs = boto3.client("sqs", region_name=REGION, endpoint_url=endpoint)
        queue_url = sqs.create_queue(
            QueueName="punctual-long-0.fifo", Attributes={"FifoQueue": "true", "VisibilityTimeout": "600"}
        )["QueueUrl"]
        failed_url = sqs.create_queue(QueueName="punctual-failed")["QueueUrl"]
        yield Cloud(endpoint, dynamodb, sqs, queue_url, failed_url)
    finally:
        server.stop()


def start_worker(cloud: Cloud, gates: Path, name: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": cloud.endpoint,
        "AWS_DEFAULT_REGION": REGION,
        "PUNCTUAL_TABLE_NAME": TABLE,
        "PUNCTUAL_LONG_QUEUE_URLS": cloud.queue_url,
        "PUNCTUAL_FAILED_QUEUE_URL": cloud.failed_url,
        "PUNCTUAL_SHARD_COUNT": "4",
        "PUNCTUAL_NEAR_SHARD_COUNT": "2",
        # A lease far longer than the test: only a release can explain a prompt takeover.
        "PUNCTUAL_LEASE_S": "600",
        "PUNCTUAL_WORKER_CONCURRENCY": "4",
        "PUNCTUAL_WORKER_WAIT_S": "1",
        "PUNCTUAL_WORKER_GRACE_S": "2",
        "PUNCTUAL_WORKER_STOP_S": "1",
        "PUNCTUAL_WORKER_HEARTBEAT_S": "0.5",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "layers" / "core" / "python"), str(ROOT / "tests")]),
    }
    log = open(gates / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, __file__, str(gates)], env=env, stdout=log, stderr=subprocess.STDOUT
    )


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(timeout=10)


def test_sigterm_mid_run_finishes_or_releases_and_nothing_is_lost_or_doubled(
    cloud: Cloud, tmp_path: Path
) -> None:
    from factories import job as make_job
    from punctual.dispatch.queues import DispatchMessage, SqsQueues
    from punctual.models import ExecutionStatus
    from punctual.store.dynamo import DynamoStore
    from punctual.timing.timers import slot_key

    store = DynamoStore(cloud.dynamodb, TABLE)
    now = datetime.now(UTC).replace(microsecond=0)
    # Given two long ECS jobs: "quick" finishes during the grace period, "stuck" outlasts it
    jobs = {
        name: make_job(name, now=now, runtime="ecs", timeout_seconds=3600, payload={"hold_attempt": 1})
        for name in ("quick", "stuck")
    }
    for job in jobs.values():
        store.create_job(job, None, max_jobs=10)
    slot = now - timedelta(seconds=5)
    stamp = slot.isoformat().replace("+00:00", "Z")
    messages = [DispatchMessage("default", j.id, slot_key(slot), stamp, 1, j.version) for j in jobs.values()]
    SqsQueues(cloud.sqs).send(cloud.queue_url, messages)
    first = start_worker(cloud, tmp_path, "worker-a")
    second: subprocess.Popen[bytes] | None = None
    try:
        # When worker A is running both, it gets SIGTERM; "quick" is let go during the grace period
        wait_for(lambda: all((tmp_path / f"started-{n}-1").exists() for n in jobs), "both runs to start")
        first.send_signal(signal.SIGTERM)
        (tmp_path / "go-quick").touch()
        assert first.wait(timeout=30) == 0
        # Then "quick" finished on A; "stuck" was handed back, not lost, without waiting for its lease
        quick = store.get_execution("default", "quick", slot_key(slot))
        assert quick is not None and (quick.status, quick.attempt) == (ExecutionStatus.SUCCEEDED, 1)
        stuck = store.get_execution("default", "stuck", slot_key(slot))
        assert stuck is not None and (stuck.status, stuck.releases) == (ExecutionStatus.RETRY_WAIT, 1)
        # When worker B starts, it takes "stuck" over as attempt 2 at once (the lease is 10 minutes)
        second = start_worker(cloud, tmp_path, "worker-b")

        def stuck_done() -> bool:
            record = store.get_execution("default", "stuck", slot_key(slot))
            return record is not None and record.status is ExecutionStatus.SUCCEEDED

        wait_for(stuck_done, "the takeover of the released run")
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0
    finally:
        stop_process(first)
        if second is not None:
            stop_process(second)
        (tmp_path / "go-stuck").touch()  # let go of anything still waiting
    # Then each slot succeeded exactly once; "stuck" lists its released attempt; nothing is left over
    stuck = store.get_execution("default", "stuck", slot_key(slot))
    assert stuck is not None
    assert [(a.attempt, a.status.value) for a in stuck.attempts] == [(1, "RETRY_WAIT"), (2, "SUCCEEDED")]
    done = sorted(p.name for p in tmp_path.glob("done-*"))
    assert done == ["done-quick-1", "done-stuck-2"]
    assert not (tmp_path / "started-quick-2").exists()
    leftover = cloud.sqs.receive_message(QueueUrl=cloud.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
    assert leftover.get("Messages", []) == []
    failed = cloud.sqs.receive_message(QueueUrl=cloud.failed_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
    assert failed.get("Messages", []) == []


# --------------------------------------------------------------------------- in one process


def test_runs_several_at_once_heartbeats_and_never_exceeds_its_concurrency(tmp_path: Path) -> None:
    from execution_harness import LONG, Rig
    from punctual.execution.worker_service import WorkerService
    from punctual.models import ExecutionStatus
    from punctual.runtime.clock import SystemClock
    from punctual.store.memory import MemoryStore
    from punctual.timing.timers import slot_key

    # Given five held ECS runs and a service with three slots and a short heartbeat
    clock = SystemClock()
    rig = Rig(MemoryStore(), clock)  # type: ignore[arg-type]
    rig.target = GatedTarget(tmp_path)  # type: ignore[assignment]
    now = clock.now().replace(microsecond=0)
    names = [f"job-{i}" for i in range(5)]
    for name in names:
        job = rig.add_job(name, runtime="ecs", timeout_seconds=3600, payload={"hold_attempt": 1})
        rig.send(rig.message(job, now), queue=LONG)
    service = WorkerService(
        rig.worker(lease_timers=True, lease_s=30),
        [LONG],
        concurrency=3,
        wait_s=0,
        grace_s=30,
        heartbeat_s=0.05,
    )
    runner = threading.Thread(target=service.run, daemon=True)
    runner.start()
    try:
        # When three have started
        wait_for(lambda: len(list(tmp_path.glob("started-*"))) == 3, "three runs to start")
        first_three = {p.name.removeprefix("started-").removesuffix("-1") for p in tmp_path.glob("started-*")}
        # Then they heartbeat (their leases keep being renewed) and no fourth starts meanwhile
        wait_for(lambda: rig.metrics.total("Heartbeats") >= 6, "heartbeats")
        assert len(list(tmp_path.glob("started-*"))) == 3
        # When they finish, the other two run
        for name in first_three:
            (tmp_path / f"go-{name}").touch()
        wait_for(lambda: len(list(tmp_path.glob("started-*"))) == 5, "the remaining runs to start")
        for name in names:
            (tmp_path / f"go-{name}").touch()
        wait_for(lambda: len(list(tmp_path.glob("done-*"))) == 5, "all runs to finish")
    finally:
        service.stop()
        runner.join(timeout=30)
    assert not runner.is_alive()
    for name in names:
        record = rig.store.get_execution("default", name, slot_key(now))
        assert record is not None and (record.status, record.attempt) == (ExecutionStatus.SUCCEEDED, 1)
    assert rig.queues.all_messages() == []


class _GroupBatches:
    """In-memory FIFO queues that, like SQS FIFO, may return several messages of one group in
    one receive (the in-memory queues return one a group)."""

    @staticmethod
    def make(now: Callable[[], datetime]) -> Any:
        from punctual.dispatch.queues import MemoryQueues, Received

        class Queues(MemoryQueues):
            def receive(self, queue_url: str, max_messages: int, wait_s: int, visibility_s: int) -> list[Any]:
                with self._lock:
                    at = self.now()
                    blocked = {
                        s.message.group_id for s in self.queues.get(queue_url, []) if s.visible_at > at
                    }
                    out = []
                    for stored in self.queues.get(queue_url, []):
                        if stored.message.group_id in blocked or len(out) == max_messages:
                            continue
                        stored.receive_count += 1
                        stored.receipt = f"r{stored.message_id}-{stored.receive_count}"
                        stored.visible_at = at + timedelta(seconds=visibility_s)
                        out.append(
                            Received(stored.message, stored.receipt, stored.receive_count, stored.message_id)
                        )
                    return out

            def invisible(self, queue_url: str) -> list[bool]:
                with self._lock:
                    return [s.visible_at > self.now() for s in self.queues.get(queue_url, [])]

        return Queues(now=now)


def test_slots_of_one_group_received_together_keep_their_visibility_while_they_wait(tmp_path: Path) -> None:
    from execution_harness import LONG, Rig
    from punctual.execution.worker_service import WorkerService
    from punctual.models import ExecutionStatus, Overlap
    from punctual.runtime.clock import SystemClock
    from punctual.store.memory import MemoryStore
    from punctual.timing.timers import slot_key

    # Given two slots of one queue-overlap job received in one batch (one FIFO group), the first
    # held for longer than the lease of a few seconds
    clock = SystemClock()
    rig = Rig(MemoryStore(), clock)  # type: ignore[arg-type]
    rig.queues = _GroupBatches.make(clock.now)
    rig.target = GatedTarget(tmp_path)  # type: ignore[assignment]
    now = clock.now().replace(microsecond=0)
    job = rig.add_job(
        "queued", runtime="ecs", timeout_seconds=3600, overlap=Overlap.QUEUE, payload={"hold_attempt": 1}
    )
    slots = [now - timedelta(minutes=1), now]
    rig.send(*(rig.message(job, slot) for slot in slots), queue=LONG)
    service = WorkerService(
        rig.worker(lease_timers=True, lease_s=4), [LONG], concurrency=2, wait_s=0, grace_s=30
    )
    runner = threading.Thread(target=service.run, daemon=True)
    runner.start()
    try:
        wait_for(lambda: (tmp_path / "started-queued-1").exists(), "the first slot to start")
        # When the first has run for more than a lease (its own heartbeats say so)
        wait_for(lambda: rig.metrics.total("Heartbeats") >= 3, "three heartbeats of the first run")
        # Then the second, waiting its turn, is still in flight: not back in the queue for another
        assert rig.queues.invisible(LONG) == [True, True]
        (tmp_path / "go-queued").touch()
        wait_for(lambda: not rig.queues.all_messages(LONG), "both slots to finish")
    finally:
        (tmp_path / "go-queued").touch()
        service.stop()
        runner.join(timeout=30)
    assert not runner.is_alive()
    for slot in slots:
        record = rig.store.get_execution("default", "queued", slot_key(slot))
        assert record is not None and (record.status, record.attempt) == (ExecutionStatus.SUCCEEDED, 1)


def test_a_run_past_sqss_visibility_cap_is_reported_for_the_scale_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from execution_harness import LONG, Rig
    from punctual.dispatch.queues import MemoryQueues
    from punctual.execution import worker_service
    from punctual.runtime.clock import SystemClock
    from punctual.store.memory import MemoryStore

    class CappedQueues(MemoryQueues):
        """SQS past a message's 12 hours in flight: its visibility cannot be extended."""

        def change_visibility(self, queue_url: str, receipt: str, visibility_s: int) -> None:
            raise RuntimeError("Total VisibilityTimeout for the message is beyond the limit [43200 seconds]")

        def change_visibility_batch(self, queue_url: str, receipts: Any, visibility_s: Any) -> list[str]:
            return list(receipts)  # (each entry of SQS's batch fails alike; a claimed run's message is held)

    monkeypatch.setattr(worker_service, "DETACHED_REPORT_S", 0.05)
    # Given a long ECS run whose message can no longer be kept in flight
    clock = SystemClock()
    rig = Rig(MemoryStore(), clock)  # type: ignore[arg-type]
    rig.queues = CappedQueues(now=clock.now)
    rig.target = GatedTarget(tmp_path)  # type: ignore[assignment]
    job = rig.add_job("long", runtime="ecs", timeout_seconds=3600, payload={"hold_attempt": 1})
    rig.send(rig.message(job, clock.now().replace(microsecond=0)), queue=LONG)
    service = worker_service.WorkerService(
        rig.worker(lease_timers=True, lease_s=30), [LONG], wait_s=0, grace_s=30, heartbeat_s=0.05
    )
    runner = threading.Thread(target=service.run, daemon=True)
    runner.start()
    try:
        # When its heartbeat lets go of the message (no message of it in flight any more)
        wait_for(lambda: (tmp_path / "started-long-1").exists(), "the run to start")
        wait_for(lambda: not rig.queues.all_messages(LONG), "the run to let go of its message")
        # Then the task reports the run it holds, for the service's scale-in to count
        wait_for(lambda: rig.metrics.total("RunsDetached") >= 2, "the detached run to be reported")
        (tmp_path / "go-long").touch()
        wait_for(lambda: (tmp_path / "done-long-1").exists(), "the run to finish")
    finally:
        (tmp_path / "go-long").touch()
        service.stop()
        runner.join(timeout=30)
    assert not runner.is_alive()


class CancellableTarget:
    """A long run that ends only when it is cancelled (or, ``stubborn``, when the test ends):
    it notes what the slot's record said at the moment it was asked to stop."""

    def __init__(self, store: Any, stubborn: bool = False) -> None:
        self.store = store
        self.stubborn = stubborn
        self.started = threading.Event()
        self.free = threading.Event()  # the end of the test frees a stubborn run
        self.status_when_cancelled: list[str] = []

    def invoke(self, target: Any, payload: Any, ctx: SlotContext) -> TargetResult:
        self.started.set()
        if self.stubborn:
            self.free.wait(60)
            return TargetResult.ok("finished late")
        if not ctx.cancel.wait(60):
            return TargetResult.ok("never cancelled")
        record = self.store.get_execution(ctx.tenant, ctx.job_id, ctx.slot)
        self.status_when_cancelled.append(record.status.value if record else "none")
        return TargetResult.stopped_early("stopped: cancelled")


@pytest.mark.parametrize("stubborn", [False, True], ids=["stoppable", "stubborn"])
def test_the_drain_stops_runs_before_handing_them_back(stubborn: bool) -> None:
    from execution_harness import LONG, Rig
    from punctual.dispatch.queues import MessageKind
    from punctual.execution.worker_service import WorkerService
    from punctual.models import ExecutionStatus
    from punctual.runtime.clock import SystemClock
    from punctual.store.memory import MemoryStore
    from punctual.timing.timers import slot_key

    # Given a long ECS run that outlasts the grace period
    clock = SystemClock()
    rig = Rig(MemoryStore(), clock)  # type: ignore[arg-type]
    target = CancellableTarget(rig.store, stubborn=stubborn)
    now = clock.now().replace(microsecond=0)
    job = rig.add_job("long", runtime="ecs", timeout_seconds=3600)
    rig.send(rig.message(job, now), queue=LONG)
    service = WorkerService(
        rig.worker(lease_timers=True, lease_s=600, target=target),  # type: ignore[arg-type]
        [LONG],
        wait_s=0,
        grace_s=0.2,
        stop_s=0.5 if stubborn else 30,
        heartbeat_s=0.05,
    )
    runner = threading.Thread(target=service.run, daemon=True)
    runner.start()
    try:
        assert target.started.wait(30), "the run never started"
        # When the service is stopped (SIGTERM)
        service.stop()
        runner.join(60)
        assert not runner.is_alive()
    finally:
        target.free.set()
    record = rig.store.get_execution("default", "long", slot_key(now))
    assert record is not None and (record.status, record.releases) == (ExecutionStatus.RETRY_WAIT, 1)
    [takeover] = rig.queues.all_messages(LONG)
    assert (takeover.attempt, takeover.kind) == (2, MessageKind.TAKEOVER)
    if stubborn:
        # Then a run no adapter can cut short is handed back all the same, and counted
        assert rig.metrics.total("RunsAbandoned") == 1
    else:
        # Then the run was stopped while it still held the slot, and only then handed back
        assert target.status_when_cancelled == ["RUNNING"]
        assert rig.metrics.total("RunsAbandoned") == 0
        assert [(a.attempt, a.status.value) for a in record.attempts] == [(1, "RETRY_WAIT")]


if __name__ == "__main__":  # the worker process of the SIGTERM test
    from punctual.execution.worker_service import main

    sys.exit(main(invoker=GatedTarget(Path(sys.argv[1]))))


def test_a_burst_task_deletes_its_messages_ten_at_a_time() -> None:
    from execution_harness import SHORT, FakeTarget, Rig
    from punctual.dispatch.queue_acks import BatchedDeletes
    from punctual.execution.worker_service import WorkerService
    from punctual.models import ExecutionStatus
    from punctual.runtime.clock import SystemClock
    from punctual.store.memory import MemoryStore
    from punctual.timing.timers import slot_key

    # Given 30 slots on the short queue and a burst task (short lane) whose deletes are batched
    # (a linger longer than the test: only full batches, and what the drain flushes, go out)
    clock = SystemClock()
    rig = Rig(MemoryStore(), clock)  # type: ignore[arg-type]
    rig.target = FakeTarget()
    now = clock.now().replace(microsecond=0)
    names = [f"job-{i:02d}" for i in range(30)]
    for name in names:
        rig.send(rig.message(rig.add_job(name), now), queue=SHORT)
    acks = BatchedDeletes(rig.queues, linger_s=3600)
    service = WorkerService(
        rig.worker(lease_timers=True, queues=acks), [SHORT], concurrency=8, wait_s=0, grace_s=30
    )
    runner = threading.Thread(target=service.run, daemon=True)
    runner.start()
    try:
        # When every slot has run
        wait_for(
            lambda: all(
                (r := rig.store.get_execution("default", n, slot_key(now))) is not None
                and r.status is ExecutionStatus.SUCCEEDED
                for n in names
            ),
            "all 30 slots to succeed",
        )
        wait_for(lambda: acks.requests == 3, "three full delete batches")
    finally:
        service.stop()
        runner.join(timeout=30)
    # Then its 30 messages were deleted in three DeleteMessageBatch requests, not 30 deletes
    assert not runner.is_alive()
    assert rig.queues.all_messages() == []
    assert rig.queues.delete_requests == 3
