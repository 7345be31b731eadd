"""The worker's core: claim, overlap, run, heartbeat, finish, retry, dependencies.

The parts: :mod:`.decisions` (the pure claim decision), :mod:`.claim` (applying it),
:mod:`.versions` (which spec an attempt runs), :mod:`.completion` (delete after completion),
:mod:`.turns` (overlap skip/queue), :mod:`.lease` (heartbeat, stop, hand back), :mod:`.finish`
(the result, fenced), :mod:`.after` (what follows an end), :mod:`.records` (building and saving
records and timers), :mod:`.sqs` (the Lambda batch adapter), :mod:`.ports` (values and ports) and
:mod:`.worker` (the facade). Record transitions live on the model (:data:`punctual.models.TRANSITIONS`).

Shared by the worker Lambda (``functions/worker``) and the ECS worker
(:mod:`punctual.execution.worker_service`). Delivery from SQS is at least once; this module makes the
*start* of each attempt of a slot exactly once, and every status change a fenced,
conditional write on the execution record ``(job, slot)``.

Claiming a message for attempt ``n`` (:func:`decide_claim`)::

    record                             message                 action
    none                               n == 1, manual, child   START (create RUNNING n)
    MISSED                             a backfill's            START (any other: DROP, MISSED is final)
    SUPERSEDED (older version)         a newer release         START (released for the new spec)
    QUEUED at n                        n                       START (overlap checked again)
    RETRY_WAIT at n-1                  n                       START (the next attempt)
    RUNNING at n-1 or n, lease live    -                       WAIT (come back when it lapses)
    RUNNING at n-1 or n, lease lapsed  -                       TAKEOVER as attempt+1, new owner
                                                               (TIMED_OUT when none is left)
    the same attempt, already ended    redelivered             REPAIR (re-apply after-effects)
    anything else                      -                       DROP (whatever its age)

A START or TAKEOVER runs only while the job's spec is the one the slot was released for; else
the slot is recorded SUPERSEDED (:mod:`.versions`).

``lease_until`` is always compared with this worker's injected clock. A run's own message
received again is its lease lapsed by SQS's clock (the owner names the receive that claimed it:
:func:`.records.message_back`), whatever ``lease_until`` says: a crashed worker's message comes
back within the message lease and takes the run over (:mod:`.lease`). The Lambda worker writes
no lease timer. The message stays the lease
of the attempt it took over (it was sent for an earlier one), so in this mode a message for an
attempt older than the record's is read as one for the record's own attempt: WAIT, TAKEOVER
or, redelivered after the attempt ended, REPAIR (found by the chaos run, local/chaos: after
two crashes on one slot the message was dropped and the slot stayed RUNNING for good). A
takeover in this mode also writes a LEASE timer: the message has been returned at least once
and may reach the queue's maxReceiveCount; the timer recovers the run once it is dead-lettered.

The ECS worker heartbeats too and keeps a backstop LEASE timer far ahead, so the poller
recovers an execution whose message was lost or let go of.

Overlap (``skip`` / ``queue``) is decided when a slot's *first* attempt is claimed, by a
conditional write on the job's turn item (:mod:`.turns`): two slots of one job are never in
flight at once; retries and takeovers continue a slot already started, holding its turn.

A run is stopped (``Claim.cancel``, seen by the target adapter as ``SlotContext.cancel``) when
its lease is lost (its result is then discarded) or when its worker shuts down (it is then
handed back as a released attempt that another worker takes over at once).

Writes after a finish (retry timer, failed-executions message, next ``delay`` slot,
dependants) come *after* the record's write and are idempotent: if the worker dies between
the two, the message is redelivered, finds the attempt ended and re-applies them (REPAIR).
"""

from __future__ import annotations

from punctual.execution.after import failure_report
from punctual.execution.claim import FINISH_MARGIN_S
from punctual.execution.decisions import ClaimAction, ClaimDecision, decide_claim, lease_live
from punctual.execution.lease import SHUTDOWN
from punctual.execution.parking import (
    ERROR_BACKOFF_S,
    PARK_AFTER_RECEIVES,
    QUEUE_RECHECK_MIN_S,
    error_backoff_s,
)
from punctual.execution.ports import (
    Claim,
    ClaimOutcome,
    Delivery,
    FailureSink,
    FinishResult,
    HandleResult,
    JobPauser,
    MemoryFailureSink,
    MessageReturned,
    SqsFailureSink,
    WorkerConfig,
)
from punctual.execution.records import (
    LEASE_LOST_NOTE,
    MAX_VISIBILITY_S,
    RELEASED_NOTE,
    SUPERSEDED_NOTE,
    new_owner,
    owner_of,
)
from punctual.execution.sqs import queue_url_for_arn
from punctual.execution.turns import STALE_TURN_S
from punctual.execution.worker import JobServicePauser, Worker, default_invoker, default_signing_secrets
from punctual.models import MAX_ATTEMPT_RECORDS, TRANSITIONS, IllegalTransition, check_transition

__all__ = [
    "ERROR_BACKOFF_S",
    "FINISH_MARGIN_S",
    "LEASE_LOST_NOTE",
    "MAX_ATTEMPT_RECORDS",
    "MAX_VISIBILITY_S",
    "PARK_AFTER_RECEIVES",
    "QUEUE_RECHECK_MIN_S",
    "RELEASED_NOTE",
    "SHUTDOWN",
    "STALE_TURN_S",
    "SUPERSEDED_NOTE",
    "TRANSITIONS",
    "Claim",
    "ClaimAction",
    "ClaimDecision",
    "ClaimOutcome",
    "Delivery",
    "FailureSink",
    "FinishResult",
    "HandleResult",
    "IllegalTransition",
    "JobPauser",
    "JobServicePauser",
    "MemoryFailureSink",
    "MessageReturned",
    "SqsFailureSink",
    "Worker",
    "WorkerConfig",
    "check_transition",
    "decide_claim",
    "default_invoker",
    "default_signing_secrets",
    "error_backoff_s",
    "failure_report",
    "lease_live",
    "new_owner",
    "owner_of",
    "queue_url_for_arn",
]
