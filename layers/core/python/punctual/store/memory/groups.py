"""Schedule groups in memory (the same conditions as :mod:`punctual.store.dynamo.groups`)."""

from __future__ import annotations

import copy
from datetime import datetime

from punctual.store.base import (
    GroupConflictError,
    GroupExistsError,
    Page,
    ScheduleGroup,
    ScheduleGroupRepository,
)
from punctual.store.memory.base import MemoryBase


class MemoryGroups(MemoryBase, ScheduleGroupRepository):
    """Schedule groups in memory."""

    def create_group(self, group: ScheduleGroup) -> None:
        with self._lock:
            key = (group.tenant, group.name)
            if key in self._groups:
                raise GroupExistsError(f"schedule group {group.name!r} exists")
            self._groups[key] = copy.deepcopy(group)

    def get_group(self, tenant: str, name: str) -> ScheduleGroup | None:
        with self._lock:
            found = self._groups.get((tenant, name))
            return copy.deepcopy(found) if found else None

    def list_groups(
        self, tenant: str, limit: int, cursor: str | None = None, prefix: str | None = None
    ) -> Page[ScheduleGroup]:
        with self._lock:
            names = sorted(
                name
                for owner, name in self._groups
                if owner == tenant and name.startswith(prefix or "") and (cursor is None or name > cursor)
            )
            page = [copy.deepcopy(self._groups[(tenant, name)]) for name in names[:limit]]
            return Page(page, page[-1].name if len(names) > limit else None)

    def update_group(self, group: ScheduleGroup, expected_updated_at: datetime) -> None:
        with self._lock:
            current = self._groups.get((group.tenant, group.name))
            if current is None or current.updated_at != expected_updated_at:
                raise GroupConflictError(f"schedule group {group.name!r} is gone or changed meanwhile")
            self._groups[(group.tenant, group.name)] = copy.deepcopy(group)

    def delete_group(self, tenant: str, name: str) -> None:
        with self._lock:
            self._groups.pop((tenant, name), None)
