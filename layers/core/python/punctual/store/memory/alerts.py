"""Alerts in memory: the same conditions as :mod:`punctual.store.dynamo.alerts`, under the one lock."""

from __future__ import annotations

from datetime import datetime

from punctual.models import Alert, AlertCondition, AlertStatus
from punctual.store.base import AlertRepository, Streak
from punctual.store.memory.base import MemoryBase


def _ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


class MemoryAlerts(MemoryBase, AlertRepository):
    """Alerts in memory."""

    def create_alert(self, alert: Alert, ttl_epoch_s: int) -> bool:
        key = (alert.tenant, alert.job_id, alert.key_slot, alert.condition.value)
        with self._lock:
            if key in self._alert_items:
                return self._alert_items[key] == alert  # this very create, applied (see the table's)
            self._alert_items[key] = alert.model_copy(deep=True)
            self._expires_at[key] = ttl_epoch_s
            return True

    def take_over_alert(
        self, alert: Alert, previous_owner: str, stale_before: datetime, ttl_epoch_s: int
    ) -> bool:
        key = (alert.tenant, alert.job_id, alert.key_slot, alert.condition.value)
        with self._lock:
            current = self._alert_items.get(key)
            if current == alert:
                return True  # this very takeover, applied (its owner is fresh)
            if (
                current is None
                or current.status is not AlertStatus.SENDING
                or current.owner != previous_owner
                or not _ms(current.claimed_at) < _ms(stale_before)  # the table compares milliseconds
            ):
                return False
            self._alert_items[key] = alert.model_copy(deep=True)
            self._expires_at[key] = ttl_epoch_s
            return True

    def save_alert(self, alert: Alert, ttl_epoch_s: int, owner: str | None = None) -> bool:
        key = (alert.tenant, alert.job_id, alert.key_slot, alert.condition.value)
        with self._lock:
            current = self._alert_items.get(key)
            if current == alert:
                return True  # this very write, applied
            if current is None or current.owner != (owner or alert.owner):
                return False
            self._alert_items[key] = alert.model_copy(deep=True)
            self._expires_at[key] = ttl_epoch_s
            return True

    def get_alert(self, tenant: str, job_id: str, key_slot: str, condition: AlertCondition) -> Alert | None:
        with self._lock:
            found = self._alert_items.get((tenant, job_id, key_slot, condition.value))
            return found.model_copy(deep=True) if found else None

    def list_alerts(self, tenant: str, job_id: str, limit: int, live_at: int | None = None) -> list[Alert]:
        with self._lock:
            mine = [
                (key[2], key[3], alert)
                for key, alert in self._alert_items.items()
                if key[0] == tenant and key[1] == job_id and not self._expired(key, live_at)
            ]
        mine.sort(key=lambda entry: (entry[0], entry[1]), reverse=True)  # the table's sort key order
        return [alert.model_copy(deep=True) for _, _, alert in mine[:limit]]

    def open_streak(self, tenant: str, job_id: str, slot: str, ttl_epoch_s: int) -> str:
        with self._lock:
            current = self._streaks.get((tenant, job_id))
            if current is None:
                current = Streak(slot, 1, slot)
            elif current.last == slot:
                return current.first  # a repeat of the latest failure counts nothing
            else:
                current = Streak(current.first, current.failures + 1, slot)
            self._streaks[(tenant, job_id)] = current
            return current.first

    def get_streak(self, tenant: str, job_id: str) -> Streak | None:
        with self._lock:
            return self._streaks.get((tenant, job_id))

    def replace_streak(self, tenant: str, job_id: str, expected: Streak, new: Streak | None) -> bool:
        with self._lock:
            current = self._streaks.get((tenant, job_id))
            if current is None or (current.first, current.failures) != (expected.first, expected.failures):
                return False
            if new is None:
                del self._streaks[(tenant, job_id)]
            else:
                self._streaks[(tenant, job_id)] = new
            return True

    def throttle_alert(
        self, tenant: str, job_id: str, rule: int, now: datetime, interval_s: int, resolves: bool = False,
        since: datetime | None = None,
    ) -> int | None:  # fmt: skip
        key = (tenant, job_id, rule)
        with self._lock:
            last = self._throttles.get(key)
            within = last is not None and (now - last[0]).total_seconds() < interval_s
            if last is not None and within and not (resolves and last[2]):
                self._throttles[key] = (last[0], last[1] + 1, last[2])
                return None
            self._throttles[key] = (now, 0, not resolves)
            return last[1] if last and (since is None or last[0] >= since) else 0
