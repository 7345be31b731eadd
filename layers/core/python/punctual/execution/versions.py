"""Which spec an attempt runs: the one its slot was released for, or none (SUPERSEDED).

A slot is *released for* the job version in the message that first reached a worker: the fire
message of a scheduled slot (or a backfill's, a manual trigger's, a dependant's). That version
is written on the slot's record when it is first claimed (QUEUED or RUNNING) and every later
attempt of the slot (a retry, a takeover after a lost worker, a queued slot whose turn came, a
parked slot brought back) is judged by the record's version, never by its own message.

The store keeps one spec per job, the current one. So an attempt may start only while the
job's spec is still the one its slot was released for (``job.spec_since <= released_for``);
otherwise the slot is recorded SUPERSEDED, naming both versions, and nothing runs: never a mix
of an old slot with a new spec (attempt 1 against the old target, attempt 2 against the new).
Pausing and resuming do not change the spec, so they supersede nothing, nor does a replace of
the job's labels alone (name, description, tags); any other replace does. A
release of the same slot for the new spec (a replacement a moment before the slot) is a new
message with a newer version, which the claim starts over the SUPERSEDED record; and a slot
due by the replace that no attempt started (not yet claimed, or QUEUED behind a run) starts
under the new spec instead (:func:`punctual.execution.claim.owed_to_current`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from punctual.dispatch.queues import DispatchMessage, MessageKind
from punctual.execution.records import (
    GONE_NOTE,
    LEASE_LOST_NOTE,
    SUPERSEDED_NOTE,
    lost_run_of_a_gone_job,
    new_record,
    owned_by,
    retry_not_started,
    skipped_record,
    summary,
)
from punctual.models import Execution, ExecutionStatus, Job, JobState
from punctual.models.jobs import chain_end
from punctual.store.base import Expect
from punctual.timing.slots import next_slot, schedule_of
from punctual.timing.timers import MANUAL_MARK, slot_instant

# The records whose version says nothing about the attempt the message would start: they only
# say why the slot has not run (a new release, or a backfill, starts it afresh).
_NOT_RUN = (ExecutionStatus.MISSED, ExecutionStatus.SUPERSEDED)


def released_version(current: Execution | None, message: DispatchMessage) -> int:
    """The job version the slot of ``message`` was released for (see the module docstring)."""
    if current is None or current.status in _NOT_RUN:
        return message.job_version
    return current.job_version


def superseded_note(released_for: int, job: Job, attempt: int) -> str:
    what = "this slot" if attempt == 1 else f"attempt {attempt} of this slot"
    return summary(
        f"{SUPERSEDED_NOTE} (released for version {released_for}; the spec is version"
        f" {job.spec_since} since, and {what} had not started)"
    )


def superseded_record(
    job: Job, message: DispatchMessage, current: Execution | None, released_for: int, now: datetime
) -> tuple[Execution, Expect | None]:
    """The SUPERSEDED record of the slot of ``message``, and the condition of its write.

    A slot with no record (or one that only said why it had not run) gets a new one; a queued
    slot or one waiting for its retry ends SUPERSEDED; a running one whose worker was lost (the
    takeover would have been its next attempt) ends SUPERSEDED with the lost attempt listed. An
    earlier job's open slot at this id ends as its delete ends it instead (:func:`earlier_jobs_end`).
    """
    if current is not None and current.status not in _NOT_RUN:
        gone = earlier_jobs_end(job, current, now)
        if gone is not None:
            return gone
    if current is None or current.status in _NOT_RUN:
        note = superseded_note(released_for, job, message.attempt)
        record = new_record(message, ExecutionStatus.SUPERSEDED, finished_at=now, error=note)
        record = record.model_copy(update={"job_version": released_for})
        expect = None if current is None else Expect(frozenset({current.status}), current.attempt)
        return record, expect
    if current.status is ExecutionStatus.RUNNING:
        lost = current.closed_attempt(ExecutionStatus.TIMED_OUT, now, LEASE_LOST_NOTE)
        note = superseded_note(released_for, job, current.attempt + 1)
        record = current.model_copy(
            update={
                "status": ExecutionStatus.SUPERSEDED,
                "finished_at": now,
                "lease_until": None,
                "error": note,
                "attempts": Execution.bounded([*current.attempts, lost]),
            }
        )
        return record, owned_by(current)
    # QUEUED (its turn came) or RETRY_WAIT (its retry is due): the next attempt does not start.
    following = current.attempt if current.status is ExecutionStatus.QUEUED else current.attempt + 1
    note = superseded_note(released_for, job, following)
    record = current.model_copy(
        update={"status": ExecutionStatus.SUPERSEDED, "finished_at": now, "error": note, "blocked_by": None}
    )
    return record, Expect(frozenset({current.status}), current.attempt)


def earlier_jobs_end(job: Job, current: Execution, now: datetime) -> tuple[Execution, Expect] | None:
    """The end of an open slot of an earlier job at ``job``'s id (deleted, then created again while
    the slot waited or ran) as the delete alone ends it: a retry not started FAILED, a queued slot
    SKIPPED, a lost run TIMED_OUT, each saying the job was deleted, and nothing follows (docs/api.md;
    QA28: SUPERSEDED, "the job's spec changed", its end followed under the new job). Only asked of a
    slot released for an older version than the job's spec: never one the new job would run."""
    if not current.before_job(job.created_at):
        return None
    expect = Expect(frozenset({current.status}), current.attempt)
    if current.status is ExecutionStatus.RETRY_WAIT:
        return retry_not_started(current, now, GONE_NOTE), expect
    if current.status is ExecutionStatus.QUEUED:
        return skipped_record(current, now, GONE_NOTE), expect
    return lost_run_of_a_gone_job(current, now)


# Messages whose superseded slot another path may still send for the new spec: a backfill's (the
# backfill goes on), an after() job's (a parent the replace added counts from its next success).
_SENT_AGAIN = (MessageKind.BACKFILL, MessageKind.CHILD, MessageKind.MANUAL)


def _sent_again(job: Job, message: DispatchMessage) -> bool:
    """Whether another path may still send the superseded slot (:data:`_SENT_AGAIN`). An after()
    job's slot only while the job still waits on parents: one replaced by a schedule of its own
    (cron, rate) hears from no parent again, and its slot is decided as a scheduled one (QA24: its
    own ``after()`` children's slot was left with no record at all)."""
    if MANUAL_MARK in message.slot:
        return True
    if message.kind == MessageKind.CHILD:
        return schedule_of(job).kind == "after"
    return message.kind in _SENT_AGAIN


def superseded_for_good(job: Job, message: DispatchMessage, ran: bool, released_for: int) -> bool:
    """Whether the slot a claim records SUPERSEDED is one no later release of ``job`` (as it is
    now) runs, so that its ``after()`` children will never hear from it (QA17: a parent's retry
    superseded by the replace that fixed its target left the child's and the grandchild's slot
    with no record at all):

    * its first attempt ran (``ran``: a retry waited, a worker was lost): the slot was due before
      the replace, and neither the new chain nor a resume releases a slot released before;
    * it never started (a scheduled slot, a queued one's turn): due by the restart that ended its
      chain (the claim did not find it owed to the new spec; a paused job's resume releases only
      what its chain never did), or after it at an instant the new spec has no slot at.

    Never for a paused job's slot at or after its pause that the spec has: its resume owes it.

    Not for a backfill's, a run-now or an after() job's slot (sent again, or never a child of
    several parents'), nor a chain older than the restarts the job keeps (not known: left as it
    was). A paused job's slot the new spec has, after the restart, is its resume's to decide."""
    if _sent_again(job, message):
        return False
    instant = slot_instant(message.slot)
    has_it = next_slot(job, instant - timedelta(seconds=1)) == instant
    paused_at = job.paused_at if job.state is JobState.PAUSED else None
    if paused_at is not None and instant >= paused_at and has_it:
        return False  # its resume owes it (review: it ran then, and the child's record said MISSED)
    if ran:
        return True
    found = chain_end(job, released_for)
    if found is None:
        return False
    restart, _ = found
    return instant <= restart.at or not has_it
