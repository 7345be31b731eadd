"""Alerts in DynamoDB: alert records, a job's failure streak, per-rule throttles.

The items (on the job's partition, beside its executions) and their expressions are in
:mod:`.schema`.

An alert is created by a conditional put (none yet for its key), taken over only from a worker
that died (still SENDING under the same owner, claimed before the stale bound), and its progress
and result are written only by its owner: one deliverer per (job, slot, condition) at a time.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from punctual.models import Alert, AlertCondition, AlertStatus
from punctual.store.base import AlertRepository, Streak
from punctual.store.dynamo import schema
from punctual.store.dynamo.base import DynamoBase
from punctual.store.dynamo.schema import _n, _s, job_pk


def _ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


def _conditional_failed(exc: ClientError) -> bool:
    return bool(exc.response["Error"]["Code"] == "ConditionalCheckFailedException")


class DynamoAlerts(DynamoBase, AlertRepository):
    """Alerts in DynamoDB."""

    def _alert_item(self, alert: Alert, ttl_epoch_s: int) -> dict[str, Any]:
        return {
            **schema.alert_key(alert.tenant, alert.job_id, alert.key_slot, alert.condition.value),
            "st": _s(alert.status.value),
            "owner": _s(alert.owner),
            "claimed": _n(_ms(alert.claimed_at)),
            "doc": _s(alert.model_dump_json()),
            "expires_at": _n(ttl_epoch_s),
        }

    def create_alert(self, alert: Alert, ttl_epoch_s: int) -> bool:
        item = self._alert_item(alert, ttl_epoch_s)
        return self._write_if("put_item", own_item=True, Item=item, **schema.CREATE.fields())

    def take_over_alert(
        self, alert: Alert, previous_owner: str, stale_before: datetime, ttl_epoch_s: int
    ) -> bool:
        return self._write_if(
            "put_item",
            own_item=True,
            Item=self._alert_item(alert, ttl_epoch_s),
            **schema.take_over_alert(AlertStatus.SENDING.value, previous_owner, _ms(stale_before)).fields(),
        )

    def save_alert(self, alert: Alert, ttl_epoch_s: int, owner: str | None = None) -> bool:
        return self._write_if(
            "put_item",
            own_item=owner is not None,  # a fresh owner's: found as written, it is this write
            Item=self._alert_item(alert, ttl_epoch_s),
            **schema.owned_alert(owner or alert.owner).fields(),
        )

    def get_alert(self, tenant: str, job_id: str, key_slot: str, condition: AlertCondition) -> Alert | None:
        item = self.client.get_item(
            TableName=self.table,
            Key=schema.alert_key(tenant, job_id, key_slot, condition.value),
            ConsistentRead=True,
        ).get("Item")
        return Alert.model_validate(json.loads(item["doc"]["S"])) if item else None

    def list_alerts(self, tenant: str, job_id: str, limit: int, live_at: int | None = None) -> list[Alert]:
        request: dict[str, Any] = {
            "TableName": self.table,
            **schema.partition(job_pk(tenant, job_id), schema.ALERT_PREFIX).fields(),
            "ScanIndexForward": False,
            "ConsistentRead": True,  # as every read of the API: an alert raised a moment ago is listed
        }
        alerts: list[Alert] = []
        while len(alerts) < limit:
            reply = self.client.query(**request, Limit=limit - len(alerts))
            live = (item for item in reply.get("Items", []) if not schema.expired(item, live_at))
            alerts += [Alert.model_validate(json.loads(item["doc"]["S"])) for item in live]
            if "LastEvaluatedKey" not in reply:
                break
            request["ExclusiveStartKey"] = reply["LastEvaluatedKey"]
        return alerts

    def open_streak(self, tenant: str, job_id: str, slot: str, ttl_epoch_s: int) -> str:
        try:
            reply = self.client.update_item(
                TableName=self.table,
                Key=schema.streak_key(tenant, job_id),
                **schema.open_streak(slot, ttl_epoch_s).fields(),
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not _conditional_failed(exc):
                raise
            return str(exc.response["Item"]["first"]["S"])  # a repeat of the latest failure
        return str(reply["Attributes"]["first"]["S"])

    def get_streak(self, tenant: str, job_id: str) -> Streak | None:
        item = self.client.get_item(
            TableName=self.table, Key=schema.streak_key(tenant, job_id), ConsistentRead=True
        ).get("Item")
        if not item or "first" not in item:
            return None
        first = str(item["first"]["S"])
        failures = int(item["n"]["N"]) if "n" in item else 0
        return Streak(first, failures, str(item["last"]["S"]) if "last" in item else first)

    def replace_streak(self, tenant: str, job_id: str, expected: Streak, new: Streak | None) -> bool:
        shape = None if new is None else (new.first, new.failures, new.last)
        return self._write_if(
            "update_item",
            Key=schema.streak_key(tenant, job_id),
            **schema.replace_streak(expected.first, expected.failures, shape).fields(),
        )

    def throttle_alert(
        self, tenant: str, job_id: str, rule: int, now: datetime, interval_s: int, resolves: bool = False,
        since: datetime | None = None,
    ) -> int | None:  # fmt: skip
        key = schema.throttle_key(tenant, job_id, rule)
        try:
            reply = self.client.update_item(
                TableName=self.table,
                Key=key,
                **schema.send_throttled(_ms(now), interval_s, resolves).fields(),
                ReturnValues="ALL_OLD",
            )
            old = reply.get("Attributes", {})
            if since is not None and int(old.get("last", {}).get("N", "0")) < _ms(since):
                return 0  # a mark made before ``since``: its count is not this job's
            return int(old.get("held", {}).get("N", "0"))
        except ClientError as exc:
            if not _conditional_failed(exc):
                raise
        self.client.update_item(
            TableName=self.table,
            Key=key,
            **schema.hold_throttled().fields(),
        )
        return None
