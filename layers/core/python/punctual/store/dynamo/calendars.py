"""Calendars and backfills in DynamoDB.

Items (see :mod:`.keys`)::

    calendar     pk=tenant#<tenant>        sk=cal#<name>        version, doc, users (string set)
    backfill     pk=job#<tenant>#<job>     sk=backfill#<id>     rev, state, doc

A calendar's ``users`` are the jobs that exclude it: a job adds itself with a write conditional on
the calendar existing, and a delete is conditional on the set being empty, so a calendar in use is
never deleted, whatever the interleaving.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from punctual.backfills import Backfill
from punctual.calendars import Calendar
from punctual.store.base import (
    BackfillRepository,
    CalendarInUseError,
    CalendarNotFoundError,
    CalendarRepository,
    CalendarVersionError,
    Page,
)
from punctual.store.dynamo.base import DynamoBase
from punctual.store.dynamo.keys import _n, _s, job_pk, tenant_pk

_CONDITION_FAILED = "ConditionalCheckFailedException"


def _calendar_key(tenant: str, name: str) -> dict[str, Any]:
    return {"pk": _s(tenant_pk(tenant)), "sk": _s(f"cal#{name}")}


def _backfill_key(tenant: str, job_id: str, backfill_id: str) -> dict[str, Any]:
    return {"pk": _s(job_pk(tenant, job_id)), "sk": _s(f"backfill#{backfill_id}")}


def _failed(exc: ClientError) -> bool:
    return bool(exc.response["Error"]["Code"] == _CONDITION_FAILED)


class DynamoCalendars(DynamoBase, CalendarRepository, BackfillRepository):
    """Calendars (with their users) and backfill records in DynamoDB."""

    # ---------------------------------------------------------------- calendars

    @staticmethod
    def _calendar_of(item: dict[str, Any]) -> Calendar:
        calendar = Calendar.model_validate_json(item["doc"]["S"])
        return calendar.model_copy(update={"version": int(item["version"]["N"])})

    def put_calendar(self, calendar: Calendar, expected_version: int | None) -> None:
        key = _calendar_key(calendar.tenant, calendar.name)
        values: dict[str, Any] = {":v": _n(calendar.version), ":d": _s(calendar.model_dump_json())}
        if expected_version is None:
            condition = "attribute_not_exists(pk)"
        else:
            condition = "version = :e"
            values[":e"] = _n(expected_version)
        try:
            # An update, not a put: the users set stays as it is.
            self.client.update_item(
                TableName=self.table,
                Key=key,
                UpdateExpression="SET version = :v, doc = :d",
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not _failed(exc):
                raise
            old = exc.response.get("Item")
            have = int(old["version"]["N"]) if old and "version" in old else None
            raise CalendarVersionError(
                f"calendar {calendar.name!r} is at version {have}, not {expected_version}", have
            ) from None

    def get_calendar(self, tenant: str, name: str, consistent: bool = True) -> Calendar | None:
        item = self.client.get_item(
            TableName=self.table, Key=_calendar_key(tenant, name), ConsistentRead=consistent
        ).get("Item")
        return self._calendar_of(item) if item and "doc" in item else None

    def batch_get_calendars(
        self, keys: Iterable[tuple[str, str]], consistent: bool = False
    ) -> dict[tuple[str, str], Calendar]:
        unique = sorted(set(keys))
        if not unique:
            return {}
        items = self._batch_get([_calendar_key(t, n) for t, n in unique], consistent)
        found = (self._calendar_of(item) for item in items if "doc" in item)
        return {(c.tenant, c.name): c for c in found}

    def list_calendars(self, tenant: str, limit: int, cursor: str | None = None) -> Page[Calendar]:
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :c)",
            "ExpressionAttributeValues": {":pk": _s(tenant_pk(tenant)), ":c": _s("cal#")},
            "Limit": limit,
            "ConsistentRead": True,
        }
        if cursor:
            request["ExclusiveStartKey"] = _calendar_key(tenant, cursor)
        reply = self.client.query(**request)
        items = [self._calendar_of(item) for item in reply.get("Items", [])]
        more = reply.get("LastEvaluatedKey")
        return Page(items, items[-1].name if more and items else None)

    def delete_calendar(self, tenant: str, name: str, expected_version: int | None = None) -> None:
        condition = "attribute_exists(pk) AND (attribute_not_exists(#u) OR size(#u) = :zero)"
        values: dict[str, Any] = {":zero": _n(0)}
        if expected_version is not None:
            condition += " AND version = :e"
            values[":e"] = _n(expected_version)
        try:
            self.client.delete_item(
                TableName=self.table,
                Key=_calendar_key(tenant, name),
                ConditionExpression=condition,
                ExpressionAttributeNames={"#u": "users"},
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not _failed(exc):
                raise
            old = exc.response.get("Item")
            users = sorted(old.get("users", {}).get("SS", [])) if old else []
            have = int(old["version"]["N"]) if old and "version" in old else None
            if users and (expected_version is None or have == expected_version):
                raise CalendarInUseError(name, users) from None
            raise CalendarVersionError(
                f"calendar {name!r} is at version {have}, not {expected_version}", have
            ) from None

    def use_calendars(self, tenant: str, job_id: str, names: Sequence[str], present: bool) -> None:
        for name in names:
            request: dict[str, Any] = {
                "TableName": self.table,
                "Key": _calendar_key(tenant, name),
                "ExpressionAttributeNames": {"#u": "users"},
                "ExpressionAttributeValues": {":j": {"SS": [job_id]}},
            }
            if present:
                request["UpdateExpression"] = "ADD #u :j"
                request["ConditionExpression"] = "attribute_exists(pk)"
            else:
                request["UpdateExpression"] = "DELETE #u :j"
                request["ConditionExpression"] = "attribute_exists(pk)"
            try:
                self.client.update_item(**request)
            except ClientError as exc:
                if not _failed(exc):
                    raise
                if present:
                    raise CalendarNotFoundError(name) from None
                # removing a user of a calendar that is gone: nothing to do

    def calendar_users(self, tenant: str, name: str) -> list[str]:
        item = self.client.get_item(
            TableName=self.table, Key=_calendar_key(tenant, name), ConsistentRead=True
        ).get("Item")
        return sorted(item.get("users", {}).get("SS", [])) if item else []

    # ---------------------------------------------------------------- backfills

    @staticmethod
    def _backfill_of(item: dict[str, Any]) -> Backfill:
        return Backfill.model_validate_json(item["doc"]["S"])

    def _backfill_item(self, backfill: Backfill) -> dict[str, Any]:
        return {
            **_backfill_key(backfill.tenant, backfill.job_id, backfill.id),
            "rev": _n(backfill.revision),
            "state": _s(backfill.state.value),
            "doc": _s(backfill.model_dump_json()),
        }

    def create_backfill(self, backfill: Backfill, replacing: Backfill | None = None) -> Backfill:
        request: dict[str, Any] = {
            "TableName": self.table,
            "Item": self._backfill_item(backfill),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if replacing is None:
            request["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            request["ConditionExpression"] = "rev = :r"
            request["ExpressionAttributeValues"] = {":r": _n(replacing.revision)}
        try:
            self.client.put_item(**request)
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
            TableName=self.table, Key=_backfill_key(tenant, job_id, backfill_id), ConsistentRead=True
        ).get("Item")
        return self._backfill_of(item) if item and "doc" in item else None

    def update_backfill(self, backfill: Backfill, expected_revision: int) -> bool:
        try:
            self.client.put_item(
                TableName=self.table,
                Item=self._backfill_item(backfill),
                ConditionExpression="rev = :r",
                ExpressionAttributeValues={":r": _n(expected_revision)},
            )
        except ClientError as exc:
            if not _failed(exc):
                raise
            return False
        return True
