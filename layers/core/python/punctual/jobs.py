"""Use cases behind the API: register, replace, pause, resume, delete, trigger a job.

Each one is a version-checked write. Pause, delete and replace bump the version, so
timers written for the old version become stale and the poller ignores them; resume
and replace write a fresh timer (resume under the job's catch-up policy).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from punctual.boundary import Boundary
from punctual.calendars import Calendar, included_slots
from punctual.clock import Clock
from punctual.load_forecast import LoadForecast
from punctual.models import EventBridgeTarget, HttpTarget, Job, JobSpec, JobState, Target
from punctual.ownership import OwnResources
from punctual.peaks import Profile, job_profile
from punctual.queues import MessageKind, QueuePort, QueueRouting, message_for
from punctual.quotas import MICRO, micro_rate
from punctual.schedules import ScheduleError, cached_schedule
from punctual.slots import (
    ceil_second,
    dispatch_instant,
    fire_timer,
    first_slot,
    next_slot,
    resume_start,
    schedule_of,
)
from punctual.store.base import (
    NO_CALENDAR_USES,
    CalendarNotFoundError,
    CalendarUses,
    JobStore,
    Page,
    UnreadableJob,
    UnreadableJobError,
    VersionConflictError,
)
from punctual.store.sizes import check_job_size
from punctual.targets.webhooks.guard import BlockedTargetError, guard_url
from punctual.targets.webhooks.signing import TENANT_HEADER
from punctual.tenant_quotas import PeakQuota
from punctual.timers import Timer, TimerLayout, slot_key

RESUME_TRIES = 3  # a resume that meets a concurrent write (a poller parking an owed slot) reads again


class JobError(Exception):
    """Base of the errors the API turns into 4xx answers."""


class JobNotFoundError(JobError):
    pass


class JobConflictError(JobError):
    """The job changed meanwhile (409), or is in a state that forbids the request."""


class PreconditionFailedError(JobError):
    """``If-Match`` named a version that is not the current one (412)."""

    def __init__(self, message: str, current_version: int | None) -> None:
        super().__init__(message)
        self.current_version = current_version


class InvalidJobError(JobError):
    """The spec is well-formed but cannot be accepted (422): no future slot, a cycle, ..."""

    def __init__(self, message: str, field: str = "schedule") -> None:
        super().__init__(message)
        self.field = field


class SecretBox(Protocol):
    def new_secret(self, tenant: str, job_id: str) -> tuple[str, str]:
        """A fresh webhook signing secret of one job: (plain text, stored form bound to the job)."""
        ...


@dataclass
class MoveReport:
    """What :meth:`JobService.move_jobs` did: moved ids, new webhook secrets, jobs kept and why."""

    moved: list[str] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict)
    kept: list[tuple[str, str]] = field(default_factory=list)


def _whole_second(instant: datetime) -> datetime:
    return ceil_second(instant)


def _stand_in(found: UnreadableJob, spec: JobSpec, now: datetime) -> Job:
    """What ``replace`` needs of a job it cannot read: its version, state and secrets.

    The rest comes from the new spec; its creation instant from the stored document when
    that part still parses.
    """
    try:
        created = datetime.fromisoformat(str(found.doc.get("created_at")))
    except ValueError:
        created = now
    state = JobState.PAUSED if found.state == JobState.PAUSED.value else JobState.ENABLED
    return Job(
        **spec.model_dump(),
        id=found.id,
        tenant=found.tenant,
        state=state,
        version=found.version,
        created_at=created if created.tzinfo else now,
        updated_at=now,
        anchor=_whole_second(spec.start_at or now),
        paused_at=now if state is JobState.PAUSED else None,
        signing_secret_enc=found.signing_secret_enc,
        signing_secret_prev_enc=found.signing_secret_prev_enc,
        trigger_rate=found.trigger_rate,
    )


def _raw_parents(found: UnreadableJob) -> tuple[str, ...]:
    """The after(...) parents of a job that cannot be read, as far as its schedule parses."""
    try:
        return cached_schedule(
            str(found.doc.get("schedule")), str(found.doc.get("timezone") or "UTC")
        ).parents
    except (ScheduleError, ValueError):
        return ()


def _raw_calendars(found: UnreadableJob) -> tuple[str, ...]:
    """The calendars a job that cannot be read excludes, as far as its document says."""
    names = found.doc.get("exclude_calendars")
    return tuple(n for n in names if isinstance(n, str)) if isinstance(names, list) else ()


@contextmanager
def _calendars_checked() -> Iterator[None]:
    """A job write whose calendar check failed: 422 naming the calendar that does not exist."""
    try:
        yield
    except CalendarNotFoundError as exc:
        raise InvalidJobError(
            f"exclude_calendars: calendar {exc.name!r} does not exist (PUT /v1/calendars/{exc.name} first)",
            field="exclude_calendars",
        ) from None


def find_cycle(
    job_id: str, parents: tuple[str, ...], lookup: Callable[[str], tuple[str, ...] | None]
) -> list[str] | None:
    """The dependency path that leads from ``parents`` back to ``job_id``, or None.

    ``lookup(id)`` gives a job's own parents (None when the job does not exist).
    """
    stack: list[tuple[str, list[str]]] = [(p, [job_id, p]) for p in parents]
    seen: set[str] = set()
    while stack:
        current, path = stack.pop()
        if current == job_id:
            return path
        if current in seen:
            continue
        seen.add(current)
        for parent in lookup(current) or ():
            stack.append((parent, [*path, parent]))
    return None


def signs_webhooks(spec: JobSpec) -> bool:
    """Whether the job calls a webhook (its target, or an alert rule's): then it has a signing secret."""
    return spec.target.type == "http" or any(rule.target.type == "http" for rule in spec.alerts)


def resumed(current: Job, now: datetime, layout: TimerLayout) -> tuple[Job, list[Timer]]:
    """A paused job enabled again at ``now``, and the first timer of its chain.

    The chain starts at the first slot the pause owes (:func:`punctual.polling.chains.resume_start`):
    the first slot at or after the pause, or an earlier one due before it that was not released.
    When that slot is past, a RESUME timer due now releases it and the poller's catch-up decides
    every slot up to now by the catch-up policy and its window (``all`` runs them, ``latest`` the
    newest, ``none`` records them MISSED, long runs as one range record). delay(...) jobs start
    afresh from now; after(...) jobs have no chain. A job with no slot left is COMPLETED.
    """
    job = current.model_copy(
        update={
            "state": JobState.ENABLED,
            "version": current.version + 1,
            "spec_version": current.spec_since,
            "updated_at": now,
            "state_reason": None,
        }
    )
    kind = schedule_of(job).kind
    if kind == "after":
        return job, []
    fresh = kind == "delay" or current.paused_at is None  # no pause instant to start from
    start = first_slot(job, now) if fresh else resume_start(job)
    if start is None:
        return job.model_copy(update={"state": JobState.COMPLETED, "state_reason": "no slot left"}), []
    return job, [fire_timer(layout, job, start, now, resumed=not fresh)]


class JobService:
    """The job use cases for one deployment.

    Parameters
    ----------
    store, queues
        Storage and queue ports.
    clock
        The only source of ``now``.
    layout
        Where timers go.
    routing
        Which queue a job's messages go to.
    max_jobs_per_tenant
        Registration beyond this is refused.
    secrets
        Makes a webhook signing secret for HTTP targets (None: jobs get none).
    allow_cidrs
        Addresses the webhook SSRF guard lets through.
    own_resources
        Returns the deployment's own resources, which no target may name (called per check:
        the list is loaded once, on first use).
    require_target_role
        Refuse AWS targets that name no ``role_arn``.
    boundary
        The tenant boundary every ARN a job names passes (:mod:`punctual.boundary`); default: one
        made of ``own_resources`` and ``require_target_role``.
    peaks
        The tenant's peak quotas (:mod:`punctual.tenant_quotas`); None: not counted.
    max_triggers_per_minute
        The tenant's quota of scheduled triggers per minute (None: no quota).
    """

    def __init__(
        self,
        store: JobStore,
        queues: QueuePort,
        clock: Clock,
        layout: TimerLayout,
        routing: QueueRouting,
        max_jobs_per_tenant: int = 100_000,
        secrets: SecretBox | None = None,
        allow_cidrs: tuple[str, ...] = (),
        own_resources: Callable[[], OwnResources] | None = None,
        require_target_role: bool = False,
        max_triggers_per_minute: int | None = None,
        boundary: Boundary | None = None,
        peaks: PeakQuota | None = None,
        forecast: LoadForecast | None = None,
    ) -> None:
        self.store = store
        self.queues = queues
        self.clock = clock
        self.layout = layout
        self.routing = routing
        self.max_jobs = max_jobs_per_tenant
        self.secrets = secrets
        self.allow_cidrs = allow_cidrs
        self.own_resources = own_resources or OwnResources
        self.require_target_role = require_target_role
        self.boundary = boundary or Boundary(self.own_resources, require_target_role=require_target_role)
        self.peaks = peaks
        self.max_trigger_rate = None if max_triggers_per_minute is None else max_triggers_per_minute * MICRO
        self.forecast = forecast  # the minute-load ledger the tick reads (punctual.load_forecast)

    def _forecast(self, old: Job | None, new: Job | None) -> None:
        """A job's near slots in the minute-load ledger: ``old``'s taken back, ``new``'s added."""
        if self.forecast is not None:
            self.forecast.changed(old, new, self.clock.now())

    # ------------------------------------------------------------------ reading

    def get(self, tenant: str, job_id: str) -> Job:
        job = self.store.get_job(tenant, job_id)
        if job is None:
            raise JobNotFoundError(f"job {job_id!r} not found")
        return self.with_next_fire(job)

    def list_jobs(
        self,
        tenant: str,
        limit: int,
        cursor: str | None = None,
        state: JobState | None = None,
        tag: str | None = None,
    ) -> Page[Job]:
        page = self.store.list_jobs(tenant, limit, cursor, state, tag)
        calendars = self.calendars_of(page.items)
        return Page([self.with_next_fire(job, calendars) for job in page.items], page.cursor, page.unreadable)

    def calendars_of(self, jobs: list[Job]) -> dict[tuple[str, str], Calendar]:
        """The calendars ``jobs`` exclude, read once each."""
        keys = {(job.tenant, name) for job in jobs for name in job.exclude_calendars}
        return self.store.batch_get_calendars(keys) if keys else {}

    def excluded_by(
        self, job: Job, calendars: dict[tuple[str, str], Calendar] | None = None
    ) -> list[Calendar]:
        """The calendars ``job`` excludes, as they are now (one missing is left out)."""
        if not job.exclude_calendars:
            return []
        found = calendars if calendars is not None else self.calendars_of([job])
        return [found[key] for key in ((job.tenant, n) for n in job.exclude_calendars) if key in found]

    def with_next_fire(self, job: Job, calendars: dict[tuple[str, str], Calendar] | None = None) -> Job:
        """``next_fire_at`` is derived from the schedule when read, never written on every fire;
        slots on a day of a calendar the job excludes are passed over."""
        nxt: datetime | None = None
        if job.state is JobState.ENABLED and schedule_of(job).kind not in ("after", "delay"):
            excluding = self.excluded_by(job, calendars)
            if excluding:
                found = included_slots(lambda t: next_slot(job, t), self.clock.now(), excluding, 1)
                slot = found[0] if found else None
            else:
                slot = next_slot(job, self.clock.now())
            nxt = dispatch_instant(job, slot) if slot else None
        return job.model_copy(update={"next_fire_at": nxt})

    # ------------------------------------------------------------------ writing

    def register(
        self, tenant: str, spec: JobSpec, job_id: str | None = None, paused: bool = False
    ) -> tuple[Job, str | None]:
        """Store a new job and its first timer; return it and its signing secret (shown once).

        ``paused`` stores it PAUSED in the same write, with no timer (a schedule created
        DISABLED): no slot can fire before a separate pause would land.
        """
        now = self.clock.now()
        job_id = job_id or uuid.uuid4().hex
        self._check_target(spec)
        parents = self._check_dependencies(tenant, job_id, spec)
        secret_plain: str | None = None
        secret_stored: str | None = None
        if signs_webhooks(spec) and self.secrets is not None:
            secret_plain, secret_stored = self.secrets.new_secret(tenant, job_id)
        job = Job(
            **spec.model_dump(),
            id=job_id,
            tenant=tenant,
            created_at=now,
            updated_at=now,
            anchor=_whole_second(spec.start_at or now),
            signing_secret_enc=secret_stored,
            trigger_rate=self._trigger_rate(tenant, spec),
            spec_version=1,
        )
        check_job_size(job)  # 413 naming the largest parts, before anything is written
        timer = self._first_timer(job, now, after=now)
        if timer is None and schedule_of(job).kind != "after":
            raise InvalidJobError(
                "schedule has no future slot (a one-time instant in the past, or end_at passed)"
            )
        if paused:
            job = job.model_copy(update={"state": JobState.PAUSED, "paused_at": now})
            timer = None
        # The job, its links as a dependent of its parents and its calendar uses: one transaction,
        # never half of it; each calendar is checked to exist, so a calendar cannot be deleted once
        # a job excludes it, nor a job made to exclude one that is gone.
        uses = CalendarUses.between((), spec.exclude_calendars)
        added = self._count_peaks(tenant, job, None)
        try:
            with _calendars_checked():
                self.store.create_job(
                    job, timer, self.max_jobs, self.max_trigger_rate, parents=parents, calendars=uses
                )
        except Exception:
            self._uncount_peaks(tenant, *added)
            raise
        self._forecast(None, job)
        return self.with_next_fire(job), secret_plain

    def replace(self, tenant: str, job_id: str, spec: JobSpec, expected_version: int | None = None) -> Job:
        """Replace the spec. The next slot is computed afresh (no catch-up for a replacement).

        A stored job the model cannot read is replaced too: that is how it is fixed.
        """
        found = self._found(tenant, job_id, expected_version)
        now = self.clock.now()
        current = found if isinstance(found, Job) else _stand_in(found, spec, now)
        self._check_target(spec)
        parents = self._check_dependencies(tenant, job_id, spec)
        old_parents = schedule_of(current).parents if isinstance(found, Job) else _raw_parents(found)
        anchor = current.anchor
        if spec.start_at != current.start_at or spec.schedule != current.schedule:
            anchor = _whole_second(spec.start_at or now)
        # A new spec supersedes what was released for the old one (punctual.execution.versions);
        # the same spec sent again (an UpdateSchedule that changes nothing) supersedes nothing.
        same_spec = isinstance(found, Job) and found.spec() == JobSpec.model_validate(spec.model_dump())
        job = Job(
            **spec.model_dump(),
            id=job_id,
            tenant=tenant,
            state=JobState.ENABLED if current.state is JobState.COMPLETED else current.state,
            version=current.version + 1,
            spec_version=current.spec_since if same_spec else current.version + 1,
            owed_from=current.owed_from if same_spec else None,
            created_at=current.created_at,
            updated_at=now,
            anchor=anchor,
            paused_at=current.paused_at,
            skipped_slots=current.skipped_slots,
            signing_secret_enc=current.signing_secret_enc,
            signing_secret_prev_enc=current.signing_secret_prev_enc,
            trigger_rate=self._trigger_rate(tenant, spec),
        )
        if signs_webhooks(spec) and not job.signing_secret_enc and self.secrets is not None:
            job = job.model_copy(update={"signing_secret_enc": self.secrets.new_secret(tenant, job_id)[1]})
        check_job_size(job)
        timers: list[Timer] = []
        if job.state is JobState.ENABLED:
            timer = self._first_timer(job, now, after=now)
            if timer is None and schedule_of(job).kind != "after":
                raise InvalidJobError(
                    "schedule has no future slot (a one-time instant in the past, or end_at passed)"
                )
            timers = [timer] if timer else []
        old_calendars = current.exclude_calendars if isinstance(found, Job) else _raw_calendars(found)
        uses = CalendarUses.between(old_calendars, spec.exclude_calendars)
        # Every parent is (re)linked, not only new ones: a link an older version lost is repaired.
        removed = tuple(p for p in old_parents if p not in parents)
        changed = self._count_peaks(tenant, job, found)
        try:
            with _calendars_checked():
                self._write(
                    job,
                    current.version,
                    timers,
                    previous_trigger_rate=current.trigger_rate,
                    parents_added=parents,
                    parents_removed=removed,
                    calendars=uses,
                )
        except Exception:
            self._uncount_peaks(tenant, *changed)
            raise
        self._forecast(current, job)
        return self.with_next_fire(job)

    def pause(
        self, tenant: str, job_id: str, expected_version: int | None = None, reason: str | None = None
    ) -> Job:
        current = self._current(tenant, job_id, expected_version)
        if current.state is JobState.PAUSED:
            return self.with_next_fire(current)
        if current.state is JobState.COMPLETED:
            raise JobConflictError(f"job {job_id!r} is completed; replace it to schedule it again")
        now = self.clock.now()
        job = current.model_copy(
            update={
                "state": JobState.PAUSED,
                "version": current.version + 1,
                "spec_version": current.spec_since,  # the spec does not change
                "updated_at": now,
                "paused_at": now,
                "owed_from": None,
                "state_reason": reason,
            }
        )
        self._write(job, current.version, [])
        self._forecast(current, job)
        return self.with_next_fire(job)

    def resume(self, tenant: str, job_id: str, expected_version: int | None = None) -> Job:
        """Enable again; the slots the pause owes follow the catch-up policy (:func:`resumed`)."""
        for attempt in range(RESUME_TRIES):
            current = self._current(tenant, job_id, expected_version)
            if current.state is JobState.ENABLED:
                return self.with_next_fire(current)
            if current.state is JobState.COMPLETED:
                raise JobConflictError(f"job {job_id!r} is completed; replace it to schedule it again")
            job, timers = resumed(current, self.clock.now(), self.layout)
            try:
                self._write(job, current.version, timers)
            except JobConflictError:
                if expected_version is not None or attempt + 1 == RESUME_TRIES:
                    raise
                continue  # a poller recorded a slot the pause owes (a version bump): read it again
            self._forecast(current, job)
            return self.with_next_fire(job)
        raise AssertionError("unreachable")

    def delete(self, tenant: str, job_id: str, expected_version: int | None = None) -> None:
        """Delete the job (one the model cannot read included); its history stays until its TTL."""
        current = self._found(tenant, job_id, expected_version)
        parents = schedule_of(current).parents if isinstance(current, Job) else _raw_parents(current)
        calendars = current.exclude_calendars if isinstance(current, Job) else _raw_calendars(current)
        try:
            self.store.delete_job(
                tenant,
                job_id,
                current.version,
                current.trigger_rate,
                parents=parents,
                calendars=CalendarUses(drop=tuple(calendars)),
            )
        except VersionConflictError as exc:
            raise JobConflictError(f"job {job_id!r} changed meanwhile; read it and try again") from exc
        if self.peaks is not None and isinstance(current, Job):
            self.peaks.undo(tenant, add=job_profile(current))  # its slots are no longer due
        if isinstance(current, Job):
            self._forecast(current, None)

    def rotate_secret(
        self, tenant: str, job_id: str, drop_previous: bool = False, expected_version: int | None = None
    ) -> tuple[Job, str | None]:
        """Rotate an HTTP job's webhook signing secret; returns the job and the new secret (once).

        The previous secret keeps signing (both signatures are sent, as Standard Webhooks
        rotation expects) until the next rotation, or until ``drop_previous`` ends it (then no
        new secret is made). The version is not bumped: the schedule did not change, so no
        timer becomes stale.
        """
        current = self._current(tenant, job_id, expected_version)
        if not signs_webhooks(current) or self.secrets is None:
            raise InvalidJobError(
                "only jobs with an http target or http alerts have a signing secret", field="target"
            )
        now = self.clock.now()
        if drop_previous:
            job = current.model_copy(update={"signing_secret_prev_enc": None, "updated_at": now})
            self._write(job, current.version, [])
            return self.with_next_fire(job), None
        plain, stored = self.secrets.new_secret(tenant, job_id)
        job = current.model_copy(
            update={
                "signing_secret_enc": stored,
                "signing_secret_prev_enc": current.signing_secret_enc,
                "updated_at": now,
            }
        )
        self._write(job, current.version, [])
        return self.with_next_fire(job), plain

    def move_jobs(self, from_tenant: str, to_tenant: str) -> MoveReport:
        """Move every job of ``from_tenant`` to ``to_tenant``, keeping each job's id and spec.

        For the change of tenant identity (issue 16: principal ARN → unique id), run once per
        tenant by an operator. Each job is registered under the new tenant (its next slot
        computed afresh; a paused job stays paused) and only then deleted under the old one, so
        a crash half-way leaves a job in both places, never in neither, and running it again
        finishes the move. Webhook jobs get a new signing secret, bound to the new tenant
        (:attr:`MoveReport.secrets`, to hand to the tenant). A job that cannot be registered
        again (a completed one-time job, one with no future slot) stays where it is, with the
        reason in :attr:`MoveReport.kept`. History (executions) stays under the old identity.
        """
        report = MoveReport()
        pending = True
        while pending:  # again while progress is made: an after() child may precede its parent
            pending = False
            report.kept.clear()
            for job in self._all_jobs(from_tenant):
                if self.store.get_job(to_tenant, job.id) is None:
                    try:
                        _, secret = self.register(to_tenant, job.spec(), job.id)
                    except InvalidJobError as exc:
                        report.kept.append((job.id, str(exc)))
                        continue
                    if secret is not None:
                        report.secrets[job.id] = secret
                    if job.state is JobState.PAUSED:
                        self.pause(to_tenant, job.id, reason=job.state_reason)
                self.delete(from_tenant, job.id)
                report.moved.append(job.id)
                pending = True
        return report

    def _all_jobs(self, tenant: str) -> list[Job]:
        jobs: list[Job] = []
        cursor: str | None = None
        while True:
            page = self.store.list_jobs(tenant, 100, cursor)
            jobs.extend(page.items)
            if page.cursor is None:
                return jobs
            cursor = page.cursor

    def trigger(self, tenant: str, job_id: str, request_key: str | None = None) -> str:
        """Run the job now as an extra slot; the same ``request_key`` always names the same slot.

        Returns the slot key (``<instant>~<id>``), which is the execution's identity.
        """
        job = self.get(tenant, job_id)
        if job.state is JobState.DELETED:
            raise JobNotFoundError(f"job {job_id!r} not found")
        now = self.clock.now()
        # The API's idempotency layer answers a retried request with the first reply, so the
        # same request key always names the same slot; the key only feeds the slot's id here.
        token = hashlib.sha256((request_key or uuid.uuid4().hex).encode()).hexdigest()[:12]
        slot = f"{slot_key(now)}~m{token}"
        message = message_for(job, slot, now, 1, MessageKind.MANUAL, now)
        self.queues.send(self.routing.queue_for(job), [message])
        return slot

    # ------------------------------------------------------------------ helpers

    def _current(self, tenant: str, job_id: str, expected_version: int | None) -> Job:
        found = self._found(tenant, job_id, expected_version)
        if isinstance(found, UnreadableJob):
            raise UnreadableJobError(found)
        return found

    def _found(self, tenant: str, job_id: str, expected_version: int | None) -> Job | UnreadableJob:
        """The stored job, readable or not, at ``expected_version`` (when given)."""
        found: Job | UnreadableJob | None
        try:
            found = self.store.get_job(tenant, job_id)
        except UnreadableJobError as exc:
            found = exc.job
        if found is None:
            raise JobNotFoundError(f"job {job_id!r} not found")
        if expected_version is not None and found.version != expected_version:
            raise PreconditionFailedError(
                f"job {job_id!r} is at version {found.version}, not {expected_version}", found.version
            )
        return found

    def _write(
        self,
        job: Job,
        expected_version: int,
        timers: list[Timer],
        previous_trigger_rate: int | None = None,
        parents_added: tuple[str, ...] = (),
        parents_removed: tuple[str, ...] = (),
        calendars: CalendarUses = NO_CALENDAR_USES,
    ) -> None:
        try:
            self.store.replace_job(
                job,
                expected_version,
                timers,
                previous_trigger_rate=previous_trigger_rate,
                max_trigger_rate=self.max_trigger_rate,
                parents_added=parents_added,
                parents_removed=parents_removed,
                calendars=calendars,
            )
        except VersionConflictError as exc:
            if exc.current_version is None:
                raise JobNotFoundError(f"job {job.id!r} not found") from exc
            raise JobConflictError(f"job {job.id!r} changed meanwhile; read it and try again") from exc

    def _first_timer(self, job: Job, now: datetime, after: datetime) -> Timer | None:
        schedule = schedule_of(job)
        if schedule.kind == "after":
            return None
        slot = first_slot(job, now) if after >= now else next_slot(job, after)
        if slot is None:
            return None
        return fire_timer(self.layout, job, slot, now)

    def _count_peaks(
        self, tenant: str, job: Job, replaced: Job | UnreadableJob | None
    ) -> tuple[Profile | None, Profile | None]:
        """Move the tenant's peak profile by ``job``'s (less ``replaced``'s); 409 past a limit."""
        if self.peaks is None:
            return None, None
        added = job_profile(job)
        removed = job_profile(replaced) if isinstance(replaced, Job) else None
        self.peaks.change(tenant, add=added, remove=removed)
        return added, removed

    def _uncount_peaks(self, tenant: str, added: Profile | None, removed: Profile | None) -> None:
        """Take back :meth:`_count_peaks` when the job's own write failed."""
        if self.peaks is not None and added is not None:
            self.peaks.undo(tenant, add=added, remove=removed)

    def recount_peaks(self, tenant: str) -> Profile:
        """Rebuild ``tenant``'s peak profile from its jobs (after a crash between a profile's
        change and the job's write, or for jobs registered before peaks were counted)."""
        if self.peaks is None:
            return Profile()
        jobs: list[Job] = []
        cursor: str | None = None
        while True:
            page = self.store.list_jobs(tenant, 100, cursor)
            jobs.extend(page.items)
            cursor = page.cursor
            if cursor is None:
                break
        return self.peaks.recount(tenant, list(jobs))

    def _trigger_rate(self, tenant: str, spec: JobSpec) -> int:
        """Micro-triggers per minute the job adds to its tenant's total (:mod:`punctual.quotas`)."""

        def parent_rate(parent: str) -> int:
            found = self.store.get_job(tenant, parent)
            return found.trigger_rate if found else 0

        return micro_rate(schedule_of(spec), parent_rate)

    def _check_target(self, spec: JobSpec) -> None:
        """Refuse, before anything is stored, what the worker would refuse to call anyway: every
        ARN the job names (target, alert targets, dead-letter queue, events bus) under the tenant
        boundary (:mod:`punctual.boundary`), and every webhook URL under the SSRF guard."""
        refusal = self.boundary.first_refusal(spec)
        if refusal is not None:
            raise InvalidJobError(str(refusal), field=refusal.field)
        self._check_one_target(spec.target, "target")
        for index, rule in enumerate(spec.alerts):
            self._check_one_target(rule.target, f"alerts[{index}].target")
        target = spec.target
        if (
            isinstance(target, EventBridgeTarget)
            and spec.payload is not None
            and not isinstance(spec.payload, dict)
        ):
            raise InvalidJobError(
                "an eventbridge target's payload must be a JSON object (the event detail)", field="payload"
            )

    def _check_one_target(self, target: Target, where: str) -> None:
        if isinstance(target, HttpTarget):
            taken = [name for name in target.headers if name.lower() == TENANT_HEADER.lower()]
            if taken:
                raise InvalidJobError(
                    f"{where}.headers: header {taken[0]!r} is reserved: Punctual sets it on every request",
                    field=f"{where}.headers",
                )
            try:
                # No DNS here: literal addresses, every spelling of them, and localhost names.
                guard_url(target.url, self.allow_cidrs, resolve=False)
            except BlockedTargetError as exc:
                raise InvalidJobError(f"{where} url refused: {exc.reason}", field=f"{where}.url") from None

    def _check_dependencies(self, tenant: str, job_id: str, spec: JobSpec) -> tuple[str, ...]:
        parents = schedule_of(spec).parents
        if not parents:
            return ()
        for parent in parents:
            if parent == job_id:
                raise InvalidJobError("a job cannot depend on itself")
            if self.store.get_job(tenant, parent) is None:
                raise InvalidJobError(f"after(): parent job {parent!r} does not exist")

        def lookup(other: str) -> tuple[str, ...] | None:
            found = self.store.get_job(tenant, other)
            return schedule_of(found).parents if found else None

        cycle = find_cycle(job_id, parents, lookup)
        if cycle:
            raise InvalidJobError("dependency cycle: " + " -> ".join(cycle))
        return parents
