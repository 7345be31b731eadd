"""Calendars and backfills in DynamoDB (items, keys and expressions in :mod:`.schema`).

A calendar's ``users`` are the jobs that exclude it: every job write adds or removes its uses in
its own transaction, each add conditional on the calendar existing (:mod:`.calendar_uses`), and a
delete is conditional on the set being empty, so a calendar in use is never deleted, whatever the
interleaving.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from punctual.models import ACCEPTED
from punctual.models.base import read_stored
from punctual.store.base import (
    BackfillRepository,
    CalendarInUseError,
    CalendarRepository,
    CalendarUses,
    CalendarVersionError,
    Page,
)
from punctual.store.dynamo import calendar_schema, schema
from punctual.store.dynamo.calendar_schema import calendar_key
from punctual.store.dynamo.calendar_uses import CHECK_FAILED, MAX_TRANSACTION_ITEMS, DynamoCalendarUses
from punctual.store.dynamo.schema import _n, _s, backfill_key, job_key, tenant_pk
from punctual.usecases.backfills import Backfill, BackfillState
from punctual.usecases.calendars import Calendar

_CONDITION_FAILED = "ConditionalCheckFailedException"


def _failed(exc: ClientError) -> bool:
    return bool(exc.response["Error"]["Code"] == _CONDITION_FAILED)


USERS_NAMED = 20  # the users a refused delete names at most
RECOUNT_ROUNDS = 3  # a create that counts the uses of jobs that name the calendar already


class DynamoCalendars(DynamoCalendarUses, CalendarRepository, BackfillRepository):
    """Calendars (with their users) and backfill records in DynamoDB."""

    # ---------------------------------------------------------------- calendars

    @staticmethod
    def _calendar_of(item: dict[str, Any]) -> Calendar:
        calendar = read_stored(Calendar, item["doc"]["S"], ACCEPTED)  # a newer version's too (a rollback)
        return calendar.model_copy(update={"version": int(item["version"]["N"])})

    def put_calendar(self, calendar: Calendar, expected_version: int | None) -> None:
        if expected_version is None:
            for round_ in range(RECOUNT_ROUNDS):
                uses = self._use_keys(calendar.tenant, calendar.name)
                if not uses:
                    break  # the usual create: no job names it yet
                # The last round writes its count unchecked: never a create that counts none.
                if self._create_counting(calendar, uses, checked=round_ < RECOUNT_ROUNDS - 1):
                    return
        expr = calendar_schema.put_calendar(calendar.version, calendar.model_dump_json(), expected_version)
        try:
            # An update, not a put: the users set stays as it is.
            self.client.update_item(
                TableName=self.table,
                Key=calendar_key(calendar.tenant, calendar.name),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **expr.fields(),
            )
        except ClientError as exc:
            if not _failed(exc):
                raise
            old = exc.response.get("Item")
            have = int(old["version"]["N"]) if old and "version" in old else None
            raise CalendarVersionError(
                f"calendar {calendar.name!r} is at version {have}, not {expected_version}", have
            ) from None

    def _use_keys(self, tenant: str, name: str) -> list[dict[str, Any]]:
        """The keys of the calendar's use items (strongly consistent): jobs that name it."""
        request: dict[str, Any] = {
            "TableName": self.table,
            "ConsistentRead": True,
            **calendar_schema.calendar_use_keys(tenant, name).fields(),
        }
        keys: list[dict[str, Any]] = []
        while True:
            reply = self.client.query(**request)
            keys.extend({"pk": i["pk"], "sk": i["sk"]} for i in reply.get("Items", []))
            if not reply.get("LastEvaluatedKey"):
                return keys
            request["ExclusiveStartKey"] = reply["LastEvaluatedKey"]

    def _create_counting(self, calendar: Calendar, uses: list[dict[str, Any]], checked: bool = True) -> bool:
        """Create a calendar that jobs already name (its item was lost, say deleted by hand, and
        this create brings it back), counting those uses: a count of zero would let it be deleted
        while they still exclude it (QA). The create checks, in one transaction, that each use it
        counted is still there (no job can add a use while the calendar is absent, but one may
        drop its use meanwhile); False when one was dropped (count again). Past one transaction's
        items, or ``checked`` False (the last round), the count is written without that check: a
        drop in that moment leaves it one high (over 99 jobs naming a lost calendar, or three
        drops racing its return); a delete that finds such a count and no use deletes it anyway
        (:meth:`_delete_drifted`)."""
        key = calendar_key(calendar.tenant, calendar.name)
        doc = calendar.model_dump_json()
        expr = calendar_schema.create_counted_calendar(calendar.version, doc, len(uses))
        update = {"TableName": self.table, "Key": key, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}
        still = uses if checked and len(uses) < MAX_TRANSACTION_ITEMS else []
        checks = [
            {"ConditionCheck": {"TableName": self.table, "Key": k, **schema.EXISTS.fields()}} for k in still
        ]
        try:
            self._transact([{"Update": {**update, **expr.fields()}}, *checks])
        except ClientError as exc:
            reasons = exc.response.get("CancellationReasons", [])
            if not reasons or reasons[0].get("Code") != CHECK_FAILED:
                if any(r.get("Code") == CHECK_FAILED for r in reasons[1:]):
                    return False  # a use was dropped meanwhile: count again
                raise
            old = reasons[0].get("Item") or {}
            have = int(old["version"]["N"]) if "version" in old else None
            raise CalendarVersionError(
                f"calendar {calendar.name!r} is at version {have}, not None", have
            ) from None
        return True

    def get_calendar(self, tenant: str, name: str, consistent: bool = True) -> Calendar | None:
        # A Query of the one key, not a GetItem (the same read units): the console's function reads
        # the calendars its jobs exclude for their next fire so.
        items = self.client.query(
            TableName=self.table,
            ConsistentRead=consistent,
            **calendar_schema.one_calendar(tenant, name).fields(),
        ).get("Items", [])
        return self._calendar_of(items[0]) if items and "doc" in items[0] else None

    def batch_get_calendars(
        self, keys: Iterable[tuple[str, str]], consistent: bool = False
    ) -> dict[tuple[str, str], Calendar]:
        unique = sorted(set(keys))
        if not unique:
            return {}
        items = self._batch_get([calendar_key(t, n) for t, n in unique], consistent)
        found = (self._calendar_of(item) for item in items if "doc" in item)
        return {(c.tenant, c.name): c for c in found}

    def list_calendars(self, tenant: str, limit: int, cursor: str | None = None) -> Page[Calendar]:
        request: dict[str, Any] = {
            "TableName": self.table,
            "Limit": limit,
            "ConsistentRead": True,
            **schema.partition(tenant_pk(tenant), calendar_schema.CALENDAR_PREFIX).fields(),
        }
        if cursor:
            request["ExclusiveStartKey"] = calendar_key(tenant, cursor)
        reply = self.client.query(**request)
        items = [self._calendar_of(item) for item in reply.get("Items", [])]
        more = reply.get("LastEvaluatedKey")
        return Page(items, items[-1].name if more and items else None)

    def delete_calendar(self, tenant: str, name: str, expected_version: int | None = None) -> None:
        try:
            self.client.delete_item(
                TableName=self.table,
                Key=calendar_key(tenant, name),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **calendar_schema.delete_calendar(expected_version).fields(),
            )
        except ClientError as exc:
            if not _failed(exc):
                raise
            old = exc.response.get("Item")
            old = old or {}
            count = len(old.get("users", {}).get("SS", [])) + int(old.get("user_count", {}).get("N", "0"))
            users = self._users(tenant, name, limit=USERS_NAMED) if count > 0 else []
            have = int(old["version"]["N"]) if "version" in old else None
            if users and (expected_version is None or have == expected_version):
                raise CalendarInUseError(name, users, count) from None
            stale = int(old.get("user_count", {}).get("N", "0"))
            if count > 0 and stale == count and have is not None and expected_version in (None, have):
                self._delete_drifted(tenant, name, count, expected_version)  # counted, yet no job uses it
                return
            raise CalendarVersionError(
                f"calendar {name!r} is at version {have}, not {expected_version}", have
            ) from None

    def _delete_drifted(self, tenant: str, name: str, count: int, expected_version: int | None) -> None:
        """Delete a calendar counted ``count`` users though none has a use item (a count left high,
        :meth:`_create_counting`); raises CalendarInUseError (naming none: try again) when the
        count moved meanwhile (a job added a use)."""
        try:
            self.client.delete_item(
                TableName=self.table,
                Key=calendar_key(tenant, name),
                **calendar_schema.delete_drifted_calendar(count, expected_version).fields(),
            )
        except ClientError as exc:
            if not _failed(exc):
                raise
            raise CalendarInUseError(name, [], count) from None

    def use_calendars(self, tenant: str, job_id: str, names: Sequence[str], present: bool) -> None:
        for name in names:  # one transaction each (a drop from a calendar that is gone: nothing to do)
            uses = CalendarUses(add=(name,)) if present else CalendarUses(drop=(name,))
            self._transact_job_write([], tenant, job_id, uses)

    def drop_calendar_user(self, tenant: str, name: str, job_id: str, job_version: int | None) -> bool:
        # The use goes in a transaction with a check that the job is still as it was read.
        check = {
            "TableName": self.table,
            "Key": job_key(tenant, job_id),
            **schema.job_as_read(job_version).fields(),
        }
        try:
            self._transact_job_write([{"ConditionCheck": check}], tenant, job_id, CalendarUses(drop=(name,)))
        except ClientError as exc:
            reasons = exc.response.get("CancellationReasons", [])
            if reasons and reasons[0].get("Code") == CHECK_FAILED:
                return False
            raise
        return True

    def calendar_users(self, tenant: str, name: str) -> list[str]:
        return self._users(tenant, name, limit=None)

    def _users(self, tenant: str, name: str, limit: int | None) -> list[str]:
        """The jobs that use a calendar (strongly consistent): its use items, and the set earlier
        versions kept on its item; the first ``limit`` use items when given (a message's names)."""
        item = self.client.get_item(
            TableName=self.table, Key=calendar_key(tenant, name), ConsistentRead=True
        ).get("Item")
        users = set(item.get("users", {}).get("SS", [])) if item else set()
        prefix = calendar_schema.calendar_uses_prefix(name)
        request: dict[str, Any] = {
            "TableName": self.table,
            "ConsistentRead": True,
            **schema.partition(tenant_pk(tenant), prefix).fields(),
        }
        while limit is None or len(users) < limit:
            if limit is not None:
                request["Limit"] = limit
            reply = self.client.query(**request)
            users.update(i["sk"]["S"].removeprefix(prefix) for i in reply.get("Items", []))
            if not reply.get("LastEvaluatedKey"):
                break
            request["ExclusiveStartKey"] = reply["LastEvaluatedKey"]
        return sorted(users)

    # ---------------------------------------------------------------- backfills

    @staticmethod
    def _backfill_of(item: dict[str, Any]) -> Backfill:
        return Backfill.model_validate_json(item["doc"]["S"])

    def _backfill_item(self, backfill: Backfill) -> dict[str, Any]:
        return {
            **backfill_key(backfill.tenant, backfill.job_id, backfill.id),
            "rev": _n(backfill.revision),
            "state": _s(backfill.state.value),
            "doc": _s(backfill.model_dump_json()),
            # A running backfill is in the audit index (its steps are a chain); a finished one leaves it.
            **schema.audit_attrs(
                self.audit_segment_of(backfill.tenant, backfill.job_id)
                if backfill.state is BackfillState.RUNNING
                else None
            ),
        }

    def create_backfill(self, backfill: Backfill, replacing: Backfill | None = None) -> Backfill:
        expr = schema.CREATE if replacing is None else schema.backfill_revision(replacing.revision)
        try:
            self.client.put_item(
                TableName=self.table,
                Item=self._backfill_item(backfill),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **expr.fields(),
            )
        except ClientError as exc:
            if not _failed(exc):
                raise
            old = exc.response.get("Item")
            if old and "doc" in old:
                return self._backfill_of(old)
            found = self.get_backfill(backfill.tenant, backfill.job_id, backfill.id)
            if found is None:
                raise
            return found
        return backfill

    def get_backfill(self, tenant: str, job_id: str, backfill_id: str) -> Backfill | None:
        item = self.client.get_item(
            TableName=self.table, Key=backfill_key(tenant, job_id, backfill_id), ConsistentRead=True
        ).get("Item")
        return self._backfill_of(item) if item and "doc" in item else None

    def update_backfill(self, backfill: Backfill, expected_revision: int) -> bool:
        return self._write_if(
            "put_item",
            Item=self._backfill_item(backfill),
            **schema.backfill_revision(expected_revision).fields(),
        )
