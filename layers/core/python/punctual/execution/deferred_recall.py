"""Deferred slots brought back once their tenant's signing key opens again, not when their
deferral's wait ends.

A slot whose webhook signing secret cannot be decrypted because KMS throttles or is unavailable
is *deferred* (:meth:`punctual.execution.finish.Finisher.finish`): recorded RETRY_WAIT, not counted
as an attempt, and tried again after 2 s, 4 s, 8 s, ... at most 5 minutes
(:func:`punctual.timing.retries.deferral_at`), so that a long outage neither fails it nor calls KMS
for it every few seconds. Alone, that wait also set the end of the outage's lateness: a slot
deferred for the eighth time during a five-minute KMS outage waited up to 256 s more once KMS
answered again (QA25, in-process: a 2-minute outage's slots ran up to 61 s after its end, a
5-minute outage's up to 251 s).

So the worker process remembers the slots it deferred for a tenant's secret (at most
:data:`REMEMBERED_MAX`) and, once a secret of that tenant opens in this process again (its data
key was unwrapped: KMS answered), moves each one's retry timer to now, if its record still waits
on that deferral: the pollers release it at their next near-lane poll, through the tenant's
retry rate as any retry. The timer written at the deferral stays and is found stale when due. Each
slot is brought back once at most (one deferred again keeps its wait: nothing more is spent on it
than today), and slots deferred by a worker that is gone keep their wait. Nothing is read or
written while nothing is remembered. Counted ``DeferredSlotsBroughtBack``.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

from punctual.execution.records import Ledger, deferred
from punctual.models import ExecutionStatus, Job
from punctual.runtime.observability import MetricsSink

log = logging.getLogger("punctual.execution")

REMEMBERED_MAX = 1000  # deferred slots a worker remembers (the oldest forgotten first)
# Brought back by one secret that opens (a read and a write each, before that run's call): the
# oldest first, the rest by the next run of the tenant.
BROUGHT_BACK_AT_ONCE = 25


class DeferredSlots:
    """The slots a worker deferred because a tenant's signing secret could not be read."""

    def __init__(self, ledger: Ledger, metrics: MetricsSink) -> None:
        self.ledger = ledger
        self.metrics = metrics
        self._slots: OrderedDict[tuple[str, str, str], Job] = OrderedDict()  # (tenant, job, slot)
        self._done: OrderedDict[tuple[str, str, str], None] = OrderedDict()  # brought back once
        self._lock = threading.Lock()

    def deferred(self, job: Job, slot: str) -> None:
        """``slot`` of ``job`` is being deferred: its secret could not be read for now."""
        key = (job.tenant, job.id, slot)
        with self._lock:
            if key in self._done:
                return
            self._slots.pop(key, None)
            self._slots[key] = job
            while len(self._slots) > REMEMBERED_MAX:
                self._slots.popitem(last=False)

    def opened(self, tenant: str) -> int:
        """A secret of ``tenant`` was read: bring its remembered deferred slots back now (the
        oldest :data:`BROUGHT_BACK_AT_ONCE`). Returns how many retry timers were moved."""
        if not self._slots:  # (the healthy path: nothing to do)
            return 0
        now = self.ledger.clock.now()
        with self._lock:
            keys = [key for key in self._slots if key[0] == tenant][:BROUGHT_BACK_AT_ONCE]
            jobs = [(key, self._slots.pop(key)) for key in keys]
            for key in keys:
                self._done[key] = None
            while len(self._done) > REMEMBERED_MAX:
                self._done.popitem(last=False)
        moved = 0
        for (_, job_id, slot), job in jobs:
            try:
                current = self.ledger.store.get_execution(tenant, job_id, slot)
                if current is None or current.status is not ExecutionStatus.RETRY_WAIT:
                    continue  # run or ended meanwhile: nothing waits on this deferral
                if not deferred(current):
                    continue  # (a retry of the target's failure: its backoff is the policy's)
                self.ledger.put_retry_timer(job, current, now, now)
                moved += 1
            except Exception:  # its deferral's own timer brings it back anyway
                log.warning("could not bring back deferred slot %s of %s", slot, job_id, exc_info=True)
        if moved:
            self.metrics.add("DeferredSlotsBroughtBack", moved)
            log.info("secrets of %s open again: %d deferred slots brought back", tenant, moved)
        return moved
