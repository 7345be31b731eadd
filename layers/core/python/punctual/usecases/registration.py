"""Registering a new job: what :meth:`punctual.usecases.jobs.JobService.register` does, in two
steps a job batch also takes apart (:mod:`punctual.usecases.job_groups`).

:func:`prepare` checks the spec and builds the job and its first timer (its target under the
tenant boundary and the SSRF guard, its parents, its size, its first slot, its signing secret);
:func:`write` counts it in its tenant's peak profile and stores it in its own transaction (the
job, its listing, its tenant's counter, its first timer, its links and calendar uses), takes the
peak count back if that fails, and adds its near slots to the minute-load ledger.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from punctual.delivery.notifications.alerts import end_unwatched_streak
from punctual.dispatch.load_forecast import LoadForecast
from punctual.execution.relinks import check_links
from punctual.models import Job, JobSpec, JobState
from punctual.runtime.clock import Clock
from punctual.security.peaks import Profile
from punctual.store.base import (
    CalendarNotFoundError,
    CalendarUses,
    JobExistsError,
    JobStore,
    ParentNotFoundError,
    TenantLimitError,
    UnreadableJobError,
)
from punctual.store.dynamo.sizes import check_job_size
from punctual.store.outcomes import may_have_landed
from punctual.timing.slots import ceil_second, fire_timer, first_slot, no_slot_reason, schedule_of
from punctual.timing.timers import Timer, TimerLayout, slot_instant
from punctual.usecases.calendars import Calendar
from punctual.usecases.job_admission import JobAdmission
from punctual.usecases.job_errors import InvalidJobError
from punctual.usecases.next_fire import NextFire

Made = tuple[Job, str | None]  # a job and the signing secret made for it (shown once), if one was


class SecretBox(Protocol):
    def new_secret(self, tenant: str, job_id: str) -> tuple[str, str]:
        """A fresh webhook signing secret of one job: (plain text, stored form bound to the job)."""
        ...


class Registrar(Protocol):
    """What registering needs of the job service (:class:`punctual.usecases.jobs.JobService`)."""

    store: JobStore
    clock: Clock
    layout: TimerLayout
    admission: JobAdmission
    secrets: SecretBox | None
    max_jobs: int
    max_trigger_rate: int | None
    forecast: LoadForecast | None
    next_fire: NextFire


@dataclass
class NewJob:
    """A job :func:`prepare` made, not stored yet: its first timer, its signing secret's plain text,
    its parents (as read) and calendar uses, and what it added to its tenant's peak profile once
    counted; ``named``: its id was the caller's (a repeat may find it taken)."""

    job: Job
    timer: Timer | None
    secret: str | None = None
    named: bool = True
    parents: tuple[str, ...] = ()
    parents_read: dict[str, Job] = field(default_factory=dict)
    uses: CalendarUses = field(default_factory=CalendarUses)
    added: tuple[Profile | None, Profile | None] = (None, None)
    # The calendars it excludes, read before it is stored: its reply's next_fire_at reads nothing
    # after the write (QA29: a throttled read there answered 503, "nothing was done", for a job
    # stored, and the client's retry made a second one)
    calendars: dict[tuple[str, str], Calendar] = field(default_factory=dict)

    @property
    def groupable(self) -> bool:
        """Whether it can be written with others in one transaction: no links, no calendar uses."""
        return not self.parents and not self.uses.add and not self.uses.drop


def signs_webhooks(spec: JobSpec) -> bool:
    """Whether the job calls a webhook (its target, or an alert rule's): then it has a signing secret."""
    return spec.target.type == "http" or any(rule.target.type == "http" for rule in spec.alerts)


def first_timer(layout: TimerLayout, job: Job, now: datetime) -> Timer | None:
    """The timer of ``job``'s first slot from ``now`` (None: an after() job, or no slot left)."""
    slot = None if schedule_of(job).kind == "after" else first_slot(job, now)
    return None if slot is None else fire_timer(layout, job, slot, now)


def checked_parents(
    admission: JobAdmission,
    tenant: str,
    job_id: str,
    spec: JobSpec,
    now: datetime,
    current: tuple[str, ...] | None = None,
    walked: dict[str, int] | None = None,
) -> tuple[tuple[str, ...], dict[str, Job]]:
    """``spec``'s parents, checked (:meth:`JobAdmission.check_dependencies`), and each as read."""
    read: dict[str, Job] = {}
    return admission.check_dependencies(tenant, job_id, spec, now, current, walked, parents_read=read), read


@contextmanager
def calendars_checked() -> Iterator[None]:
    """A job write whose calendar check failed: 422 naming the calendar that does not exist; or
    whose ``after()`` parent was deleted since it was read: 422 naming it."""
    try:
        yield
    except ParentNotFoundError as exc:
        raise InvalidJobError(str(exc), field="schedule") from None
    except CalendarNotFoundError as exc:
        raise InvalidJobError(
            f"calendar {exc.name!r} does not exist (PUT /v1/calendars/{exc.name} first)",
            field="exclude_calendars",
        ) from None


def count_peaks(reg: Registrar, new: NewJob) -> None:
    """Count a new job in its tenant's peaks (:func:`refused_peaks` when refused)."""
    try:
        new.added = reg.admission.count_peaks(new.job.tenant, new.job, None)
    except TenantLimitError as exc:
        raise refused_peaks(reg, new, exc) from None


def refused_peaks(reg: Registrar, new: NewJob, exc: TenantLimitError) -> Exception:
    """Why a new job's peaks were refused. At an id that is taken, a repeat (a batch retried):
    JobExistsError, as the write would say, not the quota its profile counted twice would reach
    (QA17: a repeated batch at a full peak quota answered 409 peak-quota-reached for jobs there)."""
    try:
        taken = new.named and reg.store.get_job(new.job.tenant, new.job.id) is not None
    except UnreadableJobError:
        taken = True
    return JobExistsError(f"job {new.job.id!r} already exists") if taken else exc


def prepare(reg: Registrar, tenant: str, spec: JobSpec, job_id: str | None, paused: bool) -> NewJob:
    """The new job of ``spec`` checked and built (not counted, not stored).

    ``paused`` makes it PAUSED, with no timer (a schedule created DISABLED): no slot can fire
    before a separate pause would land.
    """
    now = reg.clock.now()
    # A job created at an id a deleted job had starts past its last version (a generated id
    # is new: no read), so no version, ETag or timer of the two is the same.
    first = reg.store.first_version(tenant, job_id) if job_id else 1
    job_id, given_id = job_id or uuid.uuid4().hex, job_id is not None
    reg.admission.check_target(spec)
    parents, parents_read = checked_parents(reg.admission, tenant, job_id, spec, now)
    secret_plain: str | None = None
    secret_stored: str | None = None
    if signs_webhooks(spec) and reg.secrets is not None:
        secret_plain, secret_stored = reg.secrets.new_secret(tenant, job_id)
    job = Job(
        **spec.model_dump(),
        id=job_id,
        tenant=tenant,
        created_at=now,
        updated_at=now,
        anchor=ceil_second(spec.start_at or now),
        signing_secret_enc=secret_stored,
        trigger_rate=reg.admission.trigger_rate(tenant, spec),
        version=first,
        spec_version=first,
    )
    check_job_size(job)  # 413 naming the largest parts, before anything is written
    timer = first_timer(reg.layout, job, now)
    if timer is None and schedule_of(job).kind != "after":
        raise InvalidJobError(no_slot_reason(job, now))
    if paused:
        # No pause instant: it was never enabled, so its resume starts afresh and owes nothing
        # (EventBridge Scheduler's DISABLED, a CronJob's suspend; review: a job created paused
        # and resumed two hours later ran the last hour's slots at once)
        job = job.model_copy(update={"state": JobState.PAUSED, "paused_at": None})
        timer = None
    # The job, its links as a dependent of its parents and its calendar uses: one transaction,
    # never half of it; each calendar is checked to exist, so a calendar cannot be deleted once
    # a job excludes it, nor a job made to exclude one that is gone.
    uses = CalendarUses.between((), spec.exclude_calendars)
    calendars = reg.next_fire.calendars_of([job])  # (for the reply: read before anything is written)
    # Links' RELINK timers first, harmless if nothing is stored (QA24: after it, a 503 stored a job)
    check_links(reg.store, reg.layout, parents_read, parents, now)
    return NewJob(job, timer, secret_plain, given_id, parents, parents_read, uses, calendars=calendars)


def placed_now(reg: Registrar, new: NewJob) -> Timer | None:
    """:func:`prepare`'s first timer placed again from the clock as it is now, as it is written: a
    batch prepares all its jobs before it stores any, so a timer placed at its preparing (a slot
    due within seconds clamped to that instant, in the near lane) could be seconds old when
    written, past the near lane's look-back, and its slot released only at the minute's last read
    (review QA28)."""
    if new.timer is not None:
        new.timer = fire_timer(reg.layout, new.job, slot_instant(new.timer.slot), reg.clock.now())
    return new.timer


def write(reg: Registrar, new: NewJob, counted: bool = False) -> Made:
    """Count :func:`prepare`'s job in its tenant's peaks (unless ``counted`` already) and store it
    in its own transaction (its peak count taken back if that fails)."""
    if not counted:
        count_peaks(reg, new)
    placed_now(reg, new)
    try:
        with calendars_checked():
            reg.store.create_job(
                new.job,
                new.timer,
                reg.max_jobs,
                reg.max_trigger_rate,
                parents=new.parents,
                calendars=new.uses,
            )
    except Exception as exc:
        if not may_have_landed(exc):  # (one that may have: its count is kept, never too low)
            uncount(reg, new)
        raise
    return stored(reg, new)


def uncount(reg: Registrar, new: NewJob) -> None:
    """Take back what was counted of ``new`` in its tenant's peaks (its job was not stored)."""
    reg.admission.uncount_peaks(new.job.tenant, *new.added)


def stored(reg: Registrar, new: NewJob) -> Made:
    """A job just stored: its near slots in the minute-load ledger, and the job as answered. One
    created at a deleted job's id (past its version) ends the failure streak found there: a run in
    flight at the delete failed after it, and the job created again was told it recovered (QA28)."""
    if new.job.version > 1:  # (one read, only for a job with a recovered rule)
        end_unwatched_streak(reg.store, new.job, None)
    if reg.forecast is not None:
        reg.forecast.changed(None, new.job, reg.clock.now())
    return reg.next_fire.of(new.job, new.calendars), new.secret


def register(reg: Registrar, tenant: str, spec: JobSpec, job_id: str | None, paused: bool) -> Made:
    """Store a new job and its first timer; return it and its signing secret (shown once)."""
    return write(reg, prepare(reg, tenant, spec, job_id, paused))
