"""The port of registering new jobs a group at a time (``POST /v1/job-batches``, issue 32).

One job's creation is one transaction of four items (the job, its listing, its tenant's counter,
its first timer): 8 write units, and one write of the counter item per job, which one item takes
about 500 times a second. A group writes many new jobs in one transaction with ONE update of the
counter (``ADD`` the group's jobs and trigger rate, conditioned on the tenant's quotas still
holding after it): about 6 write units a job, and the counter written once per group.

A group is all or nothing, as DynamoDB's ``TransactWriteItems`` is: a job of it that exists
already, or a quota the group as a whole would pass, writes nothing of the group.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from punctual.models import Job
from punctual.timing.timers import Timer

GROUP_MAX_ITEMS = 100  # TransactWriteItems' limit: the counter and each job's job, listing and timer
GROUP_MAX_BYTES = 4 * 1024 * 1024 - 64 * 1024  # a transaction's 4 MB, less a margin for what is not counted


class JobGroupRepository(ABC):
    @abstractmethod
    def create_job_group(
        self, jobs: Sequence[tuple[Job, Timer | None]], max_jobs: int, max_trigger_rate: int | None = None
    ) -> tuple[str, ...]:
        """Store new jobs of one tenant (each with its listing and its first timer, none with
        ``after()`` parents or calendar uses), and add them to the tenant's job count and trigger
        rate, in one transaction (at most :data:`GROUP_MAX_ITEMS` items, :data:`GROUP_MAX_BYTES`).

        Returns the ids of the jobs that exist already: when there is any, nothing was written
        (the caller writes the others again, without them); else every job was written.

        Raises
        ------
        TenantLimitError
            With them the tenant would have more than ``max_jobs`` jobs (nothing was written).
        TriggerRateLimitError
            With them the tenant's trigger rate would pass ``max_trigger_rate`` (nothing written).
        """
