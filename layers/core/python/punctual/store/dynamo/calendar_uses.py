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

from punctual.store.base import (
    CalendarNotFoundError,
    CalendarUses,
    GraphChangedError,
    ParentNotFoundError,
    TransactionTooLargeError,
)
from punctual.store.dynamo import calendar_schema, schema
from punctual.store.dynamo.base import DynamoBase
from punctual.store.dynamo.calendar_schema import calendar_key, calendar_use_key

CONFLICT_ROUNDS = 5
MAX_TRANSACTION_ITEMS = 100  # TransactWriteItems' limit
CHECK_FAILED = "ConditionalCheckFailed"  # a transaction item's cancellation reason
_CONFLICT = "TransactionConflict"


class DynamoCalendarUses(DynamoBase):
    """The transaction of a job write with its calendar uses (a mixin of the job and calendar stores)."""

    def _use_items(
        self, tenant: str, job_id: str, adds: list[str], drops: dict[str, str]
    ) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
        """The transaction items of the uses (adds, then drops by their mode, see
        :meth:`_transact_job_write`), and for each item its calendar and role."""
        items: list[dict[str, Any]] = []
        roles: list[tuple[str, str]] = []

        def cal(name: str, expr: schema.Expression, role: str) -> None:
            items.append(
                {"Update": {"TableName": self.table, "Key": calendar_key(tenant, name), **expr.fields()}}
            )
            roles.append((name, role))

        for name in adds:
            use = {"TableName": self.table, "Item": {**calendar_use_key(tenant, name, job_id)}}
            items.append({"Put": {**use, **schema.CREATE.fields()}})
            roles.append((name, "add-use"))
            cal(name, calendar_schema.count_calendar_use(1), "add-count")
        for name, mode in drops.items():
            key = {"TableName": self.table, "Key": calendar_use_key(tenant, name, job_id)}
            if mode in ("full", "orphan"):
                condition = schema.EXISTS.fields() if mode == "full" else {}
                items.append({"Delete": {**key, **condition}})
                roles.append((name, "drop-use"))
            if mode == "full":
                cal(name, calendar_schema.count_calendar_use(-1, job_id), "drop-count")
            elif mode == "legacy":
                cal(name, calendar_schema.drop_legacy_calendar_use(job_id), "drop-legacy")
        return items, roles

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

        A use is an item of its own (``caluse#<calendar>#<job>``) and a count on the calendar's
        item, so that the item does not grow with its users (DynamoDB's 400 KB item limit, and the
        read units every release of an excluding job pays for the calendar's item). A use already
        there is left out; a drop whose use item is missing takes the job out of the set earlier
        versions kept on the calendar's item instead ("legacy"), and one whose calendar is gone
        only deletes the use ("orphan"). A link pair whose condition fails (the link already as
        wanted, or the parent gone) is left out and the rest tried again.

        Raises
        ------
        CalendarNotFoundError
            A calendar to add does not exist (nothing was written).
        ClientError
            Any other cancellation (the caller reads the reasons of its own items) or error.
        """
        adds = list(uses.add)
        drops = dict.fromkeys(uses.drop, "full")
        pending = dict(links or {})
        for round_no in range(CONFLICT_ROUNDS):
            parents = list(pending)
            use_items, roles = self._use_items(tenant, job_id, adds, drops)
            everything = items + use_items + [i for p in parents for i in pending[p]]
            if not everything:
                return  # uses alone, all there (or gone) already
            if len(everything) > MAX_TRANSACTION_ITEMS:
                raise TransactionTooLargeError(
                    f"this change writes {len(everything)} items in one transaction, more than DynamoDB's"
                    f" {MAX_TRANSACTION_ITEMS}: change fewer after() parents or excluded calendars at once"
                )
            try:
                self._transact(everything)
                return
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "TransactionCanceledException":
                    raise
                codes = [reason.get("Code") for reason in exc.response.get("CancellationReasons", [])]
                own, rest = codes[: len(items)], codes[len(items) :]
                if CHECK_FAILED in own:
                    raise  # the job's own condition: the caller says which
                failed = {role for role, code in zip(roles, rest, strict=False) if code == CHECK_FAILED}
                for name, role in failed:
                    if role == "add-count":
                        raise CalendarNotFoundError(name) from None
                changed = self._settle_uses(failed, adds, drops)
                pairs = rest[len(use_items) :]
                details = exc.response.get("CancellationReasons", [])[len(items) + len(use_items) :]
                for n, parent in enumerate(parents):
                    # A link to add whose parent's count failed: the parent is gone (deleted since
                    # the write read it). The job is not stored naming it: nothing would run it.
                    # One there at another version than the cycle check read was created again.
                    if "Put" in pending[parent][0] and pairs[2 * n + 1 : 2 * n + 2] == [CHECK_FAILED]:
                        if details[2 * n + 1].get("Item"):
                            raise GraphChangedError(f"after() parent {parent!r} changed meanwhile") from None
                        raise ParentNotFoundError(parent) from None
                settled = [p for n, p in enumerate(parents) if CHECK_FAILED in pairs[2 * n : 2 * n + 2]]
                if changed or settled:  # nothing to do there: write without them
                    for parent in settled:
                        del pending[parent]
                    continue
                if _CONFLICT not in codes or round_no == CONFLICT_ROUNDS - 1:
                    raise
                time.sleep(random.uniform(0, 0.05 * 2**round_no))
        # Rounds spent leaving out settled links and uses: one more, with what is left.
        everything = (
            items + self._use_items(tenant, job_id, adds, drops)[0] + [i for p in pending for i in pending[p]]
        )
        if everything:
            self._transact(everything)

    @staticmethod
    def _settle_uses(failed: set[tuple[str, str]], adds: list[str], drops: dict[str, str]) -> bool:
        """Adjust the uses to the conditions that failed (``failed``: calendar and role); True when
        anything changed. An add whose use is there already is left out. A drop whose calendar is
        gone only deletes its use; one whose use item is missing is a use an earlier version kept
        in the calendar's set; a drop found in neither is left out."""
        changed = False
        for name, role in failed:
            if role == "add-use" and name in adds:
                adds.remove(name)
                changed = True
            elif role == "drop-count" and drops.get(name) == "full":
                drops[name] = "orphan"
                changed = True
            elif role == "drop-use" and drops.get(name) == "full":
                drops[name] = "legacy"
                changed = True
            elif (role == "drop-use" and drops.get(name) == "orphan") or role == "drop-legacy":
                drops.pop(name, None)  # in neither the use items nor the set: nothing to drop
                changed = True
        return changed
