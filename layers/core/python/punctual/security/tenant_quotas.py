"""A tenant's burst quotas (issue 31): peaks of due slots, running backfills, backfilled slots a minute.

* **Peaks** (:mod:`punctual.security.peaks`): registration, replacement and deletion move the tenant's
  profile by the job's; a change that would raise its busiest second past
  ``maxSlotsPerSecondPerTenant`` or its busiest minute past ``maxSlotsPerMinutePerTenant`` is
  refused (409 ``peak-quota-reached``). The profile is one item per tenant, written with a
  condition on its version (re-read and retried on a race); changes made at once in one process
  are written together (:class:`PeakQuota`). It is moved before the job is
  written and moved back if that write fails; a process that dies in between leaves the
  profile counting a job it does not have (a count too high, never too low), which
  :meth:`PeakQuota.recount` rebuilds from the tenant's jobs.
* **Running backfills**: at most ``maxBackfillsPerTenant`` at once (409
  ``backfill-quota-reached``). A backfill joins the tenant's running set by a conditional write
  when it starts and leaves it when it ends (done, cancelled, its job deleted); one whose leave
  was lost to a crash is found and dropped the next time the set is full.
* **Backfilled slots a minute**: each backfill step takes its slots from the tenant's count of
  the current minute (at most ``backfillSlotsPerMinutePerTenant``, one conditional write); what
  does not fit waits for the next steps. However many backfills run, a tenant's backfilled
  slots enter the shared queues at that rate at most.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from punctual.runtime.settings import Settings
from punctual.security.peaks import PeakLimits, Profile, job_profile
from punctual.store.base import TenantLimitError, TransactionConflictError
from punctual.store.quotas import TenantQuotaRepository

log = logging.getLogger("punctual.security.quotas")

# The profile is one item a tenant's job writes all change (read, then a conditional write): writes
# at once (a job batch's sixteen threads) retry with jittered backoff, many times (under 16 writers
# at once, 8 tries without a pause answered 500 to one create in five: concurrency QA).
PEAK_TRIES = 40
PEAK_BACKOFF_CAP_S = 0.05


def _back_off(attempt: int) -> None:
    if attempt:
        time.sleep(random.uniform(0, min(PEAK_BACKOFF_CAP_S, 0.002 * 2**attempt)))


SLOT_WINDOW_TTL_S = 86_400


class BurstQuotaError(TenantLimitError):
    """A burst quota reached: ``quota`` names it, ``problem_type`` and ``hint`` shape the 409."""

    problem_type = "peak-quota-reached"
    title = "Peak quota reached"
    hint = "spread the jobs' times (jitter_seconds, other minutes), or ask the operator to raise it"

    def __init__(self, quota: str, limit: int, message: str) -> None:
        super().__init__(message, limit)
        self.quota = quota


class PeakQuotaError(BurstQuotaError):
    def __init__(self, quota: str, limit: int, peak: int) -> None:
        unit = "second" if "Second" in quota else "minute"
        super().__init__(
            quota,
            limit,
            f"tenant quota {quota} is {limit:,} slots due in one {unit}; with this job up to {peak:,} "
            f"of your slots could be due in one {unit}",
        )


class BackfillQuotaError(BurstQuotaError):
    problem_type = "backfill-quota-reached"
    title = "Backfill quota reached"
    hint = "wait for a running backfill to end (or cancel one), or ask the operator to raise it"

    def __init__(self, limit: int) -> None:
        super().__init__(
            "maxBackfillsPerTenant", limit, f"tenant quota maxBackfillsPerTenant is {limit} running backfills"
        )


@dataclass(eq=False)
class _PeakChange:
    """One caller's change, queued for the tenant's next profile write (see :class:`PeakQuota`)."""

    add: Profile | None
    remove: Profile | None
    checked: bool = True  # against the limits (an undo restores what was there: never refused)
    woken: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # this caller writes the next round
    done: bool = False
    error: Exception | None = None


class PeakQuota:
    """Moves a tenant's peak profile by jobs' profiles, within its limits.

    The profile is one item per tenant (up to ~24 KB, 1,440 minutes of the day: 24 write units a
    write, so DynamoDB's 1,000 write units a second per partition take about 40 writes a second of
    it). Changes made at once in this process (a job batch's threads) are written together: a
    caller that finds a write of its tenant's profile in flight queues its change, and the next
    round writes every queued change in one conditional write, each checked against the limits in
    queue order (one that would breach is refused alone). A batch of 500 jobs on 16 threads is
    about 500 / 16 profile writes, not 500.
    """

    def __init__(self, store: TenantQuotaRepository, limits: PeakLimits) -> None:
        self.store = store
        self.limits = limits
        self._lock = threading.Lock()
        self._queued: dict[str, list[_PeakChange]] = {}
        self._writing: set[str] = set()  # tenants with a round in flight

    def change(
        self, tenant: str, add: Profile | None = None, remove: Profile | None = None, checked: bool = True
    ) -> None:
        """Add ``add`` and take ``remove`` away, in one conditional write (shared with the
        changes queued beside it).

        Raises
        ------
        PeakQuotaError
            The change would raise a peak past its limit (only a change that adds is refused).
        ConflictError
            The profile kept changing under concurrent writes.

        ``checked`` False: never refused by the limits (an undo puts back what was counted).
        """
        (error,) = self._queue(tenant, [_PeakChange(add, remove, checked)])
        if error is not None:
            raise error

    def change_each(self, tenant: str, adds: Sequence[Profile]) -> list[Exception | None]:
        """Add each of ``adds`` (a job batch's group of new jobs), all in the same round, each
        checked against the limits on its own, in order (one that would breach is refused alone):
        for each, its error (:meth:`change`'s), or None when it was counted."""
        return self._queue(tenant, [_PeakChange(add, None) for add in adds])

    def _queue(self, tenant: str, mine: list[_PeakChange]) -> list[Exception | None]:
        """Queue ``mine`` together (one round writes them all) and wait for that round."""
        if not mine:
            return []
        with self._lock:
            self._queued.setdefault(tenant, []).extend(mine)
            if tenant not in self._writing:
                self._writing.add(tenant)
                mine[0].lead = True
        if not mine[0].lead:
            mine[0].woken.wait()  # written by another caller's round, or made the next round's writer
        if not mine[0].done:
            self._round(tenant)
        return [change.error for change in mine]

    def _round(self, tenant: str) -> None:
        """Write every change queued for ``tenant``; hand the next round to the first caller
        queued meanwhile (each caller writes at most one round: none waits on an endless queue)."""
        with self._lock:
            group = self._queued.pop(tenant, [])
        try:
            self._write(tenant, group)
        except Exception as exc:  # the store failed: every change of the round fails with it
            for change in group:
                change.error = exc
        finally:
            with self._lock:
                for change in group:
                    change.done = True
                following = self._queued.get(tenant)
                if following:
                    following[0].lead = True
                    following[0].woken.set()
                else:
                    self._writing.discard(tenant)
            for change in group:
                change.woken.set()

    def _write(self, tenant: str, group: list[_PeakChange]) -> None:
        for attempt in range(PEAK_TRIES):
            _back_off(attempt)
            doc, version = self.store.get_peaks(tenant)
            profile = Profile.from_doc(doc)
            for change in group:
                change.error = None
                after = profile if change.remove is None else profile.combined(change.remove, -1)
                if change.add is not None:
                    after = after.combined(change.add)
                    breach = self.limits.breach(profile, after) if change.checked else None
                    if breach is not None:
                        change.error = PeakQuotaError(*breach)
                        continue
                profile = after
            if all(change.error is not None for change in group):
                return  # every change refused: nothing to write
            if self.store.put_peaks(tenant, profile.to_doc(), version):
                return
        for change in group:
            if change.error is None:  # (one refused by the quotas keeps that answer: a 409)
                change.error = TransactionConflictError(
                    f"the peak profile of tenant {tenant!r} kept changing; try again"
                )

    def undo(self, tenant: str, add: Profile | None = None, remove: Profile | None = None) -> None:
        """Take back a :meth:`change` whose job write failed (best effort: logged, never raised).
        It restores a replaced job's profile whatever the limits say now (review: a registration
        that took the freed room made the undo of a failed replace refused, leaving the count high)."""
        try:
            self.change(tenant, add=remove, remove=add, checked=False)
        except Exception:
            log.warning("could not take back a peak change of tenant %s (its count stays high)", tenant)

    def recount(self, tenant: str, jobs: list[object]) -> Profile:
        """Rebuild the tenant's profile from its jobs (``JobService.recount_peaks``)."""
        total = Profile()
        for job in jobs:
            total = total.combined(job_profile(job))  # type: ignore[arg-type]
        for attempt in range(PEAK_TRIES):
            _back_off(attempt)
            _, version = self.store.get_peaks(tenant)
            if self.store.put_peaks(tenant, total.to_doc(), version):
                return total
        raise TransactionConflictError(f"the peak profile of tenant {tenant!r} kept changing; try again")


@dataclass(frozen=True)
class BackfillQuota:
    """A tenant's running backfills and backfilled slots a minute.

    Attributes
    ----------
    store
        Where the running set and the per-minute counts are.
    max_running
        Backfills of one tenant running at once (0: no limit).
    slots_per_minute
        Backfilled slots one tenant may send a minute (0: no limit).
    """

    store: TenantQuotaRepository
    max_running: int = 10
    slots_per_minute: int = 600

    @staticmethod
    def member(job_id: str, backfill_id: str) -> str:
        return f"{job_id}/{backfill_id}"

    def join(self, tenant: str, job_id: str, backfill_id: str, running: Callable[[str], bool]) -> None:
        """Count a starting backfill; ``running(member)`` tells whether a counted one still runs
        (a full set is checked once for members whose end was lost).

        Raises
        ------
        BackfillQuotaError
            ``max_running`` backfills of the tenant run.
        """
        if self.max_running <= 0:
            return
        member = self.member(job_id, backfill_id)
        if self.store.join_backfills(tenant, member, self.max_running):
            return
        for stale in [m for m in self.store.running_backfills(tenant) if not running(m)]:
            self.store.leave_backfills(tenant, stale)
        if not self.store.join_backfills(tenant, member, self.max_running):
            raise BackfillQuotaError(self.max_running)

    def leave(self, tenant: str, job_id: str, backfill_id: str) -> None:
        if self.max_running > 0:
            self.store.leave_backfills(tenant, self.member(job_id, backfill_id))

    def take(self, tenant: str, want: int, now: datetime) -> int:
        """How many of ``want`` backfilled slots the tenant may send now (taken from its minute)."""
        if self.slots_per_minute <= 0 or want <= 0:
            return max(want, 0)
        window = now.strftime("%Y-%m-%dT%H:%MZ")
        ttl = int((now + timedelta(seconds=SLOT_WINDOW_TTL_S)).timestamp())
        return self.store.take_backfill_slots(tenant, window, want, self.slots_per_minute, ttl)


def peak_limits(settings: Settings) -> PeakLimits:
    """The deployment's peak quotas (0: none)."""
    return PeakLimits(
        settings.max_slots_per_second_per_tenant or None, settings.max_slots_per_minute_per_tenant or None
    )


def backfill_quota(store: TenantQuotaRepository, settings: Settings) -> BackfillQuota:
    """The deployment's backfill quotas over ``store``."""
    return BackfillQuota(
        store, settings.max_backfills_per_tenant, settings.backfill_slots_per_minute_per_tenant
    )


__all__ = [
    "BackfillQuota",
    "BackfillQuotaError",
    "BurstQuotaError",
    "PeakQuota",
    "PeakQuotaError",
    "backfill_quota",
    "peak_limits",
]
