"""A tenant's catch-up, released at most ``catchupSlotsPerSecondPerTenant`` a second.

A job owes its slots after an outage or a pause (catch-up policy ``all``); the poller releases
them 30 a timer (:data:`punctual.timing.slots.MAX_RELEASE_PER_TIMER`), one timer of each job a
near poll, and past minutes in slices of 20 timers every 50 ms. Nothing bounded a tenant's
total: a tenant with 100 ``rate(1 second)`` jobs (a hundredth of its peak quota) released
3,000 owed slots a second after a 7-minute stop, into the queues every tenant shares, and
another tenant's slots due meanwhile waited behind what the workers had not yet started
(QA30: at 1,000 claims a second, up to 28 s late; docs/tenants.md).

So the poller takes each tenant's catch-up timers (CATCHUP timers waiting their turn, the
timers of past minutes it drains) from a bucket of that tenant's: ``rate / group_count`` slots
a second (a tenant's jobs spread over every shard group: the minute's pollers together release
about ``rate``), at most a second's worth saved up. A timer is taken while its tenant's bucket
holds any slot, at the slots it may carry (30 for a job's chain, one for another); once
released, the bucket is charged what was really sent. A tenant past its rate keeps its timers
waiting, in their order, behind no other tenant's: the others' catch-up timers are taken past
them. Nothing is dropped or marked missed by the pace; on-time slots are never paced.
"""

from __future__ import annotations

from collections.abc import Mapping

from punctual.timing.slots import MAX_RELEASE_PER_TIMER
from punctual.timing.timers import CHAIN_KINDS, Timer

# How many timers a slice looks at past those its tenants may not take yet, at most, per timer it
# may take: a slice's cost stays bounded when one tenant's backlog is all that waits.
SCAN_PER_TAKE = 50


def _carries(timer: Timer) -> int:
    """The most slots ``timer``'s release may send: a chain's timer released late, all it owes up to
    the planner's bound (settled at what was sent: a minute of one-slot timers is not held back)."""
    return MAX_RELEASE_PER_TIMER if timer.kind in CHAIN_KINDS else 1


class CatchupPace:
    """Per tenant, the catch-up slots one poller may still release (a bucket filled at its rate).

    Parameters
    ----------
    slots_per_second
        A tenant's catch-up slots a second, all of a minute's shard groups together (0: no limit).
    group_count
        The minute's shard groups: each poller takes its share.
    """

    def __init__(self, slots_per_second: float, group_count: int) -> None:
        self.rate = slots_per_second / max(1, group_count)
        self._left: dict[str, float] = {}  # per tenant, slots it may still release (may go below 0)
        self._at: dict[str, int] = {}  # per tenant, when its bucket was last filled (ms)
        self._taken: dict[str, int] = {}  # per tenant, slots taken ahead of the release's count

    @property
    def active(self) -> bool:
        return self.rate > 0

    def _fill(self, tenant: str, now_ms: int) -> float:
        left = self._left.get(tenant, self.rate)
        since = now_ms - self._at.get(tenant, now_ms)
        left = min(self.rate, left + self.rate * since / 1000)
        self._left[tenant], self._at[tenant] = left, now_ms
        return left

    def may_take(self, timer: Timer, now_ms: int) -> bool:
        """Whether ``timer``'s tenant may release it now; if so it is counted at what it may carry."""
        if not self.active:
            return True
        tenant = timer.tenant
        if self._fill(tenant, now_ms) - self._taken.get(tenant, 0) <= 0:
            return False
        self._taken[tenant] = self._taken.get(tenant, 0) + _carries(timer)
        return True

    def charge(self, sent: Mapping[str, int]) -> None:
        """Settle the timers taken since the last charge at the slots really sent per tenant."""
        if not self.active:
            return
        for tenant in self._taken:
            self._left[tenant] = self._left.get(tenant, self.rate) - sent.get(tenant, 0)
        self._taken.clear()

    def release_taken(self) -> None:
        """Forget the timers taken since the last charge (their release failed: they are kept)."""
        self._taken.clear()


__all__ = ["SCAN_PER_TAKE", "CatchupPace"]
