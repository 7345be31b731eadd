"""A release asks a slot's rate budget for a placement only when one can apply (checked once per
job): the target's own budget, or the deployment's for its tenant or for every tenant. A deployment
budget smooths a burst as the target's own budget of the same rate does."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from factories import job as make_job
from punctual.dispatch.polling import PollerConfig
from punctual.dispatch.polling.release import SlotReleaser
from punctual.dispatch.queues import MemoryQueues
from punctual.runtime.clock import ManualClock
from punctual.runtime.observability import RecordingMetrics
from punctual.store.memory import MemoryStore
from punctual.timing.slots import fire_timer
from punctual.timing.timers import TimerLayout

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
HOST = "hooks.example.com"


def _released(own: float | None, deployment: dict[tuple[str, str], float]) -> list[tuple[str, str, str]]:
    """(job, slot, not_before) of each message a burst of 40 slots at T is released as."""
    clock = ManualClock(T)
    store, queues, metrics = MemoryStore(), MemoryQueues(now=clock.now), RecordingMetrics()
    layout = TimerLayout(4, 2, 180)
    config = PollerConfig(
        layout=layout, short_queue_urls=("short",), max_lateness_s=10, rate_budgets=deployment
    )
    timers = []
    for index in range(40):
        target = {"type": "http", "url": f"https://{HOST}/x", "rate_budget_per_second": own}
        job = make_job(f"job-{index:04d}", "cron(0 * * * ? *)", now=T - timedelta(hours=1), target=target)
        store.create_job(job, None, max_jobs=10_000)
        timers.append(fire_timer(layout, job, T, T - timedelta(hours=1)))
    with ThreadPoolExecutor(2) as pool:
        SlotReleaser(store, queues, clock, config, metrics, pool).release(timers)
    return sorted((s.message.job_id, s.message.slot, s.message.not_before) for s in queues.queues["short"])


@pytest.mark.parametrize("tenant", ["default", "*"])
def test_a_deployment_budget_smooths_a_burst_as_the_targets_own_does(tenant: str) -> None:
    own = _released(20.0, {})
    deployment = _released(None, {(tenant, HOST): 20.0})
    assert deployment == own
    assert sum(1 for *_, not_before in own if not_before) > 10  # (smoothed: not all at once)


def test_no_budget_for_the_target_releases_every_slot_at_once() -> None:
    released = _released(None, {("default", "elsewhere.example.com"): 20.0})
    assert len(released) == 40 and not any(not_before for *_, not_before in released)
