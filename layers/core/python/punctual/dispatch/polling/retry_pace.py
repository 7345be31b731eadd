"""A tenant's retries, released at most ``maxRetriesPerSecondPerTenant`` a second.

The tenant quotas (:mod:`punctual.security.peaks`) count first attempts only, and a job may ask for
186 attempts a millisecond apart: a tenant at a tenth of its trigger quota whose target always fails
would start ~100 x 186 attempts a second (Little's law: attempts a second = slots a second x attempts
a slot, whatever the waits), above what the deployment is built for, and every tenant's slots would
run late. So the poller places each retry it releases (a RETRY timer whose record still waits for
it) on a grid of its tenant's, as a rate budget places a first attempt on its target's
(:mod:`punctual.dispatch.smoothing`): the pseudo target :data:`RETRY_KEY` of the tenant, at the
deployment's retry rate, each instant a reservation every poller shares
(:mod:`punctual.dispatch.budget_reservations`, owner ``<job>/<slot>#<attempt>``: the two pollers of
a group agree on a retry's instant, the groups take turns on the grid). So all of a minute's pollers
together release at most the rate's retries of one tenant in every one-second window; other tenants'
grids, and every first attempt, are untouched.

* A retry whose instant is at or within :data:`RETRY_WINDOW_S` of now is sent at once; an instant
  after its due goes in the message's ``not_before``, and the worker holds it until then (as a
  smoothed slot, :mod:`punctual.execution.claim`).
* None free within it: the retry is **deferred**, never dropped. Its timer is written again,
  later (at the next instants this poller has not yet handed out to the tenant's deferred retries,
  so a storm's backlog is written once per retry, not once a window), and placed again then.
  Every retry the rate released a step of its grid or more after the first instant it could have
  had (its due, or its release for one a poll released after its due) is counted
  (``RetriesDeferred``), and each chunk logs one ``retries_deferred`` record per tenant.
* The slot's ``retry.max_age_seconds`` still counts: a retry deferred past it is sent unplaced when
  its age is over, and its claim ends the slot FAILED, ``past max_age`` (docs/tenants.md).
* Takeovers, a run handed back by a worker that shut down (:data:`RELEASED_NOTE`), first attempts
  and hand triggers are never placed here. A rate of 0: no limit, nothing placed.

Cost: only retries pay, as a budgeted slot does (one conditional write each, the view's query per
chunk and tenant); a deferred retry one timer write more.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from punctual.dispatch.budget_reservations import RETRY_KEY, BudgetRequest, SharedBudgetLedger
from punctual.dispatch.queues import DispatchMessage
from punctual.dispatch.smoothing import spacing_us
from punctual.execution.decisions import AGE_GRACE_S
from punctual.execution.records import RELEASED_NOTE
from punctual.models import Execution, Job
from punctual.runtime.observability import MetricsSink
from punctual.timing.instants import format_instant_ms
from punctual.timing.timers import Timer, TimerLayout

log = logging.getLogger("punctual.dispatch.polling")

# How far ahead of now a retry is placed and sent (its worker holds it): the queue holds at most
# this many seconds of a tenant's retries; what does not fit is deferred in the table.
RETRY_WINDOW_S = 10.0


@dataclass
class DueRetry:
    """A retry the poller would send now: its timer, job, record and message."""

    timer: Timer
    job: Job
    execution: Execution
    message: DispatchMessage


@dataclass
class PacedRetries:
    """What becomes of a chunk's retries: messages to send, timers to write again (deferred)."""

    messages: list[tuple[Job, DispatchMessage]] = field(default_factory=list)
    deferred: list[tuple[Job, Timer]] = field(default_factory=list)


class RetryPacer:
    """Places a poller's retries on their tenants' retry grids (see the module).

    Parameters
    ----------
    ledger
        The poller's shared budget ledger (its lane is the poller's shard group).
    rate
        Retries a second per tenant (0: no limit).
    layout
        Where a deferred retry's timer goes.
    metrics
        Where ``RetriesDeferred`` goes.
    """

    def __init__(
        self, ledger: SharedBudgetLedger, rate: float, layout: TimerLayout, metrics: MetricsSink
    ) -> None:
        self.ledger = ledger
        self.rate = rate
        self.layout = layout
        self.metrics = metrics
        self._lock = threading.Lock()
        self._deferred_to: dict[str, datetime] = {}  # per tenant: the next instant for a deferred retry

    def applies(self, execution: Execution) -> bool:
        """Whether the retry of this record is placed (a run handed back at shutdown is not)."""
        return self.rate > 0 and execution.error != RELEASED_NOTE

    def pace(self, retries: list[DueRetry], now: datetime) -> PacedRetries:
        out = PacedRetries()
        placing: list[DueRetry] = []
        for retry in retries:
            if now > self._age_end(retry):  # its claim ends it FAILED: no attempt, nothing to place
                out.messages.append((retry.job, retry.message))
            else:
                placing.append(retry)
        if not placing:
            return out
        requests = [self._request(retry, now) for retry in placing]
        placements = self.ledger.place_all(requests)
        late: dict[str, list[datetime]] = {}
        # A retry on the first instant of its lane after its due is on time (the grid's step)
        aligned = timedelta(microseconds=spacing_us(self.rate) * max(1, self.ledger.lane[1]))
        for retry, request, placed in zip(placing, requests, placements, strict=True):
            if placed.overrun:
                due = self._defer(retry, now, aligned)
                out.deferred.append((retry.job, _again(self.layout, retry.timer, now, due)))
                late.setdefault(retry.job.tenant, []).append(due)
                continue
            message = retry.message
            if placed.release_at > request.due:
                message = replace(message, not_before=format_instant_ms(placed.release_at))
                # Counted when the rate moved it: past the first instant it could have had (its due,
                # or now for a retry released after its due: a poll's lag is not the rate's doing)
                earliest = request.not_before or request.due
                if placed.release_at - earliest >= aligned:
                    late.setdefault(retry.job.tenant, []).append(placed.release_at)
            out.messages.append((retry.job, message))
        for tenant, instants in late.items():
            self.metrics.add("RetriesDeferred", len(instants))
            record = {
                "event": "retries_deferred",
                "tenant": tenant,
                "count": len(instants),
                "rate_per_second": self.rate,
                "until": format_instant_ms(max(instants)),
            }
            log.warning(
                "retries of tenant %s deferred by its retry rate: %d",
                tenant,
                len(instants),
                extra={"retries_deferred": record},
            )
        return out

    def _request(self, retry: DueRetry, now: datetime) -> BudgetRequest:
        due = retry.timer.due
        start = max(due, now)
        # within the window, and not past the slot's age: a retry placed there would not start
        end = min(start + timedelta(seconds=RETRY_WINDOW_S), self._age_end(retry))
        window = (end - due).total_seconds()
        owner = f"{retry.job.id}/{retry.timer.slot}#{retry.timer.attempt}"
        return BudgetRequest(retry.job.tenant, RETRY_KEY, owner, self.rate, due, window, start)

    def _defer(self, retry: DueRetry, now: datetime, step: timedelta) -> datetime:
        """When a retry with no free instant in the window comes back: after the window, behind the
        tenant's retries this poller deferred before (``step``: one lane instant each), never past
        its age."""
        tenant = retry.job.tenant
        with self._lock:
            due = max(now + timedelta(seconds=RETRY_WINDOW_S), self._deferred_to.get(tenant, now))
            self._deferred_to[tenant] = due + step
        return min(due, self._age_end(retry) + timedelta(seconds=1))

    @staticmethod
    def _age_end(retry: DueRetry) -> datetime:
        """Past this, its claim ends the slot, ``past max_age`` (:mod:`punctual.execution.decisions`)."""
        age = retry.job.retry.max_age_seconds + AGE_GRACE_S
        return retry.execution.retry_origin + timedelta(seconds=age)


def _again(layout: TimerLayout, timer: Timer, now: datetime, due: datetime) -> Timer:
    """``timer`` written again at another due (its lane and shard follow the due)."""
    return layout.make(
        now=now,
        due=due,
        job_id=timer.job_id,
        tenant=timer.tenant,
        slot=timer.slot,
        attempt=timer.attempt,
        kind=timer.kind,
        job_version=timer.job_version,
        owner=timer.owner,
    )
