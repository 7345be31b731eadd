"""New jobs a group at a time in DynamoDB (:mod:`punctual.store.job_groups`): one transaction of
each job's item and listing, the tenant counter's update (adding the group's jobs and rate,
conditioned on the quotas after it) and each job's first timer.

A job item that exists already fails its create condition (:data:`.schema.CREATE`) and DynamoDB cancels
the whole transaction, naming each item's reason in ``CancellationReasons`` in request order:
those jobs' ids are answered, nothing is written, and the caller writes the rest again. A
cancellation for a conflict alone is retried by the client (:mod:`.conflicts`, a
``ClientRequestToken`` per try), as every transaction is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from punctual.models import Job
from punctual.store.base import TenantLimitError, TriggerRateLimitError
from punctual.store.dynamo import schema
from punctual.store.dynamo.conflicts import CONDITION_REASON, cancellation_reasons
from punctual.store.dynamo.jobs import DynamoJobs
from punctual.store.job_groups import GROUP_MAX_ITEMS, JobGroupRepository
from punctual.timing.timers import Timer


class DynamoJobGroups(DynamoJobs, JobGroupRepository):
    """:meth:`create_job_group` over the job store's items (a mixin of the DynamoDB store)."""

    def create_job_group(
        self, jobs: Sequence[tuple[Job, Timer | None]], max_jobs: int, max_trigger_rate: int | None = None
    ) -> tuple[str, ...]:
        if not jobs:
            return ()
        tenant = jobs[0][0].tenant
        if len(jobs) > max_jobs:
            raise TenantLimitError(
                f"{len(jobs)} jobs would pass {max_jobs}, the most a tenant may have", max_jobs
            )
        rate = sum(job.trigger_rate for job, _ in jobs)
        if max_trigger_rate is not None and rate > max_trigger_rate:
            raise TriggerRateLimitError(max_trigger_rate, None, rate)
        if any(timer is not None for _, timer in jobs):
            self.check_layout()
        # The jobs' items (the conditions that decide) first, the counter after them, the first
        # timers last, as a single create orders them: on a table without transactions
        # (:mod:`.sequenced`) an existing job then stops the group before the counter is written,
        # where undoing it put back the item as read, over the counts registered meanwhile.
        items: list[dict[str, Any]] = []
        owner: list[str | None] = []  # the job of each item (None: a listing, the counter, a timer)
        timers: list[dict[str, Any]] = []
        for job, timer in jobs:
            if job.tenant != tenant:
                raise ValueError("a job group is one tenant's")
            attrs = self._job_attrs(job)
            job_item = {"Item": {**schema.job_key(tenant, job.id), **attrs}, **schema.CREATE.fields()}
            listing = {**schema.listing_key(tenant, job.id), "state": attrs["state"], "doc": attrs["doc"]}
            items += [{"Put": {"TableName": self.table, **job_item}}]
            items += [{"Put": {"TableName": self.table, "Item": listing}}]
            owner += [job.id, None]
            if timer is not None:
                timers.append({"Put": {"TableName": self.table, "Item": self._timer_item(timer)}})
        counter = len(items)
        items += [{"Update": self._meta_update(tenant, len(jobs), max_jobs, rate, max_trigger_rate)}, *timers]
        owner += [None] * (1 + len(timers))
        if len(items) > GROUP_MAX_ITEMS:
            raise ValueError(f"a job group of {len(items)} items, more than {GROUP_MAX_ITEMS}")
        try:
            self._transact(items)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            reasons = cancellation_reasons(exc)
            failed = [n for n, code in enumerate(reasons) if code == CONDITION_REASON]
            taken = tuple(owner[n] for n in failed if n < len(owner) and owner[n] is not None)
            if taken:
                return taken  # type: ignore[return-value]
            if failed == [counter]:
                old = exc.response["CancellationReasons"][counter].get("Item") or {}
                raise self._group_quota_error(old, len(jobs), max_jobs, rate, max_trigger_rate) from None
            raise
        return ()

    @staticmethod
    def _group_quota_error(
        old: dict[str, Any], count: int, max_jobs: int, rate: int, max_rate: int | None
    ) -> TenantLimitError:
        """Which quota the group's counter update would pass, from the counter item as it was."""
        held = int(old["job_count"]["N"]) if "job_count" in old else 0
        if held + count > max_jobs:
            return TenantLimitError(
                f"tenant has {held} jobs; {count} more would pass {max_jobs}, the most it may have", max_jobs
            )
        current = int(old["trigger_rate"]["N"]) if "trigger_rate" in old else 0
        return TriggerRateLimitError(max_rate or 0, current, rate)
