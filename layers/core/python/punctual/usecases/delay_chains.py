"""A ``delay(...)`` job changed while one of its runs is in flight: its chain goes on from that
run's end, not from the change.

A delay chain writes its next timer when a run ends (:meth:`punctual.execution.after.AfterEffects`):
"each run starts N after the previous run finished". A resume, a replace or a secret rotation
starts a new chain; started at the change, it ran its first slot N after the change even while
the run before it was still going (QA: a 3-minute run of a ``delay(1 minute)`` job paused and
resumed 20 s in was overlapped by two runs of the new chain). Now such a change starts no chain
while a scheduled run of the job is in flight: it names that run's slot on the job
(``Job.delay_after``) and the run's end, of whichever version, writes the next timer for the
job as it is then. A run that ended between the change's read and its write is found by a read
after the write, which writes that same timer (the next slot follows from the run's end alone,
so both writers write the one timer; the claim keeps its slot to one run anyway).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from punctual.models import Execution, ExecutionStatus, Job, JobState
from punctual.models.executions import IN_FLIGHT, RELEASED_NOTE
from punctual.store.base import JobStore
from punctual.timing.slots import ceil_second, fire_timer, first_slot, schedule_of
from punctual.timing.timers import MANUAL_MARK, Timer, TimerKind, TimerLayout, slot_instant

NEWEST_PAGE, NEWEST_PAGES = 50, 3  # how far back the newest scheduled run is looked for


def retry_superseded(execution: Execution, job: Job | None) -> bool:
    """Whether ``execution`` waits for a retry that a change of ``job``'s spec since its release
    has superseded: no attempt runs a spec its slot was not released for, so that retry will not
    call the target (its claim records the slot SUPERSEDED, :mod:`punctual.execution.versions`),
    and the slot is not a run to wait for (QA26: a replace that fixed a failing target left the
    job's overlap turn, or its ``delay()`` chain, waiting for the retry's instant). Not a run its
    worker handed back at shutdown (its call, an ECS task, may still be stopping)."""
    return (
        job is not None
        and execution.status is ExecutionStatus.RETRY_WAIT
        and execution.error != RELEASED_NOTE
        and execution.job_version < job.spec_since
    )


def next_delay_slot(job: Job, slot: str, finished: datetime) -> datetime | None:
    """The slot after a delay job's run of ``slot`` that ended at ``finished``: N after its end (or
    after its own instant, when a poller ahead released it early and it ended before it); None
    past ``end_at``."""
    nxt = schedule_of(job).next_after(max(finished, slot_instant(slot)))
    if nxt is None or (job.end_at is not None and nxt > job.end_at):
        return None
    return nxt


def chains_from(job: Job, ended: Execution) -> bool:
    """Whether the end of ``ended`` writes ``job``'s next timer: a run of its chain's version,
    or the run a change left its chain to. A slot due by the job's last change is the chain that
    change ended, though it runs under the new spec (it came due before the change, and no worker
    had started it: :func:`punctual.execution.claim.owed_to_current`): the change started its own
    chain, so that run's end writes none (QA: a replace a second after a release made two chains,
    two runs a period from then on)."""
    if job.delay_after == ended.slot:
        return True
    if job.version != ended.job_version:
        return False
    return not job.restarts or slot_instant(ended.slot) > job.restarts[-1].at


def newest_scheduled(store: JobStore, job: Job) -> Execution | None:
    """The job's newest record of a scheduled slot (run-now slots, ``~m``, left out)."""
    return find_newest_scheduled(store, job)[0]


def scheduled_floor(store: JobStore, job: Job) -> datetime | None:
    """An instant after which no scheduled slot of ``job`` has a record: its newest scheduled
    record's (last) slot; when the records read (:data:`NEWEST_PAGES`) were all run-now slots, the
    oldest of those (none after it is a scheduled slot's); None when the job has no record.

    (QA27: with more run-now records than that since the last scheduled one, the auditor took
    the job's last change as the floor, so its repair's lost range began at a slot that had run
    long ago: its lock (that slot without a record) failed at every pass and the chain stayed dead.)
    """
    newest, unread = find_newest_scheduled(store, job)
    if newest is not None:
        return slot_instant(newest.last_slot or newest.slot)
    return None if unread is None else slot_instant(unread)


def find_newest_scheduled(store: JobStore, job: Job) -> tuple[Execution | None, str | None]:
    """The newest scheduled record, and where the read stopped when it found none within its
    pages (the oldest run-now slot read; None: the history was read to its start)."""
    cursor: str | None = None
    for _ in range(NEWEST_PAGES):
        page = store.list_executions(job.tenant, job.id, NEWEST_PAGE, cursor)
        found = next((record for record in page.items if MANUAL_MARK not in record.slot), None)
        if found is not None or page.cursor is None:
            return found, None
        cursor = page.cursor
    return None, cursor


def defer_to_run(
    store: JobStore, job: Job, timers: Sequence[Timer], *, before: Job, layout: TimerLayout
) -> tuple[Job, list[Timer]]:
    """``job`` (a change's result) and its timers, with the chain's first timer left to the end of
    the job's run in flight, if any (see the module docstring). Only a delay job's run (``before``
    is the job as the change found it) ends by chaining: a cron job made delay() starts at once.

    With no run in flight, the chain the change starts begins N after the change (the job's
    ``anchor`` moves there, unless it is later: a ``start_at`` to come), so never less than N
    after a run that ended before it (delay oracle: a rotation 10 s after a run ended started the
    next one from an earlier replace's anchor, 40 s after that end with N a minute)."""
    delays = schedule_of(job).kind == "delay" and schedule_of(before).kind == "delay"
    if not delays or job.state is not JobState.ENABLED:
        return job.model_copy(update={"delay_after": None}), list(timers)
    kept = [timer for timer in timers if timer.kind is not TimerKind.FIRE]
    newest = newest_scheduled(store, job)
    # (a retry the change supersedes is no run: the chain starts from the change)
    if newest is not None and newest.status in IN_FLIGHT and not retry_superseded(newest, job):
        return job.model_copy(update={"delay_after": newest.slot}), kept
    job = job.model_copy(update={"delay_after": None})
    restart = ceil_second(job.updated_at)
    if job.anchor >= restart or len(kept) == len(timers):  # no chain starts here, or not before it
        return job, list(timers)
    job = job.model_copy(update={"anchor": restart})
    start = first_slot(job, job.updated_at)
    return job, kept + ([fire_timer(layout, job, start, job.updated_at)] if start is not None else [])


def settle(store: JobStore, layout: TimerLayout, job: Job, now: datetime) -> None:
    """After the change's write: the run it left the chain to, if it has ended meanwhile (its end
    may have read the job before the write), gets its next timer here."""
    if job.delay_after is None:
        return
    ended = store.get_execution(job.tenant, job.id, job.delay_after)
    if ended is None or not ended.status.terminal:
        return  # its end writes it
    nxt = next_delay_slot(job, ended.slot, ended.finished_at or ended.scheduled_at)
    if nxt is not None:
        store.put_timers([fire_timer(layout, job, nxt, now)])
