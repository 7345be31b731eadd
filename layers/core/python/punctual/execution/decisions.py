"""The claim decision: what a worker does with a message, given the slot's record as it is.

A pure function (:func:`decide_claim`) of the record, the message, the clock and the job's retry
policy; :mod:`punctual.execution.claim` applies it with conditional writes. The table::

    record                             message                 action
    none                               n == 1, manual, child   START (create RUNNING n)
    MISSED                             a backfill's            START (a user asked to run it)
    MISSED                             a backfill's child      START (its parent's backfill runs it)
    MISSED                             any other               DROP (MISSED is final)
    SUPERSEDED (older version)         n == 1, newer version   START (released for the new spec)
    QUEUED at n                        n                       START (overlap checked again)
    RETRY_WAIT at n-1                  n                       START (the next attempt; EXHAUSTED:
                                                               FAILED when past max_age_seconds,
                                                               unless handed back at shutdown)
    RUNNING at n-1 or n, lease live    -                       WAIT (come back when it lapses)
    RUNNING at n-1 or n, lease lapsed  -                       TAKEOVER as attempt+1, new owner
    RUNNING (any attempt)              the run's own message   (EXHAUSTED: TIMED_OUT when none is left)
                                       received again
    the same attempt, already ended    redelivered             REPAIR (re-apply after-effects)
    anything else                      -                       DROP (whatever its age)

``lease_until`` is always compared with this worker's injected clock. A run's own message received
again (the owner names its receive: :func:`punctual.execution.records.message_back`) is its lease
lapsed by SQS's clock, whatever ``lease_until`` says: its worker renews its visibility every few
seconds and stops the run before it could lapse (:mod:`punctual.execution.keeper`). The message is the lease
of the attempt it started or took over (both lanes), so a message older than the record's
attempt, received again, is read as one for the record's own attempt (found by the chaos run:
after two crashes on one slot the message was dropped and the slot stayed RUNNING; on the ECS
lane again by the sustained-fault phases, once its LEASE timers became far backstops).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from punctual.dispatch.queues import DispatchMessage, MessageKind
from punctual.execution.records import RELEASED_NOTE
from punctual.models import Execution, ExecutionStatus

# A retry reaching its worker this long after its last instant (max_age_seconds) still starts: the
# retry was due inside the age, and its release and claim take a moment (review: 0.6 s late failed it).
AGE_GRACE_S = 10.0

# The messages that release a slot (its first attempt): only these start a SUPERSEDED slot again.
_RELEASES = (MessageKind.FIRE, MessageKind.MANUAL, MessageKind.CHILD, MessageKind.BACKFILL)


class ClaimAction(StrEnum):
    START = "start"
    TAKEOVER = "takeover"
    EXHAUSTED = "exhausted"
    WAIT = "wait"
    REPAIR = "repair"
    DROP = "drop"


@dataclass(frozen=True)
class ClaimDecision:
    action: ClaimAction
    reason: str
    wait_s: float = 0.0


# Every first claim's decision (immutable: one shared, not one built a message). The claim takes
# it without asking decide_claim for a fresh message with no record (punctual.execution.claim).
NEW_SLOT = ClaimDecision(ClaimAction.START, "new slot")
# Messages whose first claim creates the slot's record whatever their attempt (as an attempt 1 does)
FRESH_KINDS = (MessageKind.MANUAL, MessageKind.CHILD)


def lease_live(execution: Execution, now: datetime) -> bool:
    """True while a RUNNING execution's lease has not lapsed (by the caller's clock)."""
    return (
        execution.status is ExecutionStatus.RUNNING
        and execution.lease_until is not None
        and execution.lease_until > now
    )


def decide_claim(
    current: Execution | None,
    message: DispatchMessage,
    now: datetime,
    max_attempts: int,
    max_age_s: float,
    redelivered: bool = False,
    message_is_lease: bool = False,
    message_back: bool = False,
) -> ClaimDecision:
    """What a worker does with a message for ``message.attempt``, given the record as it is.

    A pure function of its arguments (the table in the module docstring).

    Parameters
    ----------
    current
        The execution record, or None when there is none.
    message
        The delivered message.
    now
        The worker's clock.
    max_attempts, max_age_s
        The job's retry policy: a lapsed lease past them ends the slot TIMED_OUT.
    redelivered
        The same SQS message was received before (its worker may have died after writing
        the record but before its after-effects).
    message_is_lease
        The message is the lease of the attempt it started or took over (both lanes: a short
        visibility renewed while the run lasts), so a message older than the record's attempt,
        received again, still carries it; a fresh copy of an older attempt (a duplicate, a
        re-send) does not, and drops.
    message_back
        The message is the very one whose receive the running attempt's owner names, received
        again (:func:`punctual.execution.records.message_back`): its worker stopped renewing its
        visibility, so by SQS's clock the run's lease lapsed, whatever ``lease_until`` and
        this worker's clock say.

    Returns
    -------
    ClaimDecision
    """
    n = message.attempt
    carried = message_back or (
        message_is_lease and redelivered and current is not None and current.attempt > n
    )
    if current is None:
        if n == 1 or message.kind in FRESH_KINDS:
            return NEW_SLOT
        return ClaimDecision(ClaimAction.DROP, f"no record for attempt {n} (expired or never started)")
    status = current.status
    if status is ExecutionStatus.MISSED:
        # Final: the slot was accounted for as not run (and alerted so). Only a backfill, an
        # explicit request to run past slots, runs it; any other message (its original one
        # arriving late, a repeat) is dropped. The create of a fresh claim is conditional on no
        # record, so a MISSED record written first makes the claim end here.
        if message.kind == MessageKind.BACKFILL and n == 1:
            return ClaimDecision(ClaimAction.START, "slot recorded missed is backfilled")
        if message.kind == MessageKind.CHILD and message.backfill and n == 1:
            # A child's slot recorded MISSED under its parent's (execution.unrun_children), sent
            # by the parent's backfill with its dependants: run as the parent's slot was.
            return ClaimDecision(ClaimAction.START, "slot recorded missed is backfilled with its parent")
        return ClaimDecision(ClaimAction.DROP, "slot is recorded missed")
    if (
        status is ExecutionStatus.SUPERSEDED
        and message.job_version > current.job_version
        and n == 1
        and message.kind in _RELEASES
    ):
        # A release of the slot for the job's new spec (not a wake-up such as a turn or a check).
        return ClaimDecision(ClaimAction.START, "slot released again for the job's new spec")
    if status is ExecutionStatus.QUEUED:
        if current.attempt == n:
            return ClaimDecision(ClaimAction.START, "queued slot")
        return ClaimDecision(ClaimAction.DROP, f"slot is queued as attempt {current.attempt}")
    if status is ExecutionStatus.RETRY_WAIT:
        if (
            current.attempt == n - 1
            and current.error != RELEASED_NOTE
            and now > current.retry_origin + timedelta(seconds=max_age_s + AGE_GRACE_S)
        ):
            # Its retry reached a worker past the slot's age (a poller or the workers behind):
            # it does not start (QA: attempt 2 ran 301 s after the slot with max_age_seconds 120).
            # Not a run its worker handed back at shutdown: that is not counted against the retry
            # policy (QA: an ECS run of days handed back a day in ended FAILED, "past max_age")
            return ClaimDecision(ClaimAction.EXHAUSTED, "retry past max_age_seconds")
        if current.attempt == n - 1:
            return ClaimDecision(ClaimAction.START, "next attempt")
        if redelivered and (current.attempt == n or carried):
            return ClaimDecision(ClaimAction.REPAIR, "redelivery of an attempt that ended")
        return ClaimDecision(ClaimAction.DROP, f"slot waits for attempt {current.attempt + 1}")
    if status is ExecutionStatus.RUNNING:
        if current.attempt not in (n - 1, n) and not carried:
            return ClaimDecision(
                ClaimAction.DROP, f"attempt {current.attempt} is running; message is for {n}"
            )
        if lease_live(current, now) and not message_back:
            assert current.lease_until is not None
            wait = (current.lease_until - now).total_seconds()
            return ClaimDecision(ClaimAction.WAIT, "lease is live", wait_s=wait)
        used = current.attempt - current.releases
        too_old = now > current.retry_origin + timedelta(seconds=max_age_s)
        if used >= max_attempts or too_old:
            return ClaimDecision(ClaimAction.EXHAUSTED, "lease lapsed and no attempt is left")
        return ClaimDecision(ClaimAction.TAKEOVER, "lease lapsed")
    # A retry's message back after the claim ended its slot FAILED (not started: past its age, or
    # its job paused), its after-effects maybe cut short: they run again (review)
    unstarted = (
        status is ExecutionStatus.FAILED and current.attempt == n - 1 and message.kind == MessageKind.RETRY
    )
    if redelivered and (current.attempt == n or carried or unstarted):
        return ClaimDecision(ClaimAction.REPAIR, "redelivery of an attempt that ended")
    return ClaimDecision(ClaimAction.DROP, f"slot already {status.value}")
