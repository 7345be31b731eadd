"""The backfill record and what is pure about a backfill: its id, its slots, its references.

A backfill runs a job's slots of a past range ``[start, end)`` that have no execution yet
(:mod:`punctual.usecases.backfill_runner` drives it). Its id is a digest of (tenant, job, start, end),
so a repeated or concurrent identical request names the same record, and creating it is a
conditional put: the second request finds the first's record and starts nothing new.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from enum import StrEnum

from pydantic import AwareDatetime, BaseModel, Field

from punctual.models import Job
from punctual.timing.instants import format_instant_ms
from punctual.timing.slots import next_slot, schedule_of
from punctual.timing.timers import slot_instant

BACKFILL_ID_CHARS = 20


class BackfillState(StrEnum):
    """RUNNING (slots are being released), DONE (every slot ended), CANCELLED."""

    RUNNING = "RUNNING"
    DONE = "DONE"
    CANCELLED = "CANCELLED"


class Backfill(BaseModel):
    """One backfill of one job: the slots it runs, and how far it got.

    ``slots`` are the slot keys of the range that had no execution record when it was
    created, oldest first; ``released`` of them have been sent, the first ``settled`` have
    ended. ``tick`` numbers the driver's steps: a step's timer is acted on only while
    ``tick`` has not passed it, so a repeated step is dropped (see the runner). ``revision``
    grows with every write (the condition of each).
    """

    id: str
    tenant: str
    job_id: str
    start: AwareDatetime
    end: AwareDatetime
    include_dependants: bool = False
    max_parallel: int = Field(ge=1)
    tick_s: float = Field(gt=0)
    slots: list[str] = Field(default_factory=list)
    already_run: int = 0  # slots of the range with a record at creation: left alone
    excluded: int = 0  # slots of the range on a day of an excluded calendar: not run
    dropped: int = 0  # planned slots the job's spec, replaced since, does not have: not run
    spec_version: int = 0  # the job's spec its slots were planned (or last checked) for; 0: not known
    state: BackfillState = BackfillState.RUNNING
    reason: str | None = None  # why a backfill was cancelled when not by a user
    released: int = 0
    settled: int = 0
    tick: int = 0
    generation: int = 0  # one more each time a cancelled backfill of this id is started again
    revision: int = 1
    created_at: AwareDatetime
    updated_at: AwareDatetime


def backfill_id(tenant: str, job_id: str, start_text: str, end_text: str) -> str:
    """The id of the backfill of ``job_id`` over [start, end): the same for the same request."""
    raw = f"{tenant}\x1f{job_id}\x1f{start_text}\x1f{end_text}"
    return hashlib.sha256(raw.encode()).hexdigest()[:BACKFILL_ID_CHARS]


def range_texts(start: AwareDatetime, end: AwareDatetime) -> tuple[str, str]:
    """The range as the id digests it: UTC, milliseconds (equal instants in any zone agree)."""
    return format_instant_ms(start), format_instant_ms(end)


def backfill_ref(backfill_id_: str, include_dependants: bool, generation: int = 0) -> str:
    """What a dispatch message carries of its backfill: the id, the generation (how many times a
    cancelled backfill of this id was started again) and ``+`` when dependants run too.

    The message's deduplication id includes it, so a slot sent by a cancelled backfill (dropped
    unstarted) and sent again by the next one within SQS's five minutes is not dropped as a repeat.
    """
    return f"{backfill_id_}.{generation}" + ("+" if include_dependants else "")


def parse_backfill_ref(ref: str) -> tuple[str, bool]:
    """(backfill id, include dependants) of a message's ``backfill`` field."""
    return ref.rstrip("+").split(".", 1)[0], ref.endswith("+")


def has_slot(job: Job, key: str) -> bool:
    """Whether ``job``'s schedule, as it is now, has the slot ``key`` (an ``after()`` or
    ``delay()`` job has none of its own: it is not backfilled)."""
    if schedule_of(job).kind in ("after", "delay"):
        return False
    instant = slot_instant(key)
    return next_slot(job, instant - timedelta(milliseconds=1)) == instant
