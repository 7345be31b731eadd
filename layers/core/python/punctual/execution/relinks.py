"""Passing on the successes of a parent whose first ``after(...)`` child was linked while its
slots were in flight.

A worker that claims a slot within ``SPEC_TRUST_S`` of its release runs it with the copy of the
job its message carries (:func:`punctual.execution.claim.carried_job`), read by the poller at the
release. When that attempt succeeds, the job's dependants are looked up only if the copy counts
any (``job.dependents``: the common case, a job nothing waits on, reads nothing). So a child
linked to a parent that had none (created ``after(P)``, or a replace that adds ``P``) after one
of ``P``'s slots was released and before that slot's success was recorded missed that success:
the child's slot was neither run nor recorded (found by the after() oracle, seed 173).

The link repairs it instead. When a create or replace links a parent whose dependents count was 0,
it writes a RELINK timer for that parent (:func:`relink_timer`; before the job's write, so that a
write of it that fails fails the request with nothing stored, and a timer whose job was not stored
finds no job waiting), due once every claim that could have trusted an older copy has been made
(:data:`RELINK_AFTER_S`: the trust window and the clock skew between nodes). Its release sends a
RELINK message, and the worker that receives it (:meth:`Relinks.check`) reads the parent
(strongly) and its newest records:

- a slot that succeeded at or after the link gets its dependants dispatched, exactly as the
  success's own worker does (:meth:`AfterEffects.dispatch_dependants`: every step idempotent, so a
  success that did see the child, or a repeat of this check, changes nothing);
- an attempt still RUNNING that started before the link could be seen (a copy up to the trust
  window older than its claim) is checked again once it must have ended (its start, its job's
  timeout and a margin): a RELINK timer of the same link, written again.

Anything else needs nothing: a retry, a queued slot's turn and a takeover read the job when they
are claimed, and a slot released after the link carries a copy that counts the child.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from punctual.dispatch.queues import DispatchMessage, MessageKind, message_for
from punctual.models import Execution, ExecutionStatus, Job, JobState
from punctual.store.base import JobStore
from punctual.timing.timers import Timer, TimerKind, TimerLayout, slot_instant, slot_key

if TYPE_CHECKING:
    from punctual.execution.after import AfterEffects

log = logging.getLogger("punctual.execution")

# A claim trusts its message's copy for SPEC_TRUST_S (5 s, execution.claim) by its own clock,
# which may be CLOCK_SKEW_S (5 s) behind the releasing poller's: every claim that could have
# trusted a copy read before the link is made this long after it.
RELINK_AFTER_S = 12.0
RECHECK_MARGIN_S = 30.0  # past a running attempt's timeout: its end (or its takeover) is recorded
RELINK_READ = 100  # the parent's newest records read by a check
GIVE_UP_S = 600.0  # an attempt RUNNING this long past its timeout is not waited for any more


def relink_timer(
    layout: TimerLayout, parent: Job, linked_at: datetime, due: datetime, now: datetime
) -> Timer:
    """The RELINK timer of ``parent``'s link at ``linked_at``, due at ``due``."""
    return layout.make(
        now=now,
        due=due,
        job_id=parent.id,
        tenant=parent.tenant,
        slot=slot_key(linked_at),
        attempt=1,
        kind=TimerKind.RELINK,
        job_version=parent.version,
    )


def check_links(
    store: JobStore, layout: TimerLayout, parents: dict[str, Job], linked: tuple[str, ...], now: datetime
) -> None:
    """Write the RELINK timers a link made at ``now`` needs: one for each parent in ``linked`` that
    no job waited on when it was read (``parents``: as read before the link), whose slots in
    flight were claimed with copies that count no dependant."""
    due = now + timedelta(seconds=RELINK_AFTER_S)
    timers = [
        relink_timer(layout, parents[name], now, due, now)
        for name in linked
        if name in parents and parents[name].dependents <= 0
    ]
    if timers:
        store.put_timers(timers)


def relink_message(job: Job | None, timer: Timer, now: datetime) -> DispatchMessage | None:
    """The message a due RELINK timer becomes (None: its job is gone)."""
    if job is None or job.state is JobState.DELETED:
        return None
    return message_for(job, timer.slot, timer.due, 1, MessageKind.RELINK, now, spec="")


class Relinks:
    """A worker's check of a RELINK message (see the module docstring)."""

    def __init__(self, store: JobStore, after: AfterEffects, layout: TimerLayout) -> None:
        self.store = store
        self.after = after
        self.layout = layout

    def check(self, message: DispatchMessage, now: datetime) -> str:
        """Pass on the parent's successes since the link; say what was done (for the log)."""
        job = self.store.get_job(message.tenant, message.job_id)  # strongly: the link is new
        if job is None or job.state is JobState.DELETED:
            return "job is gone"
        if job.dependents <= 0:
            return "no job waits on it any more"
        linked_at = slot_instant(message.slot)
        page = self.store.list_executions(job.tenant, job.id, RELINK_READ)
        passed, recheck = 0, None
        for record in page.items:
            # A parent added counts from its next success (docs/schedules.md): one before the link
            # is not the child's
            if _succeeded_since(record, linked_at):
                self.after.dispatch_dependants(job, record, now)
                passed += 1
            elif (end := _running_since_before(record, job, linked_at)) is not None:
                if end < now - timedelta(seconds=GIVE_UP_S):  # stuck: its takeover reads the job
                    log.warning("job %s: slot %s still RUNNING long past its timeout", job.id, record.slot)
                    continue
                end = max(end, now + timedelta(seconds=RECHECK_MARGIN_S))
                recheck = max(recheck or end, end)
        if recheck is not None:
            self.store.put_timers([relink_timer(self.layout, job, linked_at, recheck, now)])
        if passed:
            log.info(
                "job %s: passed %d success(es) on to after() jobs linked at %s", job.id, passed, message.slot
            )
        return f"relink checked ({passed} passed on{', again later' if recheck else ''})"


def _succeeded_since(record: Execution, since: datetime) -> bool:
    return (
        record.status is ExecutionStatus.SUCCEEDED
        and record.finished_at is not None
        and record.finished_at >= since
    )


def _running_since_before(record: Execution, job: Job, linked_at: datetime) -> datetime | None:
    """When to look again at ``record``: an attempt RUNNING that may have been claimed with a copy
    read before the link (claimed up to RELINK_AFTER_S after it), once it must have ended."""
    if record.status is not ExecutionStatus.RUNNING or record.started_at is None:
        return None
    if record.started_at > linked_at + timedelta(seconds=RELINK_AFTER_S):
        return None  # claimed after every copy older than the link was out of trust
    return record.started_at + timedelta(seconds=job.timeout_seconds + RECHECK_MARGIN_S)
