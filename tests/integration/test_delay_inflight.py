"""A ``delay(...)`` job changed (paused and resumed, replaced, its secret rotated) while one of
its runs is in flight goes on N after that run's end (QA: a 3-minute run of a ``delay(1 minute)``
job paused and resumed 20 s in was overlapped by two runs of the chain the resume started)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from execution_harness import LAYOUT, LONG, SHORT, Delivery, Rig
from factories import spec
from punctual.auditing import AuditConfig, ChainAuditor, Repairer
from punctual.auditing.liveness import delay_heads
from punctual.delivery.targets.base import TargetResult
from punctual.execution.ports import Claim
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.store.memory import MemoryStore
from punctual.timing.timers import Lane, minute_of, slot_instant
from punctual.usecases.delay_chains import defer_to_run, settle
from punctual.usecases.jobs import JobService, QueueRouting

TENANT = "default"
FIRST = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


class World:
    def __init__(self) -> None:
        self.clock = ManualClock(FIRST - timedelta(minutes=1))
        self.rig = Rig(MemoryStore(), self.clock)
        self.jobs = JobService(
            self.rig.store, self.rig.queues, self.clock, LAYOUT, QueueRouting((SHORT,), (LONG,))
        )
        self.worker = self.rig.worker()
        self.jobs.register(TENANT, spec("delay(1 minute)", payload={"v": 1}), job_id="d")

    def start_first(self) -> Claim:
        """10:00 released and claimed: a run that lasts until it is finished."""
        self.clock.set(FIRST)
        self.rig.poll()
        [received] = self.rig.queues.receive(SHORT, 10, 0, 900)
        claim = self.worker.claim(received.message, Delivery(SHORT, received.receipt, 1))
        self.rig.queues.delete(SHORT, received.receipt)
        return claim

    def until(self, seconds: int) -> None:
        while self.clock.now() < FIRST + timedelta(seconds=seconds):
            self.clock.set(self.clock.now() + timedelta(seconds=5))
            self.rig.poll()
            self.rig.work_until_idle(self.worker)

    def runs(self) -> list[str]:
        page = self.rig.store.list_executions(TENANT, "d", limit=50, newest_first=False)
        return [record.slot for record in page.items if record.status is ExecutionStatus.SUCCEEDED]


def _pause_resume(world: World) -> None:
    world.jobs.pause(TENANT, "d")
    world.clock.set(world.clock.now() + timedelta(seconds=10))
    world.jobs.resume(TENANT, "d")


CHANGES: dict[str, Callable[[World], None]] = {
    "pause and resume": _pause_resume,
    "replace": lambda world: world.jobs.replace(TENANT, "d", spec("delay(1 minute)", payload={"v": 2})),
    "identical replace": lambda world: world.jobs.replace(
        TENANT, "d", spec("delay(1 minute)", payload={"v": 1})
    ),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_during_a_run_goes_on_n_after_that_run_ends(change: str) -> None:
    world = World()
    claim = world.start_first()
    world.clock.set(FIRST + timedelta(seconds=10))
    CHANGES[change](world)
    world.until(180)  # the 10:00 run still going: nothing else starts
    assert world.rig.queues.all_messages(SHORT) == []
    world.clock.set(FIRST + timedelta(seconds=180))
    world.worker.finish(claim, TargetResult.ok())  # ends 10:03:00
    world.until(330)
    assert world.runs() == [
        "2026-11-30T10:00:00Z",
        "2026-11-30T10:04:00Z",  # N after the end
        "2026-11-30T10:05:00Z",  # the instant target answers at once: N after each
    ]


def test_a_run_that_ends_while_the_change_is_written_gets_its_next_timer_from_the_change() -> None:
    world = World()
    claim = world.start_first()
    world.clock.set(FIRST + timedelta(seconds=10))
    store = world.rig.store
    current = world.jobs.get(TENANT, "d")
    # The change reads the run in flight; the run ends before the change's write lands, and its
    # end chains for the version it read, which the change then makes stale...
    changed = current.model_copy(update={"version": current.version + 1})
    job, timers = defer_to_run(store, changed, [], before=current, layout=LAYOUT)
    assert job.delay_after == "2026-11-30T10:00:00Z" and timers == []
    world.worker.finish(claim, TargetResult.ok())
    # ... so the read after the write finds the run ended and writes its next timer for the job
    # as changed
    store.replace_job(job, current.version, [])
    settle(store, LAYOUT, job, world.clock.now())
    world.until(120)
    assert world.runs() == ["2026-11-30T10:00:00Z", "2026-11-30T10:01:10Z"]


def test_the_auditor_expects_the_chain_from_the_run_a_change_left_it_to() -> None:
    world = World()
    claim = world.start_first()
    world.clock.set(FIRST + timedelta(seconds=10))
    _pause_resume(world)
    world.clock.set(FIRST + timedelta(seconds=180))
    ended = world.worker.finish(claim, TargetResult.ok())
    job = world.jobs.get(TENANT, "d")
    newest = world.rig.store.get_execution(TENANT, "d", "2026-11-30T10:00:00Z")
    assert ended is not None and newest is not None and job.delay_after == newest.slot
    assert [slot for slot, _ in delay_heads(job, newest)] == [FIRST + timedelta(minutes=4)]


def test_the_chain_auditor_repairs_nothing_while_the_deferred_run_lasts() -> None:
    # Review: it took the change's first slot for the head, found no timer and armed a second
    # chain beside the run (two runs a period once the run ended)
    world = World()
    claim = world.start_first()
    world.clock.set(FIRST + timedelta(seconds=10))
    world.jobs.replace(TENANT, "d", spec("delay(1 minute)", payload={"v": 2}))
    config = AuditConfig(layout=LAYOUT, period_minutes=1, grace_s=120, inflight_grace_s=600, repair=True)
    repairer = Repairer(world.rig.store, LAYOUT, 30, world.rig.queues, QueueRouting((SHORT,), (LONG,)))
    auditor = ChainAuditor(world.rig.store, world.clock, config, repairer, RecordingMetrics())
    repairs = []
    for minute in range(2, 5):
        world.clock.set(FIRST + timedelta(minutes=minute, seconds=30))
        for lane, shards in ((Lane.FAR, LAYOUT.shard_count), (Lane.NEAR, LAYOUT.near_shard_count)):
            world.rig.store.advance_watermarks(lane, list(range(shards)), minute_of(world.clock.now()))
        repairs += auditor.audit(range(LAYOUT.shard_count)).repairs
        world.rig.poll()
        world.rig.work_until_idle(world.worker)
    assert repairs == [] and world.runs() == []  # the 10:00 run has not ended: nothing else ran
    world.worker.finish(claim, TargetResult.ok())  # 10:04:30
    world.until(60 * 8)
    assert world.runs()[:3] == ["2026-11-30T10:00:00Z", "2026-11-30T10:05:30Z", "2026-11-30T10:06:30Z"]


def test_run_now_records_do_not_hide_the_run_in_flight() -> None:
    world = World()
    world.start_first()
    for n in range(6):
        world.jobs.trigger(TENANT, "d", request_key=f"k{n}")
    world.rig.work_until_idle(world.worker)
    world.clock.set(FIRST + timedelta(seconds=10))
    world.jobs.replace(TENANT, "d", spec("delay(1 minute)", payload={"v": 2}))
    assert world.jobs.get(TENANT, "d").delay_after == "2026-11-30T10:00:00Z"


def test_a_cron_job_made_delay_during_a_run_starts_its_chain_at_once() -> None:
    # Review: the run's end (a cron job's) never chains, so deferring to it lost the chain
    world = World()
    world.jobs.replace(TENANT, "d", spec("cron(* * * * ? *)"))
    claim = world.start_first()
    world.clock.set(FIRST + timedelta(seconds=10))
    world.jobs.replace(TENANT, "d", spec("delay(1 minute)"))
    assert world.jobs.get(TENANT, "d").delay_after is None
    world.until(100)
    world.worker.finish(claim, TargetResult.ok())
    world.until(200)
    assert world.runs()[:3] == ["2026-11-30T10:00:00Z", "2026-11-30T10:01:10Z", "2026-11-30T10:02:10Z"]


@pytest.mark.parametrize("released", [True, False], ids=["released", "not-released-yet"])
@pytest.mark.parametrize("changes", [1, 2])
@pytest.mark.parametrize("change", ["replace", "identical replace"])
def test_a_change_just_after_a_slot_came_due_leaves_one_chain(
    change: str, changes: int, released: bool
) -> None:
    # QA: a replace a second after 10:00 was released (its message not yet claimed, so no record)
    # started a chain beside that slot's, whose run (owed to the new spec) chained too: two runs a
    # minute from then on. The change's chain is the one that goes on; the released slot runs once
    world = World()
    world.clock.set(FIRST)
    if released:
        world.rig.poll()  # 10:00 is sent; no worker has it yet
    for n in range(changes):
        world.clock.set(FIRST + timedelta(seconds=1 + 2 * n))
        CHANGES[change](world)
    world.until(400)
    runs = [slot_instant(slot) for slot in world.runs()]
    assert (runs[0] == FIRST) is (released or change == "replace")  # (a poller met it after: owed)
    gaps = [(later - earlier).total_seconds() for earlier, later in pairwise(runs)]
    assert len(runs) >= 6 and all(gap >= 60 for gap in gaps), runs  # one chain: N after each run's end


def test_a_replace_while_a_retry_waits_starts_the_chain_from_the_change_not_the_retry() -> None:
    # Given a delay(1 minute) job whose 10:00 run failed and waits ten minutes for its retry
    world = World()
    retry = {"max_attempts": 3, "backoff": "fixed", "base_seconds": 600, "max_seconds": 600, "jitter": False}
    world.jobs.replace(TENANT, "d", spec("delay(1 minute)", payload={"v": 1}, retry=retry))
    claim = world.start_first()
    world.worker.finish(claim, TargetResult.retryable("HTTP 503"))
    # When a replace changes its spec 10 s later (the target fixed): that retry will never run
    world.clock.set(FIRST + timedelta(seconds=10))
    world.jobs.replace(TENANT, "d", spec("delay(1 minute)", payload={"v": 2}, retry=retry))
    world.until(150)
    # Then the chain goes on N after the change, not N after the retry's instant (10:11)
    assert world.runs() == ["2026-11-30T10:01:10Z", "2026-11-30T10:02:10Z"]
    # And the old slot's retry, due at 10:10, is SUPERSEDED, and starts no second chain
    world.until(12 * 60 + 5)
    record = world.rig.store.get_execution(TENANT, "d", "2026-11-30T10:00:00Z")
    assert record is not None and record.status is ExecutionStatus.SUPERSEDED
    runs = [slot_instant(slot) for slot in world.runs()]
    assert all(b - a == timedelta(minutes=1) for a, b in pairwise(runs))
