"""Which first releases made for a spec a replace ended the current spec still owes, by kind.

A slot released for an older spec that no worker started runs under the current spec when the
current spec has it as its own (:func:`punctual.execution.claim.owed_to_current`); otherwise it is
recorded SUPERSEDED and does not run.
"""

from __future__ import annotations

from punctual.dispatch.queues import DispatchMessage, MessageKind, job_from_spec
from punctual.models import Job, JobState
from punctual.timing.owed import owed_at_restart
from punctual.timing.slots import inside_window, owed_since, schedule_of
from punctual.timing.timers import MANUAL_MARK, slot_instant
from punctual.usecases.backfills import has_slot


def released_slot_owed(job: Job, message: DispatchMessage) -> bool:
    """Whether the first release ``message`` (made for an older spec) runs under ``job``'s spec."""
    if message.kind == MessageKind.CHILD:
        return _child_owed(job, message)
    if message.kind == MessageKind.BACKFILL:
        # A backfill's slot sent before a replace: the new spec runs it when it has the slot, as the
        # backfill's slots not sent yet (QA30: it was recorded SUPERSEDED, then the backfill's
        # re-send ran it under the new spec even when that spec never has it).
        return has_slot(job, message.slot)
    return message.kind == MessageKind.FIRE and owed_at_restart(job, message.job_version, message.slot)


def _child_owed(job: Job, message: DispatchMessage) -> bool:
    """An ``after(...)`` job's slot sent (its parents all succeeded it) before a replace of the job
    that no worker started: the current spec owes it when it still waits on no other parent than
    the spec it was sent for (the message's copy), as a scheduled slot due by a replace runs under
    the new spec (the after() oracle: a payload edit seconds after the parents' success recorded
    the slot SUPERSEDED, never run). A parent the replace added counts from its next success."""
    if job.state is not JobState.ENABLED or not message.spec:
        return False
    if MANUAL_MARK not in message.slot and not inside_window(job, slot_instant(message.slot)):
        return False
    try:
        sent_for = job_from_spec(message.spec)
    except ValueError:
        return False
    return owed_since(job, schedule_of(sent_for).parents)
