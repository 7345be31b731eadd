"""Overlap ``skip`` / ``queue``: one slot of a job at a time, by a conditional write on one item.

The job's *turn* item names the slot that may run. A first attempt of a skip/queue job takes it
(:meth:`Turns.take`); a slot that cannot have it is SKIPPED (``skip``) or recorded QUEUED and
waits in slot order (``queue``). When a slot ends for good its worker passes the turn on
(:meth:`Turns.pass_on`): the oldest waiting slot gets it and a TURN message starts it at once.
Two slots claimed at once by two workers cannot both get the turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from punctual.dispatch.queues import DispatchMessage, MessageKind, QueuePort, message_for
from punctual.models import Execution, ExecutionStatus, Job, Overlap
from punctual.store.base import JobStore
from punctual.timing.slots import schedule_of
from punctual.timing.timers import slot_instant
from punctual.usecases.delay_chains import retry_superseded

log = logging.getLogger("punctual.execution")

ALLOW_RUNS_READ = 10  # running records read to find a run started under 'allow' (a changed job's)
STALE_TURN_S = 20 * 60  # a turn whose holder never wrote a record is free after this long
# Ended records a claim may still start afresh (a backfill of a MISSED slot, a SUPERSEDED slot
# released again for the new spec): such a slot waiting for the turn is a real waiter (review).
_RUN_AGAIN = frozenset({ExecutionStatus.MISSED, ExecutionStatus.SUPERSEDED})
# A queue job's slot started at least this late looks for a run of its job that held it back
WAITED_CHECK_MS = 1000.0
# Slots that may wait for one job's turn (overlap ``queue``); the next is SKIPPED, its reason saying
# so, as Temporal's schedules cap their buffer at 1,000. The waiting set is one item: unbounded, a
# run outliving thousands of periods (a rate(1 second) job behind a six-hour run) would take it past
# DynamoDB's 400 KB, and then every new slot's claim would fail until its message dead-lettered
# (QA27); each turn write also pays for the item's size (~25 KB at the cap).
MAX_WAITING = 1000


class QueueFull(str):
    """The turn's holder, as :meth:`Turns.take` answers it when the slot may not wait: ``waiting``
    slots already do (:data:`MAX_WAITING`). A ``str``: wherever a holder goes, this goes."""

    waiting: int

    def __new__(cls, holder: str, waiting: int) -> QueueFull:
        made = super().__new__(cls, holder)
        made.waiting = waiting
        return made


def overlap_skip_reason(holder: str) -> str:
    """Why a first attempt that did not get its job's turn from ``holder`` is SKIPPED."""
    if isinstance(holder, QueueFull):
        waiting = holder.waiting
        return f"overlap queue full: {waiting} slots already wait for slot {holder} (at most {MAX_WAITING})"
    return f"overlap: slot {holder} had not finished"


def waits_for_turn(job: Job, message: DispatchMessage, current: Execution | None) -> bool:
    """Whether a first attempt that cannot have its job's turn waits for it (QUEUED) rather than
    being SKIPPED: under overlap ``queue``; and under ``skip``, an ``after()`` job's slot that a
    backfill with ``include_dependants`` sent, which that backfill is to run, as it runs the
    children of each slot it runs (QA27: those whose parent succeeded while the child's run of an
    earlier slot lasted were SKIPPED, most of a backfill's). A live slot still skips behind it."""
    if job.overlap is Overlap.QUEUE:
        return True
    backfilled = message.backfill or (current is not None and current.backfill)
    return bool(backfilled) and schedule_of(job).kind == "after"


class Turns:
    """Takes and passes on a job's turn.

    Parameters
    ----------
    store
        The job store (the turn item and the slots' records).
    queues
        Where the TURN message of the next slot is sent.
    route
        ``route(job)``: the queue of a job's messages.
    """

    def __init__(self, store: JobStore, queues: QueuePort, route: Callable[[Job], str]) -> None:
        self.store = store
        self.queues = queues
        self.route = route

    def take(self, job: Job, slot: str, now: datetime, queue: bool) -> str | None:
        """Take the job's turn for ``slot``; None if it now holds it, else the slot that does
        (``queue``: the slot waits for it, :func:`waits_for_turn`).

        A holder whose slot has ended (its worker died before passing the turn on, or has not
        passed it on yet) or never started is replaced. A ``queue`` slot that cannot have the
        turn waits for it in slot order, and a ``queue`` holder that ended is replaced in slot
        order too: the turn goes to the oldest waiting slot, not to whichever slot came next.
        """
        holder = self.take_slot(job.tenant, job.id, slot, now, queue=queue, job=job)
        return holder if holder is not None else self._allow_run(job, slot, now, queue)

    def start_delay_ms(self, job: Job, slot: str, due: datetime, now: datetime) -> float:
        """A first attempt's start after ``due`` (ms) for ``StartDelayMs``.

        An overlap ``queue`` slot cannot start before the job's previous slot has ended, and while
        that one runs its message waits in the job's FIFO message group, unclaimed: when that run
        ended after ``due``, the slot waited for its turn until then, late by design, and is timed
        from that end, not from ``due`` (QA: a run outliving its period put each next slot's wait,
        minutes, in StartDelayP99; QA27 review: not timed at all, a lane that then started it late
        was hidden). One read, of a late queue job's slot only."""
        delay_ms = max((now - due).total_seconds() * 1000, 0.0)
        if job.overlap is not Overlap.QUEUE or delay_ms < WAITED_CHECK_MS:
            return delay_ms
        before = self.store.list_executions(job.tenant, job.id, 1, cursor=slot).items
        ended = before[0].finished_at if before else None
        if ended is None or ended <= due:
            return delay_ms
        return max((now - ended).total_seconds() * 1000, 0.0)

    def _allow_run(self, job: Job, slot: str, now: datetime, queue: bool) -> str | None:
        """A run started while the job's overlap was ``allow`` and still in flight, now that ``slot``
        holds the turn (None: none). Such runs take no turn, so after a change to ``skip`` or
        ``queue`` the turn was free while they ran (QA: the next slots ran beside them). For a while
        after such a change only (:attr:`Job.overlap_checks_until`): the run found is made the
        holder and ``slot`` waits for it (``queue``) or is skipped, as behind any holder; its end
        passes on nothing (its job said ``allow``), so the next claim or the queued slot's check
        finds it ended and takes the turn back, looking again."""
        until = job.overlap_checks_until
        if until is None or now > until:
            return None
        page = self.store.list_executions(job.tenant, job.id, ALLOW_RUNS_READ, status=ExecutionStatus.RUNNING)
        running = next((record.slot for record in page.items if record.slot != slot), None)
        if running is None:
            return None
        holder = self.store.take_turn(job.tenant, job.id, running, now, replacing=slot).holder
        if queue:
            self.store.wait_for_turn(job.tenant, job.id, slot)
        log.info("slot %s of %s waits for %s, started under overlap 'allow'", slot, job.id, running)
        return holder if holder != slot else running

    def take_slot(
        self, tenant: str, job_id: str, slot: str, now: datetime, *, queue: bool, job: Job | None = None
    ) -> str | None:
        """:meth:`take` by the job's key (a parked slot's claim may not have read its job)."""
        store = self.store
        turn = store.take_turn(tenant, job_id, slot, now)
        if turn.holder == slot or turn.holder is None:
            return None
        if self._is_stale(tenant, job_id, turn.holder, turn.since, now, job):
            if queue and any(waiting != slot for waiting in turn.waiting):
                # Slots wait for this turn: it is theirs in slot order (this one's too).
                store.wait_for_turn(tenant, job_id, slot)
                following = self._hand_on(tenant, job_id, turn.holder, now, job, taker=slot)
                if following is None:  # its holder passed it on meanwhile: to whom?
                    following = store.take_turn(tenant, job_id, slot, now).holder
                return None if following == slot else following
            turn = store.take_turn(tenant, job_id, slot, now, replacing=turn.holder)
            if turn.holder == slot:
                return None
        if queue:
            if turn.holder is not None and slot not in turn.waiting and len(turn.waiting) >= MAX_WAITING:
                return QueueFull(turn.holder, len(turn.waiting))
            store.wait_for_turn(tenant, job_id, slot)
            turn = store.take_turn(tenant, job_id, slot, now)  # freed meanwhile?
            if turn.holder == slot:
                return None
        return turn.holder

    def _is_stale(
        self, tenant: str, job_id: str, holder: str, since: datetime | None, now: datetime, job: Job | None
    ) -> bool:
        record = self.store.get_execution(tenant, job_id, holder)
        if record is None:
            return since is None or (now - since).total_seconds() > STALE_TURN_S
        # A holder whose retry a replace superseded will not run again: it holds the turn for nothing
        return record.status.terminal or retry_superseded(record, job) or self._earlier_jobs(record, job)

    def _earlier_jobs(self, record: Execution, job: Job | None) -> bool:
        """Whether the holder's ``record`` is a slot of an earlier job at ``job``'s id (deleted, then
        created again while that slot ran or waited): the new job takes no turn from it (QA29: its
        slots were SKIPPED, or queued until the old run ended, behind a job that no longer exists).
        Versions never repeat across a job id's incarnations (:meth:`JobStore.first_version`), so a
        record released for a version before the new job's first is the earlier job's, whatever the
        clocks. Read only for a holder released for an older spec than the job's (rare)."""
        if job is None or record.job_version >= job.spec_since:
            return False
        return record.job_version < self.store.first_version(job.tenant, job.id)

    def pass_on(self, job: Job, execution: Execution, now: datetime) -> None:
        """A skip/queue slot ended for good: hand the turn to the oldest queued slot and start it."""
        if job.overlap is Overlap.ALLOW or not execution.status.terminal:
            return
        following = self._hand_on(job.tenant, job.id, execution.slot, now, job)
        if following is not None:
            log.info("slot %s of %s ended: the turn goes to %s", execution.slot, job.id, following)

    def _hand_on(
        self, tenant: str, job_id: str, holder: str, now: datetime, job: Job | None, taker: str | None = None
    ) -> str | None:
        """Pass ``holder``'s turn to the oldest waiting slot (if ``holder`` still has it) and send
        the TURN message that starts it (not to ``taker``, the slot being claimed: it starts now);
        the slot that got the turn, or None."""
        while True:
            following = self.store.pass_turn(tenant, job_id, holder, now)
            if following is None or following == taker:
                return following
            record = self.store.get_execution(tenant, job_id, following)
            if record is None or not record.status.terminal or record.status in _RUN_AGAIN:
                break
            # An ended slot in the waiting list: a duplicate of its message (a child's re-send,
            # a TURN) took a place in it before its claim found the slot ended. Passed over, on
            # to the next (QA: the turn went to it, and the slots really waiting stayed queued).
            holder = following
        job = job or self.store.get_job(tenant, job_id)
        if job is None:
            return following  # the job is gone: its slots will not run
        scheduled = record.scheduled_at if record is not None else slot_instant(following)
        attempt = record.attempt if record is not None else 1
        message = message_for(job, following, scheduled, attempt, MessageKind.TURN, now)
        self.queues.send(self.route(job), [message])
        return following
