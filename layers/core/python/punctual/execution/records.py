"""The execution records a worker writes, built in one place, and the one way they are saved.

Every record a worker makes is built here (:func:`new_record` for a slot without one,
:func:`running` for an attempt that starts, :meth:`Execution.ended` for one that ends), and every
write goes through :class:`Ledger`, which checks the transition against the state machine on the
model (:data:`punctual.models.TRANSITIONS`) and sets the TTL. Timers (retry, lease, queued check)
are written by :meth:`Ledger.put_timer` only.
"""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime, timedelta
from typing import Any

from punctual.dispatch.load_forecast import forecast_ecs_timer
from punctual.dispatch.queues import DispatchMessage
from punctual.execution.ports import Delivery, WorkerConfig
from punctual.models import Execution, ExecutionStatus, Job, check_transition
from punctual.models.base import BIDI_FORMATTING
from punctual.models.executions import RELEASED_NOTE as RELEASED_NOTE
from punctual.models.executions import typed_execution
from punctual.runtime.clock import Clock
from punctual.store.base import Expect, JobStore
from punctual.timing.slots import dispatch_instant, next_slot
from punctual.timing.timers import TimerKind, slot_instant, slot_key
from punctual.usecases.backfills import parse_backfill_ref

# Begins the error of an attempt deferred because the scheduler's own infrastructure (KMS, STS)
# failed before the target was called: handed back, not counted (punctual.execution.finish)
DEFERRED_NOTE = "deferred, not counted as an attempt: "

# Ends the error of a retryable failure whose retry would come past max_age_seconds (a Retry-After
# hint, or the backoff, pushed it there): its dead letter's condition is the age (QA: it read
# NonRetryableError, the condition being worked out again without the hint).
AGE_CUT_NOTE = "not retried: its retry would come past max_age_seconds"
LEASE_LOST_NOTE = "lease expired: the worker was lost"
SUPERSEDED_NOTE = "superseded: the job's spec changed"
MAX_SUMMARY_CHARS = 500
MAX_VISIBILITY_S = 43_200  # SQS: 12 hours
# The longest a record waits for its retry with no write (retry.max_seconds, 7 days at most, and a
# day for deferrals and Retry-After): a RETRY_WAIT record is kept that much longer than the
# retention, so a deployment keeping records fewer days than a retry's wait does not lose the slot
# (QA26: with retentionDays under 8 the record could expire first and the retry, finding no
# record, was dropped: the slot gone with nothing to say so).
RETRY_WAIT_KEPT_S = 8 * 86_400
LIVE = frozenset({ExecutionStatus.RUNNING})


def deferred(execution: Execution) -> bool:
    """Whether ``execution`` (RETRY_WAIT) waits after an attempt deferred (:data:`DEFERRED_NOTE`)."""
    return (execution.error or "").startswith(DEFERRED_NOTE)


# The bidirectional formatting characters (models.base refuses them in names and tags) a target's
# answer may put in a record's error: shown as U+FFFD (QA21: "\u202e" made a failure read as
# "SUCCEEDED, exit code 0" in the console).
_BIDI_SHOWN = str.maketrans(dict.fromkeys(BIDI_FORMATTING, "\ufffd"))


def summary(text: str) -> str:
    cut = text[:MAX_SUMMARY_CHARS]
    return cut if cut.isascii() else cut.translate(_BIDI_SHOWN)


def visibility(seconds: float) -> int:
    """A message visibility in whole seconds, within what SQS accepts."""
    return max(0, min(MAX_VISIBILITY_S, math.ceil(seconds)))


def new_owner() -> str:
    """A fresh lease owner: ``uuid.uuid4().hex``, without building a ``UUID`` object."""
    return owner_of(os.urandom(16))


def claim_owner(message_id: str, receive_count: int) -> str:
    """The owner of a claim made from one receive of a queued message: fresh, and naming the
    message (``<8 hex>~<receive count>~<SQS message id>``) so that :func:`message_back` can tell
    its return; :func:`new_owner` for a message of no queue (no ``message_id``)."""
    if not message_id:
        return new_owner()
    return f"{os.urandom(4).hex()}~{receive_count}~{message_id}"


def owner_for(delivery: Delivery | None) -> str:
    """The owner of a claim of the message ``delivery`` brought (:func:`claim_owner`)."""
    return new_owner() if delivery is None else claim_owner(delivery.message_id, delivery.receive_count)


def back_of(current: Execution | None, delivery: Delivery | None) -> bool:
    """Whether ``delivery`` brings back the message of ``current``'s run (:func:`message_back`)."""
    if current is None or delivery is None:
        return False
    return message_back(current.owner, delivery.message_id, delivery.receive_count)


def message_back(owner: str | None, message_id: str, receive_count: int) -> bool:
    """Whether a receive of ``message_id`` (its ``receive_count``-th) is the message of the run
    ``owner`` claims, received again since that claim: its visibility, which the run's worker
    keeps renewed (``message_lease_s``) and stops its run before it ends, lapsed by SQS's own
    clock. The run's lease is then lost whatever the record's ``lease_until`` says and whatever
    the clocks of the two workers (:mod:`punctual.execution.lease`)."""
    if not message_id or not owner:
        return False
    parts = owner.split("~", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    return parts[2] == message_id and receive_count > int(parts[1])


def owner_of(raw: bytes) -> str:
    """``uuid.UUID(bytes=raw, version=4).hex``: the RFC 4122 variant and version 4 bits set (on the
    bytes: half the time of the same on a 128-bit integer)."""
    octets = bytearray(raw)
    octets[6] = (octets[6] & 0x0F) | 0x40  # version 4
    octets[8] = (octets[8] & 0x3F) | 0x80  # variant RFC 4122
    return octets.hex()


def new_record(message: DispatchMessage, status: ExecutionStatus, **fields: Any) -> Execution:
    """The record of a slot that has no record yet, as ``message`` names it (a backfilled slot's
    record names its backfill)."""
    return Execution(**_message_fields(message, status), **fields)


def _message_fields(message: DispatchMessage, status: ExecutionStatus) -> dict[str, Any]:
    """The fields of a new record of the slot ``message`` names."""
    fields: dict[str, Any] = {
        "job_id": message.job_id,
        "tenant": message.tenant,
        "slot": message.slot,
        "scheduled_at": datetime.fromisoformat(message.scheduled_at),
        "attempt": message.attempt,
        "status": status,
        "job_version": message.job_version,
    }
    if message.backfill:
        backfill, dependants = parse_backfill_ref(message.backfill)
        fields["backfill"] = backfill
        fields["backfill_dependants"] = dependants
    return fields


def running(
    base: Execution | None,
    message: DispatchMessage,
    now: datetime,
    lease_s: int,
    owner: str | None = None,
    **more: Any,
) -> Execution:
    """``base`` as a RUNNING attempt of ``message``, owned by ``owner`` (:func:`owner_for`; None: a
    fresh one of no message) (``more``: further fields).

    The record keeps ``base.job_version``: the version its slot was released for, whose spec
    every attempt of the slot runs (:mod:`punctual.execution.versions`). ``base`` None: a slot
    without a record, whose RUNNING record is built at once (the first attempt's common path:
    the same record as :func:`new_record`'s QUEUED one copied as RUNNING, without that copy).
    """
    update = {
        "status": ExecutionStatus.RUNNING,
        "started_at": now,
        "finished_at": None,
        "error": None,
        "result": None,
        "owner": owner or new_owner(),
        "lease_until": now + timedelta(seconds=lease_s),
        **more,
    }
    if base is None:
        fields = _message_fields(message, ExecutionStatus.RUNNING)
        fields.update(update)
        if _of_their_types(fields, more):
            return typed_execution(fields)  # (what validation makes of them, without it)
        return Execution.model_validate(fields)  # (as Execution(**fields), without __init__'s frame)
    return base.model_copy(update=update)


def _of_their_types(fields: dict[str, Any], more: dict[str, Any]) -> bool:
    """Whether a first RUNNING record's ``fields`` (:func:`running`'s) are all of their fields'
    types already, as validation would leave them: the message's texts and ints (a message read
    from a queue may hold others), UTC instants (the clock's ``now``, the lease a timedelta after
    it, the message's ``Z`` instant), and of ``more`` only the attempt and the overlap pointer (the
    claim's). The rest is typed by how it is made (a fresh owner, the backfill reference's parts).
    Any other: validated."""
    now = fields["started_at"]
    blocked_by = fields.get("blocked_by")
    return (
        more.keys() <= _TYPED_MORE
        and type(fields["job_id"]) is str
        and type(fields["tenant"]) is str
        and type(fields["slot"]) is str
        and type(fields["attempt"]) is int
        and type(fields["job_version"]) is int
        and fields["scheduled_at"].tzinfo is UTC  # (fromisoformat's: a datetime)
        and type(now) is datetime
        and now.tzinfo is UTC
        and (blocked_by is None or type(blocked_by) is str)
    )


_TYPED_MORE = frozenset({"attempt", "blocked_by"})


def rest_of_range(job: Job, missed: Execution) -> Execution | None:
    """A MISSED range record (:mod:`punctual.timing.missed_ranges`) less its first slot: the record of
    the rest of the range, from the next slot on (None when the range had one slot left)."""
    following = next_slot(job, slot_instant(missed.slot))
    if following is None or missed.last_slot is None or slot_key(following) > missed.last_slot:
        return None
    return missed.model_copy(
        update={
            "slot": slot_key(following),
            "scheduled_at": dispatch_instant(job, following),
            "slot_count": missed.slot_count - 1,
            "last_slot": None if missed.slot_count == 2 else missed.last_slot,
        }
    )


# Pages of a job's history a lookup of the range over a slot reads at most (a status-filtered page
# reads up to LIST_SCAN_BUDGET records): the records between a range's first slot and a slot of it
# are only those a backfill ran there, far fewer.
RANGE_LOOKUP_PAGES = 3


def covering_range(
    store: JobStore, tenant: str, job_id: str, slot: str, live_at: int | None = None
) -> Execution | None:
    """The MISSED range record whose run of slots goes over ``slot`` (a slot with no record of its
    own: ask for it first), or None: the newest MISSED record before ``slot``, when it is a range
    that ends at ``slot`` or after it. A marked key (a run-now slot's, ``~m...``; no other mark
    names a slot: QA28, ``<inner slot>~abc`` answered the range) is in no range."""
    if "~" in slot:
        return None
    cursor: str | None = slot
    for _ in range(RANGE_LOOKUP_PAGES):
        page = store.list_executions(tenant, job_id, 1, cursor, ExecutionStatus.MISSED, True, live_at)
        if page.items:
            found = page.items[0]
            return found if found.last_slot is not None and found.last_slot >= slot else None
        if page.cursor is None:
            return None
        cursor = page.cursor
    return None


# Pages of 100 records read inside a range being written (a backfill runs at most 1,000 slots)
INSIDE_RANGE_PAGES = 12


def records_inside(store: JobStore, tenant: str, job_id: str, first: str, last: str) -> list[Execution]:
    """The job's records after slot ``first`` up to slot ``last`` (included), oldest first: what
    a range about to be written from ``first`` to ``last`` must leave out (a slot never stands in
    two records). One Query when there are none."""
    found: list[Execution] = []
    cursor: str | None = first
    for _ in range(INSIDE_RANGE_PAGES):
        page = store.list_executions(tenant, job_id, 100, cursor, None, False)
        found += [record for record in page.items if record.slot <= last]
        cursor = page.cursor if page.items and page.items[-1].slot <= last else None
        if cursor is None:
            break
    return found


def slot_of_range(job: Job | None, missed: Execution, slot: str) -> Execution | None:
    """``missed`` (a range record over ``slot``: :func:`covering_range`) as the record of ``slot``
    alone, its ``last_slot`` and ``slot_count`` still the range's; None when ``slot`` is not a slot
    of the schedule the range was recorded under (judged while ``job``'s spec is still that one)."""
    instant = slot_instant(slot)
    if job is not None and job.spec_since <= missed.job_version:
        if next_slot(job, instant - timedelta(microseconds=1)) != instant:
            return None
        instant = dispatch_instant(job, instant)
    return missed.model_copy(update={"slot": slot, "scheduled_at": instant})


def owned_by(execution: Execution) -> Expect:
    """The condition of every write by the attempt's owner: still RUNNING, same attempt and owner."""
    return Expect(LIVE, execution.attempt, execution.owner, check_owner=True)


GONE_NOTE = "the job was deleted"


def retry_not_started(waiting: Execution, now: datetime, why: str) -> Execution:
    """A slot waiting for its retry ended FAILED, its last error kept: the retry does not start."""
    note = f"{waiting.error or 'failed'}; its retry was not started: {why}"
    return waiting.model_copy(update={"status": ExecutionStatus.FAILED, "finished_at": now, "error": note})


def skipped_record(base: Execution, now: datetime, why: str, **more: Any) -> Execution:
    """``base`` recorded SKIPPED at ``now``: the slot did not start, and ``why`` says why."""
    return base.model_copy(
        update={"status": ExecutionStatus.SKIPPED, "finished_at": now, "error": why, **more}
    )


def lost_run_of_a_gone_job(
    current: Execution, now: datetime, message_back: bool = False
) -> tuple[Execution, Expect] | None:
    """A deleted job's run whose lease lapsed (its worker was lost; ``message_back``: its own
    message came back, :func:`message_back`): ended TIMED_OUT, not taken over, as its owner's
    write would be; None when it is not such a run."""
    lapsed = message_back or (current.lease_until is not None and current.lease_until <= now)
    if current.status is not ExecutionStatus.RUNNING or not lapsed:
        return None
    ended = current.ended(ExecutionStatus.TIMED_OUT, now, f"{LEASE_LOST_NOTE}; not taken over: {GONE_NOTE}")
    return ended, owned_by(current)


class Ledger:
    """Saves execution records (transition-checked, with their TTL) and writes their timers.

    Parameters
    ----------
    store
        The job store.
    clock
        Every ``now``.
    config
        The timer layout and the retention of records.
    """

    def __init__(self, store: JobStore, clock: Clock, config: WorkerConfig) -> None:
        self.store = store
        self.clock = clock
        self.config = config

    def ttl(self, now: datetime) -> int:
        """The record's expiry (epoch seconds): ``retention_days`` after ``now``. For a UTC
        ``now`` (every clock's) the days are added to its timestamp, not to a datetime built
        for it: the same whole seconds (the fraction's distance from a whole second, at least a
        microsecond, is far above the float's rounding); in a zone of its own the days are wall
        days (DST), added as before."""
        if now.tzinfo is UTC:
            return int(now.timestamp() + self.config.retention_days * 86_400)
        return int((now + timedelta(days=self.config.retention_days)).timestamp())

    def save(self, new: Execution, current: Execution | None, expect: Expect | None) -> None:
        """Write ``new`` over ``current`` if ``expect`` still holds.

        Raises
        ------
        IllegalTransition
            ``current.status -> new.status`` is not an edge of the state machine (a bug).
        ExecutionConflictError
            The record changed (another worker).
        """
        check_transition(current.status if current is not None else None, new.status)
        ttl = self.ttl(self.clock.now())
        if new.status is ExecutionStatus.RETRY_WAIT:
            ttl += RETRY_WAIT_KEPT_S
        self.store.save_execution(new, expect, ttl)

    def put_timer(
        self,
        execution: Execution,
        now: datetime,
        due: datetime,
        kind: TimerKind,
        *,
        version: int,
        attempt: int | None = None,
        owner: str | None = None,
    ) -> None:
        """Write one timer of an execution (retry, lease, queued check): the one way they are made."""
        timer = self.config.layout.make(
            now=now,
            due=due,
            job_id=execution.job_id,
            tenant=execution.tenant,
            slot=execution.slot,
            attempt=execution.attempt if attempt is None else attempt,
            kind=kind,
            job_version=version,
            owner=owner,
        )
        self.store.put_timers([timer])

    def put_retry_timer(self, job: Job, execution: Execution, now: datetime, due: datetime) -> None:
        self.put_timer(
            execution, now, due, TimerKind.RETRY, version=job.version, attempt=execution.attempt + 1
        )
        forecast_ecs_timer(self.store, job, due)  # ECS tasks ready for it (punctual.dispatch.ecs_lane)

    def put_lease_timer(
        self, job: Job, execution: Execution, now: datetime, due: datetime | None = None
    ) -> None:
        """A LEASE timer of the attempt's owner, due at ``due`` (default: when the lease lapses)."""
        assert execution.lease_until is not None
        self.put_timer(
            execution,
            now,
            due or execution.lease_until,
            TimerKind.LEASE,
            version=job.version,
            owner=execution.owner,
        )
