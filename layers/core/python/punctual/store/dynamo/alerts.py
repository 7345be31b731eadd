"""Alerts in DynamoDB: alert records, a job's failure streak, per-rule throttles.

Items (on the job's partition, beside its executions)::

    alert      pk=job#<tenant>#<id>  sk=alert#<key slot>#<condition>  st, owner, claimed (ms), doc, expires_at
    streak     pk=job#<tenant>#<id>  sk=streak                        first (slot; absent: not failing)
    throttle   pk=job#<tenant>#<id>  sk=throttle#<rule>               last (ms), held

An alert is created by a conditional put (none yet for its key, or one left SENDING by a worker
that died), and its result is written only by its owner: one alert per (job, slot, condition).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from punctual.models import Alert, AlertCondition, AlertStatus
from punctual.store.base import AlertRepository
from punctual.store.dynamo.base import DynamoBase
from punctual.store.dynamo.keys import ALERT_PREFIX, STREAK_SK, _n, _s, alert_sk, job_pk, throttle_sk


def _ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def _conditional_failed(exc: ClientError) -> bool:
    return bool(exc.response["Error"]["Code"] == "ConditionalCheckFailedException")


class DynamoAlerts(DynamoBase, AlertRepository):
    """Alerts in DynamoDB."""

    def _alert_item(self, alert: Alert, ttl_epoch_s: int) -> dict[str, Any]:
        return {
            "pk": _s(job_pk(alert.tenant, alert.job_id)),
            "sk": _s(alert_sk(alert.key_slot, alert.condition)),
            "st": _s(alert.status.value),
            "owner": _s(alert.owner),
            "claimed": _n(_ms(alert.claimed_at)),
            "doc": _s(alert.model_dump_json()),
            "expires_at": _n(ttl_epoch_s),
        }

    def claim_alert(self, alert: Alert, stale_before: datetime, ttl_epoch_s: int) -> bool:
        try:
            self.client.put_item(
                TableName=self.table,
                Item=self._alert_item(alert, ttl_epoch_s),
                ConditionExpression="attribute_not_exists(pk) OR (st = :sending AND claimed < :stale)",
                ExpressionAttributeValues={
                    ":sending": _s(AlertStatus.SENDING.value),
                    ":stale": _n(_ms(stale_before)),
                },
            )
            return True
        except ClientError as exc:
            if _conditional_failed(exc):
                return False
            raise

    def save_alert(self, alert: Alert, ttl_epoch_s: int) -> bool:
        try:
            self.client.put_item(
                TableName=self.table,
                Item=self._alert_item(alert, ttl_epoch_s),
                ConditionExpression="#o = :o",
                ExpressionAttributeNames={"#o": "owner"},
                ExpressionAttributeValues={":o": _s(alert.owner)},
            )
            return True
        except ClientError as exc:
            if _conditional_failed(exc):
                return False
            raise

    def get_alert(self, tenant: str, job_id: str, key_slot: str, condition: AlertCondition) -> Alert | None:
        item = self.client.get_item(
            TableName=self.table,
            Key={"pk": _s(job_pk(tenant, job_id)), "sk": _s(alert_sk(key_slot, condition))},
            ConsistentRead=True,
        ).get("Item")
        return Alert.model_validate(json.loads(item["doc"]["S"])) if item else None

    def list_alerts(self, tenant: str, job_id: str, limit: int) -> list[Alert]:
        reply = self.client.query(
            TableName=self.table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :a)",
            ExpressionAttributeValues={":pk": _s(job_pk(tenant, job_id)), ":a": _s(ALERT_PREFIX)},
            ScanIndexForward=False,
            Limit=limit,
        )
        return [Alert.model_validate(json.loads(item["doc"]["S"])) for item in reply.get("Items", [])]

    def _streak_key(self, tenant: str, job_id: str) -> dict[str, Any]:
        return {"pk": _s(job_pk(tenant, job_id)), "sk": _s(STREAK_SK)}

    def open_streak(self, tenant: str, job_id: str, slot: str, ttl_epoch_s: int) -> str:
        reply = self.client.update_item(
            TableName=self.table,
            Key=self._streak_key(tenant, job_id),
            UpdateExpression="SET #f = if_not_exists(#f, :s), expires_at = :ttl",
            ExpressionAttributeNames={"#f": "first"},
            ExpressionAttributeValues={":s": _s(slot), ":ttl": _n(ttl_epoch_s)},
            ReturnValues="ALL_NEW",
        )
        return str(reply["Attributes"]["first"]["S"])

    def get_streak(self, tenant: str, job_id: str) -> str | None:
        item = self.client.get_item(
            TableName=self.table, Key=self._streak_key(tenant, job_id), ConsistentRead=True
        ).get("Item")
        return str(item["first"]["S"]) if item and "first" in item else None

    def close_streak(self, tenant: str, job_id: str, first_slot: str) -> bool:
        try:
            # An update, not a delete: nothing on the workers' path deletes (their role may not).
            self.client.update_item(
                TableName=self.table,
                Key=self._streak_key(tenant, job_id),
                UpdateExpression="REMOVE #f",
                ConditionExpression="#f = :s",
                ExpressionAttributeNames={"#f": "first"},
                ExpressionAttributeValues={":s": _s(first_slot)},
            )
            return True
        except ClientError as exc:
            if _conditional_failed(exc):
                return False
            raise

    def throttle_alert(
        self, tenant: str, job_id: str, rule: int, now: datetime, interval_s: int
    ) -> int | None:
        key = {"pk": _s(job_pk(tenant, job_id)), "sk": _s(throttle_sk(rule))}
        try:
            reply = self.client.update_item(
                TableName=self.table,
                Key=key,
                UpdateExpression="SET #l = :now, held = :zero",
                ConditionExpression="attribute_not_exists(#l) OR #l <= :cut",
                ExpressionAttributeNames={"#l": "last"},
                ExpressionAttributeValues={
                    ":now": _n(_ms(now)),
                    ":zero": _n(0),
                    ":cut": _n(_ms(now) - interval_s * 1000),
                },
                ReturnValues="ALL_OLD",
            )
            return int(reply.get("Attributes", {}).get("held", {}).get("N", "0"))
        except ClientError as exc:
            if not _conditional_failed(exc):
                raise
        self.client.update_item(
            TableName=self.table,
            Key=key,
            UpdateExpression="ADD held :one",
            ExpressionAttributeValues={":one": _n(1)},
        )
        return None
