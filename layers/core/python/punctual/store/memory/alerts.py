"""Alerts in memory: the same conditions as :mod:`punctual.store.dynamo.alerts`, under the one lock."""

from __future__ import annotations

from datetime import datetime

from punctual.models import Alert, AlertCondition, AlertStatus
from punctual.store.base import AlertRepository
from punctual.store.memory.base import MemoryBase


class MemoryAlerts(MemoryBase, AlertRepository):
    """Alerts in memory."""

    def _alerts(self) -> dict[tuple[str, str, str, str], Alert]:
        return self._alert_items

    def claim_alert(self, alert: Alert, stale_before: datetime, ttl_epoch_s: int) -> bool:
        key = (alert.tenant, alert.job_id, alert.key_slot, alert.condition.value)
        with self._lock:
            items = self._alerts()
            current = items.get(key)
            if current is not None and not (
                current.status is AlertStatus.SENDING and current.claimed_at < stale_before
            ):
                return False
            items[key] = alert.model_copy(deep=True)
            return True

    def save_alert(self, alert: Alert, ttl_epoch_s: int) -> bool:
        key = (alert.tenant, alert.job_id, alert.key_slot, alert.condition.value)
        with self._lock:
            items = self._alerts()
            current = items.get(key)
            if current is None or current.owner != alert.owner:
                return False
            items[key] = alert.model_copy(deep=True)
            return True

    def get_alert(self, tenant: str, job_id: str, key_slot: str, condition: AlertCondition) -> Alert | None:
        with self._lock:
            found = self._alerts().get((tenant, job_id, key_slot, condition.value))
            return found.model_copy(deep=True) if found else None

    def list_alerts(self, tenant: str, job_id: str, limit: int) -> list[Alert]:
        with self._lock:
            mine = [
                (key[2], key[3], alert)
                for key, alert in self._alerts().items()
                if key[0] == tenant and key[1] == job_id
            ]
        mine.sort(key=lambda entry: (entry[0], entry[1]), reverse=True)  # the table's sort key order
        return [alert.model_copy(deep=True) for _, _, alert in mine[:limit]]

    def open_streak(self, tenant: str, job_id: str, slot: str, ttl_epoch_s: int) -> str:
        with self._lock:
            return self._streaks.setdefault((tenant, job_id), slot)

    def get_streak(self, tenant: str, job_id: str) -> str | None:
        with self._lock:
            return self._streaks.get((tenant, job_id))

    def close_streak(self, tenant: str, job_id: str, first_slot: str) -> bool:
        with self._lock:
            if self._streaks.get((tenant, job_id)) != first_slot:
                return False
            del self._streaks[(tenant, job_id)]
            return True

    def throttle_alert(
        self, tenant: str, job_id: str, rule: int, now: datetime, interval_s: int
    ) -> int | None:
        key = (tenant, job_id, rule)
        with self._lock:
            last = self._throttles.get(key)
            if last is not None and (now - last[0]).total_seconds() < interval_s:
                self._throttles[key] = (last[0], last[1] + 1)
                return None
            self._throttles[key] = (now, 0)
            return last[1] if last else 0
