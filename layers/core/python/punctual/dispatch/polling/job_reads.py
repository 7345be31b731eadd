"""The jobs of the timers a release takes: read cheaply, and again strongly before any is dropped."""

from __future__ import annotations

from collections.abc import Sequence

from punctual.models import Job, JobState
from punctual.store.base import JobRepository
from punctual.timing.timers import CHAIN_KINDS, Timer

_ENABLED = JobState.ENABLED  # read once: an enum's member read through its class is slow (per timer)


def read_jobs(store: JobRepository, timers: Sequence[Timer]) -> dict[tuple[str, str], Job]:
    """The timers' jobs: read eventually consistently, and again strongly for every timer the
    first read would call stale.

    An eventually consistent read (half the cost) may answer a job as it was a moment ago:
    missing when it was just created, at its previous version when it was just resumed or
    replaced. Nothing is dropped on that answer alone: a job missing, not ENABLED, or at
    another version than its fire timer is read again strongly consistently, and only that
    answer decides. A job paused or replaced a moment ago may still release one more slot of
    the old version (the read is never ahead), which the worker's claim checks again.
    """
    keys = {(t.tenant, t.job_id) for t in timers}
    jobs = store.batch_get_jobs(keys, consistent=False)
    doubtful = {(t.tenant, t.job_id) for t in timers if not _current_for(t, jobs.get((t.tenant, t.job_id)))}
    if doubtful:
        fresh = store.batch_get_jobs(doubtful, consistent=True)
        for key in doubtful:
            if key in fresh:
                jobs[key] = fresh[key]
            else:
                jobs.pop(key, None)
    return jobs


def _current_for(timer: Timer, job: Job | None) -> bool:
    """Whether ``job``, as read, lets ``timer`` go ahead (False: the timer would be dropped)."""
    if job is None:
        return False
    if timer.kind in CHAIN_KINDS:
        return job.state is _ENABLED and job.version == timer.job_version
    return job.state is not JobState.DELETED


__all__ = ["read_jobs"]
