"""A job whose chain of slots has ended is marked COMPLETED by the worker, not by the poller.

A one-time ``at()`` job, or a job whose next slot would fall after its ``end_at``, has no next
timer after its last slot. The poller used to mark such a job COMPLETED itself, with a
transaction per job (the job item and its listing) on its release path: a burst of 1,000
one-time slots waited for 1,000 transactions of the poller's threads (p50 17 s in local mode
where recurring jobs took 6). Now the poller sends that slot's message with ``last`` set and
moves on; the worker that receives it (whatever the claim decides: a duplicate, a skip, a run)
marks the job COMPLETED with the same conditional write (on the job's version as read, while its
spec is still the one the slot was released for and it is enabled: a job re-specified or paused
meanwhile is left as its change made it; a secret rotation keeps the spec, and the slot its
last). A message is deleted only after it was handled, so the mark is made at least once; a
repeat finds the job COMPLETED (or changed) and writes nothing. A mark that fails (throttled)
on a slot the claim holds does not keep that slot from running: it is made again after the run's
finish (raised then, the message comes back and its redelivery makes it). Where no message is
sent for the last slot (it was missed, excluded, or a worker had already started it), the poller
still marks the job itself: a rare path, off the burst's.
"""

from __future__ import annotations

import logging
from typing import TypeGuard

from punctual.dispatch.queues import DispatchMessage
from punctual.models import Job, JobState
from punctual.runtime.clock import Clock
from punctual.runtime.observability import MetricsSink
from punctual.store.base import JobStore, VersionConflictError

log = logging.getLogger("punctual.execution")


def complete_job(store: JobStore, job: Job, clock: Clock) -> bool:
    """Mark ``job`` COMPLETED if it is still at its version (False: it changed meanwhile)."""
    done = job.model_copy(update={"state": JobState.COMPLETED, "updated_at": clock.now()})
    try:
        store.replace_job(done, expected_version=job.version)
    except VersionConflictError:  # someone changed the job meanwhile: their write stands
        log.info("job %s changed before it could be completed", job.id)
        return False
    # Anything else (a transaction conflict that outlived the store's retries included) is
    # raised: the message (or the release) is tried again, so a job is never left ENABLED with
    # no timer.
    return True


class ChainEnds:
    """Marks the job of a ``last`` message COMPLETED (see the module docstring)."""

    def __init__(self, store: JobStore, clock: Clock, metrics: MetricsSink) -> None:
        self.store = store
        self.clock = clock
        self.metrics = metrics

    def handled(self, message: DispatchMessage, job: Job | None) -> bool:
        """The worker handled ``message`` (``job``: the job its claim used, None when it had
        none); True when this marked the job COMPLETED."""
        if not message.last:
            return False
        read = job is None or job.version != message.job_version
        if read:
            job = self.store.get_job(message.tenant, message.job_id)
        if not (_still_last(job, message) and complete_job(self.store, job, self.clock)):
            if read:
                return False  # gone, re-specified, paused or already completed: nothing to mark
            # The claim's job changed since: a write that kept the spec (a secret rotation: QA26,
            # the job stayed ENABLED with no slot and no chain for good) leaves this its last slot
            job = self.store.get_job(message.tenant, message.job_id)
            if not (_still_last(job, message) and complete_job(self.store, job, self.clock)):
                return False
        self.metrics.add("JobsCompleted", 1)
        return True


def _still_last(job: Job | None, message: DispatchMessage) -> TypeGuard[Job]:
    """Whether ``job`` still ends with the slot of the ``last`` message: enabled, with the spec
    the slot was released for (a replace's chain, or a pause's resume, decides for itself)."""
    return job is not None and job.state is JobState.ENABLED and job.spec_since <= message.job_version
