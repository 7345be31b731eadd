"""An in-memory JobStore with the same semantics as the DynamoDB one, one mixin per aggregate
(:mod:`.jobs`, :mod:`.timers`, :mod:`.executions`, :mod:`.dependencies`, :mod:`.groups`,
:mod:`.alerts`, :mod:`.calendars`) over
:class:`~.base.MemoryBase`.

Used by logic tests and the CPU benchmark. One lock makes every operation atomic, the
way a conditional write is atomic in DynamoDB.
"""

from __future__ import annotations

from punctual.store.base import JobStore
from punctual.store.memory.alerts import MemoryAlerts
from punctual.store.memory.base import MemoryBase, tag_matches
from punctual.store.memory.calendars import MemoryCalendars
from punctual.store.memory.dependencies import MemoryDependencies
from punctual.store.memory.executions import MemoryExecutions
from punctual.store.memory.groups import MemoryGroups
from punctual.store.memory.jobs import MemoryJobs
from punctual.store.memory.keyring import MemoryKeyring
from punctual.store.memory.loads import MemoryLoads
from punctual.store.memory.timers import MemoryTimers


class MemoryStore(
    MemoryJobs,
    MemoryTimers,
    MemoryExecutions,
    MemoryDependencies,
    MemoryGroups,
    MemoryAlerts,
    MemoryCalendars,
    MemoryKeyring,
    MemoryLoads,
    JobStore,
):
    """JobStore in memory: every aggregate's implementation, on one lock."""


__all__ = ["MemoryBase", "MemoryStore", "tag_matches"]
