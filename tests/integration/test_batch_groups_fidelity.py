"""A 500-job batch stored a group a transaction (issue 32) over the in-memory store as contentious
as DynamoDB (:class:`~punctual.store.memory.fidelity.Fidelity`): transactions cancelled for
conflicts at random and on script, one group through every retry. The caller repeats the batch
for the jobs answered 503, as a client does; every job ends stored exactly once, each with its
first timer (a job stored without one would never fire), counted once in its tenant's job count
and peak profile."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from execution_harness import LAYOUT, LONG, SHORT
from punctual.api.batch import BatchInput, create_batch
from punctual.api.paging import TokenCodec
from punctual.api.wiring import Services
from punctual.dispatch.queues import MemoryQueues, QueueRouting
from punctual.runtime.clock import ManualClock
from punctual.runtime.settings import Settings
from punctual.security.peaks import PeakLimits, Profile, job_profile
from punctual.security.tenant_quotas import PeakQuota
from punctual.store.conflicts import CONFLICT_RETRY
from punctual.store.memory import MemoryStore
from punctual.store.memory.fidelity import Fidelity
from punctual.usecases.jobs import JobService

TENANT = "default"


def _services(store: MemoryStore, clock: ManualClock) -> Services:
    peaks = PeakQuota(store, PeakLimits(per_second=100_000, per_minute=1_000_000))
    jobs = JobService(
        store,
        MemoryQueues(clock.now),
        clock,
        LAYOUT,
        QueueRouting((SHORT,), (LONG,)),
        max_jobs_per_tenant=10_000,
        peaks=peaks,
    )
    return Services(Settings(api_batch_concurrency=4), jobs, store, TokenCodec(b"k" * 32), dynamodb=None)


def test_a_500_job_batch_through_cancelled_transactions_stores_each_job_once_with_its_timer(
    t0: datetime,
) -> None:
    clock = ManualClock(t0)
    fidelity = Fidelity(conflict_share=0.3, seed=11, clock=lambda: clock.now().timestamp())
    store = MemoryStore(fidelity=fidelity)
    services = _services(store, clock)
    # One group cancelled through every retry (503 for its jobs), the next ones once each
    fidelity.inject_conflict("create_job_group", times=CONFLICT_RETRY.attempts)
    fidelity.inject_conflict("create_job_group", times=3)
    ids = [f"j{n:03d}" for n in range(500)]
    schedules = ["rate(5 minutes)", "cron(0 9 * * ? *)", "rate(1 hour)", "at(2026-12-24T18:00:00)"]
    batch = BatchInput.model_validate(
        {
            "jobs": [
                {
                    "id": i,
                    "job": {
                        "schedule": schedules[n % 4],
                        "target": {"type": "sqs", "queue_arn": f"arn:aws:sqs:us-east-1:123456789012:q{n}"},
                    },
                }
                for n, i in enumerate(ids)
            ]
        }
    )
    first = create_batch(services, TENANT, batch)
    busy = [r for r in first.results if r.status == "failed"]
    assert busy and {r.code for r in busy} == {503}, {r.code for r in busy}
    assert first.created == 500 - len(busy)
    assert fidelity.contention.scripted == []  # every scripted cancel was met by a group
    again = create_batch(services, TENANT, batch)  # the caller repeats the batch
    assert (again.created, again.exists, again.failed) == (len(busy), 500 - len(busy), 0)
    assert {r.id for r in again.results if r.status == "created"} == {r.id for r in busy}
    stored = store.list_jobs(TENANT, 1000).items
    assert sorted(j.id for j in stored) == ids
    timers = Counter(timer.job_id for bucket in store._buckets.values() for _, timer in bucket)
    assert timers == dict.fromkeys(ids, 1)  # each with its first timer, once
    assert store._job_counts[TENANT] == 500
    doc, _ = store.get_peaks(TENANT)
    expected = Profile()
    for job in stored:
        expected = expected.combined(job_profile(job))
    assert Profile.from_doc(doc) == expected  # counted once each, cancelled groups taken back
