"""A replace that changes only a job's labels (name, description, tags) supersedes nothing (QA23):
a slot waiting for its retry still retries, and one queued still runs. Any other change of the spec
(the payload here) still supersedes what was released for the old one (punctual.execution.versions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from execution_harness import LAYOUT, LONG, SHORT, FakeTarget, Rig
from factories import spec
from punctual.delivery.targets.base import SlotContext, TargetResult
from punctual.models import ExecutionStatus
from punctual.runtime.clock import ManualClock
from punctual.store.memory import MemoryStore
from punctual.usecases.jobs import JobService, QueueRouting

TENANT = "default"
SLOT = "2026-12-01T10:00:00Z"
RETRY_IN_30S = {"max_attempts": 3, "backoff": "fixed", "base_seconds": 30, "jitter": False}


def T(m: int, s: float = 0) -> datetime:
    return datetime(2026, 12, 1, 10, m, tzinfo=UTC) + timedelta(seconds=s)


@pytest.mark.parametrize(
    ("change", "retried"),
    [
        ({"description": "now described"}, True),
        ({"name": "renamed", "tags": {"team": "b"}}, True),
        ({"payload": {"v": 2}}, False),  # the spec a retry would run changed: SUPERSEDED
    ],
)
def test_a_label_edit_keeps_a_waiting_retry(change: dict[str, Any], retried: bool) -> None:
    clock = ManualClock(T(0) - timedelta(seconds=30))
    calls: list[tuple[str, int]] = []

    def run(ctx: SlotContext) -> TargetResult:
        calls.append((ctx.slot, ctx.attempt))
        return TargetResult.retryable("HTTP 503") if ctx.attempt == 1 else TargetResult.ok()

    rig = Rig(MemoryStore(), clock, target=FakeTarget(run))
    jobs = JobService(rig.store, rig.queues, clock, LAYOUT, QueueRouting((SHORT,), (LONG,)))
    worker = rig.worker()
    base = spec("cron(0 10 * * ? *)", retry=RETRY_IN_30S, payload={"v": 1}, name="n", description="d")
    jobs.register(TENANT, base, job_id="j")

    def until(end: datetime) -> None:
        while clock.now() < end:
            clock.set(min(clock.now() + timedelta(seconds=1), end))
            rig.poll()
            rig.work_until_idle(worker, SHORT)

    until(T(0, 5))  # attempt 1 failed; attempt 2 is due at 10:00:30
    assert rig.store.get_execution(TENANT, "j", SLOT).status is ExecutionStatus.RETRY_WAIT
    jobs.replace(TENANT, "j", base.model_copy(update=change))
    until(T(1, 30))
    record = rig.store.get_execution(TENANT, "j", SLOT)
    if retried:
        assert record.status is ExecutionStatus.SUCCEEDED and calls == [(SLOT, 1), (SLOT, 2)]
    else:
        assert record.status is ExecutionStatus.SUPERSEDED and calls == [(SLOT, 1)]
