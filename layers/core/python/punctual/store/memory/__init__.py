"""An in-memory JobStore with the same semantics as the DynamoDB one, one mixin per aggregate
(:mod:`.jobs`, :mod:`.timers`, :mod:`.executions`, :mod:`.dependencies`, :mod:`.groups`,
:mod:`.alerts`, :mod:`.calendars`, :mod:`.audit`) over
:class:`~.base.MemoryBase`.

Used by logic tests and the CPU benchmark. One lock makes every operation atomic, the
way a conditional write is atomic in DynamoDB. With a :class:`~.fidelity.Fidelity` it also
answers eventually consistent reads from behind and cancels writes for transaction conflicts,
as DynamoDB does.
"""

from __future__ import annotations

from punctual.store.base import JobStore
from punctual.store.memory.alerts import MemoryAlerts
from punctual.store.memory.audit import MemoryAudit
from punctual.store.memory.base import MemoryBase, tag_matches
from punctual.store.memory.calendars import MemoryCalendars
from punctual.store.memory.dependencies import MemoryDependencies
from punctual.store.memory.executions import MemoryExecutions
from punctual.store.memory.fidelity import Fidelity
from punctual.store.memory.groups import MemoryGroups
from punctual.store.memory.inflight import MemoryRunsInFlight
from punctual.store.memory.jobs import MemoryJobs
from punctual.store.memory.keyring import MemoryKeyring
from punctual.store.memory.loads import MemoryLoads
from punctual.store.memory.quotas import MemoryTenantQuotas
from punctual.store.memory.reservations import MemoryBudgetReservations
from punctual.store.memory.timers import MemoryTimers


class MemoryStore(
    MemoryAudit,
    MemoryJobs,
    MemoryTimers,
    MemoryExecutions,
    MemoryDependencies,
    MemoryGroups,
    MemoryAlerts,
    MemoryCalendars,
    MemoryTenantQuotas,
    MemoryKeyring,
    MemoryLoads,
    MemoryBudgetReservations,
    MemoryRunsInFlight,
    JobStore,
):
    """JobStore in memory: every aggregate's implementation, on one lock.

    Parameters
    ----------
    copy_items
        See :class:`~.base.MemoryBase`.
    fidelity
        Stale reads and transaction conflicts as DynamoDB has them (None: neither).
    """

    def __init__(self, *, copy_items: bool = True, fidelity: Fidelity | None = None) -> None:
        super().__init__(copy_items=copy_items)
        self.fidelity = fidelity
        if fidelity is not None:
            fidelity.attach(self)


__all__ = ["Fidelity", "MemoryBase", "MemoryStore", "tag_matches"]
