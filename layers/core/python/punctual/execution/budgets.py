"""The workers' side of the targets' rate budgets (:mod:`punctual.dispatch.smoothing`).

The poller places each scheduled slot it releases on an instant of its target's budget. Two
calls reach a worker without that placement and are placed here, on the same reservations
(:mod:`punctual.dispatch.budget_reservations`):

* a smoothed call whose message reached its worker after its instant takes a new instant
  (:meth:`WorkerBudgets.late_instant`), so late calls of several workers do not bunch; so does a
  retry its tenant's retry rate held (:meth:`WorkerBudgets.late_retry`);
* an ``after(...)`` job's slot, sent by the worker whose parent slot completed it, is placed
  like a scheduled slot (:meth:`WorkerBudgets.place_child`): a fan-out of many children naming
  one host otherwise reached it all at once.

What cannot hold within its lateness goes now, over the budget, and is reported as the poller
reports it: ``RateBudgetOverruns``, the ``rate_budget_overrun`` record and its event.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from punctual.delivery.notifications import Notifier
from punctual.dispatch.budget_reservations import RETRY_KEY, BudgetRequest, SharedBudgetLedger, late_instant
from punctual.dispatch.queues import DispatchMessage
from punctual.dispatch.smoothing import HEAD_START_S, LoggedOverruns, Overrun, budget_for, target_key
from punctual.execution.ports import WorkerConfig
from punctual.models import Job
from punctual.runtime.observability import MetricsSink
from punctual.store.reservations import BudgetReservationRepository
from punctual.timing.instants import format_instant_ms

BUDGET_PACE_MAX_S = 10.0  # the longest a late smoothed call waits for its new instant


@dataclass
class WorkerBudgets:
    """Places a worker's calls on their targets' budgets (see the module)."""

    store: BudgetReservationRepository
    config: WorkerConfig
    metrics: MetricsSink
    notifier: Notifier

    def rate(self, job: Job) -> float | None:
        """The budget of the job's target: its own, else the deployment's for its host."""
        own = getattr(job.target, "rate_budget_per_second", None)
        if own is None and not self.config.rate_budgets:
            return None
        return budget_for(self.config.rate_budgets, job.tenant, target_key(job.target), own)

    def lateness(self, job: Job) -> float:
        """How late a slot of the job may go for its budget: its own, else the deployment's."""
        own = job.max_lateness_seconds
        return float(own if own is not None else self.config.max_lateness_s)

    def late_instant(
        self, job: Job, slot: tuple[str, datetime], instant: datetime, rate: float, now: datetime
    ) -> datetime:
        """A slot reached after its instant takes a new one of its budget, shared by every worker
        (:func:`punctual.dispatch.budget_reservations.late_instant`); none left within its lateness
        and the longest the worker waits, it goes now, over the budget, and is reported."""
        lateness = self.lateness(job)
        # no further than the worker waits (BUDGET_PACE_MAX_S): a call made before its instant
        # would land on another slot's
        bound = min(lateness, (now - slot[1]).total_seconds() + BUDGET_PACE_MAX_S)
        owner = f"{job.id}/{slot[0]}"
        request = BudgetRequest(job.tenant, target_key(job.target), owner, rate, slot[1], bound)
        placed = late_instant(self.store, request, instant, now)
        if placed.overrun:
            self._overrun(job, slot, request, lateness, now)
        return placed.release_at

    def late_retry(
        self, job: Job, slot: tuple[str, datetime], attempt: int, instant: datetime, now: datetime
    ) -> datetime:
        """A retry its tenant's retry rate held until ``instant`` that reached its worker after it
        (a worker stalled, a busy queue) takes a new instant of the tenant's retry grid, shared by
        every worker and poller (:func:`punctual.dispatch.budget_reservations.late_instant`), so
        late retries of several workers, or of one stalled worker, do not reach the receiver
        together (QA: a worker stalled 1.2 s on a busy machine called 7 of a tenant's retries
        within 0.9 s at a rate of 3). None left within the longest the worker waits: now."""
        rate = self.config.max_retries_per_second
        if rate <= 0:
            return instant
        owner = f"{job.id}/{slot[0]}#{attempt}"
        request = BudgetRequest(job.tenant, RETRY_KEY, owner, rate, instant, BUDGET_PACE_MAX_S)
        return late_instant(self.store, request, instant, now).release_at

    def place_child(
        self, child: Job, message: DispatchMessage, now: datetime
    ) -> tuple[DispatchMessage, float]:
        """An ``after(...)`` slot sent now, placed on its target's budget like a scheduled slot:
        the message with its ``not_before`` and how many seconds after now that is (0: not
        smoothed, or over the budget and reported)."""
        rate = self.rate(child)
        if rate is None:
            return message, 0.0
        lateness = self.lateness(child)
        head = now + timedelta(seconds=HEAD_START_S)
        owner = f"{child.id}/{message.slot}"
        request = BudgetRequest(child.tenant, target_key(child.target), owner, rate, now, lateness, head)
        placed = SharedBudgetLedger(self.store, metrics=self.metrics).place_all([request])[0]
        if placed.overrun:
            self._overrun(child, (message.slot, now), request, lateness, now)
            return message, 0.0
        delay = (placed.release_at - now).total_seconds()
        return replace(message, not_before=format_instant_ms(placed.release_at)), delay

    def _overrun(
        self, job: Job, slot: tuple[str, datetime], request: BudgetRequest, lateness: float, now: datetime
    ) -> None:
        overrun = Overrun(job.tenant, job.id, slot[0], request.key, request.rate, lateness, slot[1])
        self.metrics.add("RateBudgetOverruns", 1)
        LoggedOverruns().overrun(overrun)
        self.notifier.overrun(job, overrun, now)
