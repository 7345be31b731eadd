"""Calendars and backfills in memory (the same conditions as the DynamoDB store's)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from punctual.store.base import (
    BackfillRepository,
    CalendarInUseError,
    CalendarNotFoundError,
    CalendarRepository,
    CalendarVersionError,
    Page,
)
from punctual.store.memory.base import MemoryBase
from punctual.usecases.backfills import Backfill
from punctual.usecases.calendars import Calendar


class MemoryCalendars(MemoryBase, CalendarRepository, BackfillRepository):
    """Calendars (with their users) and backfill records in memory."""

    # ---------------------------------------------------------------- calendars

    def put_calendar(self, calendar: Calendar, expected_version: int | None) -> None:
        with self._lock:
            calendars = self._calendars
            key = (calendar.tenant, calendar.name)
            current = calendars.get(key)
            have = current.version if current else None
            if have != expected_version:
                raise CalendarVersionError(
                    f"calendar {calendar.name!r} is at version {have}, not {expected_version}", have
                )
            calendars[key] = calendar.model_copy(deep=True)

    def get_calendar(self, tenant: str, name: str, consistent: bool = True) -> Calendar | None:
        with self._lock:
            found = self._calendars.get((tenant, name))
            return found.model_copy(deep=True) if found else None

    def batch_get_calendars(
        self, keys: Iterable[tuple[str, str]], consistent: bool = False
    ) -> dict[tuple[str, str], Calendar]:
        with self._lock:
            calendars = self._calendars
            return {key: calendars[key].model_copy(deep=True) for key in set(keys) if key in calendars}

    def list_calendars(self, tenant: str, limit: int, cursor: str | None = None) -> Page[Calendar]:
        with self._lock:
            names = sorted(n for t, n in self._calendars if t == tenant and (cursor is None or n > cursor))
            page = names[:limit]
            items = [self._calendars[(tenant, n)].model_copy(deep=True) for n in page]
            return Page(items, page[-1] if len(names) > limit else None)

    def delete_calendar(self, tenant: str, name: str, expected_version: int | None = None) -> None:
        with self._lock:
            calendars, users = self._calendars, self._calendar_users
            current = calendars.get((tenant, name))
            if current is None or (expected_version is not None and current.version != expected_version):
                have = current.version if current else None
                raise CalendarVersionError(
                    f"calendar {name!r} is at version {have}, not {expected_version}", have
                )
            used = users.get((tenant, name))
            if used:
                raise CalendarInUseError(name, sorted(used))
            del calendars[(tenant, name)]
            users.pop((tenant, name), None)

    def use_calendars(self, tenant: str, job_id: str, names: Sequence[str], present: bool) -> None:
        with self._lock:
            calendars, users = self._calendars, self._calendar_users
            for name in names:
                if present:
                    if (tenant, name) not in calendars:
                        raise CalendarNotFoundError(name)
                    users.setdefault((tenant, name), set()).add(job_id)
                else:
                    users.get((tenant, name), set()).discard(job_id)

    def drop_calendar_user(self, tenant: str, name: str, job_id: str, job_version: int | None) -> bool:
        with self._lock:
            job = self._jobs.get((tenant, job_id))
            if (job.version if job is not None else None) != job_version:
                return False
            self._calendar_users.get((tenant, name), set()).discard(job_id)
            return True

    def calendar_users(self, tenant: str, name: str) -> list[str]:
        with self._lock:
            return sorted(self._calendar_users.get((tenant, name), set()))

    # ---------------------------------------------------------------- backfills

    def create_backfill(self, backfill: Backfill, replacing: Backfill | None = None) -> Backfill:
        with self._lock:
            key = (backfill.tenant, backfill.job_id, backfill.id)
            current = self._backfills.get(key)
            if (
                current is None
                if replacing is None
                else (current is None or current.revision == replacing.revision)
            ):
                self._backfills[key] = backfill.model_copy(deep=True)
                return backfill.model_copy(deep=True)
            assert current is not None
            return current.model_copy(deep=True)

    def get_backfill(self, tenant: str, job_id: str, backfill_id: str) -> Backfill | None:
        with self._lock:
            found = self._backfills.get((tenant, job_id, backfill_id))
            return found.model_copy(deep=True) if found else None

    def update_backfill(self, backfill: Backfill, expected_revision: int) -> bool:
        with self._lock:
            key = (backfill.tenant, backfill.job_id, backfill.id)
            current = self._backfills.get(key)
            if current is None or current.revision != expected_revision:
                return False
            self._backfills[key] = backfill.model_copy(deep=True)
            return True
