"""Backfill: run a job's past slots of a range, each exactly once, a few at a time.

**Which slots.** Every slot of the job's schedule in ``[start, end)`` (inside its
``start_at``/``end_at``), less those on a day of a calendar the job excludes, less those that
already have an execution record when the backfill is created ("left alone": they ran, are
running, or were recorded SKIPPED or EXCLUDED). A slot recorded MISSED (the scheduler was down,
the catch-up policy dropped it, or it is inside a MISSED range record) or SUPERSEDED (its job's
spec changed before it started) has not run, so it is backfilled. The slot keys are the
scheduled slots' own keys: a backfilled slot *is* the scheduled slot, in the same ledger.

**Exactly once.** A backfill's slot is sent as an ordinary dispatch message (kind
``backfill``, attempt 1) with the slot's deduplication id, and it starts only through the
worker's conditional claim of the record ``(job, slot)``, exactly as a scheduled slot does.
So a slot sent twice (a repeated step, a request repeated or racing, the scheduled release of
the same slot) starts once, and retries, lease takeovers after a worker is killed, overlap
turns and the history are those of any slot. History marks it: ``backfill`` on the record.

**One backfill per request.** The backfill's id is a digest of (tenant, job, start, end), and
its record is created with a conditional put: a repeated or concurrent identical request finds
the record the first one wrote and starts nothing new (it answers the same id and count, and
re-arms the driver's timer, which is harmless: see below). A cancelled backfill's id is reused
by the next identical request, which plans the slots still without a record afresh.

**Bounded rate: a driver on the timer index.** No process stays alive for a backfill. Its
record holds the slots (oldest first) and two marks: ``released`` (slots sent) and ``settled``
(the prefix of slots that have ended). A *step* reads the records of the released, unsettled
slots, moves ``settled`` over the ended ones, and sends the next slots while fewer than
``max_parallel`` are in flight (one at a time for a job whose overlap is ``skip`` or
``queue``, which then go through the job's turn like any slot). Steps are BACKFILL timers in
the near lane, read by the pollers like every timer: step *k* sends, then writes the timer of
step *k*+1, then advances the record (``tick`` = *k*+1, the new marks) with a write conditional
on its revision. A step whose number is behind the record's ``tick`` is dropped, so a step
repeated after a poller crash, or a second timer armed by a repeated request, acts once; a
crash between the send and the record write sends the same slots again, which their dedup ids
and the claim drop. A slot sent that still has no record after :data:`RESEND_AFTER_S` (its
message lost) is sent again, so no lost message holds a backfill RUNNING for ever. The chain
ends when every slot has settled (DONE) or the backfill is cancelled: ``DELETE`` stops the
steps, and a worker drops a cancelled backfill's slot that had been sent but not started (no
record is written: a later backfill may run it).

**A replace while it runs.** The slots not sent yet that the new spec does not have are dropped
from the plan (``dropped``); a slot sent but not started runs under the new spec when it has it
(:mod:`punctual.execution.owed_slots`), else its claim records it SUPERSEDED and the step drops it
from the plan too, so no re-send runs it under a spec that never has it.

**Bounded per tenant** (:mod:`punctual.security.tenant_quotas`): a tenant runs at most
``maxBackfillsPerTenant`` backfills at once (a new one is refused, 409), and each step takes
the slots it sends from the tenant's count of the current minute
(``backfillSlotsPerMinutePerTenant``, all its backfills together); slots that do not fit wait
for the next steps.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from datetime import datetime, timedelta

from punctual.dispatch.queues import MessageKind, QueuePort, QueueRouting, message_for
from punctual.models import EARLIER_JOB_MARGIN, Job, JobState, Overlap
from punctual.runtime.clock import Clock
from punctual.security.tenant_quotas import BackfillQuota
from punctual.store.base import JobStore
from punctual.store.outcomes import may_have_landed
from punctual.timing.slots import dispatch_instant, next_slot, schedule_of
from punctual.timing.timers import Timer, TimerKind, TimerLayout, slot_instant, slot_key
from punctual.usecases.backfills import (
    Backfill,
    BackfillState,
    backfill_id,
    backfill_ref,
    has_slot,
    range_texts,
)
from punctual.usecases.calendars import CALENDAR_MISSING, Calendar, excluding
from punctual.usecases.job_errors import InvalidBackfillError, JobConflictError, JobNotFoundError

log = logging.getLogger("punctual.backfill")

_BEFORE = timedelta(milliseconds=1)  # slots are whole seconds: ``start`` itself is in the range
RESEND_AFTER_S = 360.0  # a sent slot still without a record is sent again this often (> SQS's 5 min)
PENDING = "PENDING"  # a slot not sent yet
SENT = "SENT"  # a slot sent that no worker has recorded yet


class BackfillNotFound(JobNotFoundError):
    """No backfill of that id for that job (404)."""


class BackfillRunner:
    """Starts, steps, shows and cancels backfills.

    Parameters
    ----------
    store, queues
        Storage and queue ports.
    clock
        The only source of ``now``.
    layout, routing
        Where step timers go; which queue a job's slots go to.
    max_parallel
        Slots of one backfill in flight at once, unless a request asks for fewer.
    max_slots
        The most slots one range may hold (a larger range is refused, 422).
    step_s
        Seconds between a backfill's steps.
    quota
        The tenant's running backfills and backfilled slots a minute (None: unbounded).
    """

    def __init__(
        self,
        store: JobStore,
        queues: QueuePort,
        clock: Clock,
        layout: TimerLayout,
        routing: QueueRouting,
        max_parallel: int = 4,
        max_slots: int = 1000,
        step_s: float = 2.0,
        quota: BackfillQuota | None = None,
    ) -> None:
        self.store = store
        self.queues = queues
        self.clock = clock
        self.layout = layout
        self.routing = routing
        self.max_parallel = max_parallel
        self.max_slots = max_slots
        self.step_s = step_s
        self.quota = quota

    # ------------------------------------------------------------------ the API's side

    def start(
        self,
        tenant: str,
        job_id: str,
        start: datetime,
        end: datetime,
        include_dependants: bool = False,
        max_parallel: int | None = None,
    ) -> Backfill:
        """Create (or find) the backfill of ``job_id`` over ``[start, end)`` and arm its driver."""
        now = self.clock.now()
        job = self.store.get_job(tenant, job_id)
        if job is None:
            raise JobNotFoundError(f"job {job_id!r} not found")
        kind = schedule_of(job).kind
        if kind in ("after", "delay"):
            hint = (
                "an after() job runs when its parents do: backfill a parent with include_dependants"
                if kind == "after"
                else "a delay() job has no fixed slots to backfill"
            )
            raise InvalidBackfillError(f"job {job_id!r} cannot be backfilled: {hint}", field="job_id")
        if start.year < 1970:
            raise InvalidBackfillError("start must be in 1970 or later", field="start")
        if end <= start:
            raise InvalidBackfillError("end must be after start (the range is [start, end))", field="end")
        if end > now:
            raise InvalidBackfillError(
                f"end {range_texts(start, end)[1]} is in the future: a backfill runs past slots only",
                field="end",
            )
        bid = backfill_id(tenant, job_id, *range_texts(start, end))
        existing = self.store.get_backfill(tenant, job_id, bid)
        # A backfill of the same range of an earlier job at this id (deleted since) is planned anew.
        earlier = existing is not None and existing.created_at < job.created_at - EARLIER_JOB_MARGIN
        if existing is not None and existing.state is not BackfillState.CANCELLED and not earlier:
            _same_request(existing, include_dependants)
            if existing.state is BackfillState.RUNNING:
                self._arm(existing, job, now)  # in case the request that created it died before
            return existing
        backfill = self._plan(job, bid, start, end, include_dependants, max_parallel, now, existing)
        counted = backfill.state is BackfillState.RUNNING and self.quota is not None
        if counted and self.quota is not None:
            self.quota.join(tenant, job_id, bid, lambda member: self._still_running(tenant, member))
        try:
            stored = self.store.create_backfill(backfill, replacing=existing)
        except Exception as exc:
            if counted and not may_have_landed(exc):  # (one that may have stays counted, as it runs)
                self._leave(backfill)
            raise
        log.info("backfill %s of %s: %d slots", bid, job_id, len(stored.slots))
        if stored.state is BackfillState.RUNNING:
            self._arm(stored, job, now)
        elif counted:
            self._leave(stored)
        return stored

    def _still_running(self, tenant: str, member: str) -> bool:
        """Whether a member of the tenant's running set (``<job>/<bid>``) is still RUNNING."""
        job_id, _, bid = member.partition("/")
        found = self.store.get_backfill(tenant, job_id, bid)
        return found is not None and found.state is BackfillState.RUNNING

    def _leave(self, backfill: Backfill) -> None:
        """The backfill ended: it no longer counts among its tenant's running ones."""
        if self.quota is None:
            return
        try:
            self.quota.leave(backfill.tenant, backfill.job_id, backfill.id)
        except Exception:  # found and dropped when the set is next full
            log.warning("backfill %s ended but still counts as running", backfill.id)

    def _plan(
        self,
        job: Job,
        bid: str,
        start: datetime,
        end: datetime,
        include_dependants: bool,
        max_parallel: int | None,
        now: datetime,
        replacing: Backfill | None,
    ) -> Backfill:
        candidates: list[datetime] = []
        slot = next_slot(job, start - _BEFORE)
        while slot is not None and slot < end:
            if len(candidates) >= self.max_slots:
                raise InvalidBackfillError(
                    f"the range holds more than {self.max_slots} slots of this job's schedule;"
                    " split it into smaller ranges",
                    field="end",
                )
            candidates.append(slot)
            slot = next_slot(job, slot)
        calendars = self._calendars(job)
        included = [s for s in candidates if excluding(calendars, s) is None]
        keys = [slot_key(s) for s in included]
        records = self.store.batch_get_executions((job.tenant, job.id, k) for k in keys)
        run = {key for (_, _, key), record in records.items() if not record.left_to_backfill(job.created_at)}
        todo = [k for k in keys if k not in run]
        parallel = max_parallel or self.max_parallel
        if job.overlap is not Overlap.ALLOW:
            parallel = 1  # skip and queue jobs run one slot at a time anyway (their turn)
        return Backfill(
            id=bid,
            tenant=job.tenant,
            job_id=job.id,
            start=start,
            end=end,
            include_dependants=include_dependants,
            max_parallel=parallel,
            tick_s=self.step_s,
            slots=todo,
            already_run=len(keys) - len(todo),
            excluded=len(candidates) - len(included),
            spec_version=job.spec_since,
            state=BackfillState.RUNNING if todo else BackfillState.DONE,
            tick=(replacing.tick + 1) if replacing else 0,
            generation=(replacing.generation + 1) if replacing else 0,
            revision=(replacing.revision + 1) if replacing else 1,
            created_at=now,
            updated_at=now,
        )

    def _calendars(self, job: Job) -> list[Calendar]:
        """The calendars ``job`` excludes, as they are now (a consistent read: one put a moment ago
        is found). One that is gone is a conflict: its days are not known, and the release records
        the job's slots MISSED rather than run them (QA22: the backfill ran them)."""
        keys = [(job.tenant, name) for name in job.exclude_calendars]
        found = self.store.batch_get_calendars(keys, consistent=True) if keys else {}
        gone = [name for tenant_name, name in keys if (tenant_name, name) not in found]
        if gone:
            named = ", ".join(repr(name) for name in gone)
            raise JobConflictError(
                f"{CALENDAR_MISSING}: {named} (excluded by the job, not found): put it again with its days"
                f" (PUT /v1/calendars/{gone[0]}) before a backfill"
            )
        return [found[key] for key in keys]

    def get(self, tenant: str, job_id: str, bid: str) -> Backfill:
        found = self.store.get_backfill(tenant, job_id, bid)
        if found is None:
            raise BackfillNotFound(f"no backfill {bid[:40]!r} of job {job_id!r}")
        return found

    def progress(self, backfill: Backfill) -> dict[str, int]:
        """How many of the backfill's slots are in each status (PENDING: not sent yet; SENT:
        sent, not yet recorded by a worker)."""
        counts: Counter[str] = Counter()
        sent = backfill.slots[: backfill.released]
        records = self.store.batch_get_executions((backfill.tenant, backfill.job_id, k) for k in sent)
        for key in sent:
            record = records.get((backfill.tenant, backfill.job_id, key))
            # A record the plan found (MISSED, SUPERSEDED, an earlier job's) is not yet this
            # backfill's: measured from the backfill's creation, after the job's own, an earlier
            # job's record is older still, and the job's own runs of a planned slot start later.
            unclaimed = record is None or record.left_to_backfill(backfill.created_at)
            counts[SENT if unclaimed or record is None else record.status.value] += 1
        if len(backfill.slots) > backfill.released:
            counts[PENDING] += len(backfill.slots) - backfill.released
        return dict(sorted(counts.items()))

    def cancel(self, tenant: str, job_id: str, bid: str) -> Backfill:
        """Stop sending the backfill's slots; those sent but not started are dropped by workers."""
        for _ in range(5):
            current = self.get(tenant, job_id, bid)
            if current.state is BackfillState.CANCELLED:
                return current
            if current.state is BackfillState.DONE:
                raise JobConflictError(f"backfill {bid!r} is done: every slot has ended")
            cancelled = current.model_copy(
                update={
                    "state": BackfillState.CANCELLED,
                    "revision": current.revision + 1,
                    "updated_at": self.clock.now(),
                }
            )
            if self.store.update_backfill(cancelled, current.revision):
                self._leave(cancelled)
                return cancelled
        raise JobConflictError(f"backfill {bid!r} kept changing; try again")

    def _arm(
        self, backfill: Backfill, job: Job, now: datetime, step: int | None = None, after_s: float = 0.0
    ) -> None:
        """Write the timer of the backfill's step ``step`` (default: its current tick)."""
        timer = self.layout.make(
            now=now,
            due=now + timedelta(seconds=after_s),
            job_id=job.id,
            tenant=job.tenant,
            slot=backfill.id,
            attempt=backfill.tick if step is None else step,
            kind=TimerKind.BACKFILL,
            job_version=job.version,
        )
        self.store.put_timers([timer])

    # ------------------------------------------------------------------ the poller's side

    def step(self, timer: Timer, job: Job | None) -> int:
        """Act on a BACKFILL timer (step ``timer.attempt``); returns how many slots it sent."""
        now = self.clock.now()
        backfill = self.store.get_backfill(timer.tenant, timer.job_id, timer.slot)
        if backfill is None or backfill.state is not BackfillState.RUNNING or backfill.tick > timer.attempt:
            return 0  # done, cancelled, or a step already taken
        earlier_job = job is not None and backfill.created_at < job.created_at - EARLIER_JOB_MARGIN
        if job is None or job.state is JobState.DELETED or earlier_job:  # (a job at this id, deleted since)
            gone = backfill.model_copy(
                update={
                    "state": BackfillState.CANCELLED,
                    "reason": "the job was deleted",
                    "revision": backfill.revision + 1,
                    "updated_at": now,
                }
            )
            if self.store.update_backfill(gone, backfill.revision):
                self._leave(gone)
            return 0
        if 0 < backfill.spec_version < job.spec_since:  # the spec changed since the slots were planned
            backfill = _its_slots_only(backfill, job)
        window = backfill.slots[backfill.settled : backfill.released]
        found = self.store.batch_get_executions((job.tenant, job.id, k) for k in window)
        # A slot's record counts once it is no longer the one the plan found (MISSED, SUPERSEDED or
        # an earlier job's): until a worker claims the slot, it has not ended, and may be sent again.
        records = {
            key: record for key, record in found.items() if not record.left_to_backfill(job.created_at)
        }
        backfill = _sent_slots_kept(backfill, job, {key for _, _, key in records})
        window = backfill.slots[backfill.settled : backfill.released]
        ended = [
            (r := records.get((job.tenant, job.id, k))) is not None and r.status.terminal for k in window
        ]
        settled = backfill.settled
        for done in ended:
            if not done:
                break
            settled += 1
        in_flight = ended.count(False)
        # One at a time for a skip or queue job as it is now: one made so since the plan would have
        # its slots SKIPPED by their own overlap (QA29: four of six, never run)
        parallel = backfill.max_parallel if job.overlap is Overlap.ALLOW else 1
        room = max(0, parallel - in_flight)
        to_send = backfill.slots[backfill.released : backfill.released + room]
        # Now and then, a slot sent long ago that no worker has recorded yet is sent again (after
        # SQS's five-minute deduplication window): a message lost on its way cannot hold the
        # backfill forever, and the claim still starts the slot once.
        resend_every = max(1, math.ceil(RESEND_AFTER_S / backfill.tick_s))
        again = (
            [k for k in window if (job.tenant, job.id, k) not in records]
            if timer.attempt > 0 and timer.attempt % resend_every == 0
            else []
        )
        if self.quota is not None and (again or to_send):
            # The tenant's backfilled slots a minute, all its backfills together: the rest waits.
            granted = self.quota.take(job.tenant, len(again) + len(to_send), now)
            again, to_send = again[:granted], to_send[: max(0, granted - len(again))]
        ref = backfill_ref(backfill.id, backfill.include_dependants, backfill.generation)
        messages = [
            message_for(
                job, key, dispatch_instant(job, slot_instant(key)), 1, MessageKind.BACKFILL, now, backfill=ref
            )
            for key in [*again, *to_send]
        ]
        if messages:  # send first, then the next step, then the record: see the module docstring
            self.queues.send(self.routing.queue_for(job), messages)
        finished = settled == len(backfill.slots)
        if not finished:
            self._arm(backfill, job, now, step=timer.attempt + 1, after_s=backfill.tick_s)
        advanced = backfill.model_copy(
            update={
                "released": backfill.released + len(to_send),
                "settled": settled,
                "tick": timer.attempt + 1,
                "state": BackfillState.DONE if finished else BackfillState.RUNNING,
                "revision": backfill.revision + 1,
                "updated_at": now,
            }
        )
        if not self.store.update_backfill(advanced, backfill.revision):
            log.info("backfill %s step %d raced another; its write stands", backfill.id, timer.attempt)
        elif finished:
            self._leave(advanced)
        return len(messages)


def _its_slots_only(backfill: Backfill, job: Job) -> Backfill:
    """The backfill without the slots not sent yet that ``job``'s spec, replaced since they were
    planned, does not have (another schedule, a ``start_at`` or ``end_at`` that leaves them out, an
    ``after()`` or ``delay()`` job now): they are not run, and counted ``dropped`` (QA29: they ran
    under the new spec, an ``after()`` job's without its parents, slots its new schedule never has).
    A replace that keeps them (a payload fix) leaves the plan as it is."""
    unsent = backfill.slots[backfill.released :]
    kept = [key for key in unsent if has_slot(job, key)]
    if len(kept) < len(unsent):
        log.info("backfill %s: %d slots dropped by a replace", backfill.id, len(unsent) - len(kept))
    return backfill.model_copy(
        update={
            "slots": backfill.slots[: backfill.released] + kept,
            "dropped": backfill.dropped + len(unsent) - len(kept),
            "spec_version": job.spec_since,
        }
    )


def _sent_slots_kept(backfill: Backfill, job: Job, claimed: set[str]) -> Backfill:
    """The backfill without its slots sent but not claimed that ``job``'s spec, replaced since they
    were sent, does not have: their messages are recorded SUPERSEDED when a worker gets them, and
    they are neither waited for nor sent again (QA30: the re-send of a slot superseded so, made for
    the new spec, ran it under a spec that never has it). A slot claimed before the replace stays."""
    window = backfill.slots[backfill.settled : backfill.released]
    gone = {key for key in window if key not in claimed and not has_slot(job, key)}
    if not gone:
        return backfill
    log.info("backfill %s: %d sent slots dropped by a replace", backfill.id, len(gone))
    return backfill.model_copy(
        update={
            "slots": [key for key in backfill.slots if key not in gone],
            "released": backfill.released - len(gone),
            "dropped": backfill.dropped + len(gone),
        }
    )


def _same_request(existing: Backfill, include_dependants: bool) -> None:
    """A request for a range that has a backfill answers it only when it asks for the same runs: one
    that differs in ``include_dependants`` is a conflict (QA22: it was answered 202 with the first
    backfill, whose dependants do not run, as if it had been done as asked)."""
    if existing.include_dependants == include_dependants:
        return
    had = "with" if existing.include_dependants else "without"
    then = (
        "cancel it (DELETE its URL) and ask again: the slots it ran are left alone"
        if existing.state is BackfillState.RUNNING
        else "its slots have run"
    )
    raise JobConflictError(
        f"backfill {existing.id!r} of this range is {existing.state.value} {had} include_dependants: {then}"
    )
