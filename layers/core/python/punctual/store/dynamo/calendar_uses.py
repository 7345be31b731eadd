"""A job write, its calendar uses and its links as a dependent in one DynamoDB transaction.

A calendar's ``users`` set keeps it from being deleted (:mod:`.calendars`: a delete is
conditional on the set being empty). Written apart from the job, that record could be lost in
a race: two replaces of one job (one dropping the calendar, one keeping it) could remove the
other's record after it was written, and a calendar delete could prune the record of a job
whose create had not landed yet. So every job write (create, replace, delete) carries its
uses in its own transaction: an ``ADD`` of the job to each calendar it excludes, conditional on
the calendar existing, and a ``DELETE`` from each it no longer excludes. The job's own condition
(absent, or at the version read) and the calendars' are checked together; DynamoDB runs
transactions on one item one at a time, so no interleaving of creates, replaces, deletes and
calendar deletes ends with a job excluding a calendar that is gone.

DynamoDB cancels a transaction that meets another on one of its items (``TransactionConflict``)
rather than waiting: jobs written at once that share a calendar conflict on its item, so a
cancellation for a conflict alone is tried again, a few times, after a short backoff.
"""

from __future__ import annotations

import random
import time
from typing import Any

from botocore.exceptions import ClientError

from punctual.store.base import CalendarNotFoundError, CalendarUses
from punctual.store.dynamo import schema
from punctual.store.dynamo.base import DynamoBase
from punctual.store.dynamo.schema import calendar_key

CONFLICT_ROUNDS = 5
CHECK_FAILED = "ConditionalCheckFailed"  # a transaction item's cancellation reason
_CONFLICT = "TransactionConflict"


class DynamoCalendarUses(DynamoBase):
    """The transaction of a job write with its calendar uses (a mixin of the job and calendar stores)."""

    def _use_items(
        self, tenant: str, job_id: str, uses: CalendarUses, drop: list[str]
    ) -> list[dict[str, Any]]:
        """The transaction items of ``uses`` (adds, then the drops in ``drop``)."""
        items = []
        for name, present in [*((n, True) for n in uses.add), *((n, False) for n in drop)]:
            expr = schema.use_calendar(job_id, present)
            items.append(
                {"Update": {"TableName": self.table, "Key": calendar_key(tenant, name), **expr.fields()}}
            )
        return items

    def _transact_job_write(
        self,
        items: list[dict[str, Any]],
        tenant: str,
        job_id: str,
        uses: CalendarUses,
        links: dict[str, list[dict[str, Any]]] | None = None,
    ) -> None:
        """Run a job write (``items``, the job's own first) with its calendar uses and its links
        as a dependent (``links``: parent -> :meth:`_add_link` or :meth:`_remove_link`), in one
        transaction: a job is never stored without its calendar uses or its links.

        A link pair whose condition fails (the link already as wanted, or the parent gone) is left
        out and the rest tried again, as a drop from a calendar that is gone is.

        Raises
        ------
        CalendarNotFoundError
            A calendar to add does not exist (nothing was written).
        ClientError
            Any other cancellation (the caller reads the reasons of its own items) or error.
        """
        drop = list(uses.drop)
        pending = dict(links or {})
        for round_no in range(CONFLICT_ROUNDS):
            parents = list(pending)
            use_items = self._use_items(tenant, job_id, uses, drop)
            try:
                self._transact(items + use_items + [i for p in parents for i in pending[p]])
                return
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "TransactionCanceledException":
                    raise
                codes = [reason.get("Code") for reason in exc.response.get("CancellationReasons", [])]
                own, rest = codes[: len(items)], codes[len(items) :]
                adds, drops = rest[: len(uses.add)], rest[len(uses.add) : len(use_items)]
                pairs = rest[len(use_items) :]
                if CHECK_FAILED in own:
                    raise  # the job's own condition: the caller says which
                for name, code in zip(uses.add, adds, strict=False):
                    if code == CHECK_FAILED:
                        raise CalendarNotFoundError(name) from None
                missing = {name for name, code in zip(drop, drops, strict=False) if code == CHECK_FAILED}
                settled = [p for n, p in enumerate(parents) if CHECK_FAILED in pairs[2 * n : 2 * n + 2]]
                if missing or settled:  # nothing to do there: write without them
                    drop = [name for name in drop if name not in missing]
                    for parent in settled:
                        del pending[parent]
                    continue
                if _CONFLICT not in codes or round_no == CONFLICT_ROUNDS - 1:
                    raise
                time.sleep(random.uniform(0, 0.05 * 2**round_no))
        # Rounds spent leaving out settled links and drops: one more, with what is left.
        self._transact(
            items + self._use_items(tenant, job_id, uses, drop) + [i for p in pending for i in pending[p]]
        )
